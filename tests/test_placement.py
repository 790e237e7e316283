"""Sticky placement: tables (each case also run with its inputs in reverse order) and
hypothesis properties. Pure code: no database, no Redis."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.placement import Placement, Slot, place
from tests.harness.policies import ORDERS


def cluster(**hosts: int) -> list[Slot]:
    """``cluster(a=2, b=4)``: slots a.0, a.1, b.0 … b.3."""
    return [Slot(f"{host}.{i}", host, i) for host, count in hosts.items() for i in range(count)]


def run(
    slots: list[Slot],
    current: Mapping[str, Sequence[str]],
    targets: Mapping[str, int],
    reverse: bool = False,
) -> Placement:
    if reverse:
        slots = slots[::-1]
        current = dict(reversed(list(current.items())))
        targets = dict(reversed(list(targets.items())))
    return place(slots, current, targets)


CASES = {
    "learners stay where they are when the count is unchanged": (
        cluster(a=4, b=4), {"A": ["b.3", "a.0"]}, {"A": 2}, {"A": ("b.3", "a.0")}
    ),
    "a shrinking job lets go of its most recently joined learners": (
        cluster(a=4), {"A": ["a.2", "a.0", "a.3"]}, {"A": 1}, {"A": ("a.2",)}
    ),
    "a growing job gets slots on a host that already holds it": (
        cluster(a=2, b=4), {"A": ["b.0"]}, {"A": 3}, {"A": ("b.0", "b.1", "b.2")}
    ),
    "a new job packs onto the host whose free slots fit it best": (
        cluster(a=4, b=2, c=3), {}, {"A": 2}, {"A": ("b.0", "b.1")}
    ),
    "a job too big for any host starts on the emptiest and spills over": (
        cluster(a=2, b=4), {}, {"A": 5}, {"A": ("b.0", "b.1", "b.2", "b.3", "a.0")}
    ),
    "the biggest need is placed first, so it gets whole hosts": (
        cluster(a=4, b=1), {}, {"small": 1, "big": 4},
        {"big": ("a.0", "a.1", "a.2", "a.3"), "small": ("b.0",)},
    ),
    "a job dropped from the targets releases everything": (
        cluster(a=2), {"A": ["a.0", "a.1"]}, {"B": 2}, {"A": (), "B": ("a.0", "a.1")}
    ),
}  # fmt: skip


@ORDERS
@pytest.mark.parametrize("slots, current, targets, expected", CASES.values(), ids=CASES.keys())
def test_placement_table(
    slots: list[Slot],
    current: dict[str, list[str]],
    targets: dict[str, int],
    expected: dict[str, tuple[str, ...]],
    reverse: bool,
) -> None:
    assert run(slots, current, targets, reverse).members == expected


@ORDERS
def test_it_reports_joiners_leavers_and_lost_slots(reverse: bool) -> None:
    slots = [s for s in cluster(a=2, b=2) if s.id != "a.1"]  # a.1 died
    current = {"A": ["a.0", "a.1", "b.0"], "B": ["b.1"]}
    result = run(slots, current, {"A": 1, "B": 2}, reverse)
    assert result.members == {"A": ("a.0",), "B": ("b.1", "b.0")}
    assert result.lost == {"A": ("a.1",)}
    assert result.left == {"A": ("b.0",)}
    assert result.joined == {"B": ("b.0",)}


def test_it_refuses_impossible_inputs() -> None:
    with pytest.raises(ValueError, match="need 3 slots, 2 alive"):
        place(cluster(a=2), {}, {"A": 3})
    with pytest.raises(ValueError, match="held twice"):
        place(cluster(a=2), {"A": ["a.0"], "B": ["a.0"]}, {"A": 1, "B": 1})


def test_slot_ids_parse_with_dotted_host_names() -> None:
    assert Slot.parse("gpu7.example.org.3") == Slot("gpu7.example.org.3", "gpu7.example.org", 3)
    with pytest.raises(ValueError, match=r"not <host>\.<index>"):
        Slot.parse("nohost")


# Properties -------------------------------------------------------------------------------


@st.composite
def situations(draw: st.DrawFn) -> tuple[list[Slot], dict[str, list[str]], dict[str, int]]:
    """Hosts of 1-8 slots; jobs holding disjoint slots (some maybe dead); feasible targets."""
    hosts = draw(st.lists(st.integers(1, 8), min_size=1, max_size=6))
    every = [Slot(f"h{h}.{i}", f"h{h}", i) for h, size in enumerate(hosts) for i in range(size)]
    order = draw(st.permutations(every))
    jobs = [f"j{k}" for k in range(draw(st.integers(0, 6)))]
    current: dict[str, list[str]] = {job: [] for job in jobs}
    for slot in order[: draw(st.integers(0, len(order)))]:
        if jobs:
            current[draw(st.sampled_from(jobs))].append(slot.id)
    alive = [s for s in every if draw(st.booleans()) or draw(st.booleans())]
    targets, left = {}, len(alive)
    for job in jobs:
        targets[job] = draw(st.integers(0, left))
        left -= targets[job]
    return alive, current, targets


PROPERTY = settings(max_examples=150, deadline=None)


@PROPERTY
@given(situations())
def test_each_job_gets_exactly_its_target_on_distinct_alive_slots(
    situation: tuple[list[Slot], dict[str, list[str]], dict[str, int]],
) -> None:
    slots, current, targets = situation
    members = place(slots, current, targets).members
    placed = [slot_id for held in members.values() for slot_id in held]
    assert len(placed) == len(set(placed))
    assert set(placed) <= {s.id for s in slots}
    assert all(len(members[job]) == target for job, target in targets.items())


@PROPERTY
@given(situations())
def test_placement_keeps_the_oldest_surviving_learners(
    situation: tuple[list[Slot], dict[str, list[str]], dict[str, int]],
) -> None:
    slots, current, targets = situation
    alive = {s.id for s in slots}
    members = place(slots, current, targets).members
    for job, held in current.items():
        survivors = tuple(s for s in held if s in alive)
        kept = min(len(survivors), targets.get(job, 0))
        assert members[job][:kept] == survivors[:kept]


@PROPERTY
@given(situations())
def test_placement_does_not_depend_on_input_order(
    situation: tuple[list[Slot], dict[str, list[str]], dict[str, int]],
) -> None:
    slots, current, targets = situation
    assert run(slots, current, targets) == run(slots, current, targets, reverse=True)
