"""Failed logins, counted per username in Redis (so across every web process): past
``EDT_LOGIN_FAILURES`` of them within ``EDT_LOGIN_WINDOW`` seconds of the first, every
login with that username is refused, 429 with Retry-After, until the window ends; guessing
a password takes that long per few tries. Every way in that takes a password asks here:
the pages' login form, the API's token endpoint and WMLA's Basic credentials.

Counted per username, not per address: behind a reverse proxy every client has the
proxy's. A username no account has is counted the same, so a refusal tells nothing of
which accounts exist. Redis away, logins are let through (and not counted), logged: the
pages and the API stay usable, as the rest of the web does without Redis.
"""

from __future__ import annotations

import hashlib
import logging

import redis
from django.conf import settings

from edtweb.redis_access import redis_client
from protocol.keys import login_failures_key

log = logging.getLogger("edt.throttle")


def _key(username: str) -> str:
    name = username.strip().casefold().encode("utf-8", "replace")
    return login_failures_key(hashlib.sha256(name).hexdigest()[:32])


def wait(username: str) -> int:
    """Seconds until a login with ``username`` may be tried (0: now)."""
    limit = int(settings.EDT_LOGIN_FAILURES)
    if limit <= 0:
        return 0
    key = _key(username)
    try:
        pipe = redis_client().pipeline()
        pipe.get(key)
        pipe.ttl(key)
        count, ttl = pipe.execute()
    except redis.RedisError as exc:
        log.warning("login failures not read (Redis: %s): the login is let through", exc)
        return 0
    if count is None or int(count) < limit:
        return 0
    return max(1, int(ttl))


def failed(username: str) -> None:
    """One more failed login with ``username``; the first starts the window."""
    if int(settings.EDT_LOGIN_FAILURES) <= 0:
        return
    key = _key(username)
    try:
        pipe = redis_client().pipeline()  # MULTI: the window's expiry is set with the key
        pipe.set(key, 0, ex=max(1, int(settings.EDT_LOGIN_WINDOW)), nx=True)
        pipe.incr(key)
        pipe.execute()
    except redis.RedisError as exc:
        log.warning("a failed login not counted (Redis: %s)", exc)


def message(seconds: int) -> str:
    return f"too many failed logins with this user name: try again in {seconds} s"


def succeeded(username: str) -> None:
    """A login with ``username`` worked: its failures are forgotten."""
    try:
        redis_client().delete(_key(username))
    except redis.RedisError as exc:
        log.warning("failed logins not cleared (Redis: %s)", exc)
