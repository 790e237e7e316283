from __future__ import annotations

from django.apps import AppConfig


class TenancyConfig(AppConfig):
    """Teams (their weights, guarantees and limits, members and leads) and resource groups
    (the rules that sort slots into groups), docs/architecture.md, "Tenancy"."""

    name = "edtweb.tenancy"
