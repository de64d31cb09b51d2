"""The key ceremony of a deployment and the loaders each party runs on its own machine.

:func:`create_keys` is the ceremony for a try-out on one machine: it writes one
directory per party holding only what that party may hold (files 0600,
directories 0700) plus ``party.json``, the public manifest every party shares
(mode, shape, roster, quorum, epoch fingerprints, every SM2 public key)::

    root/aggregator/           aggregator.key.pem (SM2), scoring.context and
                               publication.context (ckks: public contexts only), or
                               enrolment.json, dealer-aggregator.secret,
                               channel.secret, request.secret (shares)
    root/keyauthority/         audit.key.pem; scoring.sealed, publication.sealed and
                               seal.key (ckks: the SM4-GCM-sealed secret keys), or
                               dealer-aggregator.secret, dealer-helper.secret (shares)
    root/helper/               audit.key.pem, enrolment.json, dealer-helper.secret,
                               channel.secret, request.secret (shares only)
    root/participants/<id>/    signing.key.pem; the public contexts (ckks) or
                               enrolment.json (its two enrolment secrets, shares);
                               node.key, node.pub (its SuperNode key pair, OpenSSH)
    root/superlink/nodes/      <id>.pub: every participant's SuperNode public key,
                               registered at the SuperLink (node authentication)
    root/api/                  audit.key.pem, receipts.key.pem
    root/verifier/             verifier.key.pem (SM2, its attestations), audit.key.pem, the
                               public contexts (ckks only; every manifest names its
                               public key, ``verifier_key``, which the key authority pins)
    root/tls/                  ca.pem, <service>.pem/.key, aggregator.pem/.key,
                               ca/ca.key (:func:`secure_fed.deploy.tls.create_local_ca`)

The aggregator never receives a CKKS secret key, a helper secret or the helper's
dealer key; a participant only public material and its own secrets. In production
each party generates its own SM2 key and only public keys and enrolment secrets
are exchanged (``docs/deploy.md``).

Public API (stable; the deployment helpers code against it)::

    create_keys(root, *, mode, participant_ids, shape, min_participants,
                publication_preset="CKKS_PUBLICATION", tls_hosts=("127.0.0.1", "localhost"),
                isolation=1, verifier=True, max_flagged=None)
    read_manifest(directory) -> KeyManifest
    load_aggregator(directory, *, authority: AuthorityChannels,
                    helper: Callable[[bytes], bytes] | None = None,
                    audit: AuditSink | None = None,
                    verifier: VerifierChannels | None = None) -> AggregatorKeys
        .mode .params .shape .min_participants .participant_ids .participant_keys
        .receipt_key .aggregator(*, bound, scoring=None) -> SecureAggregator
    load_participant(directory) -> ParticipantKeys
        .participant_id .signing_key .mode .params .shape .encoder(*, bound) -> UploadEncoder
    load_key_authority(directory, *, audit, state_dir) -> KeyAuthorityParty
        .authority (KeyAuthority) .decrypt .plan .deal .deal_range .deal_compare .channels()
        .public_context(role) -> bytes
    load_helper(directory, *, audit, state_dir) -> HelperParty
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn, cast

from crypto.shares.mac import MacKeyShare
from crypto.sm import SM2PrivateKey, SM2PublicKey
from secure_fed.deploy.authority import KeyAuthorityParty, load_key_authority
from secure_fed.deploy.ceremony import (
    DEALER_MASK,
    MAC_KEY_SHARE,
    MANIFEST,
    KeyManifest,
    pin_policy,
    read_json,
    read_mac,
    read_mac_lanes,
    read_manifest,
    read_secret,
    read_sm2,
    require_mode,
)
from secure_fed.deploy.ceremony import create_keys as create_keys
from secure_fed.deploy.errors import KeyDirectoryInvalid
from secure_fed.deploy.tls import private_dir
from secure_fed.deploy.transport import AuthorityChannels, VerifierChannels
from secure_fed.secure.audit import AuditSink
from secure_fed.secure.mode import SecureAggregator, UploadEncoder
from secure_fed.secure.parties.helper import HelperParty
from secure_fed.secure.parties.nonces import NonceStore
from secure_fed.secure.parties.registry import HelperRegistry
from secure_fed.secure.plan_journal import PlanJournal
from secure_fed.secure.scoring.mahalanobis import ScoringConfig
from secure_fed.secure.server_auth import ChannelKey, ServerSigningKey

__all__ = [
    "MANIFEST",
    "AggregatorKeys",
    "KeyAuthorityParty",
    "KeyManifest",
    "ParticipantKeys",
    "create_keys",
    "load_aggregator",
    "load_helper",
    "load_key_authority",
    "load_participant",
    "read_manifest",
]

_log = logging.getLogger(__name__)

SHARES_PARAMS = "Z2^64/f12"


def _context(directory: Path, role: str, preset: str, fingerprint: str) -> object:
    from crypto.ckks import PublicContext
    from crypto.errors import CryptoError

    try:
        return PublicContext.from_bytes(
            (directory / f"{role}.context").read_bytes(),
            preset=preset,
            expected_fingerprint=bytes.fromhex(fingerprint),
        )
    except (OSError, CryptoError, ValueError) as exc:
        raise KeyDirectoryInvalid(f"{role} context in {directory} refused: {exc}") from exc


@dataclass(frozen=True, eq=False)
class AggregatorKeys:
    """What the aggregator loads: the manifest, its SM2 key and its channels (never pickled)."""

    manifest: KeyManifest
    directory: Path
    authority: AuthorityChannels
    helper: Callable[[bytes], bytes] | None
    audit: AuditSink | None
    #: The verifier's channels (ckks: required when the manifest names a verifier).
    verifier: VerifierChannels | None = None

    @property
    def mode(self) -> str:
        """``"ckks"`` or ``"shares"``."""
        return self.manifest.mode

    @property
    def params(self) -> str:
        """Crypto parameters uploads declare in their signed envelope."""
        return self.manifest.params

    @property
    def shape(self) -> tuple[int, int]:
        """``(N_pub, C)`` of every upload."""
        return self.manifest.shape

    @property
    def min_participants(self) -> int:
        """The round quorum."""
        return self.manifest.min_participants

    @property
    def participant_ids(self) -> tuple[str, ...]:
        """The enrolled participants."""
        return self.manifest.participant_ids

    @property
    def participant_keys(self) -> dict[str, SM2PublicKey]:
        """SM2 public key of every participant (``crypto.sm.SM2PublicKey``)."""
        return dict(self.manifest.participant_keys)

    @property
    def receipt_key(self) -> SM2PublicKey | None:
        """SM2 public key of the ledger's budget receipts (``crypto.sm.SM2PublicKey``)."""
        return self.manifest.receipt_key

    def aggregator(self, *, bound: float, scoring: ScoringConfig | None = None) -> SecureAggregator:
        """Build the mode's aggregator over the configured channels.

        Raises
        ------
        KeyDirectoryInvalid
            A key file is missing or malformed.
        ModeSetupInvalid
            A channel the mode needs is missing.
        """
        signer = ServerSigningKey(name="aggregator", key=read_sm2(self.directory, "aggregator"))
        if self.mode == "ckks":
            return self._ckks(bound, scoring, signer)
        return self._shares(bound, scoring, signer)

    def _ckks(
        self, bound: float, scoring: ScoringConfig | None, signer: ServerSigningKey
    ) -> SecureAggregator:
        from secure_fed.secure.modes.ckks import PRESET, CkksAggregator, CkksKeys

        m, channels = self.manifest, self.authority
        if channels.decrypt is None:
            raise KeyDirectoryInvalid(
                "the ckks aggregator needs the key authority's decrypt channel"
            )
        public = _context(self.directory, "scoring", PRESET, m.fingerprints["scoring"])
        publication = None
        if m.publication_preset is not None:
            fp = m.fingerprints["publication"]
            publication = _context(self.directory, "publication", m.publication_preset, fp)
        verifier = self.verifier
        if m.verifier_key is not None and verifier is None:
            raise KeyDirectoryInvalid(
                "the key authority pins a verifier: the ckks aggregator needs its channels"
            )
        keys = CkksKeys(
            public_context=public,  # type: ignore[arg-type]
            authority=channels.decrypt,
            signer=signer,
            plans=channels.plan,
            publication_context=publication,  # type: ignore[arg-type]
            attest=None if verifier is None else verifier.attest,
            forward=None if verifier is None else verifier.forward,
        )
        return CkksAggregator(
            shape=m.shape,
            bound=bound,
            keys=keys,
            scoring=scoring,
            min_participants=m.min_participants,
        )

    def _shares(
        self, bound: float, scoring: ScoringConfig | None, signer: ServerSigningKey
    ) -> SecureAggregator:
        from secure_fed.secure.computation.share_range import RangeDealer
        from secure_fed.secure.modes.shares import Dealer, SharesAggregator, SharesKeys

        channels, d = self.authority, self.directory
        if self.helper is None or channels.deal is None:
            raise KeyDirectoryInvalid("the shares aggregator needs the helper and dealer channels")
        if channels.deal_masks is None:
            raise KeyDirectoryInvalid(
                "the shares aggregator needs the key authority's input-mask channel (deal_masks)"
            )
        enrolment = read_json(d / "enrolment.json")
        keys = SharesKeys(
            secrets={p: bytes.fromhex(str(s)) for p, s in enrolment.items()},
            helper=self.helper,
            dealer=cast("Dealer", channels.deal),
            range_dealer=cast("RangeDealer | None", channels.deal_range),
            compare_dealer=cast("RangeDealer | None", channels.deal_compare),
            dealer_key=read_mac(d, "dealer-aggregator"),
            channel_key=read_mac(d, "channel"),
            request_key=ChannelKey(name="aggregator", key=read_secret(d / "request.secret")),
            signing_key=signer,
            mac_key=_mac_share(d, party=0),
            mask_dealer=channels.deal_masks,
            audit=self.audit,
        )
        return SharesAggregator(
            shape=self.shape,
            bound=bound,
            keys=keys,
            scoring=scoring,
            min_participants=self.min_participants,
        )

    def __reduce__(self) -> NoReturn:
        raise TypeError("AggregatorKeys cannot be pickled")


