"""Typed errors of the ``secure_fed`` package, grouped into families.

Every error derives from :class:`SecureFedError` through exactly one family,
so a caller can catch what it can act on (``except UploadRejected``) without
listing siblings. Each class, family or concrete, has a stable ``code`` and a
``### CODE`` heading in ``docs/audit/errors-secure-fed.md``. Families are
never raised themselves; a new error goes under the family a caller would
catch it with (``tests/secure_fed/test_errors.py`` checks the shape).
``__all__`` lists the base and the families; import a concrete error by name.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "SecureFedError",
    "ConfigurationInvalid",
    "UploadRejected",
    "RoundStateError",
    "AggregationFailed",
    "ReleaseRefused",
    "DataError",
    "TrainingError",
    "BudgetError",
    "DeploymentFailed",
]


class SecureFedError(Exception):
    """Base of every error raised by the ``secure_fed`` package.

    Parameters
    ----------
    message
        Human-readable explanation naming what was wrong.
    """

    code: ClassVar[str] = "SECURE_FED_ERROR"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return f"[{self.code}] {self.message}"


# --- ConfigurationInvalid: the caller's own settings ----------------------------------


class ConfigurationInvalid(SecureFedError):
    """A setting, parameter or registry name chosen by the caller is invalid.

    Raised before any work: nothing was trained, uploaded, opened or spent.
    The message names the parameter; fix it and retry.
    """

    code = "CONFIGURATION_INVALID"


class RoundConfigInvalid(ConfigurationInvalid):
    """A round configuration or engine parameter is invalid."""

    code = "ROUND_CONFIG_INVALID"


class FederationConfigInvalid(ConfigurationInvalid):
    """A federation or demo configuration is invalid."""

    code = "FEDERATION_CONFIG_INVALID"


class SchemaInvalid(ConfigurationInvalid):
    """A model schema, semantic version or output spec is malformed."""

    code = "SCHEMA_INVALID"


class ModeSetupInvalid(ConfigurationInvalid):
    """A secure mode lacks its key material or was wired with inconsistent parties."""

    code = "MODE_SETUP_INVALID"


class PolicyInvalid(ConfigurationInvalid):
    """A consortium policy document is malformed, unsigned by a participant, or not newer.

    The message names the field, the participant whose signature is missing or wrong,
    or the pinned version.
    """

    code = "POLICY_INVALID"


class PlanOutsidePolicy(ModeSetupInvalid):
    """A round's release plan opens more than the consortium's signed policy allows.

    The gatekeeper refused to install it (audited as ``access.denied``, op ``plan``);
    nothing of the round is opened. The message names the bound.
    """

    code = "PLAN_OUTSIDE_POLICY"


class UnknownMode(ConfigurationInvalid):
    """An aggregation mode name is not in the registry."""

    code = "AGGREGATION_UNKNOWN_MODE"


class KeyAuthorityConfigInvalid(ConfigurationInvalid):
    """A key-authority or central-DP parameter is invalid; the message names it."""

    code = "KEY_AUTHORITY_CONFIG_INVALID"


class OutlierConfigInvalid(ConfigurationInvalid):
    """An outlier-policy parameter or input score is invalid; the message names it."""

    code = "OUTLIER_CONFIG_INVALID"


class WeightingInvalid(ConfigurationInvalid):
    """Dynamic-weighting parameters or inputs are invalid."""

    code = "WEIGHTING_INVALID"


class LearningParameterInvalid(ConfigurationInvalid):
    """A learning argument (fraction, batch size, temperature, ...) is out of range."""

    code = "LEARNING_PARAMETER_INVALID"


class UnknownModel(ConfigurationInvalid):
    """A model name is not in the model registry; the message lists the registry."""

    code = "LEARNING_UNKNOWN_MODEL"


class UnknownAttack(ConfigurationInvalid):
    """An attack name is not in the attack registry."""

    code = "ATTACK_UNKNOWN"


class AttackSpecInvalid(ConfigurationInvalid):
    """An ``--attack KIND:COUNT`` specification or attack parameter is malformed."""

    code = "ATTACK_SPEC_INVALID"


# --- UploadRejected: one participant's upload, refused before it is stored ------------


class UploadRejected(SecureFedError):
    """One upload was refused before it was stored.

    The round and every other upload are untouched; the sender may be faulty
    or hostile. The envelope gate records the concrete code in an
    ``upload.rejected`` audit event.
    """

    code = "UPLOAD_REJECTED"


class UploadMalformed(UploadRejected):
    """Upload bytes fail size, framing, shape or range validation."""

    code = "UPLOAD_MALFORMED"


class UploadSignatureInvalid(UploadRejected):
    """An upload envelope's SM2 signature does not verify under the sender's registered key."""

    code = "UPLOAD_SIGNATURE_INVALID"


class UploadParticipantUnknown(UploadRejected):
    """An upload names a participant the ledger has not registered."""

    code = "UPLOAD_PARTICIPANT_UNKNOWN"


class UploadLate(UploadRejected):
    """An upload arrived after the round's deadline."""

    code = "UPLOAD_LATE"


