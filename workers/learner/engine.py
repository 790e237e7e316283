"""The elastic training loop of one learner (docs/architecture.md, "Elastic training protocol").

Rank 0 adds the job's generation and stop flag, as its watch thread last read them from
Redis, to the gradient all-reduce, so every member learns the same decision at the same
boundary without an extra collective and without a Redis round trip in the step. The host
reads that agreement one step late, once the next step is queued (``train_step``), so on a
GPU it never waits for the device inside a step; a learner alone runs no collective. The
gradients are all-reduced in buckets launched during backward (overlap.py); the next
iteration's batches are built by a background thread while this one trains. On a change
the members form the new generation's process group and rank 0 broadcasts the whole
training state. A collective that raises or times out is reported; the learner waits for
the next generation and redoes the iteration (no optimizer step was taken).

A goodput-mode job (docs/architecture.md, "Goodput mode") also measures its gradient
noise scale from the gradients the step makes anyway (goodput.py), trains at the global
batch each generation names, with the learning rate scaled by AdaScale's gain, and counts
its progress in base-batch steps; a fixed-batch job runs none of that.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import Dataset, TensorDataset

from protocol.exits import Exit
from protocol.jobstore import JobStore
from workers.learner import checkpoint, loader, statecast
from workers.learner.contract import (
    ModelDefinition,
    UserCodeError,
    is_wmla_script,
    load_definition,
    run_script,
    write_config,
)
from workers.learner.goodput import NoiseScale, micro_cap, small_batch
from workers.learner.overlap import BucketFailure, GradBuckets, gloo_or_nccl_allreduce
from workers.learner.partition import (
    iterations_per_epoch,
    micro_batches,
    permutation,
    rank_slice,
    slice_bounds,
)
from workers.learner.records import RecordWriter
from workers.learner.reducer import TorchReducer, UnusedParameters
from workers.learner.rendezvous import RedisStore, gloo_options
from workers.learner.spec import JobSpec

log = logging.getLogger("edt.learner")
JOIN_POLL_SECONDS = 0.01
JOIN_PATIENCE_SECONDS = 600.0
EVAL_CHUNK = 512
WATCH_SECONDS = 0.5  # rank 0's watch reads the generation and stop flag at least this often
WATCH_RETRY_SECONDS = 0.5  # while Redis does not answer
INLINE_SECONDS = 0.002  # a batch built faster than this is built in the step (Prefetcher)
MAX_UNWRITTEN = 100_000  # train records kept while rank 0's may be unwritten (Redis away)
DEVICE_DATA_SHARE = 0.25  # an in-memory dataset up to this share of a GPU's memory lives there
AGREED = 5  # values the all-reduce carries after the gradients (_agreement_tail)
LOCAL_SQR = AGREED  # goodput mode: then the sum of the ranks' local squared norms


class CollectiveFailure(Exception):
    """A peer died or froze: the process group is unusable."""


@dataclass
class Agreement:
    gen: int
    stop: bool


@dataclass
class InFlight:
    """A step taken whose agreement the host has not read yet (Learner.train_step)."""

    values: torch.Tensor  # on the device: right answers, loss (+ rank 0's part, all-reduced)
    host: tuple[float, float, float] | None  # alone: generation, stop, records written
    record: dict[str, Any]  # its train record but for loss, accuracy and rate
    epoch: int
    iteration: int
    started: float  # perf_counter at its start
    batch: int  # its global batch


class ControlWatch(threading.Thread):
    """The job's generation and stop flag as last read from Redis, kept off the step.

    Active only while this learner is rank 0. It reads both when it becomes active, again
    as soon as the job's control channel says one changed (``JobStore.publish_generation``
    and ``request_stop`` publish there), and every ``interval`` seconds besides, for a
    message lost with a connection. Waiting on the channel costs the training process no
    CPU: polling every 20 ms cost the small CNN 3-7 % of its steps at 2 workers on 2 cores.
    A Redis outage leaves the last values in place: training goes on in the current
    generation, and a change published meanwhile is picked up once Redis answers again.
    """

    def __init__(self, jobs: JobStore, slot: str, interval: float = WATCH_SECONDS) -> None:
        super().__init__(name="edt-control-watch", daemon=True)
        self.jobs, self.slot, self.interval = jobs, slot, interval
        self.active = threading.Event()
        self.latest: tuple[int, bool] = (0, False)  # replaced whole: one atomic read
        self.reads = 0
        self.outage_since: float | None = None
        self.channel: Any = None  # the subscription to the job's control channel

    def run(self) -> None:
        while True:
            self.active.wait()
            try:
                self._subscribe()
                gen, stop = self.jobs.poll()  # fails soft: the last answer while Redis is away
                if self.jobs.redis_away:
                    raise ConnectionError("Redis does not answer")
            except Exception as exc:  # Redis down or slow: keep the last values, retry
                self._unsubscribe()
                if self.outage_since is None:
                    self.outage_since = time.monotonic()
                    log.warning("%s: cannot read the generation (%s); training on in "
                                "generation %d", self.slot, exc, self.latest[0])  # fmt: skip
                time.sleep(WATCH_RETRY_SECONDS)
                continue
            if self.outage_since is not None:
                log.info("%s: Redis answers again after %.1f s", self.slot,
                         time.monotonic() - self.outage_since)  # fmt: skip
                self.outage_since = None
            self.latest = (gen, stop)
            self.reads += 1
            try:  # until a change is announced, or the interval is up
                self.channel.get_message(timeout=self.interval)
            except Exception:  # the connection broke: subscribe again, then read
                self._unsubscribe()

    def _subscribe(self) -> None:
        """Subscribe, and wait for Redis to confirm it before the read that follows: a
        change after that read is announced on the channel."""
        if self.channel is not None:
            return
        self.channel = self.jobs.r.pubsub()  # type: ignore[no-untyped-call]
        self.channel.subscribe(self.jobs.key("control"))
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            message = self.channel.get_message(timeout=1.0)
            if message is not None and message["type"] == "subscribe":
                return
        raise ConnectionError("no answer to SUBSCRIBE")

    def _unsubscribe(self) -> None:
        channel, self.channel = self.channel, None
        if channel is not None:
            with contextlib.suppress(Exception):
                channel.close()


class MicroNorms:
    """Goodput mode with one learner: the squared norm of each micro-batch's own gradient,
    summed by a hook on each parameter as backward makes its gradient, before autograd adds
    it to the micro-batches' before (the small batches of the noise scale when no other
    learner's gradient is there to compare with). Hooked only in goodput mode; counts only
    while ``on``."""

    def __init__(self, params: Sequence[torch.Tensor]) -> None:
        device = params[0].device if params else torch.device("cpu")
        self.total = torch.zeros((), dtype=torch.float64, device=device)
        self.on = False
        self.handles = [p.register_hook(self._add) for p in params]  # type: ignore[no-untyped-call]

    def _add(self, grad: torch.Tensor) -> None:
        if self.on:
            self.total += grad.detach().pow(2).sum(dtype=torch.float64)

    def take(self) -> float:
        """The squared norm summed since the last take."""
        value = float(self.total)
        self.total.zero_()
        return value


class Prefetcher:
    """Builds the next iteration's batches in a background thread while this one trains,
    where building them takes long enough for that to pay.

    Keyed by what decides a batch (epoch, iteration, group size, rank): a key that does not
    match, after a resize say, is built again in the step, so the order never changes.
    Batches whose last build took under ``INLINE_SECONDS`` (a tensor dataset's gather on
    CPU: about 0.1 ms) are built in the step instead: handing them to a thread cost more
    than that, about 0.25 ms of CPU a step on the small CNN (by the profile, partly its
    first layers reading a batch from another core's cache; bench/results/engine.md,
    section 10). With ``always`` (a CUDA device: pinned memory, copies that overlap) every
    batch goes ahead. ``clock`` times the builds (a test's own, to decide on known times).
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


class Learner:
    def __init__(self, spec: JobSpec, slot: str, jobs: JobStore, redis_url: str) -> None:
        self.spec = spec
        self.slot = slot
        self.jobs = jobs
        self.rdv = RedisStore(redis_url, jobs.key("rdv"), spec.collective_timeout)
        self.redis_url = redis_url
        self.gloo: Any = None  # the gloo group options, made once (rendezvous.gloo_options)
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.gen = 0
        self.rank = 0
        self.size = 1
        self.hosts = 1  # the hosts its generation spans (train records: per-placement rates)
        self.pg: Any = None
        # The gradient all-reduce with peers: torch's reducer for a native model's
        # fixed-batch step whose every parameter takes part (reducer.py); else the
        # engine's own buckets (overlap.py: goodput mode, WMLA scripts, unused parameters)
        self.reducer: TorchReducer | None = None
        self.buckets: GradBuckets | None = None
        self.spares: statecast.Spares = {}  # memory for the first state received (adopt)
        self.held: list[torch.Tensor] = []  # the rehearsal's gradients, until the first step
        self.ready_at = time.perf_counter()  # READY (run); until then, this learner's making
        # Holds the job's state (rank 0's, or received whole): then a state broadcast
        # lands in new buffers, loaded only once all of it is in, so that a failure
        # midway cannot leave a torn state that this learner might later give on.
        self._has_state = False
        self._torn = False  # a broadcast into its own tensors failed midway
        self.counters = {"epoch": 0, "iteration": 0, "step": 0}
        # The global batch of this iteration: the spec's, fixed; in goodput mode the one the
        # generation names (also kept in the counters, with the samples of the epoch done)
        self.batch = spec.batch_size
        self.noise: NoiseScale | None = None  # goodput mode's statistics (goodput.py)
        self.micro: MicroNorms | None = None  # goodput mode, one learner
        self._micro_sqr: list[tuple[float, int]] = []  # this step's micro-batches' norms
        self._gain = 1.0  # goodput mode: the learning rate's factor in the last step
        self._in_flight: InFlight | None = None  # the step whose agreement is still unread
        self._orders: dict[int, list[int]] = {}
        self._order_tensor: tuple[int, torch.Tensor] = (-1, torch.empty(0, dtype=torch.long))
        self._saved_step = -1
        # Every member builds the record of each step it trains (the loss and right answers
        # are the global batch's, from the all-reduce); rank 0 queues it for its writer
        # thread. A rank 0 killed after the all-reduce takes the records its writer had
        # not written with it, while the others have taken those steps: each step's
        # all-reduce carries the last step Redis took from rank 0, and whoever is rank 0
        # next writes its own copies of the later ones again.
        self.records = RecordWriter(jobs)
        self._unwritten: deque[dict[str, Any]] = deque()  # train records past rank 0's
        self._rank0_written = 0  # the last train step Redis took from rank 0 (all-reduced)
        self._was_rank0 = False  # rank 0 of the last generation this learner trained in
        self._last_test: dict[str, Any] | None = None  # the last evaluation's record
        self.watch = ControlWatch(jobs, slot)
        self.prefetch = Prefetcher(always=self.device.type == "cuda")
        self.feed: loader.Feed | None = None  # the DataLoader's, where one feeds it (adopt)
        self.precision = spec.precision
        # The process whose death ends this learner: the slot's worker (EDT_WATCH_PID), or
        # whoever started it.
        self.parent_pid = int(os.environ.get("EDT_WATCH_PID") or os.getppid())

    # Start-up ----------------------------------------------------------------------------

    def start(self) -> int:
        """Load the user's code and train; returns the exit code. A native module is
        imported; a WMLA script runs as ``__main__`` and its ``train()`` call runs
        :meth:`run` (README, "Models")."""
        self._environment()
        path = Path(self.spec.model)
        if not is_wmla_script(path):
            self.prepare()
            return self.run()
        codes: list[int] = []
        failure: list[BaseException] = []

        def drive(defn: ModelDefinition) -> None:
            try:
                self.adopt(defn)
                codes.append(self.run())
            except BaseException as exc:
                failure.append(exc)
                raise

        workdir = Path(self.spec.workdir)
        os.chdir(workdir)
        if self.spec.hparams:  # a sweep's trial: its values where WMLA puts them
            write_config(workdir, self.spec.hparams)
        torch.manual_seed(self.spec.seed)  # WMLA scripts build their model as they run
        try:
            run_script(path, self.spec.argv, drive)
        except BaseException:
            if not failure:
                raise
        if failure:  # raised in training, whatever the script did with it
            raise failure[0]
        return codes[0]

    def _environment(self) -> None:
        """What WMLA scripts read from the environment (README, "Models")."""
        spec, workdir = self.spec, Path(self.spec.workdir)
        os.environ["EDT_JOB_DATA"] = spec.data  # for WMLA's pth_parameter_mgr
        os.environ["EDT_JOB_EPOCHS"] = str(spec.epochs)
        os.environ["EDT_JOB_LR"] = str(spec.lr)
        os.environ["EDT_JOB_BATCH"] = str(spec.batch_size)
        os.environ["DATA_DIR"] = spec.data
        os.environ["LOG_DIR"] = str(workdir / "driver")
        os.environ["RESULT_DIR"] = str(workdir / "result")
        os.environ["JOB_STATE_DIR"] = str(workdir)
        os.environ["DLI_EXECID"] = spec.exec_id or spec.job_id
        os.environ["EDT_SLOT"] = self.slot
        for name in ("driver", "result"):
            (workdir / name).mkdir(parents=True, exist_ok=True)

    def prepare(self) -> None:
        """Import the user's code, load the data, build the model: all before READY."""
        self._environment()
        torch.manual_seed(self.spec.seed)
        self.adopt(load_definition(Path(self.spec.model), hparams=self.spec.hparams))

    def adopt(self, defn: ModelDefinition) -> None:
        """Take the definition: the job's values (or the script's, where it decides), the
        data, the model and its optimizer, the latest checkpoint."""
        started = time.perf_counter()
        self.defn = defn
        spec, script = self.spec, defn.script_values or {}
        for name in ("epochs", "batch_size"):
            if name in spec.script_decides and script.get(name):
                setattr(spec, name, int(script[name]))
        self.train_set, self.test_set = (self._resident(d) for d in self._datasets())
        # through DataLoader workers unless gathered in memory (loader.py)
        self.train_set, self.feed = loader.feed_for(
            self.train_set, spec, self.device.type == "cuda", spec.goodput
        )
        self.test_set = loader.for_evaluation(self.test_set, spec, self.train_set)
        torch.manual_seed(spec.seed)
        self.model = self.defn.build_model().to(self.device)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        lr = None if defn.style == "wmla" and "lr" in spec.script_decides else spec.lr
        self.optimizer = self.defn.build_optimizer(self.params, lr)  # type: ignore[arg-type]
        self.scaler = self._scaler()
        self.batch = spec.batch_size
        if spec.goodput:  # the sum of the local squared norms rides on the all-reduce too
            self.noise = NoiseScale(base=spec.batch_size)
            self.micro = MicroNorms(self.params)
            self.counters.update(sample=0, batch=self.batch)
        self.per_epoch = iterations_per_epoch(len(self.train_set), spec.batch_size)  # type: ignore[arg-type]
        self.total_steps = self.per_epoch * spec.epochs
        if spec.max_steps > 0:
            self.total_steps = min(self.total_steps, spec.max_steps)
        if defn.callbacks:
            from callbacks import give_params  # workers/compat

            give_params(defn.callbacks, {
                "model": self.model, "optimizer": self.optimizer, "loss_function": defn.loss_fn,
                "epochs": spec.epochs, "batch_size": spec.batch_size,
            })  # fmt: skip
        self._resume_from_checkpoint()
        # a joiner's optimizer has no state yet: memory for the state it will receive
        per_param = 0 if self.optimizer.state else statecast.spare_count(self.optimizer)
        self.spares = statecast.spares_for(self.params, per_param)
        if defn.train_step is None and len(self.train_set):  # type: ignore[arg-type]
            n = min(spec.batch_size, spec.max_micro_batch or spec.batch_size,
                    len(self.train_set))  # type: ignore[arg-type]  # fmt: skip
            x, y = self._batch(self.train_set, list(range(n)))
            held = rehearse(self.model, self.params, defn.loss_fn, x, y, self._autocast)
            if self.noise is None and self.params and len(held) == len(self.params):
                # every parameter takes part (as the rehearsal saw): torch's reducer
                self.reducer = TorchReducer(self.params, spec.bucket_bytes)
            # (on a GPU the caching allocator keeps freed memory for the step anyway)
            self.held = held if self.device.type == "cpu" else []
        if self.reducer is None:
            self._own_buckets()
        if self.feed is not None:  # its workers start decoding where training will resume
            self.feed.start(self.feed.place(self.counters, self.batch, 1, 0))
        log.info("%s: ready in %.2f s (code, %d training samples, model)",
                 self.slot, time.perf_counter() - started, len(self.train_set))  # type: ignore[arg-type]  # fmt: skip

    def _scaler(self) -> torch.amp.GradScaler | None:
        if self.precision != "fp16":
            return None
        if self.device.type != "cuda":
            raise ValueError("fp16 training needs a CUDA device; on CPU choose bf16")
        return torch.amp.GradScaler("cuda")

    def _autocast(self) -> AbstractContextManager[Any]:
        if self.precision == "fp32":
            return nullcontext()
        dtype = torch.bfloat16 if self.precision == "bf16" else torch.float16
        return torch.autocast(self.device.type, dtype=dtype)

    def _datasets(self) -> tuple[Dataset[Any], Dataset[Any]]:
        if self.defn.get_datasets is not None:
            return self.defn.get_datasets(self.spec.data)
        from workers.learner.datasets import load_dataset

        train, test, _classes = load_dataset(Path(self.spec.data), self.spec.image_size)
        return train, test

    def _resident(self, dataset: Dataset[Any]) -> Dataset[Any]:
        """On a GPU, an in-memory dataset that takes at most ``DEVICE_DATA_SHARE`` of the
        device's memory is moved there once, as a plain loop keeps it: each step's batch is
        then a gather on the device, with no copy from the host and nothing to wait for."""
        if self.device.type != "cuda" or not isinstance(dataset, TensorDataset):
            return dataset
        size = sum(t.nbytes for t in dataset.tensors)
        if size > DEVICE_DATA_SHARE * torch.cuda.get_device_properties(self.device).total_memory:
            return dataset
        return TensorDataset(*(t.to(self.device) for t in dataset.tensors))

    def _resume_from_checkpoint(self) -> bool:
        path = checkpoint.latest(Path(self.spec.workdir) / "checkpoints")
        if path is None:
            return False
        state = checkpoint.load(path)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.counters = {k: int(v) for k, v in state["counters"].items()}
        if self.scaler is not None and "scaler" in state:
            self.scaler.load_state_dict(state["scaler"])
        self._load_goodput(state)
        log.info("%s: loaded checkpoint %s (step %d)", self.slot, path.name, self.counters["step"])
        return True

    # The loop ----------------------------------------------------------------------------

    def run(self) -> int:
        """Train until the job ends or this learner leaves it. Returns the exit code."""
        self.ready_at = time.perf_counter()
        self.watch.start()
        self.records.start()
        # Only a generation published after this READY can include this learner.
        seen = self.jobs.generation()
        self.jobs.announce_ready(self.slot)
        gen = self.wait_for_generation(after=seen, member=False)
        while gen is not None:
            if self.slot not in self.jobs.members(gen):
                log.info("%s: not in generation %d; leaving the job", self.slot, gen)
                break
            try:
                self.form_group(gen)
                self.sync_state()
                self._take_batch(gen)
                gen = self.train_until_change()
            except CollectiveFailure as exc:
                log.warning("%s: generation %d failed at step %d: %s",
                            self.slot, self.gen, self.counters["step"], exc)  # fmt: skip
                if self._torn and not self._untear():
                    return Exit.TORN
                self.jobs.report_failure(self.slot, self.gen, self.counters["step"], str(exc))
                self.pg = None
                self.held.clear()  # the next state may come into new buffers: memory for them
                gen = self.wait_for_generation(after=self.gen, member=True)
        return Exit.FINISHED

    def _untear(self) -> bool:
        """After a state broadcast into this joiner's own tensors failed midway: back to
        the latest checkpoint, as it started, so that it never gives a torn state on. False
        where there is none: it then leaves the job, a lost learner to the coordinator."""
        if self._resume_from_checkpoint():
            self._torn = False
            return True
        log.warning("%s: the state it was receiving is incomplete and no checkpoint exists "
                    "to go back to: leaving the job", self.slot)  # fmt: skip
        return False

    def wait_for_generation(self, after: int, member: bool) -> int | None:
        """The next generation that includes this slot; None when it must leave or stop."""
        deadline = time.monotonic() + JOIN_PATIENCE_SECONDS
        while time.monotonic() < deadline:
            if self.jobs.stop_requested() or self.orphaned():
                return None
            latest = self.jobs.generation()
            if latest > after:
                if self.slot in self.jobs.members(latest):
                    return latest
                if member:
                    return None  # dropped from the job: leave
            time.sleep(JOIN_POLL_SECONDS)
        log.warning("%s: no generation took this learner in time; leaving", self.slot)
        return None

    def orphaned(self) -> bool:
        """The process that started this learner is gone (a slot worker killed, say)."""
        try:
            os.kill(self.parent_pid, 0)
            return False
        except PermissionError:  # sandboxed: it runs as another user, and it is there
            return False
        except ProcessLookupError:
            pass
        log.warning("%s: the process that started this learner is gone; leaving", self.slot)
        return True

    def form_group(self, gen: int) -> None:
        members = self.jobs.members(gen)
        self.gen, self.rank, self.size = gen, members.index(self.slot), len(members)
        self.hosts = len({member.rpartition(".")[0] for member in members})
        timeout = datetime.timedelta(seconds=self.spec.collective_timeout)
        store = dist.PrefixStore(f"gen{gen}", self.rdv)  # type: ignore[attr-defined]
        try:
            if self.device.type == "cuda":
                options = dist.ProcessGroupNCCL.Options()
                options._timeout = timeout
                self.pg = dist.ProcessGroupNCCL(store, self.rank, self.size, options)
            else:
                if self.gloo is None:
                    self.gloo = gloo_options(self.redis_url, timeout)
                self.pg = dist.ProcessGroupGloo(store, self.rank, self.size, self.gloo)
        except Exception as exc:
            raise CollectiveFailure(f"could not form generation {gen}: {exc}") from exc
        if self.rank == 0:
            self.watch.latest = (gen, False)
            self.watch.active.set()
            self.jobs.adopt(gen)
            self._write_unwritten_steps()
        else:
            self.watch.active.clear()
        self._was_rank0 = self.rank == 0
        if self.reducer is not None and self.jobs.unused_parameters():
            self._own_buckets()  # a parameter went without a gradient in an earlier step
        if self.buckets is not None:
            self.buckets.hooked(not self._alone())  # alone, backward runs no hook of ours
        log.info("%s: generation %d, rank %d of %d (%.2f s after READY)", self.slot, gen,
                 self.rank, self.size, time.perf_counter() - self.ready_at)  # fmt: skip

    def _own_buckets(self) -> GradBuckets:
        """The engine's own buckets, made on first need: torch's reducer, if any, gives
        way to them for the rest of this learner (every member reads the same flag when
        it forms a generation, so a generation's members all use the same)."""
        if self.buckets is None:
            if self.reducer is not None:
                self.reducer.close()
                self.reducer = None
            spec = self.spec
            caps = (spec.bucket_bytes,) * 2 if spec.bucket_bytes > 0 else ()
            # + right answers, loss, generation, stop, rank 0's last written step (exact as
            # a float32 up to 2**24 steps)
            self.buckets = GradBuckets(self.params, AGREED + (self.noise is not None), *caps)
            self.buckets.hooked(not self._alone())
        return self.buckets

    def collective(self, op: str, tensor: torch.Tensor, **kw: Any) -> None:
        try:
            if op == "allreduce":
                opts = dist.AllreduceOptions()
                opts.reduceOp = kw.get("reduce", dist.ReduceOp.SUM)
                self.pg.allreduce([tensor], opts).wait()
            else:
                opts_b = dist.BroadcastOptions()
                opts_b.rootRank = 0
                self.pg.broadcast([tensor], opts_b).wait()
        except Exception as exc:
            raise CollectiveFailure(str(exc)) from exc

    def sync_state(self) -> None:
        """Rank 0 (the longest-standing member) gives everyone its full training state:
        a small pickled header, one flat byte buffer per part for the small tensors, then
        each large tensor on its own: into a joiner's own tensor at the same place (its
        parameters; its optimizer's state into the spares it made while starting up),
        into new buffers on a learner that holds the state already (statecast.py)."""
        spares, self.spares = self.spares, {}  # for the first state received, if any
        if self.size == 1:
            self._has_state = True
            return
        started = time.perf_counter()
        packed = statecast.Packed(b"", {})
        if self.rank == 0:
            state = self._state(rng=True)
            packed = statecast.pack({"model": state.pop("model"), "rest": state}, self.device)
        length = torch.tensor([len(packed.header)], dtype=torch.int64, device=self.device)
        self.collective("broadcast", length)
        data = torch.empty(int(length.item()), dtype=torch.uint8, device=self.device)
        if self.rank == 0:
            data.copy_(torch.frombuffer(bytearray(packed.header), dtype=torch.uint8))
        self.collective("broadcast", data)
        header = statecast.read_header(data.cpu().numpy().tobytes())
        skeleton = header["skeleton"]
        in_place: set[int] = set()
        if self.rank != 0:
            own: dict[str, Any] | None = None
            if not self._has_state:  # a joiner: its own tensors are the destinations
                own = self._state()
                own = {"model": own.pop("model"), "rest": own}  # the places of rank 0's
            packed.flats = {part: torch.empty(size, dtype=torch.uint8, device=self.device)
                            for part, size in header["sizes"].items()}  # fmt: skip
            packed.bigs, in_place = statecast.destinations(skeleton, own, spares)
            del own
        for flat in packed.flats.values():
            self.collective("broadcast", flat)
        self._torn = self.rank != 0 and bool(in_place)
        for tensor in packed.bigs:
            self.collective("broadcast", tensor)
        if self.rank != 0:
            model = statecast.rebuild(skeleton["model"], packed.flats, packed.bigs)
            skip = statecast.in_place_keys(skeleton["model"], in_place)
            result = self.model.load_state_dict(
                {k: v for k, v in model.items() if k not in skip}, strict=False
            )
            if result.unexpected_keys or set(result.missing_keys) - skip:
                raise RuntimeError(f"the state received does not fit this model: {result}")
            del model, packed.flats["model"]
            self._load_state(statecast.rebuild(skeleton["rest"], packed.flats, packed.bigs))
        self._has_state, self._torn = True, False
        total = sum(header["sizes"].values()) + sum(t.nbytes for t in packed.bigs)
        log.info("%s: state of %.1f MB in %.3f s (%d large tensors)", self.slot, total / 1e6,
                 time.perf_counter() - started, len(packed.bigs))  # fmt: skip

    def _state(self, rng: bool = False) -> dict[str, Any]:
        state: dict[str, Any] = {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "counters": dict(self.counters),
        }
        if self.scaler is not None:
            state["scaler"] = self.scaler.state_dict()
        if self.noise is not None:
            state["goodput"] = self.noise.state_dict()
        if rng:
            state["rng"] = torch.get_rng_state()
        return state

    def _load_state(self, state: dict[str, Any]) -> None:
        """What sync_state received besides the model: optimizer, counters, scaler, RNG."""
        self.optimizer.load_state_dict(state["optimizer"])
        self.counters = {k: int(v) for k, v in state["counters"].items()}
        if self.scaler is not None:
            self.scaler.load_state_dict(state["scaler"])
        self._load_goodput(state)
        torch.set_rng_state(state["rng"].cpu().clone())  # its own storage: a view would crash

    # Goodput mode ---------------------------------------------------------------------------

    def _load_goodput(self, state: dict[str, Any]) -> None:
        """The noise scale's statistics and progress, and the batch, from a state received
        or a checkpoint (one of a fixed-batch run before: the spec's batch, no statistics)."""
        if self.noise is None:
            return
        if "goodput" in state:
            self.noise.load_state_dict(state["goodput"])
        self.counters.setdefault("sample", self.counters["iteration"] * self.spec.batch_size)
        self.batch = self._fit(self.counters.get("batch", self.spec.batch_size))
        self.counters["batch"] = self.batch

    def _fit(self, batch: int) -> int:
        """``batch`` within the job's range and its training set."""
        spec = self.spec
        return max(1, min(max(batch, spec.batch_min), spec.batch_max, len(self.train_set)))  # type: ignore[arg-type]

    def _take_batch(self, gen: int) -> None:
        """The global batch generation ``gen`` names, if it names one (every member reads the
        same key, after the state broadcast: they agree)."""
        if self.noise is None:
            return
        asked = self.jobs.generation_batch(gen)
        if asked > 0:
            self._adopt_batch(gen, asked)
        log.info("%s: generation %d trains at a global batch of %d; progress %.9g base-batch "
                 "steps, %d noise estimates", self.slot, gen, self.batch, self.noise.progress,
                 self.noise.observed)  # fmt: skip

    def _adopt_batch(self, gen: int, asked: int) -> None:
        batch = self._fit(asked)
        if batch != asked:
            log.warning("%s: generation %d asks for a global batch of %d, outside %d..%d "
                        "and the %d samples: training at %d", self.slot, gen, asked,
                        self.spec.batch_min, self.spec.batch_max, len(self.train_set),  # type: ignore[arg-type]
                        batch)  # fmt: skip
        if batch != self.batch:
            log.info("%s: global batch %d -> %d at step %d", self.slot, self.batch, batch,
                     self.counters["step"])  # fmt: skip
        self.batch = self.counters["batch"] = batch

    def _observe(self, tail: list[float]) -> None:
        """This step's small- and big-batch squared norms into the noise scale: the ranks'
        local batches against the global one, or with one learner its micro-batches."""
        assert self.noise is not None
        B = self.batch
        unscale = self.scaler.get_scale() ** -2 if self.scaler is not None else 1.0
        big_sqr = self._own_buckets().sqnorm() * unscale
        if self.size > 1:
            bounds = (slice_bounds(B, self.size, r) for r in range(self.size))
            count, small = small_batch([hi - lo for lo, hi in bounds])
            small_sqr = tail[LOCAL_SQR] / count * unscale if count else math.nan
        else:
            count, small = small_batch([n for _, n in self._micro_sqr])
            total = sum(sqr for sqr, _ in self._micro_sqr)
            small_sqr = total / count * unscale if count else math.nan
        self.noise.observe(small_sqr, small, big_sqr, B)

    def _goodput_batches(self, epoch: int) -> list[tuple[Any, Any]]:
        """This iteration's micro-batches in goodput mode: the epoch's order from the samples
        done, at the current batch (prefetched when the key matches), and the next
        iteration's started."""
        start, B, n = self.counters["sample"], self.batch, len(self.train_set)  # type: ignore[arg-type]
        cap = self._micro_cap()
        key = (epoch, start, B, self.size, self.rank)
        batches = self.prefetch.take(key)
        if batches is None:
            indices = rank_slice(self._order(epoch), start, B, self.size, self.rank)
            batches = self.prefetch.build(self._build, indices, cap)
        nxt = (epoch, start + B) if start + 2 * B <= n else (epoch + 1, 0)
        if nxt[0] < self.spec.epochs and self.prefetch.wanted():
            indices = rank_slice(self._order(nxt[0]), nxt[1], B, self.size, self.rank)
            self.prefetch.ahead((*nxt, B, self.size, self.rank), self._build, indices, cap)
        if self.device.type == "cpu":
            return batches
        return [(self._to_device(x), self._to_device(y)) for x, y in batches]

    def _micro_cap(self) -> int:
        """The micro-batch cap; with one learner in goodput mode at most half its batch, so
        that it has two micro-batches to measure the noise scale from (as AdaptDL does)."""
        return micro_cap(self.spec.max_micro_batch, self.batch, self.size)

    def _steps_estimate(self) -> int:
        """Goodput mode: the steps of the whole run at the current batch from here."""
        c, n, B = self.counters, len(self.train_set), self.batch  # type: ignore[arg-type]
        left = (n - c["sample"]) // B + (self.spec.epochs - c["epoch"] - 1) * (n // B)
        total = c["step"] + max(left, 0)
        return min(total, self.spec.max_steps) if self.spec.max_steps > 0 else total

    def train_until_change(self) -> int | None:
        """Iterate until the generation changes (its number) or the job ends (None).

        Each step's agreement is acted on one step late (``train_step``): every member
        reads step k's once step k+1 is queued, and all of them act on it at that same
        boundary. Before the epoch's evaluation, the end, and on leaving, the step still
        in flight is settled (its agreement read, its record written)."""
        while True:
            if self._finished():
                self._settle()
                self.finish()
                return None
            if self.orphaned():
                with contextlib.suppress(Exception):
                    self._settle()
                return None
            if self._epoch_over():
                agreed = self._settle()
                if agreed is not None and (agreed.stop or agreed.gen != self.gen):
                    return self._act(agreed)
                self.end_epoch()
                continue
            agreed = self.train_step()
            if agreed is not None and (agreed.stop or agreed.gen != self.gen):
                last = self._settle()  # the step taken meanwhile, in this generation
                if last is not None:
                    agreed = Agreement(max(agreed.gen, last.gen), agreed.stop or last.stop)
                return self._act(agreed)

    def _act(self, agreed: Agreement) -> int | None:
        """A stop (checkpoint, None) or the new generation's number."""
        if agreed.stop:
            self.save_checkpoint()
            return None
        return agreed.gen

    def _epoch_over(self) -> bool:
        """No whole global batch left in the epoch (a last partial one is dropped)."""
        if self.noise is None:
            return self.counters["iteration"] >= self.per_epoch
        return self.counters["sample"] + self.batch > len(self.train_set)  # type: ignore[arg-type]

    def _finished(self) -> bool:
        c, spec = self.counters, self.spec
        return c["epoch"] >= spec.epochs or (spec.max_steps > 0 and c["step"] >= spec.max_steps)

    # One iteration ------------------------------------------------------------------------

    def train_step(self) -> Agreement | None:
        """Queue one iteration (forward, backward, the gradient all-reduce with the
        agreement riding on it, the optimizer step), then read the agreement of the step
        before it: the host never waits for this step's values (on a GPU it runs a step
        ahead of the device). Returns that earlier step's agreement (None: no step was in
        flight). A goodput-mode step and a WMLA script's read their own at once: the noise
        scale's statistics decide their learning rate, and a script's step returns host
        numbers anyway."""
        started = time.perf_counter()
        epoch, iteration = self.counters["epoch"], self.counters["iteration"]
        if self.counters.get("begun", 0) <= epoch:  # once per epoch, joiners included
            self.counters["begun"] = epoch + 1
            self._every_rank("on_epoch_begin", epoch)
        batches = self._batches_for(epoch, iteration)
        try:
            values, host = self._accumulate(batches)
        except BucketFailure as exc:
            # the step before this one completed (its all-reduce was waited for): its
            # record is kept before this generation is given up
            self._settle()
            raise CollectiveFailure(str(exc)) from exc
        if self.noise is not None:
            tail = values.tolist()
            if not math.isfinite(tail[1]):
                raise UserCodeError(
                    f"the loss is {tail[1]} at epoch {epoch}, iteration {iteration}"
                )
            self._observe(tail)
        self._apply()
        self._advance()
        taken = InFlight(values, host, self._train_record(), epoch, iteration, started,
                         self.batch)  # fmt: skip
        earlier, self._in_flight = self._in_flight, taken
        if self.noise is not None or self.defn.train_step is not None:
            return self._settle()
        return self._resolve(earlier, started) if earlier is not None else None

    def _settle(self) -> Agreement | None:
        """Read the agreement of the step in flight, if any, and write its record."""
        pending, self._in_flight = self._in_flight, None
        if pending is None:
            return None
        return self._resolve(pending, time.perf_counter())

    def _resolve(self, step: InFlight, until: float) -> Agreement:
        """A step's agreement, read by the host (the only read of the step's values), and
        its record: the global batch's loss and right answers from the all-reduce, its time
        up to ``until`` (the next step's start: in steady state the step's own period)."""
        values = step.values.tolist()
        correct, loss = values[0], values[1]
        gen, stop, written = step.host if step.host is not None else values[2:AGREED]
        if not math.isfinite(loss):
            raise UserCodeError(f"the loss is {loss} at epoch {step.epoch}, "
                                f"iteration {step.iteration}")  # fmt: skip
        record = step.record
        accuracy = 100.0 * correct / step.batch
        record["loss"] = loss
        if math.isfinite(accuracy):  # a classifier's (JSON has no NaN for the pages)
            record["accuracy"] = accuracy / 100.0
        record["samples_per_s"] = step.batch / max(until - step.started, 1e-9)
        self._keep_unwritten(record, written=int(written))
        if self.rank == 0:
            self.records.put(record)
            self._driver_log("log_train_metrics", loss, accuracy, record["step"], 0)
        return Agreement(gen=int(gen), stop=bool(stop > 0))

    def _agreement_host(self) -> tuple[float, float, float]:
        """Rank 0's part of the agreement, from the watch thread (no Redis in the step),
        never behind the generation this learner already formed: generation, stop flag,
        the last step its record writer saw Redis take. Zeros from the other ranks: the
        all-reduce's sum is rank 0's."""
        if self.rank != 0:
            return 0.0, 0.0, 0.0
        gen, stop = self.watch.latest
        return float(max(gen, self.gen)), float(stop), float(self.records.written)

    def _order(self, epoch: int) -> list[int]:
        if epoch not in self._orders:
            self._orders = {e: o for e, o in self._orders.items() if e >= epoch - 1}
            self._orders[epoch] = permutation(len(self.train_set), self.spec.seed, epoch)  # type: ignore[arg-type]
        return self._orders[epoch]

    def _my_indices(self, epoch: int, iteration: int) -> torch.Tensor:
        """This rank's samples at ``iteration``: a slice of the epoch's order kept as a
        tensor (partition.rank_indices, without a list of Python ints a step)."""
        B = self.spec.batch_size
        if self._order_tensor[0] != epoch:
            where = getattr(self.train_set, "tensors", (torch.empty(0),))[0].device
            order = torch.tensor(self._order(epoch), dtype=torch.long, device=where)
            self._order_tensor = (epoch, order)
        lo, hi = slice_bounds(B, self.size, self.rank)
        return self._order_tensor[1][iteration * B + lo : iteration * B + hi]

    def _batches_for(self, epoch: int, iteration: int) -> list[tuple[Any, Any]]:
        """This iteration's micro-batches (prefetched when the key matches), and the next
        iteration's started in the background."""
        if self.feed is not None:  # DataLoader workers, in the protocol's order (loader.py)
            fed = self.feed.take(self.feed.place(self.counters, self.batch, self.size, self.rank))
            return fed if self.device.type == "cpu" else [
                (self._to_device(x), self._to_device(y)) for x, y in fed]  # fmt: skip
        if self.noise is not None:
            return self._goodput_batches(epoch)
        key = (epoch, iteration, self.size, self.rank)
        batches = self.prefetch.take(key)
        if batches is None:
            batches = self.prefetch.build(self._build, self._my_indices(epoch, iteration))
        nxt = (epoch, iteration + 1) if iteration + 1 < self.per_epoch else (epoch + 1, 0)
        if nxt[0] < self.spec.epochs and self.prefetch.wanted():
            indices = self._my_indices(*nxt)
            self.prefetch.ahead((*nxt, self.size, self.rank), self._build, indices)
        if self.device.type == "cpu":
            return batches
        return [(self._to_device(x), self._to_device(y)) for x, y in batches]

    def _build(
        self, indices: list[int] | torch.Tensor, cap: int | None = None
    ) -> list[tuple[Any, Any]]:
        """The micro-batches of one iteration, on the host (pinned for a CUDA device), of at
        most ``cap`` samples (the job's cap unless given)."""
        out = []
        cap = self.spec.max_micro_batch if cap is None else cap
        for lo, hi in micro_batches(0, len(indices), cap):
            x, y = self._gather(self.train_set, indices[lo:hi])
            if self.device.type == "cuda":
                x, y = _pin(x), _pin(y)
            out.append((x, y))
        return out

    def _to_device(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return value.to(self.device, non_blocking=True)
        return value

    def _accumulate(
        self, batches: list[tuple[Any, Any]]
    ) -> tuple[torch.Tensor, tuple[float, float, float] | None]:
        """Forward and backward over micro-batches; with peers, the gradient all-reduce
        launched in buckets during the last backward (after it, for a WMLA script's own
        step) and waited for. Returns the step's agreement on the device, unread: the
        global batch's right answers (nan: not a classifier) and loss, then (all-reduced
        with peers) rank 0's generation, stop flag and records written; alone, those three
        come from this host (the second value)."""
        if not self.model.training:  # after an evaluation (every module: 0.05 ms a step)
            self.model.train()
        self.held.clear()  # just before the step's forward and backward need as much (rehearse)
        if self._alone():
            return self._accumulate_alone(batches), self._agreement_host()
        if self.reducer is not None:
            return self._accumulate_reduced(self.reducer, batches), None
        buckets = self._own_buckets()
        buckets.begin()
        B = self.batch
        loss_part: Any = 0.0
        correct: Any = 0.0
        launch = gloo_or_nccl_allreduce(self.pg)
        micro = self._measuring(batches)
        for k, (x, y) in enumerate(batches):
            n = len(y)
            if self.defn.train_step is not None:
                loss_value, right = self._script_step(x, y, n / B)
                loss_part += loss_value * n / B
                correct += right
                if micro is not None:  # the script's own loss: its gradient is unscaled
                    self._micro_sqr.append((micro.take(), n))
                continue
            with self._autocast():
                out = self.model(x)
                loss = self.defn.loss_fn(out, y)
            loss_part = loss_part + _share(loss.detach(), n, B)
            correct = correct + _right_answers(out.detach(), y)
            if k == len(batches) - 1:
                buckets.arm(launch, self._agreement(correct, loss_part))
            scaled = loss * (n / B)
            if self.scaler is not None:
                scaled = self.scaler.scale(scaled)
            scaled.backward()  # type: ignore[no-untyped-call]
            if micro is not None:  # its mean gradient's: backward's is n/B of it
                self._micro_sqr.append((micro.take() * (B / n) ** 2, n))
        if micro is not None:
            micro.on = False
        if self.defn.train_step is not None or not batches:
            buckets.arm(launch, self._agreement(correct, loss_part))
        buckets.finish()
        return buckets.tail.clone(), None  # the next step's arm writes the tail again

    def _alone(self) -> bool:
        """A native model's fixed-batch step with no peer: no bucket and no collective."""
        return self.size == 1 and self.noise is None and self.defn.train_step is None

    def _accumulate_alone(self, batches: list[tuple[Any, Any]]) -> torch.Tensor:
        """One learner: forward and backward as a plain loop does them, gradients where
        autograd puts them (no bucket, no copy, no collective); right answers and loss
        summed on the device."""
        if not batches:
            return torch.zeros(2, device=self.device)
        correct, loss_part = self._forward_backward(batches)
        return torch.stack([_as_value(correct, self.device), _as_value(loss_part, self.device)])

    def _accumulate_reduced(
        self, reducer: TorchReducer, batches: list[tuple[Any, Any]]
    ) -> torch.Tensor:
        """With peers, a native model's fixed-batch step: forward and backward as alone,
        the last backward's gradients all-reduced by torch's reducer as they are in, the
        agreement with them (reducer.py). A rank with no sample (a global batch smaller
        than the generation) back-propagates zeros, so that its buckets go too."""
        launch = gloo_or_nccl_allreduce(self.pg)

        def arm(correct: Any, loss_part: Any) -> None:
            reducer.arm(launch, self._agreement(correct, loss_part))

        try:
            if batches:
                self._forward_backward(batches, arm)
            else:
                self.optimizer.zero_grad(set_to_none=True)
                zero = torch.zeros((), device=self.device)
                arm(zero, zero)
                (torch.stack([p.sum() for p in self.params]).sum() * 0.0).backward()  # type: ignore[no-untyped-call]
            return reducer.finish()
        except UnusedParameters:
            self.jobs.note_unused_parameters()  # read by every member at the next generation
            raise
        except BucketFailure:
            raise
        except Exception as exc:
            failure = reducer.error
            reducer.failed()
            if failure is None:  # the model's own error
                raise
            raise BucketFailure(str(failure)) from exc

    def _forward_backward(
        self,
        batches: list[tuple[Any, Any]],
        arm: Callable[[Any, Any], None] | None = None,
    ) -> tuple[Any, Any]:
        """A native model's forward and backward over the step's micro-batches, gradients
        accumulated in ``.grad``; ``arm`` gets the right answers and loss share so far
        before the last backward. Returns the step's right answers and loss on the
        device, unread."""
        self.optimizer.zero_grad(set_to_none=True)
        B = self.batch
        loss_part: Any = None
        correct: Any = None
        for k, (x, y) in enumerate(batches):
            n = len(y)
            with self._autocast():
                out = self.model(x)
                loss = self.defn.loss_fn(out, y)
            share, right = _share(loss.detach(), n, B), _right_answers(out.detach(), y)
            loss_part = share if loss_part is None else loss_part + share
            correct = right if correct is None else correct + right
            if arm is not None and k == len(batches) - 1:
                arm(correct, loss_part)
            scaled = loss if n == B else loss * (n / B)
            if self.scaler is not None:
                scaled = self.scaler.scale(scaled)
            scaled.backward()  # type: ignore[no-untyped-call]
        return correct, loss_part

    def _agreement(self, correct: Any, loss_part: Any) -> torch.Tensor:
        """What rides on the gradient all-reduce (docs/architecture.md, "Elastic training
        protocol"): this rank's right answers and loss share (device values, or a script's
        host numbers), rank 0's generation, stop flag and records written
        (``_agreement_host``), and in goodput mode a place for the local squared norm
        (written as the last bucket goes, overlap.py)."""
        host = [*self._agreement_host(), *([0.0] if self.noise is not None else [])]
        if not isinstance(correct, torch.Tensor) and not isinstance(loss_part, torch.Tensor):
            return torch.tensor([float(correct), float(loss_part), *host], dtype=torch.float64)
        mine = torch.stack([_as_value(correct, self.device), _as_value(loss_part, self.device)])
        rest = torch.tensor(host, dtype=mine.dtype)
        if self.device.type != "cpu":
            rest = rest.pin_memory().to(self.device, non_blocking=True)
        return torch.cat([mine, rest])

    def _measuring(self, batches: list[tuple[Any, Any]]) -> MicroNorms | None:
        """Goodput mode: set this step's measurement up (off: nothing, None). With peers,
        the buckets sum this rank's gradient's squared norm, as its local batch's mean
        gradient's; alone, the micro-batches' own are summed (returned)."""
        if self.noise is None:
            return None
        self._micro_sqr.clear()
        if self.size > 1:
            local = sum(len(y) for _, y in batches)
            buckets = self._own_buckets()
            buckets.measure_at = LOCAL_SQR
            buckets.local_weight = (self.batch / local) ** 2 if local else 0.0
            return None
        self._own_buckets().measure_at = None
        assert self.micro is not None
        self.micro.take()
        self.micro.on = True
        return self.micro

    def _script_step(self, x: Any, y: Any, share: float) -> tuple[float, float]:
        """A WMLA script's ``fn_step_train`` on one micro-batch: it clears the gradients,
        runs forward and backward and returns (accuracy %, loss); its gradients are scaled
        to this micro-batch's share of the global batch and added to those so far."""
        kept = [p.grad for p in self.params]
        for p in self.params:
            p.grad = None
        acc, loss = self.defn.train_step(self.defn.fabric, (x, y), _accuracy, None, {})  # type: ignore[misc]
        for p, before in zip(self.params, kept, strict=True):
            if p.grad is not None:
                p.grad.mul_(share)
            if before is not None:
                p.grad = before if p.grad is None else p.grad.add_(before)
        return float(loss), float(acc) / 100.0 * len(y)

    def _batch(self, dataset: Dataset[Any], indices: list[int]) -> tuple[Any, Any]:
        x, y = self._gather(dataset, indices)
        return self._to_device(x), self._to_device(y)

    def _gather(self, dataset: Dataset[Any], indices: list[int] | torch.Tensor) -> tuple[Any, Any]:
        if isinstance(dataset, TensorDataset):
            x, y = dataset.tensors[0], dataset.tensors[1]
            idx = indices if isinstance(indices, torch.Tensor) else torch.tensor(
                indices, dtype=torch.long, device=x.device)  # fmt: skip
            return x[idx], y[idx]
        if isinstance(indices, torch.Tensor):
            indices = indices.tolist()  # a user's dataset is indexed with Python ints
        return torch.utils.data.default_collate([dataset[i] for i in indices])  # type: ignore[no-any-return]

    def _apply(self) -> None:
        if self.noise is not None:
            self._apply_scaled(self.noise)
            return
        if self.defn.lr_at is not None:
            lr = self.defn.lr_at(self.counters["step"], self.spec.lr)
            for group in self.optimizer.param_groups:
                group["lr"] = lr
        self._step()

    def _step(self) -> None:
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()

    def _apply_scaled(self, noise: NoiseScale) -> None:
        """Goodput mode: the schedule's learning rate at the progress so far (in base-batch
        steps), times the gain of this batch for this step (AdaScale); the step then counts
        its gain in progress."""
        groups = self.optimizer.param_groups
        if self.defn.lr_at is not None:
            lr = self.defn.lr_at(noise.progress, self.spec.lr)
            for group in groups:
                group["lr"] = lr
        base = [group["lr"] for group in groups]
        self._gain = noise.gain(self.batch)
        for group, lr in zip(groups, base, strict=True):
            group["lr"] = lr * self._gain
        try:
            self._step()
        finally:
            for group, lr in zip(groups, base, strict=True):
                group["lr"] = lr
        noise.stepped(self.batch)

    def _advance(self) -> None:
        self.counters["iteration"] += 1
        self.counters["step"] += 1
        if self.noise is not None:
            self.counters["sample"] += self.batch

    def _train_record(self) -> dict[str, Any]:
        """The record of the step just taken, but for what its agreement says (its loss and
        accuracy) and its rate (``_resolve`` adds them once it is read)."""
        c = self.counters
        record = {
            "type": "train", "step": c["step"], "epoch": c["epoch"],
            "iteration": c["iteration"], "workers": self.size, "gen": self.gen,
            "hosts": self.hosts,
            "lr": self.optimizer.param_groups[0]["lr"], "time": time.time(),
            "total_steps": self.total_steps,
        }  # fmt: skip
        if self.noise is not None:
            record.update(self._goodput_record(self.noise))
        return record

    def _goodput_record(self, noise: NoiseScale) -> dict[str, Any]:
        """A goodput-mode step's statistics (docs/architecture.md, "Goodput mode"): the
        batch it trained at, the learning rate it used, the smoothed noise scale and the
        estimates behind it, the batch's statistical efficiency and gain, the progress."""
        B, lr = self.batch, self.optimizer.param_groups[0]["lr"]
        out = {
            "batch": B, "base_batch": noise.base, "lr": lr * self._gain, "gain": self._gain,
            "efficiency": noise.efficiency(B), "progress": noise.progress,
            "grad_sqr": noise.grad_sqr, "grad_var": noise.grad_var,
            "total_steps": self._steps_estimate(),
        }  # fmt: skip
        gns = noise.gns
        if gns is not None and math.isfinite(gns):
            out["gns"] = gns
        return out

    def _keep_unwritten(self, record: dict[str, Any], written: int) -> None:
        """Keep this step's record while rank 0 may not have written it: until a later
        step's all-reduce says Redis took rank 0's record of this step or a later one."""
        self._rank0_written = max(self._rank0_written, written)
        self._unwritten.append(record)
        while self._unwritten and self._unwritten[0]["step"] <= self._rank0_written:
            self._unwritten.popleft()
        if len(self._unwritten) > MAX_UNWRITTEN:  # Redis away for long: the oldest go
            self._unwritten.popleft()

    def _write_unwritten_steps(self) -> None:
        """As the new rank 0: the steps this learner trained whose records the last rank 0
        may not have written, and the last evaluation's record (no step all-reduce says
        whether that one was written). Readers keep the first record of each kind and step,
        so where it did write one, this copy (marked ``replay``) changes nothing."""
        if not self._was_rank0:  # as rank 0, its own writer writes them
            test = self._last_test  # the last evaluation's too, in its place by step
            for record in self._unwritten:
                if test is not None and record["step"] > test["step"]:
                    self.records.put({**test, "replay": True})
                    test = None
                self.records.put({**record, "replay": True})
            if test is not None:
                self.records.put({**test, "replay": True})
        self._unwritten.clear()

    def _every_rank(self, name: str, *args: Any) -> None:
        """A WMLA ``Callback`` hook, in every learner (it may change the optimizer)."""
        from callbacks import call_all  # workers/compat, on sys.path once code is loaded

        call_all(self.defn.callbacks, name, *args)

    def _driver_log(self, name: str, *args: Any) -> None:
        """A WMLA ``LoggerCallback`` hook, once per job (rank 0, as WMLA's driver)."""
        if not self.defn.callbacks and self.defn.logger is None:
            return  # a native model's: nothing to call, every step
        from callbacks import call_all

        loggers = [c for c in self.defn.callbacks if hasattr(c, name)]
        if self.defn.logger is not None:
            loggers.append(self.defn.logger)
        call_all(loggers, name, *args)

    # Epoch end ---------------------------------------------------------------------------

    def end_epoch(self) -> None:
        """Evaluate on the test set spread over the members, then checkpoint when due."""
        totals = self._evaluate()
        self.collective("allreduce", totals)
        epoch = self.counters["epoch"]
        self.counters["epoch"] += 1
        self.counters["iteration"] = 0
        if self.noise is not None:
            self.counters["sample"] = 0
        loss, correct, count = (float(v) for v in totals)
        loss, acc = loss / max(count, 1.0), correct / max(count, 1.0)
        # built by every member (the totals are all-reduced), like the train records
        self._last_test = {"type": "test", "epoch": epoch, "step": self.counters["step"],
                           "test_loss": loss, "test_accuracy": acc,
                           "time": time.time()}  # fmt: skip
        if self.rank == 0:
            self.records.put(self._last_test)
            self._driver_log("log_test_metrics", loss, 100.0 * acc, self.counters["step"],
                             self.rank)  # fmt: skip
        self._every_rank("on_epoch_end", epoch)
        if self.rank == 0 and self.counters["epoch"] % max(self.spec.checkpoint_every, 1) == 0:
            self.save_checkpoint()

    @torch.no_grad()
    def _evaluate(self) -> torch.Tensor:
        self.model.eval()
        lo, hi = slice_bounds(len(self.test_set), self.size, self.rank)  # type: ignore[arg-type]

        def chunks() -> Any:
            if self.feed is not None:  # decoded by as many workers as training's
                workers = self.feed.workers
                for x, y in loader.evaluation(self.test_set, lo, hi, EVAL_CHUNK, workers):
                    yield self._to_device(x), self._to_device(y)
                return
            for start in range(lo, hi, EVAL_CHUNK):
                yield self._batch(self.test_set, list(range(start, min(start + EVAL_CHUNK, hi))))

        loss_sum, correct = 0.0, 0.0
        for x, y in chunks():
            out = self.model(x)
            loss_sum += float(self.defn.loss_fn(out, y)) * len(y)
            if out.dim() == 2 and out.shape[1] > 1:
                correct += float((out.argmax(dim=1) == y).sum())
        if self.defn.test_step is not None and hi > lo:
            # A WMLA script's fn_test(model, test_iter, fn_args): its mean loss over this
            # learner's share of the test set (the accuracy is counted above)
            loss_sum = float(self.defn.test_step(self.defn.fabric, chunks(), {})) * (hi - lo)
        return torch.tensor([loss_sum, correct, float(hi - lo)], device=self.device)

    def save_checkpoint(self) -> None:
        if self.rank == 0 and self._saved_step != self.counters["step"]:
            self._saved_step = self.counters["step"]
            path = checkpoint.save(
                Path(self.spec.workdir) / "checkpoints", self.counters["step"], self._state()
            )
            log.info("%s: checkpoint %s", self.slot, path.name)
            # Said after the records queued so far; kept while Redis does not answer.
            self.records.record_checkpoint(self.counters["step"])

    def finish(self) -> None:
        if self.rank != 0:
            return
        self.save_checkpoint()
        torch.save(self.model.state_dict(), Path(self.spec.workdir) / "model.pt")
        if self.defn.style == "wmla":  # where WMLA's loggers write val_dict_list.json
            self._driver_log("on_train_end")
        self.records.put({"type": "done", "step": self.counters["step"], "time": time.time()})


def rehearse(
    model: torch.nn.Module,
    params: Sequence[torch.Tensor],
    loss_fn: Any,
    x: Any,
    y: Any,
    autocast: Any = nullcontext,
) -> list[torch.Tensor]:
    """One forward and backward before READY, so that a learner's first step pays no
    first-use costs (memory for the gradients and activations, lazy kernels and their
    workspaces; on a GPU, cuBLAS and the caching allocator) while the others wait for it at
    a resize: the 1 GB model's first step at a new size took 1.7 s against 1.1 s for the
    steps after it (bench/results/engine.md, section 9). In eval mode, with the RNG put
    back: the model's state is as it was (batch norm's running statistics untouched, no
    dropout mask drawn), and no parameter keeps a gradient.

    Returns the gradients it made, taken off the parameters, for a learner on CPU to hold
    until its first step starts (``Learner._accumulate`` drops them there), so that the
    step's own gradients get memory this process has just given back. A virtual machine
    whose kernel reports free memory to its host (virtio-balloon's free page reporting, as
    this one's does) gives huge pages back to the host in a pass that takes every free
    block of 8 MiB or more, about 2 s after such a block was freed: huge pages free for a
    second or more may be gone. Filling 0.5 GB of those again took 0.47-0.99 s here
    against 0.06 s for huge pages freed just before (bench/results/engine.md, section 15),
    and a joiner's first step paid that while every member waited. Elsewhere holding them
    costs nothing: the step needs that memory anyway.

    Only a rehearsal: a model that fails it (one whose output in eval mode its loss does
    not take, say) is left to its first step, which raises whatever is wrong with it;
    nothing is returned then."""
    was_training = model.training
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    grads: list[torch.Tensor] = []
    with torch.random.fork_rng(devices=devices):
        model.eval()
        try:
            with autocast():
                loss = loss_fn(model(x), y)
            loss.backward()
            grads = [p.grad for p in params if p.grad is not None]
        except Exception as exc:
            log.info("no rehearsal of the first step (%s: %s)", type(exc).__name__, exc)
        finally:
            model.train(was_training)
            for p in params:
                p.grad = None
    return grads


def _right_answers(out: torch.Tensor, y: Any) -> torch.Tensor | float:
    """How many samples a classifier's output gets right, on the device, unread (nan for
    other outputs)."""
    if out.dim() == 2 and out.shape[1] > 1 and isinstance(y, torch.Tensor) and y.dim() == 1:
        return (out.argmax(dim=1) == y).sum()
    return math.nan


def _share(loss: torch.Tensor, n: int, batch: int) -> torch.Tensor:
    """A micro-batch's mean loss as its share of the global batch's."""
    return loss if n == batch else loss * (n / batch)


def _as_value(value: torch.Tensor | float, device: torch.device) -> torch.Tensor:
    """A float32 scalar on ``device`` (a tensor stays where it is, unread)."""
    if isinstance(value, torch.Tensor):
        return value.to(torch.float32)
    return torch.tensor(value, dtype=torch.float32, device=device)


def _correct(out: torch.Tensor, y: Any) -> float:
    """How many samples a classifier's output gets right, read (nan for other outputs)."""
    return float(_right_answers(out, y))


def _accuracy(out: torch.Tensor, y: Any) -> float:
    """WMLA's ``eva`` for fn_step_train: a batch's accuracy in percent."""
    return 100.0 * _correct(out.detach(), y) / max(len(y), 1)


def _pin(value: Any) -> Any:
    """A host tensor in pinned memory (one already on the device stays there)."""
    if isinstance(value, torch.Tensor) and value.device.type == "cpu":
        return value.pin_memory()
    return value
