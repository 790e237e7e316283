"""Learner moves: where a job's learners could sit on fewer hosts, and whether moving them
there pays back (docs/architecture.md, "Learner moves"). Pure: the live loop
(``scheduler/live/loop.py``) and the Pollux simulator (``scheduler/simulate/cluster.py``)
share these rules.

A job of two learners or more spread over more hosts than its size needs is offered the
packed placement on the fewest hosts that its own slots, free slots and, where the caller
allows it, the slots of jobs it may swap with (the simulator's one-slot jobs) make
possible: its learners on the chosen hosts stay, the others move to free (or swapped) slots
there. It moves only when that pays back within a horizon ``H``:
``(H - c)·r_new - H·r_old > p·r_old·k``, with ``c`` the move's pause, ``r`` the job's
progress rate on its placement, ``k`` the jobs it displaces and ``p`` the pause of each.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.policies.speedup import median_rates

# The live loop's parameters (docs/architecture.md, "Learner moves").
MOVE_EVERY = 60.0  # seconds: the fewest between two moves of a job, and the pay-back horizon
# Seconds a move pauses its job: the gap it leaves in the job's steps beyond the job's own
# iteration, 0.07 to 0.14 s for a small model on CPU (bench/results/moves.md); the rest is
# room for a large state's broadcast.
MOVE_COST = 1.0
# The gain co-location is taken to bring where the job's rate on the packed placement was
# never measured: the all-reduce within a host rather than across the network.
ASSUMED_GAIN = 0.1


@dataclass(frozen=True, slots=True)
class Move:
    """A job's move: ``kept`` its learners that stay, ``taken`` the slots its moving
    learners go to (in the order of ``left``, the slots they leave), ``hosts`` how many
    hosts it spans before and after."""

    kept: tuple[str, ...]
    taken: tuple[str, ...]
    left: tuple[str, ...]
    hosts_before: int
    hosts_after: int

    @property
    def members(self) -> tuple[str, ...]:
        return (*self.kept, *self.taken)


def hosts_needed(size: int, capacities: Sequence[int]) -> int:
    """The fewest hosts of these ``capacities`` (slots per host) that ``size`` learners fit
    on (every host's slots counted)."""
    total = 0
    for count, capacity in enumerate(sorted(capacities, reverse=True), start=1):
        total += capacity
        if total >= size:
            return count
    return len(capacities)


def plan(job: str, members: Sequence[str], hosts: Sequence[tuple[str, Sequence[str]]],
         owner: Mapping[str, str],
         swappable: Callable[[str], bool] = lambda _: False) -> Move | None:  # fmt: skip
    """The packed placement of ``job`` (on ``members`` now) on fewer hosts, or None.

    ``hosts``: each host with its slots, in a fixed order (ties go to the earlier host);
    ``owner``: slot -> the job on it (free slots absent); ``swappable(other)``: whether
    ``job`` may take the slot of job ``other`` (who then gets one of the slots it leaves).
    The hosts chosen are the fewest that could hold it, those with the most slots it could
    use first, then those holding most of its learners."""
    size = len(members)
    host_of = {slot: name for name, slots in hosts for slot in slots}
    if size < 2 or any(slot not in host_of for slot in members):
        return None
    before = len({host_of[slot] for slot in members})
    need = hosts_needed(size, [len(slots) for _, slots in hosts])
    if before <= need:
        return None
    owner = {**owner, **dict.fromkeys(members, job)}  # its own slots are never free
    room = []  # per host: (slots this job could hold there, its own there, position)
    for position, (_, slots) in enumerate(hosts):
        own = sum(1 for s in slots if owner.get(s) == job)
        usable = sum(
            1 for s in slots
            if owner.get(s) in (None, job) or swappable(owner[s])
        )  # fmt: skip
        room.append((usable, own, position))
    room.sort(key=lambda r: (-r[0], -r[1], r[2]))
    chosen = room[:need]
    if sum(usable for usable, _, _ in chosen) < size:
        return None
    names = {hosts[position][0] for _, _, position in chosen}
    kept = [s for s in members if host_of[s] in names]
    taken: list[str] = []
    for _, own, position in chosen:  # fullest first: its free slots, then swaps
        slots = hosts[position][1]
        free = [s for s in slots if s not in owner]
        swap = [s for s in slots if s in owner and owner[s] != job and swappable(owner[s])]
        take = max(0, min(len(slots) - own, size - len(kept) - len(taken)))
        taken += (free + swap)[:take]
    if len(kept) + len(taken) < size:
        return None
    after = len({host_of[s] for s in (*kept, *taken)})
    if after >= before:
        return None
    left = tuple(s for s in members if s not in kept)
    return Move(tuple(kept), tuple(taken), left, before, after)


def pays_back(old_rate: float, new_rate: float, cost: float, horizon: float,
              displaced: int = 0, displaced_pause: float = 0.0) -> bool:  # fmt: skip
    """Moving pays back within ``horizon`` seconds: the job's progress over it at
    ``new_rate`` after a pause of ``cost`` seconds beats staying at ``old_rate`` by more
    than the progress ``displaced`` jobs lose to a pause of ``displaced_pause`` each."""
    return (horizon - cost) * new_rate - horizon * old_rate > displaced_pause * old_rate * displaced


def placement_rates(records: Iterable[dict[str, Any]]) -> dict[tuple[int, int], float]:
    """(worker count, hosts they spanned) -> median samples/s over ``records`` (a job's train
    records: the learners' measured rate per placement, which a move weighs)."""

    def placement(r: dict[str, Any]) -> tuple[int, int] | None:
        workers, hosts = r.get("workers"), r.get("hosts")
        return (workers, hosts) if isinstance(workers, int) and isinstance(hosts, int) else None

    return median_rates(records, placement)


def expected_rates(rates: Mapping[tuple[int, int], float], workers: int, before: int,
                   after: int) -> tuple[float, float]:  # fmt: skip
    """The job's rate on ``before`` hosts and on ``after`` hosts (``rates``: its measured
    samples/s per (workers, hosts)); a placement never measured is taken as ``ASSUMED_GAIN``
    faster packed than spread (a rate of 1 where neither was measured)."""
    old, new = rates.get((workers, before)), rates.get((workers, after))
    if old is None:
        old = new / (1 + ASSUMED_GAIN) if new is not None else 1.0
    if new is None:
        new = old * (1 + ASSUMED_GAIN)
    return old, new
