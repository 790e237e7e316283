from __future__ import annotations

from django.apps import AppConfig


class TrainingConfig(AppConfig):
    """Jobs, their timeline of events, and their metrics history."""

    name = "edtweb.training"
