"""A learner's Redis credential reaches its own job's keys and nothing else."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from edtweb.redis_server import RedisServer
from protocol import redis_acl
from protocol.connection import connect
from protocol.jobstore import JobStore
from protocol.keys import CHANGED_KEY, WAKE_KEY
from scheduler.store import Store
from workers.learner.rendezvous import RedisStore

SECRET = "platform-secret"


@pytest.fixture
def learner(redis_server: RedisServer, store: Store) -> Iterator[tuple[str, redis.Redis]]:
    """Job 41's learner credential, with job 42 alive next to it."""
    JobStore(store.r, "42").report_error("h.0", "job 42's own error", "")
    url = redis_acl.grant(store.r, redis_server.url, "41", SECRET)
    client = connect(url)
    yield url, client
    client.close()
    redis_acl.revoke(store.r, "41")
    JobStore(store.r, "42").forget()
    JobStore(store.r, "41").forget()


def test_the_platform_redis_needs_a_password(redis_server: RedisServer) -> None:
    no_password = redis_server.url.replace(f":{redis_server.password}@", "")
    with pytest.raises(redis.AuthenticationError):
        connect(no_password).ping()


def test_a_learner_runs_its_job_protocol_with_its_credential(
    learner: tuple[str, redis.Redis], store: Store
) -> None:
    url, client = learner
    assert redis_server_password(store) not in url
    jobs = JobStore(client, "41")
    assert jobs.generation() == 0 and jobs.poll() == (0, False)
    jobs.announce_ready("h.0")
    jobs.report_failure("h.0", 1, 3, "peer lost")
    jobs.report_error("h.0", "boom", "")
    jobs.emit({"type": "train", "step": 1})
    jobs.adopt(1)
    jobs.record_checkpoint(1)
    assert not jobs.stop_requested() and jobs.members(1) == []
    rdv = RedisStore(url, jobs.key("rdv"), timeout=1)
    rdv.set("a", b"1")
    assert rdv.get("a") == b"1" and rdv.add("n", 2) == 2 and rdv.check(["a"])
    assert rdv.compare_set("a", b"1", b"2") == b"2" and rdv.delete_key("a")
    platform = JobStore(store.r, "41")
    assert platform.ready_slots() == {"h.0"} and platform.errors()[0]["message"] == "boom"
    assert "ready 41 h.0" in store.r.lrange(WAKE_KEY, 0, -1)
    assert store.r.sismember(CHANGED_KEY, "41")


@pytest.mark.parametrize(
    "command",
    [
        ("GET", "edt:job:42:errors"),
        ("LRANGE", "edt:job:42:errors", "0", "-1"),
        ("RPUSH", "edt:job:42:errors", "forged"),
        ("DEL", "edt:job:42:errors"),
        ("SET", "edt:scheduler:lease", "me"),
        ("LRANGE", WAKE_KEY, "0", "-1"),
        ("SMEMBERS", CHANGED_KEY),
        ("KEYS", "*"),
        ("SCAN", "0"),
        ("CONFIG", "GET", "dir"),
        ("CONFIG", "SET", "requirepass", "x"),
        ("FLUSHALL",),
        ("ACL", "LIST"),
        ("CLIENT", "LIST"),
        ("EVAL", "return redis.call('get', 'edt:job:42:errors')", "0"),
        ("PUBLISH", "asgi__group__job.42", "x"),
        ("SUBSCRIBE", "edt:job:42:x"),
    ],
)
def test_a_learner_credential_reaches_nothing_else(
    learner: tuple[str, redis.Redis], store: Store, command: tuple[str, ...]
) -> None:
    _url, client = learner
    with pytest.raises(redis.exceptions.NoPermissionError):
        client.execute_command(*command)  # type: ignore[no-untyped-call]
    assert JobStore(store.r, "42").errors()[0]["message"] == "job 42's own error"


def test_a_revoked_credential_is_refused(learner: tuple[str, redis.Redis], store: Store) -> None:
    url, _client = learner
    redis_acl.revoke(store.r, "41")
    assert "41" not in redis_acl.job_users(store.r)
    with pytest.raises(redis.AuthenticationError):
        connect(url).ping()


def test_each_job_has_its_own_password() -> None:
    assert redis_acl.job_password(SECRET, "1") != redis_acl.job_password(SECRET, "2")
    assert redis_acl.job_password(SECRET, "1") != redis_acl.job_password("other", "1")


def redis_server_password(store: Store) -> str:
    kwargs = store.r.connection_pool.connection_kwargs
    return str(kwargs["password"])


