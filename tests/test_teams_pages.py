"""The pages of teams, resource groups and usage, and the Cluster page's teams: who may see
which (staff alone manage teams and groups; everyone sees the usage of the jobs they may
see), what they show (the teams' tree, each group's rules and the slots it holds now),
the preview of a change to a team computed by the scheduler's own policy, and the teams'
shares read back from the scheduler's stream in its documented format
(``protocol.keys.SHARES_KEY``).

Alice and Bob are in team vision (Lena leads it), Olga in nlp; root is staff.
"""

from __future__ import annotations

import csv
import io
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.test import Client

from edtweb.tenancy import services as tenancy
from edtweb.tenancy.models import Team
from edtweb.training import services
from edtweb.training.live_adapter import job_rows, schedulable_jobs
from edtweb.training.live_adapter import tenancy as read_tenancy
from edtweb.training.models import Job, JobEvent
from protocol.keys import SHARES_KEPT, SHARES_KEY
from scheduler.live.shares import SharesLog
from scheduler.live.snapshot import SnapshotBuilder
from scheduler.policies import JobView, Snapshot, decide, entitlements, slots_by_team
from scheduler.policies import Team as PolicyTeam
from scheduler.store import Allocation, AllocationRecord, Store
from tests.harness.api import token_client
from tests.harness.jobs import stored_job

# A Redis of each test's own: the run's holds the slots of other modules' live hosts.
pytestmark = [pytest.mark.django_db, pytest.mark.redis("private_redis")]

API = "/api/v1/"
PREVIEW = API + "cluster/shares/preview/"
SHARES = API + "cluster/shares/"
HOST = "tp-h"  # this module's slots' host


def page_client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def teams(people: dict[str, Any]) -> dict[str, Team]:
    """Group ``h100``; team ``vision`` (Alice, Bob, Lena its lead) with sub-team ``vision-3d``
    (guarantee 1, limit 4); team ``nlp`` (Olga, weight 2)."""
    rules = ["device=gpu,model=*H100*", "host=dgx*,slots=8"]
    tenancy.save_group(None, {"name": "h100", "position": 10, "rules": rules})
    vision = tenancy.save_team(None, {"name": "vision", "allowed_groups": ["h100"]})
    sub = tenancy.save_team(None, {"name": "vision-3d", "parent": "vision", "guarantee": 1,
                                   "limit": 4})  # fmt: skip
    nlp = tenancy.save_team(None, {"name": "nlp", "weight": 2})
    for name in ("alice", "bob"):
        tenancy.set_member(vision, people[name])
    tenancy.set_member(vision, people["lena"], lead=True)
    tenancy.set_member(nlp, people["olga"])
    return {"vision": vision, "vision-3d": sub, "nlp": nlp}


@pytest.fixture
def slots(store: Store) -> Iterator[list[str]]:
    """Eight alive CPU slots on one host (group default) and one H100 (group h100); the
    allocation record and the shares stream are the test's to write, and are cleared."""
    ids = []
    for index in range(8):
        ids.append(store.register_slot(HOST, index, "cpu", pid=1, host_slots=8))
    ids.append(store.register_slot("tp-gpu", 0, "GPU-tp-0", pid=1, model="NVIDIA H100 80GB HBM3",
                                   host_slots=1))  # fmt: skip
    for slot in ids:
        store.heartbeat(slot, {"kind": "cpu", "cpu_percent": 1.0}, ttl=120)
    yield ids
    for slot in ids:
        store.forget_slot(slot)
    store.save_allocations(AllocationRecord(), ttl=0.001)
    store.r.delete(SHARES_KEY)


# Who may see which page -------------------------------------------------------------------


def test_teams_and_groups_are_staffs_and_usage_everyones(
    people: dict[str, Any], teams: dict[str, Team]
) -> None:
    for url in ("/teams/", "/groups/", "/usage/"):
        anonymous = Client().get(url)
        assert anonymous.status_code == 302 and "/accounts/login/" in anonymous["Location"], url
    for url in ("/teams/", "/groups/"):
        refused = page_client(people["lena"]).get(url)  # a lead is no staff
        assert refused.status_code == 403, url
        assert page_client(people["root"]).get(url).status_code == 200, url
    assert page_client(people["bob"]).get("/usage/").status_code == 200
    # The links: Usage for everyone, Teams and Groups for staff.
    nav = page_client(people["bob"]).get("/").content.decode()
    assert 'href="/usage/"' in nav and 'href="/teams/"' not in nav and 'href="/groups/"' not in nav
    nav = page_client(people["root"]).get("/").content.decode()
    assert all(f'href="/{p}/"' in nav for p in ("usage", "teams", "groups"))
    # The preview writes nothing but tells what the teams' settings would do: staff's too.
    reply = token_client(people["lena"]).post(PREVIEW, {"teams": {}}, format="json")
    assert reply.status_code == 403 and "only staff" in reply.json()["error"]


