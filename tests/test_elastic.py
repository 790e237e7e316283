"""The elastic engine, driven without the scheduler: real learner processes, real gloo."""

from __future__ import annotations

import contextlib
import copy
import datetime
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
import weakref
from pathlib import Path
from typing import Any

import psutil
import pytest
import torch
import torch.distributed as dist
from torch import nn

from edtweb.redis_server import RedisServer
from protocol.connection import connect
from protocol.jobstore import JobStore
from scheduler.elastic import FAILURE_GRACE_SECONDS
from tests.harness import driven
from tests.harness.processes import PROJECT_DIR, alive_pids, subprocess_env
from tests.harness.waiting import bound, wait_for
from workers.learner import statecast
from workers.learner import step as step_module
from workers.learner.contract import load_definition
from workers.learner.datasets import write_cifar10
from workers.learner.engine import Learner
from workers.learner.goodput import MEASURE_EVERY
from workers.learner.inputs import INLINE_SECONDS, Prefetcher
from workers.learner.membership import ControlWatch
from workers.learner.overlap import GradBuckets, gloo_or_nccl_allreduce
from workers.learner.spec import JobSpec
from workers.learner.step import rehearse

MLP = PROJECT_DIR / "examples" / "mlp.py"
PACED_TWIN = PROJECT_DIR / "tests" / "models" / "paced_twin_mlp.py"  # MLP, 0.1 s a step
TORN = PROJECT_DIR / "tests" / "models" / "rank0_dies_in_state_broadcast.py"  # PACED_TWIN's
BATCH, STEPS, LR, SEED = 64, 100, 0.01, 0
SMALL_BUCKETS = ("--bucket-bytes", "65536")  # the MLP's gradients in several buckets
# MLP counting every host read of a tensor's values, and which step made it
COUNTING = PROJECT_DIR / "tests" / "models" / "counts_host_reads.py"
# MLP's updates, with a layer that some training batches leave without a gradient
UNUSED = PROJECT_DIR / "tests" / "models" / "unused_branch_mlp.py"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_cifar10(tmp_path_factory.mktemp("data"), train=1024, test=256)


def drive(redis: RedisServer, tmp: Path, data: Path, schedule: str, *extra: str,
          model: Path = MLP) -> Path:  # fmt: skip
    return driven.drive(redis, tmp, data, schedule, STEPS, *extra, model=model)


def train_records(workdir: Path) -> list[dict[str, Any]]:
    """The job's train records as readers keep them: the first of each step. A step may
    come again as a new rank 0's copy (``replay``), or from a later generation that redid
    it after a failure (a rank 0 that took the step, wrote it and was then dropped with
    the peers that failed in it): never twice from one generation, as a record of its own."""
    records = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    kept: dict[int, dict[str, Any]] = {}
    for r in (r for r in records if r["type"] == "train"):
        first = kept.setdefault(r["step"], r)
        if first is not r and not r.get("replay"):
            assert r["gen"] > first["gen"], (first, r)  # redone in a later generation only
    return list(kept.values())


def reference_run(data: Path) -> tuple[list[float], dict[str, torch.Tensor]]:
    """Plain single-process training with the same seed, order and global batch."""
    return driven.plain_training(data, STEPS)


def assert_same_training(
    workdir: Path, losses: list[float], params: dict[str, torch.Tensor], replayed: bool = False
) -> None:
    records = train_records(workdir)
    if replayed:  # after a restart from a checkpoint, the last record of each step counts
        records = list({r["step"]: r for r in records}.values())
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))  # none skipped or repeated
    for record, expected in zip(records, losses, strict=True):
        assert record["loss"] == pytest.approx(expected, rel=1e-4), record
    final = torch.load(workdir / "model.pt", weights_only=True)
    for name, value in params.items():
        torch.testing.assert_close(final[name], value, rtol=1e-4, atol=1e-6)


def worker_sequence(records: list[dict[str, Any]]) -> list[int]:
    seq: list[int] = []
    for r in records:
        if not seq or seq[-1] != r["workers"]:
            seq.append(r["workers"])
    return seq


def test_resizing_1_3_2_3_1_gives_the_single_process_updates(
    redis_server: RedisServer, tmp_path: Path, dataset: Path
) -> None:
    # Paced so that the driver, polling every 50 ms on a busy machine, resizes between one
    # entry of the schedule and the next; the updates are examples/mlp.py's.
    workdir = drive(redis_server, tmp_path, dataset, "0:1,20:3,40:2,60:3,80:1", *SMALL_BUCKETS,
                    model=PACED_TWIN)  # fmt: skip
    assert worker_sequence(train_records(workdir)) == [1, 3, 2, 3, 1]
    losses, params = reference_run(dataset)
    assert losses[-1] < losses[0]  # it learns
    assert_same_training(workdir, losses, params)


