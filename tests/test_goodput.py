"""Goodput mode's job side (docs/architecture.md, "Goodput mode"): the gradient noise scale
the engine measures against one computed directly, the batch a generation names, and a
goodput-mode job resized and restarted from its checkpoint training on from the same
state. Real learner processes, real gloo, a real Redis; the direct estimate is plain torch."""

from __future__ import annotations

import itertools
import json
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.func import functional_call, grad, vmap

from edtweb.redis_server import RedisServer
from protocol.connection import connect
from protocol.jobstore import JobStore
from scheduler import elastic
from scheduler.elastic import Control, Publish, Seen
from tests.harness.processes import PROJECT_DIR, subprocess_env
from workers.learner.contract import load_definition
from workers.learner.datasets import load_dataset, write_cifar10
from workers.learner.drive import batch_at, parse_batches, parse_schedule
from workers.learner.goodput import NoiseScale, small_batch
from workers.learner.partition import rank_indices, rank_slice

MLP = PROJECT_DIR / "examples" / "mlp.py"
GRAD_WRITING = PROJECT_DIR / "tests" / "models" / "grad_writing_mlp.py"  # MLP, SGD + decay
GRAD_HOOKED = PROJECT_DIR / "tests" / "models" / "grad_hooked_mlp.py"  # its step's hook decays
PACED_TWIN = PROJECT_DIR / "tests" / "models" / "paced_twin_mlp.py"  # MLP, 0.1 s a forward


# The statistics, pure ----------------------------------------------------------------------


def expected(sqr: float, var: float, b: float) -> float:
    """E|g_b|² of a batch of ``b`` samples: |G|² + tr(Σ)/b."""
    return sqr + var / b


@pytest.mark.parametrize(("small", "big"), [(32.0, 64.0), (16.0, 256.0), (100.0, 101.0)])
def test_the_estimators_give_back_the_norm_and_the_variance(small: float, big: float) -> None:
    noise = NoiseScale(base=64)
    for _ in range(3):
        assert noise.observe(expected(2.0, 150.0, small), small, expected(2.0, 150.0, big), big)
    assert noise.grad_sqr == pytest.approx(2.0) and noise.grad_var == pytest.approx(150.0)
    assert noise.gns == pytest.approx(75.0)


def test_the_gain_and_the_efficiency_are_pollux_s() -> None:
    """gain r = (gns + M0)/(gns + M) · M/M0; efficiency E = r · M0/M = (gns + M0)/(gns + M):
    1 at the base batch; the gain grows toward M/M0 as the noise dominates."""
    noise = NoiseScale(base=64)
    noise.observe(expected(2.0, 150.0, 32), 32, expected(2.0, 150.0, 64), 64)
    gns = 75.0
    for batch in (64, 128, 1024):
        assert noise.efficiency(batch) == pytest.approx((gns + 64) / (gns + batch))
        assert noise.gain(batch) == pytest.approx((gns + 64) / (gns + batch) * batch / 64)
    assert noise.gain(64) == pytest.approx(1.0)
    pure_noise = NoiseScale(base=64)
    pure_noise.observe(expected(0.0, 150.0, 32), 32, expected(0.0, 150.0, 64), 64)
    assert pure_noise.gns is None and pure_noise.gain(256) == pytest.approx(4.0)


def test_nothing_is_known_or_scaled_before_an_estimate() -> None:
    noise = NoiseScale(base=64)
    assert not noise.observe(5.0, 64, 5.0, 64)  # one small batch the size of the big one
    assert not noise.observe(math.inf, 32, 5.0, 64)
    assert noise.gns is None and noise.gain(512) == 1.0 and noise.efficiency(64) == 1.0
    assert noise.stepped(512) == 1.0 and noise.progress == 1.0


def test_the_moving_averages_forget_faster_at_larger_batches() -> None:
    """AdaptDL's decay, 0.999 per base batch of samples: after a change of the true values
    the estimate at 16x the base batch moves 16 times as far per step (once both averages
    are long past their start)."""
    moved = []
    for big in (64.0, 1024.0):
        noise = NoiseScale(base=64)
        for _ in range(12_000):
            noise.observe(expected(1.0, 100.0, big / 2), big / 2, expected(1.0, 100.0, big), big)
        noise.observe(expected(3.0, 100.0, big / 2), big / 2, expected(3.0, 100.0, big), big)
        moved.append(noise.grad_sqr - 1.0)
    assert moved[1] / moved[0] == pytest.approx(16, rel=0.05)


