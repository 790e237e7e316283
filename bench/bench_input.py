"""Input pipeline benchmark (docs/architecture.md, "Input pipeline"): an image-folder job's
samples/s through the learner against a plain DataLoader loop on the same files.

    python bench/bench_input.py [--pairs 5] [--workers 1,2,4]     (make bench runs it)

The data: large JPEGs (``--side`` pixels square, imagefolder.write_photos) brought to 32x32,
so that decoding, not the model (examples/mlp.py), bounds the rate.

- **engine**: one learner (``python -m workers.learner.drive``, schedule ``0:1``), the
  job's ``image_size`` 32 and ``loader_workers`` W: its Feed, the elastic order, its
  records; the rate from the train records' times.
- **plain**: ``DataLoader(folder, batch_size=B, shuffle=True, drop_last=True,
  num_workers=W, persistent_workers=True, prefetch_factor=4)`` over the same
  ``ImageFolder`` (the same decode and resize), the same model, loss and optimizer, one
  torch thread, in a fresh process.

Both skip their first ``--warm`` steps (start-up, the workers' first batches) and stop
before the epoch ends (no evaluation is timed). Pairs interleave, their order alternating;
the 1-minute load average is recorded with each. Then the engine alone at each W of
``--workers``. Writes bench/results/input.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from edtweb.redis_server import RedisServer  # noqa: E402
from workers.learner.imagefolder import write_photos  # noqa: E402

MLP = PROJECT / "examples" / "mlp.py"
BATCH, SIZE = 64, 32

PLAIN = """
import json, sys, time, torch
from pathlib import Path
from torch.utils.data import DataLoader
from workers.learner.contract import load_definition
from workers.learner.imagefolder import load
data, workers, steps, warm, batch, size = sys.argv[1:7]
workers, steps, warm, batch = int(workers), int(steps), int(warm), int(batch)
torch.set_num_threads(1)
torch.manual_seed(0)
train, _test, _ = load(Path(data), int(size))
loader = DataLoader(train, batch_size=batch, shuffle=True, drop_last=True,
                    num_workers=workers, persistent_workers=True, prefetch_factor=4)
defn = load_definition(Path(sys.argv[7]))
model = defn.build_model()
optimizer = defn.build_optimizer(model.parameters(), 0.01)
times = []
for step, (x, y) in enumerate(loader):
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
    times.append(time.perf_counter())
    if step + 1 >= steps:
        break
print(json.dumps({"rate": batch * (steps - warm) / (times[-1] - times[warm - 1])}))
"""


def engine_rate(redis: RedisServer, data: Path, workers: int, steps: int, warm: int,
                tmp: Path) -> float:  # fmt: skip
    """Samples/s of one learner over steps ``warm+1..steps``, from its train records' times."""
    workdir = Path(tempfile.mkdtemp(dir=tmp, prefix="engine-"))
    cmd = [sys.executable, "-m", "workers.learner.drive", "--model", str(MLP),
           "--data", str(data), "--schedule", "0:1", "--batch-size", str(BATCH),
           "--max-steps", str(steps), "--epochs", "1", "--image-size", str(SIZE),
           "--loader-workers", str(workers), "--workdir", str(workdir),
           "--deadline", "600"]  # fmt: skip
    env = {**os.environ, "REDIS_URL": redis.url, "PYTHONPATH": str(PROJECT)}
    done = subprocess.run(cmd, cwd=PROJECT, env=env, capture_output=True, text=True,
                          timeout=900)  # fmt: skip
    if done.returncode != 0:
        sys.exit(f"the engine's run failed: {done.stderr[-3000:]}")
    lines = (workdir / "metrics.jsonl").read_text().splitlines()
    times = {r["step"]: r["time"] for r in map(json.loads, lines) if r["type"] == "train"}
    return BATCH * (steps - warm) / (times[steps] - times[warm])


