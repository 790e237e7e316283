"""The platform's dataset loaders: detect an uploaded dataset's format and load it as tensors.

Formats: CIFAR-10 and CIFAR-100 python batches, image folders (``train/<class>/*.png``,
``test/<class>/…``) and a single ``.npz`` with ``x_train, y_train, x_test, y_test``; each may
sit one directory down (an archive's top folder). Uploads are untrusted: pickles go through an
allow-list unpickler and ``.npz`` files are read with ``allow_pickle=False``.

It also generates learnable synthetic datasets in these formats (the demo dataset, tests):
each class is a coloured shape or pattern, shifted at random, with noise. Nothing is
downloaded.
"""

from __future__ import annotations

import importlib
import pickle
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.typing as npt
import torch
from PIL import Image
from torch.utils.data import Dataset, TensorDataset

CIFAR10_CLASSES = (
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
)
IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg"})
SPLITS = ("train", "test")
NPZ_KEYS = ("x_train", "y_train", "x_test", "y_test")
CIFAR_PIXELS = 3 * 32 * 32

Images = npt.NDArray[np.uint8]
Labels = npt.NDArray[np.int64]
# (train, test, class names): TensorDatasets in memory, or datasets read on demand whose
# ``labels`` tensor holds every sample's class (imagefolder.py)
Loaded = tuple[Dataset[Any], Dataset[Any], list[str]]

EXPECTED = (
    "CIFAR-10 python batches (data_batch_1 … data_batch_5, test_batch, batches.meta), "
    "CIFAR-100 python files (train, test, meta), "
    "an image folder (train/<class>/*.png|jpg|jpeg and test/<class>/…), "
    "a single .npz file with x_train, y_train, x_test, y_test, "
    "or .npy shards (x_train[.NNN].npy with y_train[.NNN].npy, the same for test); "
    "any of them may sit one directory down"
)


class DatasetError(ValueError):
    """A dataset that cannot be used; the message says what was expected and what was found."""


# --------------------------------------------------------------------------- detection


def detect_format(root: Path) -> str:
    """``cifar10``, ``cifar100``, ``imagefolder`` or ``npz``, at ``root`` or one level down."""
    return _locate(root)[0]


def _locate(root: Path) -> tuple[str, Path]:
    """The format and where it lives (the directory; the file itself for npz)."""
    if root.is_file() and root.suffix.lower() == ".npz":
        return "npz", root
    if not root.is_dir():
        raise DatasetError(f"{root.name or root} is not a directory. Expected {EXPECTED}.")
    for where in [root, *_subdirs(root)]:
        found = _format_at(where)
        if found is not None:
            return found
    raise DatasetError(f"No supported dataset found. Expected {EXPECTED}. Found: {_listing(root)}.")


def _format_at(where: Path) -> tuple[str, Path] | None:
    if _is_cifar10(where):
        return "cifar10", where
    if all((where / name).is_file() for name in ("train", "test", "meta")):
        return "cifar100", where
    if _is_imagefolder(where):
        return "imagefolder", where
    from workers.learner import shards  # read on demand, as image folders are

    if shards.is_shards(where):
        return "npyshards", where
    npz = _npz_file(where)
    return None if npz is None else ("npz", npz)


def _is_cifar10(where: Path) -> bool:
    has_meta = (where / "test_batch").is_file() and (where / "batches.meta").is_file()
    return has_meta and any(p.is_file() for p in where.glob("data_batch_*"))


def _is_imagefolder(where: Path) -> bool:
    if not all((where / split).is_dir() for split in SPLITS):
        return False
    return any(_images_in(d) for d in _subdirs(where / "train"))


def _npz_file(where: Path) -> Path | None:
    files = sorted(p for p in where.iterdir() if p.is_file() and p.suffix.lower() == ".npz")
    if len(files) > 1:
        names = ", ".join(p.name for p in files)
        raise DatasetError(f"Found {len(files)} .npz files ({names}); keep exactly one.")
    return files[0] if files else None