def test_a_measurement_every_few_steps_decays_the_averages_by_the_steps_between() -> None:
    """Measured on every 4th step only (goodput.MEASURE_EVERY), each estimate decays the
    averages by the 4 steps since the last: after a change of the true values the estimate
    moves 4 times as far per measurement as one measured every step."""
    moved = []
    for steps in (1, 4):
        noise = NoiseScale(base=64)
        for _ in range(12_000):
            noise.observe(expected(1.0, 100.0, 32), 32, expected(1.0, 100.0, 64), 64, steps)
        noise.observe(expected(3.0, 100.0, 32), 32, expected(3.0, 100.0, 64), 64, steps)
        moved.append(noise.grad_sqr - 1.0)
    assert moved[1] / moved[0] == pytest.approx(4, rel=0.05)


def test_the_state_round_trips_and_keeps_the_base() -> None:
    noise = NoiseScale(base=64)
    noise.observe(expected(2.0, 150.0, 32), 32, expected(2.0, 150.0, 64), 64)
    noise.stepped(128)
    other = NoiseScale(base=64)
    other.load_state_dict(json.loads(json.dumps(noise.state_dict())))
    assert other == noise


def test_the_small_batches_count_by_their_harmonic_mean() -> None:
    assert small_batch([32, 32]) == (2, 32.0)
    assert small_batch([3, 0, 6]) == (2, 4.0)
    assert small_batch([0]) == (0, 0.0)


def test_a_batch_that_starts_where_the_samples_done_end() -> None:
    order = list(range(100))
    assert rank_slice(order, 10, 8, 2, 1) == [14, 15, 16, 17]
    assert rank_indices(order, 3, 8, 2, 0) == rank_slice(order, 24, 8, 2, 0)


def test_the_drive_schedule_names_batches() -> None:
    text = "0:1,20:2@128,40:3,60:1@64"
    assert parse_schedule(text) == [(0, 1), (20, 2), (40, 3), (60, 1)]
    assert parse_batches(text) == [(20, 128), (60, 64)]
    assert [batch_at(parse_batches(text), s) for s in (0, 20, 59, 60)] == [0, 128, 128, 64]
    with pytest.raises(ValueError, match="STEP:WORKERS@BATCH"):
        parse_batches("0:1@x")


# The controller: a decision's batch ---------------------------------------------------------


class Job:
    """One job's controller with learners on ``h.<i>`` that say READY and adopt at once."""

    def __init__(self) -> None:
        self.c = Control()
        self.generation = self.adopted = 0
        self.published: list[Publish] = []
        self.count = 0

    def token(self) -> str:
        self.count += 1
        return f"t{self.count}"

    def seen(self) -> Seen:
        return Seen(generation=self.generation, adopted=self.adopted,
                    ready=frozenset(self.c.joining))  # fmt: skip

    def act(self, actions: list[elastic.Action]) -> None:
        for action in actions:
            if isinstance(action, Publish):
                self.published.append(action)
                self.generation = action.generation

    def decide(self, target: int, batch: int = 0) -> None:
        slots = [f"h.{i}" for i in range(target)]
        new = [s for s in slots if s not in self.c.members and s not in self.c.joining]
        self.c, actions = elastic.apply(self.c, self.seen(), target, new, [], self.token, batch)
        self.act(actions)

    def tick(self, adopt: bool = True) -> None:
        self.c, actions, _ = elastic.tick(self.c, self.seen(), None, self.token)
        self.act(actions)
        if adopt:
            self.adopted = self.generation


def test_a_decisions_batch_goes_with_the_generation_that_resizes() -> None:
    job = Job()
    job.decide(1, 128)
    job.tick()
    assert [(p.members, p.batch) for p in job.published] == [(("h.0",), 128)]
    job.decide(2, 256)
    job.tick()
    assert [(p.members, p.batch) for p in job.published[1:]] == [(("h.0", "h.1"), 256)]
    job.tick()
    assert len(job.published) == 2  # nothing more while nothing changes


