"""Teams, resource groups and usage in process: staff write them through the API, every
submit path puts a job into a team and a group it may use (or says why not), a team's
members see its jobs read-only and its leads steer them (pages, API, WMLA, WebSockets),
anyone else gets a 404; slot-hours per team and user come from the jobs' timelines.

Alice owns the jobs; Bob is in her team, Lena leads it, Olga is in no team of hers.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from channels.testing import WebsocketCommunicator
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from rest_framework.test import APIClient

from edtweb.asgi import application
from edtweb.dashboard.slots import visible_slots
from edtweb.datasets.models import Dataset
from edtweb.registry.models import ModelDefinition
from edtweb.tenancy import services as tenancy
from edtweb.tenancy import usage
from edtweb.tenancy.models import Membership, ResourceGroup, Team
from edtweb.training import services
from edtweb.training.models import Job, JobEvent
from edtweb.training.status import status_of
from tests.harness.api import token_client
from tests.harness.processes import PROJECT_DIR

pytestmark = pytest.mark.django_db

API = "/api/v1/"
WMLA = "/platform/rest/deeplearning/v1/"
MLP = PROJECT_DIR / "examples" / "mlp.py"


@pytest.fixture
def teams(people: dict[str, Any]) -> dict[str, Team]:
    """Groups ``h100`` and ``a100``; team ``vision`` (group a100, may also use h100) with
    Alice, Bob and Lena (its lead); team ``nlp`` with Olga alone."""
    tenancy.save_group(None, {"name": "h100", "rules": ["device=gpu,model=*H100*"]})
    tenancy.save_group(None, {"name": "a100", "rules": ["device=gpu,model=*A100*"]})
    vision = tenancy.save_team(
        None, {"name": "vision", "resource_group": "a100", "allowed_groups": ["h100"]}
    )
    nlp = tenancy.save_team(None, {"name": "nlp", "weight": 2})
    for name in ("alice", "bob"):
        tenancy.set_member(vision, people[name])
    tenancy.set_member(vision, people["lena"], lead=True)
    tenancy.set_member(nlp, people["olga"])
    return {"vision": vision, "nlp": nlp}


@pytest.fixture
def ready(alice: Any, redis_server: Any) -> dict[str, Any]:
    """Alice's READY dataset ``shapes`` and VALID model ``mlp``."""
    dataset = Dataset.objects.create(
        owner=alice, name="shapes", status=Dataset.Status.READY, format="cifar10",
        summary={"splits": {"train": {"count": 256}, "test": {"count": 64}}},
    )  # fmt: skip
    model = ModelDefinition.objects.create(
        owner=alice, name="mlp", entry="mlp.py", status=ModelDefinition.Status.VALID
    )
    model.entry_path.parent.mkdir(parents=True, exist_ok=True)
    model.entry_path.write_bytes(MLP.read_bytes())
    return {"dataset": dataset.pk, "model": model.pk}


def submitted(user: Any, ready: dict[str, Any], **fields: Any) -> Any:
    body = {**ready, "epochs": 1, "batch_size": 32, **fields}
    return token_client(user).post(API + "jobs/", body, format="json")


# Data ------------------------------------------------------------------------------------


def test_each_slot_says_its_resource_group_by_the_rules(
    teams: dict[str, Team], people: dict[str, Any], store: Any
) -> None:
    gpu = store.register_slot("grp-gpu", 0, "GPU-1", pid=1, model="NVIDIA H100 80GB HBM3",
                              host_slots=1)  # fmt: skip
    cpu = store.register_slot("grp-cpu", 0, "cpu", pid=1, host_slots=1)
    try:
        slots = {
            s["slot_id"]: s for s in token_client(people["bob"]).get(API + "cluster/slots/").json()
        }
        assert (slots[gpu]["group"], slots[gpu]["model"], slots[gpu]["host_slots"]) == (
            "h100", "NVIDIA H100 80GB HBM3", 1)  # fmt: skip
        assert (slots[cpu]["group"], slots[cpu]["model"]) == ("default", "")
    finally:
        store.forget_slot(gpu)
        store.forget_slot(cpu)


