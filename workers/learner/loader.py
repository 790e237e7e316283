"""The input pipeline of a learner (docs/architecture.md, "Input pipeline"): its samples
come through ``torch.utils.data.DataLoader`` worker processes, in exactly the elastic
protocol's order.

:class:`ElasticOrder` is the DataLoader's batch sampler: from a place (epoch, iteration,
group size, rank) it yields this rank's micro-batches of every iteration to come, each
iteration's slice of ``perm(seed, epoch)`` as ``partition.py`` cuts it, so that a step
trains on what it would in memory, at any size. :class:`Feed` keeps one DataLoader per
learner, its workers persistent: a step that follows the last one takes the batches the
workers have decoded ahead; a step elsewhere (a resize, a new rank, a checkpoint's step)
places the order there and restarts the iteration on the same workers, without a cold
start. The workers are forked from the learner, so they run in its sandbox, under its
limits.

A goodput-mode job, whose global batch moves within an epoch, is read the same way through
:class:`GoodputOrder`, whose place counts the samples done rather than iterations.

In-memory datasets (CIFAR, NPZ: a ``TensorDataset``) keep the learner's own gather, as
fast as a plain loop, unless the job asks for loader workers or augmentation.
"""

from __future__ import annotations

import multiprocessing
import os
import resource
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler, TensorDataset

from workers.learner.partition import micro_batches, permutation, slice_bounds
from workers.learner.spec import JobSpec

PREFETCH = 4  # micro-batches each worker decodes ahead
MOST_WORKERS = 8  # the default's cap: past it a slot's share seldom pays on one host
PAD = 4  # augmentation's random crop: pixels of reflection padding on each side
NORM_SAMPLES = 256  # samples the normalisation's per-channel statistics are taken from
# A batch not decoded in this long fails the learner (a worker stuck, not slow) rather
# than leaving the job waiting for ever
LOADER_TIMEOUT = 600.0

# ElasticOrder's: epoch, iteration, group size, rank; GoodputOrder's: epoch, samples done
# in the epoch, global batch, group size, rank
Place = tuple[int, ...]
Batches = list[tuple[Any, Any]]


def peak_memory() -> str:
    """This process's peak resident memory and address space, and its reaped children's
    (the loader workers) largest peak, in MiB, as the learner's log says at its end."""
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    kib = {key: int(status.get(key, "0 kB").split()[0]) for key in ("VmHWM", "VmPeak")}
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB on Linux
    return (f"resident {kib['VmHWM'] >> 10} MiB, address space {kib['VmPeak'] >> 10} MiB, "
            f"largest worker resident {children >> 10} MiB")  # fmt: skip


