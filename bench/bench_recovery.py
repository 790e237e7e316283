"""Recovery benchmark: time from a fault to training again, per fault.

    python bench/bench_recovery.py [--pairs N] [--rounds N] [--netns-rounds N]   (make bench)

Faults on a job of 2 learners driven by ``workers.learner.drive`` (real learner processes,
real gloo, a real Redis of the run's own):

- **learner kill -9**: EDT keeps the survivor, which redoes the failed iteration from its
  in-memory weights. Baseline, in the same run, interleaved pair by pair: what a rigid
  launcher (torchrun's elastic agent) does on any worker failure, every learner restarted
  from the latest checkpoint (here: both learners killed at the same step).

Then faults of the live stack: two worker hosts of one CPU slot each (``edt_worker``, each
in a session of its own, as on two machines), web, scheduler and metrics consumer under
`make run`'s supervisor, SQLite, a Redis with an append-only file, a 2-learner job (one
learner per host) submitted as a user does; rounds of one fault each, in turn:

- **learner kill -9** of one of the job's learner processes;
- **slot worker kill -9**: the Celery worker hosting one of its learners;
- **worker host kill -9**: a host's whole process group (its slot worker and learner); it
  is started again once the survivor trains alone, and the job grows back;
- **scheduler kill -9**: the active ``edt_scheduler``; the supervisor starts another, which
  takes the lease once the dead one's has expired. Learners never wait for the scheduler:
  the time until a scheduler is active again is given beside the training's own pause;
- **web kill -9**: the Daphne serving pages and API; training never waits for it: the time
  until the API answers again is given beside;
- **Redis kill -9** for 10 s, then started again on its append-only file; and a **clean
  Redis restart** (SIGTERM, then at once up again). The learners train on through the
  outage and buffer their metrics: the time until the database has new steps again after
  Redis is back is given beside.

"Recovery" is the time from the fault to the next iteration's record (live: of a generation
formed after the fault, where one is); "redone" counts the iterations trained twice (a step
recorded twice). Tests/test_faults.py checks the same faults for correctness. Writes
bench/results/recovery.md.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from edtweb.redis_server import RedisServer  # noqa: E402
from tests.harness.waiting import wait_for  # noqa: E402
from workers.learner.datasets import write_cifar10  # noqa: E402

BATCH, STEPS, FAULT_AT = 64, 70, 40  # 16 iterations an epoch: the checkpoint is at step 32
LIVE_EPOCHS = 30  # the live job: 480 iterations, the fault at step FAULT_AT
# Its model sleeps 50 ms a step, so a job outlasts a fault and a 10 s Redis outage whatever
# the machine's speed (the tiny MLP alone trains 70 steps in well under a second, before a
# driver polling every 50 ms has seen step 40).
LIVE_MODEL = PROJECT / "tests" / "models" / "paced_mlp.py"
MODEL = LIVE_MODEL
LIVE_FAULTS = ("learner", "slot worker", "worker host", "scheduler", "web", "redis 10 s",
               "redis restart")  # fmt: skip
NEW_GENERATION = ("learner", "slot worker", "worker host")  # a generation without the lost one
REDIS_AWAY = 10.0
Live = tuple[float, int, float]  # recovery (s), iterations redone, the service back (s)


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
    """Two worker hosts, a supervised scheduler, metrics consumer and web, a database and a
    user, all of this run's own: the live tests' cluster (tests/harness/cluster.py)."""

    def __init__(self, tmp: Path, redis: RedisServer) -> None:
        tmp.chmod(0o755)  # learners run as the sandbox's user and read the model and data
        self.tmp, self.redis = tmp, redis
        os.environ |= {
            "EDT_DATA_DIR": str(tmp / "edt"),
            "DATABASE_URL": f"sqlite:///{tmp / 'edt.sqlite3'}",
            "DJANGO_SETTINGS_MODULE": "edtweb.settings",
            "REDIS_URL": redis.url,
            "PYTHONUNBUFFERED": "1",
        }
        import django

        django.setup()
        from django.contrib.auth import get_user_model
        from django.core.management import call_command

        from protocol.connection import connect
        from scheduler.store import Store
        from tests.harness.cluster import Cluster
        from tests.harness.processes import Processes

        call_command("migrate", verbosity=0)
        self.user = get_user_model().objects.create_user("bench", password="bench-only-1")
        self.store = Store(connect(redis.url))
        self.data = write_cifar10(tmp / "live-data", train=1024, test=64)
        self.cluster = Cluster(redis, self.store, Processes(), tmp, env=dict(os.environ))
        for host in ("bench-host-a", "bench-host-b"):
            self.start_host(host)
        self.supervised = self.cluster.supervise("scheduler", "web")  # and the metrics consumer
        self.port = self.cluster.web_port

    def start_host(self, host: str) -> None:
        """A worker host of one slot, restarting a dead slot worker after edt_worker's
        default 10 s."""
        self.cluster.start_host(host, 1, restart_delay=10)

    def close(self) -> None:
        """The supervised processes, then each worker host stopped as a machine's would be
        (SIGTERM, SIGKILL after 30 s), then whatever is left."""
        self.cluster.close()
        for _, worker in self.cluster.hosts.values():
            if worker is None or worker.poll() is not None:
                continue
            os.killpg(worker.pid, signal.SIGTERM)
            try:
                worker.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait()
        self.cluster.processes.cleanup()

    def child_pid(self, name: str) -> int | None:
        return self.supervised.pid(name)

    def api_answers(self) -> bool:
        """Any HTTP answer from the web (a 401 too: the process serves again)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/v1/auth/me/",
                                        timeout=10):  # fmt: skip
                return True
        except urllib.error.HTTPError:
            return True
        except OSError:
            return False

    def scheduler_pid(self) -> int | None:
        return self.child_pid("scheduler")

    def ready(self) -> bool:
        """Both slots alive and warm, the supervised scheduler active, the API answering."""
        pid = self.scheduler_pid()
        holder = self.store.lease_holder() or ""
        return (len(self.cluster.warm_slots()) == 2 and pid is not None
                and holder.endswith(f":{pid}") and self.api_answers())  # fmt: skip

    def one_fault(self, fault: str) -> Live:
        """Run a job, inject ``fault`` at step FAULT_AT; (recovery, redone, back) where
        ``back`` is the time until a scheduler is active again (scheduler kill only)."""
        from edtweb.training import services
        from edtweb.training.models import Job

        wait(self.ready, 300, "the stack ready")
        job = services.submit_job(self.user, name=f"{fault} killed", model_path=str(LIVE_MODEL),
                                  data_path=str(self.data), epochs=LIVE_EPOCHS,
                                  batch_size=BATCH, max_workers=2)  # fmt: skip
        jobs = services.job_store(job.pk)
        two = lambda: len(jobs.members(jobs.generation())) == 2 == len(self.cluster.learners())  # noqa: E731
        wait(lambda: two() or Job.objects.get(pk=job.pk).state not in Job.ACTIVE, 300,
             "the job on 2 learners")  # fmt: skip
        assert two(), f"{fault}: the job ended before it ran on 2 learners"
        wait(lambda: Job.objects.get(pk=job.pk).steps_done >= FAULT_AT, 300, "the fault's step")
        back = 0.0
        members = jobs.members(jobs.generation())
        if fault == "learner":
            at = kill(self.cluster.learners()[-1].pid)
        elif fault == "slot worker":
            slot = next(s for s in self.store.list_slots() if s.slot_id == members[-1])
            at = kill(slot.pid)
        elif fault == "worker host":
            host = next(s.host for s in self.store.list_slots() if s.slot_id == members[-1])
            at = time.time()
            worker = self.cluster.hosts[host][1]
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
            wait(lambda: host not in " ".join(jobs.members(jobs.generation())), 120,
                 "a generation without the lost host")  # fmt: skip
            self.start_host(host)  # the machine is back
        elif fault == "scheduler":
            old = self.scheduler_pid()
            assert old is not None
            at = kill(old)
            wait(lambda: (self.store.lease_holder() or "").endswith(
                f":{self.scheduler_pid()}") and self.scheduler_pid() != old, 120,
                "a scheduler active again")  # fmt: skip
            back = time.time() - at
        elif fault == "web":
            old = self.child_pid("web")
            assert old is not None
            at = kill(old)
            wait(lambda: self.child_pid("web") not in (None, old) and self.api_answers(), 120,
                 "the API answering again")  # fmt: skip
            back = time.time() - at
        else:  # Redis: killed for REDIS_AWAY s, or a clean restart
            done = Job.objects.get(pk=job.pk).steps_done
            at = time.time()
            if fault == "redis 10 s":
                self.redis.kill()
                time.sleep(REDIS_AWAY)  # the fault itself
            else:
                self.redis.stop()
            self.redis.start()
            up = time.time()
            wait(lambda: Job.objects.get(pk=job.pk).steps_done > done, 120,
                 "new steps stored after Redis returned")  # fmt: skip
            back = time.time() - up
        wait(lambda: Job.objects.get(pk=job.pk).state not in Job.ACTIVE, 600, "the job's end")
        if fault in ("slot worker", "worker host"):  # the next round starts once it is back
            wait(lambda: len(self.cluster.warm_slots()) == 2, 300, "both slots warm again")
        state = Job.objects.get(pk=job.pk).state
        assert state == Job.State.COMPLETED, f"{fault}: the job ended {state}"
        train = [r for _, r in jobs.read_metrics() if r["type"] == "train"]
        return (*after_live_fault(train, at, newer_generation=fault in NEW_GENERATION), back)


