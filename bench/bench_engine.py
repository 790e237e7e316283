"""Engine benchmarks: steady-state speed against DDP, resize against a torchrun-style restart.

    python bench/bench_engine.py [--pairs 5] [--only throughput|resize|restart]

Everything runs in this one invocation on this machine, baselines included, and the tables
go to bench/results/engine.md.

**Throughput.** For each model and group size, ``--pairs`` interleaved pairs (the order
alternates within pairs): the engine driven by ``workers.learner.drive`` and plain DDP
(bench/ddp_baseline.py) with the same model, data, global batch, split, thread count and
per-epoch shuffle. Both are timed over the same steps (after a warm-up, inside the first
epoch: no evaluation or checkpoint in the window). The engine's window runs from rank 0's
record of step W to that of step W+S; DDP's from a barrier before step W to one after
step W+S-1. CPU per step: the learners' CPU time (all threads, read from /proc every 0.2 s
and interpolated to the window's edges; the records are read from Redis after the run, so
nothing of the measurement talks to Redis while the learners train) and DDP's process time
over its window, per worker.

**Resize.** One learner trains; at the *decision* the coordinator starts a joiner and
publishes the grown generation once it is READY; later it shrinks back. Reported: the
stall (the end of the last step at the old size to the end of the first at the new, less
one step at the new size), and decision to the end of the first step at the new size
with the joiner's start-up, for learners spawned cold (``python -m workers.learner``) and
forked from a warm fork server (as slot workers start them, workers/learner/host.py), at
model+optimizer state of ~0.1 and ~1 GB.

**Restart.** What torchrun does on a membership change: the agent (this process) stays
up and hosts the store; it stops the workers (SIGTERM), spawns new ones, which import
torch, form the group, load the checkpoint and take their first step.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch.distributed as dist  # noqa: E402

from edtweb.redis_server import RedisServer, free_port  # noqa: E402
from protocol.connection import connect  # noqa: E402
from protocol.exits import RunResult  # noqa: E402
from protocol.jobstore import JobStore  # noqa: E402
from scheduler.live.job import JobRunner  # noqa: E402
from workers.learner import host  # noqa: E402
from workers.learner.allocator import huge_pages  # noqa: E402
from workers.learner.datasets import write_cifar10  # noqa: E402
from workers.learner.drive import DriveBook, LocalLauncher  # noqa: E402
from workers.learner.spec import JobSpec  # noqa: E402

CNN = PROJECT / "examples" / "cnn.py"
WIDE = PROJECT / "bench" / "wide_mlp.py"
CLK = os.sysconf("SC_CLK_TCK")
READ_SECONDS = 0.2  # how often the engine's throughput run reads its learners' CPU


@dataclass(frozen=True)
class Setup:
    name: str
    model: Path
    batch: int
    warmup: int
    steps: int
    goal: float


SETUPS = [
    Setup("small CNN (examples/cnn.py, 0.14 M parameters, 0.55 MB)", CNN, 64, 20, 200, 0.99),
    Setup("wide MLP (bench/wide_mlp.py, 21.0 M parameters)", WIDE, 64, 3, 12, 0.98),
]
MODEL_KEYS = ["cnn", "wide"]  # SETUPS' names on the command line
# model+optimizer state (weights and SGD momentum, fp32) of ~0.1 GB and ~1 GB
RESIZE_MODELS = {"0.1 GB": (4096,), "1.0 GB": (10240, 9216)}
RESIZE_BATCH = 8
# (state, joiner forked warm): a cold spawn only at the small size (its start-up does not
# depend on the state; the 1 GB model's steps are slow here)
RESIZE_RUNS = [("0.1 GB", True), ("0.1 GB", False), ("1.0 GB", True)]


def python() -> list[str]:
    return [sys.executable]


# Throughput ------------------------------------------------------------------------------


def children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry.name))
    return out


def cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / CLK
    return total


def engine_run(redis_url: str, s: Setup, workers: int, data: Path, tmp: Path,
               *extra: str) -> dict[str, float]:  # fmt: skip
    """The engine's throughput run under the driver (``extra``: more of its options)."""
    job = f"bench-{uuid.uuid4().hex[:8]}"
    cmd = [*python(), "-m", "workers.learner.drive", "--model", str(s.model),
           "--data", str(data), "--schedule", f"0:{workers}", "--batch-size", str(s.batch),
           "--max-steps", str(s.warmup + s.steps + s.steps // 2), "--epochs", "1000",
           "--checkpoint-every", "1000", "--workdir", str(tmp / job), "--job", job,
           *extra]  # fmt: skip
    env = dict(os.environ, REDIS_URL=redis_url)
    deadline = time.monotonic() + 600
    edges = (s.warmup, s.warmup + s.steps)
    learners: list[int] = []
    cpu: list[tuple[float, float]] = []  # (time, the learners' CPU seconds), each look
    own = time.process_time()
    # Nothing but /proc while the job trains: a look every READ_SECONDS at the learners'
    # CPU, and the records are read from Redis once the run is over (a reader of the stream
    # during the window took 0.6-0.7 % of a core, and Redis some more, from the cores the
    # learners share; DDP's side measures itself in-process). The run trains half a window
    # past the window's end (--max-steps), so a look comes after that end while every
    # learner still runs. Its output goes to a file, not a pipe nobody reads while it runs.
    with tempfile.TemporaryFile(mode="w+") as err:
        proc = subprocess.Popen(cmd, cwd=PROJECT, env=env, stdout=err,
                                stderr=subprocess.STDOUT, text=True)  # fmt: skip
        try:
            while proc.poll() is None:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"drive did not finish {job} in 600 s")
                if len(learners) < workers:  # its learners, once up: below its fork server
                    learners = [c for server in children(proc.pid) for c in children(server)]
                if len(learners) == workers and all(Path(f"/proc/{p}").exists() for p in learners):
                    cpu.append((time.time(), cpu_seconds(learners)))
                time.sleep(READ_SECONDS)
            if proc.returncode != 0:
                err.seek(0)
                raise RuntimeError(f"drive exited with {proc.returncode}: {err.read()[-3000:]}")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    own = time.process_time() - own
    times: dict[int, float] = {}  # the window's edges, as rank 0 timed them
    jobs = JobStore(connect(redis_url), job)
    entries: Any = jobs.r.xrange(jobs.key("metrics"))
    for _eid, fields in entries:
        rec = json.loads(fields["json"])
        if rec["type"] == "train" and rec["step"] in edges and not rec.get("replay"):
            times.setdefault(rec["step"], rec["time"])
    if len(times) < 2:
        raise RuntimeError(f"no records of steps {edges} in the job's stream")
    t0, t1 = times[edges[0]], times[edges[1]]
    used = interpolate(cpu, t1) - interpolate(cpu, t0)
    return {"samples_per_s": s.steps * s.batch / (t1 - t0),
            "cpu_ms_per_step": used * 1000 / (s.steps * workers),
            "watcher_cpu_s": own}  # fmt: skip


