"""A Redis that lets anyone in without a password is refused for user code: the check, a
slot's state and its log, the learner task's refusal, the development opt-out, `make run`'s
choice of Redis, and `manage.py edt_check`. Each test starts its own passwordless Redis;
the suite's own has a password."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import override_settings

from edtweb.launcher import resolve_redis
from edtweb.redis_server import RedisServer, free_port, ping_error
from protocol.connection import connect, lets_anyone_in
from protocol.exits import RunResult
from protocol.jobstore import JobStore
from protocol.keys import ALIVE
from protocol.slots import SlotInfo, SlotRegistry
from tests.harness.processes import Processes, alive_pids, subprocess_env
from tests.harness.waiting import wait_for
from workers.deployment import OPEN_REDIS_REFUSAL, user_finding
from workers.learner.host import REFUSED, JobPaths, run_learner
from workers.slot import Heartbeat
from workers.telemetry import sampler_for


@pytest.fixture
def open_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server whose ``default`` user needs no password, as Debian's package runs it."""
    server = RedisServer(tmp_path / "open-redis", appendonly=False, dies_with_parent=True).start()
    yield server
    server.stop()


def test_a_redis_without_a_password_is_told_from_one_with_a_password(
    open_redis: RedisServer, private_redis: RedisServer
) -> None:
    assert lets_anyone_in(open_redis.url) is True
    # Credentials in the URL do not count: what matters is a client that gives none.
    assert lets_anyone_in(f"redis://:guess@127.0.0.1:{open_redis.port}/3") is True
    assert lets_anyone_in(private_redis.url) is False
    assert lets_anyone_in(private_redis.url.replace("/0", "/3")) is False  # NOAUTH on SELECT
    assert lets_anyone_in(f"redis://127.0.0.1:{free_port()}/0", timeout=0.5) is None


def test_a_learner_task_starts_no_learner_where_redis_lets_anyone_in(
    open_redis: RedisServer, tmp_path: Path
) -> None:
    jobs = JobStore(connect(open_redis.url), "41")
    jobs.set_dispatch("h.0", "t1")
    paths = JobPaths(tmp_path / "data", tmp_path / "model.py", tmp_path / "job")
    spec = tmp_path / "job" / "spec.json"  # never read: nothing starts
    assert run_learner(jobs, "h.0", "t1", spec, open_redis.url, "secret", paths) == REFUSED
    # The scheduler reads the exit and its reason, which fails the job after a few.
    assert jobs.exits() == {"h.0": RunResult("t1", REFUSED)}
    assert jobs.crashes() == {"h.0": OPEN_REDIS_REFUSAL}
    assert (tmp_path / "job" / "logs" / "h.0.log").read_text() == f"EDT: {OPEN_REDIS_REFUSAL}\n"
    # No ACL user was made for a learner that never started.
    assert not [rule for rule in jobs.r.acl_list() if "edt-job-41" in rule]


