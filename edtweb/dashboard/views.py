from __future__ import annotations

import time
from itertools import groupby
from typing import Any

from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render

from edtweb import throttle
from edtweb.dashboard.slots import current_slots
from edtweb.ownership import login_required_json
from edtweb.redis_server import ping_error
from scheduler.policies.idle import IdleRule, duration


def _hosts(slots: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"name": host, "slots": list(group)}
        for host, group in groupby(slots, key=lambda s: s["host"])
    ]


def idle_words(rule: IdleRule) -> dict[str, Any]:
    """The idle rule as the Cluster page says it (docs/architecture.md, "Idle jobs")."""
    return {"on": rule.on, "below_percent": f"{rule.below * 100:g}",
            "duration": duration(rule.seconds)}  # fmt: skip


@login_required
def cluster(request: HttpRequest) -> HttpResponse:
    from django.conf import settings

    error = ping_error(settings.REDIS_URL, timeout=1.0)
    slots = [] if error else current_slots()
    from edtweb.ownership import owned
    from edtweb.training import standing
    from edtweb.training.models import Job

    queue, positions, reasons = standing.queue_of(owned(request, Job))
    context = {
        "hosts": _hosts(slots),
        "redis_error": error,
        "slot_count": len(slots),
        "queue": [
            {"job": job, "position": positions[job.pk], "reason": reasons.get(job.pk, "")}
            for job in queue
        ],
        "has_jobs": owned(request, Job).exists(),
        "idle_rule": idle_words(standing.idle_rule()),
        "nav": "cluster",
    }
    return render(request, "dashboard/cluster.html", context)


@login_required_json
def cluster_allocations(request: HttpRequest) -> JsonResponse:
    """Slots per job over time, from the jobs' generation events (the Cluster chart)."""
    from edtweb.ownership import visible_jobs
    from edtweb.training.models import JobEvent

    events = JobEvent.objects.filter(
        kind__in=["generation", "completed", "failed", "stopped", "suspended"]
    ).select_related("job")
    if not request.user.is_staff:
        events = events.filter(job__in=visible_jobs(request.user))
    series: dict[str, list[list[float]]] = {}
    names: dict[str, str] = {}
    for e in events.order_by("at")[:20000]:
        key = str(e.job_id)
        names[key] = e.job.name
        workers = e.data.get("workers", 0) if e.kind == "generation" else 0
        series.setdefault(key, []).append([e.at.timestamp(), workers])
    decisions = JobEvent.objects.filter(kind="scaled").select_related("job").order_by("-at")
    if not request.user.is_staff:
        decisions = decisions.filter(job__in=visible_jobs(request.user))
    return JsonResponse(
        {
            "series": series,
            "names": names,
            "now": time.time(),
            "decisions": [
                {"at": d.at.timestamp(), "job": d.job.name, "message": d.message}
                for d in decisions[:12]
            ],
        }
    )


class LoginView(auth_views.LoginView):
    """Django's login page, its failures counted per username (edtweb/throttle.py): past
    the limit, the page says for how long, with a 429 and Retry-After, and checks no
    password until then."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        username = request.POST.get("username", "")
        seconds = throttle.wait(username)
        if not seconds:
            return super().post(request, *args, **kwargs)
        form = AuthenticationForm(request, initial={"username": username})
        context = self.get_context_data(form=form, throttled=throttle.message(seconds))
        response = self.render_to_response(context, status=429)
        response["Retry-After"] = str(seconds)
        return response

    def form_invalid(self, form: AuthenticationForm) -> HttpResponse:
        throttle.failed(form.data.get("username", ""))
        return super().form_invalid(form)

    def form_valid(self, form: AuthenticationForm) -> HttpResponse:
        throttle.succeeded(form.get_user().get_username())
        return super().form_valid(form)
