"""Reclaiming a team's guarantee on a live EDT: shrink in place against checkpoint-restart.

    python bench/bench_teams_live.py [--pairs N]   (make bench)

A live EDT of its own (web, scheduler, metrics consumer, 8 CPU slots on one worker host, a
Redis with a password), two teams: ``nlp`` (dave) borrows all 8 slots while ``vision``
(carol, guarantee 6) is idle. Each pair, in turn:

- **EDT**: carol submits a job into vision; the scheduler shrinks dave's job in place,
  between two iterations, and starts carol's learners on the freed slots;
- **checkpoint-restart** (the baseline: how quota systems that reclaim by preemption do
  it, Kueue's for one, here in its best case: a graceful stop that checkpoints, no work
  lost): dave's job is stopped (it checkpoints and exits), carol submits, and once carol
  holds her slots dave's job is resumed from its checkpoint on what is left.

Measured: **reclaim**, from carol's submit to her job holding 6 slots (the allocation
record, the scheduler's one fact); the borrower's **pause**, the longest time without a
training record of dave's job from the moment the reclaim started until it trained 10
more iterations (EDT: the shrink; baseline: stop, reclaim and restart). Between pairs,
carol's job is stopped and dave's grows back to 8. Writes bench/results/teams-live.md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from itertools import pairwise
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "edtweb.settings")

from live import Slots, running_edt, spread, wait  # noqa: E402  (bench/ is this script's directory)

from protocol.jobstore import JobStore  # noqa: E402
from tests.harness.processes import PROJECT_DIR, subprocess_env  # noqa: E402
from tests.harness.stack import LiveEdt, dataset_archive  # noqa: E402

RESULTS = PROJECT / "bench" / "results" / "teams-live.md"
PACED = PROJECT_DIR / "tests" / "models" / "paced_mlp.py"  # 50 ms an iteration
GUARANTEE = 6


class Bench(Slots):
    def __init__(self, live: LiveEdt, url: str) -> None:
        super().__init__(url)
        self.live, self.url = live, url

    def times(self, job_id: int) -> list[float]:
        return [float(r["time"]) for _, r in JobStore(self.client, str(job_id)).read_metrics()
                if r.get("type") == "train" and not r.get("replay")]  # fmt: skip

    def submit(self, user: str, name: str) -> int:
        job = self.live.json(user, "submit", "--model", "paced", "--dataset", "shapes",
                             "--name", name, "--max-workers", "8", "--batch-size", "64",
                             "--epochs", "5000")  # fmt: skip
        return int(job["id"])

    def stop(self, user: str, job_id: int) -> None:
        done = self.live.edt(user, "stop", str(job_id))
        assert done.returncode == 0, done.stderr

    def resume(self, job_id: int) -> None:
        """What the job page's Resume button does (a stopped job continues from its
        latest checkpoint), through Django in a process of the live EDT's settings."""
        code = f"from edtweb.training import services; assert services.resume_job({job_id})"
        env = subprocess_env(self.live.data_dir, REDIS_URL=self.url)
        env.pop("DATABASE_URL", None)
        done = subprocess.run([sys.executable, "manage.py", "shell", "-c", code], cwd=PROJECT,
                              env=env, capture_output=True, text=True)  # fmt: skip
        assert done.returncode == 0, done.stderr

    def pause_since(self, job_id: int, start: float) -> float:
        """The longest gap between the job's training records after ``start`` (a wall
        time), counting from ``start``, once it trained 10 iterations after it."""
        wait(lambda: sum(t > start for t in self.times(job_id)) >= 10, 300, "10 iterations")
        after = [start, *sorted(t for t in self.times(job_id) if t > start)]
        return max(b - a for a, b in pairwise(after))

    def edt_round(self, borrower: int) -> tuple[float, float]:
        start = time.time()
        job = self.submit("carol", "v")
        reclaim = wait(lambda: self.held(job) >= GUARANTEE, 300, "vision's 6 slots", poll=0.02)
        pause = self.pause_since(borrower, start)
        self.stop("carol", job)
        wait(lambda: self.held(borrower) == 8, 300, "dave's job back on 8 slots")
        return reclaim, pause

    def restart_round(self, borrower: int) -> tuple[float, float]:
        start = time.time()
        self.stop("dave", borrower)  # it checkpoints and exits
        job = self.submit("carol", "v")
        reclaim = wait(lambda: self.held(job) >= GUARANTEE, 300, "vision's 6 slots", poll=0.02)
        self.resume(borrower)
        pause = self.pause_since(borrower, start)
        self.stop("carol", job)
        wait(lambda: self.held(borrower) == 8, 300, "dave's job back on 8 slots")
        return reclaim, pause


