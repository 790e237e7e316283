from __future__ import annotations

from django.apps import AppConfig


class ApiConfig(AppConfig):
    """The REST API under /api/v1/ and the WMLA-compatible subset under
    /platform/rest/deeplearning/v1/."""

    name = "edtweb.api"
