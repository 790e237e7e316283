"""Sweeps over the API: create, list, detail (state, progress, best trial, trials), stop,
resume, clone; and jobs compared side by side. A sweep's state is read through
``edtweb/sweeps/state.py`` alone."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, status
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from edtweb import params
from edtweb.api import serializers as s
from edtweb.api.common import Owned, Pages, scoped
from edtweb.api.errors import ApiError, not_found
from edtweb.api.jobs import ready
from edtweb.datasets.models import Dataset
from edtweb.registry.models import ModelDefinition
from edtweb.sweeps import services
from edtweb.sweeps.compare import MAX_JOBS, compare
from edtweb.sweeps.models import Sweep
from edtweb.sweeps.space import SpaceRefused
from edtweb.sweeps.state import views
from edtweb.training.models import Job

TAGS = ["sweeps"]
NOT_FOUND = {404: s.problem("no such sweep, or not yours")}
BAD = {400: s.problem("malformed request or a rule broken; `fields` names each field")}


def refused(exc: SpaceRefused) -> ValidationError:
    return ValidationError(exc.errors)


def detail(sweep: Sweep) -> dict[str, Any]:
    return dict(s.SweepDetailSerializer(sweep, context={"sweep_views": views([sweep])}).data)


class SweepList(generics.ListCreateAPIView):
    pagination_class = Pages
    serializer_class = s.SweepSerializer

    def get_queryset(self) -> Any:
        sweeps = scoped(self.request, Sweep).select_related("owner")
        state = self.request.query_params.get("state", "").upper()
        if state and state not in Sweep.State.values:
            raise ValidationError({"state": [f"one of {', '.join(Sweep.State.values)}"]})
        return sweeps.filter(state=state) if state else sweeps

    @extend_schema(
        tags=TAGS,
        parameters=[OpenApiParameter("state", str, description="only sweeps in this state")],
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Your sweeps, newest first (staff: everyone's), each with its state, progress and
        best trial."""
        page = self.paginate_queryset(self.get_queryset())
        assert page is not None
        context = {"sweep_views": views(page), "request": request}
        return self.get_paginated_response(s.SweepSerializer(page, many=True, context=context).data)

    @extend_schema(
        tags=TAGS, request=s.SweepCreateSerializer, responses={201: s.SweepDetailSerializer, **BAD}
    )
    def post(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Create a sweep: the driver asks its algorithm for trials, each a job of yours on
        up to ``max_workers`` slots, ``max_parallel`` at a time, until ``max_trials`` ended
        or ``max_time`` passed; ASHA and Hyperband stop the trials that fall behind."""
        form = s.SweepCreateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        data = form.validated_data
        model = scoped(request, ModelDefinition).filter(pk=data["model"]).first()
        dataset = scoped(request, Dataset).filter(pk=data["dataset"]).first()
        model = ready(model, "model", data["model"], ModelDefinition.Status.VALID)
        dataset = ready(dataset, "dataset", data["dataset"], Dataset.Status.READY)
        try:
            sweep = services.create_sweep(request.user, model, dataset, dict(data),
                                          name=data["name"], seed=data["seed"])  # fmt: skip
        except SpaceRefused as exc:
            raise refused(exc) from None
        services.created(sweep)
        return Response(detail(sweep), status=status.HTTP_201_CREATED)


class SweepDetail(Owned, generics.GenericAPIView):
    model = Sweep
    noun = "sweep"

    @extend_schema(tags=TAGS, responses={200: s.SweepDetailSerializer, **NOT_FOUND})
    def get(self, request: Request, pk: int) -> Response:
        """A sweep: its state, progress (trials ended of its budget), best trial with its
        hyperparameters and objective, and every trial (its job, state, values)."""
        return Response(detail(self.get_object()))


def changed(
    sweep: Sweep, change: Callable[[Sweep], bool], refusal: Callable[[Sweep], str]
) -> Response:
    """The sweep after ``change`` (stop, resume), or a 409 saying ``refusal`` of the sweep as
    it stands when the change did not apply."""
    done = change(sweep)
    sweep.refresh_from_db()
    if not done:
        raise ApiError(refusal(sweep), 409)
    return Response(detail(sweep))


class SweepStop(Owned, generics.GenericAPIView):
    model = Sweep
    noun = "sweep"

    @extend_schema(
        tags=TAGS, request=None,
        responses={200: s.SweepDetailSerializer, 409: s.problem("the sweep has ended"),
                   **NOT_FOUND},
    )  # fmt: skip
    def post(self, request: Request, pk: int) -> Response:
        """Stop the sweep and its running trials (they checkpoint and stop); resume goes on
        from there."""
        return changed(
            self.get_object(), services.stop_sweep,
            lambda sweep: f"sweep {sweep.pk} has already ended ({sweep.state})",
        )  # fmt: skip


class SweepResume(Owned, generics.GenericAPIView):
    model = Sweep
    noun = "sweep"

    @extend_schema(
        tags=TAGS, request=None,
        responses={200: s.SweepDetailSerializer, 409: s.problem("the sweep is not STOPPED"),
                   **NOT_FOUND},
    )  # fmt: skip
    def post(self, request: Request, pk: int) -> Response:
        """Resume a stopped sweep: the trials it stopped continue from their checkpoints,
        and it asks for new ones while its budget and time last."""
        return changed(
            self.get_object(), services.resume_sweep,
            lambda sweep: f"sweep {sweep.pk} is {sweep.state}: only a STOPPED sweep resumes",
        )  # fmt: skip


class SweepClone(Owned, generics.GenericAPIView):
    model = Sweep
    noun = "sweep"
    serializer_class = s.SweepCloneSerializer

    @extend_schema(tags=TAGS, responses={201: s.SweepDetailSerializer, **BAD, **NOT_FOUND})
    def post(self, request: Request, pk: int) -> Response:
        """A new sweep asking what this one asked (space, objective, algorithm, budget,
        training values), with a study of its own; its model and dataset must still be
        valid and ready."""
        sweep = self.get_object()
        form = self.get_serializer(data=request.data)
        form.is_valid(raise_exception=True)
        for field, found, wanted in (("model", sweep.model_definition, "VALID"),
                                     ("dataset", sweep.dataset, "READY")):  # fmt: skip
            if found is not None:
                ready(found, field, found.pk, wanted)
        try:
            clone = services.clone_sweep(sweep, request.user, form.validated_data["name"])
        except SpaceRefused as exc:
            raise refused(exc) from None
        return Response(detail(clone), status=status.HTTP_201_CREATED)


class JobCompare(generics.GenericAPIView):
    @extend_schema(
        tags=["jobs"],
        parameters=[OpenApiParameter("ids", str, required=True,
                                     description=f"job ids, comma-separated (2 to {MAX_JOBS})")],
        responses={200: s.CompareSerializer, **BAD, 404: s.problem("a job is not yours")},
    )  # fmt: skip
    def get(self, request: Request) -> Response:
        """Jobs side by side (a sweep's trials, say): each one's configuration (its values
        and hyperparameters) and final metrics, and the configuration keys that differ."""
        try:
            ids = params.id_list("ids", request.query_params.get("ids", ""), MAX_JOBS)
        except params.BadParameter as exc:
            raise ValidationError({"ids": [exc.why]}) from None
        found = {j.pk: j for j in scoped(request, Job).filter(pk__in=params.storable(ids))
                 .select_related("model_definition", "dataset")}  # fmt: skip
        for pk in ids:
            if pk not in found:
                raise not_found("job", pk)
        return Response(compare([found[pk] for pk in ids]))
