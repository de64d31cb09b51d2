"""A participant who wraps another's captured payload in its own signed upload."""

from __future__ import annotations

import struct

from secure_fed.federation.envelope import seal_upload
from secure_fed.federation.messages import UploadHeader, decode_upload, encode_upload
from secure_fed.secure.audit import MemoryAuditSink
from secure_fed.secure.deployment import SecureDeployment
from secure_fed.wire import ENVELOPE, decode_frame
from tests.secure_fed.secure.helpers import Harness

N, C = 40, 4
IDS = ["a", "b", "c"]


def harness(mode: str, tmp_path) -> tuple[Harness, MemoryAuditSink]:  # type: ignore[no-untyped-def]
    """A round of ``mode`` over ``IDS``, open and collecting uploads for round 1."""
    sink = MemoryAuditSink()
    dep = SecureDeployment.create(
        mode=mode, shape=(N, C), participant_ids=IDS, min_participants=2, audit=sink
    )
    h = Harness(dep, tmp_path, ids=IDS, min_participants=2, audit=sink)
    h.engine.open(h.config(1))
    h.engine.start_collecting(1)
    return h, sink


def inner_upload(envelope: bytes) -> tuple[UploadHeader, bytes]:
    """The upload header and payload inside a sealed envelope."""
    _, body = decode_frame(envelope, ENVELOPE)
    (sig_len,) = struct.unpack(">H", body[:2])
    return decode_upload(body[2 + sig_len :], max_bytes=len(body))


def as_own(h: Harness, thief: str, payload: bytes, *, upload_id: str | None = None) -> bytes:
    """The thief's own upload header around ``payload``, sealed with the thief's own key."""
    header = h.upload_header(thief, payload)
    return seal_upload(encode_upload(header, payload), key=h.keys[thief], params=h.params)
