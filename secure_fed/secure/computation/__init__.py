"""The planned computations both sides of a secure mode run alike.

The aggregator's modes (:mod:`secure_fed.secure.modes`) and the gatekeepers
(:mod:`secure_fed.secure.parties`) each compute these from the release plan: the
range-check and comparison specs, the share arithmetic of the scoring openings, the
copies step's bit arithmetic, the evidence sums, the ckks moment matrices and the
planned distance requests. Neither side owns them, so both import them from here and
never each other's modules.
"""
