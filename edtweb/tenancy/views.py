"""The pages of teams, resource groups and usage (docs/architecture.md, "Tenancy").

Teams and Groups are staff's: a page that writes does so from its JavaScript through the
REST API (``edtweb/api/tenancy.py``), so every change goes through ``services.py``; these
views only read. Usage is everyone's, of the jobs they may see (``edtweb/ownership.py``),
computed by ``usage.py`` alone; its CSV is the same answer. Shares is everyone's, of the
teams they are in (staff: all), read by ``entitlement.py`` alone.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterator
from datetime import datetime
from functools import wraps
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.utils import timezone

from edtweb.ownership import team_ids
from edtweb.tenancy import entitlement, services, usage
from edtweb.tenancy.models import Membership, ResourceGroup, Team
from scheduler.groups import DEFAULT, KEYS

View = Callable[..., HttpResponse]


def staff_page(what: str) -> Callable[[View], View]:
    """A page for staff: anyone else logged in gets a 403 saying so (as the API's
    ``only staff may``); nobody logged in goes to the login page."""

    def decorate(view: View) -> View:
        @login_required
        @wraps(view)
        def checked(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.is_staff:
                raise PermissionDenied(f"only staff may {what}")
            return view(request, *args, **kwargs)

        return checked

    return decorate


def tree(teams: list[Team]) -> list[tuple[Team, int]]:
    """The teams in tree order (each after its parent, siblings by name), with their depth.
    A team whose chain of parents loops is shown at the top."""
    children: dict[int | None, list[Team]] = {}
    ids = {t.pk for t in teams}
    for team in teams:
        children.setdefault(team.parent_id if team.parent_id in ids else None, []).append(team)
    out: list[tuple[Team, int]] = []
    seen: set[int] = set()

    def visit(team: Team, depth: int) -> None:
        if team.pk in seen:
            return
        seen.add(team.pk)
        out.append((team, depth))
        for child in sorted(children.get(team.pk, []), key=lambda t: t.name):
            visit(child, depth + 1)

    for top in sorted(children.get(None, []), key=lambda t: t.name):
        visit(top, 0)
    for team in teams:  # a loop of parents: reachable from no top
        visit(team, 0)
    return out


@staff_page("manage teams")
def teams_page(request: HttpRequest) -> HttpResponse:
    teams = list(
        Team.objects.select_related("parent").prefetch_related(
            "allowed_groups", "memberships__user"
        )
    )
    rows = []
    for team, depth in tree(teams):
        members = sorted(team.memberships.all(), key=lambda m: m.user.get_username())
        rows.append({"team": team, "depth": depth, "indent": depth * 1.25,
                     "allowed": sorted(g.name for g in team.allowed_groups.all()
                                       if g.name != team.resource_group_id),
                     "members": members, "leads": [m for m in members if m.lead]})  # fmt: skip
    chosen_name = request.GET.get("team", "")
    chosen = next((t for t in teams if t.name == chosen_name), None)
    users = list(get_user_model().objects.order_by("username").prefetch_related("teams"))
    context: dict[str, Any] = {
        "rows": rows,
        "chosen": chosen,
        "missing": chosen_name if chosen_name and chosen is None else "",
        "groups": list(ResourceGroup.objects.all()),
        "users": [{"user": u, "teams": sorted(t.name for t in u.teams.all())} for u in users],
        "nav": "teams",
    }
    if chosen is not None:
        described = services.describe_team(chosen)
        inside = {m["username"] for m in described["members"]}
        context.update(
            described=described,
            below=_descendants(chosen, teams),
            candidates=[u for u in users if u.get_username() not in inside],
        )
    return render(request, "tenancy/teams.html", context)


def _descendants(team: Team, teams: list[Team]) -> set[str]:
    """The names of ``team`` and its sub-teams (none of them can be its parent)."""
    below, grew = {team.pk}, True
    while grew:
        more = {t.pk for t in teams if t.parent_id in below} - below
        below |= more
        grew = bool(more)
    return {t.name for t in teams if t.pk in below}


@staff_page("manage resource groups")
def groups_page(request: HttpRequest) -> HttpResponse:
    from django.conf import settings

    from edtweb.dashboard.slots import current_slots
    from edtweb.redis_server import ping_error

    ResourceGroup.objects.default()
    error = ping_error(settings.REDIS_URL, timeout=1.0)
    slots = [] if error else current_slots()
    groups = list(ResourceGroup.objects.prefetch_related("teams", "allowing_teams"))
    held: dict[str, list[dict[str, Any]]] = {}
    for slot in slots:
        held.setdefault(slot["group"], []).append(slot)
    rows = []
    for group in groups:
        mine = held.get(group.name, [])
        rows.append({
            "group": group,
            "described": services.describe_group(group),
            "slots": mine,
            "alive": sum(1 for s in mine if s["state"] == "alive"),
            "teams": sorted(t.name for t in group.teams.all()),
            "allowing": sorted(t.name for t in group.allowing_teams.all()),
        })  # fmt: skip
    context = {
        "rows": rows,
        "slots": slots,
        "redis_error": error,
        "default": DEFAULT,
        "keys": KEYS,
        "next_position": max((g.position for g in groups), default=0) + 10,
        "nav": "groups",
    }
    return render(request, "tenancy/groups.html", context)


@login_required
def shares_page(request: HttpRequest) -> HttpResponse:
    """Why each team has its share (``entitlement.py``): the user's teams (staff: every
    team), or the one ``?team=`` names, a 404 for one they are not in."""
    name = request.GET.get("team", "")
    only = None
    if name:
        only = next((t for t in entitlement.seen_teams(request.user) if t.name == name), None)
        if only is None:
            raise Http404(f"no team {name}: it does not exist or you are not in it")
    answer = entitlement.teams_now(request.user, only)
    zone = timezone.get_current_timezone()
    when = datetime.fromtimestamp(answer["t"], zone) if answer["t"] else None
    context = {"answer": answer, "at": when, "only": only, "nav": "shares"}
    return render(request, "tenancy/shares.html", context)


def _usage_choices(request: HttpRequest) -> tuple[list[str], list[str]]:
    """The teams and users the filters offer: staff all; anyone else their teams and the
    users of the jobs they may see."""
    user = request.user
    if user.is_staff:
        teams = list(Team.objects.values_list("name", flat=True))
        users = list(get_user_model().objects.values_list("username", flat=True))
    else:
        teams = list(Team.objects.filter(pk__in=team_ids(user)).values_list("name", flat=True))
        users = list(
            Membership.objects.filter(team_id__in=team_ids(user))
            .values_list("user__username", flat=True)
            .distinct()
        )
        users.append(user.get_username())
    return sorted(set(teams)), sorted(set(users))


@login_required
def usage_page(request: HttpRequest) -> HttpResponse:
    query = request.GET
    error, answer = "", None
    try:
        answer = usage.asked(request.user, query)
    except ValidationError as exc:
        error = "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())
    teams, users = _usage_choices(request)
    by = answer["by"] if answer else query.get("by", "team")
    context = {
        "answer": answer,
        "error": error,
        "by": by,
        "period": answer["period"] if answer else query.get("period", "day"),
        "since": query.get("since", ""),
        "until": query.get("until", ""),
        "team": query.get("team", ""),
        "user_filter": query.get("user", ""),
        "teams": teams,
        "users": users,
        "total": round(sum(t["slot_hours"] for t in answer["totals"]), 4) if answer else 0,
        "periods": _periods(answer) if answer else [],
        "span": _span_text(answer) if answer else "",
        "csv_query": query.urlencode(),
        "nav": "usage",
    }
    return render(request, "tenancy/usage.html", context, status=400 if error else 200)


def _periods(answer: dict[str, Any]) -> list[str]:
    """Every period of the answer's span (the chart shows the empty ones too)."""
    zone = timezone.get_current_timezone()
    since, until = (datetime.fromisoformat(answer[k]) for k in ("since", "until"))
    start, out = usage.period_start(since, answer["period"], zone), list[str]()
    while start < until and len(out) <= usage.MAX_PERIODS:
        out.append(start.date().isoformat())
        start = usage.next_period(start, answer["period"])
    return out


