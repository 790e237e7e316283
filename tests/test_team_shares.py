"""Why this share, for everyone (docs/architecture.md, "Tenancy"): each team's guarantee,
weight, fair share, slots held, borrowed or lent, its users' parts and its waiting jobs
with the scheduler's reasons, read from what the scheduler published (its shares stream
and allocation record, written here by the scheduler's own code from a real decision);
and, per team per week, the average wait, shrinks and reclaims on the Usage page, its CSV
and the API, from constructed timelines.

Alice is in team vision (guarantee 2) with Lena; Olga in nlp (guarantee 4, weight 2); Bob
in no team; root is staff.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils.html import escape

from edtweb.tenancy import entitlement, usage
from edtweb.tenancy import services as tenancy
from edtweb.tenancy.models import Team
from edtweb.tenancy.waits import seen
from edtweb.training.models import Job, JobEvent
from protocol.keys import SHARES_KEY
from scheduler.policies import Decision
from scheduler.store import AllocationRecord, Store
from tests.harness.api import token_client
from tests.harness.jobs import stored_job
from tests.harness.shares import publish

pytestmark = [pytest.mark.django_db, pytest.mark.redis("private_redis")]

TEAMS_NOW = "/api/v1/cluster/shares/teams/"


def page_client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def teams(people: dict[str, Any]) -> dict[str, Team]:
    vision = tenancy.save_team(None, {"name": "vision", "guarantee": 2})
    nlp = tenancy.save_team(None, {"name": "nlp", "guarantee": 4, "weight": 2})
    tenancy.set_member(vision, people["alice"])
    tenancy.set_member(vision, people["lena"])
    tenancy.set_member(nlp, people["olga"])
    return {"vision": vision, "nlp": nlp}


@pytest.fixture
def decided(store: Store, people: dict[str, Any], teams: dict[str, Team]) -> Iterator[Decision]:
    """On 8 slots: Alice's job holds 6, Lena's (min 8) waits; Olga's holds 2 (its max);
    Bob's job of no team waits. The scheduler's own code decides, publishes its shares
    entry and the allocation record's reasons."""
    a = stored_job(
        people["alice"], "alice-run", Job.State.RUNNING, team=teams["vision"], max_workers=8
    )
    stored_job(people["lena"], "lena-wide", team=teams["vision"], max_workers=8, min_workers=8)
    o = stored_job(people["olga"], "olga-run", Job.State.RUNNING, team=teams["nlp"], max_workers=2)
    stored_job(people["bob"], "bobs-own", max_workers=2)
    decision = publish(store, 8, {a.pk: 6, o.pk: 2})
    yield decision
    store.save_allocations(AllocationRecord(), ttl=0.001)
    store.r.delete(SHARES_KEY)


def line(answer: dict[str, Any], team: str) -> dict[str, Any]:
    (found,) = [t for t in answer["teams"] if t["team"] == team]
    (group,) = found["groups"]
    return {**group, "waiting": found["waiting"], "member": found["member"]}


def test_a_member_sees_their_teams_share_as_the_scheduler_decided_it(
    people: dict[str, Any], teams: dict[str, Team], decided: Decision
) -> None:
    response = token_client(people["alice"]).get(TEAMS_NOW)
    assert response.status_code == 200
    answer = response.json()
    assert [t["team"] for t in answer["teams"]] == ["vision"] and answer["note"] == ""
    vision = line(answer, "vision")
    key = str(teams["vision"].pk)
    assert vision["entitled"] == round(decided.teams[key], 3)
    assert (vision["guarantee"], vision["weight"], vision["limit"]) == (2, 1, None)
    assert (vision["held"], vision["demand"], vision["capacity"]) == (6, 16, 8)
    assert (vision["borrowed"], vision["lent"]) == (4, 0)  # 6 held on a guarantee of 2
    users = {u["user"]: u for u in vision["users"]}
    assert users["alice"]["held"] == 6 and users["alice"]["you"] and not users["lena"]["you"]
    assert users["lena"]["entitled"] == round(decided.users[key]["lena"], 3)
    (waiting,) = vision["waiting"]
    place, why = decided.standing()[str(waiting["id"])]
    assert waiting["name"] == "lena-wide" and waiting["position"] == place
    assert why in waiting["reason"] and "does not fit" in waiting["reason"]
    # The team's own page and the API by name say the same; no other team's job shows.
    assert token_client(people["lena"]).get("/api/v1/teams/vision/share/").json()["teams"] == [
        {**answer["teams"][0], "groups": [{**answer["teams"][0]["groups"][0], "users": [
            {**u, "you": u["user"] == "lena"} for u in vision["users"]]}]}]  # fmt: skip
    text = response.content.decode() + page_client(people["alice"]).get("/shares/").content.decode()
    assert "olga-run" not in text and "bobs-own" not in text and "nlp" not in text