def kill(pid: int) -> float:
    at = time.time()
    os.kill(pid, signal.SIGKILL)
    return at


def wait(predicate: Callable[[], Any], timeout: float, what: str) -> None:
    """The live tests' wait (a deadline scaled by the machine's load), polling every 50 ms."""
    wait_for(predicate, timeout, what, step=0.05)


def after_live_fault(train: list[dict[str, Any]], at: float,
                     newer_generation: bool) -> tuple[float, int]:  # fmt: skip
    """(fault to the next iteration, of a later generation if asked; iterations redone)."""
    gen = max(r["gen"] for r in train if r["time"] <= at)
    later = [r for r in train if r["time"] > at and (r["gen"] > gen or not newer_generation)]
    # A record written twice has one time; a new rank 0's copy of the last step (replay)
    # is no second training.
    times = {(r["step"], r["time"]) for r in train if not r.get("replay")}
    redone = sum(n - 1 for n in Counter(step for step, _ in times).values())
    return later[0]["time"] - at, redone


def live_faults(tmp: Path, redis: RedisServer, rounds: int) -> dict[str, list[Live]]:
    stack = LiveStack(tmp, redis)
    results: dict[str, list[Live]] = {f: [] for f in LIVE_FAULTS}
    try:
        for _ in range(rounds):
            for fault in LIVE_FAULTS:
                results[fault].append(stack.one_fault(fault))
                print(fault, results[fault][-1], flush=True)
    finally:
        stack.close()
    return results