def test_micro_batches_of_16_on_one_worker_match_four_workers(
    redis_server: RedisServer, tmp_path: Path, dataset: Path
) -> None:
    one = drive(redis_server, tmp_path, dataset, "0:1", "--max-micro-batch", "16", *SMALL_BUCKETS)
    four = drive(redis_server, tmp_path, dataset, "0:4")
    assert worker_sequence(train_records(four)) == [4]
    losses, params = reference_run(dataset)
    assert_same_training(one, losses, params)
    assert_same_training(four, losses, params)


def test_a_parameter_left_without_a_gradient_sends_the_job_to_the_engines_own_buckets(
    redis_server: RedisServer, tmp_path: Path, dataset: Path
) -> None:
    # Torch's reducer waits for every parameter; a rank whose batch skips the side layer
    # leaves its bucket unlaunched: the job goes on with the engine's buckets, step for
    # step the plain MLP's updates (docs/architecture.md, "Torch's reducer").
    job = f"unused-{uuid.uuid4().hex[:8]}"
    workdir = drive(redis_server, tmp_path, dataset, "0:2", "--job", job, model=UNUSED)
    assert JobStore(connect(redis_server.url), job).unused_parameters()
    losses, params = reference_run(dataset)
    records = train_records(workdir)
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    for record, expected in zip(records, losses, strict=True):
        assert record["loss"] == pytest.approx(expected, rel=1e-4), record
    final = torch.load(workdir / "model.pt", weights_only=True)
    for name, value in params.items():
        torch.testing.assert_close(final[f"body.{name}"], value, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("learners", [3, 4])
def test_a_learner_killed_with_sigkill_costs_no_iteration(
    redis_server: RedisServer, tmp_path: Path, dataset: Path, learners: int
) -> None:
    workdir = drive(redis_server, tmp_path, dataset, f"0:{learners}", "--kill", "50:KILL",
                    model=PACED_TWIN)  # fmt: skip
    events = [json.loads(line) for line in (workdir / "events.jsonl").read_text().splitlines()]
    fault = next(e for e in events if e["kind"] == "fault")
    assert fault["signal"] == "SIGKILL"
    records = train_records(workdir)
    resumed = next(r for r in records if r["time"] > fault["time"] and r["workers"] < learners)
    assert resumed["time"] - fault["time"] < bound(2.0)  # the others go on within 2 s
    losses, params = reference_run(dataset)
    assert_same_training(workdir, losses, params)


def test_a_run_whose_fault_never_came_fails(
    redis_server: RedisServer, tmp_path: Path, dataset: Path
) -> None:
    """A fault test must not pass without its fault: a job that ends before the fault's
    step fails the run, and says so."""
    workdir = tmp_path / "late-fault"
    cmd = [sys.executable, "-m", "workers.learner.drive", "--model", str(MLP),
           "--data", str(dataset), "--schedule", "0:1", "--max-steps", "5", "--epochs", "1",
           "--kill", "1000:KILL", "--workdir", str(workdir), "--deadline", "120"]  # fmt: skip
    env = subprocess_env(tmp_path, REDIS_URL=redis_server.url)
    done = subprocess.run(cmd, cwd=PROJECT_DIR, env=env, capture_output=True, text=True,
                          timeout=180)  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    failed = next(e for e in events_of(workdir) if e["kind"] == "failed")
    assert "before the fault due at step 1000" in failed["error"]
    assert not any(e["kind"] == "fault" for e in events_of(workdir))


def events_of(workdir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (workdir / "events.jsonl").read_text().splitlines()]


def test_a_frozen_learner_is_dropped_at_the_timeout_and_reaped(
    redis_server: RedisServer, tmp_path: Path, dataset: Path
) -> None:
    workdir = drive(redis_server, tmp_path, dataset, "0:3", "--kill", "50:STOP", "--timeout", "5",
                    model=PACED_TWIN)  # fmt: skip
    events = events_of(workdir)
    fault = next(e for e in events if e["kind"] == "fault")
    failure = next(e for e in events if e["kind"] == "failure")
    assert failure["lost"] == fault["slots"]
    # the survivors' timeout, the grace the silent one is given, and the reports' way
    assert failure["time"] - fault["time"] < 5 + FAILURE_GRACE_SECONDS + bound(2)
    losses, params = reference_run(dataset)
    assert_same_training(workdir, losses, params)
    # drive() returned only after every learner, the frozen one too, was killed and reaped


def test_when_every_learner_dies_the_job_resumes_from_its_checkpoint(
    redis_server: RedisServer, tmp_path: Path, dataset: Path
) -> None:
    workdir = drive(redis_server, tmp_path, dataset, "0:2", "--kill", "40:KILL:all",
                    model=PACED_TWIN)  # fmt: skip
    restart = next(e for e in events_of(workdir) if e["kind"] == "restart")
    # 16 iterations an epoch, a checkpoint at each epoch's end: the kill is sent once the
    # driver has read step 40, but on a busy machine the learners may be a checkpoint
    # further when it lands. They resume from the last checkpoint recorded before it.
    assert restart["from_step"] % 16 == 0 and 32 <= restart["from_step"] <= restart["step"]
    assert restart["iterations_lost"] == restart["step"] - restart["from_step"]
    losses, params = reference_run(dataset)
    assert_same_training(workdir, losses, params, replayed=True)


@pytest.mark.parametrize("grow_at", [20, 8], ids=["after-a-checkpoint", "before-any"])
def test_a_joiner_whose_state_broadcast_broke_midway_never_gives_on_a_torn_state(
    redis_server: RedisServer, tmp_path: Path, dataset: Path, grow_at: int
) -> None:
    """Rank 0 dies between the large tensors of the state it gives a joiner at a grow: the
    joiner holds rank 0's first-layer weight and its own everything else. With a checkpoint
    (one every 16 steps) it goes back to it and leads the job on from there; without one it
    leaves, and the job starts again from the beginning. Either way the training is the
    single-process one: a torn state would show in every later loss."""
    workdir = drive(redis_server, tmp_path, dataset, f"0:1,{grow_at}:2", model=TORN)
    joiner_log = (workdir / "logs" / "d1.log").read_text()
    assert "generation 2, rank 1 of 2" in joiner_log  # it was in the broadcast that broke
    assert "state of" not in joiner_log.split("generation 2, rank 1 of 2")[1].split("\n")[1]
    events = events_of(workdir)
    failure = next(e for e in events if e["kind"] == "failure")
    assert "d0" in failure["lost"]
    if grow_at == 20:
        assert "loaded checkpoint step-000000016.pt" in joiner_log.split("generation 2, rank 1")[1]
        assert failure["survivors"] == ["d1"]
        assert not any(e["kind"] == "restart" for e in events)
    else:
        assert "no checkpoint exists to go back to: leaving the job" in joiner_log
        assert next(e for e in events if e["kind"] == "restart")["from_step"] == 0
    losses, params = reference_run(dataset)
    assert_same_training(workdir, losses, params, replayed=True)


def test_the_wmla_style_example_trains_like_its_native_twin(
    redis_server: RedisServer, tmp_path: Path, dataset: Path
) -> None:
    runs = {}
    for name in ("cnn", "cnn_wmla"):
        workdir = tmp_path / name
        cmd = [sys.executable, "-m", "workers.learner.drive",
               "--model", str(PROJECT_DIR / "examples" / f"{name}.py"), "--data", str(dataset),
               "--schedule", "0:2", "--max-steps", "24", "--epochs", "2",
               "--workdir", str(workdir)]  # fmt: skip
        env = subprocess_env(tmp_path, REDIS_URL=redis_server.url)
        done = subprocess.run(cmd, cwd=PROJECT_DIR, env=env, capture_output=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        runs[name] = train_records(workdir)
    native = [r["loss"] for r in runs["cnn"]]
    wmla = [r["loss"] for r in runs["cnn_wmla"]]
    assert len(native) == 24
    assert wmla == pytest.approx(native, rel=1e-5)
    logs = "".join(p.read_text() for p in (tmp_path / "cnn_wmla" / "logs").glob("*.log"))
    assert "epoch 0 ended" in logs  # the script's Callback.on_epoch_end ran
    assert "test: after batch 16 loss" in logs  # and its LoggerCallback.log_test_metrics


@pytest.mark.parametrize("caps, overlap", [
    ((4096, 8192), True),  # several buckets: the first goes out during backward
    ((1 << 20, 25 << 20), False),  # DDP's caps: one bucket, launched once backward is over
])  # fmt: skip
def test_gradient_buckets_go_out_during_backward_and_sum_to_the_plain_gradients(
    tmp_path: Path, caps: tuple[int, int], overlap: bool
) -> None:
    torch.manual_seed(0)
    unused = nn.Linear(4, 4)  # first registered, so in the last bucket; never gets a gradient
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                          nn.Linear(64, 10))  # fmt: skip
    reference = copy.deepcopy(model)
    params = list(unused.parameters()) + list(model.parameters())
    buckets = GradBuckets(params, 3, first_bytes=caps[0], bucket_bytes=caps[1])
    assert buckets.count >= 3 if overlap else buckets.count == 1
    store = dist.FileStore(str(tmp_path / "store"), 1)  # type: ignore[attr-defined]
    pg = dist.ProcessGroupGloo(store, 0, 1, datetime.timedelta(seconds=30))  # type: ignore[attr-defined]
    allreduce = gloo_or_nccl_allreduce(pg)
    launched: list[int] = []  # for each launch, how many gradients backward had finished
    finished: list[torch.Tensor] = []
    for p in model.parameters():
        p.register_post_accumulate_grad_hook(finished.append)  # type: ignore[no-untyped-call]

    def launch(tensor: torch.Tensor) -> Any:
        launched.append(len(finished))
        return allreduce(tensor)

    x, y = torch.randn(16, 32), torch.randint(0, 10, (16,))
    buckets.begin()
    for k, (lo, hi) in enumerate([(0, 8), (8, 16)]):  # two micro-batches, one step
        loss = nn.functional.cross_entropy(model(x[lo:hi]), y[lo:hi])
        if k == 1:
            assert launched == []  # nothing went out during the first micro-batch
            finished.clear()
            buckets.arm(launch, [1.5, 7.0, 0.0])
        (loss * 0.5).backward()  # type: ignore[no-untyped-call]
    buckets.finish()
    assert len(launched) == buckets.count
    if overlap:  # the first bucket went out while backward still had gradients to produce
        assert launched[0] < len(list(model.parameters()))
    # with one bucket there is nothing to overlap: no Python hook of its own per parameter
    hooks = {len(p._post_accumulate_grad_hooks or {}) for p in model.parameters()}
    assert hooks == ({2} if overlap else {1})  # (and the test's own)
    nn.functional.cross_entropy(reference(x), y).backward()  # type: ignore[no-untyped-call]
    for got, want in zip(model.parameters(), reference.parameters(), strict=True):
        assert got.grad is not None and want.grad is not None
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-5, atol=1e-6)
    assert all(p.grad is not None and not p.grad.any() for p in unused.parameters())
    assert all(p.grad is buckets.views[i] for i, p in enumerate(params))  # summed in place
    assert buckets.tail.tolist() == [1.5, 7.0, 0.0]
    buckets.remove()


