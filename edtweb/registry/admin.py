from __future__ import annotations

from django.contrib import admin

from edtweb.registry.models import ModelDefinition


@admin.register(ModelDefinition)
class ModelDefinitionAdmin(admin.ModelAdmin):
    list_display = ("id", "name", "owner", "status", "style", "parameters", "created_at")
    list_filter = ("status", "style", "owner")
    search_fields = ("name", "entry", "owner__username")
    readonly_fields = ("parameters", "output_shape", "warnings", "created_at")
