import gzip
import hashlib
import shutil

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from secure_fed.errors import (
    DatasetUnavailable,
    LearningParameterInvalid,
    SplitImpossible,
    UnknownDataset,
)
from secure_fed.learning.data import (
    DATASET_REGISTRY,
    dirichlet_split,
    load_task,
    read_idx,
)


def _hashes(x):
    return {hashlib.sha256(np.ascontiguousarray(row).tobytes()).hexdigest() for row in x}


@pytest.mark.parametrize(
    ("name", "shape", "classes", "rows"),
    [("digits", (1, 8, 8), 10, 1797), ("breast_cancer", (30,), 2, 569)],
)
def test_split_is_disjoint_and_complete(name, shape, classes, rows):
    task = load_task(name, seed=4, public_fraction=0.2, test_fraction=0.25)
    assert task.input_shape == shape and task.num_classes == classes
    assert task.public_x.dtype == np.float32 and task.private_y.dtype == np.int64
    pub, priv, test = _hashes(task.public_x), _hashes(task.private_x), _hashes(task.test_x)
    assert not pub & priv and not pub & test and not priv & test
    assert len(pub) + len(priv) + len(test) == rows
    assert len(task.public_x) == round(rows * 0.2) and len(task.test_x) == round(rows * 0.25)
    assert set(np.unique(task.test_y)) <= set(range(classes))


def test_split_depends_on_seed_only():
    a, b, c = load_task("digits", seed=1), load_task("digits", seed=1), load_task("digits", seed=2)
    assert np.array_equal(a.public_x, b.public_x)
    assert not np.array_equal(a.public_x, c.public_x)


def test_breast_cancer_standardised_with_public_statistics():
    task = load_task("breast_cancer", seed=0)
    assert np.allclose(task.public_x.mean(axis=0), 0, atol=1e-5)
    assert np.allclose(task.public_x.std(axis=0), 1, atol=1e-4)


def test_digits_scaled_to_unit_range():
    task = load_task("digits", seed=0)
    assert task.private_x.min() >= 0 and task.private_x.max() <= 1


def test_unknown_dataset_lists_registry():
    with pytest.raises(UnknownDataset, match="bank_imbalanced, breast_cancer, cohort_") as e:
        load_task("cifar", seed=0)
    assert e.value.code == "LEARNING_UNKNOWN_DATASET"
    assert set(DATASET_REGISTRY) == {
        "digits",
        "breast_cancer",
        "fashion_mnist",
        "bank_imbalanced",
        "cohort_imbalanced",
    }


@pytest.mark.parametrize(
    ("pub", "test", "fragment"),
    [(0.0, 0.2, "public_fraction"), (0.2, 1.0, "test_fraction"), (0.5, 0.5, "leave private")],
)
def test_bad_fractions(pub, test, fragment):
    with pytest.raises(LearningParameterInvalid, match=fragment):
        load_task("digits", seed=0, public_fraction=pub, test_fraction=test)


def test_every_part_needs_a_row():
    with pytest.raises(SplitImpossible, match="every part needs at least one row"):
        load_task("breast_cancer", seed=0, public_fraction=0.0005, test_fraction=0.2)


@pytest.mark.skipif(shutil.which("dpkg") is None, reason="needs dpkg")
def test_fashion_mnist_needs_debian_package():
    import subprocess

    installed = (
        subprocess.run(["dpkg", "-s", "dataset-fashion-mnist"], capture_output=True).returncode == 0
    )
    if installed:
        task = load_task("fashion_mnist", seed=0, public_fraction=0.1, test_fraction=0.1)
        assert task.input_shape == (1, 28, 28) and task.num_classes == 10
    else:
        with pytest.raises(DatasetUnavailable, match="dataset-fashion-mnist") as e:
            load_task("fashion_mnist", seed=0)
        assert e.value.code == "LEARNING_DATASET_UNAVAILABLE"


def _idx(path, magic, count, payload):
    header = magic.to_bytes(4, "big") + count.to_bytes(4, "big")
    if magic == 0x803:
        header += (28).to_bytes(4, "big") * 2
    path.write_bytes(gzip.compress(header + payload))
    return path


def test_read_idx_images_and_labels(tmp_path):
    images = np.arange(2 * 28 * 28, dtype=np.uint64).astype(np.uint8)
    img = _idx(tmp_path / "i.gz", 0x803, 2, images.tobytes())
    lab = _idx(tmp_path / "l.gz", 0x801, 3, bytes([7, 0, 9]))
    assert read_idx(img, offset=16, shape=(28, 28)).shape == (2, 28, 28)
    assert read_idx(lab, offset=8, shape=()).tolist() == [7, 0, 9]


