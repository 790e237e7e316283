"""The one lease loop (scheduler/lease_loop.py) against a real Redis: one loop of several
works, a standby takes over when the holder stops or is killed, and a Redis outage only
slows the loop down (backoff) until Redis answers again."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from edtweb.redis_server import RedisServer
from protocol.connection import connect
from scheduler.lease_loop import LeaseLoop
from scheduler.store import Store
from tests.harness.processes import PROJECT_DIR
from tests.harness.waiting import wait_for

KEY = "edt:test:lease"
REST = 0.05  # seconds between rounds, active or standing by
log = logging.getLogger("edt.test.lease")


class Rounds(LeaseLoop):
    """Counts the rounds it did while holding the lease, and every try."""

    def __init__(self, store: Store, name: str, lease_ms: int = 1000) -> None:
        super().__init__(store, name, KEY, lease_ms, log)
        self.holder += ":" + name
        self.tries = 0
        self.done = 0

    def work(self) -> float:
        self.tries += 1
        if self.hold_lease():
            self.done += 1
        return REST


class Running:
    """A loop run in a thread of the test, stopped (and joined) at the end."""

    def __init__(self, loop: Rounds) -> None:
        self.loop = loop
        self.thread = threading.Thread(target=loop.run, name=loop.name, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.loop.stopping.set()
        self.thread.join(timeout=10)
        assert not self.thread.is_alive()


@pytest.fixture
def running() -> Iterator[list[Running]]:
    started: list[Running] = []
    yield started
    for each in started:
        each.stop()


@pytest.fixture
def store(private_redis: RedisServer) -> Iterator[Store]:
    client = connect(private_redis.url, timeout=1.0)
    yield Store(client)
    client.close()


def start(running: list[Running], store: Store, name: str) -> Rounds:
    loop = Rounds(store, name)
    running.append(Running(loop))
    return loop


def test_one_loop_works_the_other_stands_by_and_takes_over_when_it_stops(
    store: Store, running: list[Running]
) -> None:
    first = start(running, store, "first")
    wait_for(lambda: first.active, 10, "the first loop to take the lease")
    second = start(running, store, "second")
    wait_for(lambda: second.tries >= 3, 10, "the second loop to try a few times")
    assert not second.active and second.done == 0
    assert store.lease_holder(KEY) == first.holder

    running[0].stop()
    # The lease was released at the stop: gone, or already the standby's.
    assert store.lease_holder(KEY) in (None, second.holder)
    wait_for(lambda: second.active, 10, "the standby to take over")
    assert store.lease_holder(KEY) == second.holder
    done = second.done
    wait_for(lambda: second.done > done, 10, "the new holder to work")


HOLDER = """
import logging, sys
from scheduler.lease_loop import LeaseLoop
from protocol.connection import connect
from scheduler.store import Store

class Holder(LeaseLoop):
    def work(self) -> float:
        self.hold_lease()
        return 0.05

logging.basicConfig(level=logging.INFO)
Holder(Store(connect(sys.argv[1])), "holder", sys.argv[2], 3000, logging.getLogger()).run()
"""


def test_a_standby_takes_over_once_a_killed_holders_lease_lapses(
    private_redis: RedisServer, store: Store, running: list[Running]
) -> None:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, private_redis.url, KEY],
                            cwd=PROJECT_DIR, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        wait_for(lambda: (store.lease_holder(KEY) or "").endswith(f":{proc.pid}"), 30,
                 "the other process to take the lease")  # fmt: skip
        standby = start(running, store, "standby")
        wait_for(lambda: standby.tries >= 3, 10, "the standby to try a few times")
        assert not standby.active
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        # Nobody released it: the dead holder's lease stands until it lapses.
        assert (store.lease_holder(KEY) or "").endswith(f":{proc.pid}")
        wait_for(lambda: standby.active, 10, "the standby to take over")
        assert store.lease_holder(KEY) == standby.holder
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_redis_away_slows_the_loop_down_and_it_resumes_when_redis_is_back(
    private_redis: RedisServer, store: Store, running: list[Running],
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    caplog.set_level(logging.INFO, logger=log.name)
    loop = start(running, store, "alone")
    wait_for(lambda: loop.active and loop.done >= 3, 10, "the loop to work")

    private_redis.stop()
    wait_for(lambda: loop.backoff.failures >= 5, 30, "five failed rounds")
    # Each try after a failure waits twice as long as the one before, up to 2 s.
    delays = [float(d) for d in re.findall(r"next try in ([0-9.]+) s", caplog.text)]
    assert delays[:4] == [0.4, 0.8, 1.6, 2.0]
    assert "alone round failed; retrying with backoff" in caplog.text

    private_redis.start()
    wait_for(lambda: loop.backoff.failures == 0 and loop.active, 30, "the loop to resume")
    done = loop.done
    wait_for(lambda: loop.done > done, 10, "the loop to work again")
    assert f"alone {loop.holder}: Redis and the database answer again" in caplog.text
    assert store.lease_holder(KEY) == loop.holder
