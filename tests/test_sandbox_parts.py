"""The sandbox's parts without a live EDT: settings, job files, the process tree, the
password of EDT's own Redis. The hostile models themselves: tests/test_sandbox.py."""

from __future__ import annotations

import dataclasses
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from edtweb.redis_server import RedisServer, redacted, redis_password
from tests.harness.processes import PROJECT_DIR, alive_pids
from tests.harness.waiting import wait_for
from workers import sandbox


@pytest.mark.parametrize(
    ("text", "size"),
    [("4g", 4 << 30), ("512m", 512 << 20), ("1.5g", 3 << 29), ("1024", 1024), ("off", 0), ("", 0)],
)
def test_sizes_read_as_people_write_them(text: str, size: int) -> None:
    assert sandbox.parse_size(text) == size


def test_a_size_that_is_not_one_is_refused() -> None:
    with pytest.raises(sandbox.SandboxError, match="not a size"):
        sandbox.parse_size("lots")


def test_the_memory_limit_is_per_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDT_LEARNER_MEMORY", "2g,3g")
    assert sandbox.memory_limit(0) == 2 << 30 and sandbox.memory_limit(1) == 3 << 30
    assert sandbox.memory_limit(5) == 2 << 30  # a slot the list does not name: the first
    monkeypatch.delenv("EDT_LEARNER_MEMORY")
    assert sandbox.memory_limit(0, "GPU-1") == 0  # CUDA reserves far more than it uses
    assert (
        0
        < sandbox.memory_limit(0, "cpu")
        < os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    )