def _subdirs(where: Path) -> list[Path]:
    return sorted(p for p in where.iterdir() if p.is_dir() and _visible(p))


def _visible(path: Path) -> bool:
    return not path.name.startswith((".", "__MACOSX"))


def _images_in(where: Path) -> list[Path]:
    return sorted(p for p in where.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)


def _listing(root: Path, limit: int = 20) -> str:
    """What is in ``root`` and one level down, for an error message."""
    entries: list[str] = []
    for path in sorted(p for p in root.iterdir() if _visible(p)):
        entries.append(f"{path.name}/" if path.is_dir() else path.name)
        if path.is_dir():
            inner = sorted(p.name for p in path.iterdir() if _visible(p))
            entries.extend(f"{path.name}/{name}" for name in inner[:limit])
    if not entries:
        return "an empty directory"
    more = f" and {len(entries) - limit} more" if len(entries) > limit else ""
    return ", ".join(entries[:limit]) + more


# --------------------------------------------------------------------------- loading


def load_dataset(root: Path, side: int = 0) -> Loaded:
    """(train, test, class names): float32 CHW images in [0, 1] and int64 labels; an image
    folder is read on demand, its images brought to ``side`` pixels a side (the job's
    ``image_size``; 0: the first image's size)."""
    found, where = _locate(root)
    if found == "imagefolder":
        return _load_imagefolder(where, side)
    return _LOADERS[found](where)


def describe(root: Path) -> dict[str, Any]:
    """Format, class names, sample shape and counts per split and per class (of an image
    folder, from its listing and its first image alone)."""
    found, where = _locate(root)
    train, test, classes = _LOADERS[found](where)
    return {
        "format": found,
        "classes": classes,
        "num_classes": len(classes),
        "sample_shape": list(train[0][0].shape),
        "splits": {"train": _counts(train, classes), "test": _counts(test, classes)},
    }


def labels_of(split: Dataset[Any]) -> torch.Tensor:
    """Every sample's class index, without reading the samples."""
    if isinstance(split, TensorDataset):
        return split.tensors[1]
    labels: torch.Tensor = getattr(split, "labels")  # noqa: B009  (the lazy formats')
    return labels


def _counts(split: Dataset[Any], classes: list[str]) -> dict[str, Any]:
    per_class = torch.bincount(labels_of(split), minlength=len(classes)).tolist()
    return {"count": len(labels_of(split)), "per_class": dict(zip(classes, per_class, strict=True))}


def _tensors(images: npt.NDArray[Any], labels: npt.NDArray[Any]) -> TensorDataset:
    """NCHW uint8 images are scaled to [0, 1]; anything else is converted to float32."""
    x = torch.from_numpy(np.ascontiguousarray(images))
    x = x.float().div_(255) if x.dtype == torch.uint8 else x.float()
    return TensorDataset(x, torch.from_numpy(labels.astype(np.int64)))


def _check_labels(labels: npt.NDArray[Any], count: int, num_classes: int, what: str) -> None:
    if labels.ndim != 1 or len(labels) != count:
        raise DatasetError(f"{what}: expected {count} labels, found shape {labels.shape}.")
    if count and not np.issubdtype(labels.dtype, np.integer):  # [] unpickles as float64
        raise DatasetError(f"{what}: labels must be integer class indices, found {labels.dtype}.")
    if count and (labels.min() < 0 or labels.max() >= num_classes):
        raise DatasetError(
            f"{what}: labels must lie in 0..{num_classes - 1}, "
            f"found {labels.min()}..{labels.max()}."
        )


def _class_names(values: object, what: str) -> list[str]:
    if not isinstance(values, list | tuple | np.ndarray) or len(values) == 0:
        raise DatasetError(f"{what}: expected a non-empty list of class names.")
    names = [v.decode() if isinstance(v, bytes) else str(v) for v in values]
    if len(set(names)) != len(names):
        raise DatasetError(f"{what}: class names must be unique, found {names}.")
    return names


# ----------------------------------------------------------------- CIFAR python batches


