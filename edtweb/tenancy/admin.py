from __future__ import annotations

from django.contrib import admin

from edtweb.tenancy.models import Membership, ResourceGroup, Team


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    raw_id_fields = ("user",)


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = (
        "name", "parent", "weight", "guarantee", "limit", "shrink_idle", "resource_group",
    )  # fmt: skip
    search_fields = ("name",)
    filter_horizontal = ("allowed_groups",)
    inlines = [MembershipInline]


@admin.register(ResourceGroup)
class ResourceGroupAdmin(admin.ModelAdmin):
    list_display = ("name", "position", "shrink_idle", "rules")
