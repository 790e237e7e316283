"""The one way a process outside the web connects to Redis, what "Redis is away" means,
whether a Redis lets in clients that give no password, and the files a ``REDIS_URL`` names.

Any URL redis-py reads is accepted (README, "Configuration"): ``redis://``
with a database index and a password (of ``default`` or a named user), ``rediss://`` with
its TLS files as query parameters (``ssl_ca_certs``, ``ssl_certfile``, ``ssl_keyfile``), and
``unix://[[user]:password@]/path/to/redis.sock?db=N`` for a Redis on this machine's socket.
"""

from __future__ import annotations

from pathlib import Path
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
    # A pool, not Redis(**options): a socket's or TLS's connection class is a pool option.
    pool = redis.ConnectionPool(**options, socket_connect_timeout=timeout, socket_timeout=timeout,
                                retry=Retry(NoBackoff(), 0))  # fmt: skip
    client = redis.Redis(connection_pool=pool)
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
        pool.disconnect()


# The query parameters of a rediss:// URL that name files its clients read.
TLS_FILES = ("ssl_ca_certs", "ssl_ca_path", "ssl_certfile", "ssl_keyfile")


def url_files(url: str) -> list[Path]:
    """The files a client of ``url`` opens besides the network: the socket of a
    ``unix://`` URL, the TLS files of a ``rediss://`` one. A learner's sandbox shows it
    these (read-only) and nothing else of the host's (workers/learner/host.py)."""
    options: dict[str, Any] = parse_url(url)  # type: ignore[no-untyped-call]
    named = [options.get("path"), *(options.get(key) for key in TLS_FILES)]
    return [Path(str(name)) for name in named if name]
