"""Typed errors of the ``secure_fed`` package, each with a stable code.

Add narrow subclasses at the end of this file; give each a heading
``### CODE`` in ``docs/audit/errors-secure-fed.md``.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = ["SecureFedError"]


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


# --- federation: schema registry, round engine, aggregation, attacks -------------------


class SchemaInvalid(SecureFedError):
    """A model schema, semantic version or output spec is malformed."""

    code: ClassVar[str] = "SCHEMA_INVALID"


class SchemaUnknown(SecureFedError):
    """An upload declares a model id or version the schema registry does not know."""

    code: ClassVar[str] = "SCHEMA_UNKNOWN"


class SchemaMajorMismatch(SchemaInvalid):
    """An upload's schema MAJOR version differs from the round's."""

    code: ClassVar[str] = "SCHEMA_MAJOR_MISMATCH"


class OutputSpecMismatch(SchemaInvalid):
    """An upload's output spec (classes, representation, bound) differs from the round's."""

    code: ClassVar[str] = "SCHEMA_OUTPUT_SPEC_MISMATCH"


class RoundConfigInvalid(SecureFedError):
    """A round configuration or engine parameter is invalid."""

    code: ClassVar[str] = "ROUND_CONFIG_INVALID"


class RoundOutOfOrder(SecureFedError):
    """A step or message arrived in a stage that does not allow it."""

    code: ClassVar[str] = "ROUND_OUT_OF_ORDER"


class RoundNotFound(SecureFedError):
    """A message names a round the aggregator never opened."""

    code: ClassVar[str] = "ROUND_NOT_FOUND"


class StaleRound(SecureFedError):
    """A message or config names a round older than the current one."""

    code: ClassVar[str] = "ROUND_STALE"


class UploadLate(SecureFedError):
    """An upload arrived after the round's deadline."""

    code: ClassVar[str] = "UPLOAD_LATE"


class TooFewParticipants(SecureFedError):
    """Fewer than ``min_participants`` uploads arrived; the round was aborted."""

    code: ClassVar[str] = "ROUND_TOO_FEW_PARTICIPANTS"


class UploadMalformed(SecureFedError):
    """Upload bytes fail size, framing, shape or range validation."""

    code: ClassVar[str] = "UPLOAD_MALFORMED"


class UploadReplayed(SecureFedError):
    """An upload reuses a nonce the aggregator has already seen."""

    code: ClassVar[str] = "UPLOAD_REPLAYED"


class UploadDuplicate(SecureFedError):
    """A participant uploads twice in the same round."""

    code: ClassVar[str] = "UPLOAD_DUPLICATE"


class UnknownMode(SecureFedError):
    """An aggregation mode name is not in the registry."""

    code: ClassVar[str] = "AGGREGATION_UNKNOWN_MODE"


class AggregationInvalid(SecureFedError):
    """Aggregation inputs are inconsistent (no uploads, bad weights, mixed handles)."""

    code: ClassVar[str] = "AGGREGATION_INVALID"


class UnknownAttack(SecureFedError):
    """An attack name is not in the attack registry."""

    code: ClassVar[str] = "ATTACK_UNKNOWN"


class AttackSpecInvalid(SecureFedError):
    """An ``--attack KIND:COUNT`` specification or attack parameter is malformed."""

    code: ClassVar[str] = "ATTACK_SPEC_INVALID"


class WeightingInvalid(SecureFedError):
    """Dynamic-weighting parameters or inputs are invalid."""

    code: ClassVar[str] = "WEIGHTING_INVALID"


class FederationConfigInvalid(SecureFedError):
    """A federation or demo configuration is invalid."""

    code: ClassVar[str] = "FEDERATION_CONFIG_INVALID"


# --- learning building blocks (models, data, dp, distill, budget) ---------


class LearningParameterInvalid(SecureFedError):
    """A learning argument (fraction, batch size, temperature, ...) is out of range."""

    code = "LEARNING_PARAMETER_INVALID"


class UnknownModel(SecureFedError):
    """A model name is not in the model registry; the message lists the registry."""

    code = "LEARNING_UNKNOWN_MODEL"


class ModelUnsupported(SecureFedError):
    """A module cannot be trained privately by Opacus (e.g. BatchNorm); layers are listed."""

    code = "LEARNING_MODEL_UNSUPPORTED"


class UnknownDataset(SecureFedError):
    """A dataset name is not in the dataset registry; the message lists the registry."""

    code = "LEARNING_UNKNOWN_DATASET"


class DatasetUnavailable(SecureFedError):
    """A registered dataset needs files that are not installed on this machine."""

    code = "LEARNING_DATASET_UNAVAILABLE"


class TabularDataInvalid(SecureFedError):
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


class SplitImpossible(SecureFedError):
    """A data split cannot satisfy its constraints (too few rows for the parts asked)."""

    code = "LEARNING_SPLIT_IMPOSSIBLE"


class PrivateTrainingFailed(SecureFedError):
    """DP-SGD could not run as planned (e.g. the Poisson plan differs from Opacus')."""

    code = "LEARNING_PRIVATE_TRAINING_FAILED"


class BudgetRefused(SecureFedError):
    """The in-memory budget gate refused a reservation; nothing was spent."""

    code = "LEARNING_BUDGET_REFUSED"


class ReservationUnknown(SecureFedError):
    """A reservation id is unknown or was already committed or aborted."""

    code = "LEARNING_RESERVATION_UNKNOWN"


class UploadParticipantUnknown(SecureFedError):
    """An upload names a participant the ledger has not registered."""

    code: ClassVar[str] = "UPLOAD_PARTICIPANT_UNKNOWN"


# --- secure aggregation: scoring, outlier policy, key authority, helper, envelope ------


class ScoringInvalid(SecureFedError):
    """Mahalanobis scoring inputs or parameters are invalid (shapes, degenerate covariance)."""

    code: ClassVar[str] = "SCORING_INVALID"


class OutlierConfigInvalid(SecureFedError):
    """An outlier-policy parameter or input score is invalid; the message names it."""

    code: ClassVar[str] = "OUTLIER_CONFIG_INVALID"


class KeyAuthorityConfigInvalid(SecureFedError):
    """A key-authority or central-DP parameter is invalid; the message names it."""

    code: ClassVar[str] = "KEY_AUTHORITY_CONFIG_INVALID"


class AuthorityRequestMalformed(SecureFedError):
    """A request to the key authority or the helper is not a valid frame for its kind."""

    code: ClassVar[str] = "AUTHORITY_REQUEST_MALFORMED"


class DecryptionRefused(SecureFedError):
    """The key authority refused to decrypt a value.

    It is neither an aggregate over enough participants nor a single scalar score.
    """

    code: ClassVar[str] = "KEY_AUTHORITY_DECRYPTION_REFUSED"


class OpeningRefused(SecureFedError):
    """The shares-mode helper refused to release its share of a value.

    It is neither an aggregate over enough participants nor a single scalar score.
    """

    code: ClassVar[str] = "SHARES_OPENING_REFUSED"


class ModeSetupInvalid(SecureFedError):
    """A secure mode lacks its key material or was wired with inconsistent parties."""

    code: ClassVar[str] = "MODE_SETUP_INVALID"


class UploadSignatureInvalid(SecureFedError):
    """An upload envelope's SM2 signature does not verify under the sender's registered key."""

    code: ClassVar[str] = "UPLOAD_SIGNATURE_INVALID"