@pytest.mark.parametrize("slots", [1, 2, 4, 8])
def test_the_default_memory_of_a_hosts_slots_adds_up_to_the_host_less_a_reserve(
    monkeypatch: pytest.MonkeyPatch, slots: int
) -> None:
    """Every CPU slot's learner at its limit together fit in the machine, with room left
    for the platform's own processes; before, each could ask for half the host."""
    monkeypatch.delenv("EDT_LEARNER_MEMORY", raising=False)
    monkeypatch.setenv("EDT_HOST_SLOTS", str(slots))
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    limits = [sandbox.memory_limit(i, "cpu") for i in range(slots)]
    assert len(set(limits)) == 1 and limits[0] > 0
    assert sum(limits) <= physical - max(1 << 30, physical // 8)
    assert sum(limits) > physical - max(1 << 30, physical // 8) - slots


def test_a_policy_travels_whole() -> None:
    policy = sandbox.Policy(read=("/a",), write=("/b",), hide=("/c",), uid=5, gid=6,
                            limits=sandbox.Limits(memory=1 << 30, cpu_seconds=9))  # fmt: skip
    assert sandbox.Policy.loads(policy.dumps()) == policy


def test_job_files_open_without_following_links(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "h.0.log").write_text("mine")
    with os.fdopen(sandbox.open_beneath(tmp_path, "logs/h.0.log")) as f:
        assert f.read() == "mine"
    secret = tmp_path.parent / f"{tmp_path.name}-secret"
    secret.write_text("root's")
    (tmp_path / "model.pt").symlink_to(secret)
    (tmp_path / "linked").symlink_to(tmp_path / "logs")
    os.mkfifo(tmp_path / "pipe")
    for relative in ("model.pt", "linked/h.0.log", "pipe"):
        with pytest.raises(OSError):
            sandbox.open_beneath(tmp_path, relative)
    with pytest.raises(OSError):
        sandbox.open_beneath(tmp_path, "model.pt", append=True)
    assert secret.read_text() == "root's"


def test_a_new_log_is_created_for_appending(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    fd = sandbox.open_beneath(tmp_path, "logs/h.1.log", append=True)
    os.write(fd, b"line\n")
    os.close(fd)
    assert (tmp_path / "logs" / "h.1.log").read_text() == "line\n"


LEAVES_DAEMONS = """
import os, subprocess, sys
subprocess.Popen(["sleep", "600"], start_new_session=True)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp("sleep", ["sleep", "600"])
    os._exit(0)
os.wait()
print("left", flush=True)
"""


def test_the_sandbox_removes_every_process_the_code_started(tmp_path: Path) -> None:
    policy = sandbox.policy(read=[tmp_path], write=[tmp_path], memory=0)
    env = dict(os.environ)
    cmd = sandbox.command(policy, [sys.executable, "-c", LEAVES_DAEMONS], env)
    proc = subprocess.Popen(cmd, env=env, cwd=PROJECT_DIR, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "left\n"
    wrapper = psutil.Process(proc.pid)
    seen = {p.pid for p in wrapper.children(recursive=True)}
    assert proc.wait(timeout=30) == 0
    assert len(seen) >= 1
    wait_for(lambda: not alive_pids(seen), 10, "every process the code started to be gone")


STAYS = """
import subprocess, time
subprocess.Popen(["sleep", "600"], start_new_session=True)
print("started", flush=True)
time.sleep(600)
"""


def test_a_sandbox_too_busy_to_end_its_tree_has_it_ended_from_outside(tmp_path: Path) -> None:
    """``stop`` on a sandbox that cannot run its SIGTERM handler (here: stopped; in life: a
    host so loaded that the handler does not run in time) still kills every process under it,
    the one that left for a session of its own included."""
    policy = sandbox.policy(read=[tmp_path], write=[tmp_path], memory=0)
    env = dict(os.environ)
    cmd = sandbox.command(policy, [sys.executable, "-c", STAYS], env)
    proc = subprocess.Popen(cmd, env=env, cwd=PROJECT_DIR, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "started\n"
    seen = set(sandbox.descendants(proc.pid))
    assert len(seen) == 2  # the code, and the sleep in its own session
    os.kill(proc.pid, signal.SIGSTOP)
    sandbox.stop(proc, timeout=0.5)
    wait_for(lambda: not alive_pids(seen), 10, "every process under the sandbox to be gone")


@pytest.mark.skipif(os.geteuid() != 0, reason="the user switch needs root")
def test_user_code_runs_as_another_user_when_edt_is_root(tmp_path: Path) -> None:
    policy = sandbox.policy(read=[], write=[tmp_path], memory=0)
    assert policy.uid not in (None, 0) and policy.namespaces
    env = dict(os.environ)
    code = "import os; print(os.getuid(), os.path.exists(os.environ['EDT_DATA_DIR']))"
    cmd = sandbox.command(policy, [sys.executable, "-c", code], env)
    done = subprocess.run(cmd, env=env, cwd=PROJECT_DIR, capture_output=True, text=True)
    uid, data_dir_seen = done.stdout.split()
    assert int(uid) == policy.uid
    assert data_dir_seen == "True"  # the data directory is there, but empty:
    listing = [sys.executable, "-c", "import os; print(os.listdir(os.environ['EDT_DATA_DIR']))"]
    cmd = sandbox.command(policy, listing, env)
    done = subprocess.run(cmd, env=env, cwd=PROJECT_DIR, capture_output=True, text=True)
    assert done.stdout.strip() == "[]", done.stderr


MAKE_ACCOUNT = """
import sys, time
from workers import sandbox
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))  # every process asks at once
print(*sandbox.account(sys.argv[1]))
"""


def test_slot_workers_that_make_the_learner_account_at_once_all_get_the_same_one() -> None:
    """The first learners of a fresh host's slot workers start together and each makes the
    system user if it is not there: two ``useradd`` at once lost one's entry (a CI run's
    first job failed: its files belonged to a uid that was gone)."""
    name = f"edt-race-{os.getpid() % 100000}"
    start = time.time() + 3.0
    procs = [subprocess.Popen([sys.executable, "-c", MAKE_ACCOUNT, name, str(start)],
                              cwd=PROJECT_DIR, stdout=subprocess.PIPE, text=True)
             for _ in range(6)]  # fmt: skip
    try:
        got = {p.communicate(timeout=120)[0].strip() for p in procs}
        entries = [line for line in Path("/etc/passwd").read_text().splitlines()
                   if line.startswith(f"{name}:")]  # fmt: skip
        assert len(entries) == 1, entries
        uid = int(entries[0].split(":")[2])
        assert got == {f"{uid} {int(entries[0].split(':')[3])}"}, got
    finally:
        subprocess.run(["userdel", name], capture_output=True, check=False)


THREADS_UNTIL_REFUSED = """
import threading, time
from workers.sandbox import out_of_processes
try:
    for _ in range(20000):
        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
except Exception as exc:
    print(out_of_processes(exc) or repr(exc), flush=True)
"""


def test_code_at_the_hosts_process_limit_is_told_so(tmp_path: Path) -> None:
    """The limit counts every task of the code's user on the host. As root the code runs as
    a user of this test's own, so that filling it up leaves the learners of other tests
    alone; otherwise as this user, whose other processes have limits of their own."""
    policy = sandbox.policy(read=[], write=[tmp_path], memory=0)
    if os.geteuid() == 0:  # root has no limit: the code must switch user
        uid, gid = sandbox.account("edt-learner-limit-test")
        policy = dataclasses.replace(policy, uid=uid, gid=gid)
    else:
        uid = os.getuid()
    running = sum(p.info["num_threads"] for p in psutil.process_iter(["uids", "num_threads"])
                  if p.info["uids"] is not None and p.info["uids"].real == uid)  # fmt: skip
    limit = running + 64
    policy = dataclasses.replace(policy, limits=dataclasses.replace(policy.limits,
                                                                    processes=limit))  # fmt: skip
    env = dict(os.environ)
    cmd = sandbox.command(policy, [sys.executable, "-c", THREADS_UNTIL_REFUSED], env)
    done = subprocess.run(cmd, env=env, cwd=PROJECT_DIR, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.stdout.strip() == (
        f"{sandbox.OUT_OF_PROCESSES}: the processes and threads of user code on this host "
        f"(every job's learners together) are probably at their limit of {limit} "
        "(EDT_LEARNER_PROCESSES on the worker host), or it had no memory left for another"
    ), done.stdout + done.stderr


def test_edts_own_redis_password_is_kept_private(tmp_path: Path) -> None:
    password = redis_password(tmp_path)
    assert redis_password(tmp_path) == password and len(password) >= 32
    assert stat.S_IMODE((tmp_path / "redis-password").stat().st_mode) == 0o600
    server = RedisServer(
        tmp_path / "redis", appendonly=False, password=password, dies_with_parent=True
    ).start()
    try:
        assert server.proc is not None
        argv = Path(f"/proc/{server.proc.pid}/cmdline").read_bytes()
        assert password.encode() not in argv
        assert stat.S_IMODE((tmp_path / "redis" / "redis.conf").stat().st_mode) == 0o600
    finally:
        server.stop()


def test_a_redis_url_is_logged_without_its_password() -> None:
    assert redacted("redis://:s3cret@127.0.0.1:6379/0") == "redis://:***@127.0.0.1:6379/0"
    assert redacted("redis://edt-job-4:pw@h:1/0") == "redis://edt-job-4:***@h:1/0"
    assert redacted("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"