def test_the_default_group_always_exists_and_cannot_be_deleted(people: dict[str, Any]) -> None:
    # The data migration's; a database flushed by another module's transactional test has
    # lost it, and reading the groups makes it again.
    root = token_client(people["root"])
    assert [g["name"] for g in root.get(API + "groups/").json()] == ["default"]
    assert ResourceGroup.objects.filter(name="default").exists()
    refused = root.delete(API + "groups/default/")
    assert refused.status_code == 409 and "default always exists" in refused.json()["error"]


def test_a_user_has_one_default_team_the_first_unless_another_is_made_it(
    teams: dict[str, Team], people: dict[str, Any]
) -> None:
    alice = people["alice"]
    assert tenancy.default_team(alice) == teams["vision"]  # her first team
    tenancy.set_member(teams["nlp"], alice)
    assert tenancy.default_team(alice) == teams["vision"]
    tenancy.set_member(teams["nlp"], alice, default=True)
    assert tenancy.default_team(alice) == teams["nlp"]
    assert Membership.objects.filter(user=alice, default=True).count() == 1
    tenancy.remove_member(teams["nlp"], alice)  # her default team: the other becomes it
    assert tenancy.default_team(alice) == teams["vision"]


# Staff write, everyone reads their own --------------------------------------------------


def test_only_staff_write_teams_groups_members_and_users(
    teams: dict[str, Team], people: dict[str, Any]
) -> None:
    bob = token_client(people["bob"])
    writes = [
        ("post", API + "groups/", {"name": "x", "rules": ["device=gpu"]}),
        ("patch", API + "groups/h100/", {"position": 1}),
        ("delete", API + "groups/h100/", None),
        ("post", API + "teams/", {"name": "mine"}),
        ("patch", API + "teams/vision/", {"weight": 9}),
        ("delete", API + "teams/vision/", None),
        ("post", API + "teams/vision/members/", {"username": "olga"}),
        ("patch", API + "teams/vision/members/bob/", {"lead": True}),
        ("delete", API + "teams/vision/members/alice/", None),
        ("post", API + "users/", {"username": "eve", "password": "a-long-pass-1"}),
        ("get", API + "users/", None),
    ]
    for method, url, body in writes:
        reply = getattr(bob, method)(url, body, format="json")
        assert reply.status_code == 403, (method, url, reply.content)
        assert reply.json()["error"].startswith("only staff may"), url
    assert Team.objects.get(name="vision").weight == 1
    assert not Membership.objects.filter(user=people["olga"], team=teams["vision"]).exists()
    # Bob reads the groups, and the teams he is in: not nlp.
    assert {g["name"] for g in bob.get(API + "groups/").json()} == {"default", "h100", "a100"}
    seen = bob.get(API + "teams/").json()
    assert [t["name"] for t in seen] == ["vision"]
    assert seen[0]["leads"] == ["lena"] and seen[0]["allowed_groups"] == ["h100"]
    assert bob.get(API + "teams/nlp/").status_code == 404
    assert bob.get(API + "teams/nlp/members/").status_code == 404


