"""The idle rule (docs/architecture.md, "Idle jobs"), pure: tables of looks at a job's
slots, whose rule holds an idle job at its minimum, and a decision over a snapshot with an
idle job held there (each also with its input in reverse order). No database, no Redis."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.policies import Snapshot, Team, decide
from scheduler.policies import idle as rule
from scheduler.policies.idle import IdleRule, Spell
from tests.harness.policies import ORDERS, job

RULE = IdleRule(below=0.10, seconds=60, settle=10)
AB = ("a", "b")

# Looks at one job: (time, its members, the slots' figures) in order; then whether it is
# idle after the last, and since when.
LOOKS: dict[str, tuple[list[tuple[float, tuple[str, ...], dict[str, Any]]], bool, float | None]] = {
    "under for the whole time: idle": (
        [(0, AB, {"a": 0.0, "b": 0.05}), (10, AB, {"a": 0.01, "b": 0.02}),
         (70, AB, {"a": 0.0, "b": 0.0})], True, 10),
    "not yet the whole time": (
        [(0, AB, {}), (10, AB, {"a": 0.0, "b": 0.0}), (69, AB, {"a": 0.0, "b": 0.0})],
        False, 10),
    "one slot busy ends the spell": (
        [(0, AB, {}), (10, AB, {"a": 0.0, "b": 0.0}), (40, AB, {"a": 0.0, "b": 0.5}),
         (80, AB, {"a": 0.0, "b": 0.0})], False, 80),
    "at the threshold is busy": (
        [(0, AB, {}), (10, AB, {"a": 0.1, "b": 0.0}), (90, AB, {"a": 0.1, "b": 0.0})],
        False, None),
    "a slot without a figure is not under": (
        [(0, AB, {}), (10, AB, {"a": 0.0}), (90, AB, {"a": 0.0})], False, None),
    "figures while settling judge nothing": (
        [(0, AB, {"a": 0.9, "b": 0.9}), (5, AB, {"a": 0.0, "b": 0.0}),
         (10, AB, {"a": 0.0, "b": 0.0}), (70, AB, {"a": 0.0, "b": 0.0})], True, 10),
    "a shrink keeps the spell and settles": (
        [(0, AB, {}), (10, AB, {"a": 0.0, "b": 0.0}), (70, ("a",), {"a": 0.0, "b": 0.0}),
         (75, ("a",), {"a": 0.5})], True, 10),
    "a slot gained starts afresh": (
        [(0, ("a",), {}), (10, ("a",), {"a": 0.0}), (70, AB, {"a": 0.0, "b": 0.0}),
         (85, AB, {"a": 0.0, "b": 0.0})], False, 85),
}  # fmt: skip


@pytest.mark.parametrize("looks,idle,since", LOOKS.values(), ids=LOOKS.keys())
@ORDERS
def test_a_job_is_idle_when_every_slot_stayed_under_for_the_rules_time(
    looks: list[tuple[float, tuple[str, ...], dict[str, Any]]], idle: bool,
    since: float | None, reverse: bool,
) -> None:  # fmt: skip
    spells: dict[str, Spell] = {}
    for now, members, figures in looks:
        held = tuple(reversed(members)) if reverse else members
        # A busy job beside it, so that the table also shows jobs are judged apart.
        spells = rule.watch(spells, {"j": held, "busy": ("c",)}, {**figures, "c": 0.9}, now, RULE)
    assert spells["j"].since == since
    assert spells["j"].idle(looks[-1][0], RULE) is idle
    assert rule.idle(spells, looks[-1][0], RULE) == ({"j": since} if idle else {})


def test_a_job_without_members_has_no_spell_and_a_rule_of_no_time_flags_none() -> None:
    spells = rule.watch({}, {"j": ("a",)}, {"a": 0.0}, 0, RULE)
    spells = rule.watch(spells, {"j": ("a",)}, {"a": 0.0}, 10, RULE)
    assert rule.watch(spells, {"j": ()}, {"a": 0.0}, 20, RULE) == {}
    off = IdleRule(below=0.1, seconds=0, settle=0)
    assert rule.idle(spells, 10_000, off) == {}
    assert rule.idle(spells, 10_000, RULE) == {"j": 10}


@pytest.mark.parametrize(
    "given", [{"below": 1.5}, {"below": -0.1}, {"seconds": -1}, {"seconds": float("inf")}]
)
def test_a_rule_out_of_bounds_is_refused(given: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        IdleRule(**given)


TEAMS = (Team("1", name="research"), Team("2", parent="1", name="vision"), Team("3", name="nlp"))
SHRUNK_BY = {
    "its group's rule": ("2", "gpu", (), ("gpu",), "group gpu"),
    "its own team's rule": ("2", "gpu", ("2",), (), "team vision"),
    "a team above it": ("2", "gpu", ("1",), (), "team research"),
    "another team's rule": ("2", "gpu", ("3",), ("cpu",), ""),
    "a job of no team": ("", "gpu", ("1", "2", "3"), (), ""),
}


@pytest.mark.parametrize("team,group,teams,groups,by", SHRUNK_BY.values(), ids=SHRUNK_BY.keys())
@ORDERS
def test_whose_rule_holds_an_idle_job_at_its_minimum(
    team: str, group: str, teams: tuple[str, ...], groups: tuple[str, ...], by: str,
    reverse: bool,
) -> None:  # fmt: skip
    known = TEAMS[::-1] if reverse else TEAMS
    assert rule.shrunk_by(team, group, known, frozenset(teams), frozenset(groups)) == by


@ORDERS
def test_an_idle_job_held_at_its_minimum_gives_its_slots_to_the_others(reverse: bool) -> None:
    jobs = [job("idle", 8, current=6, min_workers=2), job("busy", 8, submitted=1, current=2)]
    snapshot = rule.at_minimum(Snapshot(8, jobs[::-1] if reverse else jobs), {"idle"})
    why = rule.reason(RULE, 2, "group default")
    decision = rule.explained(decide(snapshot), {"idle": why})
    assert decision.targets == {"idle": 2, "busy": 6}
    assert decision.reasons["idle"] == why
    said = (
        "idle: under 10 % utilisation for 60 s; shrunk to its minimum of 2 by group default's rule"
    )
    assert why == said
    assert decision.standing()["idle"] == (0, why)
    assert decision.reasons["busy"] != why  # the other job's reason is the policy's own


@ORDERS
def test_an_idle_job_not_held_keeps_its_share(reverse: bool) -> None:
    jobs = [job("idle", 8, current=6, min_workers=2), job("busy", 8, submitted=1, current=2)]
    snapshot = rule.at_minimum(Snapshot(8, jobs[::-1] if reverse else jobs), set())
    assert decide(snapshot).targets == {"idle": 4, "busy": 4}


def test_a_rule_says_its_time_in_minutes_from_two_on() -> None:
    assert IdleRule(0.1, 300).text() == "under 10 % utilisation for 5 min"
    assert IdleRule(0.05, 90).text() == "under 5 % utilisation for 90 s"
