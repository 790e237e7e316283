"""Sticky placement: turn a decision's slot counts into concrete slots. Pure and fast.

Rules (docs/architecture.md, "Scheduling contract"): learners stay where they are; a job
that shrinks lets go of its most recently joined learners; a job that grows gets slots on
hosts that already hold it, then packs the fewest hosts it can (best fit, else the emptiest
host).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter


@dataclass(frozen=True, slots=True)
class Slot:
    """One slot: ``id`` is ``<host>.<index>``."""

    id: str
    host: str
    index: int = 0

    @classmethod
    def parse(cls, slot_id: str) -> Slot:
        host, _, index = slot_id.rpartition(".")
        if not host or not index.isdigit():
            raise ValueError(f"slot id {slot_id!r} is not <host>.<index>")
        return cls(slot_id, host, int(index))


@dataclass(frozen=True, slots=True)
class Placement:
    """Per job: ``members`` its slots after the change in join order (rank order: survivors
    first, as they were, then joiners), for every job placed; ``joined`` the slots it gains,
    ``left`` the live slots it gives up (most recently joined first) and ``lost`` the slots
    it held that are no longer alive, for the jobs where those are not empty."""

    members: dict[str, tuple[str, ...]]
    joined: dict[str, tuple[str, ...]]
    left: dict[str, tuple[str, ...]]
    lost: dict[str, tuple[str, ...]]


def place(
    slots: Iterable[Slot],
    current: Mapping[str, Sequence[str]],
    targets: Mapping[str, int],
) -> Placement:
    """Place ``targets`` (job -> slot count) on the alive ``slots``.

    ``current`` maps each job to the slot ids it holds, oldest learner first. A job missing
    from ``targets`` goes to 0. Raises ValueError when the targets need more slots than are
    alive or a slot is held by two jobs.
    """
    alive = {slot.id: slot for slot in slots}
    if sum(targets.values()) > len(alive):
        raise ValueError(f"targets need {sum(targets.values())} slots, {len(alive)} alive")
    _check_disjoint(current)
    result = Placement({}, {}, {}, {})
    # 1-2. Survivors keep their slots, oldest first; the most recently joined leave.
    kept = _shrink(current, targets, alive, result)
    # 3. Free slots: every alive slot that no kept learner holds.
    held = set(chain.from_iterable(kept.values()))
    free = FreeSlots(slot for slot in alive.values() if slot.id not in held)
    # 4. Grow, largest need first (then job id), so big gangs find whole hosts: on hosts
    #    that already hold the job, then packed.
    needs = {job: target - len(kept.get(job, ())) for job, target in targets.items()}
    for job in sorted((j for j, n in needs.items() if n > 0), key=lambda j: (-needs[j], j)):
        own = Counter(alive[s].host for s in kept[job]) if kept.get(job) else None
        result.joined[job] = tuple(free.take(needs[job], own))
    for job in targets.keys() | current.keys():
        result.members[job] = (*kept.get(job, ()), *result.joined.get(job, ()))
    return result


def _shrink(
    current: Mapping[str, Sequence[str]],
    targets: Mapping[str, int],
    alive: Mapping[str, Slot],
    result: Placement,
) -> dict[str, list[str]]:
    """Each holding job's kept slots; records what it loses and what it lets go."""
    kept = {}
    for job, held in current.items():
        survivors = list(held)
        if not all(map(alive.__contains__, held)):
            survivors = [slot_id for slot_id in held if slot_id in alive]
            result.lost[job] = tuple(slot_id for slot_id in held if slot_id not in alive)
        kept[job] = survivors[: targets.get(job, 0)]
        if len(kept[job]) < len(survivors):
            result.left[job] = tuple(reversed(survivors[len(kept[job]) :]))
    return kept


def _check_disjoint(current: Mapping[str, Sequence[str]]) -> None:
    seen: set[str] = set()
    for job, held in current.items():
        for slot_id in held:
            if slot_id in seen:
                raise ValueError(f"slot {slot_id} is held twice (job {job} and another)")
            seen.add(slot_id)


class FreeSlots:
    """Free slots grouped by host, with hosts bucketed by how many free slots they have, so
    "the host whose free slots best fit n" costs O(slots per host), not O(hosts)."""

    def __init__(self, slots: Iterable[Slot]) -> None:
        self.by_host: dict[str, list[str]] = {}
        for slot in sorted(slots, key=attrgetter("host", "index", "id"), reverse=True):
            self.by_host.setdefault(slot.host, []).append(slot.id)  # lowest index at the end
        self.buckets: dict[int, list[str]] = {}
        for host, free in self.by_host.items():  # reverse host order: the first pops first
            self.buckets.setdefault(len(free), []).append(host)
        self.most = max(self.buckets, default=0)

    def take(self, need: int, own_hosts: Counter[str] | None = None) -> list[str]:
        """``need`` free slots: on ``own_hosts`` first (most learners first), then packed."""
        if not own_hosts and need == 1:  # most jobs: one slot on the tightest host
            return self._take_on(self._best_host(1), 1)
        taken: list[str] = []
        if own_hosts:
            for host, _ in sorted(own_hosts.items(), key=lambda item: (-item[1], item[0])):
                taken += self._take_on(host, need - len(taken))
        while len(taken) < need:
            taken += self._take_on(self._best_host(need - len(taken)), need - len(taken))
        return taken

    def _take_on(self, host: str, count: int) -> list[str]:
        free = self.by_host.get(host, [])
        if count == 1 and free:  # the common case; the comprehension costs a quarter of place()
            taken = [free.pop()]
        else:
            taken = [free.pop() for _ in range(min(count, len(free)))]
        if taken and free:
            self.buckets.setdefault(len(free), []).append(host)
        return taken

    def _best_host(self, need: int) -> str:
        """The host with the fewest free slots that still fit ``need``; else the one with
        the most free slots."""
        buckets = self.buckets
        for count in range(need, self.most + 1):  # fits: the tightest first
            if buckets.get(count) and (host := self._pop_bucket(count)) is not None:
                return host
        for count in range(min(need, self.most + 1) - 1, 0, -1):  # short: the emptiest
            if buckets.get(count) and (host := self._pop_bucket(count)) is not None:
                return host
        raise AssertionError("unreachable: place() checked there are enough slots")

    def _pop_bucket(self, count: int) -> str | None:
        """A host with exactly ``count`` free slots, dropping stale entries on the way."""
        bucket = self.buckets.get(count)
        while bucket:
            host = bucket.pop()
            if len(self.by_host[host]) == count:
                return host
        return None
