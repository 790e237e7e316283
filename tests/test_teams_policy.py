"""Hierarchical fair share (fairshare with teams and users): tables, each case also run with
the jobs and the teams in reverse order, and hypothesis properties. Pure code."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from scheduler.policies import (
    RUNNING,
    Decision,
    JobView,
    Snapshot,
    Team,
    decide,
    entitlements,
    fairshare,
    slots_by_team,
)
from scheduler.policies.model import guarantees
from tests.harness.policies import ORDERS, job


def run(capacity: int, teams: list[Team], jobs: list[JobView], reverse: bool) -> Decision:
    if reverse:
        teams, jobs = teams[::-1], jobs[::-1]
    return decide(Snapshot(capacity, jobs, tuple(teams)))


VISION_NLP = [Team("vision", guarantee=6), Team("nlp", guarantee=2)]
RIGID_NLP = [job(f"n{i}", 1, i, team="nlp", current=1) for i in range(8)]
ORG = [
    Team("org", guarantee=6),
    Team("a", parent="org", guarantee=4),
    Team("b", parent="org"),
    Team("c", guarantee=2),
]

TABLE = {
    "guarantee: each team its guarantee when both ask for more": (
        8, VISION_NLP, [job("v1", team="vision"), job("n1", team="nlp")], {"v1": 6, "n1": 2}
    ),
    "guarantee, then what is left by weight": (
        10, [Team("vision", guarantee=6), Team("nlp")],
        [job("v1", 10, team="vision"), job("n1", 10, team="nlp")], {"v1": 8, "n1": 2},
    ),
    "weights share what guarantees leave": (
        12, [Team("a", weight=3), Team("b")], [job("a1", 12, team="a"), job("b1", 12, team="b")],
        {"a1": 9, "b1": 3},
    ),
    "borrow: an idle guarantee is lent": (
        8, VISION_NLP,
        [job("v0", team="vision", state="COMPLETED"), job("n1", team="nlp")], {"n1": 8},
    ),
    "reclaim: the owner asks again, the borrower shrinks at once to its guarantee": (
        8, VISION_NLP, [job("n1", team="nlp", current=8), job("v1", 8, 1, team="vision")],
        {"n1": 2, "v1": 6},
    ),
    "reclaim from rigid borrowers: suspended down to the borrower's guarantee": (
        8, VISION_NLP, [*RIGID_NLP, job("v1", 8, 10, team="vision")],
        {"v1": 6, "n0": 1, "n1": 1, **{f"n{i}": 0 for i in range(2, 8)}},
    ),
    "limit: a team never exceeds it, the rest goes to the others": (
        8, [Team("x", limit=3), Team("y")], [job("x1", team="x"), job("y1", team="y")],
        {"x1": 3, "y1": 5},
    ),
    "limit: slots idle rather than above a limit": (
        8, [Team("x", limit=3)], [job("x1", team="x")], {"x1": 3}
    ),
    "nested: a parent's guarantee covers its sub-teams', the rest by weight inside": (
        8, ORG, [job("a1", team="a"), job("b1", team="b"), job("c1", team="c")],
        {"a1": 5, "b1": 1, "c1": 2},
    ),
    "nested: a parent's limit caps its sub-teams": (
        8, [Team("org", limit=4), Team("a", parent="org"), Team("b", parent="org"), Team("c")],
        [job("a1", team="a"), job("b1", team="b"), job("c1", team="c")],
        {"a1": 2, "b1": 2, "c1": 4},
    ),
    "nested: a team's own users weigh as one sub-team beside its sub-teams": (
        9, [Team("org"), Team("a", parent="org")],
        [job("a1", 9, 0, team="a"), job("o1", 9, 1, team="org", owner="alice"),
         job("o2", 9, 2, team="org", owner="bob")],
        {"a1": 5, "o1": 2, "o2": 2},
    ),
    "empty team: it holds nothing and its guarantee is lent": (
        8, [Team("x", guarantee=4), Team("y")], [job("y1", team="y")], {"y1": 8}
    ),
    "jobs of no team weigh as one team of weight 1": (
        8, [Team("x", weight=3)],
        [job("x1", team="x"), job("f1", 8, 1, owner="alice"), job("f2", 8, 2, owner="bob")],
        {"x1": 6, "f1": 1, "f2": 1},
    ),
    "one user, no teams: flat fair share, priorities weigh": (
        10, [], [job("A", priority=1000, owner="alice"), job("B", 9, 1, priority=4000,
                                                            owner="alice")],
        {"A": 2, "B": 8},
    ),
    "two users on 8 slots: 4/4 by user, her three jobs share her 4": (
        8, [],
        [job("a1", 8, 0, owner="alice"), job("a2", 8, 1, owner="alice"),
         job("a3", 8, 2, owner="alice"), job("b1", 8, 3, owner="bob")],
        {"a1": 2, "a2": 1, "a3": 1, "b1": 4},
    ),
    "two users in one team: the same": (
        8, [Team("t")],
        [job("a1", 8, 0, owner="alice", team="t"), job("a2", 8, 1, owner="alice", team="t"),
         job("a3", 8, 2, owner="alice", team="t"), job("b1", 8, 3, owner="bob", team="t")],
        {"a1": 2, "a2": 1, "a3": 1, "b1": 4},
    ),
    "two teams of equal weight: 4/4 whoever has more jobs": (
        8, [Team("x"), Team("y")],
        [job("a1", 8, 0, owner="alice", team="x"), job("a2", 8, 1, owner="alice", team="x"),
         job("a3", 8, 2, owner="alice", team="x"), job("b1", 8, 3, owner="bob", team="y")],
        {"a1": 2, "a2": 1, "a3": 1, "b1": 4},
    ),
    "a fourth job of hers: Alice still 4, Bob still 4": (
        8, [],
        [*(job(f"a{i}", 8, i, owner="alice") for i in range(4)), job("b1", 8, 9, owner="bob")],
        {"a0": 1, "a1": 1, "a2": 1, "a3": 1, "b1": 4},
    ),
    "a user's jobs share by priority": (
        8, [],
        [job("a1", owner="alice", priority=1000), job("a2", 8, 1, owner="alice", priority=3000),
         job("b1", 8, 2, owner="bob")],
        {"a1": 1, "a2": 3, "b1": 4},
    ),
    "one user's minimum is a floor above the fair share of their own jobs": (
        8, [], [job("a1", min_workers=6, owner="alice"), job("a2", 8, 1, owner="alice")],
        {"a1": 6, "a2": 2},
    ),
    "a minimum above its user's entitlement waits while others ask for the slots": (
        8, [], [job("a1", min_workers=6, owner="alice"), job("b1", 8, 1, owner="bob")],
        {"a1": 0, "b1": 8},
    ),
    "... and runs on the slots the others leave": (
        8, [], [job("a1", min_workers=6, owner="alice"), job("b1", 2, 1, owner="bob")],
        {"a1": 6, "b1": 2},
    ),
    "a minimum never takes another team's guarantee": (
        8, [Team("x", guarantee=4), Team("y", guarantee=4)],
        [job("x1", min_workers=6, team="x"), job("y1", 8, 1, team="y")], {"x1": 0, "y1": 8},
    ),
    "... but takes the slots nobody else can use": (
        8, [Team("x", guarantee=4), Team("y", guarantee=4)],
        [job("x1", min_workers=6, team="x"), job("y1", 2, 1, team="y")], {"x1": 6, "y1": 2},
    ),
    "contention: each user admits within their entitlement, not first come": (
        4, [],
        [*(job(f"a{i}", 1, i, owner="alice") for i in range(4)),
         *(job(f"b{i}", 1, 4 + i, owner="bob") for i in range(4))],
        {"a0": 1, "a1": 1, "a2": 0, "a3": 0, "b0": 1, "b1": 1, "b2": 0, "b3": 0},
    ),
    "another user's rigid jobs do not squeeze an elastic job (all minimums would fit)": (
        8, [], [job("a1", owner="alice"), *(job(f"b{i}", 1, 1 + i, owner="bob") for i in range(6))],
        {"a1": 4, "b0": 1, "b1": 1, "b2": 1, "b3": 1, "b4": 0, "b5": 0},
    ),
    "contention: a slot no admitted job can use goes to a waiting job that fits": (
        4, [],
        [job("a1", 1, 0, owner="alice"), job("a2", 1, 1, owner="alice"),
         job("a3", 1, 2, owner="alice"), job("b1", 3, 3, min_workers=3, owner="bob")],
        {"a1": 1, "a2": 1, "a3": 1, "b1": 0},
    ),
    "capacity below the guarantees: they shrink in proportion": (
        4, VISION_NLP, [job("v1", team="vision"), job("n1", team="nlp")], {"v1": 3, "n1": 1}
    ),
    "no slots: everyone waits": (
        0, VISION_NLP, [job("v1", team="vision", current=4), job("n1", team="nlp")],
        {"v1": 0, "n1": 0},
    ),
    # Within a user, jobs of one priority are admitted by remaining work (slot-seconds),
    # the least first, an unknown one (0) before any known; a higher priority still first.
    "within its quota a team runs its shortest remaining work first": (
        3, [Team("x", guarantee=2), Team("y", guarantee=1)],
        [job("x1", 1, 0, team="x", remaining=900.0, current=1),
         job("x2", 1, 1, team="x", remaining=50.0), job("x3", 1, 2, team="x", remaining=200.0),
         job("y1", 1, 3, team="y", remaining=5000.0, current=1),
         job("y2", 1, 4, team="y", remaining=10.0)],
        {"x1": 0, "x2": 1, "x3": 1, "y1": 0, "y2": 1},
    ),
    "a job not yet measured goes first; priority before remaining work": (
        2, [Team("x")],
        [job("x1", 1, 0, team="x", remaining=50.0), job("x2", 1, 1, team="x"),
         job("x3", 1, 2, team="x", remaining=900.0, priority=10000)],
        {"x1": 0, "x2": 1, "x3": 1},
    ),
}  # fmt: skip


@ORDERS
@pytest.mark.parametrize("capacity, teams, jobs, expected", TABLE.values(), ids=TABLE.keys())
def test_hierarchical_fair_share_table(
    capacity: int, teams: list[Team], jobs: list[JobView], expected: dict[str, int], reverse: bool
) -> None:
    assert run(capacity, teams, jobs, reverse).targets == expected


# The seeds' scenario on 8 slots: one user, in a team of their own or in none.
SEEDS = [
    ([job("A")], {"A": 8}),
    ([job("A", current=8), job("B", submitted=1)], {"A": 4, "B": 4}),
    ([job("A", current=4), job("B", submitted=1, current=4, priority=10000)], {"A": 3, "B": 5}),
    (
        [job("A", current=3, state="COMPLETED"), job("B", submitted=1, current=5, priority=10000)],
        {"B": 8},
    ),
]


@ORDERS
@pytest.mark.parametrize("team", ["", "t"], ids=["no-team", "one-team"])
@pytest.mark.parametrize("jobs, expected", SEEDS, ids=["8", "4/4", "5/3", "8 again"])
def test_one_user_still_gets_the_seeds_numbers(
    jobs: list[JobView], expected: dict[str, int], team: str, reverse: bool
) -> None:
    mine = [replace(j, owner="alice", team=team) for j in jobs]
    teams = [Team("t")] if team else []
    assert run(8, teams, mine, reverse).targets == expected


def test_a_reclaimed_guarantee_comes_back_at_once_and_in_place() -> None:
    """Borrow, then the owner returns: the borrower shrinks in the very next decision, to
    its guarantee, never below; the owner's job ends: the borrower grows back."""
    nlp = job("n1", team="nlp")
    alone = decide(Snapshot(8, [nlp], tuple(VISION_NLP)))
    assert alone.targets == {"n1": 8}
    held = replace(nlp, current=8, state=RUNNING)
    back = decide(Snapshot(8, [held, job("v1", 8, 1, team="vision")], tuple(VISION_NLP)))
    assert back.targets == {"n1": 2, "v1": 6}
    assert back.reasons["n1"].startswith("8→2: team nlp at its guarantee 2 of 8 slots")
    assert back.reasons["v1"].startswith("0→6: team vision at its guarantee 6 of 8 slots")
    done = job("v1", 8, 1, team="vision", current=6, state="COMPLETED")
    shrunk = replace(held, current=2)
    assert decide(Snapshot(8, [shrunk, done], tuple(VISION_NLP))).targets == {"n1": 8}