def test_the_teams_page_shows_the_tree_members_and_leads(
    people: dict[str, Any], teams: dict[str, Team]
) -> None:
    client = page_client(people["root"])
    page = client.get("/teams/").content.decode()
    # Tree order: vision, then its sub-team indented under it, then nlp... by name at the top.
    order = [page.index(f'<tr data-team="{name}"') for name in ("nlp", "vision", "vision-3d")]
    assert order == sorted(order)
    row = page[page.index('<tr data-team="vision-3d"') :].split("</tr>")[0]
    assert "calc(10px + 1.25em)" in row and "<td>1</td>" in row and "<td>4</td>" in row
    vision = page[page.index('<tr data-team="vision"') :].split("</tr>")[0]
    assert "also h100" in vision and "lead: lena" in vision and "<td>3 " in vision
    assert 'id="team-editor"' not in page  # no team chosen yet
    chosen = client.get("/teams/?team=vision").content.decode()
    editor = chosen[chosen.index('id="team-editor"') :]
    assert 'value="1"' in editor and 'id="team-guarantee"' in editor
    members = editor[editor.index('id="members"') : editor.index('id="member-form"')]
    assert [m for m in ("alice", "bob", "lena") if f'data-member="{m}"' in members] == [
        "alice", "bob", "lena"]  # fmt: skip
    assert members.count("checked") == 1  # Lena's lead box
    # Its parent can be any team but itself and its sub-teams; Olga is the one to add.
    parent = editor[editor.index('id="team-parent"') :].split("</select>")[0]
    assert 'value="nlp"' in parent and 'value="vision-3d"' not in parent
    assert 'value="vision"' not in parent
    adding = editor[editor.index('id="member-user"') :].split("</select>")[0]
    assert 'value="olga"' in adding and 'value="alice"' not in adding
    gone = client.get("/teams/?team=nope").content.decode()
    assert "No team nope" in gone


def test_the_groups_page_shows_rules_in_order_and_the_slots_each_holds(
    people: dict[str, Any], teams: dict[str, Team], slots: list[str]
) -> None:
    page = page_client(people["root"]).get("/groups/").content.decode()
    h100 = page[page.index('<tr data-group="h100"') :].split("</tr>")[0]
    assert "<code>device=gpu,model=*H100*</code><br><code>host=dgx*,slots=8</code>" in h100
    assert 'data-count="1"' in h100 and "tp-gpu.0" in h100
    assert "vision" in h100  # the team that may use it
    default = page[page.index('<tr data-group="default"') :].split("</tr>")[0]
    assert 'data-count="8"' in default and "every slot no rule takes" in default
    # The rules as people write them, in the editor; and every slot with its group.
    assert "device=gpu,model=*H100*\nhost=dgx*,slots=8</textarea>" in page
    table = page[page.index('id="slot-groups"') :]
    gpu_row = table[table.index('data-slot-id="tp-gpu.0"') :].split("</tr>")[0]
    assert 'class="group">h100<' in gpu_row and "NVIDIA H100 80GB HBM3" in gpu_row


# The preview of a change ------------------------------------------------------------------


