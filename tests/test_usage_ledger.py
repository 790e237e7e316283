"""Usage is never lost (docs/architecture.md, "Tenancy"): slot-time is kept in a ledger of
its own as a job's timeline closes each interval, so deleting a job leaves every total as
it was, for its owner and for their team."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from edtweb.tenancy import services as tenancy
from edtweb.training import services
from edtweb.training.models import Job
from scheduler.store import Store
from tests.harness.api import token_client
from tests.harness.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)
USAGE = "/api/v1/usage/"


def totals(user: Any, by: str) -> list[dict[str, Any]]:
    answer = token_client(user).get(USAGE, {"by": by, "since": "1d"}).json()
    return list(answer["totals"])


def test_deleting_a_job_leaves_the_usage_totals_as_they_were(
    store: Store, register_slot: Callable[..., str], alice: Any, bob: Any
) -> None:
    for index, busy in enumerate((0.5, 1.0)):  # its slots 75 % busy, as they report
        store.heartbeat(register_slot("ul", index), {"utilisation": busy}, ttl=60)
    team = tenancy.save_team(None, {"name": "ledger"})
    tenancy.set_member(team, alice)
    tenancy.set_member(team, bob)
    job = Job.objects.create(owner=alice, name="used", team=team, state=Job.State.RUNNING)
    began = timezone.now()
    services.record_event(job.pk, "generation", "now 2", workers=2, members=["ul.0", "ul.1"])
    wait_for(lambda: timezone.now() - began >= timedelta(seconds=1), 5, "a second to pass")
    assert services.complete_job(job.pk)
    by_user, by_team = totals(alice, "user"), totals(bob, "team")
    assert by_user[0]["user"] == "alice" and by_user[0]["slot_hours"] > 0, by_user
    used = by_user[0]["used_slot_hours"] / by_user[0]["slot_hours"]
    assert used == pytest.approx(0.75, abs=0.15), by_user  # hours are rounded to 0.36 s
    assert by_team[0]["team"] == "ledger"
    assert by_team[0]["slot_hours"] == by_user[0]["slot_hours"]

    assert token_client(alice).delete(f"/api/v1/jobs/{job.pk}/").status_code == 204
    assert not Job.objects.filter(pk=job.pk).exists()
    assert totals(alice, "user") == by_user
    assert totals(bob, "team") == by_team  # a teammate still sees the team's slot-hours
