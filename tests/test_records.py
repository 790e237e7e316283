"""A learner's record writer (workers/learner/records.py) against a real Redis."""

from __future__ import annotations

import time
from pathlib import Path

from edtweb.redis_server import RedisServer
from protocol.connection import connect
from protocol.jobstore import JobStore
from tests.harness.waiting import wait_for
from workers.learner.records import WRITE_SECONDS, RecordWriter


def context_switches(tid: int) -> int:
    """How often the thread ``tid`` of this process gave up its core (it waited)."""
    status = Path(f"/proc/self/task/{tid}/status").read_text()
    line = next(x for x in status.splitlines() if x.startswith("voluntary_ctxt_switches"))
    return int(line.split()[1])


def started_writer(jobs: JobStore) -> RecordWriter:
    """A writer that has written step 1, and now waits for records."""
    writer = RecordWriter(jobs)
    writer.start()
    writer.put({"type": "train", "step": 1})  # an idle writer wakes for a record
    wait_for(lambda: writer.written == 1, 10, "the first record written")
    assert writer.native_id is not None
    return writer


def put_steps(writer: RecordWriter, last: int) -> tuple[int, float]:
    """Steps 2 to ``last`` put as short training steps would; the writer's waits meanwhile
    and the seconds they took."""
    assert writer.native_id is not None
    before, started = context_switches(writer.native_id), time.monotonic()
    for step in range(2, last + 1):
        writer.put({"type": "train", "step": step})  # neither raises nor blocks
        time.sleep(0.002)  # a short training step
    return context_switches(writer.native_id) - before, time.monotonic() - started


def test_records_reach_the_stream_in_order_without_a_wake_up_per_record(
    private_redis: RedisServer,
) -> None:
    jobs = JobStore(connect(private_redis.url), "records")
    writer = started_writer(jobs)
    try:
        woke, took = put_steps(writer, 201)
        wait_for(lambda: writer.written == 201, 10, "every record written")
        assert [r["step"] for _, r in jobs.read_metrics()] == list(range(1, 202))
        # While training, the thread writes what gathered every WRITE_SECONDS (a Redis
        # round trip and the GIL: a few waits each); woken by each record, it waited more
        # than once per record.
        writes = took / WRITE_SECONDS + 1
        assert woke < 200 and woke <= 8 * writes, f"{woke} waits in {took:.2f} s"
    finally:
        writer.close()


def test_records_put_while_redis_is_away_are_kept_and_written_in_order_once_it_is_back(
    tmp_path: Path,
) -> None:
    redis = RedisServer(tmp_path / "redis", appendonly=True, dies_with_parent=True).start()
    jobs = JobStore(connect(redis.url, timeout=0.5), "away")
    writer = started_writer(jobs)
    try:
        redis.kill()  # kill -9
        woke, _took = put_steps(writer, 101)
        assert writer.written == 1  # nothing pretended written
        redis.start()
        wait_for(lambda: writer.written == 101, 30, "every record written once Redis is back")
        assert [r["step"] for _, r in jobs.read_metrics()] == list(range(1, 102))
        # Its failed attempts went with the write that succeeded, for the scheduler's
        # edt_redis_retries: each taken once
        assert writer.retried >= 1
        assert jobs.take_redis_retries() == writer.retried
        assert jobs.take_redis_retries() == 0
        # Its retries keep their back-off (RETRY_FIRST doubling to RETRY_CAP), a few waits
        # each: a record does not cut one short (when each did, it waited once per record:
        # 101 here).
        assert woke < 30, f"{woke} waits while Redis was away"
    finally:
        writer.close()
        redis.stop()
