"""Slot-hours per team or per user, per day or per week: the one computation the API, the
CLI and the pages read (docs/architecture.md, "Tenancy").

A job's slots over time are on its timeline: each ``generation`` event says how many
learners train from then on (``workers``), and ``restart`` (every learner lost),
``suspended``, ``completed``, ``failed`` and ``stopped`` bring it to none; the Cluster
page's chart reads the same events. Each interval between two of them is appended to the
slot-time ledger as it closes (``ledger.py``, ``SlotTime``), which keeps it when the job is
deleted; a job still holding slots holds them from its last such event until now. The
intervals are cut at the periods' bounds (in the server's time zone: days from midnight,
weeks from Monday) and summed: allocated slot-hours, and used ones (each interval weighed
by how busy its slots were, where known). Each row also says how long the jobs waited for
slots on average, and how often they were shrunk or had slots reclaimed (``waits.py``).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, tzinfo
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import Q, QuerySet
from django.utils import timezone

from edtweb.ownership import visible_jobs
from edtweb.tenancy import waits
from edtweb.tenancy.ledger import HOLDING, latest_marks, utilisation
from edtweb.tenancy.models import Membership, SlotTime
from edtweb.training.models import Job

PERIODS = ("day", "week")
BY = ("team", "user")
MAX_PERIODS = 1000
ENDED = (Job.State.COMPLETED, Job.State.FAILED, Job.State.STOPPED)


@dataclass(frozen=True)
class Interval:
    """``job`` held ``slots`` slots from ``start`` to ``end``, ``busy`` (0..1; None: not
    known) of the time."""

    job: int
    start: datetime
    end: datetime
    slots: int
    busy: float | None = None


def intervals(events: Iterable[tuple[int, datetime, str, int]], now: datetime) -> list[Interval]:
    """The slots each job held, from its events ``(job, at, kind, workers)`` (any order):
    pure."""
    per_job: dict[int, list[tuple[datetime, str, int]]] = defaultdict(list)
    for job, at, kind, workers in events:
        per_job[job].append((at, kind, workers))
    out = []
    for job, seen in per_job.items():
        held, since = 0, None
        for at, kind, workers in sorted(seen, key=lambda e: e[0]):
            if held and since is not None and at > since:
                out.append(Interval(job, since, at, held))
            held, since = (max(0, workers) if kind == HOLDING else 0), at
        if held and since is not None and now > since:
            out.append(Interval(job, since, now, held))
    return out


def period_start(moment: datetime, period: str, zone: tzinfo) -> datetime:
    """The start of the day (midnight) or week (Monday) ``moment`` is in, in ``zone``."""
    day = moment.astimezone(zone).date()
    if period == "week":
        day -= timedelta(days=day.weekday())
    return datetime.combine(day, time.min, tzinfo=zone)


def next_period(start: datetime, period: str) -> datetime:
    step = timedelta(days=7 if period == "week" else 1)
    return datetime.combine(start.date() + step, time.min, tzinfo=start.tzinfo)


def cut(interval: Interval, since: datetime, until: datetime, period: str,
        zone: tzinfo) -> Iterator[tuple[date, float]]:  # fmt: skip
    """(period's first day, slot-seconds) of ``interval`` within ``since``..``until``."""
    start, end = max(interval.start, since), min(interval.end, until)
    while start < end:
        bound = next_period(period_start(start, period, zone), period)
        upto = min(bound, end)
        yield (
            period_start(start, period, zone).date(),
            (upto - start).total_seconds() * interval.slots,
        )
        start = upto


def ledger_of(user: Any) -> QuerySet[SlotTime]:
    """The ledger's intervals ``user`` may see: of their own jobs and their teams' (staff:
    all), as ``ownership.visible_jobs`` says of jobs, deleted ones included."""
    rows = SlotTime.objects.all()
    if user.is_staff:
        return rows
    if not user.is_authenticated:
        return rows.none()
    teams = Membership.objects.filter(user=user).values("team_id")
    return rows.filter(Q(owner_id=user.pk) | Q(team_id__in=teams))


def open_intervals(jobs: QuerySet[Job], now: datetime) -> list[tuple[Interval, str, str]]:
    """The slots active jobs among ``jobs`` hold now, since their last generation: not in
    the ledger until it closes. Each with the job's team and owner names."""
    active = dict(
        (pk, (team or "", user))
        for pk, team, user in jobs.filter(state__in=Job.ACTIVE).values_list(
            "pk", "team__name", "owner__username"
        )
    )
    marks = {pk: m for pk, m in latest_marks(active).items() if m.slots and m.at < now}
    busy = utilisation({s for m in marks.values() for s in m.members})
    out = []
    for pk, mark in marks.items():
        known = [busy[s] for s in mark.members if s in busy]
        share = sum(known) / len(known) if known else None
        out.append((Interval(pk, mark.at, now, mark.slots, share), *active[pk]))
    return out


def usage(user: Any, since: datetime, until: datetime, by: str = "team",
          period: str = "day", team: str = "", owner: str = "",
          zone: tzinfo | None = None) -> dict[str, Any]:  # fmt: skip
    """Slot-hours ``user`` may see (edtweb/ownership.py; a deleted job's too) from ``since``
    to ``until``, per ``period`` (``day`` or ``week``) and per ``by`` (``team``: its name,
    ``""`` for jobs without one; ``user``: the owner's name); only ``team``'s (``-``: of no
    team) or ``owner``'s where named. Rows in period order, then by name; ``totals`` over
    the whole span; each with allocated ``slot_hours`` and ``used_slot_hours``, and the
    ``waits`` that ended, their ``average_wait_s``, ``shrinks`` and ``reclaims``
    (``waits.py``; from the timelines of the jobs still there)."""
    if by not in BY or period not in PERIODS:
        raise ValueError(f"by is one of {BY}, period one of {PERIODS}")
    zone = zone or timezone.get_current_timezone()
    now = min(timezone.now(), until)
    closed = ledger_of(user).filter(end__gt=since, start__lt=until)
    jobs = visible_jobs(user)
    if team:
        closed = closed.filter(team_name="" if team == "-" else team)
        jobs = jobs.filter(team__isnull=True) if team == "-" else jobs.filter(team__name=team)
    if owner:
        closed, jobs = closed.filter(owner_name=owner), jobs.filter(owner__username=owner)
    found = [(Interval(r.job_id, r.start, r.end, r.slots, r.utilisation), r.team_name,
              r.owner_name) for r in closed]  # fmt: skip
    found += open_intervals(jobs, now)
    seconds: dict[tuple[date, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for interval, team_name, owner_name in found:
        key = team_name if by == "team" else owner_name
        for day, amount in cut(interval, since, until, period, zone):
            seconds[(day, key)][0] += amount
            seconds[(day, key)][1] += amount * (interval.busy or 0.0)
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for (_, key), (amount, used) in seconds.items():
        totals[key][0] += amount
        totals[key][1] += used
    tallies = waits.tally(jobs, since, until, by,
                          lambda at, z: period_start(at, period, z).date(), zone)  # fmt: skip
    summed = dict(waits.totals(tallies))
    return {
        "since": since.isoformat(),
        "until": until.isoformat(),
        "by": by,
        "period": period,
        "rows": [
            {
                "period": day.isoformat(),
                by: key,
                **slot_hours(*seconds.get((day, key), (0, 0))),
                **waits.shown(tallies.get((day, key))),
            }
            for day, key in sorted(set(seconds) | set(tallies))
        ],
        "totals": [
            {by: key, **slot_hours(*totals.get(key, (0, 0))), **waits.shown(summed.get(key))}
            for key in sorted(set(totals) | set(summed))
        ],
    }


def slot_hours(allocated: float, used: float) -> dict[str, float]:
    return {"slot_hours": hours(allocated), "used_slot_hours": hours(used)}


def hours(seconds: float) -> float:
    return round(seconds / 3600, 4)


RELATIVE = re.compile(r"^(\d+)\s*([hdw])$")
UNITS = {"h": "hours", "d": "days", "w": "weeks"}


def moment(text: str, now: datetime, zone: tzinfo | None = None) -> datetime:
    """``7d``, ``12h``, ``2w`` (that long before ``now``), a date (``2026-01-05``: its
    midnight) or a date and time (ISO 8601; without a zone, the server's)."""
    zone = zone or timezone.get_current_timezone()
    text = text.strip()
    relative = RELATIVE.match(text)
    if relative:
        count, unit = int(relative.group(1)), UNITS[relative.group(2)]
        try:
            return now - timedelta(**{unit: count})
        except OverflowError:  # past year 1, or more days than a timedelta holds
            raise ValueError(f"{text!r}: a span back from now reaches before year 1") from None
    try:
        if len(text) == 10:
            return datetime.combine(date.fromisoformat(text), time.min, tzinfo=zone)
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"{text!r}: write a date (2026-01-05), a date and time (2026-01-05T08:00) or a span "
            "back from now (12h, 7d, 2w)"
        ) from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=zone)


def span(since: str | None, until: str | None, period: str,
         now: datetime | None = None) -> tuple[datetime, datetime]:  # fmt: skip
    """The span asked for: ``since`` (default: 7 days back for days, 4 weeks for weeks, from
    the start of that period) to ``until`` (default: now). ValueError for one that cannot
    be read, that ends before it starts or that covers over 1000 periods."""
    now = now or timezone.now()
    zone = timezone.get_current_timezone()
    end = moment(until, now, zone) if until else now
    if since:
        start = moment(since, now, zone)
    else:
        start = period_start(now - timedelta(days=28 if period == "week" else 6), period, zone)
    if start >= end:
        raise ValueError(f"since ({start.isoformat()}) must be before until ({end.isoformat()})")
    if (end - start) / timedelta(days=7 if period == "week" else 1) > MAX_PERIODS:
        raise ValueError(f"at most {MAX_PERIODS} {period}s at once")
    return start, end


def asked(user: Any, query: Mapping[str, str]) -> dict[str, Any]:
    """:func:`usage` for ``user`` as a request asks for it (the API, the Usage page and its
    CSV): ``by`` (team, user), ``period`` (day, week), ``since`` and ``until`` (see
    :func:`span`), and only the jobs of ``team`` (its name; ``-``: jobs of no team) or of
    ``user`` (a username) where named. A ValidationError naming the field otherwise."""
    by, period = query.get("by") or "team", query.get("period") or "day"
    if by not in BY:
        raise ValidationError({"by": f"one of {', '.join(BY)}"})
    if period not in PERIODS:
        raise ValidationError({"period": f"one of {', '.join(PERIODS)}"})
    try:
        since, until = span(query.get("since") or None, query.get("until") or None, period)
    except ValueError as exc:
        raise ValidationError({"since": str(exc)}) from None
    team, owner = (query.get("team") or "").strip(), (query.get("user") or "").strip()
    answer = usage(user, since, until, by, period, team, owner)
    return {**answer, "team": team, "user": owner}
