"""The one way a process outside the web connects to Redis, what "Redis is away" means, and
whether a Redis lets in clients that give no password."""

from __future__ import annotations

from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.connection import parse_url
from redis.retry import Retry

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


def lets_anyone_in(url: str, timeout: float = 2.0) -> bool | None:
    """Whether the Redis at ``url`` (its host and port, or its socket, and its database)
    answers a client that gives no credentials at all: True when it does (its ``default``
    user needs no password, so any code that reaches it may do anything), False when it asks
    for a password, None when it does not answer (nothing can be said)."""
    options: dict[str, Any] = parse_url(url)  # type: ignore[no-untyped-call]
    options.pop("username", None)
    options.pop("password", None)
    # No retries: redis-py retries a refused handshake with backoff by default, which made
    # this take 3.5 s against a Redis that asks for a password; a slot asks it before each
    # learner and from its heartbeat thread (a slot whose beat waited that long was lost).
    client = redis.Redis(**options, socket_connect_timeout=timeout, socket_timeout=timeout,
                         retry=Retry(NoBackoff(), 0))  # fmt: skip
    try:
        client.ping()
        return True
    except redis.AuthenticationError:
        return False
    except redis.ResponseError as exc:  # NOAUTH, as SELECT of a database answers it
        return False if "NOAUTH" in str(exc) else None
    except (redis.RedisError, OSError):
        return None
    finally:
        client.close()
