from __future__ import annotations

from django.apps import AppConfig


class DashboardConfig(AppConfig):
    """Pages and the WebSocket consumers that keep them live."""

    name = "edtweb.dashboard"

    def ready(self) -> None:
        from edtweb.dashboard import revocation

        revocation.connect()
