"""How `make test` (pytest-xdist, ``-n 3 --dist loadfile``) shares the tests among its
workers so that the run ends soon after its longest piece of work.

pytest-xdist's ``loadfile`` gives a worker a whole module, and hands modules out by their
number of tests, most first: the modules that start a stack of their own for each of a few
tests (minutes each) came last, and a run ended with one worker alone in its fault tests.
Here:

- a module of :data:`EACH_TEST_ALONE` is shared test by test (each of its tests starts and
  stops a stack of its own, so none waits on another worker's), every other module stays
  whole on one worker (its module-scoped stack is started once);
- the longest work goes out first (:data:`LONGEST`, in the order of their seconds), then the
  rest in the order collected.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import pytest
from xdist.scheduler import LoadFileScheduling

# Modules whose tests each start a stack (a cluster, an EDT) of their own and share none.
EACH_TEST_ALONE = frozenset({
    "tests/test_faults.py",
    "tests/test_config_matrix.py",
    "tests/test_scheduler_live.py",
})  # fmt: skip

# The modules that take longest, longest first (`make test`'s --durations table).
LONGEST = (
    "tests/test_faults.py",
    "tests/test_config_matrix.py",
    "tests/test_hosts_netns.py",
    "tests/test_scheduler_live.py",
    "tests/test_sandbox.py",
    "tests/test_elastic.py",
    "tests/test_wmla.py",
)


def work_unit(nodeid: str) -> str:
    """The unit a test goes to a worker in: itself in a module of :data:`EACH_TEST_ALONE`,
    else its module."""
    module = nodeid.split("::", 1)[0]
    return nodeid if module in EACH_TEST_ALONE else module


class Item(Protocol):
    @property
    def nodeid(self) -> str: ...


def longest_first(items: Sequence[Item]) -> list[int]:
    """The order to run ``items`` in (indices): those of :data:`LONGEST` first, module by
    module in its order; the others after, in their order."""

    def rank(index: int) -> tuple[int, int]:
        module = items[index].nodeid.split("::", 1)[0]
        return (LONGEST.index(module) if module in LONGEST else len(LONGEST), index)

    return sorted(range(len(items)), key=rank)


class LongestFirst(LoadFileScheduling):
    """``loadfile``, but by :func:`work_unit`, in the order collected (see
    :func:`longest_first`) rather than by the number of tests in each unit."""

    def __init__(self, config: pytest.Config, log: object = None) -> None:
        super().__init__(config, log)  # type: ignore[arg-type]
        config.option.loadscopereorder = False  # hand units out in the collection's order

    def _split_scope(self, nodeid: str) -> str:
        return work_unit(nodeid)

    def _reschedule(self, node: Any) -> None:
        """A worker is given its next unit once it is down to its last test (xdist's own
        waits until it is down to two): a long test queued behind another's on a busy
        worker would wait there while another worker runs out of work."""
        if node.shutting_down:
            return
        if not self.workqueue:
            node.shutdown()
        elif self._pending_of(self.assigned_work[node]) <= 1:
            self._assign_work_unit(node)
