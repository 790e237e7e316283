"""The live loop's learner moves (docs/architecture.md, "Learner moves"): a job whose
learners are spread over more hosts than it needs, when free slots would hold it on fewer,
moves the learners off the other hosts, its count unchanged, by the rules of
``scheduler/moves.py`` (the simulator's too): only where the move pays back within the
job's move interval at its measured rates per placement, and never twice within it.

A move is a decision for the job of its own count, with slots joined and left
(``JobRunner.apply``); its controller (``scheduler/elastic.py``) carries it out in one
generation once the new learners are READY.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from operator import attrgetter

from scheduler import moves
from scheduler.live.job import JobRunner
from scheduler.live.ports import JobBook, JobRow
from scheduler.live.speedups import Records
from scheduler.placement import Slot

log = logging.getLogger("edt.scheduler")

LOOK_EVERY = 1.0  # seconds between two looks for jobs to move


class Mover:
    """Looks for jobs to move at most every ``LOOK_EVERY`` seconds. ``every``: a job is
    moved at most once per this many seconds (counted from when it was first seen, and
    from a move that did not pay back, so that its rates are not read each look), and
    each move must pay back within it."""

    def __init__(self, book: JobBook, records: Records, every: float = moves.MOVE_EVERY) -> None:
        self.book = book
        self.records = records  # job -> its latest train records (speedups.RecentRecords)
        self.every = every
        self.since: dict[int, float] = {}  # job -> when it was last moved, or weighed
        self.looked_at = 0.0

    def step(self, runners: Mapping[int, JobRunner], jobs: Mapping[int, JobRow],
             groups: Mapping[str, list[Slot]]) -> list[int]:  # fmt: skip
        """Move the jobs that it pays to move; returns their ids (their runners applied)."""
        now = time.monotonic()
        if now - self.looked_at < LOOK_EVERY:
            return []
        self.looked_at = now
        for pk in [pk for pk in self.since if pk not in runners]:
            del self.since[pk]
        due = [pk for pk, runner in runners.items()
               if now - self.since.setdefault(pk, now) >= self.every and pk in jobs
               and len(runner.members()) >= 2 and runner.movable()]  # fmt: skip
        if not due:
            return []
        owner: dict[str, str] = {}
        for pk, runner in runners.items():
            held = runner.holding()
            owner.update(dict.fromkeys([*held, *runner.busy(held)], str(pk)))
        hosts: dict[str, list[tuple[str, list[str]]]] = {}  # group -> its hosts' slots
        moved = []
        for pk in due:
            group = jobs[pk].group
            if group not in hosts:
                hosts[group] = hosts_of(groups.get(group, []))
            if self._move(pk, runners[pk], hosts[group], owner, now):
                moved.append(pk)
        return moved

    def _move(self, pk: int, runner: JobRunner, hosts: list[tuple[str, list[str]]],
              owner: dict[str, str], now: float) -> bool:  # fmt: skip
        members = runner.members()
        move = moves.plan(str(pk), members, hosts, owner)
        if move is None:
            return False
        self.since[pk] = now  # weighed: not again within the interval, whatever the answer
        rates = moves.placement_rates(self.records(pk))
        old, new = moves.expected_rates(rates, len(members), move.hosts_before, move.hosts_after)
        if not moves.pays_back(old, new, moves.MOVE_COST, self.every):
            log.info("job %s: a move to %d host(s) would not pay back (%.1f vs %.1f samples/s)",
                     pk, move.hosts_after, new, old)  # fmt: skip
            return False
        runner.apply(runner.target, move.taken, move.left)
        owner.update(dict.fromkeys(move.taken, str(pk)))
        pairs = ", ".join(f"{a} -> {b}" for a, b in zip(move.left, move.taken, strict=True))
        measured = "measured" if (len(members), move.hosts_after) in rates else "expected"
        message = (f"moving {pairs}: {move.hosts_before} hosts to {move.hosts_after}, "
                   f"{new / old:.2f}x the samples/s ({measured}), paying back within "
                   f"{self.every:g} s")  # fmt: skip
        self.book.record_event(pk, "moved", message, left=list(move.left),
                               joined=list(move.taken), hosts_before=move.hosts_before,
                               hosts_after=move.hosts_after, gain=round(new / old, 3))  # fmt: skip
        log.info("job %s: %s", pk, message)
        return True


def hosts_of(slots: list[Slot]) -> list[tuple[str, list[str]]]:
    """Each host with its slots' ids, hosts and slots in a fixed order (``moves.plan``'s)."""
    hosts: dict[str, list[str]] = {}
    for slot in sorted(slots, key=attrgetter("host", "index", "id")):
        hosts.setdefault(slot.host, []).append(slot.id)
    return list(hosts.items())