def test_staff_make_teams_and_members_and_each_mistake_is_named(
    people: dict[str, Any], teams: dict[str, Team]
) -> None:
    root = token_client(people["root"])
    made = root.post(API + "teams/", {"name": "ml", "weight": 3, "guarantee": 2, "limit": 8,
                                      "resource_group": "h100"}, format="json")  # fmt: skip
    assert made.status_code == 201, made.json()
    assert {k: made.json()[k] for k in ("weight", "guarantee", "limit", "resource_group")} == {
        "weight": 3, "guarantee": 2, "limit": 8, "resource_group": "h100"}  # fmt: skip
    child = root.post(API + "teams/", {"name": "ml-vision", "parent": "ml"}, format="json")
    assert child.json()["parent"] == "ml" and child.json()["resource_group"] == "default"
    mistakes = [
        ({"name": "bad", "guarantee": 5, "limit": 2}, "guarantee", "over the limit 2"),
        ({"name": "bad", "weight": 0}, "weight", "greater than or equal to 1"),
        ({"name": "bad", "resource_group": "tpu"}, "resource_group", "no resource group 'tpu'"),
        ({"name": "bad", "parent": "nobody"}, "parent", "no team 'nobody'"),
        ({"name": "ml"}, "name", "already exists"),
        ({"name": "has space"}, "name", "use letters, digits"),
    ]
    for body, field, words in mistakes:
        reply = root.post(API + "teams/", body, format="json")
        assert reply.status_code == 400, body
        assert any(words in m for m in reply.json()["fields"][field]), reply.json()
    cycle = root.patch(API + "teams/ml/", {"parent": "ml-vision"}, format="json")
    assert cycle.status_code == 400 and "one of its sub-teams" in cycle.json()["error"]

    members = root.post(API + "teams/ml/members/", {"username": "bob", "lead": True}, format="json")
    assert members.json() == [{"username": "bob", "lead": True, "default": False}]  # he has one
    root.patch(API + "teams/ml/members/bob/", {"lead": False, "default": True}, format="json")
    assert tenancy.default_team(people["bob"]).name == "ml"
    unknown = root.post(API + "teams/ml/members/", {"username": "nobody"}, format="json")
    assert unknown.status_code == 400 and "no user 'nobody'" in unknown.json()["error"]
    assert root.delete(API + "teams/ml/members/olga/").status_code == 404
    assert root.delete(API + "teams/ml/members/bob/").json() == []
    assert root.delete(API + "teams/ml/").status_code == 409  # it has a sub-team
    assert root.delete(API + "teams/ml-vision/").status_code == 204


def test_staff_define_groups_by_rules_people_can_write(people: dict[str, Any]) -> None:
    root = token_client(people["root"])
    made = root.post(API + "groups/", {"name": "big", "position": 5,
                     "rules": ["host=gpu*,device=gpu,model=*H100*,slots=8",
                               {"device": "gpu", "slots": 4}]}, format="json")  # fmt: skip
    assert made.status_code == 201, made.json()
    assert made.json()["rule_texts"] == ["host=gpu*,device=gpu,model=*H100*,slots=8",
                                         "device=gpu,slots=4"]  # fmt: skip
    assert [r.group for r in tenancy.rules()] == ["big", "big"]
    bad = root.post(API + "groups/", {"name": "odd", "rules": ["device=tpu"]}, format="json")
    assert bad.status_code == 400 and "a device kind is cpu or gpu" in bad.json()["error"]
    renamed = root.patch(API + "groups/big/", {"name": "huge"}, format="json")
    assert renamed.status_code == 400 and "cannot change" in renamed.json()["error"]
    root.post(API + "teams/", {"name": "t", "resource_group": "big"}, format="json")
    used = root.delete(API + "groups/big/")
    assert used.status_code == 409 and "teams t use resource group big" in used.json()["error"]


def test_staff_make_users_who_can_then_log_in(people: dict[str, Any]) -> None:
    root = token_client(people["root"])
    made = root.post(API + "users/", {"username": "frank", "password": "frank-pass-long-1"},
                     format="json")  # fmt: skip
    assert made.status_code == 201 and made.json() == {"username": "frank", "is_staff": False,
                                                       "teams": []}  # fmt: skip
    token = APIClient().post(API + "auth/token/", {"username": "frank",
                             "password": "frank-pass-long-1"}, format="json")  # fmt: skip
    assert token.status_code == 200
    again = root.post(API + "users/", {"username": "frank", "password": "x-pass-long-1"},
                      format="json")  # fmt: skip
    assert again.status_code == 400 and "exists already" in again.json()["error"]
    weak = root.post(API + "users/", {"username": "gina", "password": "123"}, format="json")
    assert weak.status_code == 400 and "password" in weak.json()["fields"]


