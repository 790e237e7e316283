"""Drive one elastic job without the scheduler, for tests and benchmarks.

    python -m workers.learner.drive --model examples/mlp.py --data DIR \\
        --schedule "0:1,20:3,40:2,60:3,80:1" --max-steps 100

``--schedule`` lists step:workers pairs; for a goodput-mode job (``--batch-min``,
``--batch-max``) an entry may name the global batch too, ``STEP:WORKERS@BATCH`` (e.g.
``0:1,20:2@256``), published with that generation. A WMLA script runs as ``__main__`` with the
``--script-arg`` values as its argv. The driver plays the scheduler's decisions; the
scheduler's own per-job controller (``scheduler/elastic.py``) plays the protocol: it starts
joiners first and publishes a generation only when they are READY, shrinks at once,
replaces failed generations, and restarts from the latest checkpoint when every learner is
gone. Metrics go to WORKDIR/metrics.jsonl, events to WORKDIR/events.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from multiprocessing import forkserver
from pathlib import Path
from typing import Any

from protocol.connection import connect
from protocol.exits import Exit, RunResult
from protocol.jobstore import JobStore
from scheduler.live.job import JobRunner
from scheduler.policies import model as states
from scheduler.store import Store
from workers.learner.allocator import huge_pages
from workers.learner.host import PRELOAD, _forkserver, fork_server_pid, signal_learner
from workers.learner.spec import JobSpec
from workers.learner.submission import DEFAULTS, PRECISIONS, Refused, validated
from workers.sandbox import dies_with_parent

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
    """ "0:1,20:3" -> [(0, 1), (20, 3)], sorted by step; workers at least 1 (a batch after
    ``@`` is :func:`parse_batches`')."""
    pairs = []
    for item in filter(None, (p.strip() for p in text.split(","))):
        step, _, workers = item.partition("@")[0].partition(":")
        if not step.isdigit() or not workers.isdigit() or int(workers) < 1:
            raise ValueError(f"schedule entry {item!r}: write STEP:WORKERS, e.g. 20:3")
        pairs.append((int(step), int(workers)))
    if not pairs or pairs[0][0] != 0:
        pairs.insert(0, (0, pairs[0][1] if pairs else 1))
    return sorted(pairs)


def parse_batches(text: str) -> list[tuple[int, int]]:
    """The global batches a schedule names: "0:1,20:2@256" -> [(20, 256)], by step."""
    found = []
    for item in filter(None, (p.strip() for p in text.split(","))):
        entry, at, batch = item.partition("@")
        if not at:
            continue
        if not batch.isdigit() or int(batch) < 1:
            raise ValueError(f"schedule entry {item!r}: write STEP:WORKERS@BATCH, e.g. 20:3@256")
        found.append((int(entry.partition(":")[0]), int(batch)))
    return sorted(found)


def workers_at(schedule: list[tuple[int, int]], step: int) -> int:
    return [w for s, w in schedule if s <= step][-1]


def batch_at(batches: list[tuple[int, int]], step: int) -> int:
    """The global batch the schedule names at ``step`` (0: none yet)."""
    named = [b for s, b in batches if s <= step]
    return named[-1] if named else 0


class LocalLauncher:
    """Learners as local child processes, each in its own session, logging to a file.
    With ``gpus``, each learner sees one GPU, in turn by start order, as a slot would.

    As on a slot (workers/learner/host.py), each learner is forked from a fork server that
    imported torch and the learner once, with this environment (:meth:`env`): a resize
    test starts a dozen learners, and each would otherwise pay torch's import (3-4 s of a
    core on a busy 2-core host). Unlike a slot's, these learners run unsandboxed, as this
    process's user."""

    def __init__(self, spec_path: Path, logs: Path, redis_url: str, gpus: int = 0) -> None:
        self.spec_path, self.logs, self.redis_url = spec_path, logs, redis_url
        self.gpus = gpus
        self.procs: dict[str, tuple[str, Any]] = {}  # slot -> token, its multiprocessing.Process

    def env(self) -> dict[str, str]:
        """A learner's environment: this process's, with its Redis, one torch thread and
        huge pages for large tensors (allocator.py)."""
        env = dict(os.environ, REDIS_URL=self.redis_url, EDT_TORCH_THREADS="1",
                   OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")  # fmt: skip
        huge_pages(env)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_DIR), env.get("PYTHONPATH")]))
        return env

    def start(self, slot: str, token: str) -> None:
        env = self.env()
        if self.gpus:
            env["CUDA_VISIBLE_DEVICES"] = str(len(self.procs) % self.gpus)
        if fork_server_pid() is None:  # its first use starts it with this environment
            os.environ.update({k: v for k, v in env.items() if k != "CUDA_VISIBLE_DEVICES"})
            # A slot's preload, its warm-up included (without it each learner imported
            # torch._dynamo at its optimizer's construction: 1.3 s of CPU quiet, 4 busy),
            # and this module: a forked learner runs it again as its __mp_main__, with
            # what it imports already there
            _forkserver.set_forkserver_preload([*PRELOAD, "workers.learner.drive"])
        argv = ["--spec", str(self.spec_path), "--slot", slot]
        proc = _forkserver.Process(target=_local_learner,
                                   args=(argv, env, str(self.logs / f"{slot}.log")))  # fmt: skip
        proc.start()
        self.procs[slot] = (token, proc)

    def kill(self, slot: str, sig: int = signal.SIGKILL) -> None:
        _token, proc = self.procs.get(slot, ("", None))
        if proc is not None and proc.exitcode is None:
            signal_learner(proc.pid, sig)

    def exits(self) -> dict[str, RunResult]:
        """How the learners that ended ended, by slot (the last one started there)."""
        ended = {slot: (token, proc.exitcode) for slot, (token, proc) in self.procs.items()}
        return {slot: RunResult(token, code) for slot, (token, code) in ended.items()
                if code is not None}  # fmt: skip

    def dispatched(self) -> dict[str, str]:
        return {}  # nothing was sent before this launcher

    def reap(self) -> None:
        for slot in self.procs:
            self.kill(slot)
        for _token, proc in self.procs.values():
            proc.join()