def test_a_new_batch_at_the_same_size_publishes_the_same_members_once_settled() -> None:
    job = Job()
    job.decide(2)
    job.tick()
    assert [p.batch for p in job.published] == [0]  # a fixed-batch decision names none
    job.decide(2, 512)
    job.tick(adopt=False)
    assert [(p.members, p.batch) for p in job.published[1:]] == [(("h.0", "h.1"), 512)]
    job.decide(2, 1024)
    job.tick(adopt=False)  # the last generation is not adopted yet: wait
    assert len(job.published) == 2
    job.adopted = job.generation
    job.tick()
    assert [(p.members, p.batch) for p in job.published[2:]] == [(("h.0", "h.1"), 1024)]
    job.decide(2)  # a decision without a batch keeps the last one asked
    job.tick()
    assert len(job.published) == 3 and job.c.batch == 1024


def test_a_generation_names_its_batch_in_redis(redis_server: RedisServer) -> None:
    jobs = JobStore(connect(redis_server.url), "goodput-gen")
    jobs.forget()
    assert jobs.generation_batch(jobs.publish_generation(["a"], 256)) == 256
    assert jobs.generation_batch(jobs.publish_generation(["a", "b"])) == 0  # keep yours
    assert jobs.members(2) == ["a", "b"]


# Live: the engine's estimate, a resize, a restart -------------------------------------------


@pytest.fixture(scope="module")
def big_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2048 samples: the finite set's own bias on |G|² (tr(Σ)/(N-1), sampling without
    replacement) stays a few per cent."""
    return write_cifar10(tmp_path_factory.mktemp("data"), train=2048, test=64)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_cifar10(tmp_path_factory.mktemp("data"), train=1024, test=64)


def drive(redis: RedisServer, workdir: Path, data: Path, schedule: str, *extra: str,
          model: Path = MLP) -> list[dict[str, Any]]:  # fmt: skip
    """A goodput-mode job driven on real learners; its train records, the first of each
    step (a new rank 0's copies, ``replay``, are the same step's)."""
    cmd = [sys.executable, "-m", "workers.learner.drive", "--model", str(model),
           "--data", str(data), "--schedule", schedule, "--epochs", "100", "--seed", "0",
           "--workdir", str(workdir), "--deadline", "240", *extra]  # fmt: skip
    env = subprocess_env(workdir.parent, REDIS_URL=redis.url)
    done = subprocess.run(cmd, cwd=PROJECT_DIR, env=env, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    lines = (workdir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def first_of_each_step(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    kept: dict[int, dict[str, Any]] = {}
    for r in (r for r in records if r["type"] == "train"):
        kept.setdefault(r["step"], r)
    return [kept[s] for s in sorted(kept)]


def direct_noise_scale(data: Path) -> tuple[float, float, float]:
    """|G|², tr(Σ) and their ratio at the job's first weights (its model and seed), from
    the gradient of every training sample: G their mean, tr(Σ) their variance."""
    model = load_definition(MLP).build_model  # the engine seeds, then builds
    torch.manual_seed(0)
    net = model()
    train, _test, _classes = load_dataset(data)
    x_all, y_all = train.tensors
    params = {k: v.detach() for k, v in net.named_parameters()}

    def loss(p: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = functional_call(net, p, (x.unsqueeze(0),))
        return torch.nn.functional.cross_entropy(out, y.unsqueeze(0))

    per_sample = vmap(grad(loss), in_dims=(None, 0, 0))
    total = {k: torch.zeros_like(v, dtype=torch.float64) for k, v in params.items()}
    squares = 0.0
    for lo in range(0, len(y_all), 256):
        grads = per_sample(params, x_all[lo : lo + 256], y_all[lo : lo + 256])
        for k, g in grads.items():
            total[k] += g.double().sum(0)
            squares += float(g.double().pow(2).sum())
    n = len(y_all)
    sqr = sum(float((t / n).pow(2).sum()) for t in total.values())
    var = (squares / n - sqr) * n / (n - 1)
    return sqr, var, var / sqr


@pytest.mark.parametrize(
    ("schedule", "micro", "model"),
    [("0:2", "0", MLP), ("0:1", "64", MLP), ("0:1", "0", MLP), ("0:1", "0", GRAD_WRITING),
     ("0:1", "0", GRAD_HOOKED)],
    ids=["two-learners", "micro-batches", "one-learner-two-steps",
         "one-learner-two-steps-own-optimizer-writes-gradients",
         "one-learner-two-steps-torch-optimizer-hook-writes-gradients"],
)  # fmt: skip
def test_the_engines_noise_scale_is_within_20_percent_of_a_direct_estimate(
    redis_server: RedisServer,
    tmp_path: Path,
    big_data: Path,
    schedule: str,
    micro: str,
    model: Path,
) -> None:
    """The model held still (a learning rate of 1e-8): the engine's smoothed estimate from
    its small and big batches (two learners' local batches of 128 against the global 256;
    one learner's micro-batches of 64 against its 256; one learner's two consecutive steps
    of 256 against their mean) against the direct one. Under torch's own optimizer a lone
    learner keeps the measuring step's gradients for the next step as they are; a
    hand-written optimizer that writes into them (weight decay added through ``.data``,
    which no tensor version counts) makes it copy them, and so does a write that their
    versions count (a hook on torch's optimizer's step)."""
    records = first_of_each_step(drive(
        redis_server, tmp_path / "run", big_data, schedule, "--batch-size", "256",
        "--batch-min", "64", "--batch-max", "1024", "--max-micro-batch", micro,
        "--max-steps", "100", "--lr", "1e-8", model=model,
    ))  # fmt: skip
    sqr, var, gns = direct_noise_scale(big_data)
    last = records[-1]
    print(f"noise scale: engine {last['gns']:.2f} ({schedule}, micro-batch cap {micro}), "
          f"direct {gns:.2f}; |G|² {last['grad_sqr']:.4f} vs {sqr:.4f}, tr(Σ) "
          f"{last['grad_var']:.2f} vs {var:.2f}")  # fmt: skip
    assert len(records) == 100 and all(r["batch"] == 256 for r in records)
    assert last["gns"] == pytest.approx(gns, rel=0.2)
    assert last["grad_sqr"] == pytest.approx(sqr, rel=0.2)
    assert last["grad_var"] == pytest.approx(var, rel=0.2)
    # at the base batch: the learning rate as given
    assert last["efficiency"] == pytest.approx(1.0) and last["gain"] == pytest.approx(1.0)


def assert_continuous(records: list[dict[str, Any]]) -> None:
    """Every step once, in order; progress the sum of the gains from the first step on (a
    state lost or reset at a resize would start it again); the learning rate the base one
    times the step's gain."""
    assert [r["step"] for r in records] == list(range(1, len(records) + 1))
    progress = 0.0
    for r in records:
        progress += r["gain"]
        assert r["progress"] == pytest.approx(progress, rel=1e-9), r
        assert r["lr"] == pytest.approx(0.01 * r["gain"], rel=1e-9), r
        assert r["efficiency"] == pytest.approx(r["gain"] * r["base_batch"] / r["batch"])


