"""What the engine adds to a training step, on the CPU: its host work per step.

    python bench/bench_step_overhead.py [--pairs 5] [--steps 300] [--only one|two]

**One learner** (``one``): the engine's ``Learner`` in this process, a one-member
generation formed as the driver forms it (its watch and record-writer threads running, a
Redis of its own), stepped through ``train_step``, against an idiomatic plain loop in the
same process: the same model definition, optimizer, global batch, sample order (the epoch's
permutation, indexed as tensors) and one torch thread. The plain loop computes the loss and
steps; it records nothing (the engine also counts right answers and writes a train record
each step: that is its own cost). Interleaved pairs, the order swapped within each pair,
and within a pair the two sides alternate every 25 steps, every 2 on the wide MLP, whose
step is ~50 times longer (a change in the machine's load falls on both); a pair's ratio is
plain's seconds per step over the engine's (the engine's step rate over plain's: 1.0 is
parity). Two models: a host-bound one (bench/deep_mlp.py, 42 Linear layers of width 64,
batch 16), where the step is mostly per-operation framework work, and the wide MLP
(bench/wide_mlp.py, 21.0 M parameters, batch 64).

**Two learners** (``two``): the engine through ``workers.learner.drive`` against plain
DistributedDataParallel over gloo in two processes (bench/ddp_baseline.py), as
bench_engine.py's throughput runs them, on the host-bound model.

The table goes to bench/results/step-overhead.md, with the machine's load at each pair.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))
sys.path.insert(0, str(PROJECT / "bench"))

import bench_engine as be  # noqa: E402
import torch  # noqa: E402

from edtweb.redis_server import RedisServer  # noqa: E402
from protocol.connection import connect  # noqa: E402
from protocol.jobstore import JobStore  # noqa: E402
from workers.learner.datasets import write_cifar10  # noqa: E402
from workers.learner.engine import Learner  # noqa: E402
from workers.learner.partition import permutation  # noqa: E402
from workers.learner.spec import JobSpec  # noqa: E402

DEEP = PROJECT / "bench" / "deep_mlp.py"
CHUNK = 25  # steps of one side before the other's, within a pair, times the model's share of
# --steps (at least 2): the wide MLP's (0.1, its step ~50 host-bound ones) alternate every 2
RESULTS = PROJECT / "bench" / "results" / "step-overhead.md"
# (label, model file, global batch, goal: engine rate / plain rate, steps a window per
# --steps: the wide MLP's step is ~50 times the host-bound one's)
ONE = [
    ("host-bound (bench/deep_mlp.py, 42 Linear layers of width 64)", DEEP, 16, 0.95, 1.0),
    ("wide MLP (bench/wide_mlp.py, 21.0 M parameters)", be.WIDE, 64, 0.98, 0.1),
]
TWO = be.Setup("host-bound (bench/deep_mlp.py, 42 Linear layers of width 64)", DEEP, 16,
               50, 600, 1.0)  # fmt: skip


def engine_learner(
    url: str, model: Path, batch: int, data: Path, tmp: Path, **extra: Any
) -> Learner:
    """A learner in this process, prepared and formed as the one member of a generation
    (the driver's way), its watch and record writer running; ``train_step`` steps it.
    ``extra``: more of its job's fields (a goodput-mode batch range, say)."""
    job = f"engine-{uuid.uuid4().hex[:8]}"
    jobs = JobStore(connect(url), job)
    fields = {"batch_size": batch, "epochs": 1000, "checkpoint_every": 100000, **extra}
    spec = JobSpec(job_id=job, model=str(model), data=str(data), workdir=str(tmp / job),
                   **fields)  # fmt: skip
    learner = Learner(spec, "s0", jobs, url)
    learner.prepare()
    learner.membership.watch.start()
    learner.bookkeeping.records.start()
    gen = jobs.publish_generation(["s0"])
    learner.form_group(gen)
    learner.sync_state()
    learner.take_batch(gen)
    return learner


class Plain:
    """The loop people write: the epoch's order, batches indexed as tensors, zero_grad,
    forward, loss, backward, step."""

    def __init__(self, learner: Learner, batch: int) -> None:
        defn = learner.defn
        torch.manual_seed(0)
        self.model = defn.build_model()
        self.optimizer = defn.build_optimizer(self.model.parameters(), learner.spec.lr)
        self.loss_fn = defn.loss_fn
        self.x, self.y = learner.inputs.train_set.tensors  # type: ignore[attr-defined]
        self.batch = batch
        self.per_epoch = len(self.x) // batch
        self.n = 0
        self.order = torch.tensor(permutation(len(self.x), 0, 0))

    def step(self) -> None:
        epoch, it = divmod(self.n, self.per_epoch)
        if it == 0:
            self.order = torch.tensor(permutation(len(self.x), 0, epoch))
        self.n += 1
        idx = self.order[it * self.batch : (it + 1) * self.batch]
        self.optimizer.zero_grad()
        self.loss_fn(self.model(self.x[idx]), self.y[idx]).backward()
        self.optimizer.step()


def seconds_per_step(step: Callable[[], Any], n: int) -> float:
    started = time.perf_counter()
    for _ in range(n):
        step()
    return (time.perf_counter() - started) / n


def interleaved(engine: Callable[[], Any], plain: Callable[[], Any], n: int,
                first_engine: bool, chunk: int = CHUNK) -> tuple[float, float]:  # fmt: skip
    """Seconds per step of each side over ``n`` steps, taken in alternating chunks of
    ``chunk`` steps (the first side alternating between pairs), so that a change in the
    machine's load falls on both sides alike."""
    spent = {"engine": 0.0, "plain": 0.0}
    sides = [("engine", engine), ("plain", plain)]
    if not first_engine:
        sides.reverse()
    done = 0
    while done < n:
        k = min(chunk, n - done)
        for name, step in sides:
            spent[name] += seconds_per_step(step, k) * k
        done += k
    return spent["engine"] / n, spent["plain"] / n


def one_learner(url: str, tmp: Path, pairs: int, steps: int) -> list[dict[str, Any]]:
    rows = []
    for label, model, batch, goal, share in ONE:
        n = max(int(steps * share), 10)
        warm = max(n // 10, 5)
        # room for every step the engine takes: no evaluation inside a window
        need = batch * (warm + n * pairs + 10)
        data = write_cifar10(tmp / f"data-{model.stem}", train=need, test=64)
        learner = engine_learner(url, model, batch, data, tmp)
        plain = Plain(learner, batch)
        seconds_per_step(learner.train_step, warm)
        seconds_per_step(plain.step, warm)
        runs = []
        for i in range(pairs):
            load = os.getloadavg()[0]
            eng, pl = interleaved(learner.train_step, plain.step, n, first_engine=i % 2 == 0,
                                  chunk=max(2, round(CHUNK * share)))  # fmt: skip
            runs.append({"engine_ms": eng * 1e3, "plain_ms": pl * 1e3, "ratio": pl / eng,
                         "load": load})  # fmt: skip
            print(f"{label}, pair {i + 1}: engine {eng * 1e3:.3f} ms/step, plain "
                  f"{pl * 1e3:.3f} ms/step, ratio {pl / eng:.3f}, load {load:.1f}",
                  flush=True)  # fmt: skip
        rows.append({"label": label, "batch": batch, "goal": goal, "runs": runs, "steps": n})
        del learner, plain, data
    return rows


def spread(values: list[float], fmt: str = "{:.3f}") -> str:
    return (f"{fmt.format(statistics.median(values))} "
            f"({fmt.format(min(values))}-{fmt.format(max(values))})")  # fmt: skip


def write(one: list[dict[str, Any]], two: list[dict[str, Any]], a: argparse.Namespace,
          took: float) -> None:  # fmt: skip
    when = time.strftime("%Y-%m-%d %H:%M")
    lines = ["# The engine's host work per step, on the CPU", "",
             f"`python bench/bench_step_overhead.py --pairs {a.pairs} --steps {a.steps}` "
             f"({when}, torch {torch.__version__}, {os.cpu_count()} cores, one torch thread "
             "per process). Interleaved pairs, the order swapped within each pair; ratio: "
             "the engine's step rate over the baseline's (1.0: parity). Load: the 1-minute "
             "load average at each pair's start.", ""]  # fmt: skip
    if one:
        lines += ["## One learner against a plain loop (one process)", "",
                  "| model | batch | pairs x steps | engine ms/step | plain ms/step | ratio "
                  "median (min-max) | goal | load |",
                  "|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for row in one:
            r = row["runs"]
            lines.append(
                f"| {row['label']} | {row['batch']} | {len(r)} x {row['steps']} | "
                f"{spread([x['engine_ms'] for x in r])} | {spread([x['plain_ms'] for x in r])} "
                f"| **{spread([x['ratio'] for x in r])}** | ≥ {row['goal']} | "
                f"{spread([x['load'] for x in r], '{:.1f}')} |"
            )
        lines.append("")
    if two:
        lines += ["## Two learners against DistributedDataParallel (gloo, two processes)", "",
                  "| model | batch | pairs | engine samples/s | DDP samples/s | ratio median "
                  "(min-max) | engine CPU ms/step/worker | DDP CPU ms/step/worker | goal "
                  "| load |", "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for row in two:
            s, r = row["setup"], row["runs"]
            lines.append(
                f"| {s.name} | {s.batch} | {len(r)} | "
                f"{spread([x['engine']['samples_per_s'] for x in r], '{:.0f}')} | "
                f"{spread([x['ddp']['samples_per_s'] for x in r], '{:.0f}')} | "
                f"**{spread([x['ratio'] for x in r])}** | "
                f"{spread([x['engine']['cpu_ms_per_step'] for x in r], '{:.2f}')} | "
                f"{spread([x['ddp']['cpu_ms_per_step'] for x in r], '{:.2f}')} | "
                f"≥ {s.goal} | {spread([x['load'] for x in r], '{:.1f}')} |"
            )
        lines.append("")
    lines.append(f"Took {took:.0f} s.")
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--only", choices=["one", "two"])
    a = p.parse_args()
    torch.set_num_threads(1)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="edt-overhead-") as tmpdir:
        tmp = Path(tmpdir)
        redis = RedisServer(tmp / "redis", appendonly=False, dies_with_parent=True).start()
        try:
            one = one_learner(redis.url, tmp, a.pairs, a.steps) if a.only != "two" else []
            two: list[dict[str, Any]] = []
            if a.only != "one":
                data = write_cifar10(tmp / "data-two", train=TWO.batch * 2000, test=64)
                two = be.throughput(redis.url, data, tmp, a.pairs, [2], ["deep"],
                                    setups=[(TWO, "deep")])  # fmt: skip
        finally:
            redis.stop()
    write(one, two, a, time.monotonic() - started)
    sys.stdout.flush()
    os._exit(0)  # the in-process learners' threads: nothing to keep


if __name__ == "__main__":
    main()
