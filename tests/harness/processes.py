"""Processes the tests start: the project's path, their environment, and bookkeeping so that
none outlives its test, nor a test run that was killed.

A run stopped by SIGTERM (``timeout``, a CI limit, ``kill``) ends as Ctrl-C ends it: the
signal is raised as ``KeyboardInterrupt`` and every fixture's teardown stops what its tests
started (:func:`interrupt_on_sigterm`). A run killed outright still leaves nothing: each
process the harness starts gets the kernel's parent-death signal (SIGTERM, on which each
stops its own children), as do the harness's Redis servers.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import FrameType

import psutil
import pytest

from workers import sandbox

PROJECT_DIR = Path(__file__).resolve().parent.parent.parent


def subprocess_env(data_dir: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    # Static files are collected once for all the launchers the tests start (once per
    # pytest-xdist worker: two collectstatic runs must not write the same files).
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    static = str(PROJECT_DIR / "var" / f"test-staticfiles-{worker}")
    env.update(EDT_DATA_DIR=str(data_dir), EDT_STATIC_ROOT=static, PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


class Processes:
    """Starts processes in their own sessions and makes sure none outlives the test."""

    def __init__(self) -> None:
        self.started: list[subprocess.Popen[str]] = []
        self.seen: set[int] = set()

    def manage(
        self, *args: str, env: dict[str, str], log: Path, prefix: Sequence[str] = ()
    ) -> subprocess.Popen[str]:
        """``manage.py args`` in a session of its own, its output in ``log``; ``prefix``
        runs it through another command (as another user: tests/harness/accounts.py)."""
        return self.start([*prefix, sys.executable, "manage.py", *args], env=env, log=log)

    def start(
        self, command: Sequence[str], env: dict[str, str], log: Path
    ) -> subprocess.Popen[str]:
        """``command`` in a session of its own (a Ctrl-C meant for pytest reaches it through
        the fixtures' teardown alone), its output in ``log``, SIGTERM from the kernel when this
        thread dies; killed at the test's end if still there."""
        with log.open("w") as out:
            proc = subprocess.Popen(
                command, cwd=PROJECT_DIR, env=env, stdout=out, stderr=subprocess.STDOUT,
                text=True, start_new_session=True, preexec_fn=sandbox.dies_with_parent(),
            )  # fmt: skip
        self.started.append(proc)
        return proc

    def remember_descendants(self, proc: subprocess.Popen[str]) -> set[int]:
        """Every live descendant of ``proc`` now (to check later that all are gone)."""
        try:
            pids = {p.pid for p in psutil.Process(proc.pid).children(recursive=True)}
        except psutil.NoSuchProcess:
            pids = set()
        self.seen |= pids
        return pids

    def cleanup(self) -> None:
        for proc in self.started:
            if proc.poll() is None:
                self.remember_descendants(proc)
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        for pid in self.seen:
            with contextlib.suppress(psutil.Error):
                psutil.Process(pid).kill()


@pytest.fixture
def processes() -> Iterator[Processes]:
    procs = Processes()
    yield procs
    procs.cleanup()


def alive_pids(pids: set[int]) -> set[int]:
    alive = set()
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.add(pid)
    return alive


def using(folder: Path) -> list[psutil.Process]:
    """The processes that name ``folder`` on their command line or hold a file in it open:
    a job's learners (one forked from a fork server has the server's command line, and its
    log in the job's directory open)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if str(folder) in " ".join(proc.cmdline()) or any(
                Path(f.path).is_relative_to(folder) for f in proc.open_files()
            ):
                found.append(proc)
        except psutil.Error:
            continue
    return found


REAP_WAIT = 120  # seconds an interrupted pytest-xdist run waits for its workers' teardown


def interrupt_on_sigterm(config: pytest.Config) -> None:
    """SIGTERM raised as ``KeyboardInterrupt`` in this process, once (a repeat, as
    ``timeout`` sends its whole process group and pytest-xdist's main process passes it on,
    is ignored while the teardown runs). pytest-xdist's main process first passes the signal
    to its workers and waits, up to :data:`REAP_WAIT` seconds, until the processes their
    tests started are gone: it would otherwise end the workers before their teardown."""
    if threading.current_thread() is not threading.main_thread():
        return
    main = not hasattr(config, "workerinput") and bool(getattr(config.option, "numprocesses", 0))
    interrupted = threading.Event()

    def interrupt(signum: int, frame: FrameType | None) -> None:
        if interrupted.is_set():
            return
        interrupted.set()
        if main:
            reap_workers(signum)
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    signal.signal(signal.SIGTERM, interrupt)


def reap_workers(signum: int) -> None:
    """Pass ``signum`` to this process's children (pytest-xdist's workers) and wait until none
    has a child of its own left."""
    workers = psutil.Process().children()
    for worker in workers:
        with contextlib.suppress(psutil.Error):
            worker.send_signal(signum)
    deadline = time.monotonic() + REAP_WAIT
    while time.monotonic() < deadline and any(_holds_processes(w) for w in workers):
        time.sleep(0.2)


def _holds_processes(worker: psutil.Process) -> bool:
    try:
        below = worker.children(recursive=True) if worker.is_running() else []
    except psutil.Error:
        return False
    return bool(alive_pids({p.pid for p in below}))