def test_reasons_name_the_level_that_decided() -> None:
    two_users = [job(f"a{i}", 8, i, owner="alice", team="t") for i in range(3)]
    two_users.append(job("b1", 8, 3, owner="bob", team="t"))
    decision = decide(Snapshot(8, two_users, (Team("t", name="vision"),)))
    assert decision.reasons["a1"] == (
        "0→1: team vision alone on 8 slots; alice gets 4 of team vision's 8 slots, equal "
        "among 2 users; shares 4 slots with 2 other jobs (a0 at 5000, a2 at 5000) at "
        "priority 5000; exact share 1.33"
    )
    limited = [job(f"x{i}", 1, i, team="x") for i in range(4)] + [job("y1", team="y")]
    decision = decide(Snapshot(8, limited, (Team("x", limit=3), Team("y"))))
    assert decision.targets["x3"] == 0
    assert "x3" not in decision.reasons  # it waited and still waits: nothing changes
    assert decision.reasons["x0"].startswith("0→1: team x at its limit 3; ")
    assert decision.reasons["y1"].startswith("0→5: team y: 5 of 8 slots by weight 1 of 2; ")
    weighted = [job("v1", 10, team="vision"), job("n1", 10, team="nlp")]
    decision = decide(Snapshot(10, weighted, (Team("vision", guarantee=6), Team("nlp"))))
    assert decision.reasons["v1"].startswith(
        "0→8: team vision: 8 of 10 slots, its guarantee 6 and 2 more by weight 1 of 2; "
    )
    nested = [job("a1", team="a"), job("b1", team="b"), job("c1", team="c")]
    decision = decide(Snapshot(8, nested, tuple(ORG)))
    assert decision.reasons["a1"].startswith(
        "0→5: team a: 5 of team org's 6 slots, its guarantee 4 and 1 more by weight 1 of 2; "
    )