@pytest.mark.parametrize(
    ("magic", "count", "payload", "fragment"),
    [(0x803, 1, b"\x00" * 10, "not a valid idx"), (0x801, 5, b"\x01\x02", "declares 5 items")],
)
def test_read_idx_rejects_malformed(tmp_path, magic, count, payload, fragment):
    path = _idx(tmp_path / "bad.gz", magic, count, payload)
    shape = (28, 28) if magic == 0x803 else ()
    with pytest.raises(DatasetUnavailable, match=fragment):
        read_idx(path, offset=16 if magic == 0x803 else 8, shape=shape)


def test_read_idx_rejects_non_gzip(tmp_path):
    path = tmp_path / "x.gz"
    path.write_bytes(b"not gzip at all")
    with pytest.raises(DatasetUnavailable, match="cannot read idx"):
        read_idx(path, offset=8, shape=())


# --- Dirichlet label skew ---------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    labels=st.lists(st.integers(0, 4), min_size=12, max_size=200),
    parts=st.integers(1, 6),
    alpha=st.floats(0.05, 100),
    seed=st.integers(0, 2**32 - 1),
    min_size=st.integers(1, 2),
)
def test_dirichlet_split_is_a_partition(labels, parts, alpha, seed, min_size):
    y = np.asarray(labels)
    split = dirichlet_split(y, parts=parts, alpha=alpha, seed=seed, min_size=min_size)
    assert len(split) == parts
    joined = np.concatenate(split)
    assert sorted(joined.tolist()) == list(range(len(y)))  # covers all, no overlap
    assert all(len(p) >= min_size for p in split)
    assert all(p.dtype == np.int64 for p in split)


def test_dirichlet_alpha_controls_skew():
    y = np.repeat(np.arange(10), 100)

    def skew(alpha):
        parts = dirichlet_split(y, parts=5, alpha=alpha, seed=0)
        return np.mean([np.bincount(y[p], minlength=10).max() / len(p) for p in parts])

    assert skew(0.1) > 0.5 > skew(100.0)


def test_dirichlet_is_reproducible():
    y = np.repeat(np.arange(3), 20)
    a = dirichlet_split(y, parts=4, alpha=0.5, seed=9)
    b = dirichlet_split(y, parts=4, alpha=0.5, seed=9)
    assert all(np.array_equal(p, q) for p, q in zip(a, b, strict=True))


def test_dirichlet_impossible_and_invalid():
    with pytest.raises(SplitImpossible, match="cannot give 5 parts") as e:
        dirichlet_split(np.zeros(8, dtype=int), parts=5, alpha=1.0, seed=0, min_size=2)
    assert e.value.code == "LEARNING_SPLIT_IMPOSSIBLE"
    with pytest.raises(LearningParameterInvalid, match="alpha"):
        dirichlet_split(np.zeros(8, dtype=int), parts=2, alpha=0.0, seed=0)
    with pytest.raises(LearningParameterInvalid, match="parts"):
        dirichlet_split(np.zeros(8, dtype=int), parts=0, alpha=1.0, seed=0)
    with pytest.raises(LearningParameterInvalid, match="min_size"):
        dirichlet_split(np.zeros(8, dtype=int), parts=2, alpha=1.0, seed=0, min_size=0)


def test_fashion_mnist_from_installed_idx_files(tmp_path, monkeypatch):
    """The whole Fashion-MNIST path on small idx files laid out as the package installs them."""
    import secure_fed.learning.data as data

    rng = np.random.default_rng(0)
    files = []
    for prefix, count in (("train", 40), ("t10k", 10)):
        pixels = rng.integers(0, 256, size=count * 28 * 28, dtype=np.uint8).tobytes()
        labels = bytes(int(v) for v in np.arange(count) % 10)
        files.append(_idx(tmp_path / f"{prefix}-images-idx3-ubyte.gz", 0x803, count, pixels))
        files.append(_idx(tmp_path / f"{prefix}-labels-idx1-ubyte.gz", 0x801, count, labels))
    monkeypatch.setattr(data, "_installed_files", lambda package: files)
    task = load_task("fashion_mnist", seed=0, public_fraction=0.2, test_fraction=0.2)
    assert task.input_shape == (1, 28, 28) and task.num_classes == 10
    assert len(task.public_x) + len(task.private_x) + len(task.test_x) == 50
    assert task.private_x.dtype == np.float32 and 0 <= task.private_x.min() <= 1
    monkeypatch.setattr(data, "_installed_files", lambda package: files[:2])
    with pytest.raises(DatasetUnavailable, match="lacks the t10k idx files"):
        load_task("fashion_mnist", seed=0)
