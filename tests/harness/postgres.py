"""A PostgreSQL server of the test's own, as the suite starts its own Redis: ``initdb`` in a
fresh directory, ``postgres`` on a free port of 127.0.0.1 with trust authentication for the
user ``postgres``, stopped and removed at the end. PostgreSQL refuses to run as root: run as
root, the server runs as a system account of its own (``edt-test-postgres``).

The binaries are Debian's (``apt-get install postgresql``, which ``.ci/run`` installs where
they are missing): ``initdb`` and ``postgres`` on PATH or under /usr/lib/postgresql/*/bin.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

from edtweb.redis_server import free_port
from tests.harness.waiting import wait_for
from workers import sandbox

ACCOUNT = "edt-test-postgres"
MISSING = (
    "no PostgreSQL binaries (initdb, postgres) on PATH or under /usr/lib/postgresql/*/bin: "
    "install them (Debian: apt-get install postgresql; .ci/run does), or name a server with "
    "EDT_TEST_POSTGRES=postgres://user@host:port"
)


def binary(name: str) -> Path | None:
    """``name`` from PATH, else from the newest /usr/lib/postgresql/VERSION/bin."""
    found = shutil.which(name)
    if found:
        return Path(found)
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=_version)
    for folder in reversed(versions):
        if (folder / name).exists():
            return folder / name
    return None


def _version(folder: Path) -> tuple[int, ...]:
    parts = folder.parent.name.split(".")
    return tuple(int(p) for p in parts if p.isdigit())


@contextmanager
def postgres_server() -> Iterator[str]:
    """A running server's URL (``postgres://postgres@127.0.0.1:PORT``), its database
    ``postgres`` open to the user ``postgres`` without a password."""
    initdb, postgres = binary("initdb"), binary("postgres")
    if initdb is None or postgres is None:
        raise AssertionError(MISSING)
    prefix: list[str] = []
    # in /tmp, open to the account (TMPDIR may be a test's own, closed to other users)
    folder = Path(tempfile.mkdtemp(prefix="edt-test-pg-", dir="/tmp"))
    proc: subprocess.Popen[bytes] | None = None
    try:
        if os.geteuid() == 0:
            uid, gid = sandbox.account(ACCOUNT)
            os.chown(folder, uid, gid)
            # keep: the parent-death signal survives the change of user (which clears it)
            prefix = ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
                      "--pdeathsig", "keep", "--"]  # fmt: skip
        data = folder / "data"
        made = subprocess.run(
            [*prefix, str(initdb), "-D", str(data), "-U", "postgres", "--auth=trust",
             "-E", "UTF8", "--locale=C", "--no-sync"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert made.returncode == 0, f"initdb failed: {made.stdout}{made.stderr}"
        for attempt in range(3):  # a free port can be taken before the server binds it
            proc, url = _start(prefix, postgres, data, folder)
            if _answers(proc, url, folder):
                break
            assert attempt < 2 and "could not bind" in _log(folder), (
                f"postgres exited: {_log(folder)[-2000:]}"
            )
        yield url
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # PostgreSQL's fast shutdown
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(folder, ignore_errors=True)


def _start(
    prefix: list[str], postgres: Path, data: Path, folder: Path
) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    with (folder / "server.log").open("ab") as log:
        proc = subprocess.Popen(
            [*prefix, str(postgres), "-D", str(data), "-p", str(port), "-k", str(folder),
             "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
             "-c", "synchronous_commit=off", "-c", "full_page_writes=off"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            # a session of its own: a Ctrl-C to the run's group stops it only at teardown;
            # a killed run takes it along: SIGINT, PostgreSQL's fast shutdown (SIGTERM would
            # wait for its clients)
            start_new_session=True, preexec_fn=sandbox.dies_with_parent(signal.SIGINT),
        )  # fmt: skip
    return proc, f"postgres://postgres@127.0.0.1:{port}"


def _answers(proc: subprocess.Popen[bytes], url: str, folder: Path) -> bool:
    """Wait until the server answers (True) or exits first (False)."""

    def connects() -> bool:
        try:
            psycopg.connect(f"{url}/postgres", connect_timeout=2).close()
            return True
        except psycopg.OperationalError:
            return False

    wait_for(lambda: proc.poll() is not None or connects(), 60,
             lambda: f"the test's PostgreSQL server to answer: {_log(folder)[-2000:]}")  # fmt: skip
    return proc.poll() is None


def _log(folder: Path) -> str:
    path = folder / "server.log"
    return path.read_text(errors="replace") if path.exists() else ""
