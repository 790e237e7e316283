from __future__ import annotations

from django.contrib import admin

from edtweb.training.models import Job, JobEvent


class JobEventInline(admin.TabularInline):
    model = JobEvent
    extra = 0
    fields = ("at", "kind", "message")
    readonly_fields = fields
    can_delete = False


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    """Jobs for an administrator: find, inspect, fix a stuck state. Files stay on disk;
    deleting here removes the rows only (the page's Delete removes the files too)."""

    list_display = ("id", "name", "owner", "team", "resource_group", "state", "priority",
                    "min_workers", "max_workers", "steps_done", "total_steps", "created_at",
                    "finished_at")  # fmt: skip
    list_filter = ("state", "owner", "team", "resource_group")
    search_fields = ("name", "owner__username")
    readonly_fields = ("created_at", "started_at", "finished_at", "steps_done", "metrics_count")
    raw_id_fields = ("model_definition", "dataset", "team")
    inlines = [JobEventInline]
