"""One whole EDT for the test run (``manage.py edt_run``: web, scheduler, metrics consumer,
2 CPU slots, a Redis of its own), started on first use and shared by every module that
drives EDT from outside: the ``edt`` CLI, the WMLA endpoints, the browser, the sandbox.
A test that needs an EDT configured otherwise (another Redis or database, another user, a
crash loop) starts one of its own with ``edt_of_its_own``, stopped at its end."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import tarfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from edtcli.client import Client, CliError
from edtweb.redis_server import RedisServer, free_port
from scheduler.policies.model import ACTIVE
from tests.harness.processes import PROJECT_DIR, Processes, alive_pids, subprocess_env
from tests.harness.waiting import wait_for
from workers import sandbox
from workers.learner.datasets import write_cifar10

MAX_UPLOAD = 8 * 1024 * 1024
USERS = ("carol", "dave", "erin", "mallory", "gina")  # non-staff; passwords: "<name>-pass-1"
STAFF = ("sam",)  # staff (`edt admin`); the password as the others'


@dataclass
class LiveEdt:
    url: str
    data_dir: Path
    tmp: Path
    redis: RedisServer | None  # the test's, stopped with the EDT (None: EDT's own or another)
    launcher: subprocess.Popen[str] | None = None
    processes: Processes | None = None

    def edt(
        self, user: str | None, *args: str, stdin: str | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run `edt` as ``user`` (each user has a config directory of their own)."""
        home = self.tmp / f"config-{user or 'nobody'}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("EDT_")}
        env["XDG_CONFIG_HOME"] = str(home)
        # This checkout's edtcli, whichever checkout the console script was installed from.
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_DIR), env.get("PYTHONPATH")]))
        return subprocess.run(
            [*edt_command(), *args],
            input=stdin,
            env=env,
            cwd=self.tmp,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def login(self, user: str) -> None:
        done = self.edt(
            user,
            "login",
            "--url",
            self.url,
            "--user",
            user,
            "--password-stdin",
            stdin=f"{user}-pass-1\n",
        )
        assert done.returncode == 0, done.stderr

    def json(self, user: str, *args: str, timeout: float = 60) -> Any:
        done = self.edt(user, "--json", *args, timeout=timeout)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def stop_everything(self) -> list[str]:
        """As staff, stop every sweep and job still going (what a failed test left: it
        would hold the slots of the tests after it on this EDT). What it stopped."""
        login = {"username": STAFF[0], "password": f"{STAFF[0]}-pass-1"}
        api = Client(self.url, Client(self.url).call("POST", "auth/token/", login)["token"])
        stopped = []
        for kind, path, going in (("sweep", "sweeps/", ("QUEUED", "RUNNING")),
                                  ("job", "jobs/", ACTIVE)):  # fmt: skip
            for item in list(api.pages(path)):
                if item["state"] in going:
                    with contextlib.suppress(CliError):  # it ended meanwhile
                        api.call("POST", f"{path}{item['id']}/stop/")
                    stopped.append(f"{kind} {item['id']} ({item['state']})")
        return stopped

    def stop(self) -> None:
        """Ctrl-C to the launcher, as a user stops `make run`; then whatever it left (none
        should be) is killed, and the test's Redis stopped. Every process it started is
        gone when this returns."""
        if self.launcher is not None and self.processes is not None:
            seen = self.processes.remember_descendants(self.launcher)
            self.launcher.send_signal(signal.SIGINT)
            try:
                self.launcher.wait(timeout=60)
            finally:
                self.processes.cleanup()
                wait_for(lambda: not alive_pids(seen | {self.launcher.pid}), 30,
                         lambda: f"the EDT's processes {alive_pids(seen)} gone")  # fmt: skip
        if self.redis is not None:
            self.redis.stop()


def edt_command() -> list[str]:
    """The console script `make` installs beside the interpreter, else the module."""
    script = Path(sys.executable).parent / "edt"
    return [str(script)] if script.exists() else [sys.executable, "-m", "edtcli"]


_live: LiveEdt | None = None


def live_edt(config: pytest.Config, tmp_factory: pytest.TempPathFactory) -> LiveEdt:
    """One live EDT for the whole run, started on first use and stopped at its end."""
    global _live
    if _live is None:
        _live = _start(config, tmp_factory.mktemp("live-edt"))
    return _live


def _start(config: pytest.Config, tmp: Path) -> LiveEdt:
    redis = RedisServer(
        tmp / "redis", appendonly=False, password=secrets.token_hex(16), dies_with_parent=True
    ).start()
    env = subprocess_env(tmp / "data", REDIS_URL=redis.url, EDT_MAX_UPLOAD_BYTES=str(MAX_UPLOAD))
    # User code's limits (tests/test_sandbox.py): a 4 GiB allocation and a fork loop fail.
    env.update(EDT_LEARNER_MEMORY="3g", EDT_LEARNER_PROCESSES="128")
    # A data root for datasets registered in place (tests/test_datasets_in_place.py)
    (tmp / "roots").mkdir(exist_ok=True)
    env["EDT_DATA_ROOTS"] = str(tmp / "roots")
    if os.geteuid() == 0:
        # The process limit counts every task of the learners' user on the host: each
        # test worker's EDT runs its user code as a user of its own, so that the fork loop
        # of one leaves the learners of another their threads.
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        env["EDT_LEARNER_USER"] = f"edt-learner-{worker}"
        sandbox.account(env["EDT_LEARNER_USER"])
    env.pop("DATABASE_URL", None)
    live = start_edt(tmp, env, redis=redis, demo=True)  # the browser tests train on the demo
    config.add_cleanup(live.stop)
    return live


def start_edt(
    tmp: Path,
    env: dict[str, str],
    slots: int = 2,
    redis: RedisServer | None = None,
    prefix: Sequence[str] = (),
    args: Sequence[str] = (),
    users: Sequence[str] = (*USERS, *STAFF),
    demo: bool = False,
) -> LiveEdt:
    """``manage.py edt_run args`` with ``env`` (its data directory is ``EDT_DATA_DIR``), once it
    announced itself, with ``users`` (those of :data:`STAFF` are staff; each password costs
    its hashing, a good part of a second); without the demo dataset and example models
    unless ``demo`` (6-7 s of CPU a start: the tests upload their own);
    ``prefix`` runs it (and the command creating the users) through another command, as
    another user say. The caller stops it (``LiveEdt.stop``); a launcher that exits at start
    fails with its log's end."""
    processes = Processes()
    port = free_port()
    log = tmp / "run.log"
    launcher = processes.manage(
        "edt_run", "--port", str(port), "--cpu-slots", str(slots),
        *(() if demo else ("--no-demo",)), *args, env=env, log=log, prefix=prefix,
    )  # fmt: skip
    live = LiveEdt(f"http://127.0.0.1:{port}", Path(env["EDT_DATA_DIR"]), tmp, redis, launcher,
                   processes)  # fmt: skip

    def up() -> bool:
        text = log.read_text()
        if launcher.poll() is not None:
            raise AssertionError(f"edt_run exited with {launcher.returncode}: {text[-3000:]}")
        return "log in as admin" in text

    try:
        wait_for(up, 240, lambda: f"the launcher; its log ends: {log.read_text()[-2000:]}")
        users = "; ".join(
            f"U.objects.create_user('{u}', password='{u}-pass-1', is_staff={u in STAFF})"
            for u in users
        )
        code = f"from django.contrib.auth.models import User as U; {users}"
        done = subprocess.run(
            [*prefix, sys.executable, "manage.py", "shell", "-c", code],
            cwd=PROJECT_DIR, env=env, timeout=120, capture_output=True, text=True,
        )  # fmt: skip
        assert done.returncode == 0, f"creating the users: {done.stderr[-2000:]}"
    except BaseException:
        live.stop()
        raise
    return live


@contextmanager
def edt_of_its_own(tmp: Path, env: dict[str, str], **options: Any) -> Iterator[LiveEdt]:
    """A live EDT for one test (:func:`start_edt`), stopped at its end with every process
    it started."""
    live = start_edt(tmp, env, **options)
    try:
        yield live
    finally:
        live.stop()


@pytest.fixture(autouse=True)
def live_left_idle(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a test on the run's live EDT that failed, whatever it left going is stopped,
    so that its failure is not also that of the tests after it (a passing test cleans up
    after itself)."""
    yield
    report = getattr(request.node, "edt_call_report", None)
    if _live is not None and "live" in request.fixturenames and report is not None \
            and report.failed:  # fmt: skip
        stopped = _live.stop_everything()
        if stopped:
            print(f"stopped what the failed test left going: {', '.join(stopped)}")


@pytest.fixture(scope="module")
def live(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> LiveEdt:
    """The run's live EDT (:func:`live_edt`)."""
    return live_edt(request.config, tmp_path_factory)


def dataset_archive(folder: Path, train: int = 512, test: int = 64) -> Path:
    """A CIFAR-10-shaped dataset packed as a user uploads it."""
    source = write_cifar10(folder / "src", train=train, test=test)
    archive = folder / "shapes.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(source, arcname="cifar-10-batches-py")
    return archive
