"""The slot's side of a learner: start it as a child process, watch it, clean up after it.

Runs inside the slot's Celery worker (the ``run_learner`` task). The learner gets its own
session (so it can be killed as a group), a scrubbed environment with no secrets of the
platform, resource limits, and optionally another user (``EDT_LEARNER_USER``). Its stdout and
stderr go to the job's log for this slot.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import resource
import signal
import sys
from pathlib import Path
from typing import Any

from scheduler.store import JobStore

log = logging.getLogger("edt.learner.host")

PROJECT_DIR = Path(__file__).resolve().parents[2]
PASSED_THROUGH = (
    "PATH", "LANG", "LC_ALL", "TZ", "HOME", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER",
    "OMP_NUM_THREADS", "EDT_TORCH_THREADS",
)  # fmt: skip
STALE = 75  # exit status reported for a task whose token is no longer current


def learner_env(redis_url: str, base: dict[str, str]) -> dict[str, str]:
    """Only what a learner needs: no SECRET_KEY, DATABASE_URL or other platform secrets."""
    env = {k: v for k, v in base.items() if k in PASSED_THROUGH or k.startswith("NCCL_")}
    env.update(REDIS_URL=redis_url, PYTHONPATH=str(PROJECT_DIR), PYTHONUNBUFFERED="1")
    env.setdefault("EDT_TORCH_THREADS", "1")
    return env


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(4096, hard), hard))


# Learners fork from a server that imported torch and the learner already: a joiner is
# READY in well under a second instead of paying torch's import (seconds on a busy host).
_forkserver = multiprocessing.get_context("forkserver")
PRELOAD = ["torch", "workers.learner.__main__", "workers.learner.warmup"]


def prewarm() -> None:
    """Start the fork server now (the slot worker calls this once it is ready)."""
    _forkserver.set_forkserver_preload(PRELOAD)
    probe = _forkserver.Process(target=_noop)
    probe.start()
    probe.join()


def _noop() -> None:
    return None


def _learner_child(argv: list[str], env: dict[str, str], log_path: str) -> None:
    """In the forked learner: own session, scrubbed environment, log file, limits, user."""
    os.setsid()
    os.environ.clear()
    os.environ.update(env)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    for target in (1, 2):
        os.dup2(fd, target)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    _limits()
    _become(os.environ.get("EDT_LEARNER_USER", ""))
    from workers.learner.__main__ import main

    sys.exit(main(argv))


def _become(user: str) -> None:
    if not user:
        return
    import pwd

    entry = pwd.getpwnam(user)
    os.setgid(entry.pw_gid)
    os.setuid(entry.pw_uid)


def fork_learner(spec: Path, slot: str, redis_url: str, log_path: Path) -> Any:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = learner_env(redis_url, dict(os.environ))
    env["EDT_WATCH_PID"] = str(os.getpid())  # the learner leaves if this slot worker dies
    if os.environ.get("EDT_LEARNER_USER"):
        env["EDT_LEARNER_USER"] = os.environ["EDT_LEARNER_USER"]
    argv = ["--spec", str(spec), "--slot", slot]
    _forkserver.set_forkserver_preload(PRELOAD)
    proc = _forkserver.Process(target=_learner_child, args=(argv, env, str(log_path)))
    proc.start()
    return proc


def run_learner(jobs: JobStore, slot: str, token: str, spec: Path, redis_url: str) -> int:
    """Run one learner of the job on this slot until it exits; returns its exit status."""
    if jobs.dispatch_token(slot) != token:
        log.info("job %s on %s: stale dispatch token; not starting", jobs.job_id, slot)
        return STALE
    proc = fork_learner(spec, slot, redis_url, spec.parent / "logs" / f"{slot}.log")
    while proc.exitcode is None:
        sig = jobs.kill_requested(slot)
        if sig is not None:
            jobs.clear_kill(slot)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
        proc.join(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # anything the learner started goes with it
    code = int(proc.exitcode)
    jobs.report_exit(slot, code, token)
    return code