def test_a_waiting_job_says_what_keeps_it_out() -> None:
    rigid = [job(f"x{i}", 1, i, team="x", current=1) for i in range(4)]
    decision = decide(Snapshot(8, rigid, (Team("x", limit=3),)))
    assert decision.reasons == {"x3": "1→0: suspended: team x at its limit 3"}
    contention = [job(f"a{i}", 1, i, owner="alice") for i in range(3)]
    contention.append(job("b1", 3, 3, min_workers=3, owner="bob", current=3))
    decision = decide(Snapshot(4, contention))
    assert decision.reasons["b1"] == (
        "3→0: suspended: its min 3 does not fit in bob's 2 entitled slots beside the 0 their "
        "admitted jobs' minimums take, nor in slots the others leave"
    )


def test_a_decision_carries_each_team_and_users_entitlement() -> None:
    jobs = [
        job("v1", 10, team="vision", owner="alice"),
        job("v2", 10, 1, team="vision", owner="bob"),
        job("n1", 10, 2, team="nlp", owner="carol"),
        job("f1", 10, 3, owner="dan"),
    ]
    teams = (Team("vision", guarantee=6), Team("nlp"), Team("idle", guarantee=2))
    snapshot = Snapshot(12, jobs, teams)
    decision = decide(snapshot)
    # Guarantees 6 (vision) and 2 (idle: no demand, lent); the 6 left by weight over three.
    assert decision.teams == {"vision": 8.0, "nlp": 2.0, "idle": 0.0, "": 2.0}
    assert decision.users == {
        "vision": {"alice": 4.0, "bob": 4.0},
        "nlp": {"carol": 2.0},
        "": {"dan": 2.0},
    }
    assert entitlements(snapshot) == (decision.teams, decision.users)
    assert slots_by_team(snapshot, decision.targets) == {"vision": 8, "nlp": 2, "idle": 0, "": 2}
    inputs = decision.job_inputs(jobs[0], decision.summary())
    assert inputs["team"] == "vision" and inputs["owner"] == "alice"
    assert (inputs["team_entitlement"], inputs["user_entitlement"]) == (8.0, 4.0)
    assert decision.inputs()["teams"] == decision.teams


