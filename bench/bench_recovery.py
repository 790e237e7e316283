"""Recovery benchmark: time from a fault to training again, per fault.

    python bench/bench_recovery.py [--pairs N]        (make bench runs it)

Faults on a job of 2 learners driven by ``workers.learner.drive`` (real learner processes,
real gloo, a real Redis of the run's own):

- **learner kill -9**: EDT keeps the survivor, which redoes the failed iteration from its
  in-memory weights. Baseline, in the same run, interleaved pair by pair: what a rigid
  launcher (torchrun's elastic agent) does on any worker failure, every learner restarted
  from the latest checkpoint (here: both learners killed at the same step).

Faults of the live stack (Redis away, a worker host killed) are exercised by
tests/test_faults.py; their recovery times are not measured here yet.

"Recovery" is the time from the fault to the next iteration's record; "redone" counts the
iterations trained twice. Writes bench/results/recovery.md.
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
from typing import Any

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from edtweb.redis_server import RedisServer  # noqa: E402
from workers.learner.datasets import write_cifar10  # noqa: E402

MODEL = PROJECT / "examples" / "mlp.py"
BATCH, STEPS, FAULT_AT = 64, 70, 40  # 16 iterations an epoch: the checkpoint is at step 32


def drive(redis: str, data: Path, workdir: Path, *extra: str) -> None:
    cmd = [sys.executable, "-m", "workers.learner.drive", "--model", str(MODEL),
           "--data", str(data), "--schedule", "0:2", "--batch-size", str(BATCH),
           "--max-steps", str(STEPS), "--epochs", "1000", "--checkpoint-every", "1",
           "--workdir", str(workdir), *extra]  # fmt: skip
    env = dict(os.environ, REDIS_URL=redis)
    subprocess.run(cmd, cwd=PROJECT, env=env, check=True, capture_output=True, timeout=600)


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def after_fault(workdir: Path) -> tuple[float, int]:
    """(seconds from the fault to the next iteration, iterations redone)."""
    fault = next(e for e in lines(workdir / "events.jsonl") if e["kind"] == "fault")
    train = [r for r in lines(workdir / "metrics.jsonl") if r["type"] == "train"]
    before = [r for r in train if r["time"] <= fault["time"]]
    later = [r for r in train if r["time"] > fault["time"]]
    redone = before[-1]["step"] - later[0]["step"] + 1 if before else 0
    return later[0]["time"] - fault["time"], max(0, redone)


def learner_kill(redis: str, data: Path, tmp: Path, round_: int) -> dict[str, tuple[float, int]]:
    results = {}
    for name, fault in (("edt", f"{FAULT_AT}:KILL"), ("restart", f"{FAULT_AT}:KILL:all")):
        work = tmp / f"{name}-{round_}"
        drive(redis, data, work, "--kill", fault)
        results[name] = after_fault(work)
    return results


def spread(values: list[float]) -> str:
    return f"{min(values):.2f} / {statistics.median(values):.2f} / {max(values):.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="edt-bench-recovery-"))
    data = write_cifar10(tmp / "data", train=1024, test=128)
    server = RedisServer(tmp / "redis", appendonly=True).start()
    load_before = os.getloadavg()
    try:
        kills = [learner_kill(server.url, data, tmp, i) for i in range(args.pairs)]
    finally:
        server.stop()
    edt = [k["edt"][0] for k in kills]
    base = [k["restart"][0] for k in kills]
    ratio = [b / e for e, b in zip(edt, base, strict=True)]
    rows = [
        ("learner kill -9: EDT, survivors go on", spread(edt),
         spread([float(k["edt"][1]) for k in kills])),
        ("learner kill -9: baseline, restart all from checkpoint", spread(base),
         spread([float(k["restart"][1]) for k in kills])),
    ]  # fmt: skip
    out = [
        "# Recovery time per fault",
        "",
        f"`python bench/bench_recovery.py --pairs {args.pairs}`: a 2-learner job "
        f"(examples/mlp.py, batch {BATCH}), fault at step {FAULT_AT}, checkpoint every "
        "epoch (16 iterations). Recovery: fault to the next iteration's record, seconds, "
        "min / median / max. EDT and its baseline ran as interleaved pairs.",
        "",
        "| fault | recovery (s) | iterations redone |",
        "|---|---|---|",
        *[f"| {a} | {b} | {c} |" for a, b, c in rows],
        "",
        f"Baseline / EDT recovery time ratio over {args.pairs} pairs: {spread(ratio)}.",
        "",
        f"Load average (1, 5, 15 min) before: {', '.join(f'{x:.2f}' for x in load_before)}; "
        f"after: {', '.join(f'{x:.2f}' for x in os.getloadavg())}.",
        "",
    ]
    results = PROJECT / "bench" / "results" / "recovery.md"
    results.write_text("\n".join(out))
    print("\n".join(out))


if __name__ == "__main__":
    main()
