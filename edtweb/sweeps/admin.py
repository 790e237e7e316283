from __future__ import annotations

from django.contrib import admin

from edtweb.sweeps.models import Sweep


@admin.register(Sweep)
class SweepAdmin(admin.ModelAdmin):
    """Sweeps for an administrator: find, inspect, fix a stuck state. Their trials are jobs
    (the Jobs admin, filtered by sweep)."""

    list_display = ("id", "name", "owner", "state", "algorithm", "objective", "max_trials",
                    "max_parallel", "created_at", "ended_at")  # fmt: skip
    list_filter = ("state", "algorithm", "owner")
    search_fields = ("name", "owner__username")
    readonly_fields = ("created_at", "started_at", "ended_at", "spent", "study_name")
    raw_id_fields = ("model_definition", "dataset")
