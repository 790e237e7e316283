from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from protocol.jobstore import JobStore
from workers.learner.host import STALE, learner_env, run_learner, signal_learner


def test_a_learner_gets_no_platform_secrets() -> None:
    base = {
        "PATH": "/usr/bin", "SECRET_KEY": "s3cret", "DATABASE_URL": "postgres://u:pw@db/edt",
        "AWS_SECRET_ACCESS_KEY": "x", "CUDA_VISIBLE_DEVICES": "GPU-1", "NCCL_DEBUG": "INFO",
    }  # fmt: skip
    env = learner_env("redis://127.0.0.1:6379/0", base)
    assert "SECRET_KEY" not in env and "DATABASE_URL" not in env
    assert "AWS_SECRET_ACCESS_KEY" not in env
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-1" and env["NCCL_DEBUG"] == "INFO"
    assert env["EDT_TORCH_THREADS"] == "1"


def test_a_task_with_a_stale_token_starts_nothing(store: object, tmp_path: Path) -> None:
    from scheduler.store import Store

    assert isinstance(store, Store)
    jobs = JobStore(store.r, "stale-job")
    jobs.set_dispatch("h.0", "current")
    spec = tmp_path / "spec.json"  # never read: nothing starts
    assert run_learner(jobs, "h.0", "old", spec, "redis://unused") == STALE
    assert not (tmp_path / "logs").exists()


def test_a_kill_that_comes_before_the_learners_own_session_still_kills_it() -> None:
    # A learner takes its own session (its process group) first thing; a kill asked for
    # as it starts finds no such group yet, and must reach the learner itself.
    slow = "import os, time; time.sleep(60); os.setsid(); time.sleep(60)"
    child = subprocess.Popen([sys.executable, "-c", slow])
    assert os.getpgid(child.pid) != child.pid  # no group of its own yet
    signal_learner(child.pid, signal.SIGKILL)
    assert child.wait(timeout=10) == -signal.SIGKILL