def _span_text(answer: dict[str, Any]) -> str:
    zone = timezone.get_current_timezone()
    since, until = (datetime.fromisoformat(answer[k]).astimezone(zone) for k in ("since", "until"))
    return f"{since:%Y-%m-%d %H:%M} to {until:%Y-%m-%d %H:%M}"


@login_required
def usage_csv(request: HttpRequest) -> HttpResponse:
    """The Usage page's answer as CSV: one line per period and team (or user); an average
    wait with no wait is left empty."""
    try:
        answer = usage.asked(request.user, request.GET)
    except ValidationError as exc:
        text = "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())
        return HttpResponse(text + "\n", status=400, content_type="text/plain")
    response = StreamingHttpResponse(_csv_lines(answer), content_type="text/csv")
    name = f"usage-by-{answer['by']}-per-{answer['period']}.csv"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


class _Line:
    def write(self, value: str) -> str:
        return value


def _csv_lines(answer: dict[str, Any]) -> Iterator[str]:
    writer = csv.writer(_Line())
    by = answer["by"]
    yield writer.writerow(["period", by, *CSV_COLUMNS])
    for row in answer["rows"]:
        yield writer.writerow([row["period"], row[by], *(_cell(row[k]) for k in CSV_COLUMNS)])


CSV_COLUMNS = ("slot_hours", "used_slot_hours", "waits", "average_wait_s", "shrinks", "reclaims")


def _cell(value: Any) -> Any:
    return "" if value is None else value
