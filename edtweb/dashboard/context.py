from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest


def live(request: HttpRequest) -> dict[str, int]:
    """The port pages open their WebSockets on (0: the page's own)."""
    return {"live_port": settings.EDT_LIVE_PORT}
