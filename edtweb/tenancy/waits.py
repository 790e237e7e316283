"""How long jobs waited for slots, and how often they were shrunk or had slots reclaimed,
per period: read from the jobs' timelines, beside the slot-hours of ``usage.py``, which
adds them to its rows (docs/architecture.md, "Tenancy").

- A *wait* runs from the event that puts a job in the scheduler's queue (``submitted``,
  ``resumed``, ``suspended``) to its next ``generation`` that holds slots; it counts in the
  period it ended in. A job that ends (``completed``, ``failed``, ``stopped``) before it
  gets slots waited for nothing and is not counted.
- A *shrink* is a ``scaled`` event whose decision gives the job fewer slots than it held
  (a suspension is a shrink to 0).
- A *reclaim* is a shrink while the job's team held more than its fair share at that
  decision (the event's ``team_held`` above its ``team_entitlement``, as the scheduler
  recorded them): slots taken back for another team, not given to a sibling job.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from datetime import date, datetime, tzinfo
from typing import Any, NamedTuple

from django.db.models import QuerySet

from edtweb.tenancy.ledger import HOLDING
from edtweb.training.models import Job, JobEvent

QUEUED = ("submitted", "resumed", "suspended")
ENDED = ("completed", "failed", "stopped")
SCALED = "scaled"
KINDS = (*QUEUED, *ENDED, HOLDING, SCALED)


class Seen(NamedTuple):
    """One thing that happened to ``job`` at ``at``: a wait of ``waited`` seconds that
    ended, or a shrink (``reclaim``: of a team above its fair share)."""

    job: int
    at: datetime
    waited: float | None = None
    reclaim: bool = False


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def shrink(data: Any) -> bool | None:
    """A ``scaled`` event's data: None when it is no shrink, else whether it is a reclaim."""
    data = data if isinstance(data, dict) else {}
    current, target = _number(data.get("current")), _number(data.get("target"))
    if current is None or target is None or not target < current:
        return None
    held, fair = _number(data.get("team_held")), _number(data.get("team_entitlement"))
    return held is not None and fair is not None and held > fair


def seen(events: Iterable[tuple[int, datetime, str, Any]]) -> list[Seen]:
    """The waits that ended and the shrinks among ``events`` ``(job, at, kind, data)``, in
    any order: pure."""
    per_job: dict[int, list[tuple[datetime, str, Any]]] = defaultdict(list)
    for job, at, kind, data in events:
        per_job[job].append((at, kind, data))
    out = []
    for job, timeline in per_job.items():
        queued: datetime | None = None
        for at, kind, data in sorted(timeline, key=lambda e: e[0]):
            if kind in QUEUED:
                queued = queued or at
            elif kind in ENDED:
                queued = None
            elif kind == HOLDING and queued is not None and _holds(data):
                out.append(Seen(job, at, waited=(at - queued).total_seconds()))
                queued = None
            elif kind == SCALED and (reclaim := shrink(data)) is not None:
                out.append(Seen(job, at, reclaim=reclaim))
    return out


def _holds(data: Any) -> bool:
    workers = data.get("workers") if isinstance(data, dict) else None
    return isinstance(workers, int) and workers > 0


def timelines(jobs: QuerySet[Job], since: datetime, until: datetime) -> list[Seen]:
    """What :func:`seen` finds from ``since`` to ``until`` on the timelines of ``jobs``
    (a deleted job's timeline is gone with it)."""
    touched = JobEvent.objects.filter(
        job__in=jobs, at__gte=since, at__lt=until, kind__in=(HOLDING, SCALED)
    ).values("job_id")
    rows = JobEvent.objects.filter(job_id__in=touched, at__lt=until, kind__in=KINDS)
    found = seen(rows.values_list("job_id", "at", "kind", "data"))
    return [s for s in found if since <= s.at < until]


class Tally(NamedTuple):
    waits: int
    waited: float  # seconds, all waits together
    shrinks: int
    reclaims: int


def tally(jobs: QuerySet[Job], since: datetime, until: datetime, by: str,
          cut: Any, zone: tzinfo) -> dict[tuple[date, str], Tally]:  # fmt: skip
    """Per (period's first day, team or owner name as ``by`` says): the waits that ended,
    their seconds, the shrinks and the reclaims; ``cut(moment, zone)`` gives a moment's
    period."""
    found = timelines(jobs, since, until)
    names = dict(
        (pk, (team or "") if by == "team" else user)
        for pk, team, user in Job.objects.filter(pk__in={s.job for s in found}).values_list(
            "pk", "team__name", "owner__username"
        )
    )
    counts: dict[tuple[date, str], list[float]] = defaultdict(lambda: [0, 0.0, 0, 0])
    for item in found:
        row = counts[(cut(item.at, zone), names[item.job])]
        if item.waited is not None:
            row[0] += 1
            row[1] += item.waited
        else:
            row[2] += 1
            row[3] += item.reclaim
    return {key: Tally(int(w), s, int(sh), int(r)) for key, (w, s, sh, r) in counts.items()}


def shown(found: Tally | None) -> dict[str, Any]:
    """A tally as a row of the usage answer shows it: ``average_wait_s`` null without waits."""
    if found is None:
        return {"waits": 0, "average_wait_s": None, "shrinks": 0, "reclaims": 0}
    average = round(found.waited / found.waits, 1) if found.waits else None
    return {"waits": found.waits, "average_wait_s": average, "shrinks": found.shrinks,
            "reclaims": found.reclaims}  # fmt: skip


def totals(tallies: dict[tuple[date, str], Tally]) -> Iterator[tuple[str, Tally]]:
    """The tallies summed over every period, per name."""
    summed: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0, 0])
    for (_, key), t in tallies.items():
        for i, value in enumerate(t):
            summed[key][i] += value
    for key, (w, s, sh, r) in summed.items():
        yield key, Tally(int(w), s, int(sh), int(r))
