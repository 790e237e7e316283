"""Thin Celery entry points: unpack ids, call into workers or a service, nothing else."""

from __future__ import annotations

import os
import socket
from typing import Any

from celery import shared_task


def ping() -> dict[str, Any]:
    """Answer which slot and process took the task: proves routing to a slot's queue."""
    return {
        "slot": f"{os.environ.get('EDT_SLOT_HOST', socket.gethostname())}."
        f"{os.environ.get('EDT_SLOT_INDEX', '-')}",
        "pid": os.getpid(),
        "device": os.environ.get("EDT_SLOT_DEVICE", "cpu"),
    }


ping_task = shared_task(name="edt.ping")(ping)


def run_learner(job_id: int, slot: str, token: str) -> dict[str, Any]:
    """Start a learner of the job on this slot and wait for it (DESIGN.md, "Processes")."""
    from django.conf import settings

    import edtweb.training.services as services
    from scheduler.store import JobStore, connect
    from workers.learner import host

    jobs = JobStore(connect(settings.REDIS_URL), str(job_id))
    code = host.run_learner(jobs, slot, token, services.spec_path(job_id), settings.REDIS_URL)
    services.learner_exited(job_id, slot, code)
    return {"slot": slot, "code": code}


run_learner_task = shared_task(name="edt.run_learner")(run_learner)