def _load_cifar10(where: Path) -> Loaded:
    meta = _unpickle(where / "batches.meta")
    classes = _class_names(_field(meta, "label_names", "batches.meta"), "batches.meta")
    batches = sorted((p for p in where.glob("data_batch_*") if p.is_file()), key=_batch_order)
    train = _cifar_split(batches, "labels", len(classes))
    return train, _cifar_split([where / "test_batch"], "labels", len(classes)), classes


def _load_cifar100(where: Path) -> Loaded:
    meta = _unpickle(where / "meta")
    classes = _class_names(_field(meta, "fine_label_names", "meta"), "meta")
    train = _cifar_split([where / "train"], "fine_labels", len(classes))
    return train, _cifar_split([where / "test"], "fine_labels", len(classes)), classes


def _batch_order(path: Path) -> tuple[int, str]:
    suffix = path.name.removeprefix("data_batch_")
    return (int(suffix) if suffix.isdigit() else 1 << 30, path.name)


def _cifar_split(paths: Iterable[Path], label_key: str, num_classes: int) -> TensorDataset:
    parts = [_cifar_batch_arrays(p, label_key, num_classes) for p in paths]
    data = np.concatenate([d for d, _ in parts])
    labels = np.concatenate([y for _, y in parts])
    return _tensors(data.reshape(-1, 3, 32, 32), labels)


def _cifar_batch_arrays(path: Path, label_key: str, num_classes: int) -> tuple[Images, Labels]:
    batch = _unpickle(path)
    data = _field(batch, "data", path.name)
    if not (isinstance(data, np.ndarray) and data.dtype == np.uint8 and data.ndim == 2):
        raise DatasetError(f"{path.name}: 'data' must be a uint8 array of shape (N, 3072).")
    if data.shape[1] != CIFAR_PIXELS:
        raise DatasetError(f"{path.name}: 'data' rows must hold 3072 values, found {data.shape}.")
    labels = np.asarray(_field(batch, label_key, path.name))
    _check_labels(labels, len(data), num_classes, path.name)
    return data, labels.astype(np.int64)


def _field(mapping: object, key: str, what: str) -> object:
    """``mapping[b"key"]`` (how CIFAR pickles are keyed) or ``mapping["key"]``."""
    if not isinstance(mapping, dict):
        raise DatasetError(f"{what}: expected a pickled dict, found {type(mapping).__name__}.")
    for candidate in (key.encode(), key):
        if candidate in mapping:
            return mapping[candidate]
    raise DatasetError(f"{what}: the key {key!r} is missing; found {sorted(map(str, mapping))}.")


def _unpickle(path: Path) -> object:
    """Load an untrusted pickle: only dicts, lists, bytes, numbers and numpy arrays."""
    try:
        with path.open("rb") as f:
            return _SafeUnpickler(f, encoding="bytes").load()
    except DatasetError as e:
        raise DatasetError(f"{path.name}: {e}") from e
    except Exception as e:
        raise DatasetError(f"{path.name} is not a readable CIFAR pickle: {e}") from e


def _latin1(text: str, encoding: str = "latin1") -> bytes:
    """``_codecs.encode`` as Python 3 pickles ``bytes`` at protocol 2, and nothing more."""
    if encoding not in ("latin1", "latin-1"):
        raise DatasetError(f"the pickle asks for the codec {encoding!r}; refused.")
    return text.encode("latin1")


def _allowed_globals() -> dict[tuple[str, str], Any]:
    multiarray = importlib.import_module("numpy._core.multiarray")
    numeric = importlib.import_module("numpy._core.numeric")
    allowed: dict[tuple[str, str], Any] = {
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
        ("_codecs", "encode"): _latin1,
        ("__builtin__", "bytes"): bytes,
        ("builtins", "bytes"): bytes,
    }
    for package in ("numpy.core", "numpy._core"):
        allowed[(f"{package}.multiarray", "_reconstruct")] = multiarray._reconstruct
        allowed[(f"{package}.numeric", "_frombuffer")] = numeric._frombuffer
    return allowed


