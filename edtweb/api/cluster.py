"""The cluster over the API: slots now, allocations over time, the queue, decisions."""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from edtweb import params
from edtweb.api import serializers as s
from edtweb.api.common import Pages, scoped
from edtweb.dashboard import views as dashboard
from edtweb.dashboard.slots import current_slots
from edtweb.tenancy import shares
from edtweb.training import standing
from edtweb.training.models import Job, JobEvent
from edtweb.training.services import allocations

TAGS = ["cluster"]


class Slots(generics.GenericAPIView):
    @extend_schema(tags=TAGS, responses={200: s.SlotSerializer(many=True)})
    def get(self, request: Request) -> Response:
        """Every slot (one GPU, or one CPU slot): host, device, state, telemetry, and the
        job it runs (its id when the job is yours; ``busy`` either way)."""
        holders = slot_holders()
        mine = set(
            scoped(request, Job).filter(pk__in=holders.values()).values_list("pk", flat=True)
        )
        slots = []
        for slot in current_slots():
            holder = holders.get(slot["slot_id"])
            job = holder if holder in mine else None
            slots.append({**slot, "busy": holder is not None, "job": job})
        return Response(slots)


def slot_holders() -> dict[str, int]:
    """Slot id -> the job holding it, from the allocation record."""
    return allocations().holder()


class Allocations(generics.GenericAPIView):
    @extend_schema(tags=TAGS, responses={200: s.AllocationsSerializer})
    def get(self, request: Request) -> HttpResponse:
        """Slots per job over time (the Cluster page's chart) and the latest decisions."""
        return dashboard.cluster_allocations(request._request)


class Shares(generics.GenericAPIView):
    @extend_schema(
        tags=TAGS,
        parameters=[
            OpenApiParameter("since", str, description="a unix time (seconds): the entries "
                             "from then on; or the `cursor` of an earlier answer: only the "
                             "entries after it. Left out: all that are kept, up to 5000"),
        ],
        responses={200: s.SharesSerializer, 400: s.problem("`since` cannot be read")},
    )  # fmt: skip
    def get(self, request: Request) -> Response:
        """Each resource group's teams over time, as the scheduler wrote them: the group's
        capacity and slots held in all, each team's slots held against its entitlement,
        and what its jobs ask for; then each team's waiting jobs, in order. Staff see every
        team; anyone else the teams they are in (and their own jobs in the queue)."""
        try:
            after, moment = shares.since(request.query_params.get("since", ""))
        except params.BadParameter as exc:
            raise ValidationError({"since": [exc.why]}) from None
        return Response(shares.history(request.user, after, moment))


class Queue(generics.GenericAPIView):
    @extend_schema(tags=TAGS, responses={200: s.QueueEntrySerializer(many=True)})
    def get(self, request: Request) -> Response:
        """Your waiting jobs (QUEUED or SUSPENDED), by group in the order the scheduler
        serves them, each with its place in its group's queue and why it waits, as the
        scheduler's last decision said."""
        jobs, _, _ = standing.queue_of(scoped(request, Job))
        context = {"request": request}
        return Response(s.QueueEntrySerializer(jobs, many=True, context=context).data)


class Decisions(generics.ListAPIView):
    pagination_class = Pages
    serializer_class = s.DecisionSerializer

    def get_queryset(self) -> Any:
        events = JobEvent.objects.filter(kind="scaled").select_related("job").order_by("-at")
        if not self.request.user.is_staff:
            events = events.filter(job__in=scoped(self.request, Job))
        return events

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        rows = [
            {"at": e.at, "job": e.job_id, "job_name": e.job.name, "message": e.message,
             "data": e.data}
            for e in page
        ]  # fmt: skip
        return self.get_paginated_response(s.DecisionSerializer(rows, many=True).data)

    @extend_schema(tags=TAGS)
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """The scheduler's decisions about your jobs, newest first, each with its reason and
        its inputs (weights, demands, capacity)."""
        return super().get(request, *args, **kwargs)