# Hosts in network namespaces: tests/test_hosts_netns.py's job, its timings read back ------

NETNS_TEST = (
    "tests/test_hosts_netns.py::"
    "test_a_job_across_two_namespaced_hosts_survives_a_killed_and_a_partitioned_host"
)
NETNS_PARTITION = 20.0
NETNS_ROWS = (
    ("killed: survivor trains alone", "namespaced host kill -9 (every process of it)",
     "the survivor trains alone in a new generation"),
    ("killed: grown back after the restart", "namespaced host back after its kill",
     "the job on both hosts again, from the host's restart"),
    ("partitioned: survivor trains alone", f"namespaced host cut off {NETNS_PARTITION:.0f} s",
     "the survivor trains alone in a new generation"),
    ("partitioned: stale learner gone after the link returned",
     "partitioned host's stale learner", "it left, from the link's return"),
    ("partitioned: grown back after the link returned", "namespaced host back after the cut",
     "the job on both hosts again, from the link's return"),
)  # fmt: skip


def netns_round(tmp: Path, round_: int) -> dict[str, Any]:
    """One run of the namespaced-hosts test; its timings ({} with "skipped" if it could
    not run here, e.g. not as root)."""
    out = tmp / f"netns-{round_}.json"
    env = dict(os.environ, EDT_RECOVERY_TIMINGS=str(out))
    for key in ("EDT_DATA_DIR", "DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE"):
        env.pop(key, None)  # the test makes its own
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                          NETNS_TEST], cwd=PROJECT, env=env, capture_output=True, text=True,
                         timeout=900)  # fmt: skip
    tail = run.stdout.strip().splitlines()[-1:] or [run.stderr.strip()[-300:]]
    print(f"netns round {round_}: {tail[0]}", flush=True)
    if "skipped" in tail[0] and run.returncode == 0:
        reason = next((line.split("SKIPPED", 1)[1].strip() for line in run.stdout.splitlines()
                       if "SKIPPED" in line), "skipped")  # fmt: skip
        return {"skipped": reason}
    if run.returncode != 0:
        raise RuntimeError(f"the namespaced-hosts test failed:\n{run.stdout[-4000:]}")
    timings: dict[str, Any] = json.loads(out.read_text())
    return timings