# Submitting into a team -----------------------------------------------------------------


def test_a_job_goes_into_a_team_and_a_group_it_may_use_or_is_refused_saying_why(
    teams: dict[str, Team], people: dict[str, Any], ready: dict[str, Any]
) -> None:
    alice = people["alice"]
    plain = submitted(alice, ready)  # no team named: her default team, its group
    assert plain.status_code == 201, plain.json()
    assert (plain.json()["team"], plain.json()["resource_group"]) == ("vision", "a100")
    other = submitted(alice, ready, team="vision", resource_group="h100")  # one it may use
    assert (other.json()["team"], other.json()["resource_group"]) == ("vision", "h100")
    alone = submitted(alice, ready, team=None)
    assert (alone.json()["team"], alone.json()["resource_group"]) == ("", "default")
    refusals = [
        # A team of others' and one that does not exist: the same words.
        ({"team": "nlp"}, "team: no team 'nlp' of yours: yours: vision"),
        ({"team": "nope"}, "team: no team 'nope' of yours: yours: vision"),
        ({"resource_group": "default"}, "team vision may not use resource group default "
                                         "(it may use a100, h100)"),
        ({"resource_group": "tpu"}, "resource_group: no resource group 'tpu'"),
        ({"team": "", "resource_group": "h100"}, "a job without a team runs in default"),
    ]  # fmt: skip
    for fields, words in refusals:
        reply = submitted(alice, ready, **fields)
        assert reply.status_code == 400, fields
        assert words in reply.json()["error"], reply.json()
    assert Job.objects.count() == 3
    job = Job.objects.get(pk=plain.json()["id"])
    assert (job.team, job.resource_group) == (teams["vision"], "a100")
    assert status_of(job, alice).team == "vision"  # the one read model shows it


def test_the_train_form_offers_only_my_teams_with_my_default_chosen(
    client: Client, teams: dict[str, Team], people: dict[str, Any], ready: dict[str, Any]
) -> None:
    tenancy.set_member(teams["nlp"], people["alice"], default=True)
    client.force_login(people["alice"])
    form = client.get("/train/").context["form"]
    assert [t.name for t in form.fields["team"].queryset] == ["nlp", "vision"]
    assert form["team"].value() == "nlp"
    body = {"model": ready["model"], "dataset": ready["dataset"], "epochs": 1, "batch_size": 32,
            "max_workers": 1, "min_workers": 1, "priority": 5000, "checkpoint_every": 1,
            "lr": 0.01, "max_micro_batch": 0, "precision": "fp32", "team": "vision"}  # fmt: skip
    reply = client.post("/train/", body)
    assert reply.status_code == 302, reply.context["form"].errors
    job = Job.objects.get()
    assert (job.team.name, job.resource_group) == ("vision", "a100")
    # A team of Olga's that Alice is not in, and a team that does not exist: both refused.
    speech = tenancy.save_team(None, {"name": "speech"})
    tenancy.set_member(speech, people["olga"])
    for team in ("speech", "nobody's"):
        refused = client.post("/train/", {**body, "team": team})
        assert refused.status_code == 200 and "team" in refused.context["form"].errors, team
    assert Job.objects.count() == 1
    # Without a team of her own, Olga's form has no team field at all.
    Membership.objects.filter(user=people["olga"]).delete()
    client.force_login(people["olga"])
    assert "team" not in client.get("/train/").context["form"].fields


