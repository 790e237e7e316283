"""What the benchmarks that drive a live EDT share: one started in a folder of its own (a
Redis with a password, the launcher, the users of tests/harness/stack.py), waits, the slots
a job holds, and the min / median / max of a table's cells.

Imported as ``live`` by bench/bench_*.py (bench/ is the script's directory).
"""

from __future__ import annotations

import os
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "edtweb.settings")

from edtweb.redis_server import RedisServer  # noqa: E402
from protocol.connection import connect  # noqa: E402
from scheduler.store import Store  # noqa: E402
from tests.harness.processes import subprocess_env  # noqa: E402
from tests.harness.stack import LiveEdt, start_edt  # noqa: E402


@contextmanager
def running_edt(prefix: str, slots: int, args: Sequence[str] = ()) -> Iterator[tuple[LiveEdt, str]]:
    """``manage.py edt_run --cpu-slots slots args`` on a Redis of its own (its URL yielded
    beside it), SQLite and user code as this user, in a temporary folder; stopped with
    every process it started, and the folder removed, at the end."""
    with tempfile.TemporaryDirectory(prefix=prefix) as folder:
        tmp = Path(folder)
        server = RedisServer(tmp / "redis", appendonly=False, password=secrets.token_hex(16))
        server.start()
        env = subprocess_env(tmp / "data", REDIS_URL=server.url)
        for name in ("DATABASE_URL", "EDT_LEARNER_USER"):
            env.pop(name, None)
        live = start_edt(tmp, env, slots=slots, redis=server, args=args)
        try:
            yield live, server.url
        finally:
            live.stop()


def wait(done: Callable[[], bool], seconds: float, what: str, poll: float = 0.25) -> float:
    """Seconds until ``done()``, checked every ``poll`` s; TimeoutError after ``seconds``."""
    started = time.monotonic()
    while not done():
        if time.monotonic() - started > seconds:
            raise TimeoutError(f"waited {seconds:.0f} s for {what}")
        time.sleep(poll)
    return time.monotonic() - started


class Slots:
    """The live EDT's scheduler state, read from its Redis."""

    def __init__(self, url: str) -> None:
        self.client = connect(url)
        self.store = Store(self.client)

    def held(self, job_id: int) -> int:
        """How many slots the job holds (the allocation record, the scheduler's one fact)."""
        return len(self.store.allocations().of(job_id).members)


def spread(values: list[float], digits: int = 2) -> str:
    """``min / median / max``."""
    return " / ".join(
        f"{v:.{digits}f}" for v in (min(values), statistics.median(values), max(values))
    )