def default_workers(cores: int | None = None, slots: int | None = None) -> int:
    """Loader workers per learner when the job names none: the slot's share of its host's
    cores (``EDT_HOST_SLOTS``, set by the worker host), one left to the learner itself."""
    cores = cores or os.cpu_count() or 1
    slots = slots or int(os.environ.get("EDT_HOST_SLOTS") or 1)
    return max(1, min(MOST_WORKERS, cores // max(1, slots) - 1))


class ElasticOrder(Sampler[list[Any]]):
    """This rank's micro-batches from a place on: iteration ``t`` of epoch ``e`` is the
    rank's slice of ``perm(seed, e)[t*B:(t+1)*B]``, cut at ``cap`` (0: none). With
    ``keyed`` each index comes as ``(epoch, index)``, for augmentation seeded by both."""

    def __init__(self, samples: int, batch: int, seed: int, epochs: int, cap: int,
                 keyed: bool = False) -> None:  # fmt: skip
        self.samples, self.batch, self.seed = samples, batch, seed
        self.epochs, self.cap, self.keyed = epochs, cap, keyed
        self.per_epoch = samples // batch
        self.place: Place = (0, 0, 1, 0)

    def pieces(self, size: int, rank: int) -> int:
        """Micro-batches per iteration for ``rank`` of ``size``."""
        lo, hi = slice_bounds(self.batch, size, rank)
        return len(micro_batches(lo, hi, self.cap))

    def place_at(self, counters: Mapping[str, int], batch: int, size: int, rank: int) -> Place:
        """The place of the learner's next iteration (its counters) for ``rank`` of ``size``."""
        return (counters["epoch"], counters["iteration"], size, rank)

    def count(self, place: Place) -> int:
        """Micro-batches of the iteration at ``place``."""
        return self.pieces(place[2], place[3])

    def after(self, place: Place) -> Place:
        """The place of the iteration that follows the one at ``place``."""
        epoch, iteration, size, rank = place
        if iteration + 1 < self.per_epoch:
            return (epoch, iteration + 1, size, rank)
        return (epoch + 1, 0, size, rank)

    def __iter__(self) -> Iterator[list[Any]]:
        epoch, iteration, size, rank = self.place
        lo, hi = slice_bounds(self.batch, size, rank)
        while epoch < self.epochs:
            order = permutation(self.samples, self.seed, epoch)
            for t in range(iteration, self.per_epoch):
                mine = order[t * self.batch + lo : t * self.batch + hi]
                for a, b in micro_batches(0, len(mine), self.cap):
                    yield [(epoch, i) for i in mine[a:b]] if self.keyed else mine[a:b]
            epoch, iteration = epoch + 1, 0

    def __len__(self) -> int:
        epoch, iteration, size, rank = self.place
        left = max(0, (self.epochs - epoch) * self.per_epoch - iteration)
        return left * self.pieces(size, rank)


class GoodputOrder(Sampler[list[Any]]):
    """A goodput-mode job's micro-batches from a place (epoch, samples done in the epoch,
    global batch, group size, rank) on: each iteration the rank's slice of the next
    ``batch`` samples of ``perm(seed, epoch)`` (partition.rank_slice), cut at the job's
    micro-batch cap; an epoch ends when no whole batch is left. The batch changes
    only with a new generation, and a new place, so it is fixed from a place on."""

    def __init__(self, samples: int, seed: int, epochs: int, cap: int,
                 keyed: bool = False) -> None:  # fmt: skip
        self.samples, self.seed, self.epochs = samples, seed, epochs
        self.cap, self.keyed = cap, keyed
        self.place: Place = (0, 0, 1, 1, 0)

    def place_at(self, counters: Mapping[str, int], batch: int, size: int, rank: int) -> Place:
        return (counters["epoch"], counters["sample"], batch, size, rank)

    def count(self, place: Place) -> int:
        _epoch, _start, batch, size, rank = place
        lo, hi = slice_bounds(batch, size, rank)
        return len(micro_batches(lo, hi, self.cap))

    def after(self, place: Place) -> Place:
        epoch, start, batch, size, rank = place
        if start + 2 * batch <= self.samples:
            return (epoch, start + batch, batch, size, rank)
        return (epoch + 1, 0, batch, size, rank)

    def __iter__(self) -> Iterator[list[Any]]:
        epoch, start, batch, size, rank = self.place
        lo, hi = slice_bounds(batch, size, rank)
        cap = self.cap
        while epoch < self.epochs:
            order = permutation(self.samples, self.seed, epoch)
            while start + batch <= self.samples:
                mine = order[start + lo : start + hi]
                for a, b in micro_batches(0, len(mine), cap):
                    yield [(epoch, i) for i in mine[a:b]] if self.keyed else mine[a:b]
                start += batch
            epoch, start = epoch + 1, 0

    def __len__(self) -> int:
        epoch, start, batch, _size, _rank = self.place
        per_epoch = self.samples // batch
        left = max(0, (self.samples - start) // batch + (self.epochs - epoch - 1) * per_epoch)
        return left * self.count(self.place)


class Feed:
    """One learner's DataLoader over its training set, read in its order's places."""

    def __init__(
        self, dataset: Dataset[Any], order: ElasticOrder | GoodputOrder, workers: int, pin: bool
    ) -> None:
        self.order = order
        self.workers = workers
        self.loader = DataLoader(
            dataset, batch_sampler=order, num_workers=workers, pin_memory=pin,
            persistent_workers=workers > 0, prefetch_factor=PREFETCH if workers else None,
            timeout=LOADER_TIMEOUT if workers else 0,
            multiprocessing_context="fork" if workers else None,
        )  # fmt: skip
        self.next: Place | None = None  # where the running iteration stands
        self.batches: Iterator[Any] | None = None
        self.restarts = 0  # iterations started: 1, then one per place out of sequence

    def start(self, place: Place) -> None:
        """Start the workers decoding from ``place`` (before READY: forked before the
        learner's threads start, and the first step finds its batches waiting)."""
        if self.batches is None:
            _forget_temp_dir()
        self.order.place = place
        self.batches = iter(self.loader)
        self.next = place
        self.restarts += 1

    def place(self, counters: Mapping[str, int], batch: int, size: int, rank: int) -> Place:
        """Where the learner's next iteration reads, from its counters, at the global
        ``batch``, for ``rank`` of ``size``."""
        return self.order.place_at(counters, batch, size, rank)

    def take(self, place: Place) -> Batches:
        """The micro-batches of the iteration at ``place``."""
        if self.next != place or self.batches is None:
            self.start(place)
        assert self.batches is not None
        out = [next(self.batches) for _ in range(self.order.count(place))]
        self.next = self.order.after(place)
        return [(x, y) for x, y in out]


def _forget_temp_dir() -> None:
    """multiprocessing keeps the temporary folder it made once per process, and a learner
    inherits its fork server's, made before the sandbox gave the learner a private /tmp
    where it does not exist: forgotten, the workers make their own there, for the sockets
    that pass their batches' file descriptors."""
    config: dict[str, Any] = multiprocessing.current_process()._config  # type: ignore[attr-defined]
    config.pop("tempdir", None)


def feed_for(
    dataset: Dataset[Any], spec: JobSpec, pin: bool, goodput: bool
) -> tuple[Dataset[Any], Feed | None]:
    """The dataset as the learner trains on it (augmented where the job asks) and its feed,
    in goodput mode's order where ``goodput``; None: the learner gathers its batches
    itself (an in-memory dataset the job asks no workers nor augmentation of)."""
    if isinstance(dataset, TensorDataset) and not (spec.loader_workers or spec.augment):
        return dataset, None
    samples = len(dataset)  # type: ignore[arg-type]
    keyed = bool(spec.augment)
    if keyed:
        dataset = Augmented(dataset, spec.seed, statistics(dataset))
    cap = spec.max_micro_batch
    order: ElasticOrder | GoodputOrder = ElasticOrder(
        samples, spec.batch_size, spec.seed, spec.epochs, cap, keyed
    )
    if goodput:
        order = GoodputOrder(samples, spec.seed, spec.epochs, cap, keyed)
    workers = spec.loader_workers or default_workers()
    return dataset, Feed(dataset, order, workers, pin)


def evaluation(dataset: Dataset[Any], lo: int, hi: int, chunk: int, workers: int) -> Any:
    """Samples ``lo..hi`` of a test set in chunks, decoded by ``workers`` processes."""
    part = torch.utils.data.Subset(dataset, range(lo, hi))
    return DataLoader(part, batch_size=chunk, num_workers=workers,
                      multiprocessing_context="fork" if workers else None)  # fmt: skip


def for_evaluation(dataset: Dataset[Any], spec: JobSpec, train: Dataset[Any]) -> Dataset[Any]:
    """The test set as an augmented job evaluates it: normalised as its training set."""
    if isinstance(train, Augmented):
        return Normalised(dataset, train.mean, train.std)
    return dataset


# --------------------------------------------------------------------------- augmentation


def statistics(dataset: Dataset[Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel mean and standard deviation of the first samples (the same on every
    learner: the normalisation is part of the model's input)."""
    count = min(NORM_SAMPLES, len(dataset))  # type: ignore[arg-type]
    x = torch.stack([dataset[i][0] for i in range(count)]).float()
    dims = [d for d in range(x.dim()) if d != 1]
    return x.mean(dim=dims), x.std(dim=dims).clamp_min(1e-6)


class Normalised(Dataset[tuple[torch.Tensor, Any]]):
    def __init__(self, dataset: Dataset[Any], mean: torch.Tensor, std: torch.Tensor) -> None:
        self.dataset, self.mean, self.std = dataset, mean, std
        self.labels = getattr(dataset, "labels", None)

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> tuple[torch.Tensor, Any]:
        x, y = self.dataset[index]
        return (x - self.mean[:, None, None]) / self.std[:, None, None], y


class Augmented(Normalised):
    """A random crop (after ``PAD`` pixels of reflection), a horizontal flip and the
    normalisation; each sample's draws come from (job seed, epoch, index) alone, so that a
    sample is augmented the same at any number of workers, in any worker."""

    def __init__(self, dataset: Dataset[Any], seed: int,
                 stats: tuple[torch.Tensor, torch.Tensor]) -> None:  # fmt: skip
        super().__init__(dataset, *stats)
        self.seed = seed

    def __getitem__(self, key: Any) -> tuple[torch.Tensor, Any]:
        if isinstance(key, int):  # the rehearsal's and the check's plain indices
            return super().__getitem__(key)
        epoch, index = key
        x, y = super().__getitem__(index)
        rng = np.random.default_rng([self.seed, epoch, index])
        top, left = (int(v) for v in rng.integers(0, 2 * PAD + 1, 2))
        h, w = x.shape[-2:]
        padded = torch.nn.functional.pad(x[None], (PAD,) * 4, mode="reflect")[0]
        x = padded[:, top : top + h, left : left + w]
        return (x.flip(-1) if rng.integers(0, 2) else x).contiguous(), y
