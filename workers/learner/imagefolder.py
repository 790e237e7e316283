"""Image folders read on demand (docs/architecture.md, "Datasets in place"): each sample is
decoded when the training loop asks for it, by a DataLoader worker, never the whole folder.

Images may be of any size: each is brought to the size the job names (``image_size``: its
shorter side scaled to that, then the centre cut square), or, with no size named, to the
first training image's size (a folder of one size is read as it is). A JPEG is decoded at
the smallest of its reduced scales (1/2, 1/4, 1/8) that still covers that size, as PIL's
``draft`` offers: a large photo is never decoded whole to become a small input.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

from workers.learner.datasets import SPLITS, DatasetError, _images_in, _subdirs

Files = list[tuple[str, int]]  # (path relative to the folder, class index)


class ImageFolder(Dataset[tuple[torch.Tensor, int]]):
    """One split of an image folder: float32 CHW images in [0, 1] of ``size`` (width,
    height), and their class indices. Holds only the file names; picklable, so that each
    DataLoader worker gets its own copy."""

    def __init__(self, where: Path, files: Files, size: tuple[int, int], crop: bool) -> None:
        self.where = str(where)
        # one block of UTF-8 bytes, not a str object per file: an ImageNet's 1.3 M names
        # take ~60 MB, shared by the loader workers (forked) rather than copied
        self.names = np.array([name.encode() for name, _ in files], dtype=bytes)
        self.labels = torch.tensor([label for _, label in files], dtype=torch.long)
        self.size = size
        self.crop = crop

    def __len__(self) -> int:
        return len(self.names)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        pixels = self.pixels(index)
        image = torch.from_numpy(pixels).permute(2, 0, 1).float().div_(255)
        return image, int(self.labels[index])

    def pixels(self, index: int) -> np.ndarray[Any, np.dtype[np.uint8]]:
        """The image at ``index`` as uint8 HxWx3 of the dataset's size."""
        name = bytes(self.names[index]).decode()
        try:
            with Image.open(os.path.join(self.where, name)) as image:
                return np.array(self._sized(image), dtype=np.uint8)  # writable, for torch
        except (OSError, Image.DecompressionBombError) as e:
            raise DatasetError(f"{name} is not a readable image: {e}") from e

    def _sized(self, image: Image.Image) -> Image.Image:
        width, height = self.size
        if image.size == self.size:
            return image.convert("RGB")
        if self.crop:  # the shorter side to the size, then the centre square
            w, h = image.size
            scale = max(width / w, height / h)
            want = (max(width, round(w * scale)), max(height, round(h * scale)))
        else:
            want = self.size
        image.draft("RGB", want)  # a JPEG decodes at a reduced scale no smaller than want
        resized = image.convert("RGB").resize(want, Image.Resampling.BILINEAR)
        left, top = (want[0] - width) // 2, (want[1] - height) // 2
        return resized.crop((left, top, left + width, top + height)) if self.crop else resized


def load(where: Path, side: int = 0) -> tuple[ImageFolder, ImageFolder, list[str]]:
    """The train and test splits of the folder at ``where``, and the class names; only the
    file names are read (and the first image's size when no ``side`` is named)."""
    classes = [d.name for d in _subdirs(where / "train")]
    files = {split: listing(where, split, classes) for split in SPLITS}
    if not files["train"]:
        raise DatasetError("train/ holds no .png, .jpg or .jpeg images in its class folders.")
    crop = side > 0
    size = (side, side) if crop else _first_size(where, files["train"][0][0])
    train, test = (ImageFolder(where, files[s], size, crop) for s in SPLITS)
    return train, test, classes


def listing(where: Path, split: str, classes: list[str]) -> Files:
    unknown = [d.name for d in _subdirs(where / split) if d.name not in classes]
    if unknown:
        raise DatasetError(f"{split}/ has classes that train/ lacks: {', '.join(unknown)}.")
    return [
        (path.relative_to(where).as_posix(), index)
        for index, name in enumerate(classes)
        if (where / split / name).is_dir()
        for path in _images_in(where / split / name)
    ]


def _first_size(where: Path, name: str) -> tuple[int, int]:
    try:
        with Image.open(where / name) as image:
            return image.size
    except (OSError, Image.DecompressionBombError) as e:
        raise DatasetError(f"{name} is not a readable image: {e}") from e


def write_photos(
    root: Path, train: int, test: int, side: int, num_classes: int = 3, variants: int = 4,
    seed: int = 0,
) -> Path:  # fmt: skip
    """Large, learnable JPEGs (``side`` pixels square) as ``root/train/<class>/*.jpg`` and
    ``root/test/…``: each class's shape (datasets.synthetic_images) drawn at 32 pixels and
    scaled up, ``variants`` pictures per class, written again under many names (tests and
    benchmarks of real-size images: decoding, not writing, is what they measure)."""
    from workers.learner.datasets import _names_for, synthetic_images

    rng = np.random.default_rng(seed)
    names = _names_for(num_classes)
    small, labels = synthetic_images(variants * num_classes, num_classes, rng)
    encoded: dict[int, list[bytes]] = {c: [] for c in range(num_classes)}
    for image, label in zip(small, labels, strict=True):
        picture = Image.fromarray(image.transpose(1, 2, 0)).resize((side, side))
        out = io.BytesIO()
        picture.save(out, format="JPEG", quality=90)
        encoded[int(label)].append(out.getvalue())
    for split, count in (("train", train), ("test", test)):
        for i in range(count):
            label = i % num_classes
            folder = root / split / names[label]
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{i:06d}.jpg").write_bytes(encoded[label][(i // num_classes) % variants])
    return root