class UploadReplayed(UploadRejected):
    """An upload reuses a nonce the aggregator has already seen."""

    code = "UPLOAD_REPLAYED"


class UploadDuplicate(UploadRejected):
    """A participant uploads twice in the same round."""

    code = "UPLOAD_DUPLICATE"


class UploadOutOfRange(UploadRejected):
    """A shares-mode upload has a value outside the public bound (found by the range check)."""

    code = "UPLOAD_OUT_OF_RANGE"


class UploadBindingInvalid(UploadRejected):
    """A payload names another participant or upload id than its signed envelope."""

    code = "UPLOAD_BINDING_INVALID"


class UploadPayloadReused(UploadRejected):
    """A payload already accepted in the round is submitted again, under any sender."""

    code = "UPLOAD_PAYLOAD_REUSED"


class UploadPayloadStale(UploadRejected):
    """A payload that an earlier round accepted is submitted again, under any sender.

    Refused at submission, before the mode parses it; the round goes on with the
    others (and with the sender's fresh upload).
    """

    code = "UPLOAD_PAYLOAD_STALE"


class UploadReceiptMissing(UploadRejected):
    """An upload carries no budget receipt where the aggregator requires one."""

    code = "UPLOAD_RECEIPT_MISSING"


class UploadReceiptInvalid(UploadRejected):
    """An upload's budget receipt fails its signature, binding or freshness check."""

    code = "UPLOAD_RECEIPT_INVALID"


class UploadNoticeMalformed(UploadRejected):
    """A participant's signed upload notice is oversized, not canonical or lacks a field.

    The gatekeeper recorded nothing (``access.denied``, op ``notice``).
    """

    code = "UPLOAD_NOTICE_MALFORMED"


class UploadNoticeForged(UploadRejected):
    """An upload notice's signature does not verify under the named participant's key.

    An unknown participant fails the same way. The gatekeeper recorded nothing.
    """

    code = "UPLOAD_NOTICE_FORGED"


class UploadNoticeRound(UploadRejected):
    """An upload notice names a round with no plan, or one whose openings have begun.

    The gatekeeper recorded nothing; a participant whose notice is late should not upload.
    """

    code = "UPLOAD_NOTICE_ROUND"


class UploadNoticeDuplicate(UploadRejected):
    """A second upload notice for a participant and round; the first stays in force."""

    code = "UPLOAD_NOTICE_DUPLICATE"


class SchemaUnknown(UploadRejected):
    """An upload declares a model id or version the schema registry does not know."""

    code = "SCHEMA_UNKNOWN"


class SchemaMajorMismatch(UploadRejected):
    """An upload's schema MAJOR version differs from the round's."""

    code = "SCHEMA_MAJOR_MISMATCH"


class OutputSpecMismatch(UploadRejected):
    """An upload's output spec (classes, representation, bound) differs from the round's."""

    code = "SCHEMA_OUTPUT_SPEC_MISMATCH"


# --- RoundStateError: the message does not fit the round's state ----------------------


class RoundStateError(SecureFedError):
    """A step or message does not fit the state of its round.

    Wrong stage, a round never opened or already superseded, or too few
    uploads to go on. The stored round state stays consistent.
    """

    code = "ROUND_STATE_ERROR"


class RoundOutOfOrder(RoundStateError):
    """A step or message arrived in a stage that does not allow it."""

    code = "ROUND_OUT_OF_ORDER"


