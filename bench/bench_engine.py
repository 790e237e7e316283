"""Engine benchmarks: steady-state overhead against DDP, and resize latency against restart.

    python bench/bench_engine.py        (make bench runs it)

Everything runs in this one invocation on this machine, baselines included, and the table
goes to bench/results/engine.md.
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from edtweb.redis_server import RedisServer, free_port  # noqa: E402
from workers.learner.datasets import write_cifar10  # noqa: E402

MODEL = PROJECT / "examples" / "cnn.py"
BATCH, WARMUP, STEPS = 64, 10, 60


def drive(redis: str, data: Path, workdir: Path, schedule: str, steps: int, *extra: str) -> float:
    cmd = [sys.executable, "-m", "workers.learner.drive", "--model", str(MODEL),
           "--data", str(data), "--schedule", schedule, "--batch-size", str(BATCH),
           "--max-steps", str(steps), "--epochs", "1000",
           "--workdir", str(workdir), *extra]  # fmt: skip
    started = time.time()
    env = dict(os.environ, REDIS_URL=redis)
    subprocess.run(cmd, cwd=PROJECT, env=env, check=True, capture_output=True, timeout=600)
    return started


def records(workdir: Path, kind: str = "train") -> list[dict[str, Any]]:
    lines = (workdir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["type"] == kind]


def events(workdir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (workdir / "events.jsonl").read_text().splitlines()]


def engine_throughput(redis: str, data: Path, tmp: Path) -> float:
    work = tmp / "steady"
    drive(redis, data, work, "0:2", WARMUP + STEPS)
    recs = records(work)[WARMUP:]
    return (len(recs) - 1) * BATCH / (recs[-1]["time"] - recs[0]["time"])


def ddp_throughput(data: Path) -> float:
    port = free_port()
    args = [str(a) for a in (port, WARMUP, STEPS, BATCH, MODEL, data)]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(PROJECT))
    procs = [
        subprocess.Popen(
            [sys.executable, str(PROJECT / "bench" / "ddp_baseline.py"), str(r), "2", *args],
            cwd=PROJECT,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for r in range(2)
    ]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    return float(outputs[0].strip().splitlines()[-1])


def step_time(recs: list[dict[str, Any]], workers: int) -> float:
    times = [b["time"] - a["time"] for a, b in itertools.pairwise(recs)
             if a["workers"] == b["workers"] == workers]  # fmt: skip
    return statistics.median(times)


def resize_latency(redis: str, data: Path, tmp: Path) -> dict[str, list[float]]:
    """Seconds from publishing a generation to the end of the first step at the new size,
    less one step at that size: the pause the resize itself costs."""
    out: dict[str, list[float]] = {"grow": [], "shrink": []}
    work = tmp / "resize"
    drive(redis, data, work, "0:1,20:2,40:1,60:2,80:1,100:2,120:1", 140)
    recs = records(work)
    for ev in (e for e in events(work) if e["kind"] == "generation" and e["gen"] > 1):
        first = next(r for r in recs if r["time"] > ev["time"] and r["workers"] == ev["workers"])
        kind = "grow" if ev["why"].startswith("grow") else "shrink"
        out[kind].append(first["time"] - ev["time"] - step_time(recs, ev["workers"]))
    return out


def restart_latency(redis: str, data: Path, tmp: Path) -> list[float]:
    """Stop-checkpoint-restart, as torchrun does: every process exits after a checkpoint,
    new ones start, load it and form a group. Seconds from the stop to the end of the first
    step after it, less one step."""
    out = []
    for i in range(3):
        work = tmp / f"restart{i}"
        drive(redis, data, work, "0:2", 20, "--checkpoint-every", "1000")
        stopped = records(work, "done")[-1]["time"]
        # The checkpoint was written and every process has exited when drive() returned.
        drive(redis, data, work, "0:2", 21, "--checkpoint-every", "1000")
        recs = records(work)
        first = next(r for r in recs if r["time"] > stopped)
        out.append(first["time"] - stopped - step_time(recs, 2))
    return out


def table(rows: list[tuple[str, str, str]]) -> str:
    lines = ["| measure | value | goal |", "|---|---|---|"]
    return "\n".join(lines + [f"| {a} | {b} | {c} |" for a, b, c in rows]) + "\n"


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="edt-bench-") as tmpdir:
        tmp = Path(tmpdir)
        data = write_cifar10(tmp / "data", train=4096, test=512)
        redis = RedisServer(tmp / "redis", appendonly=False).start()
        try:
            engine = engine_throughput(redis.url, data, tmp)
            ddp = ddp_throughput(data)
            resize = resize_latency(redis.url, data, tmp)
            restart = restart_latency(redis.url, data, tmp)
        finally:
            redis.stop()
    grow, shrink, base = (statistics.median(resize["grow"]), statistics.median(resize["shrink"]),
                          statistics.median(restart))  # fmt: skip
    rows = [
        ("engine, 2 workers (samples/s)", f"{engine:.0f}", ""),
        ("DDP gloo, 2 workers (samples/s)", f"{ddp:.0f}", ""),
        ("engine / DDP throughput", f"{engine / ddp:.3f}", ">= 0.97"),
        ("grow pause, median of 3 (s)", f"{grow:.3f}", "<= 0.5"),
        ("shrink pause, median of 3 (s)", f"{shrink:.3f}", "<= 0.5"),
        ("stop-checkpoint-restart pause, median of 3 (s)", f"{base:.3f}", ""),
        ("restart / grow", f"{base / max(grow, 1e-3):.1f}x", ">= 10x"),
        ("restart / shrink", f"{base / max(shrink, 1e-3):.1f}x", ">= 10x"),
    ]
    header = (f"# Engine benchmarks\n\nCNN of examples/cnn.py, global batch {BATCH}, CPU, one "
              f"torch thread per learner, {os.cpu_count()} cores. Every row from one run of "
              "`python bench/bench_engine.py`.\n\n")  # fmt: skip
    result = (
        header
        + table(rows)
        + f"\nraw: grow {resize['grow']}, shrink {resize['shrink']}, restart {restart}\n"
    )
    (PROJECT / "bench" / "results").mkdir(exist_ok=True)
    (PROJECT / "bench" / "results" / "engine.md").write_text(result)
    print(result)


if __name__ == "__main__":
    main()