def test_nested_entitlements_add_up_to_the_parents() -> None:
    snapshot = Snapshot(
        8, [job("a1", team="a"), job("b1", team="b"), job("c1", team="c")], tuple(ORG)
    )
    by_team, _ = entitlements(snapshot)
    assert by_team == {"org": 6.0, "a": 5.0, "b": 1.0, "c": 2.0}
    assert slots_by_team(snapshot, decide(snapshot).targets) == by_team


def test_bad_teams_are_refused_with_a_reason() -> None:
    with pytest.raises(ValueError, match="weight"):
        Team("x", weight=0)
    with pytest.raises(ValueError, match="guarantee is negative"):
        Team("x", guarantee=-1)
    with pytest.raises(ValueError, match="above its limit"):
        Team("x", guarantee=4, limit=3)
    with pytest.raises(ValueError, match="own parent"):
        Team("x", parent="x")
    with pytest.raises(ValueError, match="needs an id"):
        Team("")
    with pytest.raises(ValueError, match="not unique"):
        Snapshot(8, [], (Team("x"), Team("x")))
    with pytest.raises(ValueError, match="parent 'y' is not a team here"):
        Snapshot(8, [], (Team("x", parent="y"),))
    with pytest.raises(ValueError, match="cycle"):
        Snapshot(8, [], (Team("x", parent="y"), Team("y", parent="x")))
    with pytest.raises(ValueError, match="does not hold"):
        Snapshot(8, [job("j", team="ghost")], (Team("x"),))
    with pytest.raises(ValueError, match="does not hold"):
        Snapshot(8, [job("j", team="ghost")])
    with pytest.raises(ValueError, match="sub-teams' guarantees"):
        Snapshot(8, [], (Team("p", limit=3), Team("c", parent="p", guarantee=4)))