class RoundNotFound(RoundStateError):
    """A message names a round the aggregator never opened."""

    code = "ROUND_NOT_FOUND"


class StaleRound(RoundStateError):
    """A message or config names a round older than the current one."""

    code = "ROUND_STALE"


class TooFewParticipants(RoundStateError):
    """Fewer than ``min_participants`` uploads arrived; the round was aborted."""

    code = "ROUND_TOO_FEW_PARTICIPANTS"


# --- AggregationFailed: the servers cannot score or combine what they hold ------------


class AggregationFailed(SecureFedError):
    """The servers could not score or aggregate the uploads they hold.

    Inconsistent inputs (no uploads, bad weights, handles of another mode,
    mismatched shapes) or a degenerate covariance. Nothing was published.
    """

    code = "AGGREGATION_FAILED"


class AggregationInvalid(AggregationFailed):
    """Aggregation inputs are inconsistent (no uploads, bad weights, mixed handles)."""

    code = "AGGREGATION_INVALID"


class ScoringInvalid(AggregationFailed):
    """Mahalanobis scoring inputs or parameters are invalid (shapes, degenerate covariance)."""

    code = "SCORING_INVALID"


# --- ReleaseRefused: a gatekeeper released nothing ------------------------------------


class ReleaseRefused(SecureFedError):
    """The key authority or the shares-mode helper released nothing.

    The request was malformed, or it asked for a value outside the round's
    release plan (one participant's vector, an aggregate over too few).
    """

    code = "RELEASE_REFUSED"


class AuthorityRequestMalformed(ReleaseRefused):
    """A request to the key authority or the helper is not a valid frame for its kind."""

    code = "AUTHORITY_REQUEST_MALFORMED"


class DecryptionRefused(ReleaseRefused):
    """The key authority refused to decrypt a value.

    It is neither an aggregate over enough participants nor a single scalar score.
    """

    code = "KEY_AUTHORITY_DECRYPTION_REFUSED"


class OpeningRefused(ReleaseRefused):
    """The shares-mode helper refused to release its share of a value.

    It is neither an aggregate over enough participants nor a single scalar score.
    """

    code = "SHARES_OPENING_REFUSED"


class SharesOpeningForged(OpeningRefused):
    """An authenticated shares opening failed its MAC check: a server's share was offset.

    Raised by the party that detects it (the aggregator or the helper) before anything
    of the opening is released; the round aborts and the audit names the detecting
    party, the step and the peer whose share did not verify.
    """

    code = "SHARES_OPENING_FORGED"


class ServerRequestUnauthenticated(ReleaseRefused):
    """A server-to-server request is unsigned, signed by another key, or altered."""

    code = "SERVER_REQUEST_UNAUTHENTICATED"


class ServerRequestReplayed(ReleaseRefused):
    """A server-to-server request reuses a nonce, or names a round older than one served."""

    code = "SERVER_REQUEST_REPLAYED"


class KeyEpochExhausted(DecryptionRefused):
    """The key epoch has released its maximum number of decryptions; rotate the keys."""

    code = "KEY_AUTHORITY_EPOCH_EXHAUSTED"


class PublicationInconsistent(DecryptionRefused):
    """The publication is not the weighted sum of the scored values, or has no witness.

    With two key epochs the key authority releases a publication only when its
    scoring-epoch witness (the same weighted sum of the same uploads' scored parts)
    decrypts to the same values and every value is within the input bound. Nothing was
    released; the round's publication stays unopened.
    """

    code = "KEY_AUTHORITY_PUBLICATION_INCONSISTENT"


class ReleaseUnattested(DecryptionRefused):
    """The key authority refused a request its enrolled verifier did not attest.

    With a verifier enrolled (the ``ckks`` mode's default with a consortium), every
    decryption request needs the verifier's SM2 attestation that the ciphertext is the
    claim recomputed from the participants' signed uploads, for exactly that request and
    ciphertext. Nothing was decrypted.
    """

    code = "KEY_AUTHORITY_RELEASE_UNATTESTED"


class RosterOmitsNoticed(ReleaseRefused):
    """A scoring or publication roster leaves out a participant who sent an upload notice.

    The gatekeeper released nothing (``access.denied`` naming the participants); the
    round aborts rather than publishes without them.
    """

    code = "ROSTER_OMITS_NOTICED"


