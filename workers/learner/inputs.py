"""A learner's input (docs/architecture.md, "Input pipeline"): its datasets, and each
iteration's micro-batches of this rank's share of the global batch, in the elastic
protocol's order (partition.py), built ahead where that pays.

:class:`Inputs` holds the training and test sets (an in-memory one moved onto a GPU where
it fits, ``DEVICE_DATA_SHARE``), the epochs' orders, and the DataLoader feed where one
decodes the samples (loader.py); where none does, it gathers the batches itself, a step
ahead on a thread (:class:`Prefetcher`). What decides a batch (epoch, iteration or samples
done, group size, rank) comes in with each call: the same call gives the same samples on
any learner.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset, TensorDataset

from workers.learner import loader
from workers.learner.contract import ModelDefinition
from workers.learner.loader import Batches
from workers.learner.partition import (
    iterations_per_epoch,
    micro_batches,
    permutation,
    slice_bounds,
)
from workers.learner.spec import JobSpec

EVAL_CHUNK = 512
INLINE_SECONDS = 0.002  # a batch built faster than this is built in the step (Prefetcher)
DEVICE_DATA_SHARE = 0.25  # an in-memory dataset up to this share of a GPU's memory lives there


class Prefetcher:
    """Builds the next iteration's batches in a background thread while this one trains,
    where building them takes long enough for that to pay.

    Keyed by what decides a batch (epoch, iteration, group size, rank): a key that does not
    match, after a resize say, is built again in the step, so the order never changes.
    Batches whose last build took under ``INLINE_SECONDS`` (a tensor dataset's gather on
    CPU: about 0.1 ms) are built in the step instead: handing them to a thread cost more
    than that, about 0.25 ms of CPU a step on the small CNN (by the profile, partly its
    first layers reading a batch from another core's cache; bench/results/engine.md,
    section 10). With ``always`` (a CUDA device fed from the host: pinned memory, copies
    that overlap) every batch goes ahead; a dataset resident on the GPU is gathered there
    in the step, as a plain loop does. ``clock`` times the builds (a test's own, to decide
    on known times).
    """

    def __init__(
        self, always: bool = False, clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="edt-prefetch")
        self.always = always
        self.clock = clock
        self.key: tuple[int, ...] | None = None
        self.future: Future[list[tuple[Any, Any]]] | None = None
        self.seconds = math.inf  # the last build's time: ahead until one shows it cheap
        self.hits = 0

    def take(self, key: tuple[int, ...]) -> list[tuple[Any, Any]] | None:
        future, self.future = self.future, None
        if future is None or self.key != key:
            return None
        self.hits += 1
        return future.result()

    def build(self, build: Any, *args: Any) -> list[tuple[Any, Any]]:
        """Build (in the step, or on the thread), timed."""
        started = self.clock()
        batches: list[tuple[Any, Any]] = build(*args)
        self.seconds = self.clock() - started
        return batches

    def wanted(self) -> bool:
        return self.always or self.seconds >= INLINE_SECONDS

    def ahead(self, key: tuple[int, ...], build: Any, *args: Any) -> None:
        self.key = key
        self.future = self.pool.submit(self.build, build, *args)


class Inputs:
    """A learner's datasets and batches (see the module)."""

    def __init__(self, spec: JobSpec, device: torch.device) -> None:
        self.spec, self.device = spec, device
        self.train_set: Dataset[Any] = TensorDataset(torch.empty(0), torch.empty(0))
        self.test_set: Dataset[Any] = self.train_set
        self.feed: loader.Feed | None = None  # the DataLoader's, where one feeds it (load)
        self.prefetch = Prefetcher(always=device.type == "cuda")
        self.per_epoch = 0  # whole global batches of the spec's size in an epoch
        self._orders: dict[int, list[int]] = {}
        self._order_tensor: tuple[int, torch.Tensor] = (-1, torch.empty(0, dtype=torch.long))

    def __len__(self) -> int:
        """The training set's samples."""
        return len(self.train_set)  # type: ignore[arg-type]

    def load(self, defn: ModelDefinition) -> None:
        """The definition's datasets (or the job's data), where they will be read from."""
        spec = self.spec
        self.train_set, self.test_set = (self.resident(d) for d in self._datasets(defn))
        # Batches gathered on the device (a resident dataset) need no copy to overlap: two
        # gathers in the step cost less than handing them to a thread and taking them back
        self.prefetch.always = self.device.type == "cuda" and not on_device(self.train_set)
        # through DataLoader workers unless gathered in memory (loader.py)
        self.train_set, self.feed = loader.feed_for(
            self.train_set, spec, self.device.type == "cuda", spec.goodput
        )
        self.test_set = loader.for_evaluation(self.test_set, spec, self.train_set)

    def count_iterations(self) -> int:
        """Whole global batches of the spec's size in an epoch (raises where the training
        set holds fewer samples than one)."""
        self.per_epoch = iterations_per_epoch(len(self), self.spec.batch_size)
        return self.per_epoch

    def _datasets(self, defn: ModelDefinition) -> tuple[Dataset[Any], Dataset[Any]]:
        if defn.get_datasets is not None:
            return defn.get_datasets(self.spec.data)
        from workers.learner.datasets import load_dataset

        train, test, _classes = load_dataset(Path(self.spec.data), self.spec.image_size)
        return train, test

    def resident(self, dataset: Dataset[Any]) -> Dataset[Any]:
        """On a GPU, an in-memory dataset that takes at most ``DEVICE_DATA_SHARE`` of the
        device's memory is moved there once, as a plain loop keeps it: each step's batch is
        then a gather on the device, with no copy from the host and nothing to wait for."""
        if self.device.type != "cuda" or not isinstance(dataset, TensorDataset):
            return dataset
        size = sum(t.nbytes for t in dataset.tensors)
        if size > DEVICE_DATA_SHARE * torch.cuda.get_device_properties(self.device).total_memory:
            return dataset
        return TensorDataset(*(t.to(self.device) for t in dataset.tensors))

    def start(self, counters: Mapping[str, int], batch: int) -> None:
        """Start the feed's workers decoding where training will resume (``counters``, at
        the global ``batch``), if a feed."""
        if self.feed is not None:
            self.feed.start(self.feed.place(counters, batch, 1, 0))

    def order(self, epoch: int) -> list[int]:
        """The epoch's order of the training set (the protocol's, partition.permutation)."""
        if epoch not in self._orders:
            self._orders = {e: o for e, o in self._orders.items() if e >= epoch - 1}
            self._orders[epoch] = permutation(len(self), self.spec.seed, epoch)
        return self._orders[epoch]

    def my_indices(self, epoch: int, iteration: int, size: int, rank: int) -> torch.Tensor:
        """This rank's samples at ``iteration``: a slice of the epoch's order kept as a
        tensor (partition.rank_indices, without a list of Python ints a step)."""
        B = self.spec.batch_size
        return self.my_slice(epoch, iteration * B, B, size, rank)

    def my_slice(self, epoch: int, start: int, batch: int, size: int, rank: int) -> torch.Tensor:
        """This rank's samples of the global ``batch`` that starts ``start`` samples into the
        epoch's order (partition.rank_slice), a slice of the order kept as a tensor."""
        if self._order_tensor[0] != epoch:
            where = getattr(self.train_set, "tensors", (torch.empty(0),))[0].device
            order = torch.tensor(self.order(epoch), dtype=torch.long, device=where)
            self._order_tensor = (epoch, order)
        lo, hi = slice_bounds(batch, size, rank)
        return self._order_tensor[1][start + lo : start + hi]

    def fed(self, counters: Mapping[str, int], batch: int, size: int, rank: int) -> Batches:
        """The next iteration's micro-batches from the DataLoader's workers, in the
        protocol's order (loader.py): where the ``counters`` say, at the global ``batch``."""
        assert self.feed is not None
        fed = self.feed.take(self.feed.place(counters, batch, size, rank))
        return fed if self.device.type == "cpu" else [
            (self.to_device(x), self.to_device(y)) for x, y in fed]  # fmt: skip

    def batches_for(self, epoch: int, iteration: int, size: int, rank: int) -> Batches:
        """A fixed-batch iteration's micro-batches (prefetched when the key matches), and
        the next iteration's started in the background."""
        key = (epoch, iteration, size, rank)
        batches = self.prefetch.take(key)
        if batches is None:
            batches = self.prefetch.build(self.build, self.my_indices(epoch, iteration, size, rank))
        nxt = (epoch, iteration + 1) if iteration + 1 < self.per_epoch else (epoch + 1, 0)
        if nxt[0] < self.spec.epochs and self.prefetch.wanted():
            indices = self.my_indices(*nxt, size, rank)
            self.prefetch.ahead((*nxt, size, rank), self.build, indices)
        if self.device.type == "cpu":
            return batches
        return [(self.to_device(x), self.to_device(y)) for x, y in batches]

    def goodput_batches(
        self, epoch: int, start: int, B: int, size: int, rank: int, cap: int
    ) -> Batches:
        """A goodput-mode iteration's micro-batches, of at most ``cap`` samples: the
        epoch's order from ``start`` (the samples done), at the global batch ``B``
        (prefetched when the key matches), and the next iteration's started."""
        n = len(self)
        key = (epoch, start, B, size, rank, cap)
        batches = self.prefetch.take(key)
        if batches is None:
            indices = self.my_slice(epoch, start, B, size, rank)
            batches = self.prefetch.build(self.build, indices, cap)
        nxt = (epoch, start + B) if start + 2 * B <= n else (epoch + 1, 0)
        if nxt[0] < self.spec.epochs and self.prefetch.wanted():
            indices = self.my_slice(nxt[0], nxt[1], B, size, rank)
            self.prefetch.ahead((*nxt, B, size, rank, cap), self.build, indices, cap)
        if self.device.type == "cpu":
            return batches
        return [(self.to_device(x), self.to_device(y)) for x, y in batches]

    def build(self, indices: list[int] | torch.Tensor, cap: int | None = None) -> Batches:
        """The micro-batches of one iteration, on the host (pinned for a CUDA device), of at
        most ``cap`` samples (the job's cap unless given)."""
        out = []
        cap = self.spec.max_micro_batch if cap is None else cap
        for lo, hi in micro_batches(0, len(indices), cap):
            x, y = gather(self.train_set, indices[lo:hi])
            if self.device.type == "cuda":
                x, y = _pin(x), _pin(y)
            out.append((x, y))
        return out

    def batch(self, dataset: Dataset[Any], indices: list[int]) -> tuple[Any, Any]:
        """The samples ``indices`` of ``dataset``, on the device."""
        x, y = gather(dataset, indices)
        return self.to_device(x), self.to_device(y)

    def to_device(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return value.to(self.device, non_blocking=True)
        return value

    def evaluation(self, size: int, rank: int) -> tuple[int, int, Callable[[], Iterator[Any]]]:
        """This rank's share [lo, hi) of the test set, and its chunks on the device."""
        lo, hi = slice_bounds(len(self.test_set), size, rank)  # type: ignore[arg-type]

        def chunks() -> Iterator[Any]:
            if self.feed is not None:  # decoded by as many workers as training's
                workers = self.feed.workers
                for x, y in loader.evaluation(self.test_set, lo, hi, EVAL_CHUNK, workers):
                    yield self.to_device(x), self.to_device(y)
                return
            for start in range(lo, hi, EVAL_CHUNK):
                yield self.batch(self.test_set, list(range(start, min(start + EVAL_CHUNK, hi))))

        return lo, hi, chunks


def gather(dataset: Dataset[Any], indices: list[int] | torch.Tensor) -> tuple[Any, Any]:
    """The samples ``indices`` of ``dataset`` as one batch (a tensor dataset's, indexed)."""
    if isinstance(dataset, TensorDataset):
        x, y = dataset.tensors[0], dataset.tensors[1]
        idx = indices if isinstance(indices, torch.Tensor) else torch.tensor(
            indices, dtype=torch.long, device=x.device)  # fmt: skip
        return x[idx], y[idx]
    if isinstance(indices, torch.Tensor):
        indices = indices.tolist()  # a user's dataset is indexed with Python ints
    return torch.utils.data.default_collate([dataset[i] for i in indices])  # type: ignore[no-any-return]


def on_device(dataset: Dataset[Any]) -> bool:
    """Whether ``dataset`` is a tensor dataset held in a GPU's memory (``resident``)."""
    return isinstance(dataset, TensorDataset) and all(
        t.device.type != "cpu" for t in dataset.tensors
    )


def _pin(value: Any) -> Any:
    """A host tensor in pinned memory (one already on the device stays there)."""
    if isinstance(value, torch.Tensor) and value.device.type == "cpu":
        return value.pin_memory()
    return value
