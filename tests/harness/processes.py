"""Processes the tests start: the project's path, their environment, and bookkeeping so that
none outlives its test."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import psutil
import pytest

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
        out = log.open("w")
        proc = subprocess.Popen(
            [*prefix, sys.executable, "manage.py", *args],
            cwd=PROJECT_DIR,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
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