def test_a_wmla_exec_goes_into_the_team_its_sig_name_names(
    teams: dict[str, Team], people: dict[str, Any], ready: dict[str, Any]
) -> None:
    alice = token_client(people["alice"])
    args = (
        "--exec-start edtPyTorch --model-main mlp.py --cs-datastore-meta type=fs,data_path=shapes"
    )

    def post(sig: str) -> Any:
        upload = SimpleUploadedFile("mlp.py", MLP.read_bytes())
        return alice.post(f"{WMLA}execs?sigName={sig}&args={args}", {"file": upload},
                          format="multipart")  # fmt: skip

    tenancy.set_member(teams["nlp"], people["alice"], default=True)
    named = post("vision")
    assert named.status_code == 200, named.json()
    assert Job.objects.get(pk=named.json()["id"]).team == teams["vision"]
    assert alice.get(f"{WMLA}execs/{named.json()['id']}").json()["sigId"] == "vision"
    # A sigName no team has (the notebooks' own): her default team.
    theirs = post("elasticsig")
    assert Job.objects.get(pk=theirs.json()["id"]).team == teams["nlp"]
    # A team she is not in is as one that does not exist: her default team, no refusal
    # that would tell the one from the other.
    Membership.objects.filter(user=people["alice"], team=teams["nlp"]).delete()
    not_hers, nobodys = post("nlp"), post("elasticsig")
    assert (not_hers.status_code, nobodys.status_code) == (200, 200)
    placed = [Job.objects.get(pk=r.json()["id"]) for r in (not_hers, nobodys)]
    assert placed[0].team == placed[1].team != teams["nlp"]


# Who sees and steers a team's jobs ------------------------------------------------------


@pytest.fixture
def team_job(
    teams: dict[str, Team], people: dict[str, Any], tmp_path: Path, redis_server: Any
) -> Job:
    job = services.submit_job(people["alice"], name="alice's run", model_path=str(MLP),
                              data_path=str(tmp_path), team=teams["vision"],
                              resource_group="a100")  # fmt: skip
    (job.workdir / "logs").mkdir(exist_ok=True)
    (job.workdir / "logs" / "h.0.log").write_text("step 0\n")
    return job


READS = ["jobs/{j}/", "jobs/{j}/events/", "jobs/{j}/metrics/", "jobs/{j}/metrics/records/",
         "jobs/{j}/logs/", "jobs/{j}/logs/h.0/", "jobs/{j}/checkpoints/",
         "jobs/{j}/priority/preview/?priority=9000"]  # fmt: skip


def test_a_member_sees_the_teams_job_read_only_and_an_outsider_gets_404(
    team_job: Job, people: dict[str, Any]
) -> None:
    j = team_job.pk
    bob, olga = token_client(people["bob"]), token_client(people["olga"])
    for path in READS:
        assert bob.get(API + path.format(j=j)).status_code == 200, path
        assert olga.get(API + path.format(j=j)).status_code == 404, path
    assert bob.get(WMLA + f"execs/{j}").status_code == 200
    assert j in [row["id"] for row in bob.get(API + "jobs/").json()["results"]]
    assert j not in [row["id"] for row in olga.get(API + "jobs/").json()["results"]]
    changes = [("post", f"jobs/{j}/priority/", {"priority": 9000}),
               ("post", f"jobs/{j}/stop/", None), ("delete", f"jobs/{j}/", None)]  # fmt: skip
    for method, path, body in changes:
        reply = getattr(bob, method)(API + path, body, format="json")
        assert reply.status_code == 403, path
        assert f"job {j} is alice's in team vision: only its owner" in reply.json()["error"]
        assert getattr(olga, method)(API + path, body, format="json").status_code == 404
    for method, path in (("post", f"execs/{j}/stop"), ("put", f"execs/{j}?action=stop"),
                         ("delete", f"execs/{j}")):  # fmt: skip
        assert getattr(bob, method)(WMLA + path).status_code == 403, path
    team_job.refresh_from_db()
    assert (team_job.priority, team_job.state) == (5000, Job.State.QUEUED)