class _SafeUnpickler(pickle.Unpickler):
    """Resolves only numpy's array reconstruction helpers; refuses every other global."""

    def __init__(self, file: IO[bytes], *, encoding: str) -> None:
        super().__init__(file, encoding=encoding)
        self._allowed = _allowed_globals()

    def find_class(self, module: str, name: str) -> Any:
        found = self._allowed.get((module, name))
        if found is None:
            raise DatasetError(
                f"the pickle refers to {module}.{name}; dataset pickles may hold only "
                "dicts, lists, bytes, numbers and numpy arrays, so it was refused."
            )
        return found


# --------------------------------------------------------------------------- image folders


def _load_imagefolder(where: Path, side: int = 0) -> Loaded:
    """Read on demand, never decoded whole (imagefolder.py)."""
    from workers.learner.imagefolder import load

    return load(where, side)


# --------------------------------------------------------------------------- npz


def _load_npz(path: Path) -> Loaded:
    arrays = _read_npz(path)
    y_train, y_test = (_npz_labels(arrays, key) for key in ("y_train", "y_test"))
    if "class_names" in arrays:
        classes = _class_names(arrays["class_names"].tolist(), f"{path.name}: class_names")
    else:
        top = max([int(y.max()) for y in (y_train, y_test) if len(y)], default=0)
        classes = [str(i) for i in range(top + 1)]
    for key, y in (("y_train", y_train), ("y_test", y_test)):
        _check_labels(y, len(y), len(classes), f"{path.name}: {key}")
    train = _npz_split(arrays["x_train"], y_train, f"{path.name}: x_train")
    return train, _npz_split(arrays["x_test"], y_test, f"{path.name}: x_test"), classes


def _read_npz(path: Path) -> dict[str, npt.NDArray[Any]]:
    try:
        with np.load(path, allow_pickle=False) as archive:
            missing = [key for key in NPZ_KEYS if key not in archive.files]
            if missing:
                found = ", ".join(archive.files) or "no arrays"
                raise DatasetError(f"{path.name} lacks {', '.join(missing)}; found {found}.")
            return {key: archive[key] for key in archive.files}
    except DatasetError:
        raise
    except Exception as e:
        raise DatasetError(f"{path.name} is not a readable .npz archive: {e}") from e


def _npz_labels(arrays: dict[str, npt.NDArray[Any]], key: str) -> npt.NDArray[Any]:
    """Labels as a 1-D array (Keras stores them as Nx1)."""
    y = arrays[key]
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if not np.issubdtype(y.dtype, np.integer):
        raise DatasetError(f"{key} must hold integer class indices, found {y.dtype}.")
    return y


def _npz_split(x: npt.NDArray[Any], y: npt.NDArray[Any], what: str) -> TensorDataset:
    """NxHxW gains a channel; NxHxWxC (C in 1, 3, 4) becomes NCHW; others stay as stored."""
    if len(x) != len(y):
        raise DatasetError(f"{what} holds {len(x)} samples but its labels {len(y)}.")
    if not (np.issubdtype(x.dtype, np.number) or x.dtype == np.bool_):
        raise DatasetError(f"{what} must hold numbers, found {x.dtype}.")
    if x.ndim == 3:
        x = x[:, None]
    elif x.ndim == 4 and x.shape[3] in (1, 3, 4) and x.shape[1] not in (1, 3, 4):
        x = x.transpose(0, 3, 1, 2)
    return _tensors(x, y)


def _load_shards(where: Path) -> Loaded:
    """Memory-mapped, read on demand (shards.py)."""
    from workers.learner import shards

    return shards.load(where)


_LOADERS: dict[str, Callable[[Path], Loaded]] = {
    "cifar10": _load_cifar10,
    "cifar100": _load_cifar100,
    "imagefolder": _load_imagefolder,
    "npz": _load_npz,
    "npyshards": _load_shards,
}


# --------------------------------------------------------------------------- generators