def _local_learner(argv: list[str], env: dict[str, str], log_path: str) -> None:
    """In the forked learner: killed with the fork server (which ends with this driver, kill
    -9 included: a test run killed left its learners retrying for good); a session of its
    own (a fault signals its group); its environment; its log."""
    dies_with_parent(signal.SIGKILL, parent=os.getppid())()
    # The fork server lives while any process holds the write end of its "alive" pipe; a
    # forked child holds a copy, so that it would outlive a killed driver and keep the
    # learners alive. Dropped here, the server ends with the driver, and they with it.
    alive = forkserver._forkserver._forkserver_alive_fd  # type: ignore[attr-defined]
    if alive is not None:
        os.close(alive)
        forkserver._forkserver._forkserver_alive_fd = None  # type: ignore[attr-defined]
    os.setsid()
    os.environ.clear()
    os.environ.update(env)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    for target in (1, 2):
        os.dup2(fd, target)
    os.close(fd)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    from workers.learner import __main__ as learner

    sys.argv = [learner.__file__, *argv]  # as `python -m workers.learner ARGV` has it
    sys.exit(learner.main(argv))


class DriveBook:
    """The job's timeline for the drive: events to WORKDIR/events.jsonl and the console;
    the job has no record to move (``scheduler.live.job.Timeline``)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir

    def record_event(self, job_id: int, kind: str, message: str, **data: Any) -> None:
        with (self.workdir / "events.jsonl").open("a") as f:
            f.write(json.dumps({"kind": kind, **data}) + "\n")
        shown = {k: v for k, v in data.items() if k not in ("time", "step")}
        print(f"[drive] step {data.get('step', '-')}: {kind} {shown}", flush=True)

    def start(self, job_id: int) -> bool:
        return True

    def fail(self, job_id: int, message: str) -> bool:
        return True

    def complete(self, job_id: int) -> bool:
        return True

    def suspend(self, job_id: int, checkpoint_step: int) -> bool:
        return True


class Driver:
    """Plays a schedule of sizes against one job, with optional fault injection, through
    the scheduler's own per-job controller (``scheduler/live/job.py``): the drive is the
    decision, the controller does the rest."""

    def __init__(self, spec: JobSpec, schedule: list[tuple[int, int]], redis_url: str,
                 kills: list[Fault], gpus: int = 0,
                 batches: list[tuple[int, int]] | None = None) -> None:  # fmt: skip
        self.schedule, self.kills = schedule, sorted(kills)
        self.batches = batches or []
        self.workdir = Path(spec.workdir)
        (self.workdir / "logs").mkdir(parents=True, exist_ok=True)
        spec.save(self.workdir / "spec.json")
        self.launcher = LocalLauncher(self.workdir / "spec.json", self.workdir / "logs", redis_url,
                                      gpus)  # fmt: skip
        client = connect(redis_url)
        self.jobs = JobStore(client, spec.job_id)
        self.progress = Store(client)  # the metrics consumer's part: training finished
        self.book = DriveBook(self.workdir)
        self.runner = JobRunner(0, self.jobs, self.launcher, self.book,
                                spec.collective_timeout, resume=False)  # fmt: skip
        self.counter = 0
        self.cursor = "0-0"
        self.metrics = (self.workdir / "metrics.jsonl").open("a")

    def event(self, kind: str, **data: Any) -> None:
        data = {"step": self.runner.state.step, "time": time.time(), **data}
        self.book.record_event(0, kind, kind, **data)

    def read_metrics(self) -> None:
        """The learners' records to metrics.jsonl; their ``done`` says training finished
        (the metrics consumer's part in the platform)."""
        for eid, record in self.jobs.read_metrics(self.cursor):
            self.cursor = eid
            self.metrics.write(json.dumps(record) + "\n")
            if record["type"] == "done":
                self.progress.save_progress(self.jobs.job_id, eid, int(record["step"]))
        self.metrics.flush()

    def inject_faults(self) -> None:
        members = self.runner.members()
        while self.kills and self.runner.state.step >= self.kills[0].step and members:
            fault = self.kills.pop(0)
            victims = list(members) if fault.everyone else members[-1:]
            self.event("fault", slots=victims, signal=signal.Signals(fault.signal).name)
            for victim in victims:
                self.runner.kill(victim, fault.signal)

    def plan(self) -> None:
        """The decision: the schedule's size now, and every joiner the rest of the schedule
        needs started ahead, so each is READY in time. The first generation waits for all
        of them to be READY."""
        s = self.runner.state
        if s.failure_since is not None:
            return
        dead = [slot for slot in s.joining if self.runner.exited(slot)]
        if dead and self.runner.first_error() is not None:
            return  # it said why before it ended: this tick's runner fails the job with that
        if dead:
            raise RuntimeError(f"joiner {dead[0]} exited before READY; see its log")
        now = workers_at(self.schedule, s.step)
        joins, previous = max(0, now - len(s.members)), now
        for step, workers in self.schedule:
            if step > s.step:
                joins += max(0, workers - previous)
                previous = workers
        new = [f"d{self.counter + i}" for i in range(max(0, joins - len(s.joining)))]
        self.counter += len(new)
        ready = self.jobs.ready_slots()
        waiting = not s.members and not set([*s.joining, *new]) <= ready
        self.runner.apply(0 if waiting else now, new, (), batch_at(self.batches, s.step))

    def tick(self) -> int | None:
        self.read_metrics()
        if self.runner.state.over and self.kills:
            return self.fault_never_came()
        self.inject_faults()
        if not self.runner.state.over:
            self.plan()
        # the learners' leases, as the live scheduler looks at them: a frozen learner's
        # lapses, one waiting in a collective renews it (elastic's watch_failures)
        self.runner.look(set(self.runner.state.learners.tokens))
        resting = self.runner.tick(alive=None, look=False)
        if resting == states.FAILED:
            self.event("failed", error=self.runner.first_error() or "failed")
            return Exit.USER_CODE_FAILED
        if resting == states.COMPLETED and self.kills:  # ended within this very tick
            return self.fault_never_came()
        if resting == states.COMPLETED:
            self.event("completed")
            return Exit.FINISHED
        return None

    def fault_never_came(self) -> int:
        """A run that was to test a fault ended before it: it fails, and says so."""
        step, due = self.runner.state.step, self.kills[0].step
        self.event("failed", error=f"the job ended at step {step}, before the fault due "
                   f"at step {due} could be injected")  # fmt: skip
        return Exit.USER_CODE_FAILED

    def steady(self) -> bool:
        """Training as the schedule wants for the rest of the run, nothing starting and no
        fault to inject: only a failure or the end can happen."""
        s = self.runner.state
        return (
            not self.kills
            and not s.joining
            and s.failure_since is None
            and bool(s.members)
            and all(step <= s.step for step, _ in self.schedule)
            and len(s.members) == workers_at(self.schedule, s.step)
            and all(step <= s.step for step, _ in self.batches)
            and s.batch == s.published_batch
        )

    def run(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                code = self.tick()
                if code is not None:
                    return code
                time.sleep(STEADY_TICK_SECONDS if self.steady() else TICK_SECONDS)
            self.event("timeout", seconds=timeout)
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
    p.add_argument("--batch-min", type=int, default=DEFAULTS["batch_min"],
                   help="goodput mode: the global batch range's low end")  # fmt: skip
    p.add_argument("--batch-max", type=int, default=DEFAULTS["batch_max"],
                   help="goodput mode: the global batch range's high end")  # fmt: skip
    p.add_argument("--epochs", type=int, default=DEFAULTS["epochs"])
    p.add_argument("--max-steps", type=int, default=0)
    p.add_argument("--lr", type=float, default=DEFAULTS["lr"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint-every", type=int, default=DEFAULTS["checkpoint_every"])
    p.add_argument("--gpus", type=int, default=0, help="give learners GPUs 0..N-1 in turn")
    p.add_argument("--bucket-bytes", type=int, default=0, help="all-reduce bucket cap")
    p.add_argument("--precision", default=DEFAULTS["precision"], choices=PRECISIONS)
    p.add_argument("--image-size", type=int, default=DEFAULTS["image_size"])
    p.add_argument("--loader-workers", type=int, default=DEFAULTS["loader_workers"])
    p.add_argument("--augment", type=int, default=DEFAULTS["augment"])
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
    try:
        schedule, batches = parse_schedule(a.schedule), parse_batches(a.schedule)
    except ValueError as exc:
        p.error(str(exc))
    if batches and not spec.goodput:
        p.error("--schedule names a batch (@BATCH): give the job a batch range "
                "(--batch-min, --batch-max)")  # fmt: skip
    driver = Driver(spec, schedule, redis_url, kills, a.gpus, batches)
    print(f"[drive] job {spec.job_id}, workdir {spec.workdir}", flush=True)
    return driver.run(a.deadline)


if __name__ == "__main__":
    sys.exit(main())