def test_the_preview_is_the_policys_answer_before_and_after_the_change(
    people: dict[str, Any], teams: dict[str, Team], slots: list[str], store: Store
) -> None:
    """8 slots in default: Alice's job in vision and Olga's in nlp (weight 2), both asking
    for 8 and holding 4 each. As the teams are, vision's guarantee is its sub-team's 1: 1,
    then the 7 left by weight 1:2, vision 3 and nlp 5 (10/3 and 14/3 exact). Vision
    guaranteed 6: 6, then 2 by weight, vision 7 and nlp 1 (20/3 and 4/3 exact)."""
    a = stored_job(people["alice"], "a", Job.State.RUNNING, team=teams["vision"], max_workers=8)
    o = stored_job(people["olga"], "o", Job.State.RUNNING, team=teams["nlp"], max_workers=8)
    record = AllocationRecord({a.pk: Allocation(tuple(slots[:4])),
                               o.pk: Allocation(tuple(slots[4:8]))}, 8, "fairshare")  # fmt: skip
    store.save_allocations(record, ttl=60)
    reply = token_client(people["root"]).post(
        PREVIEW, {"teams": {"vision": {"guarantee": 6}}}, format="json"
    )
    assert reply.status_code == 200, reply.json()
    answer = reply.json()
    assert (answer["policy"], answer["divides_by_team"], answer["note"]) == ("fairshare", True, "")
    default = next(g for g in answer["groups"] if g["group"] == "default")
    assert (default["capacity"], default["jobs"]) == (8, 2)
    rows = {r["team"]: r for r in default["teams"]}
    table = {
        name: (r["demand"], r["now"], r["before"], r["after"], r["entitled_before"],
               r["entitled_after"], r["changed"])
        for name, r in rows.items()
    }  # fmt: skip
    assert table == {
        "vision": (8, 4, 3, 7, 3.333, 6.667, True),
        "nlp": (8, 4, 5, 1, 4.667, 1.333, False),
    }
    h100 = next(g for g in answer["groups"] if g["group"] == "h100")
    assert (h100["capacity"], h100["jobs"]) == (1, 0)
    assert [(r["team"], r["after"], r["changed"]) for r in h100["teams"]] == [("vision", 0, True)]
    # The same numbers as the policy's own, on the same snapshot.
    ids = {t.name: str(t.pk) for t in teams.values()}
    made = [PolicyTeam(**t) for t in tenancy.policy_teams()]
    jobs = [JobView(str(a.pk), 8, a.created_at.timestamp(), current=4, state="RUNNING",
                    owner=str(a.owner_id), team=ids["vision"]),
            JobView(str(o.pk), 8, o.created_at.timestamp(), current=4, state="RUNNING",
                    owner=str(o.owner_id), team=ids["nlp"])]  # fmt: skip
    changed = [PolicyTeam(t.id, t.parent, t.weight, 6 if t.name == "vision" else t.guarantee,
                          t.limit, t.name) for t in made]  # fmt: skip
    after = Snapshot(8, jobs, tuple(changed))
    assert slots_by_team(after, decide(after).targets)[ids["vision"]] == 7
    assert round(entitlements(after)[0][ids["vision"]], 3) == 6.667
    # Nothing was written.
    assert Team.objects.get(name="vision").guarantee == 0


def test_a_preview_of_a_team_with_no_jobs_and_of_an_impossible_change(
    people: dict[str, Any], teams: dict[str, Team], slots: list[str], store: Store
) -> None:
    root = token_client(people["root"])
    o = stored_job(people["olga"], "o", team=teams["nlp"], max_workers=2)
    answer = root.post(PREVIEW, {"teams": {"vision": {"weight": 5, "limit": 3}}},
                       format="json").json()  # fmt: skip
    group = next(g for g in answer["groups"] if g["group"] == "default")
    rows = {r["team"]: r for r in group["teams"]}
    assert rows["vision"]["after"] == 0 and rows["vision"]["changed"]
    # Olga's queued job holds nothing yet; it asks its 2 and the policy gives them, before
    # and after.
    assert group["jobs"] == 1 and rows["nlp"]["demand"] == o.max_workers == 2
    assert (rows["nlp"]["now"], rows["nlp"]["before"], rows["nlp"]["after"]) == (0, 2, 2)
    mistakes = [
        ({"vision": {"guarantee": 5, "limit": 3}},
         "teams.vision: a guarantee of 5 is over the limit 3"),
        ({"vision": {"parent": "vision-3d"}}, "cycle"),
        ({"vision": {"limit": 0}}, "sub-teams' guarantees (1) are above its limit 0"),
        ({"robotics": {"weight": 2}}, "no team 'robotics'"),
        ({"nlp": {"parent": "nope"}}, "no team 'nope' to be its parent"),
        ({"nlp": {"weight": 0}}, "teams.nlp.weight"),
    ]  # fmt: skip
    for change, words in mistakes:
        reply = root.post(PREVIEW, {"teams": change}, format="json")
        assert reply.status_code == 400 and words in reply.json()["error"], (change, reply.json())


