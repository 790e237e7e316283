"""Recovery benchmark: time from a fault to training again, per fault.

    python bench/bench_recovery.py [--pairs N]        (make bench runs it)

Faults on a job of 2 learners driven by ``workers.learner.drive`` (real learner processes,
real gloo, a real Redis of the run's own):

- **learner kill -9**: EDT keeps the survivor, which redoes the failed iteration from its
  in-memory weights. Baseline, in the same run, interleaved pair by pair: what a rigid
  launcher (torchrun's elastic agent) does on any worker failure, every learner restarted
  from the latest checkpoint (here: both learners killed at the same step).

Then faults of the live stack: a worker host of 2 CPU slots (``edt_worker``, default restart
delay), a scheduler under `make run`'s supervisor, SQLite, a 2-learner job submitted as a
user does; rounds of one fault each, in turn:

- **learner kill -9** of one of the job's learner processes;
- **slot worker kill -9**: the Celery worker hosting one of its learners;
- **scheduler kill -9**: the active ``edt_scheduler``; the supervisor starts another, which
  takes the lease once the dead one's has expired. Learners never wait for the scheduler:
  the time until a scheduler is active again is given beside the training's own pause.

"Recovery" is the time from the fault to the next iteration's record (live: of a generation
formed after the fault, where one is); "redone" counts the iterations trained twice (a step
recorded twice). Tests/test_faults.py checks the same faults for correctness. Writes
bench/results/recovery.md.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from edtweb.redis_server import RedisServer  # noqa: E402
from workers.learner.datasets import write_cifar10  # noqa: E402

MODEL = PROJECT / "examples" / "mlp.py"
BATCH, STEPS, FAULT_AT = 64, 70, 40  # 16 iterations an epoch: the checkpoint is at step 32
LIVE_EPOCHS = 8  # the live job: 128 iterations, the fault at step FAULT_AT
LIVE_FAULTS = ("learner", "slot worker", "scheduler")
Live = tuple[float, int, float]  # recovery (s), iterations redone, a scheduler back (s)


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


# The live stack ---------------------------------------------------------------------------


class LiveStack:
    """A worker host, a supervised scheduler, a database and a user, all of this run's own."""

    def __init__(self, tmp: Path, redis_url: str) -> None:
        tmp.chmod(0o755)  # learners run as the sandbox's user and read the model and data
        os.environ |= {
            "EDT_DATA_DIR": str(tmp / "edt"),
            "DATABASE_URL": f"sqlite:///{tmp / 'edt.sqlite3'}",
            "DJANGO_SETTINGS_MODULE": "edtweb.settings",
            "REDIS_URL": redis_url,
            "PYTHONUNBUFFERED": "1",
        }
        import django

        django.setup()
        from django.contrib.auth import get_user_model
        from django.core.management import call_command

        from edtweb import launcher
        from edtweb.supervisor import Supervisor
        from scheduler.store import Store, connect

        call_command("migrate", verbosity=0)
        self.user = get_user_model().objects.create_user("bench", password="bench-only-1")
        self.store = Store(connect(redis_url))
        self.data = write_cifar10(tmp / "live-data", train=1024, test=64)
        self.host = "bench-recovery"
        self.worker_log = (tmp / "worker.log").open("w")
        self.worker = subprocess.Popen(
            [sys.executable, "manage.py", "edt_worker", "--cpu-slots", "2",
             "--host-name", self.host],
            cwd=PROJECT, env=dict(os.environ), stdout=self.worker_log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        commands = launcher.processes(launcher.Options(live_port=0))
        wanted = {name: commands[name] for name in ("scheduler", "metrics")}  # scheduler first
        self.supervisor = Supervisor(wanted, dict(os.environ), str(PROJECT),
                                     out=(tmp / "supervisor.log").open("w"))  # fmt: skip
        threading.Thread(target=self.supervisor.watch, daemon=True).start()

    def close(self) -> None:
        self.supervisor.stopping.set()
        self.supervisor.stop(grace=10)
        os.killpg(self.worker.pid, signal.SIGTERM)
        try:
            self.worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.worker.pid, signal.SIGKILL)
            self.worker.wait()

    def scheduler_pid(self) -> int | None:
        proc = self.supervisor.children[0].proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def warm_slots(self) -> list[Any]:
        return [s for s in self.store.list_slots()
                if s.host == self.host and s.alive and s.telemetry.get("warm")]  # fmt: skip

    def ready(self) -> bool:
        """Both slots alive and warm, and the supervised scheduler active."""
        pid = self.scheduler_pid()
        holder = self.store.lease_holder() or ""
        return len(self.warm_slots()) == 2 and pid is not None and holder.endswith(f":{pid}")

    def learners(self) -> list[psutil.Process]:
        """Learner processes: forked from their slot's fork server."""

        def forkserver(p: psutil.Process | None) -> bool:
            return p is not None and "multiprocessing.forkserver" in " ".join(p.cmdline())

        found = []
        for p in psutil.Process(self.worker.pid).children(recursive=True):
            try:
                if p.status() != psutil.STATUS_ZOMBIE and forkserver(p) and forkserver(p.parent()):
                    found.append(p)
            except psutil.Error:
                pass
        return found

    def one_fault(self, fault: str) -> Live:
        """Run a job, inject ``fault`` at step FAULT_AT; (recovery, redone, back) where
        ``back`` is the time until a scheduler is active again (scheduler kill only)."""
        from edtweb.training import services
        from edtweb.training.models import Job

        wait(self.ready, 300, "the stack ready")
        job = services.submit_job(self.user, name=f"{fault} killed", model_path=str(MODEL),
                                  data_path=str(self.data), epochs=LIVE_EPOCHS,
                                  batch_size=BATCH, max_workers=2)  # fmt: skip
        jobs = services.job_store(job.pk)
        two = lambda: len(jobs.members(jobs.generation())) == 2 == len(self.learners())  # noqa: E731
        wait(two, 300, "the job on 2 learners")
        wait(lambda: Job.objects.get(pk=job.pk).steps_done >= FAULT_AT, 300, "the fault's step")
        back = 0.0
        if fault == "learner":
            at = kill(self.learners()[-1].pid)
        elif fault == "slot worker":
            slot = next(s for s in self.store.list_slots()
                        if s.slot_id == jobs.members(jobs.generation())[-1])  # fmt: skip
            at = kill(slot.pid)
        else:
            old = self.scheduler_pid()
            assert old is not None
            at = kill(old)
            wait(lambda: (self.store.lease_holder() or "").endswith(
                f":{self.scheduler_pid()}") and self.scheduler_pid() != old, 120,
                "a scheduler active again")  # fmt: skip
            back = time.time() - at
        wait(lambda: Job.objects.get(pk=job.pk).state not in Job.ACTIVE, 600, "the job's end")
        if fault == "slot worker":  # the next round starts once the host restarted it
            wait(lambda: slot.pid not in {s.pid for s in self.warm_slots()}
                 and len(self.warm_slots()) == 2, 300, "the slot worker restarted")  # fmt: skip
        state = Job.objects.get(pk=job.pk).state
        assert state == Job.State.COMPLETED, f"{fault}: the job ended {state}"
        train = [r for _, r in jobs.read_metrics() if r["type"] == "train"]
        return (*after_live_fault(train, at, newer_generation=fault != "scheduler"), back)