def prepare(live: LiveEdt) -> None:
    live.login("sam")
    for team, user, guarantee in (("vision", "carol", GUARANTEE), ("nlp", "dave", 0)):
        live.json("sam", "admin", "teams", "add", team, "--guarantee", str(guarantee))
        assert live.edt("sam", "admin", "teams", "members", team, "add", user).returncode == 0
        live.login(user)
        archive = dataset_archive(live.tmp / user, train=512, test=64)
        live.json(user, "datasets", "upload", str(archive), "--name", "shapes", timeout=300)
        model = live.json(user, "models", "upload", str(PACED), "--name", "paced", timeout=300)
        assert model["status"] == "VALID", model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    with running_edt("edt-teams-bench-", 8) as (live, url):
        prepare(live)
        bench = Bench(live, url)
        borrower = bench.submit("dave", "borrower")
        wait(lambda: bench.held(borrower) == 8, 300, "dave's job on 8 slots")
        rows = []
        for i in range(args.pairs):
            pair = [("EDT", bench.edt_round), ("restart", bench.restart_round)]
            if i % 2:
                pair.reverse()
            measured = {name: run(borrower) for name, run in pair}
            rows.append(measured)
            print(f"pair {i + 1}: " + ", ".join(
                f"{k}: reclaim {v[0]:.2f} s, pause {v[1]:.2f} s" for k, v in measured.items()),
                flush=True)  # fmt: skip
    load_after = os.getloadavg()[0]
    write(rows, load_before, load_after)


def write(rows: list[dict[str, tuple[float, float]]], before: float, after: float) -> None:
    reclaim = {k: [r[k][0] for r in rows] for k in ("EDT", "restart")}
    pause = {k: [r[k][1] for r in rows] for k in ("EDT", "restart")}
    ratio_r = [r["EDT"][0] / r["restart"][0] for r in rows]
    ratio_p = [r["EDT"][1] / r["restart"][1] for r in rows]
    lines = [
        "# Reclaiming a team's guarantee: shrink in place vs checkpoint-restart",
        "",
        f"`python bench/bench_teams_live.py --pairs {len(rows)}`: a live EDT, 8 CPU slots, the "
        "paced MLP (50 ms an iteration), team nlp borrowing all 8 slots, team vision "
        f"(guarantee {GUARANTEE}) submitting; {len(rows)} interleaved pairs. Seconds, "
        "min / median / max. Load average (1 min) before / after: "
        f"{before:.1f} / {after:.1f} on {os.cpu_count()} cores.",
        "",
        "| | EDT: shrink in place | checkpoint-restart | ratio EDT / restart |",
        "|---|---|---|---|",
        f"| reclaim: submit → vision holds {GUARANTEE} | {spread(reclaim['EDT'])} | "
        f"{spread(reclaim['restart'])} | {spread(ratio_r)} |",
        f"| borrower's longest pause | {spread(pause['EDT'])} | {spread(pause['restart'])} | "
        f"{spread(ratio_p)} |",
        "",
        "The baseline's pause counts its stop, the reclaim and its restart from the "
        "checkpoint (interpreter, torch, the state); the graceful stop loses no iteration, "
        "which a kill would. Its reclaim is counted from the submit, after the borrower was "
        "stopped: the slots are free by then, where EDT's reclaim includes the borrower's "
        "shrink between two of its iterations (and its learners leaving).",
        "",
    ]
    RESULTS.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