def test_a_teams_guarantee_counts_in_its_own_group_alone(
    people: dict[str, Any], teams: dict[str, Team], slots: list[str], store: Store
) -> None:
    """In h100 (one slot at the scheduler's last decision), a job of vision's and one of
    nlp's (weight 2): vision's guarantee counts there only once h100 is its own group."""
    for owner, name, team in (("alice", "a", "vision"), ("olga", "o", "nlp")):
        stored_job(people[owner], name, team=teams[team], max_workers=1, resource_group="h100")
    record = AllocationRecord({}, 7, "fairshare", groups={"default": 6, "h100": 1})
    store.save_allocations(record, ttl=60)
    root = token_client(people["root"])

    def h100(change: dict[str, Any]) -> dict[str, tuple[int, int, float]]:
        answer = root.post(PREVIEW, {"teams": {"vision": change}}, format="json").json()
        group = next(g for g in answer["groups"] if g["group"] == "h100")
        assert group["capacity"] == 1  # the record's, not the alive slots'
        assert next(g for g in answer["groups"] if g["group"] == "default")["capacity"] == 6
        return {r["team"]: (r["before"], r["after"], r["entitled_after"]) for r in group["teams"]}

    assert h100({"guarantee": 1}) == {"vision": (0, 0, 0.333), "nlp": (1, 1, 0.667)}
    moved = h100({"guarantee": 1, "resource_group": "h100"})
    assert moved == {"vision": (0, 1, 1.0), "nlp": (1, 0, 0.0)}
    wrong = root.post(PREVIEW, {"teams": {"vision": {"resource_group": "tpu"}}}, format="json")
    assert wrong.status_code == 400 and "no resource group 'tpu'" in wrong.json()["error"]


# The teams' shares on the Cluster page ------------------------------------------------------


def write_share(store: Store, t: float, groups: dict[str, Any]) -> str:
    """One entry of the scheduler's shares stream, in its documented format."""
    return str(store.r.xadd(SHARES_KEY, {"data": json.dumps({"t": t, "groups": groups})},
                            maxlen=SHARES_KEPT, approximate=True))  # fmt: skip


def test_the_shares_read_back_as_each_user_may_see_them(
    people: dict[str, Any], teams: dict[str, Team], slots: list[str], store: Store
) -> None:
    ids = {name: str(t.pk) for name, t in teams.items()}
    vision = teams["vision"]
    waiting = [
        stored_job(people["alice"], f"wait-{i}", team=vision, max_workers=8) for i in range(2)
    ]
    theirs = stored_job(people["olga"], "nlp-wait", team=teams["nlp"], max_workers=8)
    mine = stored_job(people["bob"], "bobs-solo", max_workers=8)
    stored_job(people["alice"], "late", team=teams["vision"], priority=9000, max_workers=8)
    now = time.time()
    first = write_share(store, now - 60, {"default": {"capacity": 8, "teams": {
        ids["vision"]: {"held": 3, "entitled": 2.667, "demand": 8},
        ids["vision-3d"]: {"held": 1, "entitled": 1, "demand": 1},
        ids["nlp"]: {"held": 4, "entitled": 5.333, "demand": 8},
    }, "queue": {}}})  # fmt: skip
    write_share(store, now - 30, {"default": {"capacity": 8, "teams": {
        ids["vision"]: {"held": 3, "entitled": 2.667, "demand": 8},
        ids["nlp"]: {"held": 5, "entitled": 5.333, "demand": 8},
        "": {"held": 0, "entitled": 0, "demand": 1},
    }, "queue": {ids["vision"]: [str(waiting[1].pk), str(waiting[0].pk)],
                 ids["nlp"]: [str(theirs.pk)], "": [str(mine.pk)]}}})  # fmt: skip
    store.r.xadd(SHARES_KEY, {"data": "not json"})  # skipped, never a 500

    root = token_client(people["root"]).get(SHARES).json()
    assert [e["t"] for e in root["entries"]] == [now - 60, now - 30]
    assert root["teams"] == {"": "no team", ids["nlp"]: "nlp", ids["vision"]: "vision",
                             ids["vision-3d"]: "vision-3d"}  # fmt: skip
    group = root["entries"][0]["groups"]["default"]
    # Held in all: each team's own jobs' (vision's, its sub-team's, nlp's).
    assert (group["capacity"], group["held"]) == (8, 8)
    assert group["teams"][ids["nlp"]] == {"held": 4, "entitled": 5.333, "demand": 8}
    queues = {q["team"]: [j["name"] for j in q["jobs"]] for q in root["queue"]}
    # The scheduler's order, then what came since (late, at the highest priority).
    assert queues == {"vision": ["wait-1", "wait-0", "late"], "nlp": ["nlp-wait"],
                      "no team": ["bobs-solo"]}  # fmt: skip

    bob = token_client(people["bob"]).get(SHARES).json()
    assert bob["teams"] == {ids["vision"]: "vision"}
    assert bob["entries"][0]["groups"]["default"]["held"] == 8  # every team together
    assert set(bob["entries"][0]["groups"]["default"]["teams"]) == {ids["vision"]}
    # His team's queue and his own job's; not nlp's.
    assert {q["team"]: [j["name"] for j in q["jobs"]] for q in bob["queue"]} == {
        "vision": ["wait-1", "wait-0", "late"], "no team": ["bobs-solo"]}  # fmt: skip
    olga = token_client(people["olga"]).get(SHARES).json()
    assert olga["teams"] == {ids["nlp"]: "nlp"}
    assert [q["team"] for q in olga["queue"]] == ["nlp"]

    # Only what came after a cursor; a time; a mistake.
    after = token_client(people["root"]).get(SHARES + f"?since={first}").json()
    assert [e["t"] for e in after["entries"]] == [now - 30]
    nothing_new = token_client(people["bob"]).get(SHARES + f"?since={after['cursor']}").json()
    assert nothing_new["entries"] == [] and nothing_new["cursor"] == after["cursor"]
    assert nothing_new["queue"] == bob["queue"]  # still in the scheduler's order
    recent = token_client(people["root"]).get(SHARES + f"?since={now - 45}").json()
    assert [e["t"] for e in recent["entries"]] == [now - 30]  # by the entries' own time
    bad = token_client(people["root"]).get(SHARES + "?since=yesterday")
    assert bad.status_code == 400 and "a unix time in seconds" in bad.json()["error"]


