"""Learners started on real slot workers through Celery, with jobs in the database."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from celery import Celery
from django.conf import settings
from django.db import connection

from edtweb.redis_server import RedisServer
from edtweb.training import services
from edtweb.training.live_adapter import runner_for
from edtweb.training.metrics_consumer import MetricsConsumer
from edtweb.training.models import Job, Metric
from protocol.keys import ALIVE
from scheduler.store import Store
from tests.harness.processes import PROJECT_DIR, Processes, subprocess_env, using
from tests.harness.waiting import wait_for
from workers.learner.datasets import write_cifar10

pytestmark = pytest.mark.django_db(transaction=True)
BROKEN = """import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 10)
    def forward(self, x):
        return self.fc(x)  # images are 3x32x32: the shapes do not match


def build_model():
    return Net()
"""
HOST = "lt-host"
SLOTS = [f"{HOST}.0", f"{HOST}.1"]


@pytest.fixture
def slot_host(
    redis_server: RedisServer, store: Store, processes: Processes, tmp_path: Path
) -> Iterator[list[str]]:
    """Two CPU slots on a real worker host, sharing this test's database and data dir."""
    env = subprocess_env(
        Path(settings.EDT_DATA_DIR),
        REDIS_URL=redis_server.url,
        DATABASE_URL=f"sqlite:///{connection.settings_dict['NAME']}",
    )
    processes.manage("edt_worker", "--cpu-slots", "2", "--host-name", HOST,
                     env=env, log=tmp_path / "worker.log")  # fmt: skip
    alive = lambda: all(  # noqa: E731
        any(s.slot_id == sid and s.state == ALIVE for s in store.list_slots()) for sid in SLOTS
    )
    wait_for(alive, 90, "two alive slots")
    yield SLOTS


def run(job: Job, slots: list[str], timeout: float, seen: set[str] | None = None) -> str:
    """The scheduler's part (the job's runner) and the metrics consumer's, in turns; the
    logs the job's learners hold open go into ``seen`` (one per slot), looked for each turn
    until two are found."""
    runner = runner_for(job, resume=False)
    consumer = MetricsConsumer(Store(services.redis_client()))
    runner.apply(len(slots), tuple(slots), ())
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        final = runner.tick()
        if final:
            return final
        consumer.round(block=0.02)
        if seen is not None and len(seen) < 2:
            seen.update(open_logs(job))
    raise AssertionError(f"job did not end in {timeout} s")


def slots_answer(redis_server: RedisServer, slots: list[str]) -> bool:
    celery = Celery(broker=redis_server.url, backend=redis_server.url)
    for slot in slots:
        assert celery.send_task("edt.ping", queue="slot." + slot).get(timeout=10)["slot"] == slot
    return True


def open_logs(job: Job) -> set[str]:
    """The learners' logs in the job's directory that some process holds open (one look at
    each process's files)."""
    logs = job.workdir / "logs"
    found = set()
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            found.update(f.path for f in proc.open_files() if Path(f.path).parent == logs)
    return found


def learner_processes(job: Job) -> list[psutil.Process]:
    """The job's learners: forked from their slot's fork server, each holds its log in the
    job's directory open."""
    return using(job.workdir)


def test_a_job_trains_on_two_slots_and_completes(
    slot_host: list[str], redis_server: RedisServer, alice: Any, tmp_path: Path
) -> None:
    data = write_cifar10(tmp_path / "data", train=512, test=128)
    job = services.submit_job(alice, name="mlp", model_path=str(PROJECT_DIR / "examples/mlp.py"),
                              data_path=str(data), max_workers=2, epochs=2)  # fmt: skip
    seen: set[str] = set()
    assert run(job, slot_host, timeout=90, seen=seen) == Job.State.COMPLETED
    assert len(seen) == 2, f"the two learners were not found while they trained: {seen}"
    job.refresh_from_db()
    assert job.state == Job.State.COMPLETED and job.steps_done == 16
    train = Metric.objects.filter(job=job, kind="train").order_by("step")
    assert [m.step for m in train] == list(range(1, 17))
    assert {m.values["workers"] for m in train} == {2}
    assert Metric.objects.filter(job=job, kind="test").count() == 2
    assert (job.workdir / "model.pt").exists()
    assert job.events.filter(kind="generation").exists()
    wait_for(lambda: not learner_processes(job), 10, "the learners to exit")
    assert slots_answer(redis_server, slot_host)


def test_broken_model_code_fails_the_job_and_frees_its_slots(
    slot_host: list[str], redis_server: RedisServer, alice: Any, tmp_path: Path
) -> None:
    data = write_cifar10(tmp_path / "data", train=256, test=64)
    model = tmp_path / "broken.py"
    model.write_text(BROKEN)
    job = services.submit_job(alice, name="broken", model_path=str(model), data_path=str(data),
                              max_workers=2)  # fmt: skip
    assert run(job, slot_host, timeout=120) == Job.State.FAILED
    job.refresh_from_db()
    assert job.state == Job.State.FAILED
    assert "mat1 and mat2 shapes cannot be multiplied" in job.error
    assert 'File "broken.py", line 9, in forward' in job.error
    log = "".join(p.read_text() for p in (job.workdir / "logs").glob("*.log"))
    assert "Traceback" in log
    wait_for(lambda: not learner_processes(job), 10, "the learners to exit")
    assert slots_answer(redis_server, slot_host)  # free again
