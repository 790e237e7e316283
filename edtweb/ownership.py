"""Who may see and do what, in one place (docs/architecture.md, "Tenancy").

Every object is scoped to its owner; staff see all. A job submitted into a team is also
seen, read-only, by the team's members (the jobs list, its page, the API, its metrics and
its WebSocket); the team's leads may also change its priority and stop it. Deleting and
resuming a job stay its owner's (and staff's). Anyone else gets a 404, exactly as for a job
that does not exist; a member who may see a job but not change it gets a 403.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db.models import Model, Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse

READ = "read"  # see it: members of its team
STEER = "steer"  # change its priority, stop it: its team's leads
OWN = "own"  # delete it, resume it: its owner
LEVELS = ("", READ, STEER, OWN)


def _job_model() -> Any:
    from edtweb.training.models import Job

    return Job


def team_ids(user: Any, lead: bool = False) -> set[int]:
    """The teams ``user`` is a member of (``lead``: those they lead)."""
    from edtweb.tenancy.models import Membership

    if not user.is_authenticated:
        return set()
    members = Membership.objects.filter(user=user)
    return set((members.filter(lead=True) if lead else members).values_list("team_id", flat=True))


def visible_jobs(user: Any, jobs: QuerySet[Any] | None = None) -> QuerySet[Any]:
    """The jobs ``user`` may see: their own and their teams' (staff: all)."""
    from edtweb.tenancy.models import Membership

    jobs = _job_model().objects.all() if jobs is None else jobs
    if user.is_staff:
        return jobs
    if not user.is_authenticated:
        return jobs.none()
    teams = Membership.objects.filter(user=user).values("team_id")
    return jobs.filter(Q(owner=user) | Q(team__in=teams))


def visible_job_ids(user: Any, ids: Iterable[int]) -> set[int]:
    """Those of ``ids`` whose jobs ``user`` may see."""
    wanted = set(ids)
    if not wanted:
        return set()
    return set(visible_jobs(user).filter(pk__in=wanted).values_list("pk", flat=True))


class Viewer:
    """What one user may do with jobs, their teams read once: for the labels of a list
    (another user's job ahead in the queue is named only to whom may see it)."""

    def __init__(self, user: Any) -> None:
        self.user = user
        self.teams = team_ids(user) if not user.is_staff else set()
        self.leads = team_ids(user, lead=True) if not user.is_staff else set()

    def access(self, job: Any) -> str:
        """``own``, ``steer``, ``read`` or ``""`` (none)."""
        user = self.user
        if user.is_staff or job.owner_id == user.pk:
            return OWN
        if job.team_id is not None and job.team_id in self.leads:
            return STEER
        if job.team_id is not None and job.team_id in self.teams:
            return READ
        return ""

    def may(self, job: Any, need: str = READ) -> bool:
        return LEVELS.index(self.access(job)) >= LEVELS.index(need)


def access(user: Any, job: Any) -> str:
    """What ``user`` may do with ``job``: ``own``, ``steer``, ``read`` or ``""``."""
    return Viewer(user).access(job)


def may(user: Any, job: Any, need: str = READ) -> bool:
    return Viewer(user).may(job, need)


def refusal(job: Any, need: str) -> str:
    """Why a member who sees ``job`` may not do what needs ``need``, as a sentence."""
    team = job.team.name if job.team_id else ""
    who = "its owner, the leads of its team and staff" if need == STEER else "its owner and staff"
    return f"job {job.pk} is {job.owner.get_username()}'s in team {team}: only {who} may change it"


def owned(request: HttpRequest, model: type[Model]) -> QuerySet[Any]:
    """The objects of ``model`` the request's user may see: their own (jobs: and their
    teams'); staff see all."""
    if model is _job_model():
        return visible_jobs(request.user)
    objects = model.objects.all()  # type: ignore[attr-defined]
    user = request.user
    return objects if user.is_staff else objects.filter(owner=user)


def get_owned(request: HttpRequest, model: type[Model], pk: int, need: str = READ) -> Any:
    """The object, or 404 when it does not exist or the user may not see it; a job the user
    sees but may not do what ``need`` asks with is a 403 (``PermissionDenied``)."""
    found = owned(request, model).filter(pk=pk).first()
    if found is None:
        raise Http404(f"no {model._meta.verbose_name} {pk}")
    if model is _job_model() and not may(request.user, found, need):
        raise PermissionDenied(refusal(found, need))
    return found


def login_required_json(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """``login_required`` for what pages fetch: a session that ended (logged out in another
    tab, expired) gets 401 with a JSON reason, which the page's ``r.ok`` check handles,
    instead of a redirect to the login page's HTML."""

    @functools.wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            return JsonResponse({"detail": "not logged in: log in again"}, status=401)
        return view(request, *args, **kwargs)

    return wrapped
