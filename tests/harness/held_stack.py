"""A test run that holds a stack until it is killed: tests/test_harness_reaping.py runs this
file with pytest (it is not collected otherwise), kills that run, and checks that nothing
it started is left. It holds the run's Redis, a control worker (Celery and its pool), a
scheduler and a PostgreSQL server of its own (tests/harness/postgres.py), their pids (and
the supervisor's log, if any) written to ``EDT_HELD_PIDS`` once all are up. With
``EDT_HELD_SUPERVISED`` set, the scheduler runs under `make run`'s supervisor, started from
a thread of the test's (as tests/test_faults.py's are): the kernel's parent-death signal
cannot reach it, only the fixtures' teardown can."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path

import psutil

from tests.harness.cluster import Cluster, live_env
from tests.harness.postgres import postgres_server
from tests.harness.processes import Processes
from tests.harness.waiting import wait_for


def test_holds_a_stack_until_killed(
    cluster: Cluster, control_worker: subprocess.Popen[str], processes: Processes, tmp_path: Path
) -> None:
    if os.environ.get("EDT_HELD_SUPERVISED"):
        supervised = cluster.supervise("scheduler")
        wait_for(lambda: supervised.pid("scheduler"), 120, "the supervised scheduler")
    else:
        log = tmp_path / "scheduler.log"
        processes.manage("edt_scheduler", env=live_env(cluster.redis), log=log)
        wait_for(lambda: "scheduler" in log.read_text().lower(), 120, "the scheduler's first line")
    with postgres_server():
        below = {p.pid for p in psutil.Process().children(recursive=True)}
        out = Path(os.environ["EDT_HELD_PIDS"])
        held = {"pids": sorted(below | {os.getpid()}), "supervisor_log":
                str(cluster.supervised.log) if cluster.supervised else None}  # fmt: skip
        out.with_suffix(".part").write_text(json.dumps(held))
        out.with_suffix(".part").rename(out)
        threading.Event().wait()
