"""The key authority as a deployed party: its byte endpoints, its state across restarts.

:func:`load_key_authority` builds the :class:`KeyAuthority` from its key directory
(the SM4-GCM-sealed CKKS secret keys, or the dealer MAC secrets in shares mode) and
its state directory, where it keeps what must survive a restart:

* the request nonces and the newest round served per channel
  (:class:`~secure_fed.secure.parties.nonces.NonceStore`), so a captured request
  replayed after a restart is refused;
* the count of ciphertexts each CKKS key epoch has released
  (``keyauthority-releases.json``), restored into the imported key handles
  (:func:`crypto.ckks.resume_release_count`), so an epoch never releases more than
  its preset's ``max_decryptions`` across restarts. The count is written after each
  decryption and before its reply leaves.

In ckks mode the manifest names the verifier's attestation key (``verifier_key``, made
at the key ceremony): the authority pins it, and every decryption request must then
carry the verifier's attestation of exactly that request, or nothing is decrypted
(``KEY_AUTHORITY_RELEASE_UNATTESTED``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from crypto.errors import CryptoError
from crypto.shares.mac import MAC_LANES, InputMaskDealer, MacKeyShare
from secure_fed.deploy.ceremony import (
    DEALER_MASK,
    INPUT_MASKS,
    MAC_KEY,
    KeyManifest,
    pin_policy,
    read_json,
    read_mac,
    read_mac_lanes,
    read_manifest,
    read_secret,
    require_mode,
)
from secure_fed.deploy.errors import KeyDirectoryInvalid
from secure_fed.deploy.tls import private_dir, write_private
from secure_fed.deploy.transport import AuthorityChannels, pack_pair
from secure_fed.errors import AuthorityRequestMalformed, KeyAuthorityConfigInvalid
from secure_fed.secure.audit import AuditSink
from secure_fed.secure.parties.key_authority import KeyAuthority
from secure_fed.secure.parties.nonces import NonceStore
from secure_fed.secure.plan_journal import PlanJournal
from secure_fed.secure.server_auth import ServerIdentity

__all__ = ["RELEASES_FILE", "CeremonyMaskDealer", "KeyAuthorityParty", "load_key_authority"]

RELEASES_FILE = "keyauthority-releases.json"


@dataclass(kw_only=True, repr=False)
class CeremonyMaskDealer(InputMaskDealer):
    """The dealer's input masks under the key ceremony's MAC keys (loaded, not generated).

    :class:`InputMaskDealer` generates fresh MAC keys; a deployed dealer uses the whole
    keys the ceremony wrote to ``mac-key.secret`` (the servers hold their shares of
    them from the same ceremony), so it hands out no key share. Never shown by
    ``repr``, never pickled.
    """

    mac_keys: tuple[int, ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        if len(self.mac_keys) != MAC_LANES or not all(0 <= a < 1 << 64 for a in self.mac_keys):
            raise KeyDirectoryInvalid(f"the MAC keys are {MAC_LANES} elements of Z_2^64")
        self._alpha = np.array(self.mac_keys, dtype=np.uint64)

    def key_share(self, party: int) -> MacKeyShare:
        """Refused: each server loads its share from its own key directory."""
        raise KeyDirectoryInvalid("a deployed dealer hands out no MAC key share")


@dataclass(eq=False)
class KeyAuthorityParty:
    """The key authority as loaded: the party and its bytes endpoints (MAC keys bound).

    ``decrypt`` and ``plan`` serve the ckks mode; ``deal``, ``deal_range`` and
    ``deal_compare`` (two blobs each, :func:`~secure_fed.deploy.transport.pack_pair`
    for HTTP) the shares mode.
    """

    authority: KeyAuthority
    manifest: KeyManifest
    directory: Path
    state_dir: Path
    _macs: tuple[object, object] | None = None
    #: The input masks' dealer (shares mode, authenticated shares).
    _masks: InputMaskDealer | None = field(default=None, repr=False)

    def decrypt(self, request: bytes, attestation: bytes | None = None) -> bytes:
        """Serve a signed decryption request (:meth:`KeyAuthority.handle`).

        With the ceremony's verifier pinned (the manifest's ``verifier_key``),
        ``attestation`` must be its attestation of exactly this request. The epochs'
        release counts are persisted before the reply is returned.
        """
        try:
            return self.authority.handle(request, attestation)
        finally:
            self._save_releases()

    def plan(self, request: bytes) -> bytes:
        """Fix a round's release plan (:meth:`KeyAuthority.install_plan`)."""
        return self.authority.install_plan(request)

    def deal(self, request: bytes) -> tuple[bytes, bytes]:
        """Deal Beaver triples for a signed request (shares mode)."""
        agg, helper = self._keys()
        return self.authority.handle_deal(request, key_aggregator=agg, key_helper=helper)  # type: ignore[arg-type]

    def deal_range(self, request: bytes) -> tuple[bytes, bytes]:
        """Deal one upload's range-check material for a signed request (shares mode)."""
        agg, helper = self._keys()
        return self.authority.handle_deal_range(request, key_aggregator=agg, key_helper=helper)  # type: ignore[arg-type]

    def deal_compare(self, request: bytes) -> tuple[bytes, bytes]:
        """Deal the copies step's comparison material for a signed request (shares mode)."""
        agg, helper = self._keys()
        return self.authority.handle_deal_compare(request, key_aggregator=agg, key_helper=helper)  # type: ignore[arg-type]

    def deal_masks(self, request: bytes) -> bytes:
        """Deal the aggregator's share of one upload's input mask and its MACs (signed request).

        Raises
        ------
        AuthorityRequestMalformed
            In ckks mode (no masks are dealt); otherwise as
            :meth:`~secure_fed.secure.parties.dealer.Dealer.handle_deal_masks`.
        """
        agg, _ = self._keys()
        if self._masks is None:
            raise AuthorityRequestMalformed("this key authority deals no input masks")
        return self.authority.handle_deal_masks(request, masks=self._masks, key_aggregator=agg)  # type: ignore[arg-type]

    def deal_packed(self, request: bytes) -> bytes:
        """Return :meth:`deal`'s two blobs as one body (the HTTP route's reply)."""
        return pack_pair(*self.deal(request))

    def deal_range_packed(self, request: bytes) -> bytes:
        """Return :meth:`deal_range`'s two blobs as one body."""
        return pack_pair(*self.deal_range(request))

    def deal_compare_packed(self, request: bytes) -> bytes:
        """Return :meth:`deal_compare`'s two blobs as one body."""
        return pack_pair(*self.deal_compare(request))

    def _keys(self) -> tuple[object, object]:
        if self._macs is None:
            raise AuthorityRequestMalformed("this key authority deals no triples (ckks mode)")
        return self._macs

    def public_context(self, role: str) -> bytes:
        """Return the serialized public context of epoch ``role`` (scoring or publication).

        Raises
        ------
        KeyDirectoryInvalid
            If the authority holds no such epoch.
        """
        try:
            if role == "scoring":
                return self.authority.public_context
            if role == "publication":
                return self.authority.publication_context
        except KeyAuthorityConfigInvalid as exc:
            raise KeyDirectoryInvalid(str(exc)) from exc
        raise KeyDirectoryInvalid(f"epoch role must be 'scoring' or 'publication', got {role!r}")

    def channels(self) -> AuthorityChannels:
        """Return in-process channels to this authority (tests and one-machine runs)."""
        return AuthorityChannels(
            decrypt=self.decrypt,
            plan=self.plan,
            deal=self.deal,
            deal_range=self.deal_range,
            deal_compare=self.deal_compare,
            deal_masks=None if self._masks is None else self.deal_masks,
        )

    def releases(self) -> dict[str, int]:
        """Return ciphertexts released so far per epoch fingerprint (hex)."""
        epochs = (self.authority.keys, self.authority.publication_keys)
        return {k.fingerprint.hex(): k.releases for k in epochs if k is not None}

    def _save_releases(self) -> None:
        counts = self.releases()
        if counts:
            path = self.state_dir / RELEASES_FILE
            write_private(path.with_suffix(".tmp"), json.dumps(counts, sort_keys=True).encode())
            os.replace(path.with_suffix(".tmp"), path)


