"""The slot-time ledger starts with every interval the timelines already closed, so usage
reads the same before and after it exists (docs/architecture.md, "Tenancy")."""

from __future__ import annotations

from typing import Any

from django.db import migrations

HOLDING = "generation"
MARKS = (HOLDING, "restart", "suspended", "completed", "failed", "stopped")


def backfill(apps: Any, schema_editor: Any) -> None:
    Job = apps.get_model("training", "Job")
    JobEvent = apps.get_model("training", "JobEvent")
    SlotTime = apps.get_model("tenancy", "SlotTime")
    who = {row[0]: row[1:] for row in Job.objects.values_list(
        "pk", "owner_id", "owner__username", "team_id", "team__name", "resource_group")}
    events = JobEvent.objects.filter(kind__in=MARKS).order_by("job_id", "at", "pk")
    rows, last = [], dict[int, tuple[Any, int]]()
    for event in events.iterator():
        held = last.get(event.job_id)
        if held and held[1] > 0 and event.at > held[0] and event.job_id in who:
            owner, owner_name, team, team_name, group = who[event.job_id]
            rows.append(SlotTime(job_id=event.job_id, owner_id=owner, owner_name=owner_name,
                                 team_id=team, team_name=team_name or "", resource_group=group,
                                 start=held[0], end=event.at, slots=held[1]))
        workers = (event.data or {}).get("workers") if event.kind == HOLDING else 0
        last[event.job_id] = (event.at, workers if isinstance(workers, int) else 0)
    SlotTime.objects.bulk_create(rows, batch_size=1000)


class Migration(migrations.Migration):
    dependencies = [("tenancy", "0003_slot_time_ledger"), ("training", "0008_merge_batch_range")]
    operations = [migrations.RunPython(backfill, migrations.RunPython.noop)]
