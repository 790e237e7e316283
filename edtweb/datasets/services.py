"""Datasets: receive an archive in resumable chunks, then prepare it on a worker host's
control worker (safe extraction, format detection, counts, thumbnails)."""

from __future__ import annotations

import logging
import shutil
import time
from typing import Any

from django.conf import settings
from django.db.models import F

from edtweb.datasets.models import Dataset

log = logging.getLogger("edt.datasets")
THUMBS_PER_CLASS = 4
TRIES = 2  # a preparation whose process died is run once more; the next loss fails it
INTERRUPTED = (
    "the dataset preparation was interrupted twice (its worker died); upload again or ask an admin"
)


class UploadError(ValueError):
    """A request the uploader must correct; ``status`` is the HTTP status to answer."""

    def __init__(self, message: str, status: int = 400, offset: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.offset = offset


def max_upload_bytes() -> int:
    return int(settings.EDT_MAX_UPLOAD_BYTES)


def start_upload(owner: Any, name: str, filename: str, size: int) -> Dataset:
    if not name.strip():
        raise UploadError("give the dataset a name")
    if size <= 0:
        raise UploadError("the file is empty")
    if size > max_upload_bytes():
        raise UploadError(
            f"the file is {size:,} bytes; uploads are limited to "
            f"{max_upload_bytes():,} bytes (EDT_MAX_UPLOAD_BYTES)",
            413,
        )
    dataset = Dataset.objects.create(owner=owner, name=name.strip(), filename=filename, size=size)
    dataset.root.mkdir(parents=True, exist_ok=True)
    dataset.archive_path.touch()
    return dataset


def append_chunk(dataset: Dataset, start: int, chunk: bytes) -> int:
    """Append ``chunk`` at byte ``start``; returns the new offset. A chunk that does not start
    where the upload stands is refused with the offset to resume from (HTTP 409)."""
    if dataset.status != Dataset.Status.UPLOADING:
        raise UploadError("this upload is finished", 409, dataset.received)
    if start != dataset.received:
        raise UploadError(f"expected bytes from {dataset.received}", 409, dataset.received)
    if start + len(chunk) > dataset.size:
        raise UploadError(f"more bytes than the {dataset.size:,} announced", 413, dataset.received)
    if start == 0:
        from edtweb.datasets.archive import ArchiveError, check_start

        try:
            check_start(chunk[:512], dataset.filename)
        except ArchiveError as exc:
            raise UploadError(str(exc), 415, 0) from None
    with dataset.archive_path.open("r+b") as f:
        f.seek(start)
        f.write(chunk)
        f.truncate()
    Dataset.objects.filter(pk=dataset.pk).update(received=start + len(chunk))
    return start + len(chunk)


def finish_upload(dataset: Dataset) -> None:
    """All bytes are in: prepare the dataset on a worker host's control worker (it can take
    a while; ``manage.py edt_prepare_dataset``, workers/control.py)."""
    from edtweb.celery import queue_control
    from workers.control import PREPARE_DATASET

    if dataset.received != dataset.size:
        raise UploadError(
            f"only {dataset.received:,} of {dataset.size:,} bytes arrived", 409, dataset.received
        )
    updated = Dataset.objects.filter(pk=dataset.pk, status=Dataset.Status.UPLOADING).update(
        status=Dataset.Status.PREPARING
    )
    if updated:
        queue_control(PREPARE_DATASET, dataset.pk, str(dataset.root / "prepare.log"),
                      lambda why: fail(dataset, f"the preparation {why}"))  # fmt: skip


def register_in_place(owner: Any, name: str, given: str) -> Dataset:
    """A dataset read where it lies, under a data root (docs/architecture.md, "Datasets in
    place"): nothing is copied; it is checked from a sample on a control worker, as an
    upload is prepared. Refused with 400 (the path: ``..``, under no root, a link out of
    one, not there) or 403 (the root's rule leaves ``owner`` out)."""
    from edtweb.datasets.roots import PathRefused, judged

    if not name.strip():
        raise UploadError("give the dataset a name")
    try:
        path = judged(owner, given)
    except PathRefused as exc:
        raise UploadError(str(exc)) from None
    except PermissionError as exc:
        raise UploadError(str(exc), 403) from None
    dataset = Dataset.objects.create(
        owner=owner, name=name.strip(), filename=given.strip(), source=str(path),
        status=Dataset.Status.PREPARING,
    )  # fmt: skip
    dataset.root.mkdir(parents=True, exist_ok=True)
    from edtweb.celery import queue_control
    from workers.control import PREPARE_DATASET

    queue_control(PREPARE_DATASET, dataset.pk, str(dataset.root / "prepare.log"),
                  lambda why: fail(dataset, f"the check {why}"))  # fmt: skip
    return dataset


def run_preparation(dataset_pk: int) -> None:
    """The preparation (what ``edt_prepare_dataset`` runs), if this start may run it."""
    if _begin_preparation(dataset_pk):
        prepare(Dataset.objects.get(pk=dataset_pk))


def _begin_preparation(dataset_pk: int) -> bool:
    """Count this start of the preparation (a claim: only a PREPARING dataset is prepared).
    False when there is nothing to prepare, or when this start follows a second loss of its
    process: the dataset is then failed with a message that says so."""
    claimed = Dataset.objects.filter(pk=dataset_pk, status=Dataset.Status.PREPARING).update(
        attempts=F("attempts") + 1
    )
    if claimed != 1:
        return False
    dataset = Dataset.objects.get(pk=dataset_pk)
    if dataset.attempts <= TRIES:
        if dataset.attempts > 1:
            log.warning("dataset %s: its preparation was interrupted; again", dataset_pk)
        return True
    fail(dataset, INTERRUPTED)
    return False


def prepare(dataset: Dataset) -> None:
    """Extract, detect, describe, draw thumbnails; the dataset ends READY or FAILED. A start
    after an interrupted one extracts again while the archive is there (what the other left
    is removed first), else describes what it extracted."""
    from edtweb.datasets.archive import ArchiveError, extract
    from workers.learner.datasets import DatasetError

    last = [0.0]

    def progress(done: int, total: int) -> None:
        if time.monotonic() - last[0] > 0.3:
            last[0] = time.monotonic()
            fraction = 0.8 * done / total if total else 0.0
            Dataset.objects.filter(pk=dataset.pk).update(progress=fraction)

    try:
        if dataset.archive_path.exists() and not dataset.in_place:
            shutil.rmtree(dataset.data_dir, ignore_errors=True)
            extract(dataset.archive_path, dataset.data_dir, progress=progress,
                    name=dataset.filename)  # fmt: skip
            dataset.archive_path.unlink(missing_ok=True)
        describe_and_draw(dataset)
    except (ArchiveError, DatasetError) as exc:
        fail(dataset, str(exc))
    except Exception as exc:  # a bug of ours: say so rather than leave it PREPARING
        log.exception("dataset %s: preparation failed", dataset.pk)
        fail(dataset, f"preparation failed unexpectedly ({type(exc).__name__}: {exc})")


def describe_and_draw(dataset: Dataset) -> None:
    from workers.learner.datasets import describe, detect_format

    summary = describe(dataset.data_dir)
    draw_thumbnails(dataset)
    Dataset.objects.filter(pk=dataset.pk).update(
        status=Dataset.Status.READY,
        format=detect_format(dataset.data_dir),
        summary=summary,
        progress=1.0,
        error="",
    )


def fail(dataset: Dataset, message: str) -> None:
    if not dataset.in_place:  # a dataset in place is never deleted, only forgotten
        shutil.rmtree(dataset.data_dir, ignore_errors=True)
    dataset.archive_path.unlink(missing_ok=True)
    Dataset.objects.filter(pk=dataset.pk).update(status=Dataset.Status.FAILED, error=message)


def draw_thumbnails(dataset: Dataset) -> None:
    """A few PNGs per class from the training split, for the dataset's page."""
    import numpy as np
    from PIL import Image

    from workers.learner.datasets import labels_of, load_dataset

    train, _test, classes = load_dataset(dataset.data_dir)
    labels = labels_of(train)
    dataset.thumbs_dir.mkdir(parents=True, exist_ok=True)
    for label in range(len(classes)):
        picks = (labels == label).nonzero().flatten()[:THUMBS_PER_CLASS].tolist()
        for i, index in enumerate(picks):  # the only samples read: a few per class
            image = train[index][0]
            pixels = (image.clamp(0, 1) * 255).byte().permute(1, 2, 0).numpy()
            if pixels.shape[2] == 1:
                pixels = pixels[:, :, 0]
            picture = Image.fromarray(np.ascontiguousarray(pixels)).resize(
                (64, 64), Image.Resampling.NEAREST
            )
            picture.save(dataset.thumbs_dir / f"{label:03d}-{i}.png")


def thumbnails(dataset: Dataset) -> list[dict[str, Any]]:
    classes = dataset.summary.get("classes", [])
    shown = []
    for path in sorted(dataset.thumbs_dir.glob("*.png")) if dataset.thumbs_dir.exists() else []:
        label = int(path.name.split("-")[0])
        shown.append({"file": path.name, "label": classes[label] if label < len(classes) else ""})
    return shown


def create_demo(owner: Any) -> Dataset:
    """The demo dataset of a fresh install: synthetic, in the CIFAR-10 batch format."""
    from workers.learner.datasets import write_cifar10

    dataset = Dataset.objects.create(
        owner=owner,
        name="CIFAR-10 demo (synthetic)",
        filename="generated",
        status=Dataset.Status.PREPARING,
    )
    write_cifar10(dataset.data_dir, train=5000, test=1000)
    size = sum(p.stat().st_size for p in dataset.data_dir.rglob("*") if p.is_file())
    Dataset.objects.filter(pk=dataset.pk).update(size=size, received=size)
    describe_and_draw(dataset)
    dataset.refresh_from_db()
    return dataset


def delete(dataset: Dataset) -> None:
    """Its files under the data directory; a dataset in place keeps its own where it is."""
    shutil.rmtree(dataset.root, ignore_errors=True)
    dataset.delete()
