"""When will it start, when will it end (scheduler/simulate/forecast.py): the simulator run
forward from the present, under the same policy code, with no future arrivals."""

from __future__ import annotations

import pytest

from scheduler.policies import JobView
from scheduler.simulate import Config, SimJob
from scheduler.simulate.forecast import Present, Projection, project, ranged


def present() -> list[Present]:
    """On 4 slots: A holds all 4 with 400 slot-seconds of work left (100 s at 4); B, whose
    minimum is 4, waits for them."""
    a = Present(SimJob("a", 0.0, 4, 400.0), held=4, attained=100.0)
    b = Present(SimJob("b", 10.0, 4, 800.0), view=JobView("b", 4, 10.0, min_workers=4))
    return [a, b]


@pytest.mark.parametrize("order", [1, -1])
def test_a_waiting_job_starts_when_the_slots_it_needs_are_free(order: int) -> None:
    got = project(present()[::order], Config(4, "fairshare"), now=50.0)
    assert (got["a"].start, got["a"].end) == (0.0, pytest.approx(100.0))
    assert got["b"].start == pytest.approx(100.0)  # when A ends
    assert got["b"].end == pytest.approx(300.0)  # 800 at 4 slots: 200 s more


def test_the_range_holds_the_likely_start_and_a_job_that_never_fits_has_none() -> None:
    early, likely, late = ranged(present(), Config(4, "fairshare"), now=0.0)["b"]
    assert early.start is not None and late.start is not None
    assert likely.start == pytest.approx(100.0)
    assert early.start < likely.start < late.start
    huge = Present(SimJob("h", 5.0, 8, 10.0), view=JobView("h", 8, 5.0, min_workers=8))
    assert project([*present(), huge], Config(4, "fairshare"))["h"] == Projection(None, None)
