"""Jobs over the API: submit, list, detail, delete, priority (and its preview), stop, events,
metrics (downsampled history, or paged records), logs by offset, checkpoints, files."""

from __future__ import annotations

from typing import Any

from django.http import FileResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, status
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from edtweb import params
from edtweb.api import serializers as s
from edtweb.api.common import Owned, Pages, scoped
from edtweb.api.errors import ApiError
from edtweb.datasets.models import Dataset
from edtweb.ownership import OWN, STEER
from edtweb.registry.models import ModelDefinition
from edtweb.tenancy import services as tenancy
from edtweb.training import history, services
from edtweb.training.models import Job, Metric

TAGS = ["jobs"]
NOT_FOUND = {404: s.problem("no such job, or not yours")}
READ_ONLY = {403: s.problem("a job of your team: only its owner, the team's leads and staff may")}
OWNER_ONLY = {403: s.problem("a job of your team: only its owner and staff may")}
BAD = {400: s.problem("malformed request; `fields` names the field")}


class JobList(generics.ListCreateAPIView):
    pagination_class = Pages

    def get_queryset(self) -> Any:
        jobs = scoped(self.request, Job).select_related("owner")
        state = self.request.query_params.get("state", "").upper()
        if state and state not in Job.State.values:
            raise ValidationError({"state": [f"one of {', '.join(Job.State.values)}"]})
        return jobs.filter(state=state) if state else jobs

    def get_serializer_class(self) -> Any:
        return s.JobSubmitSerializer if self.request.method == "POST" else s.JobSerializer

    @extend_schema(
        tags=TAGS,
        parameters=[OpenApiParameter("state", str, description="only jobs in this state")],
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Your jobs, newest first (staff: everyone's)."""
        return super().get(request, *args, **kwargs)

    @extend_schema(
        tags=TAGS, request=s.JobSubmitSerializer, responses={201: s.JobDetailSerializer, **BAD}
    )
    def post(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Submit a job: it starts at once on whatever slots are free, up to
        ``max_workers``, and grows and shrinks as the scheduler decides."""
        form = s.JobSubmitSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        job = services.submit_from_form(request.user, checked(request, form.validated_data))
        return Response(s.JobDetailSerializer(job).data, status=status.HTTP_201_CREATED)


def checked(request: Request, data: dict[str, Any]) -> dict[str, Any]:
    """The submission with its values judged by the rules (once: the serializer only read
    them; first, as every path does), its team and resource group checked (a member's
    team, a group it may use), then its model and dataset resolved among the user's
    own."""
    model = scoped(request, ModelDefinition).filter(pk=data["model"]).first()
    dataset = scoped(request, Dataset).filter(pk=data["dataset"]).first()
    submission = s.judged(data, dataset)
    team, group = tenancy.placement(
        request.user, data.get("team", tenancy.UNSET), data.get("resource_group")
    )
    return {
        "name": data.get("name", ""),
        "model": ready(model, "model", data["model"], ModelDefinition.Status.VALID),
        "dataset": ready(dataset, "dataset", data["dataset"], Dataset.Status.READY),
        "submission": submission,
        "team": team,
        "resource_group": group,
    }


def ready(found: Any, field: str, pk: int, wanted: str) -> Any:
    if found is None:
        raise ValidationError({field: [f"no {field} {pk} among yours"]})
    if found.status != wanted:
        why = f": {found.error}" if found.error else ""
        raise ValidationError({field: [f"{field} {pk} is {found.status}, not {wanted}{why}"]})
    return found


class JobDetail(Owned, generics.RetrieveAPIView):
    model = Job
    noun = "job"
    serializer_class = s.JobDetailSerializer

    @extend_schema(tags=TAGS, responses={200: s.JobDetailSerializer, **NOT_FOUND})
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """A job: state, workers now and max, progress and ETA, logs, checkpoints, error."""
        return super().get(request, *args, **kwargs)

    @extend_schema(
        tags=TAGS,
        responses={
            204: None,
            409: s.problem("the job is still active: stop it first"),
            **OWNER_ONLY,
            **NOT_FOUND,
        },
    )
    def delete(self, request: Request, pk: int) -> Response:
        """Delete a job that has ended, with its timeline, metrics, logs, checkpoints and
        final model. A queued, running or suspended job must be stopped first. Its owner
        and staff may."""
        job = self.get_object(OWN)
        if not services.delete_job(job.pk):  # refuses an active job
            raise ApiError(f"job {job.pk} is {job.state}: stop it first", 409)
        return Response(status=status.HTTP_204_NO_CONTENT)


class JobPriority(Owned, generics.GenericAPIView):
    model = Job
    noun = "job"
    serializer_class = s.PrioritySerializer

    @extend_schema(
        tags=TAGS,
        responses={200: s.JobDetailSerializer, **BAD, 409: s.problem("the job has ended"),
                   **READ_ONLY, **NOT_FOUND},
    )  # fmt: skip
    def post(self, request: Request, pk: int) -> Response:
        """Change the job's priority (its bounds are in the schema); the scheduler re-shares
        the slots at once, between iterations, without restarting anything. A job that has
        ended is a 409. Its owner, the leads of its team and staff may."""
        job = self.get_object(STEER)
        form = self.get_serializer(data=request.data)
        form.is_valid(raise_exception=True)
        if not services.set_priority(job, form.validated_data["priority"]):
            job.refresh_from_db()
            raise ApiError(f"job {job.pk} is {job.state}: an ended job's priority is final", 409)
        job.refresh_from_db()
        return Response(s.JobDetailSerializer(job).data)


class JobPriorityPreview(Owned, generics.GenericAPIView):
    model = Job
    noun = "job"

    @extend_schema(
        tags=TAGS,
        parameters=[OpenApiParameter("priority", int, required=True)],
        responses={200: s.PreviewSerializer, **BAD, **NOT_FOUND},
    )
    def get(self, request: Request, pk: int) -> Response:
        """What the scheduler would decide if the job had this priority ("B 5, A 3")."""
        job = self.get_object()
        form = s.PrioritySerializer(data=request.query_params)
        form.is_valid(raise_exception=True)
        return Response(history.preview(job, form.validated_data["priority"], request.user))


class JobStop(Owned, generics.GenericAPIView):
    model = Job
    noun = "job"

    @extend_schema(
        tags=TAGS,
        request=None,
        responses={
            200: s.JobDetailSerializer,
            409: s.problem("the job has already ended"),
            **READ_ONLY,
            **NOT_FOUND,
        },
    )
    def post(self, request: Request, pk: int) -> Response:
        """Stop the job: its learners checkpoint and exit; it ends STOPPED. Its owner, the
        leads of its team and staff may."""
        job = self.get_object(STEER)
        if not services.stop_job(job.pk):
            job.refresh_from_db()
            raise ApiError(f"job {job.pk} has already ended ({job.state})", 409)
        job.refresh_from_db()
        return Response(s.JobDetailSerializer(job).data)


@extend_schema(tags=TAGS, responses={200: s.EventSerializer(many=True), **NOT_FOUND})
class JobEvents(Owned, generics.GenericAPIView):
    """The job's timeline: every allocation change, failure and priority change, with its
    reason."""

    model = Job
    noun = "job"
    serializer_class = s.EventSerializer

    def get(self, request: Request, pk: int) -> Response:
        job = self.get_object()
        return Response(s.EventSerializer(job.events.all(), many=True).data)


class JobMetrics(Owned, generics.GenericAPIView):
    model = Job
    noun = "job"

    @extend_schema(
        tags=TAGS,
        parameters=[OpenApiParameter("points", int, description="about this many (2000)")],
        responses={200: s.MetricsHistorySerializer, **BAD, **NOT_FOUND},
    )
    def get(self, request: Request, pk: int) -> Response:
        """The metrics history as the job's page draws it: training records thinned to about
        ``points`` (the last one always kept), every test record, the events."""
        job = self.get_object()
        points = int_param(request, "points", 2000, 1, 100_000)
        return Response(history.metrics(job, points))


class JobMetricRecords(Owned, generics.ListAPIView):
    model = Job
    noun = "job"
    serializer_class = s.MetricSerializer
    pagination_class = Pages

    def get_queryset(self) -> Any:
        if getattr(self, "swagger_fake_view", False):
            return Metric.objects.none()
        job = Owned.get_object(self)
        records = Metric.objects.filter(job=job).order_by("step", "pk")
        kind = self.request.query_params.get("kind")
        return records.filter(kind=kind) if kind else records

    @extend_schema(
        tags=TAGS,
        parameters=[OpenApiParameter("kind", str, enum=["train", "test"])],
        responses={200: s.MetricSerializer(many=True), **NOT_FOUND},
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """Every metric record, in step order, a page at a time (``limit``, ``offset``)."""
        return super().get(request, *args, **kwargs)


class JobLogs(Owned, generics.GenericAPIView):
    model = Job
    noun = "job"

    @extend_schema(tags=TAGS, responses={200: s.LogFileSerializer(many=True), **NOT_FOUND})
    def get(self, request: Request, pk: int) -> Response:
        """The job's learner logs, one per slot it has run on, with their sizes."""
        job = self.get_object()
        logs = job.workdir / "logs"
        return Response(
            [
                {"slot": name, "size": (logs / f"{name}.log").lstat().st_size}
                for name in history.log_names(job)
            ]
        )


class JobLog(Owned, generics.GenericAPIView):
    model = Job
    noun = "job"

    @extend_schema(
        tags=TAGS,
        parameters=[
            OpenApiParameter("offset", int, description="from this byte; negative: the last"),
            OpenApiParameter("limit", int, description="at most this many bytes (65536)"),
        ],
        responses={200: s.LogChunkSerializer, **NOT_FOUND},
    )
    def get(self, request: Request, pk: int, slot: str) -> Response:
        """A learner's log from byte ``offset``; pass the returned ``offset`` back to read
        on (``edt logs --follow`` does)."""
        job = self.get_object()
        if slot not in history.log_names(job):
            raise ApiError(f"job {job.pk} has no log for slot {slot!r}", 404)
        offset = int_param(request, "offset", 0, None, None)
        limit = int_param(request, "limit", 65536, 1, 1024 * 1024)
        return Response(history.log_tail(job, slot, offset, limit))


class JobCheckpoints(Owned, generics.GenericAPIView):
    model = Job
    noun = "job"

    @extend_schema(tags=TAGS, responses={200: s.FileSerializer(many=True), **NOT_FOUND})
    def get(self, request: Request, pk: int) -> Response:
        """The job's checkpoints and, once it completed, its final model (model.pt)."""
        job = self.get_object()
        names = history.checkpoints(job)
        if history.downloadable(job, "model.pt"):
            names.append("model.pt")
        return Response([s.file_entry(job, name) for name in names])


class JobFile(Owned, generics.GenericAPIView):
    model = Job
    noun = "job"

    @extend_schema(
        tags=TAGS,
        responses={(200, "application/octet-stream"): OpenApiTypes.BINARY, **NOT_FOUND},
    )
    def get(self, request: Request, pk: int, name: str) -> FileResponse:
        """Download the final model (``model.pt``) or a checkpoint; load it with
        ``torch.load(path, weights_only=True)``."""
        job = self.get_object()
        opened = history.open_download(job, name)
        if opened is None:
            hint = f"; the job is {job.state}" if name == "model.pt" else ""
            raise ApiError(f"job {job.pk} has no file {name!r}{hint}", 404)
        return FileResponse(opened, as_attachment=True, filename=f"job{job.pk}-{name}")


def int_param(request: Request, name: str, default: int, low: int | None, high: int | None) -> int:
    try:
        return params.whole(request.query_params, name, default, low, high)
    except params.BadParameter as exc:
        raise ValidationError({name: [exc.why]}) from None
