"""The scheduler says why, once (docs/architecture.md, "Scheduling contract"): each decision
gives every job its place among its group's waiting jobs and the reason in the policy's
words, the live loop publishes them in the allocation record, and the pages and the API
read them there. The priority preview and the Teams preview build their snapshots with the
live loop's own builder, so under every policy, the goodput one too (its views and the
hosts' size included), they decide what the scheduler decides."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client

from edtweb.redis_server import RedisServer
from edtweb.tenancy import preview as teams_preview
from edtweb.tenancy import services as tenancy
from edtweb.training import history
from edtweb.training.live_adapter import live_scheduler
from edtweb.training.models import Job, Metric
from protocol.connection import connect
from scheduler.policies import POLICIES, JobView, Snapshot, Team, decide, slots_by_team
from scheduler.store import Store

pytestmark = pytest.mark.django_db(transaction=True)


# The decision's standing, pure ----------------------------------------------------------


def jobs_for(policy: str) -> list[JobView]:
    """Two teams' jobs on 6 slots: more minimums than slots, so some wait under every
    policy; one in goodput mode."""
    return [
        JobView("1", 4, 1.0, 5000, 2, owner="a", team="t1", name="one"),
        JobView("2", 4, 2.0, 9000, 3, owner="b", team="t2", name="two"),
        JobView("3", 2, 3.0, 5000, 2, owner="a", team="t1", name="three"),
        JobView("4", 8, 4.0, 5000, 4, owner="b", team="t2", name="four",
                batch_range=(32, 512), base_batch=64),
    ]  # fmt: skip


TEAMS = (Team("t1", guarantee=2), Team("t2", weight=2))


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_job_has_a_place_or_its_slots_and_the_policys_reason(policy: str) -> None:
    for jobs in (jobs_for(policy), jobs_for(policy)[::-1]):
        decision = decide(Snapshot(6, jobs, TEAMS, slots_per_host=4), policy)
        standing = decision.standing()
        assert set(standing) == {job.id for job in jobs}
        waiting = [k for k, t in decision.targets.items() if not t]
        assert waiting, decision.targets  # the table leaves some waiting under every policy
        assert sorted(standing[k][0] for k in waiting) == list(range(1, len(waiting) + 1))
        for key, (place, reason) in standing.items():
            assert reason, key
            assert (place == 0) == bool(decision.targets[key])
        # The reason of a job whose count changes is the one its "scaled" event records.
        for key, line in decision.reasons.items():
            assert line.endswith(standing[key][1]), (line, standing[key])
    forward = decide(Snapshot(6, jobs_for(policy), TEAMS, 4), policy).standing()
    backward = decide(Snapshot(6, jobs_for(policy)[::-1], TEAMS, 4), policy).standing()
    assert forward == backward


@pytest.mark.parametrize("policy", ["fairshare", "goodput", "priority"])
def test_a_job_alone_on_an_idle_cluster_gets_its_slots_and_no_word_of_a_missing_slot(
    policy: str,
) -> None:
    decision = decide(Snapshot(4, [JobView("1", 4, name="solo")]), policy)
    place, reason = decision.standing()["1"]
    assert decision.targets == {"1": 4} and place == 0
    assert "wait" not in reason and "free" not in reason, reason


# The live loop against both previews ----------------------------------------------------


@pytest.fixture
def world(private_redis: RedisServer, redis_server: RedisServer, settings: Any,
          people: dict[str, Any]) -> Iterator[Store]:  # fmt: skip
    """The scheduler's and the web's Redis, of this test alone; eight alive slots on two
    hosts of four; teams ``vision`` (Alice, Bob; guarantee 3) and ``nlp`` (Olga, weight 2);
    five jobs, one in goodput mode with measured iterations at two sizes."""
    settings.REDIS_URL = private_redis.url
    client = connect(private_redis.url)
    store = Store(client)
    slots_afresh(store)
    vision = tenancy.save_team(None, {"name": "vision", "guarantee": 3})
    nlp = tenancy.save_team(None, {"name": "nlp", "weight": 2})
    for name in ("alice", "bob"):
        tenancy.set_member(vision, people[name])
    tenancy.set_member(nlp, people["olga"])

    def job(owner: str, name: str, team: Any, **fields: Any) -> Job:
        return Job.objects.create(owner=people[owner], name=name, team=team,
                                  model_path="m.py", data_path="d", **fields)  # fmt: skip

    job("alice", "a1", vision, max_workers=4, min_workers=2)
    job("bob", "b1", vision, max_workers=3, priority=8000)
    job("olga", "o1", nlp, max_workers=4, min_workers=3)
    job("olga", "o2", nlp, max_workers=2, min_workers=2, priority=2000)
    fit = job("alice", "g1", vision, max_workers=8, min_workers=1, batch_size=64,
              batch_min=32, batch_max=1024)  # fmt: skip
    Metric.objects.bulk_create(
        Metric(job=fit, kind="train", step=step, epoch=0, time=float(step),
               values={"loss": 1.0, "workers": workers, "batch": 64, "gns": 400.0,
                       "samples_per_s": 64.0 * workers ** 0.8})
        for step, workers in enumerate([1] * 5 + [2] * 5)
    )  # fmt: skip
    yield store
    client.close()


def slots_afresh(store: Store) -> None:
    """An empty Redis with eight alive slots on two hosts of four."""
    store.r.flushdb()
    for host in ("sp-a", "sp-b"):
        for index in range(4):
            slot = store.register_slot(host, index, "cpu", pid=1, host_slots=4)
            store.heartbeat(slot, {"kind": "cpu"}, ttl=120)


def names(decision_targets: dict[str, int]) -> dict[str, int]:
    rows = dict(Job.objects.values_list("pk", "name"))
    return {rows[int(k)]: v for k, v in decision_targets.items()}


def test_the_scheduler_and_both_previews_decide_alike_under_every_policy(
    world: Store, people: dict[str, Any]
) -> None:
    for policy in sorted(POLICIES):
        slots_afresh(world)
        alike(world, people, policy)


def alike(world: Store, people: dict[str, Any], policy: str) -> None:
    live = live_scheduler(policy)
    alive = world.alive_slots()
    live.step(alive)  # the first decision: learners dispatched, the slots held
    live.step(alive)  # decided again over those holdings
    world.save_allocations(live.allocations(), ttl=60)
    (decision,) = live.decisions.values()
    targets = names(decision.targets)
    assert sum(targets.values()) <= 8 and any(not t for t in targets.values()), targets

    # The priority preview at each job's own priority is the scheduler's decision.
    for job in Job.objects.all():
        shown = history.preview(job, job.priority, people["root"])
        assert shown["targets"] == targets, (policy, job.name, shown)

    # The Teams preview of no change: each team's slots are the scheduler's.
    (group,) = teams_preview.preview({})["groups"]
    by_team = slots_by_team(decision.snapshot, decision.targets)
    ids = {t.name: str(t.pk) for t in tenancy.Team.objects.all()}
    for row in group["teams"]:
        slots = by_team.get(ids.get(row["team"], ""), 0)
        assert row["before"] == row["after"] == slots, (policy, row)

    # The allocation record carries every job's place and reason, as the decision said.
    record = world.allocations()
    assert record.standing == live.standing
    assert {str(k): v for k, v in record.standing.items()} == decision.standing()


def test_the_page_and_the_api_show_the_place_and_reason_the_scheduler_published(
    world: Store, people: dict[str, Any]
) -> None:
    live = live_scheduler("fairshare")
    live.step(world.alive_slots())
    world.save_allocations(live.allocations(), ttl=60)
    waiting = [j for j in Job.objects.order_by("pk") if live.standing[j.pk][0]]
    assert waiting
    client = Client()
    client.force_login(people["olga"])
    for job in waiting:
        if job.owner != people["olga"]:
            continue
        place, reason = live.standing[job.pk]
        api = client.get(f"/api/v1/jobs/{job.pk}/").json()
        assert (api["position"], api["reason"].endswith(reason)) == (place, True), api
        assert api["waiting"] == api["reason"]
        page = client.get(f"/jobs/{job.pk}/").content.decode()
        assert "in group default&#x27;s queue; " in page and "slot" in page
        queue = client.get("/api/v1/cluster/queue/").json()
        assert (job.pk, place) in [(q["id"], q["position"]) for q in queue]


def test_a_waiting_job_shows_when_it_should_start_as_a_range(
    world: Store, people: dict[str, Any]
) -> None:
    """The projection (edtweb/training/projection.py) runs the scheduler's own snapshot
    forward: a job the decision leaves waiting gets a start later than now, as a range,
    on the API and the page; one given slots starts now."""
    live = live_scheduler("fairshare")
    live.step(world.alive_slots())
    world.save_allocations(live.allocations(), ttl=60)
    client = Client()
    client.force_login(people["root"])
    for job in Job.objects.all():
        api = client.get(f"/api/v1/jobs/{job.pk}/").json()
        low, high = api["start_estimate"]
        assert 0 <= low <= high and api["end_estimate"][0] > high, api
        if live.standing[job.pk][0]:  # waiting
            assert low > 0 and api["estimate_text"].startswith("starts in"), api
            page = client.get(f"/jobs/{job.pk}/").content.decode()
            assert 'id="estimate"' in page and api["estimate_text"] in page
        else:
            assert api["estimate_text"].startswith("starts now"), api
