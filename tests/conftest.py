"""Shared fixtures: a private redis-server, named users, and process bookkeeping.

Alice owns things, Bob is another user who must see none of them.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from celery import Celery
from django.test import override_settings

from edtweb.redis_server import RedisServer
from edtweb.settings import channel_layers
from protocol.connection import connect
from scheduler.store import Store
from workers.control import CONTROL_QUEUE

PROJECT_DIR = Path(__file__).resolve().parent.parent


@pytest.fixture
def tmp_path(tmp_path: Path) -> Path:
    """pytest's own, readable by others: user code runs as another user (the sandbox's)
    and reads the models and datasets that tests put here."""
    tmp_path.chmod(0o755)
    return tmp_path


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A redis-server of the test run's own, on a free port; settings point at it."""
    password = "test-" + secrets.token_hex(8)  # as the launcher's: learners must not need it
    server = RedisServer(tmp_path_factory.mktemp("redis"), appendonly=False, password=password)
    server.start()
    layers = channel_layers(server.url)
    override = override_settings(
        REDIS_URL=server.url,
        CHANNEL_LAYERS=layers,
        CELERY_BROKER_URL=server.url,
        CELERY_RESULT_BACKEND=server.url,
    )
    override.enable()
    os.environ["REDIS_URL"] = server.url
    yield server
    override.disable()
    os.environ.pop("REDIS_URL", None)
    server.stop()


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server for one test alone (to kill it, or to start from an empty one)."""
    password = "test-" + secrets.token_hex(8)
    server = RedisServer(tmp_path / "private-redis", appendonly=False, password=password).start()
    yield server
    server.stop()


@pytest.fixture
def store(redis_server: RedisServer) -> Iterator[Store]:
    client = connect(redis_server.url)
    yield Store(client)
    client.close()


@pytest.fixture
def alice(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user("alice", "alice@example.com", "alice-pass-1")


@pytest.fixture
def bob(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user("bob", "bob@example.com", "bob-pass-1")


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

    def manage(self, *args: str, env: dict[str, str], log: Path) -> subprocess.Popen[str]:
        out = log.open("w")
        proc = subprocess.Popen(
            [sys.executable, "manage.py", *args],
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


@pytest.fixture
def control_worker(
    redis_server: RedisServer, processes: Processes, transactional_db: None, tmp_path: Path
) -> subprocess.Popen[str]:
    """A control worker as a worker host starts it (model checks, dataset preparations),
    sharing this test's database and data directory; answering once this returns."""
    from django.conf import settings
    from django.db import connection

    from workers.launcher import ControlSpec

    spec = ControlSpec("test-host")
    base = subprocess_env(
        Path(settings.EDT_DATA_DIR),
        REDIS_URL=redis_server.url,
        DATABASE_URL=f"sqlite:///{connection.settings_dict['NAME']}",
    )
    with (tmp_path / "control.log").open("w") as log:
        proc = subprocess.Popen(
            spec.command(), cwd=PROJECT_DIR, env=spec.environment(base, os.getpid()),
            stdout=log, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )  # fmt: skip
    processes.started.append(proc)
    celery = Celery(broker=redis_server.url, backend=redis_server.url)
    ping = celery.send_task("edt.ping", queue=CONTROL_QUEUE)
    assert ping.get(timeout=60 * load_factor())["pid"], "the control worker answers"
    return proc


def load_factor() -> float:
    """How many times longer than on a quiet machine a wait may take here: the run queue per
    core, from 1 (quiet) up to 6. A deadline is a bound on a hang, not a timing claim (timing
    is measured in bench/), so a busy host gets proportionally more time."""
    per_core = os.getloadavg()[0] / (os.cpu_count() or 1)
    return min(6.0, max(1.0, per_core))


def wait_for(
    predicate: Callable[[], Any], timeout: float, what: str | Callable[[], str], step: float = 0.1
) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` s, scaled
    by :func:`load_factor` when the machine is busy. ``what`` names the condition, or says
    what was seen instead when called at the deadline."""
    limit = timeout * load_factor()
    deadline = time.monotonic() + limit
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"timed out after {limit:.0f} s waiting for {said}")
        time.sleep(step)


def alive_pids(pids: set[int]) -> set[int]:
    alive = set()
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.add(pid)
        except psutil.NoSuchProcess:
            pass
    return alive
