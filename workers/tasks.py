"""Thin Celery entry points: unpack ids, call into workers or a service, nothing else."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

from celery import shared_task
from celery.exceptions import Reject

from protocol.learner_task import TASK
from workers import control


def ping() -> dict[str, Any]:
    """Answer which slot and process took the task: proves routing to a slot's queue."""
    return {
        "slot": f"{os.environ.get('EDT_SLOT_HOST', socket.gethostname())}."
        f"{os.environ.get('EDT_SLOT_INDEX', '-')}",
        "pid": os.getpid(),
        "device": os.environ.get("EDT_SLOT_DEVICE", "cpu"),
    }


ping_task = shared_task(name="edt.ping")(ping)


def run_learner(job_id: int, slot: str, token: str, paths: dict[str, str]) -> dict[str, Any]:
    """Start a learner of the job on this slot and wait for it (docs/architecture.md,
    "Processes"). ``paths``: the job's, as the scheduler read them from its record
    (``protocol/learner_task.py``): the sandbox's bounds, never taken from the job's files."""
    from django.conf import settings

    from protocol.connection import connect
    from protocol.jobstore import LEARNER_PATIENCE, JobStore
    from protocol.learner_task import LearnerPaths
    from workers.learner import host

    jobs = JobStore(connect(settings.REDIS_URL), str(job_id), patience=LEARNER_PATIENCE)
    given = LearnerPaths.of(paths)
    bounds = host.JobPaths(given.data, given.model, given.workdir)
    code = host.run_learner(jobs, slot, token, given.spec, settings.REDIS_URL,
                            settings.SECRET_KEY, bounds)  # fmt: skip
    return {"slot": slot, "code": code}  # the scheduler reads the exit from the job's store


# No result is stored: nobody waits on it, and a result write must not fail a learner's
# task while Redis is away.
run_learner_task = shared_task(name=TASK, ignore_result=True)(run_learner)


def check_model(model_id: int, log: str) -> dict[str, Any]:
    """Check the model definition (``manage.py edt_check_model``), its errors into ``log``."""
    return _control("edt_check_model", model_id, log)


def prepare_dataset(dataset_id: int, log: str) -> dict[str, Any]:
    """Prepare the uploaded dataset (``manage.py edt_prepare_dataset``), errors into ``log``."""
    return _control("edt_prepare_dataset", dataset_id, log)


def _control(command: str, object_id: int, log: str) -> dict[str, Any]:
    code = control.run_command(command, object_id, Path(log))
    if code < 0:  # the command was killed: as if this process had been, run it again
        raise Reject(f"{command} {object_id} was killed by signal {-code}", requeue=True)
    return {"code": code}


# Acknowledged once done, and put back when the pool process running it dies (workers/control.py).
CONTROL = {"ignore_result": True, "acks_late": True, "reject_on_worker_lost": True}
check_model_task = shared_task(name=control.CHECK_MODEL, **CONTROL)(check_model)
prepare_dataset_task = shared_task(name=control.PREPARE_DATASET, **CONTROL)(prepare_dataset)