def load_aggregator(
    directory: Path,
    *,
    authority: AuthorityChannels,
    helper: Callable[[bytes], bytes] | None = None,
    audit: AuditSink | None = None,
    verifier: VerifierChannels | None = None,
) -> AggregatorKeys:
    """Load the aggregator's directory; its key authority (helper, verifier) channels are given.

    In ckks mode with the ceremony's verifier (the manifest's ``verifier_key``) the
    aggregator forwards every accepted upload to ``verifier`` and sends each decryption
    request with its attestation; without ``verifier`` it cannot build its aggregator.

    Raises
    ------
    KeyDirectoryInvalid
        The directory is not an aggregator's, or its manifest is malformed.
    """
    directory = Path(directory)
    manifest = read_manifest(directory, role="aggregator")
    if not isinstance(authority, AuthorityChannels):
        raise KeyDirectoryInvalid("authority must be AuthorityChannels (remote_authority(...))")
    if manifest.mode == "shares" and helper is None:
        raise KeyDirectoryInvalid("the shares aggregator needs a helper channel")
    return AggregatorKeys(manifest, directory, authority, helper, audit, verifier)


@dataclass(frozen=True, eq=False)
class ParticipantKeys:
    """What a participant loads: the manifest, its id, its SM2 key, its encoder material."""

    manifest: KeyManifest
    directory: Path
    participant_id: str
    signing_key: SM2PrivateKey

    @property
    def mode(self) -> str:
        """``"ckks"`` or ``"shares"``."""
        return self.manifest.mode

    @property
    def params(self) -> str:
        """Crypto parameters its uploads declare."""
        return self.manifest.params

    @property
    def shape(self) -> tuple[int, int]:
        """``(N_pub, C)`` of every upload."""
        return self.manifest.shape

    def encoder(self, *, bound: float) -> UploadEncoder:
        """Build the participant's encoder (public contexts, or its enrolment secrets).

        Raises
        ------
        KeyDirectoryInvalid
            A key file is missing or malformed.
        """
        m = self.manifest
        if m.mode == "ckks":
            from secure_fed.secure.modes.ckks import PRESET, CkksEncoder

            public = _context(self.directory, "scoring", PRESET, m.fingerprints["scoring"])
            publication = None
            if m.publication_preset is not None:
                fp = m.fingerprints["publication"]
                publication = _context(self.directory, "publication", m.publication_preset, fp)
            return CkksEncoder(
                shape=m.shape,
                bound=bound,
                public_context=public,  # type: ignore[arg-type]
                publication_context=publication,  # type: ignore[arg-type]
            )
        from secure_fed.secure.modes.shares import SharesEncoder, SharesEnrolment

        own = read_json(self.directory / "enrolment.json")
        enrolment = SharesEnrolment(
            participant_id=self.participant_id,
            aggregator_secret=bytes.fromhex(str(own.get("aggregator_secret", ""))),
            helper_secret=bytes.fromhex(str(own.get("helper_secret", ""))),
            dealer_secret=_dealer_secret(self.directory, own),
        )
        return SharesEncoder(shape=m.shape, bound=bound, enrolment=enrolment)

    def __reduce__(self) -> NoReturn:
        raise TypeError("ParticipantKeys cannot be pickled")


