"""The Celery app. It only places work on slots: it is never the record of a job."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "edtweb.settings")
# The worker host says once, in one line, when it runs as root (workers/launcher.py).
warnings.filterwarnings("ignore", message="You're running the worker with superuser")

app = Celery("edt")
app.config_from_object("django.conf:settings", namespace="CELERY")
# workers.tasks holds the thin entry points; workers.slot hooks each slot's heartbeat.
app.conf.include = ["workers.tasks", "workers.slot"]


def queue_control(task: str, object_id: int, log: str, failed: Callable[[str], None]) -> None:
    """Queue a model check or a dataset preparation (``task``, named in workers/control.py)
    for a worker host's control worker, once the row it names is committed; ``failed`` is
    given the reason when the broker does not take it (nothing would ever run it)."""
    from django.db import transaction

    from workers.control import CONTROL_QUEUE

    def send() -> None:
        try:
            app.send_task(task, args=[object_id, log], queue=CONTROL_QUEUE, ignore_result=True)
        except Exception as exc:  # Redis away: say so on the row rather than wait forever
            failed(f"it could not be queued ({type(exc).__name__}: {exc}); try again later")

    transaction.on_commit(send)
