"""The SM2 recommended curve (GB/T 32918.5-2017) and typed access to gmssl's curve math.

gmssl 3.2.2 has no type stubs and several sharp edges (docs/background.md): it
strips a leading ``"04"`` from hex public keys (which corrupts keys whose x
starts with 0 or 4), uses :mod:`random` for nonces, and its scalar
multiplication returns the input point for a zero scalar. This module only
uses its Jacobian scalar multiplication ``CryptSM2._kg``, always with a
128-hex ``x || y`` point (no prefix) and a scalar checked to lie in
``[1, n - 1]``; point validation and the final affine addition are done here.

Notes
-----
gmssl's double-and-add loop is not constant time: its running time depends on
the bits of the scalar (the signing nonce). See ``docs/crypto-sm.md``.
"""

from __future__ import annotations

from gmssl.sm2 import CryptSM2

__all__ = ["A", "B", "G", "N", "P", "Point", "add", "is_on_curve", "scalar_mult"]

Point = tuple[int, int]

P = 0xFFFFFFFEFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF00000000FFFFFFFFFFFFFFFF
A = 0xFFFFFFFEFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF00000000FFFFFFFFFFFFFFFC
B = 0x28E9FA9E9D9F5E344D5A9E4BCF6509A7F39789F515AB8F92DDBCBD414D940E93
N = 0xFFFFFFFEFFFFFFFFFFFFFFFFFFFFFFFF7203DF6B21C6052B53BBF40939D54123
G: Point = (
    0x32C4AE2C1F1981195F9904466A39C9948FE30BBFF2660BE1715A4589334C74C7,
    0xBC3736A2F4F6779C59BDCEE36B692153D0A9877CC62A474002DF32E52139F0A0,
)
COORD_BYTES = 32

# gmssl keeps the curve as hex strings; check they are the ones above.
_TABLE = {
    "n": f"{N:064X}",
    "p": f"{P:064X}",
    "g": f"{G[0]:064x}{G[1]:064x}",
    "a": f"{A:064X}",
    "b": f"{B:064X}",
}
# The engine never holds a key: both key slots stay empty, only _kg is used.
_ENGINE = CryptSM2(private_key="", public_key="", ecc_table=_TABLE)


def is_on_curve(point: Point) -> bool:
    """Return whether ``point`` is an affine point of the SM2 curve (not infinity)."""
    x, y = point
    if not (0 <= x < P and 0 <= y < P):
        return False
    return (y * y - (x * x * x + A * x + B)) % P == 0


def scalar_mult(k: int, point: Point) -> Point:
    """Return ``k * point`` using gmssl's Jacobian double-and-add.

    Parameters
    ----------
    k
        Scalar in ``[1, n - 1]`` (checked: gmssl mishandles zero).
    point
        A point already known to be on the curve (callers validate).

    Raises
    ------
    ValueError
        If ``k`` is out of range or gmssl returns no affine point.
    """
    if not 1 <= k < N:
        raise ValueError("scalar out of range [1, n-1]")
    hex_point = f"{point[0]:064x}{point[1]:064x}"
    result = _ENGINE._kg(k, hex_point)
    if not isinstance(result, str) or len(result) != 4 * COORD_BYTES:
        raise ValueError("scalar multiplication reached the point at infinity")
    return int(result[: 2 * COORD_BYTES], 16), int(result[2 * COORD_BYTES :], 16)


def add(p1: Point, p2: Point) -> Point | None:
    """Return the affine sum ``p1 + p2``, or ``None`` for the point at infinity."""
    x1, y1 = p1
    x2, y2 = p2
    if x1 == x2:
        if (y1 + y2) % P == 0:
            return None
        lam = (3 * x1 * x1 + A) * pow(2 * y1, -1, P) % P
    else:
        lam = (y2 - y1) * pow(x2 - x1, -1, P) % P
    x3 = (lam * lam - x1 - x2) % P
    y3 = (lam * (x1 - x3) - y1) % P
    return x3, y3