def load_participant(directory: Path) -> ParticipantKeys:
    """Load a participant's directory (``root/participants/<id>``).

    Raises
    ------
    KeyDirectoryInvalid
        The directory is not a participant's, or a file is missing or malformed.
    """
    directory = Path(directory)
    manifest = read_manifest(directory, role="participant")
    pid = str(read_json(directory / MANIFEST).get("participant_id", ""))
    if pid not in manifest.participant_ids:
        raise KeyDirectoryInvalid(f"{directory} names no enrolled participant ({pid!r})")
    return ParticipantKeys(manifest, directory, pid, read_sm2(directory, "signing"))


def load_helper(directory: Path, *, audit: AuditSink | None, state_dir: Path) -> HelperParty:
    """Load the helper's directory; its triple registry, nonces and plans live in ``state_dir``.

    Raises
    ------
    KeyDirectoryInvalid
        The directory is not the helper's, or a key does not load.
    """
    directory = Path(directory)
    manifest = read_manifest(directory, role="helper")
    require_mode(manifest, "shares")
    state = private_dir(Path(state_dir))
    enrolment = read_json(directory / "enrolment.json")
    journal = PlanJournal(state / "helper-plans.db")
    pin = pin_policy(directory, manifest, party="helper", audit=audit, journal=journal)
    return HelperParty(
        shape=manifest.shape,
        min_participants=manifest.min_participants,
        secrets={p: bytes.fromhex(str(s)) for p, s in enrolment.items()},
        dealer_key=read_mac(directory, "dealer-helper"),
        channel_key=read_mac(directory, "channel"),
        audit=audit,
        registry=HelperRegistry(state / "helper-registry.db"),
        request_key=ChannelKey(name="aggregator", key=read_secret(directory / "request.secret")),
        nonces=NonceStore(state / "helper-nonces.db"),
        plan_journal=journal,
        consortium=pin,
        mac_key=_mac_share(directory, party=1),
        mask_secret=read_secret(directory / DEALER_MASK),
    )


def _mac_share(directory: Path, *, party: int) -> MacKeyShare:
    """Read a server's share of the MAC keys (``mac-key-share.secret``, the ceremony's)."""
    return MacKeyShare(party=party, lanes=read_mac_lanes(directory / MAC_KEY_SHARE))


def _dealer_secret(directory: Path, own: dict[str, object]) -> bytes:
    """Read the participant's dealer secret (its input masks) from its ``enrolment.json``."""
    try:
        secret = bytes.fromhex(str(own["dealer_secret"]))
    except (KeyError, ValueError) as exc:
        raise KeyDirectoryInvalid(
            f"{directory / 'enrolment.json'} holds no dealer secret (authenticated shares): "
            "run the key ceremony again"
        ) from exc
    return secret


def dump_manifest(manifest: KeyManifest) -> str:
    """Return the manifest as indented JSON (for ``secure-fed deploy keys --show``)."""
    return json.dumps(manifest.public_view(), indent=2, sort_keys=True)
