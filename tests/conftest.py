"""Shared fixtures: named users, and the harness's (tests/harness/) registered for every
module: Redis servers and the store, process bookkeeping, the live cluster and a control
worker, the live EDT.

Alice owns things, Bob is another user who must see none of them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.harness.cluster import cluster, control_worker, watch
from tests.harness.processes import processes
from tests.harness.redis import durable_redis, private_redis, redis_server, store, store_redis
from tests.harness.stack import live

__all__ = [
    "cluster",
    "control_worker",
    "durable_redis",
    "live",
    "private_redis",
    "processes",
    "redis_server",
    "store",
    "store_redis",
    "watch",
]


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