def test_a_parents_guarantee_is_at_least_its_sub_teams() -> None:
    teams = (Team("p", guarantee=1), Team("c", parent="p", guarantee=3), Team("d", parent="p"))
    assert guarantees(teams) == {"p": 3, "c": 3, "d": 0}
    jobs = [job("c1", team="c"), job("d1", team="d"), job("e1", team="e")]
    decision = decide(Snapshot(8, jobs, (*teams, Team("e"))))
    # p claims 3 (its sub-team's guarantee), e none; the 5 left 2.5/2.5: p 5.5, e 2.5.
    assert decision.teams["p"] == 5.5 and decision.teams["e"] == 2.5


# Properties -------------------------------------------------------------------------------

OWNERS = ["", "alice", "bob"]


@st.composite
def team_snapshots(draw: st.DrawFn, min_ones: bool = False) -> Snapshot:
    """Up to 5 teams (each under the group or an earlier team), up to 14 jobs of up to 3
    owners in them or in none, on up to 40 slots, their remaining work known or not; few
    distinct values, so ties happen."""
    teams: list[Team] = []
    for index in range(draw(st.integers(0, 5))):
        parent = draw(st.sampled_from(["", *(t.id for t in teams)]))
        guarantee = draw(st.integers(0, 6))
        limit = draw(st.one_of(st.none(), st.integers(guarantee, guarantee + 10)))
        weight = draw(st.integers(1, 3))
        teams.append(Team(f"t{index}", parent, weight, guarantee, limit))
    jobs = []
    for index in range(draw(st.integers(0, 14))):
        top = draw(st.integers(1, 8))
        jobs.append(
            JobView(
                f"j{index}",
                top,
                submitted=draw(st.integers(0, 3)),
                priority=draw(st.sampled_from([1000, 5000, 10000])),
                min_workers=1 if min_ones else draw(st.integers(1, top)),
                current=draw(st.integers(0, top)),
                owner=draw(st.sampled_from(OWNERS)),
                team=draw(st.sampled_from(["", *(t.id for t in teams)])),
                remaining=draw(st.sampled_from([0.0, 0.0, 50.0, 100.0])),
            )
        )
    try:
        return Snapshot(draw(st.integers(0, 40)), jobs, tuple(teams))
    except ValueError:
        assume(False)
        raise


PROPERTY = settings(max_examples=300, deadline=None)


