"""What the ServerApp and the ClientApp send each other, as Flower ``RecordDict`` contents.

Three message types, each a request from the ServerApp and one reply:

* ``query.secure_fed_hello`` -- empty; the reply names the node's participant
  id, its architecture and the SM3 of the public set it holds;
* ``train.secure_fed_round`` -- the federation settings, the participant's
  position in the plan and the :class:`~secure_fed.federation.stages.RoundConfig`
  (JSON); the reply carries the signed upload envelope (bytes), or a refusal
  code and reason when the participant sends no upload;
* ``evaluate.secure_fed_publication`` -- the publication (bytes); the reply
  acknowledges the distillation.

Byte payloads travel as one uint8 :class:`flwr.app.Array` (Flower cuts large
arrays into chunks, so a 13.4 MB CKKS upload passes); JSON travels as one
string in a :class:`flwr.app.ConfigRecord`. Nothing here interprets a payload.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

from secure_fed.errors import UploadMalformed

__all__ = [
    "HELLO",
    "PUBLICATION",
    "ROUND",
    "pack",
    "unpack_bytes",
    "unpack_json",
]

HELLO = "query.secure_fed_hello"
ROUND = "train.secure_fed_round"
PUBLICATION = "evaluate.secure_fed_publication"

_JSON, _BYTES = "json", "payload"


def pack(fields: dict[str, Any] | None = None, payload: bytes | None = None) -> RecordDict:
    """Return a ``RecordDict`` holding ``fields`` as JSON and ``payload`` as bytes."""
    content = RecordDict()
    content.config_records[_JSON] = ConfigRecord({"value": json.dumps(fields or {})})
    if payload is not None:
        array = Array.from_numpy_ndarray(np.frombuffer(payload, dtype=np.uint8))
        content.array_records[_BYTES] = ArrayRecord({"bytes": array})
    return content


def unpack_json(content: RecordDict) -> dict[str, Any]:
    """Return the JSON fields of a message.

    Raises
    ------
    UploadMalformed
        If the message has no JSON fields or they are not an object.
    """
    record = content.config_records.get(_JSON)
    raw = None if record is None else record.get("value")
    try:
        data = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise UploadMalformed("the Flower message carries no JSON object")
    return data


def unpack_bytes(content: RecordDict) -> bytes | None:
    """Return the byte payload of a message (None when it carries none)."""
    record = content.array_records.get(_BYTES)
    if record is None or "bytes" not in record:
        return None
    array = record["bytes"].numpy()
    if array.dtype != np.uint8 or array.ndim != 1:
        raise UploadMalformed("the Flower message payload is not a byte string")
    return array.tobytes()