def interpolate(samples: list[tuple[float, float]], at: float) -> float:
    """The CPU seconds at time ``at``, between the two samples around it."""
    for (ta, ca), (tb, cb) in itertools.pairwise(samples):
        if ta <= at <= tb:
            return ca + (cb - ca) * (at - ta) / max(tb - ta, 1e-9)
    raise ValueError(f"no CPU samples around {at}")


class AgentStore:
    """The store a torchrun agent hosts for its workers' rendezvous."""

    def __init__(self) -> None:
        self.port = free_port()
        self.store = dist.TCPStore("127.0.0.1", self.port, is_master=True,
                                   wait_for_workers=False)  # fmt: skip


def ddp_cmd(mode: str, rank: int, world: int, port: int, s: Setup, data: Path,
            *extra: str) -> list[str]:  # fmt: skip
    args = [str(a) for a in (rank, world, port, s.warmup, s.steps, s.batch, s.model, data)]
    return [*python(), str(PROJECT / "bench" / "ddp_baseline.py"), mode, *args, *extra]


def ddp_run(agent: AgentStore, s: Setup, workers: int, data: Path) -> dict[str, float]:
    prefix = f"t{uuid.uuid4().hex[:8]}"
    # Each rank in a session of its own, as the engine's learners are: with the kernel's
    # autogroup scheduling a session is a unit of CPU share on a busy machine.
    procs = [subprocess.Popen(ddp_cmd("train", r, workers, agent.port, s, data, "--prefix", prefix),
                              cwd=PROJECT, stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
             for r in range(workers)]  # fmt: skip
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise RuntimeError("a DDP baseline process failed")
    return dict(json.loads(outputs[0].strip().splitlines()[-1]))


def throughput(redis_url: str, data: Path, tmp: Path, pairs: int, sizes: list[int],
               models: list[str], setups: list[tuple[Setup, str]] | None = None,
               ) -> list[dict[str, Any]]:  # fmt: skip
    """Interleaved pairs of the engine and DDP for each model named in ``models`` (keys of
    ``setups``: SETUPS by MODEL_KEYS unless given) and group size."""
    agent = AgentStore()
    rows = []
    chosen = setups if setups is not None else list(zip(SETUPS, MODEL_KEYS, strict=True))
    for s in (s for s, key in chosen if key in models):
        for workers in sizes:
            runs: list[dict[str, Any]] = []
            for i in range(pairs):
                load = os.getloadavg()[0]
                if i % 2 == 0:
                    eng = engine_run(redis_url, s, workers, data, tmp)
                    ddp = ddp_run(agent, s, workers, data)
                else:
                    ddp = ddp_run(agent, s, workers, data)
                    eng = engine_run(redis_url, s, workers, data, tmp)
                ratio = eng["samples_per_s"] / ddp["samples_per_s"]
                runs.append({"engine": eng, "ddp": ddp, "ratio": ratio, "load": load})
                print(f"{s.name}, {workers} workers, pair {i + 1}: engine "
                      f"{eng['samples_per_s']:.0f}/s, DDP {ddp['samples_per_s']:.0f}/s, "
                      f"ratio {ratio:.3f}, CPU ms/step/worker engine "
                      f"{eng['cpu_ms_per_step']:.1f} DDP {ddp['cpu_ms_per_step']:.1f}, "
                      f"this process's CPU while the engine ran {eng['watcher_cpu_s']:.2f} s, "
                      f"load {load:.1f}", flush=True)  # fmt: skip
            rows.append({"setup": s, "workers": workers, "runs": runs})
    return rows


# Resize ----------------------------------------------------------------------------------


class ColdLauncher(LocalLauncher):
    """Learners spawned cold, ``python -m workers.learner``, each importing torch (the
    drive's own forks from a warm fork server since the suite's CPU was cut)."""

    def start(self, slot: str, token: str) -> None:
        with (self.logs / f"{slot}.log").open("ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "workers.learner", "--spec", str(self.spec_path),
                 "--slot", slot], stdout=log, stderr=subprocess.STDOUT, env=self.env(),
                cwd=PROJECT, start_new_session=True,
            )  # fmt: skip
        self.procs[slot] = (token, _Spawned(proc))


