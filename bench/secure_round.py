"""Benchmark one secure round's server side: filtering + aggregation in each mode.

Prints one JSON document. Full run: K = 10 participants, 10,000 public samples,
10 classes (synthetic clipped logits, 3 label-flip attackers), in the plaintext
reference, ``ckks`` and ``shares`` modes, plus scaling over K = 5, 10, 20, 40 for
the secure modes. ``--quick`` uses 2,000 samples and K = 5, 10.

Measured per mode (all parties in this process; each party's time is taken
inside its byte handler):

* ``upload_bytes``: payload bytes of one participant's upload;
* ``encode_seconds``: participant-side encryption / sharing, per participant;
* ``load_seconds``: server-side validation of all K uploads;
* ``server_seconds``: filtering (robust pooled Mahalanobis, C-step) plus the
  weighted sum and its reveal, everything on the server side *including* the
  key authority and helper time, which are also reported on their own;
* ``ratio_to_plaintext`` of ``server_seconds``;
* ``evidence_seconds``: the release plan's evidence step on its own (one evidence
  scalar per participant over a 100-row labeled slice, through the aggregator's
  ``evidence`` and its gatekeeper), not included in ``server_seconds``, with the
  gatekeeper's share of it (``evidence_gatekeeper_seconds``) and its ratio to
  ``server_seconds`` (``evidence_share_of_server``).

With ``ckks`` among the modes the same round runs once more with verified release
(``ckks_verified``): the verifier enrolled with the key authority, every upload forwarded
to it in its participant-signed envelope, every decryption request recomputed and
attested before it is decrypted. Its ``verifier`` section gives the seconds the verifier
spent receiving the uploads and attesting the requests (``attest_seconds_in_server`` is
its share of ``server_seconds``), the number of attestations and the bytes forwarded to
it and exchanged for attestations; ``server_seconds_ratio_to_unverified`` compares the
two ckks rounds. ``--no-verified`` skips it.

The ``flooding`` section (ckks run) counts the ciphertexts the key authority
decrypted in the round (the ``t`` of the noise-flooding bound, per round), the
statistical security the default epoch's flooding keeps after one round and
after its sized count, and the effect on the round's outlier decisions of
flooding the scores with the noise ``s = 40`` would need (Gaussian noise on the
exact plaintext scores, decisions compared over ``FLOOD_TRIALS`` draws). The
ckks round runs with the publication epoch (the default: the published sum is
decrypted under ``CKKS_PUBLICATION``, counted on its own) and once more without
it (``ckks_without_publication_epoch``, the opt-out), for the cost ratio.

With ``shares`` among the modes and ``--macs both`` (the default) the shares round runs
with authenticated shares (MACs, the default deployment) and once more without
(``shares_without_macs``), and ``shares`` reports ``server_seconds_ratio_to_without_macs``
(and the same for ``load_seconds``, ``helper_seconds``); ``--macs on`` / ``off`` runs one.

Shares mode's ``load_seconds`` includes the range check every upload passes at load
(``crypto.shares.range_check``). The ``range_check`` section measures it on its own,
per participant at N x 10, in both circuit layouts: seconds of the dealer and of each
server (each party's own steps, messages passed as bytes), and the exact AND gates,
rounds (sequential server-to-server messages), dealer bytes and bytes each server sends.
"""

from __future__ import annotations

import argparse
import json
import platform
import secrets
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/crypto.py shadows crypto

from crypto.ckks import CKKS_PUBLICATION, get_preset
from crypto.shares import (
    RING_PREDICTIONS,
    RangeCheckParty,
    RangeSpec,
    ShareLabel,
    ShareMacKey,
    deal_range_check,
    range_cost,
    split,
)
from crypto.sm import SM2PrivateKey, sm3_digest
from secure_fed.federation.envelope import EnvelopeVerifier, seal_upload
from secure_fed.federation.messages import UploadHeader, encode_upload
from secure_fed.federation.schema import ModelSchema, OutputSpec, RoundSchema, SemVer
from secure_fed.secure.deployment import DeploymentPlan, SecureDeployment
from secure_fed.secure.inprocess.ckks import CkksDeployment
from secure_fed.secure.inprocess.shares import SharesDeployment
from secure_fed.secure.mode import SecureAggregator
from secure_fed.secure.modes.ckks import PRESET as CKKS_MODE_PRESET
from secure_fed.secure.modes.ckks import CkksAggregator
from secure_fed.secure.modes.shares import SharesAggregator
from secure_fed.secure.release_plan import ReleasePlan
from secure_fed.secure.scoring.evidence import EvidenceSlice
from secure_fed.secure.scoring.outlier import OutlierPolicy, excluded_ids