@pytest.mark.parametrize("extra", [(), ("--loader-workers", "1")], ids=["gathered", "fed"])
def test_a_goodput_job_resized_with_new_batches_trains_on_from_the_same_state(
    redis_server: RedisServer, tmp_path: Path, data: Path, extra: tuple[str, ...]
) -> None:
    """1 -> 2 -> 3 -> 1 learners, each generation at the batch the schedule names: every
    member takes it, the statistics and progress carry across each resize, the loss goes on
    from where it was (a learner that started from scratch would be back near ln 10); its
    samples gathered in the learner, or read by DataLoader workers from each new place."""
    records = first_of_each_step(drive(
        redis_server, tmp_path / "run", data, "0:1,16:2@128,28:3@256,40:1@96",
        "--batch-size", "64", "--batch-min", "32", "--batch-max", "512", "--max-steps", "52",
        "--lr", "0.01", *extra, model=PACED_TWIN,
    ))  # fmt: skip
    assert_continuous(records)
    sizes = []
    for r in records:
        if not sizes or sizes[-1] != (r["workers"], r["batch"]):
            sizes.append((r["workers"], r["batch"]))
    assert sizes == [(1, 64), (2, 128), (3, 256), (1, 96)]
    losses = [r["loss"] for r in records]
    assert losses[-1] < losses[0] - 0.5  # it learns
    for before, after in itertools.pairwise(records):
        if (before["workers"], before["batch"]) != (after["workers"], after["batch"]):
            assert after["loss"] < before["loss"] + 0.3, (before, after)  # no jump back
            assert after["grad_sqr"] == pytest.approx(before["grad_sqr"], rel=0.5)
    # from the first estimate on: a lone learner's first comes from its first two steps
    assert "gns" not in records[0] and all("gns" in r for r in records[1:])
    # every member of each generation holds the same statistics once it formed
    held: dict[int, set[tuple[str, str]]] = {}
    said = re.compile(r"generation (\d+) trains at a global batch of (\d+; progress \S+ "
                      r"base-batch steps, \d+)")  # fmt: skip
    for log in (tmp_path / "run" / "logs").glob("*.log"):
        for gen, state in said.findall(log.read_text()):
            held.setdefault(int(gen), set()).add(state)
    assert sorted(held) == [1, 2, 3, 4] and all(len(states) == 1 for states in held.values())
    # a larger batch is worth more than a base-batch step, but less per sample
    grown = [r for r in records if r["batch"] > 64]
    assert all(1.0 < r["gain"] < r["batch"] / 64 and r["efficiency"] < 1.0 for r in grown)