def team_demands(snapshot: Snapshot) -> dict[str, int]:
    """Each team's demand as the contract defines it: its subtree's max_workers, each team's
    part capped by its limit (computed here independently of the policy)."""
    own: dict[str, int] = {t.id: 0 for t in snapshot.teams}
    for j in snapshot.jobs:
        if j.team:
            own[j.team] += j.max_workers
    children: dict[str, list[Team]] = {}
    for t in snapshot.teams:
        children.setdefault(t.parent, []).append(t)
    demand: dict[str, int] = {}

    def visit(team: Team) -> int:
        total = own[team.id] + sum(visit(c) for c in children.get(team.id, []))
        demand[team.id] = total if team.limit is None else min(team.limit, total)
        return demand[team.id]

    for top in children.get("", []):
        visit(top)
    return demand


@PROPERTY
@given(team_snapshots())
def test_never_more_slots_than_exist_and_every_job_within_its_min_and_max(
    snapshot: Snapshot,
) -> None:
    targets = decide(snapshot).targets
    assert sum(targets.values()) <= snapshot.capacity
    for j in snapshot.jobs:
        assert targets[j.id] == 0 or j.min_workers <= targets[j.id] <= j.max_workers


@PROPERTY
@given(team_snapshots())
def test_no_team_above_its_limit(snapshot: Snapshot) -> None:
    held = slots_by_team(snapshot, decide(snapshot).targets)
    for team in snapshot.teams:
        assert team.limit is None or held[team.id] <= team.limit


@PROPERTY
@given(team_snapshots(min_ones=True))
def test_every_team_gets_its_guarantee_up_to_its_demand(snapshot: Snapshot) -> None:
    """With minimums of 1 and guarantees that fit in the capacity, no team holds less than
    min(guarantee, demand), however the others' jobs are shaped."""
    covered = guarantees(snapshot.teams)
    assume(sum(covered[t.id] for t in snapshot.teams if not t.parent) <= snapshot.capacity)
    held = slots_by_team(snapshot, decide(snapshot).targets)
    demand = team_demands(snapshot)
    for team in snapshot.teams:
        assert held[team.id] >= min(covered[team.id], demand[team.id]), team.id


@PROPERTY
@given(team_snapshots())
def test_work_conserving_up_to_limits_and_minimums(snapshot: Snapshot) -> None:
    """A free slot only while every job is at its max, held by a limit, or waits with a
    minimum that fits neither the free slots nor under a limit."""
    targets = decide(snapshot).targets
    free = snapshot.capacity - sum(targets.values())
    if not free:
        return
    held = slots_by_team(snapshot, targets)
    parent = {t.id: t for t in snapshot.teams}

    def path(team: str) -> list[Team]:
        chain = []
        while team:
            chain.append(parent[team])
            team = parent[team].parent
        return chain

    for j in snapshot.jobs:
        if targets[j.id] == j.max_workers:
            continue
        limits = [t for t in path(j.team) if t.limit is not None]
        if targets[j.id]:
            assert any(held[t.id] == t.limit for t in limits), j
        else:
            assert j.min_workers > free or any(
                held[t.id] + j.min_workers > (t.limit or 0) for t in limits
            ), j


@PROPERTY
@given(team_snapshots(), st.randoms(use_true_random=False))
def test_the_same_answer_for_any_order_of_jobs_and_teams(
    snapshot: Snapshot, rng: random.Random
) -> None:
    jobs, teams = list(snapshot.jobs), list(snapshot.teams)
    rng.shuffle(jobs)
    rng.shuffle(teams)
    first, second = decide(snapshot), decide(Snapshot(snapshot.capacity, jobs, tuple(teams)))
    assert (first.targets, first.reasons, first.shares, first.teams, first.users) == (
        second.targets,
        second.reasons,
        second.shares,
        second.teams,
        second.users,
    )


@PROPERTY
@given(team_snapshots())
def test_one_user_in_no_team_or_one_team_is_flat_fair_share(snapshot: Snapshot) -> None:
    """The hierarchy's own path (not the shortcut decide takes) gives flat fair share's
    slots and shares for one user, whether in no team or alone in one team."""
    mine = [replace(j, owner="alice", team="") for j in snapshot.jobs]
    flat = fairshare.flat(Snapshot(snapshot.capacity, mine))
    tree = fairshare.hierarchical(Snapshot(snapshot.capacity, mine))
    assert (tree.targets, tree.shares) == (flat.targets, flat.shares)
    theirs = [replace(j, team="t") for j in mine]
    team = decide(Snapshot(snapshot.capacity, theirs, (Team("t"),)))
    assert (team.targets, team.shares) == (flat.targets, flat.shares)