def test_a_slot_says_it_refuses_while_redis_lets_anyone_in(
    private_redis: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The heartbeat thread's check, run by hand: the slot's state follows Redis' password."""
    registry = SlotRegistry(connect(private_redis.url))
    beat = Heartbeat(registry, ("h", 0, "cpu"), sampler_for("cpu"), 0, private_redis.url)

    def refusing() -> str:
        beat.check_redis()
        beat.beat(ttl=6)
        (slot,) = registry.list_slots()
        assert slot.state == ALIVE  # alive all along: learners sent there report the reason
        return slot.refusing

    assert refusing() == ""
    registry.r.config_set("requirepass", "")  # the admin takes the password off
    with caplog.at_level(logging.ERROR, logger="edt.slot"):
        assert refusing() == OPEN_REDIS_REFUSAL
    assert f"slot h.0: {OPEN_REDIS_REFUSAL}" in caplog.text
    registry.r.config_set("requirepass", private_redis.password or "")  # and puts it back
    assert refusing() == ""


def stop_host(processes: Processes, proc: subprocess.Popen[str]) -> None:
    children = processes.remember_descendants(proc)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    wait_for(lambda: not alive_pids(children), 10, "every worker of the host to exit")


def test_a_worker_host_refuses_user_code_on_an_open_redis_unless_told_it_is_for_development(
    open_redis: RedisServer, processes: Processes, tmp_path: Path
) -> None:
    registry = SlotRegistry(connect(open_redis.url))

    def slot_of(host: str) -> Callable[[], SlotInfo | None]:
        return lambda: next((s for s in registry.alive_slots() if s.host == host), None)

    for host, extra in (("refuses", {}), ("allowed", {"EDT_ALLOW_OPEN_REDIS": "1"})):
        log = tmp_path / f"{host}.log"
        env = subprocess_env(tmp_path, REDIS_URL=open_redis.url, **extra)
        proc = processes.manage("edt_worker", "--cpu-slots", "1", "--host-name", host,
                                env=env, log=log)  # fmt: skip
        slot: SlotInfo = wait_for(slot_of(host), 60, f"{host}'s slot to register")
        stop_host(processes, proc)  # one worker host at a time
        output = log.read_text()
        assert "Traceback" not in output
        if extra:
            assert slot.refusing == ""
            assert "EDT_ALLOW_OPEN_REDIS=1 runs user code anyway (development only" in output
            assert "refusing user code" not in output
        else:
            assert slot.refusing == OPEN_REDIS_REFUSAL
            assert "lets anyone in without a password, so worker hosts refuse user code" in output
            assert f"slot {host}.0: {OPEN_REDIS_REFUSAL}" in output


def test_the_cluster_page_shows_a_slot_that_refuses_user_code(
    store: object, client: object, alice: object
) -> None:
    from django.test import Client

    from scheduler.store import Store

    assert isinstance(store, Store) and isinstance(client, Client)
    registry = SlotRegistry(store.r)
    registry.register_slot("page-host", 0, "cpu", 1, refusing=OPEN_REDIS_REFUSAL)
    registry.heartbeat("page-host.0", {}, ttl=30)
    try:
        client.force_login(alice)  # type: ignore[arg-type]
        html = client.get("/").content.decode()
    finally:
        registry.forget_slot("page-host.0")
    assert '<span class="badge refusing">refusing user code</span>' in html
    assert "Refusing user code: Redis lets anyone in without a password" in html


def test_make_run_starts_its_own_redis_rather_than_one_that_lets_anyone_in(
    open_redis: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.delenv("REDIS_URL", raising=False)
    url, own = resolve_redis(tmp_path / "data", open_redis.url)  # as --redis-probe gives it
    try:
        assert own is not None and url == own.url != open_redis.url
        assert ping_error(url) is None and lets_anyone_in(url) is False
    finally:
        if own is not None:
            own.stop()
    said = capsys.readouterr().out
    assert f"the Redis at {open_redis.url} lets anyone in without a password: not using it" in said


def test_make_run_uses_a_redis_that_asks_for_a_password(
    private_redis: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("REDIS_URL", raising=False)
    assert resolve_redis(tmp_path / "data", private_redis.url) == (private_redis.url, None)


PRODUCTION = {
    "DEBUG": False,
    "EDT_HTTPS": True,
    "ALLOWED_HOSTS": ["edt.example.com"],
    "SECRET_KEY": "k" + "0123456789abcdefghij" * 3,
}
POSTGRES = {"default": {"ENGINE": "django.db.backends.postgresql", "NAME": "edt"}}


def edt_check() -> tuple[int, str]:
    from io import StringIO

    out = StringIO()
    try:
        call_command("edt_check", stdout=out)
    except SystemExit as exc:
        return int(exc.code or 0), out.getvalue()
    return 0, out.getvalue()


@pytest.mark.parametrize(
    ("euid", "learner_user", "ok", "says"),
    [
        (0, "", True, "EDT runs as root: user code runs as edt-learner (EDT_LEARNER_USER)"),
        (0, "nobody", True, "EDT runs as root: user code runs as nobody (EDT_LEARNER_USER)"),
        (0, "root", False, "EDT_LEARNER_USER=root: user code runs as root (development only)"),
        (0, "no-such-user-here", False, "EDT_LEARNER_USER=no-such-user-here: no such user"),
        (65534, "", False, "EDT runs as nobody, not root: user code runs as nobody too"),
        (65534, "x", False, "run edt_worker as root so that user code runs as x"),
    ],
)
def test_who_user_code_runs_as_is_said_as_the_readme_says_it(
    euid: int, learner_user: str, ok: bool, says: str
) -> None:
    finding = user_finding(euid, {"EDT_LEARNER_USER": learner_user})
    assert (finding.ok, says in finding.text) == (ok, True), finding.text


@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")  # read, never connected
def test_edt_check_passes_a_production_deployment(
    private_redis: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("EDT_LEARNER_USER", raising=False)
    with override_settings(**PRODUCTION, REDIS_URL=private_redis.url, DATABASES=POSTGRES):
        code, out = edt_check()
    lines = out.splitlines()
    user = "OK" if os.geteuid() == 0 else "WARNING"  # the suite may run as root or not
    assert [line.split()[0] for line in lines[:9]] == ["OK", user] + ["OK"] * 2 + ["CHECK"] + [
        "OK"
    ] * 3 + ["CHECK"], out
    assert code == (0 if user == "OK" else 1)
    assert "Redis at 127.0.0.1" in lines[0] and "asks for a password" in lines[0]
    assert "user code runs as" in lines[1]
    assert "SECRET_KEY from the settings" in lines[3]
    assert "client_max_body_size" in lines[4]
    assert "set EDT_METRICS_TOKEN, or let only your monitoring reach it" in lines[8]
    if code == 0:
        assert lines[-1] == "Nothing missing for production that EDT can see."
    with override_settings(**PRODUCTION, REDIS_URL=private_redis.url, DATABASES=POSTGRES,
                           EDT_METRICS_TOKEN="t0ken"):  # fmt: skip
        lines = edt_check()[1].splitlines()
    assert lines[8].split()[:3] == ["OK", "metrics", "token"], lines[8]


def test_edt_check_lists_what_production_lacks_and_fails(
    open_redis: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EDT_LEARNER_USER", "root")
    lacking = {**PRODUCTION, "DEBUG": True, "EDT_HTTPS": False, "SECRET_KEY": "short"}
    with override_settings(**lacking, REDIS_URL=open_redis.url):  # the suite's SQLite
        code, out = edt_check()
    assert code == 1
    warned = {line.split("  ")[1].strip(): line for line in out.splitlines()
              if line.startswith("WARNING")}  # fmt: skip
    assert set(warned) == {
        "Redis password",
        "learner user",
        "DEBUG",
        "SECRET_KEY",
        "HTTPS",
        "database",
    }
    assert "so worker hosts refuse user code; set a password" in warned["Redis password"]
    assert "set DEBUG=0" in warned["DEBUG"] and "EDT_HTTPS=1" in warned["HTTPS"]
    assert out.endswith("Missing for production: Redis password, learner user, DEBUG, "
                        "SECRET_KEY, HTTPS, database.\n")  # fmt: skip


@pytest.mark.parametrize("listens", ["socket", "tls"])
def test_an_open_redis_is_seen_on_a_socket_and_over_tls_too(tmp_path: Path, listens: str) -> None:
    """The probe reads the URL as every client does: a socket's or TLS' connection class
    (it raised TypeError on both before, so a slot refused every learner)."""
    from tests.harness.tls import server_certificate

    where: dict[str, object] = {"unixsocket": tmp_path / "redis.sock"} if listens == "socket" else {
        "tls": server_certificate(tmp_path / "tls")}  # fmt: skip
    for password, open_to_all in ((None, True), ("pw-" + os.urandom(4).hex(), False)):
        server = RedisServer(tmp_path / f"r-{password}", appendonly=False, password=password,
                             dies_with_parent=True, **where).start()  # type: ignore[arg-type]  # fmt: skip
        try:
            assert server.url.startswith("unix://" if listens == "socket" else "rediss://")
            assert lets_anyone_in(server.url) is open_to_all
        finally:
            server.stop()
