"""The Celery app. It only places work on slots: it is never the record of a job."""

from __future__ import annotations

import os
import warnings

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "edtweb.settings")
# The worker host says once, in one line, when it runs as root (workers/launcher.py).
warnings.filterwarnings("ignore", message="You're running the worker with superuser")

app = Celery("edt")
app.config_from_object("django.conf:settings", namespace="CELERY")
# workers.tasks holds the thin entry points; workers.slot hooks each slot's heartbeat.
app.conf.include = ["workers.tasks", "workers.slot"]
