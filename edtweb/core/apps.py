from __future__ import annotations

from django.apps import AppConfig


class CoreConfig(AppConfig):
    """Process entry points: edt_run (the launcher), edt_worker, edt_scheduler."""

    name = "edtweb.core"
    label = "edt_core"
