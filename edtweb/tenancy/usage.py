"""Slot-hours per team or per user, per day or per week: the one computation the API, the
CLI and the pages read (docs/architecture.md, "Tenancy").

A job's slots over time are on its timeline: each ``generation`` event says how many
learners train from then on (``workers``), and ``restart`` (every learner lost),
``suspended``, ``completed``, ``failed`` and ``stopped`` bring it to none; the Cluster
page's chart reads the same events. Between two of them the job held that many slots; a job
still holding slots holds them until now. The intervals are cut at the periods' bounds (in
the server's time zone: days from midnight, weeks from Monday) and summed. A deleted job's
timeline goes with it, and so does its usage.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, tzinfo
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.db.models.fields.json import KT
from django.utils import timezone

from edtweb.training.models import Job, JobEvent

HOLDING = "generation"  # its ``workers`` hold slots from then on
RELEASING = ("restart", "suspended", "completed", "failed", "stopped")
PERIODS = ("day", "week")
BY = ("team", "user")
MAX_PERIODS = 1000
ENDED = (Job.State.COMPLETED, Job.State.FAILED, Job.State.STOPPED)


@dataclass(frozen=True)
class Interval:
    """``job`` held ``slots`` slots from ``start`` to ``end``."""

    job: int
    start: datetime
    end: datetime
    slots: int


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


def usage(jobs: QuerySet[Job], since: datetime, until: datetime, by: str = "team",
          period: str = "day", zone: tzinfo | None = None) -> dict[str, Any]:  # fmt: skip
    """Slot-hours of ``jobs`` (those a user may see: edtweb/ownership.py) from ``since`` to
    ``until``, per ``period`` (``day`` or ``week``) and per ``by`` (``team``: its name,
    ``""`` for jobs without one; ``user``: the owner's name). Rows in period order, then by
    name; ``totals`` over the whole span."""
    if by not in BY or period not in PERIODS:
        raise ValueError(f"by is one of {BY}, period one of {PERIODS}")
    zone = zone or timezone.get_current_timezone()
    now = min(timezone.now(), until)
    # A job that ended before ``since`` held nothing since; one resumed since is active.
    alive = jobs.filter(created_at__lt=until).exclude(state__in=ENDED, finished_at__lt=since)
    who = {pk: (team or "", user) for pk, user, team in
           alive.values_list("pk", "owner__username", "team__name")}  # fmt: skip
    rows = (
        JobEvent.objects.filter(
            job_id__in=alive.values("pk"), kind__in=(HOLDING, *RELEASING), at__lt=until
        )
        .annotate(workers=KT("data__workers"))
        .values_list("job_id", "at", "kind", "workers")
    )
    events = ((job, at, kind, int(workers or 0)) for job, at, kind, workers in rows)
    seconds: dict[tuple[date, str], float] = defaultdict(float)
    for interval in intervals(events, now):
        team, user = who[interval.job]
        key = team if by == "team" else user
        for day, amount in cut(interval, since, until, period, zone):
            seconds[(day, key)] += amount
    totals: dict[str, float] = defaultdict(float)
    for (_, key), amount in seconds.items():
        totals[key] += amount
    return {
        "since": since.isoformat(),
        "until": until.isoformat(),
        "by": by,
        "period": period,
        "rows": [
            {"period": day.isoformat(), by: key, "slot_hours": hours(amount)}
            for (day, key), amount in sorted(seconds.items())
        ],
        "totals": [
            {by: key, "slot_hours": hours(amount)} for key, amount in sorted(totals.items())
        ],
    }


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


def asked(jobs: QuerySet[Job], query: Mapping[str, str]) -> dict[str, Any]:
    """:func:`usage` of ``jobs`` as a request asks for it (the API, the Usage page and its
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
    team, user = (query.get("team") or "").strip(), (query.get("user") or "").strip()
    if team:
        jobs = jobs.filter(team__isnull=True) if team == "-" else jobs.filter(team__name=team)
    if user:
        jobs = jobs.filter(owner__username=user)
    answer = usage(jobs, since, until, by, period)
    return {**answer, "team": team, "user": user}