@PROPERTY
@given(team_snapshots())
def test_entitlements_divide_the_capacity_up_to_demand(snapshot: Snapshot) -> None:
    by_team, by_user = entitlements(snapshot)
    demand = sum(j.max_workers for j in snapshot.jobs)
    top = [t.id for t in snapshot.teams if not t.parent]
    total = sum(by_team[t] for t in top) + by_team.get("", 0.0)
    bounded = min(
        snapshot.capacity,
        sum(team_demands(snapshot)[t] for t in top)
        + sum(j.max_workers for j in snapshot.jobs if not j.team),
    )
    assert total == pytest.approx(bounded) and total <= min(snapshot.capacity, demand) + 1e-9
    for team, users in by_user.items():
        if team and not any(t.parent == team for t in snapshot.teams):
            assert sum(users.values()) == pytest.approx(by_team[team])


# The kill-preemption quota baseline (scheduler/policies/quota.py) ---------------------------

X_Y = [Team("x", guarantee=4), Team("y", guarantee=4)]
QUOTA = {
    "within its quota a gang is admitted whole": (8, X_Y, [job("x1", 4, team="x")], {"x1": 4}),
    "an idle quota is borrowed by another team's gang": (
        8, X_Y, [job("x1", 8, team="x")], {"x1": 8}
    ),
    "a team under its quota preempts a borrowing gang, which loses all its slots": (
        8, X_Y, [job("x1", 8, team="x", current=8), job("y1", 4, 1, team="y")],
        {"x1": 0, "y1": 4},
    ),
    "a gang beyond its quota waits for free slots, preempting no one": (
        8, [Team("x", guarantee=2), Team("y", guarantee=6)],
        [job("y1", 6, team="y", current=6), job("x1", 4, 1, team="x")], {"y1": 6, "x1": 0},
    ),
    "a team within its quota is never preempted": (
        8, X_Y, [job("x1", 4, team="x", current=4), job("y1", 4, 1, team="y", current=4),
                 job("y2", 4, 2, team="y")],
        {"x1": 4, "y1": 4, "y2": 0},
    ),
    "the most recently started borrower goes first": (
        8, X_Y,
        [job("x1", 2, 0, team="x", current=2, attained=900.0),
         job("x2", 4, 1, team="x", current=4, attained=100.0),
         job("x3", 2, 2, team="x", current=2, attained=500.0), job("y1", 2, 3, team="y")],
        {"x1": 2, "x2": 0, "x3": 2, "y1": 2},
    ),
    "a smaller gang behind one that does not fit starts (best-effort FIFO)": (
        8, [Team("x"), Team("y", guarantee=8)],
        [job("y1", 5, team="y", current=5), job("x1", 4, 1, team="x"), job("x2", 2, 2, team="x")],
        {"y1": 5, "x1": 0, "x2": 2},
    ),
}  # fmt: skip


@ORDERS
@pytest.mark.parametrize("capacity, teams, jobs, expected", QUOTA.values(), ids=QUOTA.keys())
def test_quota_preempt_table(
    capacity: int, teams: list[Team], jobs: list[JobView], expected: dict[str, int], reverse: bool
) -> None:
    if reverse:
        teams, jobs = teams[::-1], jobs[::-1]
    assert decide(Snapshot(capacity, jobs, tuple(teams)), "quota-preempt").targets == expected


@PROPERTY
@given(team_snapshots())
def test_quota_preempt_never_resizes_a_gang_and_respects_limits(snapshot: Snapshot) -> None:
    targets = decide(snapshot, "quota-preempt").targets
    assert sum(targets.values()) <= snapshot.capacity
    for j in snapshot.jobs:
        assert targets[j.id] in (0, j.current or min(j.max_workers, snapshot.capacity))
    for team in snapshot.teams:  # a limit binds what a team starts, never what it runs
        mine = [j for j in snapshot.jobs if j.team == team.id]
        held = sum(targets[j.id] for j in mine)
        kept = sum(targets[j.id] for j in mine if j.current)
        assert team.limit is None or held <= max(team.limit, kept)