BOUND = 8.0
#: Rows of the labeled slice the evidence step is timed on (the demo's default).
EVIDENCE_ROWS = 100


def evidence_slice(n: int, c: int) -> EvidenceSlice:
    """A seeded labeled slice of ``EVIDENCE_ROWS`` public rows (labels are synthetic)."""
    rng = np.random.default_rng(5)
    rows = sorted(int(r) for r in rng.choice(n, size=EVIDENCE_ROWS, replace=False))
    return EvidenceSlice(
        rows=tuple(rows), labels=tuple(int(y) for y in rng.integers(0, c, size=EVIDENCE_ROWS))
    )


def population(k: int, n: int, c: int, *, attackers: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Synthetic clipped logits: shared signal, per-model deviation, label-flip attackers."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, c, size=n)
    signal = rng.normal(0.0, 1.0, size=(n, c))
    signal[np.arange(n), labels] += 4.0
    out = {}
    for j in range(k):
        pred = signal + rng.normal(0.0, 0.2, size=(1, c)) + rng.normal(0.0, 0.4, size=(n, c))
        if j >= k - attackers:
            pred = np.roll(pred, 1, axis=1)
        out[f"p{j:02d}"] = np.clip(pred, -BOUND, BOUND)
    return out


class _Timed:
    """Wrap a byte handler; add up the seconds spent inside it and the bytes in and out."""

    def __init__(self, fn: Callable[..., object]) -> None:
        self.fn, self.seconds, self.bytes, self.calls = fn, 0.0, 0, 0

    def __call__(self, *args: object, **kwargs: object) -> object:
        t = time.perf_counter()
        self.calls += 1
        self.bytes += sum(len(a) for a in args if isinstance(a, bytes))
        try:
            out = self.fn(*args, **kwargs)
            self.bytes += len(out) if isinstance(out, bytes) else 0
            return out
        finally:
            self.seconds += time.perf_counter() - t


def _envelopes(
    dep: SecureDeployment, payloads: dict[str, bytes], round_id: int
) -> tuple[dict[str, bytes], Callable[[bytes, int], tuple[str, bytes]]]:
    """Each payload in a participant-signed envelope, and the verifier's envelope check."""
    n, c = dep.shape
    output = OutputSpec(num_classes=c, bound=BOUND)
    contract = RoundSchema(major=1, output=output)
    model = ModelSchema(model_id="mlp", version=SemVer(1, 0, 0), output=output)
    keys = {p: SM2PrivateKey.generate() for p in payloads}
    out = {}
    for pid, payload in payloads.items():
        header = UploadHeader(
            round_id=round_id,
            participant_id=pid,
            mode=dep.mode,
            schema=model,
            schema_hash=contract.schema_hash(),
            num_samples=100,
            nonce=secrets.token_hex(16),
            payload_sm3=sm3_digest(payload).hex(),
        )
        out[pid] = seal_upload(encode_upload(header, payload), key=keys[pid], params=dep.params)
    gate = EnvelopeVerifier(
        keys={p: k.public_key for p, k in keys.items()},
        submit=lambda *_a, **_k: "",
        params=dep.params,
        max_bytes=1 << 30,
    )
    return out, gate.open


def _timed_aggregator(
    dep: SecureDeployment,
) -> tuple[SecureAggregator, _Timed | None, _Timed | None, _Timed | None]:
    """The deployment's aggregator, with its key-authority / helper channels timed."""
    n, c = dep.shape
    if isinstance(dep, CkksDeployment):
        keys = dep.server_keys()
        ka = _Timed(keys.authority)
        timed = replace(keys, authority=ka)
        if keys.attest is not None and keys.forward is not None:  # the verifier's channels
            timed = replace(timed, attest=_Timed(keys.attest), forward=_Timed(keys.forward))
        return CkksAggregator(shape=(n, c), bound=BOUND, keys=timed), ka, None, None
    if isinstance(dep, SharesDeployment):
        keys = dep.server_keys()
        helper, dealer = _Timed(keys.helper), _Timed(keys.dealer)
        timed = replace(keys, helper=helper, dealer=dealer)
        return SharesAggregator(shape=(n, c), bound=BOUND, keys=timed), None, helper, dealer
    return dep.aggregator(bound=BOUND), None, None, None


def run_mode(
    mode: str,
    preds: dict[str, np.ndarray],
    *,
    publication_preset: str | None = "CKKS_PUBLICATION",
    verified: bool = False,
    authenticated: bool = True,
) -> dict[str, object]:
    """Encode, load, filter and aggregate one round in ``mode``; return the figures.

    ``publication_preset=None``: ckks without the publication epoch (the weaker opt-out).
    ``verified``: ckks with the verifier enrolled (every upload forwarded in its signed
    envelope, every request recomputed and attested before the key authority decrypts);
    its seconds and bytes are reported on their own and included in ``server_seconds``.
    ``authenticated=False``: shares without MACs (the baseline of ``--macs both``).
    """
    ids = sorted(preds)
    n, c = next(iter(preds.values())).shape
    t = time.perf_counter()
    dep: SecureDeployment
    if mode == "shares" and not authenticated:
        bare = DeploymentPlan(
            shape=(n, c), participant_ids=tuple(ids), min_participants=max(2, len(ids) // 2)
        )
        dep = SharesDeployment.deploy(bare, authenticated=False)
    else:
        dep = SecureDeployment.create(
            mode=mode,
            shape=(n, c),
            participant_ids=ids,
            min_participants=max(2, len(ids) // 2),
            publication_preset=publication_preset,
            verified_release=verified,
        )
    setup = time.perf_counter() - t
    agg, ka, helper, dealer = _timed_aggregator(dep)
    encoders = {p: dep.encoder(p, bound=BOUND) for p in ids}
    t = time.perf_counter()
    payloads = {p: encoders[p].encode(preds[p]) for p in ids}
    encode = (time.perf_counter() - t) / len(ids)
    t = time.perf_counter()
    handles = {p: agg.load(payloads[p]) for p in ids}
    load = time.perf_counter() - t
    keys = getattr(agg, "keys", None)
    attest, forward = getattr(keys, "attest", None), getattr(keys, "forward", None)
    if verified:
        assert isinstance(dep, CkksDeployment) and isinstance(attest, _Timed)
        envelopes, opener = _envelopes(dep, payloads, 1)
        dep.link_upload_verifier(opener)
        for p in ids:  # the gate forwards each accepted upload as signed
            agg.forward_upload(envelopes[p], round_id=1)
    load_helper = helper.seconds if helper else 0.0
    piece = evidence_slice(n, c)
    quorum = max(2, len(ids) // 2)
    plan = ReleasePlan.for_round(
        round_id=1, min_participants=quorum, shape=(n, c), scoring=agg.scoring, evidence=piece
    )
    agg.begin_round(plan)
    t = time.perf_counter()
    scores = agg.score(handles, round_id=1).scores
    excluded = excluded_ids(OutlierPolicy(dof=c - 1).decide(scores, round_id=1))
    scoring = time.perf_counter() - t
    gate = [x for x in (ka, helper) if x is not None]
    gate_before = sum(x.seconds for x in gate)
    t = time.perf_counter()
    attest_before = attest.seconds if isinstance(attest, _Timed) else 0.0
    agg.evidence(handles, piece.mask((n, c)), round_id=1)
    evidence = time.perf_counter() - t
    evidence_gate = sum(x.seconds for x in gate) - gate_before
    attest_evidence = (attest.seconds if isinstance(attest, _Timed) else 0.0) - attest_before
    t = time.perf_counter()
    kept = {p: h for p, h in handles.items() if p not in excluded}
    agg.reveal(agg.weighted_sum(kept, {p: 1.0 / len(kept) for p in kept}), round_id=1)
    server = scoring + time.perf_counter() - t
    verifier: dict[str, object] | None = None
    if isinstance(attest, _Timed) and isinstance(forward, _Timed):
        verifier = {
            "receive_seconds": round(forward.seconds, 3),
            "attest_seconds": round(attest.seconds, 3),
            # the verifier's share of server_seconds (the evidence step is timed apart)
            "attest_seconds_in_server": round(attest.seconds - attest_evidence, 3),
            "attestations": attest.calls,
            "forwarded_bytes": forward.bytes,
            "attest_bytes": attest.bytes,
        }
    return {
        "mode": mode,
        "K": len(ids),
        "N": n,
        "C": c,
        "setup_seconds": round(setup, 3),
        "upload_bytes": len(payloads[ids[0]]),
        "encode_seconds": round(encode, 4),
        "load_seconds": round(load, 3),
        "server_seconds": round(server, 3),
        "evidence_seconds": round(evidence, 3),
        "evidence_gatekeeper_seconds": round(evidence_gate, 3),
        "evidence_share_of_server": round(evidence / server, 3) if server else None,
        "key_authority_seconds": round(
            (ka.seconds - evidence_gate if ka else 0.0) + (dealer.seconds if dealer else 0.0), 3
        ),
        "helper_seconds": round(
            (helper.seconds - load_helper - evidence_gate) if helper else 0.0, 3
        ),
        "excluded": sorted(excluded),
        "scores": {p: round(float(v), 4) for p, v in scores.items()},
        "ciphertexts_released": _released(dep),
        "publication_ciphertexts_released": _released(dep, "publication_keys"),
        "verified_release": verified,
        "verifier": verifier,
        "authenticated_shares": bool(getattr(keys, "mac_key", None) is not None),
    }


def _released(dep: SecureDeployment, epoch: str = "keys") -> int | None:
    """Ciphertexts the key authority decrypted so far under ``epoch`` (ckks), else ``None``.

    ``keys`` is the scoring epoch (with the publication epoch off, it also
    released the publication); ``publication_keys`` the publication epoch.
    """
    keys = getattr(getattr(dep, "authority", None), epoch, None)
    return int(keys.releases) if keys is not None else None


#: Draws of the score-flooding noise per sigma in :func:`score_flooding`.
FLOOD_TRIALS = 200


def score_flooding(
    ckks_run: dict[str, object], exact: dict[str, float], c: int
) -> dict[str, object]:
    """Security of the default epoch's flooding, and what s = 40 on scores would cost.

    ``exact`` are the plaintext-mode scores of the same uploads; the round's
    decisions under noise ``N(0, sigma^2)`` added to each score are compared with
    the noiseless ones (``FLOOD_TRIALS`` draws per sigma, numpy's generator: this
    is a measurement, not a release).
    """
    preset = get_preset(CKKS_MODE_PRESET)
    t_round = int(ckks_run["ciphertexts_released"] or 1)  # type: ignore[call-overload]
    released = ckks_run.get("publication_ciphertexts_released")
    t_publication = released if isinstance(released, int) and released > 0 else 1
    policy = OutlierPolicy(dof=c - 1)
    reference = excluded_ids(policy.decide(exact, round_id=1))
    rng = np.random.default_rng(7)
    # scores are flooded relative to max(|score|, 1) (crypto.ckks.decrypt_score);
    # sigma_rel is the relative noise s = 40 needs at t decryptions
    flips = {}
    for label, t in (("one_round", t_round), ("sized_count", preset.max_decryptions)):
        sigma_rel = preset.decryption_error_bound * 2.0**20 * float(np.sqrt(64 * t))
        changed = 0
        for _ in range(FLOOD_TRIALS):
            noisy = {
                p: max(0.0, v + sigma_rel * max(abs(v), 1.0) * float(rng.standard_normal()))
                for p, v in exact.items()
            }
            changed += excluded_ids(policy.decide(noisy, round_id=1)) != reference
        flips[label] = {
            "t": t,
            "relative_sigma_for_40_bits": sigma_rel,
            "decisions_changed_fraction": changed / FLOOD_TRIALS,
        }
    return {
        "preset": preset.name,
        "ciphertexts_per_round": t_round,
        "bits_after_one_round": round(preset.flood_bits(t_round), 2),
        "bits_at_sized_count": round(preset.guaranteed_bits, 2),
        "sized_count": preset.max_decryptions,
        "score_flooding_for_40_bits": flips,
        "publication_preset": {
            "name": CKKS_PUBLICATION.name,
            "ciphertexts_per_round": ckks_run.get("publication_ciphertexts_released"),
            "bits_after_one_round": round(CKKS_PUBLICATION.flood_bits(t_publication), 2),
            "bits_at_sized_count": round(CKKS_PUBLICATION.guaranteed_bits, 2),
            "sized_count": CKKS_PUBLICATION.max_decryptions,
        },
    }


def range_check_run(pred: np.ndarray, layout: str) -> dict[str, object]:
    """Dealer and both servers of one participant's range check, each party timed alone."""
    spec = RangeSpec.for_codec(RING_PREDICTIONS, layout=layout)
    values = RING_PREDICTIONS.encode(pred).reshape(-1)
    label = ShareLabel(round_id=1, participant_id="range-check", tensor=f"bench-{layout}")
    key = ShareMacKey.generate(recipient="channel")
    t = time.perf_counter()
    materials = deal_range_check(values.size, label=label, spec=spec)
    dealer = time.perf_counter() - t
    parties = [RangeCheckParty(material=m, channel_key=key) for m in materials]
    shares, seconds = split(values), [0.0, 0.0]
    sent: list[bytes | None] = []
    for i in (0, 1):
        t = time.perf_counter()
        sent.append(parties[i].start(shares[i]))
        seconds[i] += time.perf_counter() - t
    while sent[0] is not None and sent[1] is not None:
        received = [sent[1], sent[0]]
        for i in (0, 1):
            t = time.perf_counter()
            sent[i] = parties[i].advance(received[i])
            seconds[i] += time.perf_counter() - t
    cost = range_cost(values.size, spec=spec, label=label)
    return {
        "layout": layout,
        "values": int(values.size),
        "valid": parties[0].valid,
        "dealer_seconds": round(dealer, 3),
        "aggregator_seconds": round(seconds[0], 3),
        "helper_seconds": round(seconds[1], 3),
        "and_gates": cost.and_gates,
        "rounds": cost.rounds,
        "dealer_bytes": list(cost.dealer_bytes),
        "exchange_bytes_per_server": cost.exchange_bytes,
    }


def main() -> None:
    """Run the benchmark and print JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2,000 samples, K = 5 and 10")
    parser.add_argument(
        "--no-scaling", action="store_true", help="only the K = 10 round (no K sweep)"
    )
    parser.add_argument(
        "--modes",
        default="plaintext,ckks,shares",
        help="comma-separated modes of the K = 10 round (default all three; the ckks "
        "opt-out run and the flooding section need plaintext and ckks)",
    )
    parser.add_argument(
        "--no-range-check", action="store_true", help="skip the range-check section"
    )
    parser.add_argument(
        "--no-verified",
        action="store_true",
        help="skip the ckks round with verified release (the verifier's time and bytes)",
    )
    parser.add_argument(
        "--macs",
        choices=("both", "on", "off"),
        default="both",
        help="shares mode with MACs (on, the default deployment), without (off), or both in "
        "one run with the ratio (both)",
    )
    args = parser.parse_args()
    n = 2000 if args.quick else 10_000
    ks = (5, 10) if args.quick else (5, 10, 20, 40)
    preds = population(10, n, 10, attackers=3)
    modes = [m for m in args.modes.split(",") if m]
    main_runs = {
        m: run_mode(m, preds, authenticated=not (m == "shares" and args.macs == "off"))
        for m in modes
    }
    if "shares" in modes and args.macs == "both":  # the same round without MACs, one run
        main_runs["shares_without_macs"] = run_mode("shares", preds, authenticated=False)
        macs, bare = main_runs["shares"], main_runs["shares_without_macs"]
        for key in ("server_seconds", "load_seconds", "helper_seconds"):
            macs[f"{key}_ratio_to_without_macs"] = round(
                float(str(macs[key])) / (float(str(bare[key])) or 1e-9), 2
            )
    if "ckks" in modes and not args.no_verified:  # the same round, every release attested
        main_runs["ckks_verified"] = run_mode("ckks", preds, verified=True)
        plain, checked = main_runs["ckks"], main_runs["ckks_verified"]
        checked["server_seconds_ratio_to_unverified"] = round(
            float(str(checked["server_seconds"])) / (float(str(plain["server_seconds"])) or 1e-9),
            2,
        )
    full = {"plaintext", "ckks"} <= set(modes)
    if full:  # the same ckks round without the publication epoch (the opt-out), for the ratio
        main_runs["ckks_without_publication_epoch"] = run_mode(
            "ckks", preds, publication_preset=None
        )
    if "plaintext" in main_runs:
        base = float(main_runs["plaintext"]["server_seconds"]) or 1e-9
        for r in main_runs.values():
            r["ratio_to_plaintext"] = round(float(r["server_seconds"]) / base, 1)
    flooding = (
        score_flooding(
            main_runs["ckks"],
            main_runs["plaintext"]["scores"],  # type: ignore[arg-type]
            10,
        )
        if full
        else None
    )
    range_check = (
        None
        if args.no_range_check
        else [range_check_run(preds["p00"], lay) for lay in ("prefix", "ripple")]
    )
    scaling = {
        m: [run_mode(m, population(k, n, 10, attackers=k * 3 // 10)) for k in ks]
        for m in ("ckks", "shares")
        if not args.no_scaling
    }
    print(
        json.dumps(
            {
                "machine": {"python": platform.python_version(), "processor": platform.machine()},
                "quick": args.quick,
                "round": main_runs,
                "flooding": flooding,
                "range_check": range_check,
                "scaling": {
                    m: [
                        {
                            k: r[k]
                            for k in (
                                "K",
                                "server_seconds",
                                "key_authority_seconds",
                                "helper_seconds",
                                "load_seconds",
                            )
                        }
                        for r in runs
                    ]
                    for m, runs in scaling.items()
                },
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
