"""Redis servers of the tests' own, and the ``store`` on the one a test module names.

The run shares one Redis (``redis_server``; Django's settings point at it). A module whose
tests kill Redis, or must start from an empty one, names another with
``pytest.mark.redis("private_redis")`` (or ``durable_redis``, or a fixture of its own): the
``store``, the ``cluster`` and the processes it starts then use that one.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings

from edtweb.redis_server import RedisServer
from edtweb.settings import channel_layers
from protocol.connection import connect
from scheduler.store import Store


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A redis-server of the test run's own, on a free port; settings point at it."""
    password = "test-" + secrets.token_hex(8)  # as the launcher's: learners must not need it
    server = RedisServer(
        tmp_path_factory.mktemp("redis"), appendonly=False, password=password, dies_with_parent=True
    )
    server.start()
    layers = channel_layers(server.url)
    override = override_settings(
        REDIS_URL=server.url,
        CHANNEL_LAYERS=layers,
        CELERY_BROKER_URL=server.url,
        CELERY_RESULT_BACKEND=server.url,
        # Failed logins are not counted in the run's Redis: many tests try a wrong password
        # as alice, and ten within five minutes in one worker would hold up every later
        # login as alice there. tests/test_login_throttle.py counts them with its own limit.
        EDT_LOGIN_FAILURES=0,
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
    server = RedisServer(
        tmp_path / "private-redis", appendonly=False, password=password, dies_with_parent=True
    ).start()
    yield server
    server.stop()


@pytest.fixture
def durable_redis(tmp_path: Path, settings: Any) -> Iterator[RedisServer]:
    """A Redis of this test's own with an append-only file, so it can be killed and
    started again on the same port with its data, as a production Redis would; this
    process's clients use it."""
    password = "test-" + secrets.token_hex(8)  # a slot refuses user code on an open Redis
    server = RedisServer(
        tmp_path / "durable-redis", appendonly=True, password=password, dies_with_parent=True
    ).start()
    settings.REDIS_URL = server.url
    yield server
    server.stop()


@pytest.fixture
def store_redis(request: pytest.FixtureRequest) -> RedisServer:
    """The Redis the module names with ``pytest.mark.redis(fixture name)``, else the run's."""
    marker = request.node.get_closest_marker("redis")
    server: RedisServer = request.getfixturevalue(marker.args[0] if marker else "redis_server")
    return server


@pytest.fixture
def store(store_redis: RedisServer, settings: Any) -> Iterator[Store]:
    """The scheduler's view of the test's Redis; this process's clients use the same one
    (with a Redis of the test's own, no slot of another test's host counts here)."""
    settings.REDIS_URL = store_redis.url
    client = connect(store_redis.url)
    yield Store(client)
    client.close()


@pytest.fixture
def register_slot(store: Store) -> Iterator[Callable[..., str]]:
    """Register a slot on the test's store as its worker does (``register_slot``'s
    arguments; the device ``cpu`` and pid 1 unless given); each is forgotten when the test
    ends, so that the run's shared Redis keeps no slot of a test's."""
    made: list[str] = []

    def register(host: str, index: int, device: str = "cpu", pid: int = 1, **kw: Any) -> str:
        made.append(store.register_slot(host, index, device, pid, **kw))
        return made[-1]

    yield register
    for slot in made:
        store.forget_slot(slot)
