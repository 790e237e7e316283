"""Learner moves' rules (scheduler/moves.py), as tables: where a spread job's learners go,
and whether the move pays back (docs/architecture.md, "Learner moves"). Each table is also
run in reverse order: no row leans on another."""

from __future__ import annotations

import pytest

from scheduler import moves

HOSTS = [("a", ["a.0", "a.1"]), ("b", ["b.0", "b.1"]), ("c", ["c.0", "c.1"])]

# (members, owner of the other slots, swappable jobs, expected (kept, taken, left) or None)
PLANS: list[
    tuple[list[str], dict[str, str], set[str], tuple[list[str], list[str], list[str]] | None]
] = [
    (["a.0", "b.0"], {}, set(), (["a.0"], ["a.1"], ["b.0"])),  # the first host wins a tie
    (["a.0", "b.0"], {"a.1": "y"}, set(), (["b.0"], ["b.1"], ["a.0"])),  # a is full
    (["a.0", "b.0"], {"a.1": "y", "b.1": "z"}, set(), ([], ["c.0", "c.1"], ["a.0", "b.0"])),
    (["a.0", "b.0"], {"a.1": "y", "b.1": "z", "c.0": "w"}, {"z"}, (["b.0"], ["b.1"], ["a.0"])),
    (["a.0", "b.0"], {"a.1": "y", "b.1": "z", "c.0": "w"}, {"y"}, (["a.0"], ["a.1"], ["b.0"])),
    (["a.0", "b.0"], {"a.1": "y", "b.1": "z", "c.0": "w"}, set(), None),  # nowhere to go
    (["a.0", "a.1"], {}, set(), None),  # packed already
    (["a.0"], {}, set(), None),  # one learner: nothing to pack
    (["a.0", "b.0", "c.0"], {}, set(), (["a.0", "b.0"], ["a.1"], ["c.0"])),
    (["a.0", "b.0", "c.0"], {"b.1": "y"}, set(), (["a.0", "c.0"], ["a.1"], ["b.0"])),
    (["c.0", "b.0"], {"c.1": "y"}, set(), (["b.0"], ["b.1"], ["c.0"])),  # most room first
    (["a.0", "x.0"], {}, set(), None),  # a slot of no known host: left alone
]


def plan_rows(rows: list[tuple[list[str], dict[str, str], set[str], object]]) -> None:
    for members, others, swappable, expected in rows:
        owner = {**others, **dict.fromkeys(members, "j")}
        move = moves.plan("j", members, HOSTS, owner, swappable.__contains__)
        got = None if move is None else (list(move.kept), list(move.taken), list(move.left))
        assert got == expected, (members, others, swappable)


@pytest.mark.parametrize("order", ["forward", "reversed"])
def test_plan(order: str) -> None:
    plan_rows(PLANS if order == "forward" else PLANS[::-1])  # type: ignore[arg-type]


def test_a_move_spans_fewer_hosts() -> None:
    move = moves.plan("j", ["a.0", "b.0", "c.0"], HOSTS, {})
    assert move is not None and (move.hosts_before, move.hosts_after) == (3, 2)
    assert move.members == ("a.0", "b.0", "a.1")


@pytest.mark.parametrize(
    ("sizes", "size", "needed"),
    [([4, 4, 4], 5, 2), ([2, 8], 5, 1), ([1, 1], 3, 2), ([4], 4, 1), ([3, 2, 2], 6, 3)],
)
def test_hosts_needed(sizes: list[int], size: int, needed: int) -> None:
    assert moves.hosts_needed(size, sizes) == needed


# (old rate, new rate, pause, horizon, displaced, their pause, pays back)
PAYBACKS = [
    (1.0, 1.1, 1.0, 60.0, 0, 0.0, True),  # 10 % faster for a 1 s pause over a minute
    (1.0, 1.01, 1.0, 60.0, 0, 0.0, False),  # 1 % does not make up for the second
    (1.0, 1.0, 0.0, 60.0, 0, 0.0, False),  # no faster: never
    (1.0, 1.1, 6.0, 60.0, 0, 0.0, False),  # (54)(1.1) = 59.4 < 60
    (1.0, 1.2, 1.0, 60.0, 2, 3.0, True),  # 69.8 - 60 > 6
    (1.0, 1.1, 1.0, 60.0, 2, 3.0, False),  # 64.9 - 60 < 6
    (1.0, 1.1, 1.0, 5.0, 0, 0.0, False),  # a short horizon: 4.4 < 5
]


@pytest.mark.parametrize("order", ["forward", "reversed"])
def test_pays_back(order: str) -> None:
    for old, new, cost, horizon, displaced, pause, expected in (
        PAYBACKS if order == "forward" else PAYBACKS[::-1]
    ):
        assert moves.pays_back(old, new, cost, horizon, displaced, pause) is expected


def test_measured_rates_decide_and_the_gain_is_assumed_only_where_never_measured() -> None:
    assert moves.expected_rates({(2, 2): 100.0, (2, 1): 90.0}, 2, 2, 1) == (100.0, 90.0)
    assert moves.expected_rates({(2, 2): 100.0}, 2, 2, 1) == pytest.approx((100.0, 110.0))
    assert moves.expected_rates({(2, 1): 110.0}, 2, 2, 1) == pytest.approx((100.0, 110.0))
    assert moves.expected_rates({(3, 2): 100.0}, 2, 2, 1) == pytest.approx((1.0, 1.1))
    old, new = moves.expected_rates({(2, 2): 100.0, (2, 1): 99.0}, 2, 2, 1)
    assert not moves.pays_back(old, new, moves.MOVE_COST, moves.MOVE_EVERY)  # measured slower
