"""The one way the web app, its consumers and its commands reach Redis: one client per
process (and per URL, so tests that switch Redis get theirs), never a connection per call."""

from __future__ import annotations

import functools

import redis
from django.conf import settings

from protocol.connection import connect
from scheduler.store import Store


@functools.lru_cache(maxsize=4)
def _client(url: str) -> redis.Redis:
    return connect(url)


def redis_client() -> redis.Redis:
    """This process's Redis client for ``settings.REDIS_URL``."""
    return _client(settings.REDIS_URL)


def store() -> Store:
    """The slot registry and the allocation record, over this process's client."""
    return Store(redis_client())
