"""Where an engine step's time goes on a GPU (a diagnosis, not a comparison: bench_gpu.py
compares).

    python bench/profile_gpu_step.py [--steps 200] [--model wide|resnet] [--precision fp32|bf16]

The learner in this process, one member (NCCL), the wide MLP (bench/wide_mlp.py, the
default) or the ResNet-18-sized CNN (bench/resnet18.py) at batch 256, fp32 unless told:
its step time over ``--steps`` steps; the wall time of each phase of ``train_step`` (timers
around the engine's own methods, no synchronisation added); a torch.profiler table of 30
steps by CPU and by device time; and a plain loop's step in the same process (the data on
the GPU, the same precision; measured after the profiler, so slower than in a process of
its own). Needs a CUDA device; prints, writes nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from bench.bench_gpu import SETUPS  # noqa: E402
from bench.bench_step_overhead import engine_learner  # noqa: E402
from edtweb.redis_server import RedisServer  # noqa: E402
from workers.learner.datasets import write_cifar10  # noqa: E402

BATCH = 256
# (the learner's part, or "" for the learner itself; its method; what it does)
PHASES = [
    ("", "_batches_for", "batches: take, build the next ahead, to the device"),
    ("stepper", "accumulate", "forward, backward (alone: no all-reduce), the agreement unread"),
    ("stepper", "apply", "optimizer step"),
    ("", "_train_record", "train record"),
    ("", "_resolve", "the step before's agreement read (waits for the device), its record"),
]


def timed(obj: Any, name: str, label: str, spent: dict[str, float]) -> None:
    """Wrap ``obj.name`` to add its wall time to ``spent[label]``."""
    inner: Callable[..., Any] = getattr(obj, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            spent[label] += time.perf_counter() - started

    setattr(obj, name, wrapper)


def ms_per_step(step: Callable[[], Any], n: int) -> float:
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(n):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - started) / n * 1000


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--model", choices=sorted(SETUPS), default="wide")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    a = p.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: profile_gpu_step.py needs one")
        return
    with tempfile.TemporaryDirectory(prefix="edt-profile-") as tmpdir:
        tmp = Path(tmpdir)
        # whole epochs of room: no evaluation inside a timed window
        data = write_cifar10(tmp / "data", train=BATCH * (3 * a.steps + 100), test=256)
        redis = RedisServer(tmp / "redis", appendonly=False, dies_with_parent=True).start()
        try:
            report(redis.url, data, tmp, a.steps, SETUPS[a.model].model, a.precision)
        finally:
            redis.stop()
    sys.stdout.flush()
    os._exit(0)  # the learner's watch and writer threads and its NCCL group: nothing to keep


def report(url: str, data: Path, tmp: Path, n: int, model: Path, precision: str) -> None:
    learner = engine_learner(url, model, BATCH, data, tmp, precision=precision)
    step = learner.train_step
    ms_per_step(step, 30)  # warm-up
    engine_ms = ms_per_step(step, n)
    spent: dict[str, float] = defaultdict(float)
    for part, name, label in PHASES:
        timed(getattr(learner, part) if part else learner, name, label, spent)
    with_timers = ms_per_step(step, n)
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, {model.name}, {precision}")
    print(f"engine step {engine_ms:.3f} ms ({n} steps); {with_timers:.3f} ms with the timers")
    for label, seconds in sorted(spent.items(), key=lambda kv: -kv[1]):
        print(f"  {label:55s} {seconds / n * 1000:7.3f} ms/step")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        ms_per_step(step, 30)
    table = prof.key_averages()
    print("30 steps, by self CPU time:")
    print(table.table(sort_by="self_cpu_time_total", row_limit=25))
    print("by device time:")
    print(table.table(sort_by="self_device_time_total", row_limit=15))

    defn = learner.defn
    x_all, y_all = (t.cuda() for t in learner.inputs.train_set.tensors)  # type: ignore[attr-defined]
    net = defn.build_model().cuda()
    optimizer = defn.build_optimizer(net.parameters(), 0.01)
    rng = torch.Generator(device="cuda")

    cast = learner.stepper.autocast  # the same precision as the engine's step

    def plain() -> None:
        idx = torch.randint(0, len(x_all), (BATCH,), device="cuda", generator=rng)
        optimizer.zero_grad()
        with cast():
            loss = defn.loss_fn(net(x_all[idx]), y_all[idx])
        loss.backward()
        optimizer.step()

    ms_per_step(plain, 30)
    plain_ms = ms_per_step(plain, n)
    print(f"plain step (this process) {plain_ms:.3f} ms; engine / plain {engine_ms / plain_ms:.2f}")


if __name__ == "__main__":
    main()
