from __future__ import annotations

from django.contrib import admin

from edtweb.datasets.models import Dataset


@admin.register(Dataset)
class DatasetAdmin(admin.ModelAdmin):
    list_display = ("id", "name", "owner", "status", "format", "size", "created_at")
    list_filter = ("status", "format", "owner")
    search_fields = ("name", "filename", "owner__username")
    readonly_fields = ("size", "received", "progress", "summary", "created_at")
