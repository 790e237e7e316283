"""Shared fixtures: named users, and the harness's (tests/harness/) registered for every
module: Redis servers and the store, process bookkeeping, the live cluster and a control
worker, the live EDT.

Alice owns things, Bob is another user who must see none of them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.cluster import cluster, control_worker, watch
from tests.harness.processes import interrupt_on_sigterm, processes
from tests.harness.redis import (
    durable_redis,
    private_redis,
    redis_server,
    register_slot,
    store,
    store_redis,
)
from tests.harness.scheduling import LongestFirst, longest_first
from tests.harness.stack import live, live_left_idle
from tests.harness.waiting import scale_test_timeout

__all__ = [
    "cluster",
    "control_worker",
    "durable_redis",
    "live",
    "live_left_idle",
    "private_redis",
    "processes",
    "redis_server",
    "register_slot",
    "store",
    "store_redis",
    "watch",
]


def pytest_configure(config: pytest.Config) -> None:
    """A run stopped by SIGTERM tears down what its tests started (tests/harness/processes.py)."""
    interrupt_on_sigterm(config)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a pytest-xdist worker, the longest modules' tests first, so that they are handed
    out first (tests/harness/scheduling.py); a run in one process keeps Django's order."""
    if hasattr(config, "workerinput"):
        items[:] = [items[i] for i in longest_first(items)]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` as tests/harness/scheduling.py shares it among the workers."""
    return LongestFirst(config, log) if config.getvalue("dist") == "loadfile" else None


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """Each test's timeout scaled by the machine's load at its start, as its waits are
    (tests/harness/waiting.py): set here as the test's ``timeout`` mark, before
    pytest-timeout reads it."""
    marker = item.get_closest_marker("timeout")
    if marker is not None and (marker.args or "timeout" in marker.kwargs):
        base = float(marker.args[0] if marker.args else marker.kwargs["timeout"])
    else:
        base = float(item.config.getoption("timeout", None) or item.config.getini("timeout") or 0)
    if base > 0:
        item.add_marker(pytest.mark.timeout(scale_test_timeout(base)), append=False)
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """The test's own outcome, kept on it for its fixtures' teardown (``live_left_idle``)."""
    outcome = yield
    if call.when == "call":
        item.edt_call_report = outcome.get_result()  # type: ignore[attr-defined]


@pytest.fixture
def tmp_path(tmp_path: Path) -> Path:
    """pytest's own, readable by others: user code runs as another user (the sandbox's)
    and reads the models and datasets that tests put here."""
    tmp_path.chmod(0o755)
    return tmp_path


@pytest.fixture
def alice(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user("alice", "alice@example.com", "alice-pass-1")


@pytest.fixture
def bob(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user("bob", "bob@example.com", "bob-pass-1")


@pytest.fixture
def people(django_user_model: Any, alice: Any, bob: Any) -> dict[str, Any]:
    """Alice and Bob, Lena and Olga, and root (staff): the teams' tests' cast."""
    make = django_user_model.objects.create_user
    return {
        "alice": alice,
        "bob": bob,
        "lena": make("lena", password="lena-pass-1"),
        "olga": make("olga", password="olga-pass-1"),
        "root": make("root", password="root-pass-1", is_staff=True),
    }
