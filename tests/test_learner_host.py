from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from protocol.jobstore import JobStore
from workers.learner import host
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


def test_a_revoked_dispatch_starts_nothing_and_a_later_one_stays(
    store: object, tmp_path: Path
) -> None:
    from scheduler.store import Store

    assert isinstance(store, Store)
    jobs = JobStore(store.r, "revoked-job")
    jobs.set_dispatch("h.0", "first")
    jobs.revoke_dispatch("h.0", "first")  # judged gone: its task, still queued, comes late
    spec = tmp_path / "spec.json"  # never read: nothing starts
    assert run_learner(jobs, "h.0", "first", spec, "redis://unused") == STALE
    jobs.set_dispatch("h.0", "second")
    jobs.revoke_dispatch("h.0", "first")  # an older token's revoke leaves the newer
    assert jobs.dispatch_token("h.0") == "second"
    assert not (tmp_path / "logs").exists()


def test_a_kill_that_comes_before_the_learners_own_session_still_kills_it() -> None:
    # A learner takes its own session (its process group) first thing; a kill asked for
    # as it starts finds no such group yet, and must reach the learner itself.
    slow = "import os, time; time.sleep(60); os.setsid(); time.sleep(60)"
    child = subprocess.Popen([sys.executable, "-c", slow])
    assert os.getpgid(child.pid) != child.pid  # no group of its own yet
    signal_learner(child.pid, signal.SIGKILL)
    assert child.wait(timeout=10) == -signal.SIGKILL


# A learner's log is kept under its cap -------------------------------------------------------


def test_a_log_past_its_cap_keeps_its_last_part_and_starts_again(tmp_path: Path) -> None:
    logs = tmp_path / "job" / "logs"
    logs.mkdir(parents=True)
    log_path = logs / "h.0.log"
    log_path.write_bytes(b"old\n" * 1000 + b"the end\n")
    writer = log_path.open("ab")  # the learner's stdout: appending all along
    assert not host.keep_log_under(log_path, 1 << 20)  # under its cap: left alone
    assert host.keep_log_under(log_path, 100)
    assert (logs / "h.0.log.1").read_bytes() == (b"old\n" * 1000 + b"the end\n")[-100:]
    writer.write(b"after the cut\n")
    writer.flush()
    text = log_path.read_text()
    assert text.startswith("[edt] this log passed 100 bytes") and text.endswith("after the cut\n")
    assert log_path.stat().st_size < 200  # the learner's appends land after the cut
    writer.close()


def test_a_log_the_learner_made_a_link_is_never_followed(tmp_path: Path) -> None:
    """The job directory is the learner's: a log turned into a link to a platform file
    must not get that file copied into the job (a leak) nor emptied."""
    secret = tmp_path / "platform-secret"
    secret.write_text("x" * 500)
    logs = tmp_path / "job" / "logs"
    logs.mkdir(parents=True)
    (logs / "h.0.log").symlink_to(secret)
    with pytest.raises(OSError):
        host.keep_log_under(logs / "h.0.log", 100)
    host.cut_log(logs / "h.0.log", 100)  # the slot task's call: said, not raised
    assert secret.read_text() == "x" * 500 and not (logs / "h.0.log.1").exists()


def test_a_learner_that_cannot_reach_redis_at_its_start_says_so_and_exits(tmp_path: Path) -> None:
    """Its slot reached Redis a moment before: a learner that cannot (a socket its sandbox
    does not show, a firewall) is misconfigured, not riding out an outage. It exits with
    the error its slot reports (``last_error``), after EDT_LEARNER_FIRST_CONTACT seconds,
    instead of retrying for LEARNER_PATIENCE (10 minutes) each start."""
    from protocol.exits import Exit
    from workers.learner.spec import JobSpec

    spec = tmp_path / "spec.json"
    JobSpec(job_id="7", model="m.py", data=str(tmp_path), workdir=str(tmp_path)).save(spec)
    missing = tmp_path / "no" / "redis.sock"
    env = dict(os.environ, REDIS_URL=f"unix://:pw@{missing}?db=0", EDT_LEARNER_FIRST_CONTACT="1")
    log = tmp_path / "h.0.log"
    with log.open("wb") as out:
        argv = [sys.executable, "-m", "workers.learner", "--spec", str(spec), "--slot", "h.0"]
        done = subprocess.run(argv, env=env, stdout=out, stderr=out, timeout=120)
    assert done.returncode == Exit.CRASHED
    reported = host.last_error(log, done.returncode)
    assert reported.startswith("ConnectionError: the learner cannot reach Redis"), reported
    assert str(missing) in reported and ":pw@" not in log.read_text()
