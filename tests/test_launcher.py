"""`make run`'s entry point (manage.py edt_run) as a user runs it."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import urllib.request
from pathlib import Path

import psutil
import pytest

from edtweb.redis_server import RedisServer, free_port, ping_error, redis_password
from tests.browser import browser_page
from tests.harness.processes import Processes, alive_pids, subprocess_env
from tests.harness.waiting import load_factor, wait_for


def login_page_answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/accounts/login/", timeout=30) as r:
            return r.status == 200
    except OSError:
        return False


def stop_and_check_nothing_left(
    processes: Processes, proc: subprocess.Popen[str], log: Path
) -> None:
    children = processes.remember_descendants(proc)
    assert len(children) >= 4, f"expected web, scheduler, worker host and slots: {children}"
    proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
    proc.wait(timeout=30)
    wait_for(lambda: not alive_pids(children), 10, "every child process to exit")
    assert "Traceback" not in log.read_text()


@pytest.mark.browser
def test_launcher_serves_login_and_cluster_and_stops_cleanly(
    private_redis: RedisServer, processes: Processes, tmp_path: Path
) -> None:
    port = free_port()
    log = tmp_path / "run.log"
    env = subprocess_env(tmp_path, REDIS_URL=private_redis.url, EDT_HEARTBEAT_SECONDS="1")
    proc = processes.manage("edt_run", "--port", str(port), "--cpu-slots", "2", env=env, log=log)
    wait_for(lambda: "log in as admin" in log.read_text(), 180, "the launcher's banner")
    password = (tmp_path / "admin-password").read_text().strip()
    assert f"EDT is running at http://127.0.0.1:{port}/" in log.read_text()
    assert f"admin / {password}" in log.read_text()
    assert "generating the demo dataset" in log.read_text()  # a fresh install can train

    with browser_page() as page:
        page.goto(f"http://127.0.0.1:{port}/")
        assert "/accounts/login/" in page.url
        page.fill("#id_username", "admin")
        page.fill("#id_password", password)
        page.click("button[type=submit]")
        page.wait_for_url(f"http://127.0.0.1:{port}/")
        page.wait_for_selector("#live.up")  # the WebSocket is connected
        alive = page.locator("tr[data-state=alive]")
        # Both slots' workers start torch first: on a busy machine, longer than 15 s.
        alive.nth(1).wait_for(timeout=60_000 * load_factor())
        assert alive.count() == 2
        assert "2 alive" in page.inner_text("#summary")
    stop_and_check_nothing_left(processes, proc, log)


def test_launcher_starts_its_own_redis_when_none_answers(
    processes: Processes, tmp_path: Path
) -> None:
    port = free_port()
    log = tmp_path / "run.log"
    env = subprocess_env(tmp_path)
    env.pop("REDIS_URL", None)
    dead = f"redis://127.0.0.1:{free_port()}/0"
    proc = processes.manage(
        "edt_run", "--port", str(port), "--cpu-slots", "1", "--redis-probe", dead, "--no-demo",
        env=env, log=log,
    )  # fmt: skip
    wait_for(lambda: login_page_answers(port), 180, "the login page")
    first_line = log.read_text().splitlines()[0]
    assert "started by EDT, append-only under" in first_line
    logged_url = first_line.split()[3]
    assert ":***@" in logged_url, "the log shows Redis' URL without its password"
    password = redis_password(tmp_path)  # kept in the data dir, mode 0600
    assert password not in log.read_text()
    own_url = logged_url.replace("***", password)
    assert ping_error(own_url) is None
    assert ping_error(logged_url.replace(":***@", "@")) is not None, "no password, no entry"
    assert (tmp_path / "redis" / "appendonlydir").is_dir()
    assert "demo" not in log.read_text()  # --no-demo: none generated, none checked
    stop_and_check_nothing_left(processes, proc, log)
    assert ping_error(own_url, timeout=0.5) is not None  # our Redis stopped with us


def test_a_launcher_killed_while_it_starts_takes_its_own_redis_with_it(
    processes: Processes, tmp_path: Path
) -> None:
    # kill -9 while Django migrates: no handler runs, yet neither EDT's own Redis nor
    # anything else the launcher started outlives it.
    log = tmp_path / "run.log"
    env = subprocess_env(tmp_path)
    env.pop("REDIS_URL", None)
    dead = f"redis://127.0.0.1:{free_port()}/0"
    proc = processes.manage("edt_run", "--port", str(free_port()), "--cpu-slots", "1",
                            "--redis-probe", dead, env=env, log=log)  # fmt: skip
    wait_for(lambda: "started by EDT" in log.read_text(), 120, "EDT's own Redis")
    url = log.read_text().splitlines()[0].split()[3].replace("***", redis_password(tmp_path))
    assert ping_error(url) is None
    children = processes.remember_descendants(proc)
    proc.kill()
    proc.wait(timeout=30)
    wait_for(lambda: ping_error(url, timeout=0.5) is not None, 30, "its Redis to stop")
    wait_for(lambda: not alive_pids(children), 30, "every child process to exit")


def test_a_dead_redis_url_gets_one_clear_line(processes: Processes, tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    dead = f"redis://127.0.0.1:{free_port()}/0"
    proc = processes.manage("edt_run", env=subprocess_env(tmp_path, REDIS_URL=dead), log=log)
    assert proc.wait(timeout=30) == 1
    lines = log.read_text().strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"EDT: REDIS_URL={dead} does not answer (")
    assert "unset REDIS_URL" in lines[0]


def child_pids(proc: subprocess.Popen[str], command: str) -> set[int]:
    """Live descendants of ``proc`` whose command line mentions ``command``."""
    found = set()
    for child in psutil.Process(proc.pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if command in " ".join(child.cmdline()) and child.status() != psutil.STATUS_ZOMBIE:
                found.add(child.pid)
    return found


def test_a_child_that_dies_is_restarted_and_the_others_go_on(
    private_redis: RedisServer, processes: Processes, tmp_path: Path
) -> None:
    port = free_port()
    log = tmp_path / "run.log"
    env = subprocess_env(tmp_path, REDIS_URL=private_redis.url)
    proc = processes.manage("edt_run", "--port", str(port), "--cpu-slots", "1", "--no-demo",
                            env=env, log=log)  # fmt: skip
    wait_for(lambda: login_page_answers(port), 180, "the login page")
    [scheduler] = wait_for(lambda: child_pids(proc, "edt_scheduler"), 30, "the scheduler")
    [metrics] = wait_for(lambda: child_pids(proc, "edt_metrics"), 30, "the metrics consumer")
    web = child_pids(proc, "daphne")
    assert web

    os.kill(scheduler, signal.SIGKILL)
    wait_for(lambda: "scheduler exited (killed by SIGKILL); restarting in" in log.read_text(),
             30, "the supervisor to log the crash")  # fmt: skip
    wait_for(lambda: child_pids(proc, "edt_scheduler") - {scheduler}, 30, "a new scheduler")
    assert child_pids(proc, "daphne") == web, "the web went on untouched"
    assert child_pids(proc, "edt_metrics") == {metrics}, "the metrics consumer too"
    assert login_page_answers(port)
    assert proc.poll() is None
    stop_and_check_nothing_left(processes, proc, log)


def test_listening_ports_come_from_edt_port_range_when_it_is_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A port in the range that something holds, or that the caller says to avoid, is
    skipped; a full range says so; a malformed one is refused by name."""
    for _ in range(20):  # three consecutive ports that nothing holds now
        monkeypatch.delenv("EDT_PORT_RANGE", raising=False)
        low = free_port()
        if low + 2 > 65535:
            continue
        monkeypatch.setenv("EDT_PORT_RANGE", f"{low}-{low + 2}")
        with contextlib.ExitStack() as held:
            try:
                for port in (low, low + 1):
                    s = held.enter_context(socket.socket())
                    s.bind(("127.0.0.1", port))
            except OSError:
                continue
            assert free_port() == low + 2
            # A port handed out but not bound yet (the web's, as the launcher picks its
            # Redis's) is never handed out again.
            with pytest.raises(OSError, match=f"EDT_PORT_RANGE={low}-{low + 2}"):
                free_port(avoid={low + 2})
            s = held.enter_context(socket.socket())
            s.bind(("127.0.0.1", low + 2))
            with pytest.raises(OSError, match=f"EDT_PORT_RANGE={low}-{low + 2}"):
                free_port()
            break
    else:
        pytest.fail("no three free consecutive ports found to test with")
    monkeypatch.setenv("EDT_PORT_RANGE", "20000")
    with pytest.raises(ValueError, match="LOW-HIGH"):
        free_port()
