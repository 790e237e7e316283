"""EDT web project: settings, URLs, ASGI entry point and the Celery app."""

from __future__ import annotations

from edtweb.celery import app as celery_app

__all__ = ["celery_app"]