def test_staff_see_every_team_and_what_an_idle_guarantee_lends(
    people: dict[str, Any], decided: Decision
) -> None:
    answer = token_client(people["root"]).get(TEAMS_NOW).json()
    assert [t["team"] for t in answer["teams"]] == ["nlp", "vision", ""]
    nlp = line(answer, "nlp")
    assert (nlp["held"], nlp["demand"], nlp["guarantee"], nlp["weight"]) == (2, 2, 4, 2)
    assert (nlp["borrowed"], nlp["lent"]) == (0, 2)  # asks for 2 of its 4
    assert not nlp["member"]
    alone = line(answer, "")
    assert [j["name"] for j in alone["waiting"]] == ["bobs-own"]
    assert alone["guarantee"] == 0 and alone["demand"] == 2


def test_a_non_member_gets_a_404_for_the_team_and_sees_none_of_its_jobs(
    people: dict[str, Any], decided: Decision
) -> None:
    bob = token_client(people["bob"])
    assert bob.get("/api/v1/teams/vision/share/").status_code == 404
    assert bob.get("/api/v1/teams/nope/share/").status_code == 404
    assert token_client(people["alice"]).get("/api/v1/teams/nlp/share/").status_code == 404
    assert bob.get(TEAMS_NOW).json()["teams"] == []
    page = page_client(people["bob"])
    assert page.get("/shares/?team=vision").status_code == 404
    text = page.get("/shares/").content.decode()
    assert "You are in no team" in text
    assert all(name not in text for name in ("alice-run", "lena-wide", "olga-run", "vision"))
    assert Client().get("/shares/").status_code == 302  # to the login page
    assert Client().get(TEAMS_NOW).status_code in (401, 403)


def test_the_shares_page_shows_a_members_numbers_and_who_waits_for_what(
    people: dict[str, Any], decided: Decision
) -> None:
    response = page_client(people["lena"]).get("/shares/?team=vision")
    assert response.status_code == 200
    html = response.content.decode()
    assert "Team vision's share" in html
    assert '<td class="held">6</td>' in html and '<td class="borrowed">4</td>' in html
    assert 'data-user="lena" class="chosen"' in html and "lena-wide" in html
    assert "does not fit" in html and "As the scheduler last decided" in html


def test_before_the_scheduler_publishes_the_page_and_api_say_so(
    people: dict[str, Any], teams: dict[str, Team], store: Store
) -> None:
    store.r.delete(SHARES_KEY)
    answer = token_client(people["alice"]).get(TEAMS_NOW).json()
    assert answer["note"] == entitlement.UNPUBLISHED and answer["t"] is None
    assert answer["teams"][0]["groups"] == []
    html = page_client(people["alice"]).get("/shares/").content.decode()
    assert escape(entitlement.UNPUBLISHED) in html


# Per team per week: average wait, shrinks, reclaims ---------------------------------------

MONDAY = datetime(2026, 1, 5, tzinfo=UTC)


def at(days: float, hours: float = 0.0) -> datetime:
    return MONDAY + timedelta(days=days, hours=hours)


def timeline(j: Job, *events: tuple[datetime, str, dict[str, Any]]) -> None:
    for when, kind, data in events:
        JobEvent.objects.create(job=j, at=when, kind=kind, message=kind, data=data)


def scaled(current: int, target: int, held: int, fair: float) -> dict[str, Any]:
    return {"current": current, "target": target, "team_held": held, "team_entitlement": fair}


@pytest.fixture
def weeks(people: dict[str, Any], teams: dict[str, Team]) -> None:
    """Two weeks of constructed timelines: vision's jobs wait 30 min and 90 min in the first
    (average 1 h), are shrunk three times there, once while vision held more than its fair
    share (a reclaim); one job suspended on Thursday waits until the next Monday (4 days,
    counted in the second week); one stopped before it got slots waited for nothing.
    nlp's one job waits 10 minutes."""
    done = Job.State.COMPLETED
    j1 = stored_job(people["alice"], "j1", done, team=teams["vision"], max_workers=4)
    j2 = stored_job(people["lena"], "j2", done, team=teams["vision"], max_workers=4)
    j3 = stored_job(people["alice"], "j3", Job.State.STOPPED, team=teams["vision"], max_workers=4)
    o = stored_job(people["olga"], "o", done, team=teams["nlp"], max_workers=2)
    timeline(j1, (at(0, 10), "submitted", {}), (at(0, 10.5), "generation", {"workers": 2}),
             (at(2), "scaled", scaled(2, 1, 6, 4.0)),  # vision above its share: a reclaim
             (at(3, 11), "scaled", scaled(1, 0, 3, 3.5)), (at(3, 12), "suspended", {}),
             (at(7, 12), "generation", {"workers": 1}), (at(8), "completed", {}))  # fmt: skip
    timeline(j2, (at(1, 9), "submitted", {}), (at(1, 10.5), "generation", {"workers": 4}),
             (at(2, 1), "scaled", scaled(4, 2, 4, 4.0)),  # within its share: a shrink
             (at(2, 2), "scaled", scaled(2, 4, 4, 4.0)),  # growing: neither
             (at(4), "completed", {}))  # fmt: skip
    timeline(j3, (at(2), "submitted", {}), (at(2, 1), "stopped", {}),
             (at(2, 2), "scaled", {"current": 0, "target": 0}))  # fmt: skip
    timeline(o, (at(0, 10), "submitted", {}), (at(0, 10, ) + timedelta(minutes=10),
             "generation", {"workers": 2}), (at(1), "completed", {}))  # fmt: skip