def test_the_schedulers_own_entries_read_back(
    people: dict[str, Any], teams: dict[str, Team], slots: list[str], store: Store
) -> None:
    """The entries the live scheduler writes (``scheduler/live/shares.py``, from its
    decisions on the snapshots it builds) are what the chart reads."""
    a = stored_job(people["alice"], "a", Job.State.RUNNING, team=teams["vision"], max_workers=8)
    o = stored_job(people["olga"], "o", Job.State.RUNNING, team=teams["nlp"], max_workers=8)
    stored_job(people["olga"], "w", team=teams["nlp"], max_workers=2)
    snapshots = SnapshotBuilder().build_groups(
        job_rows(schedulable_jobs()), {"default": 8, "h100": 1}, {a.pk: 4, o.pk: 4}, read_tenancy()
    )
    decisions = {group: decide(snapshot) for group, snapshot in snapshots.items()}
    SharesLog(lambda: store.r).offer(decisions)
    answer = token_client(people["root"]).get(SHARES).json()
    vision, nlp = str(teams["vision"].pk), str(teams["nlp"].pk)
    (entry,) = answer["entries"]
    default = entry["groups"]["default"]
    assert (default["capacity"], default["held"]) == (8, 8)
    entitled = round(decisions["default"].teams[vision], 3)
    assert default["teams"][vision] == {"held": 4, "entitled": entitled, "demand": 8}
    assert default["teams"][nlp]["demand"] == 10
    assert answer["teams"] == {vision: "vision", nlp: "nlp"}
    assert [j["name"] for q in answer["queue"] if q["team"] == "nlp" for j in q["jobs"]] == ["w"]


def test_the_queue_by_team_needs_no_stream_and_names_only_visible_jobs(
    people: dict[str, Any], teams: dict[str, Team], slots: list[str]
) -> None:
    stored_job(people["olga"], "nlp-a", team=teams["nlp"], priority=100, max_workers=8)
    stored_job(
        people["olga"],
        "nlp-b",
        Job.State.SUSPENDED,
        team=teams["nlp"],
        priority=9000,
        max_workers=8,
    )
    stored_job(people["alice"], "vis", team=teams["vision"], max_workers=8, resource_group="h100")
    stored_job(people["alice"], "done", Job.State.COMPLETED, team=teams["vision"], max_workers=8)
    root = token_client(people["root"]).get(SHARES).json()
    assert root["entries"] == [] and root["cursor"] == ""
    assert [(q["group"], q["team"], [j["name"] for j in q["jobs"]]) for q in root["queue"]] == [
        ("default", "nlp", ["nlp-b", "nlp-a"]), ("h100", "vision", ["vis"])]  # fmt: skip
    # A job of no team, someone else's, shows to Bob as another user's job beside his own.
    stored_job(people["olga"], "olgas-solo", priority=9999, max_workers=8)
    stored_job(people["bob"], "bobs-solo", max_workers=8)
    bob = token_client(people["bob"]).get(SHARES).json()
    solo = next(q for q in bob["queue"] if q["team"] == "no team")
    assert [(j["id"] is None, j["name"], j["priority"]) for j in solo["jobs"]] == [
        (True, "another user's job", None), (False, "bobs-solo", 5000)]  # fmt: skip


