"""Redis for learners through a per-job credential (Redis ACLs, Redis >= 6).

A learner never sees the platform's Redis credential. Its slot grants it, before it starts,
an ACL user of its own job, ``edt-job-<id>`` (``edt-db<n>-job-<id>`` where the platform's
database is ``n``, not 0), that may run only the commands a learner
runs, on that job's keys and channels alone (``edt:job:<id>:*``: generations, READY,
failures, errors, stop flag, checkpoint step, metrics stream, rendezvous), plus appending a
wake-up to the scheduler's list and marking its job changed (both write-only on Redis 7).
No ``KEYS``, ``SCAN``, ``CONFIG``, ``FLUSHALL``, ``CLIENT LIST``... and no other job's key.

Redis' ACL users are server-wide while keys are per database: two EDTs on one Redis server
(databases 3 and 4, say) number their jobs alike, so the database is in the user's name.
Neither then rewrites the other's users, nor deletes them as users of jobs it does not run.

The user's password is an HMAC of the platform's secret and the user's name: every platform
process that holds the secret derives it, none stores it, and the learner cannot derive it
for another job. The scheduler deletes the user when the job ends (``revoke``).

This only contains learners when the platform's own Redis user (``default``) requires a
password: a Redis that EDT starts has one (``edtweb/redis_server.py``).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import redis
from redis.connection import parse_url

from protocol.keys import CHANGED_KEY, PREFIX, WAKE_KEY

log = logging.getLogger("edt.redis_acl")

USER_PREFIX = "edt-job-"
# What learners run (protocol/jobstore.py's JobStore, workers/learner/rendezvous.py).
COMMANDS = [
    *("get", "set", "incrby", "exists", "del"),
    *("sadd", "smembers", "srem", "rpush", "lrange", "hget", "hset", "hdel", "hgetall"),
    *("xadd", "xrange", "ping", "multi", "exec", "discard", "subscribe", "unsubscribe"),
]


def job_user(job_id: str, db: int = 0) -> str:
    """The ACL user of job ``job_id``'s learners on a platform in database ``db``."""
    return f"{USER_PREFIX}{job_id}" if not db else f"edt-db{db}-job-{job_id}"


def job_password(secret: str, job_id: str, db: int = 0) -> str:
    return hmac.new(
        secret.encode(), f"redis:{job_user(job_id, db)}".encode(), hashlib.sha256
    ).hexdigest()


def client_db(client: redis.Redis) -> int:
    """The database ``client`` selects (0 when none)."""
    return int(client.connection_pool.connection_kwargs.get("db") or 0)


def rules(job_id: str, password: str, redis_major: int, db: int = 0) -> list[str]:
    """``ACL SETUSER`` rules: only the learner's commands, only the job's keys and channels,
    and ``SELECT`` of the platform's database alone when it is not 0 (the client selects it
    on connecting)."""
    own = f"{PREFIX}job:{job_id}:*"
    write_only = "%W~" if redis_major >= 7 else "~"
    scheduler = [f"{write_only}{key}" for key in (WAKE_KEY, CHANGED_KEY)]
    allowed = [f"+{command}" for command in COMMANDS]
    if db:
        allowed.append(f"+select|{db}")
    return ["reset", "on", f">{password}", f"~{own}", *scheduler, "resetchannels", f"&{own}",
            "-@all", *allowed]  # fmt: skip


