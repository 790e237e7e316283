"""What a worker host needs before it runs user code, said in the same words in its log, by
``manage.py edt_check`` and in the README ("Security model"):

- a Redis that asks for a password: where its ``default`` user lets anyone in, any user
  code that reaches it could read or erase everything, whatever its job's ACL user may do.
  Slots refuse user code then (their state says why), unless the admin opts out for
  development with ``EDT_ALLOW_OPEN_REDIS=1``, which is logged;
- a user of user code's own: only a worker host that runs as root can switch user code to
  ``EDT_LEARNER_USER`` (``workers/sandbox.py``); one that does not runs it as itself.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from redis.connection import parse_url

from protocol.connection import lets_anyone_in
from workers.sandbox import DEFAULT_USER, OPT_OUT_USER

OPEN_REDIS_OPT_OUT = "EDT_ALLOW_OPEN_REDIS"
OPEN_REDIS_REFUSAL = (
    "refusing user code: Redis lets anyone in without a password; set a password "
    f"(README: Security model) or {OPEN_REDIS_OPT_OUT}=1 for development"
)


@dataclass(frozen=True)
class Finding:
    """One thing a production deployment needs: whether it has it, what is so, and when it
    does not, what to do."""

    ok: bool
    text: str


def open_redis_allowed(environ: Mapping[str, str]) -> bool:
    """The admin's development opt-out: user code runs even where Redis has no password."""
    return environ.get(OPEN_REDIS_OPT_OUT, "").strip() == "1"


def redis_refusal(url: str, environ: Mapping[str, str] = os.environ) -> str:
    """Why a slot refuses user code for the Redis at ``url`` ("" when it does not): that
    Redis lets anyone in, and the admin did not opt out. A Redis that does not answer is no
    reason (the learner finds out itself, and says so)."""
    if open_redis_allowed(environ):
        return ""
    return OPEN_REDIS_REFUSAL if lets_anyone_in(url) else ""


def where(url: str) -> str:
    """The Redis at ``url`` as a log names it: its socket or address and database, never
    its credentials."""
    options: dict[str, Any] = parse_url(url)  # type: ignore[no-untyped-call]
    place = options.get("path") or f"{options.get('host', '')}:{options.get('port', 6379)}"
    return f"{place} (database {options.get('db', 0)})"


def redis_finding(url: str, environ: Mapping[str, str] = os.environ) -> Finding:
    """Whether the Redis at ``url`` asks for a password, and what to do where it does not."""
    at = where(url)
    open_to_all = lets_anyone_in(url)
    if open_to_all is None:
        return Finding(False, f"Redis at {at} does not answer: start it, or fix REDIS_URL")
    if not open_to_all:
        return Finding(True, f"Redis at {at} asks for a password")
    if open_redis_allowed(environ):
        return Finding(False, (
            f"Redis at {at} lets anyone in without a password, and {OPEN_REDIS_OPT_OUT}=1 "
            "runs user code anyway (development only: any user code may connect as "
            "'default' and read or erase everything); set a password (README: Security "
            f"model) and unset {OPEN_REDIS_OPT_OUT}"
        ))  # fmt: skip
    return Finding(False, (
        f"Redis at {at} lets anyone in without a password, so worker hosts refuse user "
        "code; set a password on its 'default' user and put it in REDIS_URL (README: "
        f"Security model), or {OPEN_REDIS_OPT_OUT}=1 for development"
    ))  # fmt: skip


def user_finding(euid: int | None = None, environ: Mapping[str, str] = os.environ) -> Finding:
    """Which user user code runs as on a worker host started as ``euid`` (this process's
    by default), as ``workers/sandbox.py`` decides it."""
    euid = os.geteuid() if euid is None else euid
    wanted = environ.get("EDT_LEARNER_USER", "").strip() or DEFAULT_USER
    if euid != 0:
        me = _user_name(euid)
        return Finding(False, (
            f"EDT runs as {me}, not root: user code runs as {me} too, without a namespace of "
            f"its own, and can read whatever {me} can; run edt_worker as root so that user "
            f"code runs as {wanted} (EDT_LEARNER_USER; README: Security model)"
        ))  # fmt: skip
    if wanted == OPT_OUT_USER:
        return Finding(False, (
            "EDT_LEARNER_USER=root: user code runs as root (development only); unset it so "
            f"that user code runs as {DEFAULT_USER}"
        ))  # fmt: skip
    if wanted != DEFAULT_USER and not _user_exists(wanted):  # only the default is created
        return Finding(False, (
            f"EDT_LEARNER_USER={wanted}: no such user, so learners cannot start; create "
            f"it (with no rights of its own), or unset it so that user code runs as {DEFAULT_USER}"
        ))  # fmt: skip
    return Finding(True, (
        f"EDT runs as root: user code runs as {wanted} (EDT_LEARNER_USER) in a namespace "
        "of its own"
    ))  # fmt: skip


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True