def _sealed(directory: Path, role: str, released: dict[str, int]) -> object:
    from crypto.ckks import import_secret_key_encrypted, resume_release_count

    try:
        blob = (directory / f"{role}.sealed").read_bytes()
        keys = import_secret_key_encrypted(blob, key=read_secret(directory / "seal.key", size=16))
        resume_release_count(keys, int(released.get(keys.fingerprint.hex(), 0)))
    except (OSError, CryptoError, ValueError) as exc:
        raise KeyDirectoryInvalid(f"{role} secret key in {directory} refused: {exc}") from exc
    return keys


def _released(state: Path) -> dict[str, int]:
    path = state / RELEASES_FILE
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise KeyDirectoryInvalid(f"release counts {path} cannot be read: {exc}") from exc
    if not isinstance(data, dict) or not all(isinstance(v, int) for v in data.values()):
        raise KeyDirectoryInvalid(f"release counts {path} are malformed")
    return {str(k): int(v) for k, v in data.items()}


def load_key_authority(
    directory: Path, *, audit: AuditSink | None, state_dir: Path
) -> KeyAuthorityParty:
    """Load the key authority's directory; nonces, release counts and plans live in ``state_dir``.

    Raises
    ------
    KeyDirectoryInvalid
        The directory is not the key authority's, a key does not load, or the
        persisted release counts are unreadable.
    """
    directory, state = Path(directory), private_dir(Path(state_dir))
    manifest = read_manifest(directory, role="keyauthority")
    journal = PlanJournal(state / "keyauthority-plans.db")
    pin = pin_policy(directory, manifest, party="key_authority", audit=audit, journal=journal)
    common = {
        "min_participants": manifest.min_participants,
        "audit": audit,
        "aggregator": ServerIdentity("aggregator", manifest.aggregator_key),
        "nonces": NonceStore(state / "keyauthority-nonces.db"),
        "plan_journal": journal,
        "consortium": pin,
        "enrolled": frozenset(manifest.participant_ids),
        "upload_shape": manifest.shape,
        # the ceremony's verifier, pinned: nothing is decrypted without its attestation
        "verifier": None
        if manifest.verifier_key is None
        else ServerIdentity("verifier", manifest.verifier_key),
    }
    if manifest.mode == "ckks":
        released = _released(state)
        scoring = _sealed(directory, "scoring", released)
        publication = None
        if manifest.publication_preset is not None:
            publication = _sealed(directory, "publication", released)
        authority = KeyAuthority(keys=scoring, publication_keys=publication, **common)  # type: ignore[arg-type]
        return KeyAuthorityParty(authority, manifest, directory, state)
    require_mode(manifest, "shares")
    authority = KeyAuthority(**common)  # type: ignore[arg-type]
    macs = (read_mac(directory, "dealer-aggregator"), read_mac(directory, "dealer-helper"))
    return KeyAuthorityParty(authority, manifest, directory, state, macs, _mask_dealer(directory))


def _mask_dealer(directory: Path) -> CeremonyMaskDealer:
    """Build the input masks' dealer from the ceremony's whole MAC keys and mask secrets."""
    enrolled = read_json(directory / INPUT_MASKS)
    try:
        participants = {str(p): bytes.fromhex(str(s)) for p, s in enrolled.items()}
    except ValueError as exc:
        raise KeyDirectoryInvalid(f"{directory / INPUT_MASKS} is malformed: {exc}") from exc
    return CeremonyMaskDealer(
        participants=participants,
        helper_secret=read_secret(directory / DEALER_MASK),
        mac_keys=read_mac_lanes(directory / MAC_KEY),
    )
