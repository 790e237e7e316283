"""``.npy`` shards: a large array dataset read on demand (docs/architecture.md, "Input
pipeline"), memory-mapped, never loaded whole.

A folder holds ``x_train.npy`` and ``y_train.npy`` (or shards of them: ``x_train.000.npy``
with ``y_train.000.npy``, ``x_train.001.npy``, …, in name order), the same for ``test``,
and optionally ``class_names.npy`` (strings). Samples as in an ``.npz``: NxHxW gains a
channel, NxHxWxC (C in 1, 3, 4) becomes CxHxW, uint8 is scaled to [0, 1]. Each ``x``
shard is memory-mapped (``allow_pickle=False``): a sample is read from the page cache when
asked for; only the labels are read whole.
"""

from __future__ import annotations

import bisect
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from torch.utils.data import Dataset

from workers.learner.datasets import DatasetError, _check_labels, _class_names, _names_for

SPLITS = ("train", "test")


def is_shards(where: Path) -> bool:
    return all(_pairs(where, split) for split in SPLITS)


def _pairs(where: Path, split: str) -> list[tuple[Path, Path]]:
    xs = sorted(where.glob(f"x_{split}*.npy"))
    return [(x, x.with_name("y" + x.name[1:])) for x in xs]


class Shards(Dataset[tuple[torch.Tensor, int]]):
    """One split over its shards; picklable (each DataLoader worker maps them itself)."""

    def __init__(self, pairs: list[tuple[Path, Path]], what: str) -> None:
        self.paths = [str(x) for x, _ in pairs]
        labels = [_labels(y, what) for _, y in pairs]
        counts = [len(_open(Path(p), what)) for p in self.paths]
        for (x, _), n, y in zip(pairs, counts, labels, strict=True):
            if n != len(y):
                raise DatasetError(f"{x.name} holds {n} samples but its labels {len(y)}.")
        self.starts = np.cumsum([0, *counts]).tolist()
        self.labels = torch.from_numpy(np.concatenate(labels or [np.empty(0, np.int64)]))
        self._maps: list[npt.NDArray[Any]] | None = None

    def __len__(self) -> int:
        return int(self.starts[-1])

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_maps": None}  # mapped again where it is read

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if self._maps is None:
            self._maps = [_open(Path(p), "") for p in self.paths]
        shard = bisect.bisect_right(self.starts, index) - 1
        x = np.array(self._maps[shard][index - self.starts[shard]])  # one sample, copied
        return _sample(x), int(self.labels[index])


def load(where: Path) -> tuple[Shards, Shards, list[str]]:
    train, test = (Shards(_pairs(where, s), f"{s} shards") for s in SPLITS)
    names = where / "class_names.npy"
    if names.is_file():
        classes = _class_names(np.load(names, allow_pickle=False).tolist(), names.name)
    else:
        top = max([int(s.labels.max()) for s in (train, test) if len(s)], default=0)
        classes = [str(i) for i in range(top + 1)]
    for split in (train, test):
        _check_labels(split.labels.numpy(), len(split), len(classes), "the shards' labels")
    return train, test, classes


def _open(path: Path, what: str) -> npt.NDArray[Any]:
    try:
        array: npt.NDArray[Any] = np.load(path, mmap_mode="r", allow_pickle=False)
    except Exception as e:
        raise DatasetError(f"{path.name} is not a readable .npy array: {e}") from e
    if not np.issubdtype(array.dtype, np.number) or array.ndim not in (3, 4):
        raise DatasetError(f"{path.name} must hold numbers, NxHxW or NxHxWxC ({what}).")
    return array


def _labels(path: Path, what: str) -> npt.NDArray[np.int64]:
    if not path.is_file():
        raise DatasetError(f"{path.name} is missing beside x{path.name[1:]} ({what}).")
    y = np.load(path, allow_pickle=False)
    y = y[:, 0] if y.ndim == 2 and y.shape[1] == 1 else y
    if not np.issubdtype(y.dtype, np.integer):
        raise DatasetError(f"{path.name} must hold integer class indices, found {y.dtype}.")
    labels: npt.NDArray[np.int64] = y.astype(np.int64)
    return labels


def _sample(x: npt.NDArray[Any]) -> torch.Tensor:
    if x.ndim == 2:
        x = x[None]
    elif x.shape[2] in (1, 3, 4) and x.shape[0] not in (1, 3, 4):
        x = x.transpose(2, 0, 1)
    t = torch.from_numpy(np.ascontiguousarray(x))
    return t.float().div_(255) if t.dtype == torch.uint8 else t.float()


def write_shards(root: Path, train: int, test: int, shards: int = 3, num_classes: int = 10,
                 seed: int = 0) -> Path:  # fmt: skip
    """Synthetic 32x32 images as uint8 NxHxWx3 ``.npy`` shards in ``root``."""
    from workers.learner.datasets import _even_split, synthetic_images

    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    for split, count in (("train", train), ("test", test)):
        for k, n in enumerate(_even_split(count, shards)):
            images, labels = synthetic_images(n, num_classes, rng)
            np.save(root / f"x_{split}.{k:03d}.npy", images.transpose(0, 2, 3, 1))
            np.save(root / f"y_{split}.{k:03d}.npy", labels)
    np.save(root / "class_names.npy", np.array(_names_for(num_classes)))
    return root
