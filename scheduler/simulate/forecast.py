"""When will it start, when will it end: the simulator run forward from the present
(docs/architecture.md, "Scheduling contract").

The active jobs as they stand (the slots each holds, its attained service, the work it has
left in seconds at one slot's speed) go into the event-driven simulator at ``now``, with no
future arrivals, under the same policy code; each job's projected start is the first time
it holds a slot (now for a running job) and its end its completion. A range comes from the
same run with every job's remaining work scaled down and up (``LOW``, ``HIGH``): what its
measured pace leaves uncertain. Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from scheduler.policies.model import JobView
from scheduler.simulate.engine import Config, Observer, SimJob, Simulator, _State

LOW, HIGH = 0.8, 1.25  # remaining work scaled for the range's ends


@dataclass(frozen=True, slots=True)
class Present:
    """A job as it stands now: ``job.work`` is the work it has left (seconds at one slot's
    speed), ``held`` the slots it holds, ``attained`` its slot-seconds so far; ``view``
    what else the policy reads of it (priority, minimum, owner, team), if not defaults."""

    job: SimJob
    held: int = 0
    attained: float = 0.0
    view: JobView | None = None


@dataclass(frozen=True, slots=True)
class Projection:
    """Seconds from the present: when the job starts (0: it runs) and ends; None where it
    would not in the simulated future (its minimum never fits)."""

    start: float | None
    end: float | None


class _FromNow(Simulator):
    """The simulator started at ``now`` with every job of ``present`` active at once,
    holding what it holds, instead of arriving at its submission."""

    def __init__(self, present: Sequence[Present], config: Config, now: float,
                 observer: Observer) -> None:  # fmt: skip
        super().__init__([p.job for p in present], config, observer)
        self.now = now
        self.present = {p.job.id: p for p in present}
        self.seeded = False

    def _next_time(self) -> float:
        return max(super()._next_time(), self.now)

    def _arrive(self, now: float) -> None:
        super()._arrive(now)
        if self.seeded:
            return
        self.seeded = True
        for job_id, state in self.active.items():
            held = self.present[job_id]
            state.attained, state.slots = held.attained, held.held
            state.started = state.started or held.held > 0
            self.views[job_id] = self._view(state, now)
            if held.held:
                self.running.add(job_id)
                self._schedule_events(state, now)

    def _view(self, state: _State, now: float) -> JobView:
        view = super()._view(state, now)
        given = self.present[state.job.id].view
        if given is None:
            return view
        return replace(view, priority=given.priority, min_workers=given.min_workers,
                       owner=given.owner, team=given.team, name=given.name)  # fmt: skip


def project(present: Sequence[Present], config: Config, now: float = 0.0,
            wanted: Iterable[str] = ()) -> dict[str, Projection]:  # fmt: skip
    """Each job's projection from ``now`` (times in seconds after it). With ``wanted``, the
    run stops once those jobs have all started (their ends then None)."""
    starts: dict[str, float] = {}
    want = set(wanted)

    def seen(at: float, held: Sequence[tuple[SimJob, int]]) -> None:
        for job, slots in held:
            if slots and job.id not in starts:
                starts[job.id] = at

    sim = _FromNow(present, config, now, seen)
    try:
        while sim.pending or sim.active:
            at = sim._next_time()
            sim._arrive(at)
            sim._pop_events(at)
            sim._reschedule(at)
            if want and want <= starts.keys():
                break
    except RuntimeError:  # some never start: the rest is known
        pass
    ends = {r.job.id: r.finished - now for r in sim.results}
    return {
        p.job.id: Projection(
            starts[p.job.id] - now if p.job.id in starts else None, ends.get(p.job.id)
        )
        for p in present
    }


Ranged = tuple[Projection, Projection, Projection]  # early, likely, late


def ranged(present: Sequence[Present], config: Config, now: float = 0.0,
           wanted: Iterable[str] = ()) -> dict[str, Ranged]:  # fmt: skip
    """(early, likely, late) projections: the remaining work scaled by ``LOW``, 1, ``HIGH``."""
    wanted = tuple(wanted)
    runs = [project(scaled(present, k), config, now, wanted) for k in (LOW, 1.0, HIGH)]
    return {key: (runs[0][key], runs[1][key], runs[2][key]) for key in runs[1]}


def scaled(present: Sequence[Present], factor: float) -> list[Present]:
    return [replace(p, job=replace(p.job, work=p.job.work * factor)) for p in present]