def with_credential(url: str, user: str, password: str) -> str:
    """``url`` with its user and password replaced."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    netloc = f"{quote(user, safe='')}:{quote(password, safe='')}@{host}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def database(url: str) -> int:
    """The database index ``url`` selects (``/3``, or ``?db=3``; 0 when none)."""
    return int(parse_url(url).get("db") or 0)  # type: ignore[no-untyped-call]


def _major(client: redis.Redis) -> int:
    info: Any = client.info("server")
    return int(str(info.get("redis_version", "0")).split(".")[0])


def grant(client: redis.Redis, url: str, job_id: str, secret: str) -> str:
    """Create (or refresh) the job's ACL user; returns the URL its learners use. Idempotent:
    a slot calls it before each learner it starts (a restarted Redis forgot its users).

    A Redis without ACLs (< 6) gets the platform's URL back, with an error in the log; any
    other refusal raises (a learner never gets the platform's credential by mistake)."""
    db = database(url)
    password = job_password(secret, job_id, db)
    try:
        own = rules(job_id, password, _major(client), db)
        setuser = ["ACL", "SETUSER", job_user(job_id, db), *own]
        client.execute_command(*setuser)  # type: ignore[no-untyped-call]
    except redis.ResponseError as exc:
        if "unknown command" not in str(exc).lower():
            raise
        log.error(
            "Redis refused ACL SETUSER (%s): learners of job %s use the platform's "
            "credential; Redis >= 6 with ACLs is needed to contain them",
            exc,
            job_id,
        )
        return url
    return with_credential(url, job_user(job_id, db), password)


def grant_all(client: redis.Redis, url: str, job_ids: list[str], secret: str) -> None:
    """``grant`` for many jobs in one round trip (after Redis restarted, every running job's
    user at once)."""
    if not job_ids:
        return
    major, db = _major(client), database(url)
    pipe = client.pipeline(transaction=False)
    for job_id in job_ids:
        own = rules(job_id, job_password(secret, job_id, db), major, db)
        pipe.execute_command("ACL", "SETUSER", job_user(job_id, db), *own)  # type: ignore[no-untyped-call]
    try:
        pipe.execute()
    except redis.ResponseError as exc:
        if "unknown command" not in str(exc).lower():
            raise
        log.error("Redis refused ACL SETUSER (%s): learners use the platform's credential", exc)


def revoke(client: redis.Redis, job_id: str) -> None:
    """Delete the job's ACL user (its learners' connections are closed by Redis), and its
    user of the old name where that is this platform's (``_job_of``); the platform's
    database is ``client``'s."""
    db = client_db(client)
    try:
        names = {job_user(job_id, db), job_user(job_id)}
        users = [user for user in names if _job_of(client, user, db) == job_id]
        if users:
            client.execute_command("ACL", "DELUSER", *users)  # type: ignore[no-untyped-call]
    except redis.RedisError as exc:  # Redis away: it has forgotten its users if restarted
        log.warning("could not delete the Redis user of job %s: %s", job_id, exc)


def _users(client: redis.Redis) -> list[str]:
    try:
        users: Any = client.execute_command("ACL", "USERS")  # type: ignore[no-untyped-call]
    except redis.ResponseError:
        return []
    return [u.decode() if isinstance(u, bytes) else str(u) for u in users]


def _job_of(client: redis.Redis, user: str, db: int) -> str | None:
    """The job whose learners' user ``user`` is, for the platform in database ``db``; None
    where it is not this platform's. Its own names; in a database other than 0 also the
    old name (before the database was in it) that selects that database; in database 0,
    whose names have no database, not one that selects another (another EDT's old name)."""
    prefix = job_user("", db)
    if user.startswith(prefix):
        return user[len(prefix) :] if db or not selected_by(client, user) else None
    if db and user.startswith(USER_PREFIX) and selected_by(client, user) == db:
        return user[len(USER_PREFIX) :]
    return None


def owned_users(client: redis.Redis) -> dict[str, str]:
    """User -> job id, of every ACL user of this platform's jobs now (``_job_of``): what
    the scheduler's sweep at start deletes for the jobs that hold no slot."""
    db = client_db(client)
    found = {}
    for user in _users(client):
        job_id = _job_of(client, user, db)
        if job_id is not None:
            found[user] = job_id
    return found


def job_users(client: redis.Redis) -> list[str]:
    """Job ids that have an ACL user of this platform's name now."""
    prefix = job_user("", client_db(client))
    return [job_id for user, job_id in owned_users(client).items() if user.startswith(prefix)]


def selected_by(client: redis.Redis, user: str) -> int:
    """The database ``user``'s rules let it select (0: none, or no such user)."""
    found: Any = client.acl_getuser(user) or {}
    commands = found.get("commands", "")
    words = commands.split() if isinstance(commands, str) else [str(c) for c in commands]
    for word in words:
        command, _, db = word.partition("|")
        if command == "+select" and db.isdigit():
            return int(db)
    return 0


def legacy_users(client: redis.Redis) -> dict[str, str]:
    """Job id -> user, of this platform's users of the old name (in a database other than
    0: a platform in database 0 names its users so still)."""
    prefix = job_user("", client_db(client))
    return {job_id: user for user, job_id in owned_users(client).items()
            if not user.startswith(prefix)}  # fmt: skip


def delete_users(client: redis.Redis, users: list[str]) -> None:
    if not users:
        return
    try:
        client.execute_command("ACL", "DELUSER", *users)  # type: ignore[no-untyped-call]
    except redis.RedisError as exc:  # as revoke: the next start deletes them
        log.warning("could not delete the Redis users %s: %s", ", ".join(users), exc)