def kill(pid: int) -> float:
    at = time.time()
    os.kill(pid, signal.SIGKILL)
    return at


def wait(predicate: Callable[[], Any], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout} s for {what}")
        time.sleep(0.05)


def after_live_fault(train: list[dict[str, Any]], at: float,
                     newer_generation: bool) -> tuple[float, int]:  # fmt: skip
    """(fault to the next iteration, of a later generation if asked; iterations redone)."""
    gen = max(r["gen"] for r in train if r["time"] <= at)
    later = [r for r in train if r["time"] > at and (r["gen"] > gen or not newer_generation)]
    times = {(r["step"], r["time"]) for r in train}  # a record written twice has one time
    redone = sum(n - 1 for n in Counter(step for step, _ in times).values())
    return later[0]["time"] - at, redone


def live_faults(tmp: Path, redis_url: str, rounds: int) -> dict[str, list[Live]]:
    stack = LiveStack(tmp, redis_url)
    results: dict[str, list[Live]] = {f: [] for f in LIVE_FAULTS}
    try:
        for _ in range(rounds):
            for fault in LIVE_FAULTS:
                results[fault].append(stack.one_fault(fault))
                print(fault, results[fault][-1], flush=True)
    finally:
        stack.close()
    return results


def spread(values: list[float]) -> str:
    return f"{min(values):.2f} / {statistics.median(values):.2f} / {max(values):.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=5, help="live rounds, one of each fault")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="edt-bench-recovery-"))
    data = write_cifar10(tmp / "data", train=1024, test=128)
    server = RedisServer(tmp / "redis", appendonly=True).start()
    load_before = os.getloadavg()
    try:
        kills = [learner_kill(server.url, data, tmp, i) for i in range(args.pairs)]
        load_live = os.getloadavg()
        live = live_faults(tmp, server.url, args.rounds)
    finally:
        server.stop()
    edt = [k["edt"][0] for k in kills]
    base = [k["restart"][0] for k in kills]
    ratio = [b / e for e, b in zip(edt, base, strict=True)]
    rows = [
        ("learner kill -9: EDT, survivors go on", spread(edt),
         spread([float(k["edt"][1]) for k in kills]), "next iteration"),
        ("learner kill -9: baseline, restart all from checkpoint", spread(base),
         spread([float(k["restart"][1]) for k in kills]), "next iteration"),
    ]  # fmt: skip
    for fault in LIVE_FAULTS:
        runs = live[fault]
        when = "first iteration of the generation formed without the lost learner"
        if fault == "scheduler":
            when = ("next iteration (training never waits for the scheduler); a scheduler "
                    f"active again after {spread([r[2] for r in runs])} s")  # fmt: skip
        rows.append((f"live stack, {fault} kill -9", spread([r[0] for r in runs]),
                     spread([float(r[1]) for r in runs]), when))  # fmt: skip
    out = [
        "# Recovery time per fault",
        "",
        f"`python bench/bench_recovery.py --pairs {args.pairs} --rounds {args.rounds}`: a "
        f"2-learner job (examples/mlp.py, batch {BATCH}), fault at step {FAULT_AT}, "
        "checkpoint every epoch (16 iterations). Recovery: fault to the next iteration's "
        "record, seconds, min / median / max. EDT and its baseline ran as interleaved pairs "
        f"through `workers.learner.drive`; then {args.rounds} rounds on a live stack (worker "
        "host of 2 CPU slots, scheduler under `make run`'s supervisor), one job per fault.",
        "",
        "| fault | recovery (s) | iterations redone | recovered at |",
        "|---|---|---|---|",
        *[f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows],
        "",
        f"Baseline / EDT recovery time ratio over {args.pairs} pairs: {spread(ratio)}.",
        "",
        "Load average (1, 5, 15 min) before: "
        f"{', '.join(f'{x:.2f}' for x in load_before)}; before the live rounds: "
        f"{', '.join(f'{x:.2f}' for x in load_live)}; after: "
        f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}.",
        "",
    ]
    results = PROJECT / "bench" / "results" / "recovery.md"
    results.write_text("\n".join(out))
    print("\n".join(out))


if __name__ == "__main__":
    main()