_PALETTE = np.array(
    [
        (0.90, 0.10, 0.10),
        (0.10, 0.80, 0.20),
        (0.15, 0.30, 0.95),
        (0.95, 0.90, 0.10),
        (0.90, 0.10, 0.90),
        (0.10, 0.90, 0.90),
        (1.00, 0.55, 0.00),
        (0.50, 0.15, 0.75),
        (0.95, 0.95, 0.95),
        (0.55, 0.30, 0.10),
    ],
    dtype=np.float32,
)
_SHIFT = 8  # templates are drawn this much larger than the image, then cropped at random

_Mask = Callable[[npt.NDArray[np.float64], npt.NDArray[np.float64]], npt.NDArray[np.bool_]]
_SHAPES: tuple[_Mask, ...] = (
    lambda y, x: np.hypot(y, x) < 9,  # disc
    lambda y, x: np.maximum(abs(y), abs(x)) < 8,  # square
    lambda y, x: np.floor(y / 4) % 2 == 0,  # horizontal stripes
    lambda y, x: np.floor(x / 4) % 2 == 0,  # vertical stripes
    lambda y, x: (np.floor(y / 5) + np.floor(x / 5)) % 2 == 0,  # checkerboard
    lambda y, x: (np.minimum(abs(y), abs(x)) < 3) & (np.maximum(abs(y), abs(x)) < 13),  # cross
    lambda y, x: abs(np.hypot(y, x) - 8.5) < 2.5,  # ring
    lambda y, x: np.floor((y + x) / 4) % 2 == 0,  # diagonal stripes
    lambda y, x: (abs(y) < 9) & (abs(x) < (y + 9) / 2),  # triangle
    lambda y, x: np.hypot(y % 8 - 4, x % 8 - 4) < 2.2,  # dots
)


def synthetic_images(
    count: int, num_classes: int, rng: np.random.Generator, size: int = 32
) -> tuple[Images, Labels]:
    """Balanced, shuffled labels and uint8 NCHW images: per class a coloured shape or pattern
    (shape ``c % 10``, colour ``(c // 10 + 3c) % 10``: distinct for up to 100 classes),
    shifted by up to 8 pixels, with random brightness and uniform noise."""
    labels = rng.permutation(np.arange(count, dtype=np.int64) % num_classes)
    templates = _templates(num_classes, size + _SHIFT)
    windows = np.lib.stride_tricks.sliding_window_view(templates, (size, size), axis=(2, 3))
    rows, cols = rng.integers(0, _SHIFT + 1, size=(2, count))
    images = windows[labels, :, rows, cols]  # (count, 3, size, size), a copy
    images *= rng.uniform(0.75, 1.15, size=(count, 1, 1, 1)).astype(np.float32)
    noise = rng.random(images.shape, dtype=np.float32)  # uniform, std 0.1 once scaled
    noise -= 0.5
    noise *= 0.35
    images += noise
    np.clip(images, 0.0, 1.0, out=images)
    return (images * 255 + 0.5).astype(np.uint8), labels


