"""The ``ckks`` mode's key material and participant side: presets, keys, encoder, handles.

:class:`CkksKeys` is what the aggregator holds (public contexts, the key
authority's channels, its signing key: no secret key); :class:`CkksEncoder`
clips and encrypts a participant's matrix class-major. Importable from
:mod:`secure_fed.secure.modes.ckks`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np

from crypto.ckks import EncryptedMatrix, PublicContext, pack_class_major
from secure_fed.errors import (
    AggregationInvalid,
    ModeSetupInvalid,
)
from secure_fed.secure.mode import (
    AggregateHandle,
    UploadEncoder,
    UploadHandle,
)
from secure_fed.secure.modes.ckks_upload import encode_upload
from secure_fed.secure.server_auth import ServerSigningKey
from secure_fed.wire import KEY_AUTHORITY_REPLY, decode_array, decode_frame

__all__ = ["PRESET", "PUBLICATION_PRESET", "CkksEncoder", "CkksKeys"]

#: The key epoch's preset (N = 8192, 4096 slots; one ciphertext run is the moment sample).
PRESET = "CKKS_SCORING"
#: The publication epoch's preset (N = 4096, flooded at s >= 40 for 16,384 ciphertexts).
PUBLICATION_PRESET = "CKKS_PUBLICATION"

Channel = Callable[..., bytes]


def _public(public_context: object) -> PublicContext:
    if not isinstance(public_context, PublicContext):
        raise ModeSetupInvalid("public_context must be a crypto.ckks.PublicContext")
    return public_context


@dataclass(frozen=True, kw_only=True)
class CkksKeys:
    """What the ckks aggregator holds: the public context and the key-authority channel.

    Parameters
    ----------
    public_context
        The key epoch's public context (with relinearization and Galois keys).
    authority
        Bytes channel to :meth:`KeyAuthority.handle`.
    signer
        The aggregator's SM2 key; it signs every decryption request.
    plans
        Channel fixing a round's release plan with the key authority
        (:meth:`KeyAuthority.install_plan`; every plan is signed by ``signer``);
        ``None``: the authority has none.
    publication_context
        The publication epoch's public context: uploads must carry ciphertexts
        under it and the published weighted sum is computed on them. ``None``:
        the publication is computed on the scoring ciphertexts (weaker flooding).
    attest
        Channel to the verifier's attestation (:meth:`CkksVerifier.attest
        <secure_fed.secure.verifier.CkksVerifier.attest>`): every request is sent
        to it first and its attestation travels with the request to the key
        authority. ``None``: no verifier (the key authority enrols none).
    forward
        Channel forwarding each accepted upload's signed envelope to the verifier
        (:meth:`CkksVerifier.receive <secure_fed.secure.verifier.CkksVerifier.receive>`,
        ``forward(envelope, round_id)``); ``None`` with no verifier.
    """

    public_context: PublicContext
    authority: Channel
    signer: ServerSigningKey
    plans: Callable[[bytes], object] | None = None
    publication_context: PublicContext | None = None
    attest: Callable[[bytes], bytes] | None = None
    forward: Callable[[bytes, int], object] | None = None

    def __post_init__(self) -> None:
        _public(self.public_context)
        if self.publication_context is not None:
            _public(self.publication_context)
        if not callable(self.authority):
            raise ModeSetupInvalid("authority must be a bytes channel (KeyAuthority.handle)")
        if not isinstance(self.signer, ServerSigningKey):
            raise ModeSetupInvalid("signer must be the aggregator's ServerSigningKey")

    def __reduce__(self) -> NoReturn:
        raise TypeError("CkksKeys cannot be pickled")


class CkksEncoder(UploadEncoder):
    """Participant side: clip and encrypt class-major (no secret key involved).

    With ``publication_context`` the matrix is encrypted under both epochs and
    framed as one ``ckks_upload`` (:func:`encode_upload`).
    """

    def __init__(
        self,
        *,
        shape: tuple[int, int],
        bound: float,
        public_context: PublicContext,
        publication_context: PublicContext | None = None,
    ) -> None:
        self.shape, self.bound, self.public = shape, bound, _public(public_context)
        self.publication = None if publication_context is None else _public(publication_context)

    def encode(self, predictions: np.ndarray) -> bytes:
        """Return the serialized ciphertexts of the clipped ``[N_pub, C]`` matrix."""
        arr = np.asarray(predictions, dtype=np.float64)
        if arr.shape != tuple(self.shape):
            raise AggregationInvalid(f"predictions shape {arr.shape} differs from {self.shape}")
        clipped = np.clip(arr, -self.bound, self.bound)
        scoring = pack_class_major(self.public, clipped).to_bytes()
        if self.publication is None:
            return scoring
        publication = pack_class_major(self.publication, clipped).to_bytes()
        return encode_upload(scoring, publication, self.public, self.publication)


class _CkksUpload(UploadHandle):
    __slots__ = ("digest", "matrix", "publication")

    def __init__(
        self, matrix: EncryptedMatrix, digest: str, publication: EncryptedMatrix | None = None
    ) -> None:
        self.matrix, self.digest, self.publication = matrix, digest, publication


class _CkksAggregate(AggregateHandle):
    __slots__ = ("claim", "ids", "matrix", "max_weight", "witness")

    def __init__(
        self,
        matrix: EncryptedMatrix,
        ids: list[str],
        max_weight: float,
        claim: dict[str, Any],
        witness: EncryptedMatrix | None = None,
    ) -> None:
        self.matrix, self.ids, self.max_weight, self.claim = matrix, ids, max_weight, claim
        #: The same claim under the scoring epoch (two epochs only): what was scored.
        self.witness = witness


def _decrypt(keys: CkksKeys, request: bytes) -> np.ndarray:
    """Send ``request`` (attested first, with a verifier) and decode the released array."""
    if keys.attest is None:
        reply = keys.authority(request)
    else:
        reply = keys.authority(request, keys.attest(request))
    header, payload = decode_frame(reply, KEY_AUTHORITY_REPLY)
    return decode_array(header.get("array"), payload)