def test_a_lead_reprioritises_and_stops_the_teams_job_but_only_its_owner_deletes_it(
    team_job: Job, people: dict[str, Any]
) -> None:
    j = team_job.pk
    lena = token_client(people["lena"])
    moved = lena.post(API + f"jobs/{j}/priority/", {"priority": 9000}, format="json")
    assert moved.status_code == 200 and moved.json()["priority"] == 9000
    assert lena.post(API + f"jobs/{j}/stop/").json()["state"] == Job.State.STOPPED
    refused = lena.delete(API + f"jobs/{j}/")
    assert refused.status_code == 403 and "only its owner and staff" in refused.json()["error"]
    assert token_client(people["alice"]).delete(API + f"jobs/{j}/").status_code == 204


def test_the_pages_show_a_member_the_teams_job_without_its_controls(
    client: Client, team_job: Job, people: dict[str, Any]
) -> None:
    j = team_job.pk
    client.force_login(people["bob"])
    page = client.get(f"/jobs/{j}/").content.decode()
    assert "alice&#x27;s run" in page and 'id="job-team">vision<' in page
    for control in ('id="stop-form"', 'id="priority-edit"', 'id="delete-form"', 'id="resume-form"'):
        assert control not in page, control
    assert "alice&#x27;s run" in client.get("/jobs/").content.decode()
    assert client.get(f"/jobs/{j}/metrics").status_code == 200
    assert client.post(f"/jobs/{j}/priority", {"priority": 9000}).status_code == 403
    assert client.post(f"/jobs/{j}/stop").status_code == 403
    assert client.post(f"/jobs/{j}/delete").status_code == 403

    client.force_login(people["lena"])
    page = client.get(f"/jobs/{j}/").content.decode()
    assert 'id="stop-form"' in page and 'id="priority-edit"' in page
    assert 'id="delete-form"' not in page
    assert client.post(f"/jobs/{j}/priority", {"priority": 7000}).json() == {"priority": 7000}

    client.force_login(people["olga"])
    for url in (f"/jobs/{j}/", f"/jobs/{j}/metrics", f"/jobs/{j}/state"):
        assert client.get(url).status_code == 404, url
    assert client.post(f"/jobs/{j}/stop").status_code == 404
    assert "alice&#x27;s run" not in client.get("/jobs/").content.decode()


def test_the_slots_name_the_teams_job_to_its_members_only(
    team_job: Job, people: dict[str, Any]
) -> None:
    slots = [{"slot_id": "a", "job": team_job.pk}]
    assert visible_slots(slots, people["bob"])[0]["job"] == team_job.pk
    assert visible_slots(slots, people["olga"])[0] == {"slot_id": "a", "job": None, "busy": True}


def test_the_old_session_slots_route_which_named_every_job_is_gone(
    people: dict[str, Any],
) -> None:
    """``GET /api/cluster/slots`` named every slot's job to anyone logged in; the pages never
    read it (the Cluster page has its socket, scripts ``/api/v1/cluster/slots/``)."""
    client = Client()
    client.force_login(people["olga"])
    assert client.get("/api/cluster/slots").status_code == 404


@pytest.mark.django_db(transaction=True)
def test_the_job_websocket_lets_members_in_and_keeps_outsiders_out(
    django_user_model: Any, tmp_path: Path, redis_server: Any
) -> None:
    make = django_user_model.objects.create_user
    owner, member, outsider = make("ann"), make("ben"), make("oz")
    team = tenancy.save_team(None, {"name": "ws-team"})
    tenancy.set_member(team, owner)
    tenancy.set_member(team, member)
    job = services.submit_job(owner, name="ws", model_path=str(MLP), data_path=str(tmp_path),
                              team=team)  # fmt: skip

    def cookie(user: Any) -> bytes:
        c = Client()
        c.force_login(user)
        return f"sessionid={c.cookies['sessionid'].value}".encode()

    async def connects(user_cookie: bytes) -> bool:
        headers = [(b"origin", b"http://127.0.0.1:8000"), (b"host", b"127.0.0.1:8000"),
                   (b"cookie", user_cookie)]  # fmt: skip
        comm = WebsocketCommunicator(application, f"/ws/jobs/{job.pk}/", headers=headers)
        ok, _ = await comm.connect(timeout=5)
        await comm.disconnect()
        return bool(ok)

    cookies = {u.username: cookie(u) for u in (owner, member, outsider)}
    assert asyncio.run(connects(cookies["ann"])) is True
    assert asyncio.run(connects(cookies["ben"])) is True
    assert asyncio.run(connects(cookies["oz"])) is False


