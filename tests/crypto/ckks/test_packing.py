from __future__ import annotations

import numpy as np
import pytest

from crypto.ckks import KeyAuthorityKeys, Layout, _tenseal, pack_class_major
from crypto.ckks.keys import _private_context
from crypto.ckks.packing import unpack_class_major
from crypto.errors import ParameterInvalid


def test_layout_arithmetic() -> None:
    layout = Layout(n_samples=5000, n_classes=3, slots=2048)
    assert layout.chunks == 3 and layout.count == 9
    assert layout.run(0) == (0, 2048) and layout.run(2) == (4096, 5000)
    assert layout.index(2, 1) == 7
    with pytest.raises(ParameterInvalid, match="n_classes must be an integer"):
        Layout(n_samples=10, n_classes=0, slots=2048)


def test_unpack_inverts_class_major_order() -> None:
    layout = Layout(n_samples=5, n_classes=2, slots=2)
    matrix = np.arange(10, dtype=np.float64).reshape(5, 2)
    runs = [matrix[s:e, c] for c in range(2) for s, e in map(layout.run, range(layout.chunks))]
    assert np.array_equal(unpack_class_major(layout, runs), matrix)


def test_each_ciphertext_holds_one_class_run(
    agg_keys: KeyAuthorityKeys, rng: np.random.Generator
) -> None:
    matrix = rng.uniform(-8, 8, size=(2100, 3))
    upload = pack_class_major(agg_keys.public_context, matrix)
    layout = upload.layout
    assert (layout.chunks, len(upload.vectors)) == (2, 6)
    ctx = _private_context(agg_keys)
    runs = [_tenseal.decrypt_vector(ctx, v) for v in upload.vectors]
    assert runs[layout.index(1, 1)].shape == (2100 - 2048,)
    assert np.allclose(runs[layout.index(2, 0)], matrix[:2048, 2], atol=1e-5)
    back = unpack_class_major(layout, runs)
    assert np.abs(back - matrix).max() < 1e-5


@pytest.mark.parametrize(
    ("matrix", "fragment"),
    [
        (np.zeros(5), "non-empty 2-D"),
        (np.zeros((0, 3)), "non-empty 2-D"),
        (np.array([[np.nan, 1.0]]), "NaN or infinite"),
        (np.array([[9.0, 1.0]]), r"values must lie in \[-8.0, 8.0\]"),
        ([["a", "b"]], "numeric"),
    ],
)
def test_bad_matrices_refused(agg_keys: KeyAuthorityKeys, matrix: object, fragment: str) -> None:
    with pytest.raises(ParameterInvalid, match=fragment):
        pack_class_major(agg_keys.public_context, matrix)


def test_matrix_metadata_is_validated(agg_keys: KeyAuthorityKeys) -> None:
    from crypto.ckks import EncryptedMatrix

    up = pack_class_major(agg_keys.public_context, np.zeros((3, 1)))
    common = {"preset": up.preset, "fingerprint": up.fingerprint, "layout": up.layout}
    with pytest.raises(ParameterInvalid, match="contributors must be in"):
        EncryptedMatrix(kind="aggregate", vectors=up.vectors, contributors=70000, **common)
    with pytest.raises(ParameterInvalid, match="kind must be one of"):
        EncryptedMatrix(kind="raw", vectors=up.vectors, **common)  # type: ignore[arg-type]
    with pytest.raises(ParameterInvalid, match="must hold 1 ciphertexts, got 0"):
        EncryptedMatrix(kind="upload", vectors=[], **common)
    assert "upload" in repr(up) and "3x1" in repr(up)
