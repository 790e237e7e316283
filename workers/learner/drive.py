"""Drive one elastic job without the scheduler, for tests and benchmarks.

    python -m workers.learner.drive --model examples/mlp.py --data DIR \\
        --schedule "0:1,20:3,40:2,60:3,80:1" --max-steps 100

``--schedule`` lists step:workers pairs. A WMLA script runs as ``__main__`` with the
``--script-arg`` values as its argv. The driver plays the scheduler's part of the
protocol: it starts joiners first and publishes a generation only when they are READY,
shrinks at once, replaces failed generations, and restarts from the latest checkpoint when
every learner is gone. Metrics go to WORKDIR/metrics.jsonl, events to WORKDIR/events.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from protocol.connection import connect
from protocol.exits import Exit
from protocol.jobstore import JobStore
from scheduler.elastic import Coordinator
from workers.learner.allocator import huge_pages
from workers.learner.spec import JobSpec
from workers.learner.submission import DEFAULTS, PRECISIONS, Refused, validated

PROJECT_DIR = Path(__file__).resolve().parents[2]
# How often the driver reads the job's progress and acts on it: TICK_SECONDS while a change
# is due or under way (a resize the schedule has yet to make, joiners starting, a fault to
# inject), STEADY_TICK_SECONDS while the job trains as the schedule wants with nothing left
# to do but watch (Driver.steady). The learners never wait on it (rank 0 reads the
# generation in a thread of its own), but they share the host's cores with it: at 5 ms it
# took ~15 % of a core from them, at 50 ms 2.2 % (and Redis 1.1 % for its reads), at 250 ms
# 0.5 %.
TICK_SECONDS = 0.05
STEADY_TICK_SECONDS = 0.25
TIMED_OUT = 3  # the drive's own exit status when the run outlasted --timeout


@dataclass(frozen=True, order=True)
class Fault:
    step: int
    signal: int
    everyone: bool = False


def parse_fault(text: str) -> Fault:
    """ "50:KILL" (the last member) or "50:KILL:all" (every member)."""
    step, _, rest = text.partition(":")
    name, _, who = rest.partition(":")
    if not step.isdigit() or name.upper() not in ("KILL", "STOP") or who not in ("", "all"):
        raise ValueError(f"--kill {text!r}: write STEP:KILL, STEP:STOP or STEP:KILL:all")
    return Fault(int(step), int(signal.Signals["SIG" + name.upper()]), who == "all")


def parse_schedule(text: str) -> list[tuple[int, int]]:
    """ "0:1,20:3" -> [(0, 1), (20, 3)], sorted by step; workers at least 1."""
    pairs = []
    for item in filter(None, (p.strip() for p in text.split(","))):
        step, _, workers = item.partition(":")
        if not step.isdigit() or not workers.isdigit() or int(workers) < 1:
            raise ValueError(f"schedule entry {item!r}: write STEP:WORKERS, e.g. 20:3")
        pairs.append((int(step), int(workers)))
    if not pairs or pairs[0][0] != 0:
        pairs.insert(0, (0, pairs[0][1] if pairs else 1))
    return sorted(pairs)


def workers_at(schedule: list[tuple[int, int]], step: int) -> int:
    return [w for s, w in schedule if s <= step][-1]


class LocalLauncher:
    """Learners as local child processes, each in its own session, logging to a file.
    With ``gpus``, each learner sees one GPU, in turn by start order, as a slot would."""

    def __init__(self, spec_path: Path, logs: Path, redis_url: str, gpus: int = 0) -> None:
        self.spec_path, self.logs, self.redis_url = spec_path, logs, redis_url
        self.gpus = gpus
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def env(self) -> dict[str, str]:
        """A learner's environment: this process's, with its Redis, one torch thread and
        huge pages for large tensors (allocator.py)."""
        env = dict(os.environ, REDIS_URL=self.redis_url, EDT_TORCH_THREADS="1",
                   OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")  # fmt: skip
        huge_pages(env)
        return env

    def start(self, slot: str) -> None:
        env = self.env()
        if self.gpus:
            env["CUDA_VISIBLE_DEVICES"] = str(len(self.procs) % self.gpus)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_DIR), env.get("PYTHONPATH")]))
        cmd = [
            sys.executable,
            "-m",
            "workers.learner",
            "--spec",
            str(self.spec_path),
            "--slot",
            slot,
        ]
        with (self.logs / f"{slot}.log").open("ab") as log:
            self.procs[slot] = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=PROJECT_DIR,
                start_new_session=True,
            )  # fmt: skip

    def kill(self, slot: str, sig: int = signal.SIGKILL) -> None:
        proc = self.procs.get(slot)
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, sig)

    def exited(self, slot: str) -> bool:
        proc = self.procs.get(slot)
        return proc is None or proc.poll() is not None

    def reap(self) -> None:
        for slot in self.procs:
            self.kill(slot)
        for proc in self.procs.values():
            proc.wait()


class Driver:
    """Plays a schedule of sizes against one job, with optional fault injection."""

    def __init__(self, spec: JobSpec, schedule: list[tuple[int, int]], redis_url: str,
                 kills: list[Fault], gpus: int = 0) -> None:  # fmt: skip
        self.schedule, self.kills = schedule, sorted(kills)
        self.workdir = Path(spec.workdir)
        (self.workdir / "logs").mkdir(parents=True, exist_ok=True)
        spec.save(self.workdir / "spec.json")
        self.launcher = LocalLauncher(self.workdir / "spec.json", self.workdir / "logs", redis_url,
                                      gpus)  # fmt: skip
        jobs = JobStore(connect(redis_url), spec.job_id)
        self.coord = Coordinator(jobs, self.launcher, self.event)
        self.counter = 0
        self.metrics = (self.workdir / "metrics.jsonl").open("a")

    def event(self, kind: str, data: dict[str, Any]) -> None:
        with (self.workdir / "events.jsonl").open("a") as f:
            f.write(json.dumps({"kind": kind, **data}) + "\n")
        shown = {k: v for k, v in data.items() if k not in ("time", "step")}
        print(f"[drive] step {data['step']}: {kind} {shown}", flush=True)

    def prestart(self) -> None:
        """Start every joiner the rest of the schedule needs, so each is READY in time."""
        c = self.coord
        joins = max(0, workers_at(self.schedule, c.step) - len(c.members))
        previous = workers_at(self.schedule, c.step)
        for step, workers in self.schedule:
            if step > c.step:
                joins += max(0, workers - previous)
                previous = workers
        if joins > len(c.joining):
            slots = [f"d{self.counter + i}" for i in range(joins - len(c.joining))]
            self.counter += len(slots)
            c.start_joiners(slots)
        if c.dead_joiners():
            raise RuntimeError(f"joiner {c.dead_joiners()[0]} exited before READY; see its log")

    def resize(self) -> None:
        c = self.coord
        if not c.settled():
            return
        self.prestart()
        want = workers_at(self.schedule, c.step)
        if not c.members and not set(c.joining) <= c.jobs.ready_slots():
            return  # start once the schedule's learners are all READY
        if want > len(c.members):
            c.grow_to(want)
        else:
            c.shrink_to(want)

    def inject_faults(self) -> None:
        c = self.coord
        while self.kills and c.step >= self.kills[0].step and c.members:
            fault = self.kills.pop(0)
            victims = list(c.members) if fault.everyone else c.members[-1:]
            c.event("fault", slots=victims, signal=signal.Signals(fault.signal).name)
            for victim in victims:
                self.launcher.kill(victim, fault.signal)

    def tick(self) -> int | None:
        c = self.coord
        for record in c.read_metrics():
            self.metrics.write(json.dumps(record) + "\n")
        self.metrics.flush()
        error = c.first_error()
        if error:
            c.event("failed", error=error)
            return Exit.USER_CODE_FAILED
        if c.done:
            if self.kills:  # a run that was to test a fault must not pass without one
                c.event("failed", error=f"the job ended at step {c.step}, before the fault "
                        f"due at step {self.kills[0].step} could be injected")  # fmt: skip
                return Exit.USER_CODE_FAILED
            if c.all_exited():
                c.event("completed")
                return Exit.FINISHED
            return None
        self.inject_faults()
        c.watch_failures()
        self.resize()
        return None

    def steady(self) -> bool:
        """Training as the schedule wants for the rest of the run, nothing starting and no
        fault to inject: only a failure or the end can happen."""
        c = self.coord
        return (
            not self.kills
            and not c.joining
            and c.failure_since is None
            and bool(c.members)
            and all(step <= c.step for step, _ in self.schedule)
            and len(c.members) == workers_at(self.schedule, c.step)
        )

    def run(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                code = self.tick()
                if code is not None:
                    return code
                time.sleep(STEADY_TICK_SECONDS if self.steady() else TICK_SECONDS)
            self.coord.event("timeout", seconds=timeout)
            return TIMED_OUT
        finally:
            self.launcher.reap()
            self.metrics.close()


def parser() -> argparse.ArgumentParser:
    """The driver's options; a job's values default to the submission's (``DEFAULTS``)."""
    p = argparse.ArgumentParser(prog="python -m workers.learner.drive", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--schedule", default="0:1", help="STEP:WORKERS pairs, e.g. 0:1,20:3")
    p.add_argument("--batch-size", type=int, default=DEFAULTS["batch_size"])
    p.add_argument("--max-micro-batch", type=int, default=DEFAULTS["max_micro_batch"])
    p.add_argument("--epochs", type=int, default=DEFAULTS["epochs"])
    p.add_argument("--max-steps", type=int, default=0)
    p.add_argument("--lr", type=float, default=DEFAULTS["lr"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint-every", type=int, default=DEFAULTS["checkpoint_every"])
    p.add_argument("--gpus", type=int, default=0, help="give learners GPUs 0..N-1 in turn")
    p.add_argument("--bucket-bytes", type=int, default=0, help="all-reduce bucket cap")
    p.add_argument("--precision", default=DEFAULTS["precision"], choices=PRECISIONS)
    p.add_argument("--timeout", type=seconds, default=30.0, help="collective timeout, seconds")
    p.add_argument("--kill", action="append", default=[], metavar="STEP:SIGNAL",
                   help="at STEP send SIGNAL (KILL, STOP) to the last member, or :all")  # fmt: skip
    p.add_argument("--workdir", default="")
    p.add_argument("--job", default="")
    p.add_argument("--deadline", type=float, default=600.0, help="give up after this many seconds")
    p.add_argument("--script-arg", action="append", default=[], metavar="ARG",
                   help="an argument of a WMLA script's argv (repeat it for each)")  # fmt: skip
    p.add_argument("--script-decides", default="", metavar="FIELDS",
                   help="WMLA script: these from its train(), e.g. epochs,batch_size")  # fmt: skip
    return p


def seconds(text: str) -> float:
    """A positive number of seconds (the collective timeout)."""
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, not {text}")
    return value


def main(argv: list[str] | None = None) -> int:
    p = parser()
    a = p.parse_args(argv)
    try:  # the web's rules, once: the spec is built from what they accept
        submission = validated(vars(a))
    except Refused as refused:
        p.error(str(refused))
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    spec = JobSpec.of(
        submission, job_id=a.job or f"drive-{uuid.uuid4().hex[:8]}",
        model=str(Path(a.model).resolve()), data=str(Path(a.data).resolve()),
        workdir=a.workdir or tempfile.mkdtemp(prefix="edt-drive-"), seed=a.seed,
        collective_timeout=a.timeout, max_steps=a.max_steps, bucket_bytes=a.bucket_bytes,
        argv=a.script_arg, script_decides=[f for f in a.script_decides.split(",") if f],
    )  # fmt: skip
    kills = [parse_fault(k) for k in a.kill]
    driver = Driver(spec, parse_schedule(a.schedule), redis_url, kills, a.gpus)
    print(f"[drive] job {spec.job_id}, workdir {spec.workdir}", flush=True)
    return driver.run(a.deadline)


if __name__ == "__main__":
    sys.exit(main())