# Usage -----------------------------------------------------------------------------------

T0 = datetime(2026, 3, 2, 20, 0, tzinfo=UTC)  # a Monday, 20:00


def timeline(job: Job, *events: tuple[float, str, int]) -> None:
    """``(hours after T0, kind, workers)`` on the job's timeline; the job made before."""
    Job.objects.filter(pk=job.pk).update(created_at=T0 - timedelta(hours=1))
    for hours, kind, workers in events:
        data = {"workers": workers} if kind == "generation" else {}
        at = T0 + timedelta(hours=hours)
        services.write_events([JobEvent(job=job, kind=kind, message=kind, at=at, data=data)])


def test_intervals_come_from_generations_until_the_job_lets_go() -> None:
    at = [T0 + timedelta(hours=h) for h in range(6)]
    events = [
        (1, at[0], "generation", 2),
        (1, at[1], "generation", 1),
        (1, at[3], "completed", 0),
        (2, at[1], "generation", 3),
        (2, at[2], "restart", 0),
        (2, at[4], "generation", 1),
    ]
    found = usage.intervals(list(reversed(events)), now=at[5])  # any order
    assert sorted((i.job, i.start, i.end, i.slots) for i in found) == [
        (1, at[0], at[1], 2), (1, at[1], at[3], 1),
        (2, at[1], at[2], 3), (2, at[4], at[5], 1),  # still holding: until now
    ]  # fmt: skip


def test_a_span_is_cut_at_midnight_and_at_mondays() -> None:
    zone = ZoneInfo("UTC")
    piece = usage.Interval(1, T0 - timedelta(hours=2), T0 + timedelta(hours=6), 2)  # Mon 18-Tue 02
    days = list(usage.cut(piece, T0 - timedelta(days=9), T0 + timedelta(days=9), "day", zone))
    assert days == [(T0.date(), 6 * 3600 * 2), (T0.date() + timedelta(days=1), 2 * 3600 * 2)]
    sunday = usage.Interval(
        1, T0 - timedelta(hours=23), T0 - timedelta(hours=19), 1
    )  # Sun 21-Mon 01
    weeks = list(usage.cut(sunday, T0 - timedelta(days=9), T0, "week", zone))
    assert weeks == [(T0.date() - timedelta(days=7), 3 * 3600), (T0.date(), 3600)]
    clipped = list(usage.cut(piece, T0, T0 + timedelta(hours=1), "day", zone))
    assert clipped == [(T0.date(), 3600 * 2)]