def test_the_generation_watch_rides_out_a_redis_outage(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis", appendonly=True, dies_with_parent=True).start()
    try:
        jobs = JobStore(connect(server.url, timeout=1.0), "watched")
        jobs.publish_generation(["a"])
        watch = ControlWatch(jobs, "a", interval=0.01)
        watch.active.set()
        watch.start()
        wait_for(lambda: watch.latest == (1, False), 10, "the watch to read generation 1")
        server.stop()
        wait_for(lambda: watch.outage_since is not None, 10, "the watch to notice the outage")
        assert watch.is_alive() and watch.latest == (1, False)  # last values kept
        server.start()
        jobs.publish_generation(["a", "b"])
        wait_for(lambda: watch.latest == (2, False), 10, "generation 2 after the outage")
        assert watch.outage_since is None
        jobs.request_stop()
        wait_for(lambda: watch.latest == (2, True), 10, "the stop flag")
    finally:
        server.stop()


def test_the_generation_watch_waits_on_the_channel_not_on_a_poll(tmp_path: Path) -> None:
    """Rank 0's watch reads Redis when a change is announced, not every few milliseconds:
    a new generation reaches it well within its fallback interval, and while nothing
    changes it reads about once per interval."""
    server = RedisServer(tmp_path / "redis", appendonly=False, dies_with_parent=True).start()
    try:
        jobs = JobStore(connect(server.url, timeout=1.0), "quiet")
        jobs.publish_generation(["a"])
        watch = ControlWatch(jobs, "a", interval=30.0)
        watch.active.set()
        watch.start()
        wait_for(lambda: watch.latest == (1, False), 10, "the watch to read generation 1")
        reads = watch.reads
        started = time.monotonic()
        jobs.publish_generation(["a", "b"])
        wait_for(lambda: watch.latest == (2, False), 10, "generation 2")
        # Announced, not found by the 30 s re-read: however busy the machine, under that.
        assert time.monotonic() - started < bound(5.0, below=25.0)
        jobs.request_stop()
        wait_for(lambda: watch.latest == (2, True), 10, "the stop flag")
        assert watch.reads - reads <= 3  # a read per announcement (a poll would make dozens)
    finally:
        server.stop()


def _trained(seed: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(5, 7), nn.BatchNorm1d(7), nn.Linear(7, 3))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    nn.functional.cross_entropy(model(torch.randn(4, 5)), torch.tensor([0, 1, 2, 0])).backward()  # type: ignore[no-untyped-call]
    optimizer.step()
    return model, optimizer


@pytest.mark.parametrize("receiver", ["joiner", "member"])
@pytest.mark.parametrize("big_bytes", [statecast.BIG_BYTES, 64])
def test_the_state_travels_as_flat_buffers_and_large_tensors_and_comes_back_whole(
    receiver: str, big_bytes: int
) -> None:
    """At 64 bytes the Linear weights (140 and 84 bytes) and Adam's moments for them travel
    as large tensors, as does the RNG state; the rest packed. A member receives those into
    its own tensors; a joiner, whose optimizer has no state yet, the moments into its
    spares."""
    model, optimizer = _trained(0)
    state = {
        "model": model.state_dict(),
        "rest": {"optimizer": optimizer.state_dict(), "counters": {"step": 3},
                 "rng": torch.get_rng_state(), "flags": torch.tensor([True, False]),
                 "half": torch.randn(3, 2).to(torch.bfloat16).t(), "empty": torch.empty(0, 4)},
    }  # fmt: skip
    packed = statecast.pack(state, torch.device("cpu"), big_bytes)
    assert len(packed.bigs) == (0 if big_bytes == statecast.BIG_BYTES else 7)  # with the RNG
    # the receiver: its own model and optimizer, different values, the same places
    twin, twin_opt = _trained(1) if receiver == "member" else (_trained(1)[0], None)
    if twin_opt is None:
        twin_opt = torch.optim.Adam(twin.parameters(), lr=0.1)
    own = {"model": twin.state_dict(), "rest": {"optimizer": twin_opt.state_dict()}}
    header = statecast.read_header(packed.header)
    received = {p: torch.empty(n, dtype=torch.uint8) for p, n in header["sizes"].items()}
    # a joiner's spares: memory touched at start-up for the Adam moments it will receive
    spares = statecast.spares_for(list(twin.parameters()), 2, big_bytes)
    spare_ptrs = {t.data_ptr() for ts in spares.values() for t in ts}
    bigs, in_place = statecast.destinations(header["skeleton"], own, spares)
    used = [t for t in bigs if t.data_ptr() in spare_ptrs]
    if big_bytes == 64 and receiver == "joiner":
        assert len(used) == 4 and not any(spares.values())  # both moments of both weights
    else:
        assert not used
    for part, buf in received.items():  # what the broadcasts do
        buf.copy_(packed.flats[part])
    for mine, theirs in zip(bigs, packed.bigs, strict=True):
        mine.copy_(theirs)
    back = statecast.rebuild(header["skeleton"], received, bigs)
    assert back["rest"]["counters"] == {"step": 3}
    assert back["rest"]["optimizer"]["param_groups"] == state["rest"]["optimizer"]["param_groups"]
    for part in ("model", "rest"):
        flat_want = _leaves(state[part])
        flat_got = _leaves(back[part])
        assert [k for k, _ in flat_got] == [k for k, _ in flat_want]
        for (key, got), (_, want) in zip(flat_got, flat_want, strict=True):
            assert got.dtype == want.dtype and got.shape == want.shape, key
            assert torch.equal(got, want), key
    skip = statecast.in_place_keys(header["skeleton"]["model"], in_place)
    if big_bytes == 64:  # the weights landed in the twin's own parameters
        assert skip == {"0.weight", "2.weight"}
        assert torch.equal(twin[0].weight, model[0].weight)
        assert len(in_place) == (6 if receiver == "member" else 2)
    else:
        assert skip == set() and not in_place
    result = twin.load_state_dict({k: v for k, v in back["model"].items() if k not in skip},
                                  strict=False)  # fmt: skip
    assert set(result.missing_keys) == skip and not result.unexpected_keys
    twin_opt.load_state_dict(back["rest"]["optimizer"])
    for name, value in model.state_dict().items():
        assert torch.equal(twin.state_dict()[name], value), name


@pytest.mark.parametrize("make", [
    lambda p: torch.optim.SGD(p, lr=0.1), lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
    lambda p: torch.optim.Adam(p), lambda p: torch.optim.AdamW(p),
    lambda p: torch.optim.RMSprop(p), lambda p: torch.optim.RMSprop(p, momentum=0.9, centered=True),
    lambda p: torch.optim.Adagrad(p),
])  # fmt: skip
def test_a_joiner_makes_as_many_spares_as_its_optimizer_will_keep_state(make: Any) -> None:
    param = nn.Parameter(torch.zeros(3))
    optimizer = make([param])
    guess = statecast.spare_count(optimizer)
    param.grad = torch.ones(3)
    optimizer.step()
    assert guess == sum(1 for v in optimizer.state[param].values() if v.dim() > 0)


def test_batches_slow_to_build_are_built_ahead_on_a_thread_and_cheap_ones_in_the_step() -> None:
    """Decided on the builds' times, here a clock of the test's own that each build moves by
    what it would take: the machine's load (a slow torch.full) decides nothing."""
    threads: list[str] = []
    now = [0.0]

    def build(n: int, pause: float) -> list[tuple[Any, Any]]:
        threads.append(threading.current_thread().name)
        now[0] += pause
        if n < 0:
            raise ValueError("a broken dataset")
        return [(torch.full((2,), float(n)), torch.tensor([n]))]

    def clock() -> float:
        return now[0]

    slow = Prefetcher(clock=clock)
    assert slow.wanted()  # nothing timed yet
    slow.build(build, 0, 2 * INLINE_SECONDS)  # in the step
    assert slow.wanted() and threads == [threading.current_thread().name]
    slow.ahead((0, 1, 2, 0), build, 1, 2 * INLINE_SECONDS)
    assert slow.take((0, 2, 2, 0)) is None  # another key (a resize): built again in the step
    slow.ahead((0, 1, 2, 0), build, 1, 2 * INLINE_SECONDS)
    got = slow.take((0, 1, 2, 0))
    assert got is not None and got[0][1].item() == 1 and slow.hits == 1
    assert threads[-1].startswith("edt-prefetch")
    slow.ahead((0, 2, 2, 0), build, -1, 0.0)
    with pytest.raises(ValueError, match="a broken dataset"):  # raised in the step
        slow.take((0, 2, 2, 0))
    cheap = Prefetcher(clock=clock)
    cheap.build(build, 0, INLINE_SECONDS / 2)
    assert not cheap.wanted()  # a thread would cost more than it saves
    always = Prefetcher(always=True, clock=clock)  # a GPU's: pinned memory, overlapped copies
    always.build(build, 0, 0.0)
    assert always.wanted()
    assert Prefetcher().clock is time.perf_counter  # a learner's: the time builds really take


class _Noisy(nn.Module):
    """Draws from the RNG in every mode, as some models' forward does."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1e-3 * torch.rand_like(x)


def test_a_rehearsal_leaves_the_model_its_rng_and_its_gradients_as_they_were() -> None:
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(5, 7), nn.BatchNorm1d(7), nn.Dropout(0.5), _Noisy(),
                          nn.Linear(7, 3))  # fmt: skip
    params = list(model.parameters())
    before = copy.deepcopy(model.state_dict())
    grads: dict[int, torch.Tensor] = {}

    def keep(i: int) -> Any:
        return lambda p: grads.update({i: p.grad.clone()})

    hooks = [p.register_post_accumulate_grad_hook(keep(i)) for i, p in enumerate(params)]  # type: ignore[no-untyped-call]
    x, y = torch.randn(6, 5), torch.tensor([0, 1, 2, 0, 1, 2])
    rng = torch.get_rng_state()
    held = rehearse(model, params, nn.functional.cross_entropy, x, y)
    assert len(grads) == len(params) and all(g.abs().sum() > 0 for g in grads.values())  # it ran
    assert model.training and all(p.grad is None for p in params)
    # its gradients come back for the learner to hold until its first step
    assert [h.shape for h in held] == [p.shape for p in params]
    assert all(torch.equal(h, grads[i]) for i, h in enumerate(held))
    assert torch.equal(torch.get_rng_state(), rng)
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # running stats too
    for hook in hooks:
        hook.remove()
    model.eval()
    rehearse(model, params, nn.functional.cross_entropy, x, y)
    assert not model.training  # the mode it found
    # one that fails is left to the first step, which raises what is wrong: nothing changed
    assert rehearse(model, params, nn.functional.cross_entropy, x, y[:2]) == []
    assert not model.training and all(p.grad is None for p in params)
    assert all(torch.equal(before[k], model.state_dict()[k]) for k in before)


def test_a_learner_holds_its_rehearsal_gradients_until_its_first_step(
    redis_server: RedisServer, tmp_path: Path, dataset: Path
) -> None:
    """The memory the first step's gradients need, kept in use from the rehearsal until
    that step's forward: memory freed for longer may cost many times more to fill again
    (rehearse)."""
    job = f"held-{uuid.uuid4().hex[:8]}"
    jobs = JobStore(connect(redis_server.url), job)
    spec = JobSpec(job_id=job, model=str(MLP), data=str(dataset), workdir=str(tmp_path),
                   batch_size=BATCH)  # fmt: skip
    learner = Learner(spec, "h0", jobs, redis_server.url)
    try:
        learner.adopt(load_definition(MLP))
        stepper = learner.stepper
        assert [h.shape for h in stepper.held] == [p.shape for p in stepper.params]
        assert all(p.grad is None for p in stepper.params)
        held = [weakref.ref(h) for h in stepper.held]
        alive_at_forward: list[int] = []
        stepper.model.register_forward_pre_hook(
            lambda *_: alive_at_forward.append(sum(r() is not None for r in held))
        )
        learner.form_group(jobs.publish_generation(["h0"]))
        learner.train_step()
        assert alive_at_forward == [0]  # all given back before the first step's forward
        assert stepper.held == [] and learner.counters["step"] == 1
    finally:
        learner.inputs.prefetch.pool.shutdown()
        learner.membership.pg = None


def test_a_lone_goodput_learner_measures_with_no_bucket_and_no_collective(
    redis_server: RedisServer, tmp_path: Path, dataset: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Goodput mode with one learner pays for nothing it does not need: its noise scale
    comes from two consecutive steps' gradients where autograd put them (no step cut in
    two; goodput.py), no step launches an all-reduce (each
    launch the step makes is counted, then made) and no Python hook copies a gradient
    into a bucket (the buckets are made for a later resize, unhooked)."""
    launched: list[int] = []

    def counting(pg: Any) -> Any:
        launch = gloo_or_nccl_allreduce(pg)

        def counted(tensor: torch.Tensor) -> Any:
            launched.append(tensor.numel())
            return launch(tensor)

        return counted

    monkeypatch.setattr(step_module, "gloo_or_nccl_allreduce", counting)
    job = f"lone-{uuid.uuid4().hex[:8]}"
    jobs = JobStore(connect(redis_server.url), job)
    spec = JobSpec(job_id=job, model=str(MLP), data=str(dataset), workdir=str(tmp_path),
                   batch_size=BATCH, batch_min=BATCH, batch_max=4 * BATCH)  # fmt: skip
    learner = Learner(spec, "g0", jobs, redis_server.url)
    try:
        learner.adopt(load_definition(MLP))
        gen = jobs.publish_generation(["g0"])
        learner.form_group(gen)
        learner.take_batch(gen)
        for _ in range(2 * MEASURE_EVERY):
            learner.train_step()
        goodput, buckets = learner.goodput, learner.stepper.buckets
        assert goodput is not None and goodput.noise.observed == 2  # its measuring steps
        assert launched == []
        assert buckets is not None and not buckets.hooked_now()
    finally:
        learner.inputs.prefetch.pool.shutdown()
        learner.membership.pg = None


def _leaves(obj: Any, prefix: str = "") -> list[tuple[str, torch.Tensor]]:
    if isinstance(obj, torch.Tensor):
        return [(prefix, obj)]
    if isinstance(obj, dict):
        return [x for k, v in obj.items() for x in _leaves(v, f"{prefix}/{k}")]
    if isinstance(obj, list | tuple):
        return [x for i, v in enumerate(obj) for x in _leaves(v, f"{prefix}/{i}")]
    return []


def test_bf16_autocast_trains_close_to_fp32(
    redis_server: RedisServer, tmp_path: Path, dataset: Path
) -> None:
    workdir = drive(redis_server, tmp_path, dataset, "0:2", "--precision", "bf16")
    got = [r["loss"] for r in train_records(workdir)]
    want, _params = reference_run(dataset)
    assert got != pytest.approx(want, rel=1e-6)  # autocast ran: bf16's rounding shows
    assert got == pytest.approx(want, rel=0.1)


def test_a_rank_0_killed_between_its_all_reduce_and_its_record_loses_no_step(
    redis_server: RedisServer, tmp_path: Path, dataset: Path
) -> None:
    """The survivor took step 17 with the dead rank 0; as the next rank 0 it writes that
    step's record again, and those of any step before it that the dead one's writer had
    not written yet (it writes every 50 ms), so steps 1..100 each reach the job, with the
    plain updates; and the last evaluation's record (epoch 0, at step 16) again."""
    model = PROJECT_DIR / "tests" / "models" / "rank0_dies_after_allreduce.py"
    workdir = drive(redis_server, tmp_path, dataset, "0:2", *SMALL_BUCKETS, model=model)
    records = train_records(workdir)
    replays = [r for r in records if r.get("replay")]
    steps = [r["step"] for r in replays]
    assert steps and steps[-1] == 17, "the lost step was not written again"
    assert steps == list(range(steps[0], 18))  # the unwritten tail, in order
    assert all(r["workers"] == 2 for r in replays)  # trained by both, before rank 0 died
    every = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    tests = [r for r in every if r["type"] == "test" and r["epoch"] == 0]
    assert tests, "epoch 0's evaluation never reached the job"
    assert any(r.get("replay") for r in tests) and {r["step"] for r in tests} == {16}
    losses, params = reference_run(dataset)
    assert_same_training(workdir, losses, params)


# No host read inside a step (docs/architecture.md, "Elastic training protocol"): the host reads a
# step's agreement only after the next step is queued, so on a GPU it runs a step ahead of
# the device. A TorchFunctionMode in each learner sees every read.
@pytest.mark.parametrize("workers", [1, 2])
def test_no_step_reads_its_own_values_before_the_next_step_is_queued(
    redis_server: RedisServer, tmp_path: Path, dataset: Path, workers: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    reads_dir = tmp_path / "reads"
    reads_dir.mkdir()
    monkeypatch.setenv("EDT_TEST_READS_DIR", str(reads_dir))
    drive(redis_server, tmp_path, dataset, f"0:{workers}", "--max-steps", "12",
          model=COUNTING)  # fmt: skip
    seen = [json.loads(p.read_text()) for p in sorted(reads_dir.glob("reads-*.json"))]
    assert len(seen) == workers, "a learner wrote no count of its reads"
    for learner in seen:
        # the agreement is read, one step late: something is read, and none of it early
        assert learner["reads"], "no read at all: the counting saw nothing"
        assert learner["early"] == [], (
            f"step values read before the next step was queued: {learner['early'][:5]}"
        )


@pytest.mark.parametrize("when", ["starting", "training"])
def test_a_killed_driver_takes_its_learners_with_it(
    tmp_path: Path, dataset: Path, when: str
) -> None:
    """A driver and its Redis killed (a test run killed with SIGKILL: its Redis goes with it)
    while its two learners start, or train: the kernel kills the learners too (their
    parent-death signal). A learner that trains notices its parent gone and leaves; one
    still starting up used to retry the Redis that would never come back, for good (one
    outlived a killed test run by minutes)."""
    redis = RedisServer(tmp_path / "redis", appendonly=False, dies_with_parent=True).start()
    workdir = tmp_path / "run"
    cmd = [sys.executable, "-m", "workers.learner.drive", "--model", str(driven.PACED_TWIN),
           "--data", str(dataset), "--schedule", "0:2", "--batch-size", "64",
           "--epochs", "1000", "--seed", "0", "--workdir", str(workdir),
           "--deadline", "240"]  # fmt: skip
    env = subprocess_env(tmp_path, REDIS_URL=redis.url)
    driver = subprocess.Popen(cmd, cwd=PROJECT_DIR, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)  # fmt: skip
    learners: set[int] = set()
    try:

        def ready() -> bool:
            below = psutil.Process(driver.pid).children(recursive=True)
            # the fork server (the driver's child) and the learners it forked
            learners.update(p.pid for p in below if "workers.learner" in " ".join(p.cmdline()))
            if len([p for p in below if p.pid in learners and p.ppid() != driver.pid]) < 2:
                return False
            metrics = workdir / "metrics.jsonl"
            return when == "starting" or (metrics.exists() and '"train"' in metrics.read_text())

        wait_for(ready, bound(120), f"two learners {when}", step=0.02)
        driver.kill()
        driver.wait(timeout=30)
        redis.stop()
        wait_for(lambda: not alive_pids(learners), bound(30),
                 lambda: f"the killed driver's learners {alive_pids(learners)} gone")  # fmt: skip
    finally:
        driver.kill()
        for pid in alive_pids(learners):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        redis.stop()