def _templates(num_classes: int, side: int) -> npt.NDArray[np.float32]:
    y, x = np.mgrid[0:side, 0:side] - (side - 1) / 2
    out = np.empty((num_classes, 3, side, side), dtype=np.float32)
    for c in range(num_classes):
        mask = _SHAPES[c % 10](y, x)[None]
        colour = _PALETTE[(c // 10 + 3 * c) % 10][:, None, None]
        background = 0.1 + 0.3 * (1 - colour)
        out[c] = np.where(mask, colour, background)
    return out


def _even_split(total: int, parts: int) -> list[int]:
    return [total // parts + (i < total % parts) for i in range(parts)]


def _dump(path: Path, obj: object) -> None:
    with path.open("wb") as f:
        pickle.dump(obj, f, protocol=2)  # what the original CIFAR files use


def _cifar_batch(images: Images, label: str, prefix: str) -> dict[bytes, object]:
    return {
        b"batch_label": label.encode(),
        b"data": images.reshape(len(images), CIFAR_PIXELS),
        b"filenames": [f"{prefix}_{i:05d}.png".encode() for i in range(len(images))],
    }


def write_cifar10(root: Path, train: int, test: int, seed: int = 0) -> Path:
    """A synthetic, learnable CIFAR-10 in the python batch format, in
    ``root/cifar-10-batches-py/`` (returned): five training batches, a test batch, meta."""
    out = root / "cifar-10-batches-py"
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    splits = [(f"data_batch_{i}", n) for i, n in enumerate(_even_split(train, 5), start=1)]
    for name, count in [*splits, ("test_batch", test)]:
        images, labels = synthetic_images(count, len(CIFAR10_CLASSES), rng)
        batch = _cifar_batch(images, f"{name} (synthetic)", f"synthetic_{name}")
        _dump(out / name, {**batch, b"labels": labels.tolist()})
    names = [name.encode() for name in CIFAR10_CLASSES]
    meta = {b"num_cases_per_batch": max(n for _, n in splits), b"label_names": names}
    _dump(out / "batches.meta", {**meta, b"num_vis": CIFAR_PIXELS})
    return out


def write_cifar100(root: Path, train: int, test: int, seed: int = 0) -> Path:
    """A synthetic CIFAR-100 (``train``, ``test``, ``meta``) in ``root/cifar-100-python/``;
    coarse labels are ``fine // 5``, as 100 fine classes fall into 20 superclasses."""
    out = root / "cifar-100-python"
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for name, count in (("train", train), ("test", test)):
        images, fine = synthetic_images(count, 100, rng)
        labels = {b"fine_labels": fine.tolist(), b"coarse_labels": (fine // 5).tolist()}
        _dump(out / name, {**_cifar_batch(images, name, f"synthetic_{name}"), **labels})
    fine_names = [f"class_{i:02d}".encode() for i in range(100)]
    coarse_names = [f"superclass_{i:02d}".encode() for i in range(20)]
    _dump(out / "meta", {b"fine_label_names": fine_names, b"coarse_label_names": coarse_names})
    return out


def _names_for(num_classes: int) -> list[str]:
    if num_classes <= len(CIFAR10_CLASSES):
        return list(CIFAR10_CLASSES[:num_classes])
    return [f"class_{i}" for i in range(num_classes)]


def write_npz(
    path: Path,
    train: int,
    test: int,
    num_classes: int = 10,
    seed: int = 0,
    size: int = 32,
    class_names: bool = True,
) -> Path:
    """Synthetic images as a Keras-style ``.npz``: uint8 NxHxWx3 ``x_*``, int64 ``y_*`` and,
    with ``class_names``, a ``class_names`` string array."""
    rng = np.random.default_rng(seed)
    arrays: dict[str, npt.NDArray[Any]] = {}
    for split, count in (("train", train), ("test", test)):
        images, labels = synthetic_images(count, num_classes, rng, size)
        arrays[f"x_{split}"], arrays[f"y_{split}"] = images.transpose(0, 2, 3, 1), labels
    if class_names:
        arrays["class_names"] = np.array(_names_for(num_classes))
    path.parent.mkdir(parents=True, exist_ok=True)
    save: Callable[..., None] = np.savez_compressed  # its stubs mistype **arrays
    save(path, **arrays)
    return path


def write_imagefolder(
    root: Path,
    train: int,
    test: int,
    num_classes: int = 3,
    seed: int = 0,
    size: int = 32,
    suffix: str = ".png",
) -> Path:
    """Synthetic images as ``root/train/<class>/*.png`` and ``root/test/<class>/…``."""
    rng = np.random.default_rng(seed)
    names = _names_for(num_classes)
    for split, count in (("train", train), ("test", test)):
        images, labels = synthetic_images(count, num_classes, rng, size)
        for name in names:
            (root / split / name).mkdir(parents=True, exist_ok=True)
        for i, (image, label) in enumerate(zip(images, labels, strict=True)):
            target = root / split / names[label] / f"{i:05d}{suffix}"
            Image.fromarray(image.transpose(1, 2, 0)).save(target)
    return root