def plain_rate(data: Path, workers: int, steps: int, warm: int) -> float:
    args = [str(data), str(workers), str(steps), str(warm), str(BATCH), str(SIZE), str(MLP)]
    env = {**os.environ, "PYTHONPATH": str(PROJECT)}
    done = subprocess.run([sys.executable, "-c", PLAIN, *args], cwd=PROJECT, env=env,
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    if done.returncode != 0:
        sys.exit(f"the plain loop failed: {done.stderr[-3000:]}")
    return float(json.loads(done.stdout.strip().splitlines()[-1])["rate"])


def spread(values: list[float], digits: int = 2) -> str:
    shown = (min(values), statistics.median(values), max(values))
    return " / ".join(f"{v:.{digits}f}" for v in shown)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--pair-workers", type=int, default=2)
    parser.add_argument("--side", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=18)
    parser.add_argument("--warm", type=int, default=4)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="edt-bench-input-"))
    train = BATCH * (args.steps + 2)  # the timed steps lie inside the first epoch
    data = write_photos(tmp / "photos", train, BATCH, args.side, num_classes=10)
    redis = RedisServer(tmp / "redis", appendonly=False, dies_with_parent=True).start()
    load_before = os.getloadavg()[0]
    rows, ratios = [], []
    try:
        for pair in range(args.pairs):
            sides = ["engine", "plain"] if pair % 2 == 0 else ["plain", "engine"]
            rate: dict[str, float] = {}
            for side in sides:
                if side == "engine":
                    rate[side] = engine_rate(redis, data, args.pair_workers, args.steps,
                                             args.warm, tmp)  # fmt: skip
                else:
                    rate[side] = plain_rate(data, args.pair_workers, args.steps, args.warm)
            ratios.append(rate["engine"] / rate["plain"])
            rows.append((pair + 1, sides[0], rate["engine"], rate["plain"], ratios[-1],
                         os.getloadavg()[0]))  # fmt: skip
            print(
                f"pair {pair + 1}: engine {rate['engine']:.1f}/s, plain {rate['plain']:.1f}/s,"
                f" ratio {ratios[-1]:.3f}, load {rows[-1][5]:.1f}",
                flush=True,
            )
        scaling = []
        for workers in (int(w) for w in args.workers.split(",")):
            got = engine_rate(redis, data, workers, args.steps, args.warm, tmp)
            scaling.append((workers, got, os.getloadavg()[0]))
            print(f"engine at {workers} worker(s): {got:.1f}/s", flush=True)
    finally:
        redis.stop()
    write(args, rows, ratios, scaling, load_before)


def write(args: argparse.Namespace, rows: list[tuple[int, str, float, float, float, float]],
          ratios: list[float], scaling: list[tuple[int, float, float]],
          load_before: float) -> None:  # fmt: skip
    lines = [
        "# Input pipeline: an image-folder job through the learner against a plain DataLoader",
        "",
        f"{args.pairs} interleaved pairs on {os.cpu_count()} cores; load average "
        f"{load_before:.2f} before, {os.getloadavg()[0]:.2f} after. JPEGs of {args.side}x"
        f"{args.side} brought to {SIZE}x{SIZE} (decode-bound), examples/mlp.py, batch {BATCH}, "
        f"{args.pair_workers} loader workers on both sides, steps {args.warm + 1}-{args.steps} "
        "timed (bench/bench_input.py). Each worker decodes 4 batches ahead on both sides "
        "(the engine's loader.PREFETCH).",
        "",
        "| pair | first | engine (samples/s) | plain DataLoader (samples/s) | engine / plain "
        "| load |",
        "|---|---|---|---|---|---|",
        *(
            f"| {p} | {first} | {e:.1f} | {b:.1f} | {r:.3f} | {load:.1f} |"
            for p, first, e, b, r, load in rows
        ),
        "",
        f"Ratio engine / plain, min / median / max: {spread(ratios, 3)} (goal: median >= 0.95).",
        "",
        "The engine alone at each number of loader workers per slot:",
        "",
        "| loader workers | samples/s | load |",
        "|---|---|---|",
        *(f"| {w} | {rate:.1f} | {load:.1f} |" for w, rate, load in scaling),
        "",
    ]
    out = PROJECT / "bench" / "results" / "input.md"
    out.write_text("\n".join(lines))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