class UploadDiffersFromNotice(ReleaseRefused):
    """A request lists an upload whose SM3 differs from its participant's upload notice.

    The gatekeeper released nothing (``access.denied`` naming the participant).
    """

    code = "UPLOAD_DIFFERS_FROM_NOTICE"


class AttestationRefused(ReleaseRefused):
    """The verifier refused to attest a decryption request.

    The request is not signed by the enrolled aggregator, names an upload the verifier
    does not hold for the round, a centre whose bytes do not match its digest, or its
    ciphertext is not what its claim recomputes to from the verifier's uploads.
    """

    code = "VERIFIER_ATTESTATION_REFUSED"


class VerifierUploadRefused(ReleaseRefused):
    """The verifier refused a forwarded upload (signature, round, sender or a second upload).

    A release family error: nothing computed over an upload the verifier does not hold
    can be attested, so nothing over it is released.
    """

    code = "VERIFIER_UPLOAD_REFUSED"


# --- DataError: a participant's data cannot be loaded or split ------------------------


class DataError(SecureFedError):
    """A dataset cannot be found, loaded or split as asked; nothing was trained."""

    code = "LEARNING_DATA_ERROR"


class UnknownDataset(DataError):
    """A dataset name is not in the dataset registry; the message lists the registry."""

    code = "LEARNING_UNKNOWN_DATASET"


class DatasetUnavailable(DataError):
    """A registered dataset needs files that are not installed on this machine."""

    code = "LEARNING_DATASET_UNAVAILABLE"


class TabularDataInvalid(DataError):
    """A CSV/Parquet/torch dataset is unreadable, empty, lacks the label or is non-numeric."""

    code = "LEARNING_TABULAR_INVALID"


class LabelColumnMissing(TabularDataInvalid):
    """The named label column is absent; the message lists the columns present."""

    code = "LEARNING_LABEL_COLUMN_MISSING"


class EmptyData(TabularDataInvalid):
    """A data file or dataset holds no rows."""

    code = "LEARNING_EMPTY_DATA"


class NonNumericData(TabularDataInvalid):
    """Feature columns are not numeric, labels are not class labels, or values are missing."""

    code = "LEARNING_NON_NUMERIC_DATA"


class SingleClassData(TabularDataInvalid):
    """The labels of a table (or of all participants' tables together) hold one class only."""

    code = "LEARNING_SINGLE_CLASS"


class TooFewRows(TabularDataInvalid):
    """A table has too few rows for the public, test and private parts it must give."""

    code = "LEARNING_TOO_FEW_ROWS"


class TableColumnsMismatch(TabularDataInvalid):
    """Participants' tables do not have the same columns; the message names the difference."""

    code = "LEARNING_TABLE_COLUMNS_MISMATCH"


class SplitImpossible(DataError):
    """A data split cannot satisfy its constraints (too few rows for the parts asked)."""

    code = "LEARNING_SPLIT_IMPOSSIBLE"


# --- TrainingError: private training cannot run as planned ----------------------------


class TrainingError(SecureFedError):
    """Private training cannot run as planned; any reservation is aborted, nothing released."""

    code = "LEARNING_TRAINING_ERROR"


class ModelUnsupported(TrainingError):
    """A module cannot be trained privately by Opacus (e.g. BatchNorm); layers are listed."""

    code = "LEARNING_MODEL_UNSUPPORTED"


class PrivateTrainingFailed(TrainingError):
    """DP-SGD could not run as planned (e.g. the Poisson plan differs from Opacus')."""

    code = "LEARNING_PRIVATE_TRAINING_FAILED"


# --- BudgetError: the in-memory budget gate said no -----------------------------------


class DeploymentFailed(SecureFedError):
    """A process of a deployment (a party service, the SuperLink, a SuperNode) failed."""

    code = "DEPLOYMENT_FAILED"


class BudgetError(SecureFedError):
    """The in-memory budget gate refused a reservation; nothing was spent."""

    code = "LEARNING_BUDGET_ERROR"


class BudgetRefused(BudgetError):
    """The in-memory budget gate refused a reservation; nothing was spent."""

    code = "LEARNING_BUDGET_REFUSED"
