"""Built-in tasks and their splits for federated distillation.

A task is split once, by a seeded permutation of row indices, into three
disjoint parts (FedMD, Li and Wang 2019; ``docs/learning.md``, section 2):

* ``public``: the unlabeled reference set ``D_pub`` every party sees; its
  labels are discarded, so distillation never uses public labels;
* ``private``: the pool later divided among participants (e.g. by
  :func:`dirichlet_split`, the non-IID label skew of Hsu et al. 2019);
* ``test``: held out for evaluation only.

Feature scaling uses public statistics only (digits: the fixed range 0..16;
tabular data: mean and standard deviation of the public rows), so no private
or test row influences another party's view of the data.

Participants may also bring their own data from CSV or Parquet files or a
torch ``Dataset`` (:mod:`secure_fed.learning.tabular`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from secure_fed.errors import (
    DatasetUnavailable,
    LearningParameterInvalid,
    SplitImpossible,
    UnknownDataset,
)

__all__ = [
    "DATASET_REGISTRY",
    "TaskData",
    "assemble_task",
    "read_idx",
    "dirichlet_split",
    "load_task",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class TaskData:
    """One task split into public (unlabeled), private and test parts.

    Attributes
    ----------
    name
        Dataset name in :data:`DATASET_REGISTRY`.
    public_x
        ``float32 [N_pub, *input_shape]``: the public reference set, no labels.
    private_x, private_y
        Private pool (to be divided among participants) and its ``int64`` labels.
    test_x, test_y
        Held-out evaluation set.
    input_shape
        Shape of one example, ``(C, H, W)`` or ``(F,)``.
    num_classes
        Number of classes.
    parts
        Per-participant row indices into the private pool when participants
        brought their own tables (:mod:`secure_fed.learning.user_tables`), in
        participant order; ``None`` lets the federation split the pool by
        Dirichlet label skew.
    public_y
        ``int64 [N_pub]``: labels of the public rows, held by the servers only
        (the evidence of correctness is measured on a secret subset of them each
        round; participants never receive them). ``None`` for a task of one
        table per participant, whose public rows carry no labels.
    """

    name: str
    public_x: np.ndarray
    private_x: np.ndarray
    private_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray
    input_shape: tuple[int, ...]
    num_classes: int
    parts: tuple[np.ndarray, ...] | None = None
    public_y: np.ndarray | None = None


def _digits() -> tuple[np.ndarray, np.ndarray, bool]:
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    return (x / 16.0).reshape(-1, 1, 8, 8), y, False


def _breast_cancer() -> tuple[np.ndarray, np.ndarray, bool]:
    from sklearn.datasets import load_breast_cancer

    x, y = load_breast_cancer(return_X_y=True)
    return x, y, True


FASHION_PACKAGE = "dataset-fashion-mnist"


def read_idx(path: Path, *, offset: int, shape: tuple[int, ...]) -> np.ndarray:
    """Read a gzipped idx file (LeCun's MNIST format) after its ``offset``-byte header.

    Parameters
    ----------
    path
        ``*-ubyte.gz`` file.
    offset
        Header length: 16 for images, 8 for labels.
    shape
        Trailing shape of one item, e.g. ``(28, 28)`` or ``()``.

    Returns
    -------
    numpy.ndarray
        ``uint8 [N, *shape]``.

    Raises
    ------
    DatasetUnavailable
        The file is unreadable, its magic number is wrong or its length is inconsistent.
    """
    import gzip

    try:
        raw = gzip.decompress(path.read_bytes())
    except (OSError, EOFError) as exc:
        raise DatasetUnavailable(f"cannot read idx file {path.name}: {exc}") from exc
    item = int(np.prod(shape)) if shape else 1
    magic = int.from_bytes(raw[:4], "big") if len(raw) >= 4 else -1
    if magic != 0x800 + (1 if offset == 8 else 3) or (len(raw) - offset) % item:
        raise DatasetUnavailable(f"{path.name} is not a valid idx file with a {offset}-byte header")
    count = int.from_bytes(raw[4:8], "big")
    data = np.frombuffer(raw, dtype=np.uint8, offset=offset)
    if data.size != count * item:
        raise DatasetUnavailable(
            f"{path.name} declares {count} items but holds {data.size // item}"
        )
    return data.reshape(count, *shape)


def _installed_files(package: str) -> list[Path]:
    import subprocess

    try:
        listing = subprocess.run(
            ["dpkg", "-L", package], capture_output=True, text=True, check=True, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise DatasetUnavailable(
            f"Fashion-MNIST needs the Debian package {package!r}, which is not installed "
            f"(apt-get install {package})"
        ) from exc
    return [Path(line) for line in listing.splitlines() if line.endswith("-ubyte.gz")]


def _fashion_mnist() -> tuple[np.ndarray, np.ndarray, bool]:
    files = {f.name: f for f in _installed_files(FASHION_PACKAGE)}
    xs, ys = [], []
    for prefix in ("train", "t10k"):
        images, labels = (
            files.get(f"{prefix}-images-idx3-ubyte.gz"),
            files.get(f"{prefix}-labels-idx1-ubyte.gz"),
        )
        if images is None or labels is None:
            raise DatasetUnavailable(f"{FASHION_PACKAGE} lacks the {prefix} idx files")
        xs.append(read_idx(images, offset=16, shape=(28, 28)))
        ys.append(read_idx(labels, offset=8, shape=()))
    x = np.concatenate(xs).astype(np.float32) / np.float32(255.0)
    return x.reshape(-1, 1, 28, 28), np.concatenate(ys).astype(np.int64), False


def _bank_imbalanced() -> tuple[np.ndarray, np.ndarray, bool]:
    from secure_fed.learning.imbalanced import bank_imbalanced

    x, y = bank_imbalanced()
    return x, y, True


def _cohort_imbalanced() -> tuple[np.ndarray, np.ndarray, bool]:
    from secure_fed.learning.imbalanced import cohort_imbalanced

    x, y = cohort_imbalanced()
    return x, y, True


DATASET_REGISTRY: dict[str, Callable[[], tuple[np.ndarray, np.ndarray, bool]]] = {
    "digits": _digits,
    "breast_cancer": _breast_cancer,
    "fashion_mnist": _fashion_mnist,
    "bank_imbalanced": _bank_imbalanced,
    "cohort_imbalanced": _cohort_imbalanced,
}
"""Dataset name -> loader returning ``(x, y, standardize_with_public_stats)``."""


def load_task(
    name: str,
    *,
    seed: int,
    public_fraction: float = 0.2,
    test_fraction: float = 0.2,
) -> TaskData:
    """Load a built-in dataset and split it into public / private / test parts.

    Parameters
    ----------
    name
        A key of :data:`DATASET_REGISTRY` (``digits`` is the fast default).
    seed
        Seed of the split permutation.
    public_fraction, test_fraction
        Fractions of all rows for the public and test sets (each in (0, 1),
        together < 1); the rest is private.

    Returns
    -------
    TaskData
        The three disjoint parts.

    Raises
    ------
    UnknownDataset
        ``name`` is not registered; the message lists the registry.
    DatasetUnavailable
        The dataset's files are not installed.
    LearningParameterInvalid
        The fractions are out of range.
    SplitImpossible
        A part would be empty.
    """
    if name not in DATASET_REGISTRY:
        raise UnknownDataset(
            f"unknown dataset {name!r}; registered datasets: {', '.join(sorted(DATASET_REGISTRY))}"
        )
    for label, value in (("public_fraction", public_fraction), ("test_fraction", test_fraction)):
        if not 0 < value < 1:
            raise LearningParameterInvalid(f"{label} must be in (0, 1), got {value!r}")
    if public_fraction + test_fraction >= 1:
        raise LearningParameterInvalid(
            "public_fraction + test_fraction must be < 1 to leave private rows, got "
            f"{public_fraction} + {test_fraction}"
        )
    x, y, standardize = DATASET_REGISTRY[name]()
    n = len(y)
    order = np.random.default_rng(seed).permutation(n)
    n_pub, n_test = int(round(n * public_fraction)), int(round(n * test_fraction))
    pub, test, priv = order[:n_pub], order[n_pub : n_pub + n_test], order[n_pub + n_test :]
    if min(len(pub), len(test), len(priv)) == 0:
        raise SplitImpossible(
            f"{name}: {n} rows give {len(pub)} public, {len(priv)} private and {len(test)} "
            "test rows; every part needs at least one row"
        )
    return assemble_task(name, x, y, pub=pub, test=test, priv=priv, standardize=standardize)


def assemble_task(
    name: str,
    x: np.ndarray,
    y: np.ndarray,
    *,
    pub: np.ndarray,
    test: np.ndarray,
    priv: np.ndarray,
    standardize: bool,
    parts: tuple[np.ndarray, ...] | None = None,
) -> TaskData:
    """Build a :class:`TaskData` from all rows and the index arrays of its parts.

    Parameters
    ----------
    name
        Task name (shown in results and the public-set id).
    x, y
        All rows and their labels (any sortable label values; mapped to
        ``0..C-1`` in sorted order).
    pub, test, priv
        Disjoint row indices of the public, test and private parts.
    standardize
        Scale every feature by the mean and standard deviation of the public
        rows only (tabular data).
    parts
        Optional per-participant indices into ``priv`` order (``0..len(priv)-1``).

    Returns
    -------
    TaskData
        The assembled task, ``float32`` features and ``int64`` labels.
    """
    if standardize:  # statistics of the public rows only
        x = x.astype(np.float64)
        mean, std = x[pub].mean(axis=0), x[pub].std(axis=0)
        x = (x - mean) / np.where(std > 0, std, 1.0)
    _, labels = np.unique(y, return_inverse=True)
    x32, y64 = x.astype(np.float32), labels.astype(np.int64)
    logger.info(
        "task %s: %d public, %d private, %d test rows", name, len(pub), len(priv), len(test)
    )
    return TaskData(
        name=name,
        public_x=x32[pub],
        private_x=x32[priv],
        private_y=y64[priv],
        test_x=x32[test],
        test_y=y64[test],
        input_shape=tuple(int(s) for s in x32.shape[1:]),
        num_classes=int(labels.max()) + 1,
        parts=parts,
        public_y=None if parts is not None else y64[pub],
    )


def dirichlet_split(
    labels: np.ndarray, *, parts: int, alpha: float, seed: int, min_size: int = 1
) -> list[np.ndarray]:
    """Split row indices into ``parts`` with Dirichlet(alpha) label skew.

    For every class, the class's indices are divided among parts in
    proportions drawn from ``Dirichlet(alpha * 1)`` (Hsu, Qi and Brown 2019):
    small ``alpha`` gives strong skew, large ``alpha`` approaches IID. Parts
    smaller than ``min_size`` then receive random rows from the largest part,
    so every part is non-empty and the result stays a partition.

    Parameters
    ----------
    labels
        Integer labels, one per row.
    parts
        Number of parts (participants), >= 1.
    alpha
        Concentration, > 0.
    seed
        Seed of the draw.
    min_size
        Minimum rows per part, >= 1.

    Returns
    -------
    list of numpy.ndarray
        Sorted ``int64`` index arrays, pairwise disjoint, covering ``range(len(labels))``.

    Raises
    ------
    LearningParameterInvalid
        ``parts``, ``alpha`` or ``min_size`` out of range.
    SplitImpossible
        ``parts * min_size > len(labels)``.
    """
    labels = np.asarray(labels)
    if parts < 1:
        raise LearningParameterInvalid(f"parts must be >= 1, got {parts!r}")
    if not alpha > 0:
        raise LearningParameterInvalid(f"alpha must be > 0, got {alpha!r}")
    if min_size < 1:
        raise LearningParameterInvalid(f"min_size must be >= 1, got {min_size!r}")
    if parts * min_size > len(labels):
        raise SplitImpossible(
            f"cannot give {parts} parts at least {min_size} rows each from {len(labels)} rows"
        )
    rng = np.random.default_rng(seed)
    buckets: list[list[int]] = [[] for _ in range(parts)]
    for cls in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == cls))
        cuts = (np.cumsum(rng.dirichlet(np.full(parts, float(alpha))))[:-1] * len(idx)).astype(int)
        for k, chunk in enumerate(np.split(idx, cuts)):
            buckets[k].extend(int(i) for i in chunk)
    for k in range(parts):
        while len(buckets[k]) < min_size:
            donor = max(range(parts), key=lambda j: len(buckets[j]))
            buckets[k].append(buckets[donor].pop(int(rng.integers(len(buckets[donor])))))
    return [np.sort(np.asarray(b, dtype=np.int64)) for b in buckets]
