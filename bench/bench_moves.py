"""Learner move benchmark: what moving one learner of a 2-learner job to another slot costs
the job, against killing that learner and starting a new one on the other slot.

    python bench/bench_moves.py [--pairs N]

A job of the paced MLP (50 ms a step, batch 64) on 2 learners, driven by the scheduler's own
per-job controller (``workers.learner.drive``'s driver: real learner processes, real gloo, a
Redis of the run's own). At step 30 its second learner goes to a new slot:

- **move**: a decision of the same count with the new slot joined and the old one left
  (docs/architecture.md, "Learner moves"): the old learner trains on until the new one is
  READY, then one generation swaps them;
- **kill+restart** (baseline, same run, interleaved pair by pair, the order alternating):
  the old learner is killed (kill -9) as a scheduler without moves would take it off, and
  the new one is started at once; the survivor trains alone until it joins.

Per run: the longest gap between two steps from the change until the new learner has
trained 5 steps, less the median step before the change (the pause the change cost), the
iterations trained twice, and the seconds until the new learner trains. Writes
bench/results/moves.md.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from edtweb.redis_server import RedisServer  # noqa: E402
from workers.learner.datasets import write_cifar10  # noqa: E402
from workers.learner.drive import Driver  # noqa: E402
from workers.learner.spec import JobSpec  # noqa: E402
from workers.learner.submission import validated  # noqa: E402

MODEL = PROJECT / "tests" / "models" / "paced_mlp.py"
CHANGE_AT, STEPS, AFTER = 30, 5000, 10  # a run ends AFTER steps of the new learner
HOWS = ("move", "kill+restart")


class ChangeDriver(Driver):
    """The drive's driver, whose one fault is the change: at ``CHANGE_AT`` the second
    learner goes to slot ``new``, moved or killed and replaced."""

    def __init__(self, how: str, *args: Any) -> None:
        super().__init__(*args)
        self.how, self.changed = how, False
        self.joined_at: int | None = None

    def inject_faults(self) -> None:
        s = self.runner.state
        if self.changed or s.step < CHANGE_AT or len(s.members) != 2 or s.joining:
            return
        self.changed = True
        old = s.members[-1]
        self.event("fault", slots=[old], how=self.how)
        if self.how == "kill+restart":
            self.runner.kill(old)
        self.runner.apply(2, ["new"], [old])

    def tick(self) -> int | None:
        """As the drive's, ending the run once the new learner trained ``AFTER`` steps."""
        s = self.runner.state
        if "new" in s.members and self.joined_at is None:
            self.joined_at = s.step
        if self.joined_at is not None and s.step >= self.joined_at + AFTER:
            self.read_metrics()
            return 0
        return super().tick()


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def one_run(how: str, redis_url: str, data: Path, tmp: Path) -> dict[str, float]:
    work = tmp / f"{how}-{uuid.uuid4().hex[:6]}"
    submission = validated({"model": str(MODEL), "data": str(data), "batch_size": 64,
                            "epochs": 1000, "checkpoint_every": 1000})  # fmt: skip
    spec = JobSpec.of(submission, job_id=f"moves-{uuid.uuid4().hex[:8]}", model=str(MODEL),
                      data=str(data), workdir=str(work), seed=0, collective_timeout=30.0,
                      max_steps=STEPS, bucket_bytes=0, argv=[], script_decides=[])  # fmt: skip
    driver = ChangeDriver(how, spec, [(0, 2)], redis_url, [])
    code = driver.run(300)
    if code != 0:
        raise RuntimeError(f"{how}: the drive ended with {code}; see {work}")
    fault = next(e for e in lines(work / "events.jsonl") if e["kind"] == "fault")
    train = [
        r for r in lines(work / "metrics.jsonl") if r["type"] == "train" and not r.get("replay")
    ]
    steps = [r["step"] for r in train]
    if sorted(set(steps)) != list(range(1, max(steps) + 1)):
        raise RuntimeError(f"{how}: a step was lost: {steps}")
    times = [r["time"] for r in train]
    before = [b - a for a, b in itertools.pairwise(t for t in times if t <= fault["time"])]
    gen = next(e for e in lines(work / "events.jsonl")
               if e["kind"] == "generation" and "new" in e["members"])  # fmt: skip
    joined = [r for r in train if r["gen"] >= gen["gen"]]
    until = joined[min(5, len(joined) - 1)]["time"]
    during = [b - a for a, b in itertools.pairwise(times) if fault["time"] < b <= until]
    iteration = statistics.median(before)
    return {
        "pause": max(during) - iteration,
        "redone": len(steps) - len(set(steps)),
        "joined": joined[0]["time"] - fault["time"],
        "iteration": iteration,
    }


def spread(values: list[float]) -> str:
    return f"{min(values):.3f} / {statistics.median(values):.3f} / {max(values):.3f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--pairs", type=int, default=3)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="edt-bench-moves-") as tmp_name:
        tmp = Path(tmp_name)
        redis = RedisServer(tmp / "redis", appendonly=False, dies_with_parent=True).start()
        try:
            os.environ["REDIS_URL"] = redis.url
            data = write_cifar10(tmp / "data", train=1024, test=64)
            runs: dict[str, list[dict[str, float]]] = {how: [] for how in HOWS}
            loads = [os.getloadavg()[0]]
            for pair in range(args.pairs):
                for how in HOWS if pair % 2 == 0 else HOWS[::-1]:
                    result = one_run(how, redis.url, data, tmp)
                    runs[how].append(result)
                    print(how, {k: round(v, 3) for k, v in result.items()}, flush=True)
                loads.append(os.getloadavg()[0])
        finally:
            redis.stop()
    write(runs, loads, args.pairs)


def write(runs: dict[str, list[dict[str, float]]], loads: list[float], pairs: int) -> None:
    ratios = [k["pause"] / max(m["pause"], 1e-3) for m, k in zip(runs["move"], runs["kill+restart"],
                                                                  strict=True)]  # fmt: skip
    rows = [
        "# Learner moves: a move against kill+restart of the same learner",
        "",
        "`python bench/bench_moves.py` (bench/bench_moves.py's docstring says what runs). A",
        "2-learner job of the paced MLP (50 ms a step, batch 64), its second learner sent to a",
        f"new slot at step {CHANGE_AT}; {pairs} interleaved pairs, the order alternating. "
        f"Load average (1 min) over the run: {min(loads):.1f} to {max(loads):.1f} on "
        f"{os.cpu_count()} cores.",
        "",
        "*pause*: the longest gap between two steps from the change until the new learner has",
        "trained 5 steps, less the median step before it; *redone*: iterations trained twice;",
        "*joined*: seconds from the change until the new learner trains (it starts meanwhile).",
        "",
        "| how | pause s (min / median / max) | redone (max) | joined s (median) | step s |",
        "|---|---|---|---|---|",
    ]
    for how in HOWS:
        r = runs[how]
        rows.append(
            f"| {how} | {spread([x['pause'] for x in r])} | {max(x['redone'] for x in r):.0f} | "
            f"{statistics.median(x['joined'] for x in r):.2f} | "
            f"{statistics.median(x['iteration'] for x in r):.3f} |"
        )
    rows += ["", f"kill+restart's pause over the move's, per pair: {spread(ratios)} "
             "(min / median / max)."]  # fmt: skip
    out = PROJECT / "bench" / "results" / "moves.md"
    out.write_text("\n".join(rows) + "\n")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