@pytest.mark.parametrize("db", [3, 15])
def test_a_platform_redis_on_another_database_serves_learners_there(
    redis_server: RedisServer, db: int
) -> None:
    """An admin's ``REDIS_URL`` ending in ``/3``: the learner's client selects database 3
    on connecting, which its user may do (that database alone), and its keys land there."""
    platform_url = redis_server.url.rsplit("/", 1)[0] + f"/{db}"
    platform = connect(platform_url)
    url = redis_acl.grant(platform, platform_url, "43", SECRET)
    assert url.endswith(f"/{db}")
    learner = connect(url)
    try:
        JobStore(learner, "43").announce_ready("h.0")
        assert JobStore(platform, "43").ready_slots() == {"h.0"}
        assert not connect(redis_server.url).exists("edt:job:43:ready")  # not in database 0
        with pytest.raises(redis.exceptions.NoPermissionError):
            learner.execute_command("SELECT", "0")  # type: ignore[no-untyped-call]
    finally:
        learner.close()
        redis_acl.revoke(platform, "43")
        JobStore(platform, "43").forget()
        platform.close()


def test_two_edts_on_one_redis_server_keep_their_own_users(redis_server: RedisServer) -> None:
    """Two installations in databases 3 and 4 of one Redis server (staging and production,
    say) both run a job 7. ACL users are server-wide: each keeps a user of its own, a
    learner of each reaches its own database alone, and what each one's sweep at start
    reads (``job_users``, scheduler/live/loop.py) and its revoke leave the other's."""
    base = redis_server.url.rsplit("/", 1)[0]
    staging, production = connect(base + "/3"), connect(base + "/4")
    urls = [redis_acl.grant(p, base + f"/{db}", "7", SECRET)
            for p, db in ((staging, 3), (production, 4))]  # fmt: skip
    learners = [connect(url) for url in urls]
    try:
        assert redis_acl.job_users(staging) == ["7"] and redis_acl.job_users(production) == ["7"]
        assert "7" not in redis_acl.job_users(connect(redis_server.url))  # database 0's
        for learner, name in zip(learners, ("staging", "production"), strict=True):
            JobStore(learner, "7").report_error("h.0", name, "")
        assert JobStore(staging, "7").errors()[0]["message"] == "staging"
        assert JobStore(production, "7").errors()[0]["message"] == "production"
        with pytest.raises(redis.exceptions.NoPermissionError):
            learners[0].execute_command("SELECT", "4")  # type: ignore[no-untyped-call]

        redis_acl.revoke(staging, "7")  # staging's job ended
        assert redis_acl.job_users(staging) == [] and redis_acl.job_users(production) == ["7"]
        JobStore(learners[1], "7").announce_ready("h.1")  # production's learner goes on
        assert JobStore(production, "7").ready_slots() == {"h.1"}
    finally:
        for client in (*learners, staging):
            client.close()
        redis_acl.revoke(production, "7")
        for db in (3, 4):
            with connect(base + f"/{db}") as client:
                JobStore(client, "7").forget()
        production.close()


def test_an_old_named_user_of_a_job_running_at_the_upgrade_goes_with_its_job_alone(
    redis_server: RedisServer,
) -> None:
    """A job 8 of the EDT in database 3 was running when EDT was upgraded: its learners
    still use ``edt-job-8`` (the name from before the database was in it), which selects
    database 3. The EDT in database 0 beside it, whose names have no database, neither
    counts it among its users nor deletes it; database 3's revoke at the job's end deletes
    both names."""
    base = redis_server.url.rsplit("/", 1)[0]
    zero, three = connect(base + "/0"), connect(base + "/3")
    password = redis_acl.job_password(SECRET, "8")
    old = redis_acl.rules("8", password, 7, db=3)
    three.execute_command("ACL", "SETUSER", "edt-job-8", *old)  # type: ignore[no-untyped-call]
    redis_acl.grant(three, base + "/3", "8", SECRET)  # the scheduler's regrant, new name
    try:
        assert redis_acl.selected_by(three, "edt-job-8") == 3
        assert redis_acl.legacy_users(three) == {"8": "edt-job-8"}
        assert redis_acl.job_users(zero) == [] and redis_acl.legacy_users(zero) == {}
        redis_acl.revoke(zero, "8")  # database 0's job 8 ended: not this user
        assert {"edt-job-8", "edt-db3-job-8"} <= set(zero.acl_users())
        redis_acl.revoke(three, "8")
        assert not {"edt-job-8", "edt-db3-job-8"} & set(zero.acl_users())
    finally:
        redis_acl.delete_users(zero, ["edt-job-8", "edt-db3-job-8"])
        zero.close()
        three.close()


def test_the_database_index_is_read_from_the_path_or_the_query() -> None:
    assert redis_acl.database("redis://:pw@127.0.0.1:6379/7") == 7
    assert redis_acl.database("redis://127.0.0.1:6379?db=2") == 2
    assert redis_acl.database("redis://127.0.0.1:6379") == 0
    assert redis_acl.database("unix:///run/redis.sock?db=4") == 4