def test_the_cluster_page_has_the_teams_charts_and_queues(people: dict[str, Any]) -> None:
    page = page_client(people["bob"]).get("/").content.decode()
    assert 'id="share-charts"' in page and 'id="team-queue"' in page
    assert "edt/js/shares.js" in page and "You see the teams you are in" in page


# Usage ------------------------------------------------------------------------------------

T0 = datetime(2026, 3, 2, 9, tzinfo=UTC)  # a Monday


def ran(owner: Any, team: Team | None, hours: float, slots: int) -> Job:
    done = stored_job(
        owner, f"{owner.username}-{hours}", Job.State.COMPLETED, team=team, max_workers=8
    )
    Job.objects.filter(pk=done.pk).update(created_at=T0 - timedelta(hours=1),
                                          finished_at=T0 + timedelta(hours=hours))  # fmt: skip
    for kind, at, data in (("generation", T0, {"workers": slots}),
                           ("completed", T0 + timedelta(hours=hours), {})):  # fmt: skip
        services.write_events([JobEvent(job=done, kind=kind, message="", at=at, data=data)])
    return done


def test_the_usage_page_shows_and_downloads_the_slot_hours_one_may_see(
    people: dict[str, Any], teams: dict[str, Team]
) -> None:
    ran(people["alice"], teams["vision"], 2, 3)  # 6 slot-hours
    ran(people["bob"], teams["vision"], 1, 1)  # 1
    ran(people["olga"], teams["nlp"], 4, 2)  # 8
    ran(people["bob"], None, 1, 2)  # 2, of no team
    span = "since=2026-03-01&until=2026-03-04"
    root = page_client(people["root"]).get(f"/usage/?{span}").content.decode()
    totals = root[root.index('id="usage-totals"') :].split("</table>")[0]
    assert "<td>no team</td><td>2.0</td><td>0.0</td>" in totals
    assert "<td>nlp</td><td>8.0</td>" in totals and "<td>vision</td><td>7.0</td>" in totals
    assert "17.0 slot-hours in all" in root
    assert 'id="usage-data"' in root and "plotly-basic.min.js" in root
    # Bob: his jobs and his team's, by user; never Olga's.
    bob = page_client(people["bob"]).get(f"/usage/?{span}&by=user").content.decode()
    totals = bob[bob.index('id="usage-totals"') :].split("</table>")[0]
    assert "<td>alice</td><td>6.0</td>" in totals and "<td>bob</td><td>3.0</td>" in totals
    assert "olga" not in totals and 'value="nlp"' not in bob  # nor her team in the filter
    # Filters: one team, one user, per week.
    only = page_client(people["root"]).get(f"/usage/?{span}&team=vision&by=user").content.decode()
    totals = only[only.index('id="usage-totals"') :].split("</table>")[0]
    assert "<td>alice</td><td>6.0</td>" in totals and "<td>bob</td><td>1.0</td>" in totals
    none = page_client(people["root"]).get(f"/usage/?{span}&team=-").content.decode()
    assert "2.0 slot-hours in all" in none
    week = page_client(people["root"]).get(f"/usage/?{span}&period=week&user=olga").content.decode()
    rows = week[week.index('id="usage-rows"') :].split("</table>")[0]
    assert "<td>2026-03-02</td><td>nlp</td><td>8.0</td>" in rows and "Week of" in rows
    # The CSV is the same answer.
    download = page_client(people["bob"]).get(f"/usage.csv?{span}&by=team")
    assert download["Content-Disposition"] == 'attachment; filename="usage-by-team-per-day.csv"'
    lines = list(csv.reader(io.StringIO(b"".join(download.streaming_content).decode())))
    assert lines == [["period", "team", "slot_hours", "used_slot_hours", "waits",
                      "average_wait_s", "shrinks", "reclaims"],
                     ["2026-03-02", "", "2.0", "0.0", "0", "", "0", "0"],
                     ["2026-03-02", "vision", "7.0", "0.0", "0", "", "0", "0"]]  # fmt: skip
    # Mistakes are said, on the page and for the CSV.
    wrong = page_client(people["bob"]).get("/usage/?since=yesterday")
    assert wrong.status_code == 400 and "write a date (2026-01-05)" in wrong.content.decode()
    assert page_client(people["bob"]).get("/usage.csv?period=month").status_code == 400