class _Spawned:
    """A spawned learner as the launcher reads a forked one (``exitcode``, ``join``)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc, self.pid = proc, proc.pid

    @property
    def exitcode(self) -> int | None:
        return self.proc.poll()

    def join(self) -> None:
        self.proc.wait()


class WarmLauncher:
    """Learners forked from a warm fork server, as a slot worker starts them."""

    def __init__(self, spec_path: Path, logs: Path, redis_url: str) -> None:
        self.spec_path, self.logs, self.redis_url = spec_path, logs, redis_url
        spec = JobSpec.load(spec_path)
        self.paths = host.JobPaths(Path(spec.data), Path(spec.model), Path(spec.workdir))
        self.procs: dict[str, tuple[str, Any]] = {}  # slot -> token, process
        host.prewarm()

    def start(self, slot: str, token: str) -> None:
        log = self.logs / f"{slot}.log"
        proc = host.fork_learner(self.spec_path, self.paths, slot, self.redis_url, log)
        self.procs[slot] = (token, proc)

    def kill(self, slot: str, sig: int = signal.SIGKILL) -> None:
        _token, proc = self.procs.get(slot, ("", None))
        if proc is not None and proc.exitcode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)

    def exits(self) -> dict[str, RunResult]:
        ended = {slot: (token, proc.exitcode) for slot, (token, proc) in self.procs.items()}
        return {slot: RunResult(token, code) for slot, (token, code) in ended.items()
                if code is not None}  # fmt: skip

    def dispatched(self) -> dict[str, str]:
        return {}

    def reap(self) -> None:
        for slot in self.procs:
            self.kill(slot)
        for _token, proc in self.procs.values():
            proc.join()


def sized_model(tmp: Path, hidden: tuple[int, ...]) -> Path:
    """The model file where the platform keeps a registered model's code (its own directory
    under the data directory's ``models/``: a learner's sandbox exposes that directory)."""
    code = tmp / "models" / f"mlp_{'_'.join(map(str, hidden))}" / "code"
    code.mkdir(parents=True, exist_ok=True)
    path = code / "mlp.py"
    text = WIDE.read_text().replace("HIDDEN = (4096, 2048)", f"HIDDEN = {hidden!r}")
    path.write_text(text)
    return path


def state_gb(hidden: tuple[int, ...]) -> float:
    widths = [3 * 32 * 32, *hidden, 10]
    params = sum(a * b + b for a, b in itertools.pairwise(widths))
    return params * 4 * 2 / 1e9


class Session:
    """One job under a coordinator of our own, so the decision time is ours to take."""

    def __init__(self, redis_url: str, model: Path, data: Path, tmp: Path, warm: bool) -> None:
        job = f"resize-{uuid.uuid4().hex[:8]}"
        work = tmp / "jobs" / job
        (work / "logs").mkdir(parents=True)
        spec = JobSpec(job_id=job, model=str(model), data=str(data), workdir=str(work),
                       batch_size=RESIZE_BATCH, epochs=1000, checkpoint_every=1000,
                       collective_timeout=120)  # fmt: skip
        spec.save(work / "spec.json")
        launcher_cls = WarmLauncher if warm else ColdLauncher
        self.launcher = launcher_cls(work / "spec.json", work / "logs", redis_url)
        self.jobs = JobStore(connect(redis_url), job)
        # The scheduler's own per-job controller; the benchmark takes the decisions.
        self.runner = JobRunner(0, self.jobs, self.launcher, DriveBook(work), 120, resume=False)
        self.cursor = "0-0"
        self.records: list[dict[str, Any]] = []
        self.sized = (0, 0.0)  # members, and when the generation of that size was published

    def pump(self) -> None:
        for eid, record in self.jobs.read_metrics(self.cursor):
            self.cursor = eid
            if record["type"] == "train":
                self.records.append(record)
        self.runner.tick(alive=None, look=False)
        if self.members() != self.sized[0]:
            self.sized = (self.members(), time.time())
        error = self.runner.first_error()
        if error:
            raise RuntimeError(error)
        time.sleep(0.01)

    def members(self) -> int:
        return len(self.runner.members())

    def until(self, done: Any, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise TimeoutError("resize benchmark: timed out")
            self.pump()

    def steps_at(self, workers: int) -> list[dict[str, Any]]:
        return [r for r in self.records if r["workers"] == workers]

    def resize(self, grow: bool, after_steps: int = 2) -> dict[str, float]:
        before = self.members()
        target = len(self.records) + after_steps
        self.until(lambda: len(self.records) >= target)
        decided = time.time()
        after = before + 1 if grow else before - 1
        joined = [f"s{len(self.runner.state.started)}"] if grow else []
        self.runner.apply(after, joined, ())
        self.until(lambda: self.members() == after)
        published = self.sized[1]
        self.until(lambda: any(r["time"] > published and r["workers"] == after
                               for r in self.records))  # fmt: skip
        first = next(r for r in self.records if r["time"] > published and r["workers"] == after)
        start_step = first["step"]
        self.until(lambda: self.records[-1]["step"] >= start_step + 3)
        last_old = max(r["time"] for r in self.records if r["workers"] == before
                       and r["step"] < start_step)  # fmt: skip
        new = [r for r in self.records if r["workers"] == after and r["step"] >= start_step]
        step = statistics.median(b["time"] - a["time"] for a, b in itertools.pairwise(new))
        first_step = RESIZE_BATCH / first["samples_per_s"]  # its own time, as rank 0 took it
        return {"stall": first["time"] - last_old - step, "step": step,
                "pause": first["time"] - first_step - last_old, "first_step": first_step,
                "to_first_step": first["time"] - decided,
                "startup": published - decided}  # fmt: skip

    def run(self) -> dict[str, dict[str, float]]:
        self.runner.apply(1, ["s0"], ())
        self.until(lambda: self.members() == 1)
        try:
            grow = self.resize(grow=True)
            shrink = self.resize(grow=False)
        finally:
            self.launcher.reap()
        return {"grow": grow, "shrink": shrink}


def resize(redis_url: str, data: Path, tmp: Path, repeats: int) -> list[dict[str, Any]]:
    rows = []
    for label, warm in RESIZE_RUNS:
        hidden = RESIZE_MODELS[label]
        model = sized_model(tmp, hidden)
        for _ in range(repeats):
            load = os.getloadavg()[0]
            got = Session(redis_url, model, data, tmp, warm).run()
            rows.append({"state": label, "gb": state_gb(hidden), "warm": warm,
                         "load": load, **got})  # fmt: skip
            print(label, "warm" if warm else "cold", got, flush=True)
    return rows


# Restart ---------------------------------------------------------------------------------


def restart(data: Path, tmp: Path, repeats: int) -> list[dict[str, Any]]:
    """Grow 1 -> 2 the torchrun way: stop every worker, spawn them again, reload."""
    agent = AgentStore()
    rows = []
    for label, hidden in RESIZE_MODELS.items():
        s = Setup(label, sized_model(tmp, hidden), RESIZE_BATCH, 0, 0, 0)
        ckpt = tmp / f"restart-{'_'.join(map(str, hidden))}.pt"
        for _ in range(repeats):
            load = os.getloadavg()[0]
            prefix = uuid.uuid4().hex[:8]
            old = subprocess.Popen(
                ddp_cmd("restart", 0, 1, agent.port, s, data, "--prefix", f"a{prefix}",
                        "--checkpoint", str(ckpt), "--save"),
                cwd=PROJECT, stdout=subprocess.PIPE, text=True)  # fmt: skip
            assert old.stdout is not None
            old.stdout.readline()  # it trains on, its checkpoint written
            decided = time.time()
            old.send_signal(signal.SIGTERM)
            old.wait()
            torn = time.time()
            new = [subprocess.Popen(
                ddp_cmd("restart", r, 2, agent.port, s, data, "--prefix", f"b{prefix}",
                        "--checkpoint", str(ckpt)),
                cwd=PROJECT, stdout=subprocess.PIPE, text=True) for r in range(2)]  # fmt: skip
            marks = [json.loads(p.stdout.readline()) for p in new if p.stdout is not None]
            for p in new:
                p.kill()
                p.wait()
            at = {k: max(m[k] for m in marks) for k in marks[0]}
            rows.append({"state": label, "load": load, "teardown": torn - decided,
                         "spawn": at["started"] - torn, "import": at["imported"] - at["started"],
                         "group": at["joined"] - at["imported"],
                         "load_ckpt": at["loaded"] - at["joined"],
                         "first_step": at["first_step"] - at["loaded"],
                         "total": at["first_step"] - decided})  # fmt: skip
            print("restart", rows[-1], flush=True)
    return rows


# Report ----------------------------------------------------------------------------------


def span(values: list[float], fmt: str = "{:.3f}") -> str:
    return " / ".join(fmt.format(v) for v in (min(values), statistics.median(values), max(values)))


def report_throughput(rows: list[dict[str, Any]]) -> str:
    out = ["## Steady state: engine vs DDP (gloo), paired", "",
           "| model | workers | pairs | engine samples/s (median) | DDP samples/s (median) | "
           "ratio min / median / max | goal | engine CPU ms/step/worker | "
           "DDP CPU ms/step/worker | load 1-min (min-max) |",
           "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for row in rows:
        runs, s = row["runs"], row["setup"]
        ratios = [r["ratio"] for r in runs]
        med = statistics.median(ratios)
        verdict = "met" if med >= s.goal else "**missed**"
        eng = statistics.median(r["engine"]["samples_per_s"] for r in runs)
        ddp = statistics.median(r["ddp"]["samples_per_s"] for r in runs)
        ecpu = statistics.median(r["engine"]["cpu_ms_per_step"] for r in runs)
        dcpu = statistics.median(r["ddp"]["cpu_ms_per_step"] for r in runs)
        loads = [r["load"] for r in runs]
        out.append(f"| {s.name} | {row['workers']} | {len(runs)} | {eng:.0f} | {ddp:.0f} | "
                   f"{span(ratios)} | >= {s.goal} ({verdict}) | {ecpu:.1f} | {dcpu:.1f} | "
                   f"{min(loads):.1f}-{max(loads):.1f} |")  # fmt: skip
    out.append("")
    out.append("Ratios per pair: " + "; ".join(
        f"{r['setup'].name.split(' (')[0]} x{r['workers']}: "
        + ", ".join(f"{p['ratio']:.3f}" for p in r["runs"]) for r in rows))  # fmt: skip
    return "\n".join(out) + "\n"


def report_resize(rows: list[dict[str, Any]], restarts: list[dict[str, Any]],
                  bandwidth: float) -> str:  # fmt: skip
    out = ["## Resize (1 -> 2 -> 1 workers) against a torchrun-style restart", "",
           f"Broadcast bandwidth measured in the same run (gloo, 2 processes, 256 MB): "
           f"{bandwidth:.2f} GB/s. Stall goal: 50 ms + state / bandwidth. "
           "Decision to first step goal: 1 s, the joiner's start-up included.", "",
           "Pause: from the end of the last step at the old size to the start of the first "
           "at the new (the group formed and the state sent); first step: that step's own "
           "time; step: the median step after it.", "",
           "| state | joiner | change | stall, s | stall goal, s | pause, s | first step, s | "
           "step at new size, s | decision -> first step at new size, s | of which joiner "
           "start-up, s | load |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        goal = 0.05 + r["gb"] / bandwidth
        for change in ("grow", "shrink"):
            g = r[change]
            stall_ok = "met" if g["stall"] <= goal else "**missed**"
            first_ok = "met" if g["to_first_step"] <= 1.0 else "**missed**"
            startup = f"{g['startup']:.3f}" if change == "grow" else "-"
            out.append(f"| {r['state']} ({r['gb']:.2f} GB) | "
                       f"{'warm fork' if r['warm'] else 'cold spawn'} | {change} | "
                       f"{g['stall']:.3f} ({stall_ok}) | {goal:.3f} | {g['pause']:.3f} | "
                       f"{g['first_step']:.3f} | {g['step']:.3f} | "
                       f"{g['to_first_step']:.3f} ({first_ok}) | {startup} | "
                       f"{r['load']:.1f} |")  # fmt: skip
    out += ["", "Over the repeats, min / median / max:", "",
            "| state | joiner | change | runs | stall, s | stall goal (median), s | "
            "decision -> first step, s |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    groups: dict[tuple[str, bool], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["state"], r["warm"]), []).append(r)
    for (label, warm), runs in groups.items():
        goal = statistics.median(0.05 + r["gb"] / bandwidth for r in runs)
        for change in ("grow", "shrink"):
            stall = span([r[change]["stall"] for r in runs])
            first = span([r[change]["to_first_step"] for r in runs])
            out.append(f"| {label} | {'warm fork' if warm else 'cold spawn'} | {change} | "
                       f"{len(runs)} | {stall} | {goal:.3f} | {first} |")  # fmt: skip
    out += ["", "Restart as torchrun does it (1 -> 2 workers: SIGTERM, spawn, import torch, "
            "form the group, build the model and load the checkpoint, first step; the slowest "
            "rank at each stage), seconds:", "",
            "| state | teardown | spawn | import | group | load | first step | total "
            "(decision -> first step) | load avg |",
            "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in restarts:
        out.append(f"| {r['state']} | {r['teardown']:.3f} | {r['spawn']:.3f} | "
                   f"{r['import']:.3f} | {r['group']:.3f} | {r['load_ckpt']:.3f} | "
                   f"{r['first_step']:.3f} | {r['total']:.3f} | {r['load']:.1f} |")  # fmt: skip
    for label in RESIZE_MODELS:
        base = [r["total"] for r in restarts if r["state"] == label]
        ours = [r["grow"]["to_first_step"] for r in rows if r["state"] == label and r["warm"]]
        stall = [r["grow"]["stall"] for r in rows if r["state"] == label and r["warm"]]
        if base and ours:
            out.append(f"\n{label}: restart {statistics.median(base):.2f} s to the first step at "
                       f"the new size (training stopped throughout) vs the engine's grow "
                       f"{statistics.median(ours):.2f} s (warm joiner; training went on "
                       f"meanwhile, stalled {statistics.median(stall):.3f} s).")  # fmt: skip
    return "\n".join(out) + "\n"


def broadcast_bandwidth(tmp: Path) -> float:
    """GB/s of a 256 MB gloo broadcast between two local processes (median of 3)."""
    code = (
        "import sys,time,datetime,torch,torch.distributed as dist\n"
        "r=int(sys.argv[1]);s=dist.FileStore(sys.argv[2],2)\n"
        "pg=dist.ProcessGroupGloo(s,r,2,datetime.timedelta(seconds=120))\n"
        "t=torch.ones(64*1024*1024);o=dist.BroadcastOptions();o.rootRank=0;ts=[]\n"
        "for _ in range(4):\n"
        " pg.barrier().wait();a=time.perf_counter();pg.broadcast([t],o).wait()"
        ";ts.append(time.perf_counter()-a)\n"
        "import statistics;print(0.268435456/statistics.median(ts[1:]))\n"
    )
    store = tmp / f"bw-{uuid.uuid4().hex[:6]}"
    procs = [subprocess.Popen([*python(), "-c", code, str(r), str(store)], stdout=subprocess.PIPE,
                              text=True) for r in range(2)]  # fmt: skip
    outs = [p.communicate(timeout=300)[0] for p in procs]
    return float(outs[1].strip())


@contextlib.contextmanager
def bench_dir() -> Iterator[tuple[Path, Path, RedisServer]]:
    """A run's data directory (``EDT_DATA_DIR``), its CIFAR-10-shaped dataset and a Redis
    of its own; all gone afterwards. The directory is laid out as the platform's:
    datasets/, models/, jobs/. A warm-forked learner's sandbox hides it all but the job's
    own paths (it would otherwise hide the default, <project>/var, inside the read-only
    project tree)."""
    with tempfile.TemporaryDirectory(prefix="edt-bench-") as tmpdir:
        tmp = Path(tmpdir)
        tmp.chmod(0o755)  # the learners' unprivileged user reads the dataset and model code
        os.environ["EDT_DATA_DIR"] = tmpdir
        # 256 iterations per epoch at batch 64: the CNN's window (200 steps) has no epoch end
        data = write_cifar10(tmp / "datasets" / "cifar10", train=16384, test=256)
        redis = RedisServer(tmp / "redis", appendonly=False, dies_with_parent=True).start()
        try:
            yield tmp, data, redis
        finally:
            redis.stop()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--repeats", type=int, default=2, help="resize and restart repetitions")
    p.add_argument("--only", choices=["throughput", "resize"], default=None)
    p.add_argument("--workers", type=int, nargs="+", default=[2, 4], help="group sizes")
    p.add_argument("--models", nargs="+", choices=MODEL_KEYS, default=MODEL_KEYS,
                   help="throughput: which models")  # fmt: skip
    a = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # stopped: clean up on the way out
    # The engine's learners ask for huge pages for large tensors (workers/learner/allocator.py);
    # so do the baselines, started with this environment: neither faults each step's tensors
    # in 4 KiB at a time.
    huge_pages(os.environ)
    started = time.time()
    sections = [
        "# Engine benchmarks", "",
        f"One run of `python bench/bench_engine.py {' '.join(sys.argv[1:])}` "
        f"on {os.cpu_count()} cores (shared with other work: the 1-minute load average is "
        "in every table), CPU, one torch thread per process, gloo.", ""]  # fmt: skip
    with bench_dir() as (tmp, data, redis):
        if a.only in (None, "throughput"):
            sections.append(
                report_throughput(throughput(redis.url, data, tmp, a.pairs, a.workers, a.models))
            )
        if a.only in (None, "resize"):
            bandwidth = broadcast_bandwidth(tmp)
            rows = resize(redis.url, data, tmp, a.repeats)
            restarts = restart(data, tmp, a.repeats)
            sections.append(report_resize(rows, restarts, bandwidth))
    sections.append(f"Took {time.time() - started:.0f} s.")
    result = "\n".join(sections) + "\n"
    (PROJECT / "bench" / "results").mkdir(exist_ok=True)
    name = "engine.md" if a.only is None else f"engine-{a.only}.md"
    (PROJECT / "bench" / "results" / name).write_text(result)
    print(result)


if __name__ == "__main__":
    main()
