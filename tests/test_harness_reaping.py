"""A test run that is killed leaves no process behind (tests/harness/processes.py): SIGTERM
to a pytest-xdist run's main process, as a CI limit or ``timeout`` stops it, tears down
each worker's stacks, a supervisor's children included; ``kill -9`` of a run stops what the
harness started through the kernel's parent-death signal. The run killed is
tests/harness/held_stack.py's, holding a Redis, a control worker, a scheduler and a
PostgreSQL server."""

from __future__ import annotations

import ast
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.harness.processes import PROJECT_DIR, alive_pids
from tests.harness.waiting import wait_for

HELD = "tests/harness/held_stack.py"


def describe(pids: set[int]) -> str:
    lines = []
    for pid in sorted(pids):
        with contextlib.suppress(psutil.Error):
            lines.append(f"{pid}: {' '.join(psutil.Process(pid).cmdline())[:120]}")
    return "; ".join(lines)


@pytest.mark.parametrize(
    ("options", "signum"),
    [(["-n", "1"], signal.SIGTERM), ([], signal.SIGKILL)],
    ids=["sigterm-to-an-xdist-run", "kill-9-of-a-run"],
)
def test_a_killed_test_run_leaves_no_process(
    tmp_path: Path, options: list[str], signum: signal.Signals
) -> None:
    held = tmp_path / "held.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "REDIS_URL"))}
    env.update(EDT_HELD_PIDS=str(held), TMPDIR=str(tmp_path))
    if signum == signal.SIGTERM:
        env["EDT_HELD_SUPERVISED"] = "1"
    log = tmp_path / "run.log"
    with log.open("w") as out:
        run = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *options, HELD],
            cwd=PROJECT_DIR, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    pids: set[int] = set()

    def ends() -> str:
        return log.read_text()[-2000:]

    def left() -> str:
        return describe(alive_pids(pids))

    try:
        wait_for(lambda: held.exists() or run.poll() is not None, 240,
                 lambda: f"the held stack; the run's log ends: {ends()}")  # fmt: skip
        assert run.poll() is None, f"the run ended by itself: {ends()}"
        stack = json.loads(held.read_text())
        pids = set(stack["pids"])
        commands = describe(pids)
        assert "redis-server" in commands and "celery" in commands and "edt_scheduler" in commands
        assert "postgres -D" in commands, commands
        server = next(psutil.Process(p) for p in pids if "postgres -D" in describe({p}))
        database = Path(server.cmdline()[server.cmdline().index("-D") + 1])

        run.send_signal(signum)
        run.wait(timeout=300)
        wait_for(
            lambda: not alive_pids(pids),
            60,
            lambda: f"the killed run's processes gone; left: {left()}",
        )
        if signum == signal.SIGTERM:  # by the fixtures' teardown
            assert "KeyboardInterrupt: signal SIGTERM" in log.read_text()
            assert "stopping every process" in Path(stack["supervisor_log"]).read_text()
        # its files: the server is gone (a kill -9 leaves its folder in /tmp)
        shutil.rmtree(database.parent, ignore_errors=True)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run.pid, signal.SIGKILL)
        for pid in alive_pids(pids):
            with contextlib.suppress(psutil.Error):
                psutil.Process(pid).kill()
        run.wait(timeout=30)


def test_every_redis_a_test_starts_dies_with_its_test_process() -> None:
    """A ``kill -9`` of a run stops the Redis servers its tests started only through the
    parent-death signal they are started with (``RedisServer(dies_with_parent=True)``):
    one started without it (test_hosts_netns' bridge Redis) outlived a killed run. Every
    ``RedisServer(...)`` in the tests asks for it."""
    missing = []
    for path in sorted((PROJECT_DIR / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", getattr(node.func, "attr", ""))
            asked = {k.arg: k.value for k in node.keywords}
            dies = asked.get("dies_with_parent")
            if name == "RedisServer" and not (isinstance(dies, ast.Constant) and dies.value):
                missing.append(f"{path.relative_to(PROJECT_DIR)}:{node.lineno}")
    assert not missing, f"a Redis that would outlive a killed run: {missing}"
