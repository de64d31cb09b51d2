"""``secure-fed ledger verify --recompute``: recompute every CKKS decryption from stored uploads.

The key authority logs each signed decryption request as a ``decryption.requested``
audit event (the aggregator's signed header, its signature and the SM3 of the
ciphertext). This module gathers what
:func:`secure_fed.secure.recompute.recompute_requests` needs from one ledger:

* the CKKS public context, from a file the operator passes, accepted only if its
  SM3 is the fingerprint of a ``key.generated`` (``kind: ckks``) event;
* the aggregator's SM2 public key, from the ``key.generated`` (``sm2-server``)
  event of the server named ``aggregator`` enrolled just before that key epoch
  (a deployment enrols its aggregator, then generates the epoch);
* the requests of that epoch: the key authority's ``decryption.requested``
  events naming it (``epoch``), or, for requests naming none, those after its
  ``key.generated`` event and before the next main CKKS epoch's (a publication
  epoch, ``role: publication``, is generated right after its scoring epoch; pass
  its public context to recompute the publications);
* the upload payloads, from the stored round state (``rounds`` table), whose
  round number is the requests' ``round_id``.

Everything is read-only. Imports are lazy (the command line's ``--help`` stays fast).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from api.cli.common import read_limited
from api.cli.errors import AuditLogEmpty, OptionInvalid, PublicContextMismatch

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from secure_fed.secure.recompute import Finding

__all__ = ["RecomputeReport", "recompute_ledger"]

_MAX_CONTEXT = 64 << 20


@dataclass(frozen=True)
class RecomputeReport:
    """How many signed requests were recomputed, and every mismatch."""

    requests: int
    findings: list[Finding]


def _entries(engine: Engine) -> list[tuple[str, dict[str, Any]]]:
    """``(event, fields)`` of every key and decryption-request entry, in log order."""
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    from privacy_ledger.audit import canonical
    from privacy_ledger.audit.models import AuditEntryRow

    wanted = ("key.generated", "decryption.requested")
    with Session(engine) as session:
        rows = session.scalars(
            select(AuditEntryRow.entry)
            .where(AuditEntryRow.event.in_(wanted))
            .order_by(AuditEntryRow.entry_index)
        ).all()
    return [(e["event"], dict(e["fields"])) for e in map(canonical.decode, rows)]


def _epoch(
    entries: list[tuple[str, dict[str, Any]]], fingerprint: str
) -> tuple[dict[str, Any], str | None, list[dict[str, Any]]]:
    """Return the epoch's key event, its aggregator key (DER hex) and its signed requests.

    A request naming its epoch (``epoch``, signed) belongs to that epoch; one
    without belongs to the latest CKKS epoch before it that is not a publication
    epoch (``role: publication``), as the key authority decrypts it under its main key.
    """
    aggregator: str | None = None
    key: dict[str, Any] | None = None
    latest: str | None = None
    requests: list[dict[str, Any]] = []
    for event, fields in entries:
        if event == "key.generated" and fields.get("kind") == "ckks":
            if fields.get("role") != "publication":
                latest = str(fields.get("fingerprint"))
            if key is None and fields.get("fingerprint") == fingerprint:
                key = fields
        elif event == "key.generated" and key is None:
            if fields.get("kind") == "sm2-server" and fields.get("server") == "aggregator":
                aggregator = str(fields.get("public_key"))
        elif key is not None and "signed_header" in fields:
            if fields.get("epoch", latest) == fingerprint:
                requests.append(fields)
    if key is None:
        raise PublicContextMismatch(
            f"no key.generated event of the audit log has fingerprint {fingerprint[:16]}..."
        )
    return key, aggregator, requests


def _uploads(
    engine: Engine, namespace: str | None
) -> tuple[dict[int, dict[str, bytes]], tuple[int, int] | None]:
    """Return the stored upload payloads by round number, and the uploads' ``(N, C)``."""
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    from privacy_ledger.models import RoundRow
    from secure_fed.federation.stages import RoundState

    out: dict[int, dict[str, bytes]] = {}
    seen: dict[int, str] = {}
    shape = None
    with Session(engine) as session:
        rows = session.execute(select(RoundRow.id, RoundRow.state)).all()
    for rid, raw in rows:
        space, _, number = str(rid).rpartition(":")
        if not number.isdigit() or (namespace is not None and space != namespace):
            continue
        if int(number) in seen:
            raise OptionInvalid(
                f"round {int(number)} is stored by {seen[int(number)]!r} and {space!r}: "
                "pass --namespace"
            )
        seen[int(number)] = space
        state = RoundState.from_dict(dict(raw))
        out[int(number)] = {p: u.payload for p, u in state.uploads.items()}
        shape = (state.config.num_public, state.config.schema.output.num_classes)
    return out, shape


def recompute_ledger(engine: Engine, context_file: Path, namespace: str | None) -> RecomputeReport:
    """Recompute every signed CKKS decryption request of the epoch ``context_file`` belongs to.

    Raises
    ------
    PublicContextMismatch
        The file is no CKKS public context announced in this audit log.
    AuditLogEmpty
        The epoch has requests but no enrolled aggregator key, or no stored round.
    """
    from crypto.ckks import PublicContext
    from crypto.errors import CryptoError
    from crypto.sm import SM2PublicKey, sm3_digest
    from secure_fed.secure.recompute import SignedRequestEvidence, recompute_requests

    data = read_limited(context_file, _MAX_CONTEXT, "public context")
    key, aggregator, requests = _epoch(_entries(engine), sm3_digest(data).hex())
    if not requests:
        return RecomputeReport(0, [])
    if aggregator is None:
        raise AuditLogEmpty("no aggregator key was enrolled (key.generated) before this epoch")
    try:
        public = PublicContext.from_bytes(
            data, preset=str(key["preset"]), expected_fingerprint=sm3_digest(data)
        )
    except CryptoError as exc:
        raise PublicContextMismatch(f"--public-context {context_file}: {exc}") from None
    uploads, shape = _uploads(engine, namespace)
    if shape is None:
        raise AuditLogEmpty("no round state is stored: the uploads cannot be recomputed")
    findings = recompute_requests(
        [SignedRequestEvidence.from_event(r) for r in requests],
        uploads=uploads,
        public=public,
        aggregator=SM2PublicKey.from_der(bytes.fromhex(aggregator)),
        shape=shape,
    )
    return RecomputeReport(len(requests), findings)