def by_key(answer: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["period"], r["team"]): r for r in answer["rows"]}


def test_weekly_average_wait_shrinks_and_reclaims_per_team(
    people: dict[str, Any], weeks: None
) -> None:
    answer = usage.usage(people["root"], MONDAY, at(14), "team", "week", zone=UTC)
    rows = by_key(answer)
    first, second = ("2026-01-05", "vision"), ("2026-01-12", "vision")
    assert {k: rows[first][k] for k in ("waits", "average_wait_s", "shrinks", "reclaims")} == {
        "waits": 2, "average_wait_s": 3600.0, "shrinks": 3, "reclaims": 1}  # fmt: skip
    assert {k: rows[second][k] for k in ("waits", "average_wait_s", "shrinks", "reclaims")} == {
        "waits": 1, "average_wait_s": 4 * 86400.0, "shrinks": 0, "reclaims": 0}  # fmt: skip
    nlp = rows[("2026-01-05", "nlp")]
    assert (nlp["waits"], nlp["average_wait_s"], nlp["shrinks"]) == (1, 600.0, 0)
    (vision,) = [t for t in answer["totals"] if t["team"] == "vision"]
    assert (vision["waits"], vision["shrinks"], vision["reclaims"]) == (3, 3, 1)
    assert vision["average_wait_s"] == pytest.approx((1800 + 5400 + 4 * 86400) / 3, abs=0.1)
    # By user, per day: the same events, other keys.
    daily = usage.usage(people["root"], MONDAY, at(14), "user", "day", zone=UTC)
    olga = [r for r in daily["rows"] if r["user"] == "olga"]
    assert [(r["period"], r["waits"], r["average_wait_s"]) for r in olga] == [
        ("2026-01-05", 1, 600.0)]  # fmt: skip
    # Olga sees her team's weeks, never vision's.
    hers = usage.usage(people["olga"], MONDAY, at(14), "team", "week", zone=UTC)
    assert {r["team"] for r in hers["rows"]} == {"nlp"}


def test_the_weekly_numbers_are_in_the_api_the_usage_page_and_its_csv(
    people: dict[str, Any], weeks: None
) -> None:
    query = {"since": "2026-01-05T00:00+00:00", "until": "2026-01-19T00:00+00:00",
             "period": "week", "by": "team", "team": "vision"}  # fmt: skip
    api = token_client(people["alice"]).get("/api/v1/usage/", query).json()
    assert [(r["period"], r["waits"], r["reclaims"]) for r in api["rows"]] == [
        ("2026-01-05", 2, 1), ("2026-01-12", 1, 0)]  # fmt: skip
    lines = list(csv.reader(io.StringIO(b"".join(
        page_client(people["alice"]).get("/usage.csv", query).streaming_content).decode())))  # type: ignore[attr-defined]  # fmt: skip
    assert lines[0] == ["period", "team", "slot_hours", "used_slot_hours", "waits",
                        "average_wait_s", "shrinks", "reclaims"]  # fmt: skip
    assert lines[1][0:2] == ["2026-01-05", "vision"] and lines[1][4:] == ["2", "3600.0", "3", "1"]
    html = page_client(people["alice"]).get("/usage/", query).content.decode()
    assert '<td class="wait">60 min 0 s</td>' in html or '<td class="wait">1 h 0 min</td>' in html
    assert '<td class="reclaims">1</td>' in html


def test_waits_and_shrinks_do_not_depend_on_the_events_order() -> None:
    events = [(1, at(0), "submitted", {}), (1, at(0, 1), "generation", {"workers": 2}),
              (1, at(1), "scaled", scaled(2, 1, 5, 3.0)), (1, at(2), "suspended", {}),
              (1, at(2, 1), "generation", {"workers": 0}), (1, at(3), "generation",
              {"workers": 1}), (2, at(0), "submitted", {}), (2, at(1), "failed", {})]  # fmt: skip
    found = seen(events)
    assert sorted(found) == sorted(seen(events[::-1]))
    assert sorted((s.at, s.waited, s.reclaim) for s in found) == [
        (at(0, 1), 3600.0, False), (at(1), None, True), (at(3), 86400.0, False)]  # fmt: skip
