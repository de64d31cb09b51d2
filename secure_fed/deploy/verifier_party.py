"""The verifier as a deployed party (ckks mode): its key directory, its byte endpoints.

The verifier (:class:`~secure_fed.secure.verifier.CkksVerifier`) is a party of its own,
on its own machine in production: it holds the participants' signed uploads, forwarded
by the aggregator as they were signed, and no secret key; it attests a decryption
request only when the request's ciphertext is its claim recomputed from those uploads.
The key ceremony (:func:`secure_fed.deploy.keys.create_keys`) writes its directory::

    root/verifier/   party.json (the public manifest: roster, participants' and the
                     aggregator's SM2 keys, epoch fingerprints), verifier.key.pem (its
                     SM2 attestation key), audit.key.pem, scoring.context and
                     publication.context (public contexts only)

and names ``verifier_key`` in every manifest: the key authority pins it.

:func:`load_verifier` builds the party; :class:`VerifierParty` serves its two byte
endpoints (``upload``: a :func:`~secure_fed.deploy.transport.pack_upload` body, reply
the sender's id; ``attest``: a signed decryption request, reply the attestation).
Forwarded uploads are checked with the same envelope verification the aggregator runs
(:meth:`EnvelopeVerifier.open <secure_fed.federation.envelope.EnvelopeVerifier.open>`)
over the participants' keys of the verifier's own manifest, so the aggregator cannot
forward an upload no participant signed.

The uploads live in memory (the newest two rounds): a verifier restarted mid-round
holds none of that round's uploads and attests nothing over them, so the round
aborts and nothing of it is released (fail closed).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from secure_fed.deploy.ceremony import KeyManifest, read_manifest, read_sm2, require_mode
from secure_fed.deploy.errors import KeyDirectoryInvalid
from secure_fed.deploy.keys import _context
from secure_fed.deploy.transport import VerifierChannels, unpack_upload
from secure_fed.errors import AuthorityRequestMalformed, SecureFedError, VerifierUploadRefused
from secure_fed.federation.aggregator_builder import MAX_UPLOAD_BYTES
from secure_fed.federation.envelope import EnvelopeVerifier
from secure_fed.secure.audit import AuditSink
from secure_fed.secure.protocol.vocabulary import AuditEvent, Party
from secure_fed.secure.server_auth import ServerIdentity, ServerSigningKey
from secure_fed.secure.verifier import CkksVerifier

__all__ = ["VERIFIER_NAME", "VerifierParty", "load_verifier"]

_log = logging.getLogger(__name__)

#: The verifier's server name (its attestations name it; the key authority enrols it so).
VERIFIER_NAME = "verifier"


def _no_submit(_upload: bytes, *, round_id: int) -> str:  # pragma: no cover - never called
    raise AssertionError("the verifier's envelope gate only opens envelopes")


@dataclass(eq=False)
class VerifierParty:
    """The verifier as loaded: the party and its bytes endpoints (never pickled)."""

    verifier: CkksVerifier
    manifest: KeyManifest
    directory: Path
    audit: AuditSink | None = None

    def upload(self, body: bytes) -> bytes:
        """Keep one forwarded upload (``pack_upload`` body); return its sender's id (UTF-8).

        Raises
        ------
        VerifierUploadRefused
            A body that is no round id and envelope, or an upload the verifier refuses
            (:meth:`CkksVerifier.receive`); each an ``access.denied`` event.
        """
        try:
            envelope, round_id = unpack_upload(body)
        except AuthorityRequestMalformed as exc:
            refused = VerifierUploadRefused(f"forwarded upload refused: {exc.message}")
            self._malformed(refused)
            raise refused from None
        return self.verifier.receive(envelope, round_id).encode("utf-8")

    def attest(self, request: bytes) -> bytes:
        """Attest a signed decryption request (:meth:`CkksVerifier.attest`)."""
        return self.verifier.attest(request)

    def channels(self) -> VerifierChannels:
        """Return in-process channels to this verifier (tests and one-machine runs)."""
        return VerifierChannels(forward=self.verifier.receive, attest=self.verifier.attest)

    def _malformed(self, exc: SecureFedError) -> None:
        _log.warning("verifier refused a forwarded upload: %s", exc)
        if self.audit is not None:
            self.audit.record(
                AuditEvent.ACCESS_DENIED,
                {"party": Party.VERIFIER, "op": "upload", "code": exc.code, "reason": str(exc)},
            )

    def __reduce__(self) -> NoReturn:
        raise TypeError("VerifierParty cannot be pickled")


def load_verifier(directory: Path, *, audit: AuditSink | None) -> VerifierParty:
    """Load the verifier's directory (``root/verifier``).

    Raises
    ------
    KeyDirectoryInvalid
        The directory is not the verifier's (or not ckks), a key or context does not
        load, or its own key is not the one the manifest names as ``verifier_key``.
    """
    from secure_fed.secure.modes.ckks import PRESET

    directory = Path(directory)
    manifest = read_manifest(directory, role="verifier")
    require_mode(manifest, "ckks")
    signer = ServerSigningKey(name=VERIFIER_NAME, key=read_sm2(directory, "verifier"))
    pinned = manifest.verifier_key
    if pinned is None or pinned.to_pem() != signer.identity.public_key.to_pem():
        raise KeyDirectoryInvalid(
            f"{directory}: verifier.key.pem is not the verifier key the manifest names"
        )
    public = _context(directory, "scoring", PRESET, manifest.fingerprints["scoring"])
    publication = None
    if manifest.publication_preset is not None:
        fp = manifest.fingerprints["publication"]
        publication = _context(directory, "publication", manifest.publication_preset, fp)
    verifier = CkksVerifier(
        signer=signer,
        aggregator=ServerIdentity("aggregator", manifest.aggregator_key),
        public_context=public,  # type: ignore[arg-type]
        publication_context=publication,  # type: ignore[arg-type]
        participant_ids=frozenset(manifest.participant_ids),
        shape=manifest.shape,
        audit=audit,
    )
    gate = EnvelopeVerifier(
        keys=dict(manifest.participant_keys),
        submit=_no_submit,
        params=manifest.params,
        max_bytes=MAX_UPLOAD_BYTES,
    )
    verifier.opener = gate.open
    return VerifierParty(verifier, manifest, directory, audit)