def test_a_goodput_job_read_through_loader_workers_trains_as_its_own_gather(
    redis_server: RedisServer, tmp_path: Path, data: Path
) -> None:
    """Two learners at the batch the generation names (not the base batch), over three
    epochs: with the samples read by DataLoader workers (docs/architecture.md, "Input
    pipeline") and gathered in the learner, every step the same loss, statistics and
    learning rate."""
    runs = [first_of_each_step(drive(
        redis_server, tmp_path / name, data, "0:2@128", "--batch-size", "64",
        "--batch-min", "32", "--batch-max", "512", "--max-steps", "20", "--lr", "0.01", *extra,
    )) for name, extra in (("fed", ("--loader-workers", "1")), ("gathered", ()))]  # fmt: skip
    fed, gathered = runs
    assert len(fed) == len(gathered) == 20 and {r["batch"] for r in fed} == {128}
    assert fed[-1]["epoch"] == 2
    for a, b in zip(fed, gathered, strict=True):
        assert (a["workers"], a["batch"], a["epoch"]) == (b["workers"], b["batch"], b["epoch"])
        for key in ("loss", "lr", "gns", "progress"):
            assert a[key] == pytest.approx(b[key], rel=1e-5), (key, a, b)
    logs = "\n".join(p.read_text() for p in (tmp_path / "fed" / "logs").glob("*.log"))
    assert re.search(r"largest worker resident [1-9]", logs), logs[-2000:]


@pytest.mark.parametrize("extra", [(), ("--loader-workers", "1")], ids=["gathered", "fed"])
def test_a_goodput_job_restarted_from_its_checkpoint_keeps_its_statistics_and_batch(
    redis_server: RedisServer, tmp_path: Path, data: Path, extra: tuple[str, ...]
) -> None:
    """Every learner killed at step 18: the job goes back to its last checkpoint (an epoch
    is 8 steps at the batch 128) and redoes the steps since with the batch, statistics and
    progress it had there: the same losses and learning rates as the first time (its
    samples gathered in the learner, or read by DataLoader workers from the checkpoint's
    place on)."""
    records = drive(
        redis_server, tmp_path / "run", data, "0:2@128", "--kill", "18:KILL:all",
        "--batch-size", "64", "--batch-min", "32", "--batch-max", "512", "--max-steps", "32",
        "--lr", "0.01", *extra, model=PACED_TWIN,
    )  # fmt: skip
    events = [json.loads(line) for line in (tmp_path / "run" / "events.jsonl").open()]
    restart = next(e for e in events if e["kind"] == "restart")
    assert 0 < restart["from_step"] < restart["step"]
    train = [r for r in records if r["type"] == "train"]
    first = first_of_each_step(train)
    assert_continuous(first)
    redone = [r for r in train if r["step"] <= restart["step"] and r not in first
              and not r.get("replay")]  # fmt: skip
    assert redone, "no step was redone after the restart"
    for again in redone:
        was = first[again["step"] - 1]
        for key in ("batch", "loss", "lr", "gain", "progress", "gns"):
            assert again[key] == pytest.approx(was[key], rel=1e-4), (key, was, again)
    assert {r["batch"] for r in first} == {128}