def spread(values: list[float]) -> str:
    return f"{min(values):.2f} / {statistics.median(values):.2f} / {max(values):.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=5, help="live rounds, one of each fault")
    parser.add_argument(
        "--netns-rounds",
        type=int,
        default=3,
        help="runs of the namespaced-hosts test (kill, then partition)",
    )
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="edt-bench-recovery-"))
    data = write_cifar10(tmp / "data", train=1024, test=128)
    # With a password, as any Redis that slots accept user code on (workers/deployment.py).
    server = RedisServer(tmp / "redis", appendonly=True, password=secrets.token_hex(16)).start()
    load_before = os.getloadavg()
    started = time.monotonic()
    try:
        kills = [learner_kill(server.url, data, tmp, i) for i in range(args.pairs)]
        print(f"pairs took {time.monotonic() - started:.0f} s", flush=True)
        load_live = os.getloadavg()
        live = live_faults(tmp, server, args.rounds) if args.rounds else {}
        print(f"pairs and live rounds took {time.monotonic() - started:.0f} s", flush=True)
    finally:
        server.stop()
    netns = [netns_round(tmp, i) for i in range(args.netns_rounds)]
    rows: list[tuple[str, str, str, str]] = []
    ratio: list[float] = []
    if kills:
        edt = [k["edt"][0] for k in kills]
        base = [k["restart"][0] for k in kills]
        ratio = [b / e for e, b in zip(edt, base, strict=True)]
        rows += [
            ("learner kill -9: EDT, survivors go on", spread(edt),
             spread([float(k["edt"][1]) for k in kills]), "next iteration"),
            ("learner kill -9: baseline, restart all from checkpoint", spread(base),
             spread([float(k["restart"][1]) for k in kills]), "next iteration"),
        ]  # fmt: skip
    for fault, runs in live.items():
        back = spread([r[2] for r in runs])
        when = {
            "learner": "first iteration of the generation formed without the lost learner",
            "slot worker": "first iteration of the generation formed without the lost learner",
            "worker host": "first iteration of the generation formed without the lost host",
            "scheduler": "next iteration (training never waits for the scheduler); a "
            f"scheduler active again after {back} s",
            "web": f"next iteration (training never waits for the web); the API answers "
            f"again after {back} s",
            "redis 10 s": "next iteration (the learners train on through the outage); new "
            f"steps in the database {back} s after Redis is back",
            "redis restart": "next iteration; new steps in the database "
            f"{back} s after Redis is back",
        }[fault]
        name = {
            "redis 10 s": f"Redis kill -9, away {REDIS_AWAY:.0f} s",
            "redis restart": "Redis clean restart",
        }.get(fault, f"{fault} kill -9")
        rows.append((f"live stack, {name}", spread([r[0] for r in runs]),
                     spread([float(r[1]) for r in runs]), when))  # fmt: skip
    runs_ok = [r for r in netns if "skipped" not in r]
    for key, label, when in NETNS_ROWS:
        if runs_ok:
            rows.append((label, spread([r[key] for r in runs_ok]), "",
                         when + f" ({len(runs_ok)} of {len(netns)} runs)"))  # fmt: skip
    skipped = sorted({r["skipped"] for r in netns if "skipped" in r})
    out = [
        "# Recovery time per fault",
        "",
        f"`python bench/bench_recovery.py --pairs {args.pairs} --rounds {args.rounds} "
        f"--netns-rounds {args.netns_rounds}`: a "
        f"2-learner job (tests/models/paced_mlp.py, 50 ms a step, batch {BATCH}; on the "
        f"live stack {LIVE_EPOCHS} epochs of it), fault at step "
        f"{FAULT_AT}, checkpoint every epoch (16 iterations). Recovery: fault to the next "
        "iteration's "
        "record, seconds, min / median / max. EDT and its baseline ran as interleaved pairs "
        f"through `workers.learner.drive`; then {args.rounds} rounds on a live stack (two "
        "worker hosts of one CPU slot each, web, scheduler and metrics consumer under "
        "`make run`'s supervisor, Redis with an append-only file), one job per fault. "
        f"Then {args.netns_rounds} runs of tests/test_hosts_netns.py's job across two "
        "worker hosts in network namespaces of their own (one host killed, then the other "
        f"cut off for {NETNS_PARTITION:.0f} s), timed by the test (it polls every 0.1 s).",
        *([f"Namespaced hosts not run: {'; '.join(skipped)}."] if skipped else []),
        "",
        "| fault | recovery (s) | iterations redone | recovered at |",
        "|---|---|---|---|",
        *[f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows],
        "",
        *(
            [f"Baseline / EDT recovery time ratio over {args.pairs} pairs: {spread(ratio)}.", ""]
            if ratio
            else []
        ),
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
