"""What goodput mode adds to a lone learner's step, on the CPU.

    python bench/bench_goodput_step.py [--pairs 5] [--steps 400]

One learner of the engine in this process (``bench_step_overhead.engine_learner``: formed
as the driver forms it, its watch and record writer running), on the model and data of
``bench/bench_goodput_live.py`` (the example MLP, the synthetic CIFAR-10, base batch 64,
learning rate 0.001): in goodput mode (batch range 64-1024, trained at its base batch, as
the live bench's runs train until the target) against the same engine at the fixed batch
64. Both do the same forward, backward and optimizer step on the same samples; what goodput
mode adds is its noise-scale measurement (every ``goodput.MEASURE_EVERY``-th step a copy
of the gradient, and in the step after three inner products), its learning-rate gain, its
read of each step's values at once and its longer record. Interleaved pairs, the order
swapped between pairs, the two sides alternating every 25 steps within a pair; ratio:
fixed's seconds per step over goodput mode's (1.0: goodput mode costs nothing). The table
goes to bench/results/goodput-step.md, with the machine's load at each pair's start.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))
sys.path.insert(0, str(PROJECT / "bench"))

import torch  # noqa: E402
from bench_step_overhead import engine_learner, interleaved, seconds_per_step, spread  # noqa: E402

from edtweb.redis_server import RedisServer  # noqa: E402
from workers.learner.datasets import write_cifar10  # noqa: E402
from workers.learner.goodput import MEASURE_EVERY  # noqa: E402

MODEL = PROJECT / "examples" / "mlp.py"
BATCH = 64
RESULTS = PROJECT / "bench" / "results" / "goodput-step.md"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--steps", type=int, default=400)
    a = p.parse_args()
    torch.set_num_threads(1)
    started = time.monotonic()
    runs = []
    with tempfile.TemporaryDirectory(prefix="edt-goodput-step-") as tmpdir:
        tmp = Path(tmpdir)
        redis = RedisServer(tmp / "redis", appendonly=False, dies_with_parent=True).start()
        try:
            warm = max(a.steps // 10, 5)
            need = BATCH * (warm + a.steps * a.pairs + 10)  # no evaluation inside a window
            data = write_cifar10(tmp / "data", train=need, test=64)
            fixed = engine_learner(redis.url, MODEL, BATCH, data, tmp, lr=0.001)
            goodput = engine_learner(redis.url, MODEL, BATCH, data, tmp, lr=0.001,
                                     batch_min=BATCH, batch_max=1024)  # fmt: skip
            assert goodput.goodput is not None and fixed.goodput is None
            seconds_per_step(fixed.train_step, warm)
            seconds_per_step(goodput.train_step, warm)
            for i in range(a.pairs):
                load = os.getloadavg()[0]
                # interleaved(engine, plain): "engine" is goodput mode, "plain" the fixed batch
                gp, fx = interleaved(goodput.train_step, fixed.train_step, a.steps,
                                     first_engine=i % 2 == 0)  # fmt: skip
                runs.append({"goodput_ms": gp * 1e3, "fixed_ms": fx * 1e3, "ratio": fx / gp,
                             "load": load})  # fmt: skip
                print(f"pair {i + 1}: goodput {gp * 1e3:.3f} ms/step, fixed {fx * 1e3:.3f} "
                      f"ms/step, ratio {fx / gp:.3f}, load {load:.1f}", flush=True)  # fmt: skip
            estimates = goodput.goodput.noise.observed
        finally:
            redis.stop()
    when = time.strftime("%Y-%m-%d %H:%M")
    ratios = [r["ratio"] for r in runs]
    lines = [
        "# Goodput mode's cost per step, one learner, on the CPU", "",
        f"`python bench/bench_goodput_step.py --pairs {a.pairs} --steps {a.steps}` ({when}, "
        f"torch {torch.__version__}, {os.cpu_count()} cores, one torch thread): the example "
        f"MLP at batch {BATCH}, goodput mode (measuring every {MEASURE_EVERY}th step; "
        f"{estimates} noise estimates taken) against the fixed batch, the same engine. "
        "Ratio: fixed's seconds per step over goodput mode's (1.0: no cost).", "",
        "| pairs x steps | goodput ms/step | fixed ms/step | ratio median (min-max) | load |",
        "|---|---|---|---|---|",
        f"| {len(runs)} x {a.steps} | {spread([r['goodput_ms'] for r in runs])} | "
        f"{spread([r['fixed_ms'] for r in runs])} | **{spread(ratios)}** | "
        f"{spread([r['load'] for r in runs], '{:.1f}')} |", "",
        f"Took {time.monotonic() - started:.0f} s; median ratio {statistics.median(ratios):.3f}.",
    ]  # fmt: skip
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)
    os._exit(0)  # the in-process learners' threads: nothing to keep


if __name__ == "__main__":
    main()