def test_usage_is_slot_hours_per_team_and_user_of_the_jobs_one_may_see(
    teams: dict[str, Team], people: dict[str, Any], tmp_path: Path, redis_server: Any
) -> None:
    def job(owner: str, team: Team | None) -> Job:
        return services.submit_job(people[owner], name=owner, model_path=str(MLP),
                                   data_path=str(tmp_path), team=team)  # fmt: skip

    ran = job("alice", teams["vision"])  # 2 slots 1 h, then 1 slot 2 h: 4 slot-hours, Monday
    timeline(ran, (0, "generation", 2), (1, "generation", 1), (3, "completed", 0))
    Job.objects.filter(pk=ran.pk).update(
        state=Job.State.COMPLETED, finished_at=T0 + timedelta(hours=3)
    )
    late = job("bob", teams["vision"])  # 3 slots from Monday 23:00 to Tuesday 01:00
    timeline(late, (3, "generation", 3), (5, "suspended", 0))
    nlp = job("olga", teams["nlp"])  # 1 slot 10 h
    timeline(nlp, (0, "generation", 1), (10, "stopped", 0))
    solo = job("bob", None)
    timeline(solo, (0, "generation", 1), (2, "failed", 0))

    query = f"since={T0.date()}&until={(T0 + timedelta(days=2)).date()}"
    root = allocated(token_client(people["root"]).get(API + f"usage/?{query}&by=team").json())
    assert root["rows"] == [
        {"period": "2026-03-02", "team": "", "slot_hours": 2.0},
        {"period": "2026-03-02", "team": "nlp", "slot_hours": 4.0},
        {"period": "2026-03-02", "team": "vision", "slot_hours": 7.0},
        {"period": "2026-03-03", "team": "nlp", "slot_hours": 6.0},
        {"period": "2026-03-03", "team": "vision", "slot_hours": 3.0},
    ]
    assert root["totals"] == [{"team": "", "slot_hours": 2.0}, {"team": "nlp", "slot_hours": 10.0},
                              {"team": "vision", "slot_hours": 10.0}]  # fmt: skip
    weekly = allocated(
        token_client(people["root"]).get(API + f"usage/?{query}&by=user&period=week").json()
    )
    assert weekly["rows"] == [
        {"period": "2026-03-02", "user": "alice", "slot_hours": 4.0},
        {"period": "2026-03-02", "user": "bob", "slot_hours": 8.0},
        {"period": "2026-03-02", "user": "olga", "slot_hours": 10.0},
    ]
    # Bob sees his jobs and his team's; Olga hers; Lena (vision's lead) the team's.
    bob = token_client(people["bob"]).get(API + f"usage/?{query}&by=user").json()
    assert {t["user"]: t["slot_hours"] for t in bob["totals"]} == {"alice": 4.0, "bob": 8.0}
    olga = allocated(token_client(people["olga"]).get(API + f"usage/?{query}").json())
    assert olga["totals"] == [{"team": "nlp", "slot_hours": 10.0}]
    mistakes = [("by=owner", "by: one of team, user"), ("period=month", "period: one of day"),
                ("since=yesterday", "write a date (2026-01-05)"),
                ("since=2026-03-05&until=2026-03-01", "must be before until"),
                ("since=2000-01-01&until=2026-01-01", "at most 1000 days")]  # fmt: skip
    for bad, words in mistakes:
        reply = token_client(people["bob"]).get(API + f"usage/?{bad}")
        assert reply.status_code == 400 and words in reply.json()["error"], (bad, reply.json())


def allocated(answer: dict[str, Any]) -> dict[str, Any]:
    """A usage answer's rows and totals with their allocated slot-hours alone (no slot
    said how busy it was here: used slot-hours are 0; the waits, shrinks and reclaims
    each row also carries are tested in tests/test_team_shares.py)."""
    for key in ("rows", "totals"):
        assert all(r.pop("used_slot_hours") == 0 for r in answer[key]), answer
        for row in answer[key]:
            for field in ("waits", "average_wait_s", "shrinks", "reclaims"):
                row.pop(field)
    return answer


def test_the_policy_reads_the_teams_tree_and_the_groups_rules(teams: dict[str, Team]) -> None:
    child = tenancy.save_team(None, {"name": "vision-3d", "parent": "vision", "guarantee": 2,
                                     "limit": 4})  # fmt: skip
    read = {t["name"]: t for t in tenancy.policy_teams()}
    assert read["vision-3d"] == {"id": str(child.pk), "parent": str(teams["vision"].pk),
                                 "weight": 1, "guarantee": 2, "limit": 4,
                                 "name": "vision-3d"}  # fmt: skip
    assert read["nlp"]["parent"] == "" and read["nlp"]["weight"] == 2
    assert [(r.group, r.model) for r in tenancy.rules()] == [("a100", "*A100*"), ("h100", "*H100*")]
