"""The one way a process outside the web connects to Redis, and what "Redis is away" means."""

from __future__ import annotations

import redis

# Errors that mean "Redis is away for now" (refused, reset, timed out, still loading its
# append-only file after a restart), as opposed to a bug in a command.
REDIS_DOWN: tuple[type[Exception], ...] = (redis.ConnectionError, redis.TimeoutError)


def connect(url: str, timeout: float = 5.0) -> redis.Redis:
    """A client for ``url`` returning str values; it fails fast when Redis is down."""
    return redis.Redis.from_url(
        url,
        decode_responses=True,
        socket_connect_timeout=timeout,
        socket_timeout=timeout,
        health_check_interval=30,
    )
