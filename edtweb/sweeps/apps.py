from __future__ import annotations

from django.apps import AppConfig


class SweepsConfig(AppConfig):
    """Hyperparameter sweeps whose trials are elastic jobs, and the driver that runs them."""

    name = "edtweb.sweeps"
