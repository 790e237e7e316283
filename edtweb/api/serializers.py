"""What the API reads and writes. A submission's bounds, defaults and rules are the Train
form's (``workers/learner/submission.py``, through ``edtweb/training/validation.py``), so
the pages and the API accept exactly the same jobs and refuse the others with the same
messages."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema_field
from rest_framework import serializers

from edtweb.api.parsers import BoundedJSONField
from edtweb.datasets import services as datasets
from edtweb.datasets.models import Dataset
from edtweb.registry.models import ModelDefinition
from edtweb.training import history
from edtweb.training.models import PRECISION_CHOICES, Job, JobEvent, Metric
from edtweb.training.status import JobStatus, status_of
from edtweb.training.validation import (
    BOUNDS,
    DEFAULTS,
    Refused,
    Submission,
    train_samples,
    validated,
    validators,
)

# Errors ----------------------------------------------------------------------------------


class ErrorSerializer(serializers.Serializer):
    error = serializers.CharField(help_text="what went wrong and what to do")
    fields = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()),
        required=False,
        help_text="validation errors only: each offending field and its messages",
    )


def problem(description: str) -> OpenApiResponse:
    """An error response in the schema: always ``{"error": ...}``."""
    return OpenApiResponse(response=ErrorSerializer, description=description)


# Auth ------------------------------------------------------------------------------------


class LoginSerializer(serializers.Serializer):
    username = serializers.CharField()
    password = serializers.CharField(style={"input_type": "password"}, trim_whitespace=False)


class TokenSerializer(serializers.Serializer):
    token = serializers.CharField(help_text="send as 'Authorization: Token <token>'")
    username = serializers.CharField()


class UserSerializer(serializers.Serializer):
    username = serializers.CharField()
    is_staff = serializers.BooleanField(help_text="staff see every user's objects")


# Datasets --------------------------------------------------------------------------------


class ThumbnailSerializer(serializers.Serializer):
    file = serializers.CharField()
    label = serializers.CharField()
    url = serializers.CharField()


class DatasetSerializer(serializers.ModelSerializer):
    owner = serializers.CharField(source="owner.username", read_only=True)
    thumbnails = serializers.SerializerMethodField()

    class Meta:
        model = Dataset
        fields = ["id", "name", "owner", "filename", "status", "size", "received", "format",
                  "summary", "error", "progress", "created_at", "thumbnails",
                  "source"]  # fmt: skip
        read_only_fields = fields

    @extend_schema_field(ThumbnailSerializer(many=True))
    def get_thumbnails(self, dataset: Dataset) -> list[dict[str, str]]:
        base = f"/api/v1/datasets/{dataset.pk}/thumbnails/"
        return [{**t, "url": base + t["file"]} for t in datasets.thumbnails(dataset)]


class UploadStartSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=200, help_text="the dataset's name")
    filename = serializers.CharField(max_length=300, required=False, allow_blank=True, default="")
    size = serializers.IntegerField(min_value=1, help_text="the archive's size in bytes")


class DatasetRegisterSerializer(serializers.Serializer):
    """A dataset in place: a path under a data root (``EDT_DATA_ROOTS``), read where it is."""

    name = serializers.CharField(max_length=200, help_text="the dataset's name")
    path = serializers.CharField(
        max_length=1000, help_text="absolute, or relative to a data root (no '..')"
    )


class DatasetUploadSerializer(serializers.Serializer):
    """A whole archive in one multipart request (small archives; large ones resume better
    through the chunked upload)."""

    name = serializers.CharField(
        max_length=200, required=False, allow_blank=True, help_text="default: the file's name"
    )
    file = serializers.FileField(help_text=".zip, .tar or .tar.gz")


class UploadStateSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    status = serializers.CharField()
    received = serializers.IntegerField(help_text="bytes stored: the next chunk starts here")
    size = serializers.IntegerField()


# Models ----------------------------------------------------------------------------------


class ModelDefinitionSerializer(serializers.ModelSerializer):
    owner = serializers.CharField(source="owner.username", read_only=True)
    error_line = serializers.CharField(read_only=True, help_text="the line of the user's file")
    check = serializers.SerializerMethodField(
        help_text="while CHECKING: seconds since the check started and its limit"
    )

    class Meta:
        model = ModelDefinition
        fields = ["id", "name", "owner", "entry", "style", "status", "parameters",
                  "output_shape", "error", "error_line", "warnings", "created_at",
                  "check"]  # fmt: skip
        read_only_fields = fields

    def get_check(self, model: ModelDefinition) -> dict[str, float] | None:
        from edtweb.registry.services import check_progress

        return check_progress(model)


class ModelUploadSerializer(serializers.Serializer):
    name = serializers.CharField(
        max_length=200, required=False, allow_blank=True, help_text="default: the file's name"
    )
    file = serializers.FileField(help_text="a .py file, or a .zip/.tar/.tar.gz of a folder")
    entry = serializers.CharField(
        max_length=300,
        required=False,
        allow_blank=True,
        default="",
        help_text="the entry module in an archive",
    )


class ModelSourceSerializer(serializers.Serializer):
    entry = serializers.CharField()
    source = serializers.CharField()


# Jobs ------------------------------------------------------------------------------------


class JobSerializer(serializers.ModelSerializer):
    """A job with its status now (``training.status``: what the pages show too)."""

    owner = serializers.CharField(source="owner.username", read_only=True)
    model = serializers.IntegerField(source="model_definition_id", read_only=True, allow_null=True)
    dataset = serializers.IntegerField(source="dataset_id", read_only=True, allow_null=True)
    workers = serializers.SerializerMethodField(help_text="slots the job trains on now")
    progress = serializers.SerializerMethodField(help_text="0..1, iterations done")
    eta_seconds = serializers.SerializerMethodField(help_text="estimated time left, if known")
    waiting = serializers.SerializerMethodField(help_text="why it waits; empty unless it waits")
    position = serializers.SerializerMethodField(
        help_text="its place in its group's queue at the scheduler's last decision; 0: none"
    )
    reason = serializers.SerializerMethodField(
        help_text="the scheduler's reason: why it waits, or the rule that set its slots"
    )
    start_estimate = serializers.SerializerMethodField(
        help_text="[earliest, latest] seconds from now it should start (waiting jobs); null: none"
    )
    end_estimate = serializers.SerializerMethodField(
        help_text="[earliest, latest] seconds from now it should end; null: none"
    )
    estimate_text = serializers.SerializerMethodField(help_text="the estimates in words")
    team = serializers.SerializerMethodField(help_text="the team it was submitted into; '': none")
    idle = serializers.SerializerMethodField(
        help_text="'' unless the scheduler flagged it idle: for how long, under what, and "
        "whether a rule holds it at its minimum"
    )
    idle_since = serializers.SerializerMethodField(
        help_text="unix time its slots went under the idle utilisation; null: not idle"
    )

    class Meta:
        model = Job
        fields = ["id", "name", "owner", "team", "resource_group", "state", "priority",
                  "workers", "max_workers",
                  "min_workers", "model", "dataset", "epochs", "batch_size", "lr",
                  "checkpoint_every", "max_micro_batch", "batch_min", "batch_max", "precision",
                  "image_size", "loader_workers", "augment", "steps_done", "total_steps",
                  "progress", "eta_seconds", "waiting", "position", "reason", "start_estimate",
                  "end_estimate", "estimate_text", "idle", "idle_since", "created_at",
                  "started_at",
                  "finished_at", "error", "sweep", "trial_number", "hparams",
                  "trial_state", "objective"]  # fmt: skip
        read_only_fields = fields
        extra_kwargs = {
            "sweep": {"help_text": "the sweep this job is a trial of (null: none)"},
            "hparams": {"help_text": "a trial's hyperparameters"},
            "trial_state": {"help_text": "a trial's: RUNNING, COMPLETE, PRUNED or FAIL"},
            "objective": {"help_text": "a trial's objective, last reported"},
        }

    def get_workers(self, job: Job) -> int:
        return self.status(job).workers

    def get_progress(self, job: Job) -> float:
        return self.status(job).progress

    def get_eta_seconds(self, job: Job) -> float | None:
        return self.status(job).eta

    def get_waiting(self, job: Job) -> str:
        return self.status(job).waiting

    def get_idle(self, job: Job) -> str:
        return self.status(job).idle

    def get_idle_since(self, job: Job) -> float | None:
        return self.status(job).idle_since

    def get_position(self, job: Job) -> int:
        return self.status(job).position

    def get_reason(self, job: Job) -> str:
        return self.status(job).reason

    def get_start_estimate(self, job: Job) -> list[float] | None:
        found = self.status(job).start_estimate
        return list(found) if found else None

    def get_end_estimate(self, job: Job) -> list[float] | None:
        found = self.status(job).end_estimate
        return list(found) if found else None

    def get_estimate_text(self, job: Job) -> str:
        return self.status(job).estimate_text

    def get_team(self, job: Job) -> str:
        return self.status(job).team

    def status(self, job: Job) -> JobStatus:
        """The job's status, read once per job of the response (in the context, which the
        items of a list share)."""
        known = self.context.setdefault("statuses", {})
        if job.pk not in known:
            known[job.pk] = status_of(job, viewer(self.context, job))
        return known[job.pk]  # type: ignore[no-any-return]


def viewer(context: dict[str, Any], job: Job) -> Any:
    """Who reads the response: the request's user; without a request, the job's owner."""
    request = context.get("request")
    return request.user if request is not None else job.owner


class JobDetailSerializer(JobSerializer):
    logs = serializers.SerializerMethodField(help_text="learner logs, by slot")
    checkpoints = serializers.SerializerMethodField()
    model_ready = serializers.SerializerMethodField(help_text="the final model can be downloaded")

    class Meta(JobSerializer.Meta):
        fields = [*JobSerializer.Meta.fields, "logs", "checkpoints", "model_ready"]
        read_only_fields = fields

    def get_logs(self, job: Job) -> list[str]:
        return history.log_names(job)

    def get_checkpoints(self, job: Job) -> list[str]:
        return history.checkpoints(job)

    def get_model_ready(self, job: Job) -> bool:
        return history.downloadable(job, "model.pt") is not None


class Stated:
    """A submission's number field: its default and its stated bounds (the schema's
    ``minimum`` and ``maximum``) come from ``training.validation``; the bounds are judged
    with the other rules, once, by :func:`judged`. (Set in ``__init__``: DRF copies a
    declared field by calling it again.)"""

    def __init__(self, *, name: str, **kw: Any) -> None:
        super().__init__(default=DEFAULTS[name], **kw)  # type: ignore[call-arg]
        bound = BOUNDS[name]
        self.min_value, self.max_value = bound.low, bound.high  # stated, not run


class StatedInteger(Stated, serializers.IntegerField):
    """An integer submission field stating its bound and default."""


class StatedFloat(Stated, serializers.FloatField):
    """A real-valued submission field stating its bound and default."""


def bounded(kind: Any, name: str, **kw: Any) -> Any:
    stated = StatedFloat if kind is serializers.FloatField else StatedInteger
    return stated(name=name, **kw)


class JobSubmitSerializer(serializers.Serializer):
    # The submission's fields read and defaulted; its rules are ``judged``, once the dataset
    # is known.
    name = serializers.CharField(max_length=200, required=False, default="")
    model = serializers.IntegerField(help_text="id of a model definition that passed its check")
    dataset = serializers.IntegerField(help_text="id of a READY dataset")
    epochs = bounded(serializers.IntegerField, "epochs")
    batch_size = bounded(serializers.IntegerField, "batch_size",
                         help_text="the effective (global) batch")  # fmt: skip
    max_workers = bounded(serializers.IntegerField, "max_workers")
    min_workers = bounded(serializers.IntegerField, "min_workers")
    priority = bounded(serializers.IntegerField, "priority")
    checkpoint_every = bounded(serializers.IntegerField, "checkpoint_every")
    lr = bounded(serializers.FloatField, "lr")
    max_micro_batch = bounded(serializers.IntegerField, "max_micro_batch",
                              help_text="0: none; else accumulate over micro-batches")  # fmt: skip
    batch_min = bounded(serializers.IntegerField, "batch_min",
                        help_text="goodput mode: the smallest global batch (with batch_max; "
                                  "both 0: a fixed batch)")  # fmt: skip
    batch_max = bounded(serializers.IntegerField, "batch_max",
                        help_text="goodput mode: the largest global batch; batch_size is then "
                                  "the batch the learning rate is given for")  # fmt: skip
    precision = serializers.ChoiceField(
        choices=PRECISION_CHOICES, default=DEFAULTS["precision"],
        help_text="bf16: autocast on CPU or GPU; fp16: GPU only, with a gradient scaler",
    )  # fmt: skip
    image_size = bounded(serializers.IntegerField, "image_size",
                         help_text="an image folder's images: shorter side scaled to this, "
                                   "centre cut square; 0: the first image's size")  # fmt: skip
    loader_workers = bounded(serializers.IntegerField, "loader_workers",
                             help_text="DataLoader worker processes per learner; 0: the "
                                       "slot's share of its host's cores")  # fmt: skip
    augment = bounded(serializers.IntegerField, "augment",
                      help_text="1: random crop, flip and normalisation, seeded by the "
                                "job's seed and the sample's epoch")  # fmt: skip
    team = serializers.CharField(
        max_length=100, required=False, allow_blank=True, allow_null=True,
        help_text="a team of yours; left out: your default team; empty or null: no team",
    )  # fmt: skip
    resource_group = serializers.CharField(
        max_length=100, required=False, allow_blank=True,
        help_text="a group the team may use; left out: the team's own (no team: default)",
    )  # fmt: skip


def judged(values: dict[str, Any], dataset: Any = None) -> Submission:
    """The submission ``values`` ask for, judged by every rule of ``training.validation``
    (the API's and WMLA's one judgement per submit); the API's 400 for every rule broken."""
    try:
        return validated(values, train_samples(dataset))
    except Refused as refused:
        raise serializers.ValidationError({k: [v] for k, v in refused.errors.items()}) from None


class PrioritySerializer(serializers.Serializer):
    priority = serializers.IntegerField(
        validators=validators("priority"), help_text=BOUNDS["priority"].span
    )


class PreviewSerializer(serializers.Serializer):
    targets = serializers.DictField(child=serializers.IntegerField(), help_text="slots per job")
    text = serializers.CharField()
    capacity = serializers.IntegerField(required=False)


class EventSerializer(serializers.ModelSerializer):
    class Meta:
        model = JobEvent
        fields = ["id", "at", "kind", "message", "data"]
        read_only_fields = fields


class MetricSerializer(serializers.ModelSerializer):
    class Meta:
        model = Metric
        fields = ["kind", "step", "epoch", "time", "values"]
        read_only_fields = fields


class MetricsHistorySerializer(serializers.Serializer):
    seq = serializers.IntegerField(help_text="live updates continue from this number")
    total = serializers.IntegerField(help_text="training records stored")
    train = serializers.ListField(child=serializers.DictField(), help_text="thinned to ~points")
    test = serializers.ListField(child=serializers.DictField(), help_text="one per epoch")
    events = serializers.ListField(child=serializers.DictField())


class LogFileSerializer(serializers.Serializer):
    slot = serializers.CharField()
    size = serializers.IntegerField()


class LogChunkSerializer(serializers.Serializer):
    slot = serializers.CharField()
    offset = serializers.IntegerField(help_text="pass it back to read on")
    text = serializers.CharField()


class FileSerializer(serializers.Serializer):
    name = serializers.CharField()
    size = serializers.IntegerField()
    url = serializers.CharField()


def file_entry(job: Job, name: str) -> dict[str, Any]:
    path = history.downloadable(job, name)
    size = path.stat().st_size if path else 0
    return {"name": name, "size": size, "url": f"/api/v1/jobs/{job.pk}/files/{name}"}


# Sweeps ----------------------------------------------------------------------------------


class SweepCreateSerializer(serializers.Serializer):
    """A sweep's fields, read and defaulted; its rules are judged once by
    ``edtweb/sweeps/services.create_sweep`` (``edtweb/sweeps/space.py``)."""

    name = serializers.CharField(max_length=200, required=False, default="")
    model = serializers.IntegerField(help_text="id of a native model definition that passed "
                                     "its check")  # fmt: skip
    dataset = serializers.IntegerField(help_text="id of a READY dataset")
    space = BoundedJSONField(
        help_text="name -> {type: uniform|loguniform|int, low, high[, step]} or "
        "{type: choice, choices: [...]}; lr and batch_size set the trial job's own"
    )
    objective = serializers.CharField(
        max_length=100, help_text="a metric the trials record: loss, accuracy, test_loss, ..."
    )
    direction = serializers.CharField(default="minimize", help_text="minimize or maximize")
    algorithm = serializers.CharField(
        default="random", help_text="random, grid, tpe, asha or hyperband"
    )
    max_trials = serializers.IntegerField(
        required=False, allow_null=True, default=None,
        help_text="the budget of trials (default 10; a grid's: all its points)",
    )  # fmt: skip
    max_parallel = serializers.IntegerField(default=1, help_text="trials running at once")
    max_time = serializers.FloatField(
        default=0.0, help_text="seconds; no trial starts after (0: no limit)"
    )
    reduction_factor = serializers.IntegerField(default=3, help_text="ASHA and Hyperband")
    min_resource = serializers.IntegerField(
        default=0, help_text="steps before ASHA's first rung (0: one epoch)"
    )
    seed = serializers.IntegerField(
        default=None, allow_null=True,
        help_text="the sampler's and every trial's; left out: drawn at random (the sweep shows it)",
    )  # fmt: skip
    epochs = bounded(serializers.IntegerField, "epochs")
    batch_size = bounded(serializers.IntegerField, "batch_size",
                         help_text="the effective (global) batch")  # fmt: skip
    max_workers = bounded(serializers.IntegerField, "max_workers", help_text="per trial")
    min_workers = bounded(serializers.IntegerField, "min_workers")
    priority = bounded(serializers.IntegerField, "priority")
    checkpoint_every = bounded(serializers.IntegerField, "checkpoint_every")
    lr = bounded(serializers.FloatField, "lr")
    max_micro_batch = bounded(serializers.IntegerField, "max_micro_batch")
    precision = serializers.ChoiceField(choices=PRECISION_CHOICES, default=DEFAULTS["precision"])


class SweepCloneSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=200, required=False, default="",
                                 help_text="default: the sweep's, with (clone)")  # fmt: skip


class TrialSerializer(serializers.Serializer):
    job = serializers.IntegerField(help_text="the trial's job")
    number = serializers.IntegerField(help_text="0, 1, ... in the order asked")
    name = serializers.CharField()
    state = serializers.CharField(help_text="its job's state")
    trial_state = serializers.CharField(help_text="RUNNING, COMPLETE, PRUNED or FAIL")
    hparams = serializers.DictField(help_text="its hyperparameters")
    objective = serializers.FloatField(
        allow_null=True, help_text="the last value reported; final once it ended"
    )
    objective_step = serializers.IntegerField(allow_null=True)
    steps_done = serializers.IntegerField()
    total_steps = serializers.IntegerField()
    note = serializers.CharField(help_text="why it was pruned or failed")
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)


class SweepProgressSerializer(serializers.Serializer):
    done = serializers.IntegerField(help_text="trials ended: completed, pruned or failed")
    total = serializers.IntegerField(help_text="the budget of trials")
    running = serializers.IntegerField()
    completed = serializers.IntegerField()
    pruned = serializers.IntegerField()
    failed = serializers.IntegerField()
    fraction = serializers.FloatField(help_text="0..1 (1 once COMPLETED)")


class SweepSerializer(serializers.Serializer):
    """A sweep with its state now (``edtweb/sweeps/state.py``: what every page and the CLI
    show)."""

    id = serializers.IntegerField()
    name = serializers.CharField()
    owner = serializers.CharField(source="owner.username")
    model = serializers.IntegerField(source="model_definition_id", allow_null=True)
    dataset = serializers.IntegerField(source="dataset_id", allow_null=True)
    space = serializers.DictField()
    objective = serializers.CharField()
    direction = serializers.CharField()
    algorithm = serializers.CharField()
    max_trials = serializers.IntegerField()
    max_parallel = serializers.IntegerField()
    max_time = serializers.FloatField()
    reduction_factor = serializers.IntegerField()
    min_resource = serializers.IntegerField()
    seed = serializers.IntegerField()
    epochs = serializers.IntegerField()
    batch_size = serializers.IntegerField()
    max_workers = serializers.IntegerField(help_text="per trial")
    lr = serializers.FloatField()
    priority = serializers.IntegerField()
    state = serializers.CharField(help_text="QUEUED, RUNNING, COMPLETED, STOPPED or FAILED")
    progress = serializers.SerializerMethodField(help_text="trials ended of the budget")
    best = serializers.SerializerMethodField(help_text="the completed trial of the best objective")
    elapsed_seconds = serializers.SerializerMethodField()
    time_left_seconds = serializers.SerializerMethodField()
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    ended_at = serializers.DateTimeField(allow_null=True)
    error = serializers.CharField()

    def view(self, sweep: Any) -> Any:
        """The sweep's view, read once for every sweep of the response."""
        from edtweb.sweeps.state import views

        known = self.context.setdefault("sweep_views", {})
        if sweep.pk not in known:
            many = self.context.get("sweeps") or [sweep]
            known.update(views(many if sweep in many else [sweep]))
        return known[sweep.pk]

    @extend_schema_field(SweepProgressSerializer)
    def get_progress(self, sweep: Any) -> dict[str, Any]:
        v = self.view(sweep)
        return {"done": v.done, "total": v.total, "running": v.running,
                "completed": v.completed, "pruned": v.pruned, "failed": v.failed,
                "fraction": v.progress}  # fmt: skip

    @extend_schema_field(TrialSerializer(allow_null=True))
    def get_best(self, sweep: Any) -> dict[str, Any] | None:
        best = self.view(sweep).best
        return None if best is None else TrialSerializer(best.as_dict()).data

    def get_elapsed_seconds(self, sweep: Any) -> float:
        return float(self.view(sweep).elapsed)

    def get_time_left_seconds(self, sweep: Any) -> float | None:
        return self.view(sweep).time_left  # type: ignore[no-any-return]


class SweepDetailSerializer(SweepSerializer):
    trials = serializers.SerializerMethodField(help_text="every trial, by number")

    @extend_schema_field(TrialSerializer(many=True))
    def get_trials(self, sweep: Any) -> list[dict[str, Any]]:
        return [TrialSerializer(t.as_dict()).data for t in self.view(sweep).trials]


class CompareJobSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    state = serializers.CharField()
    sweep = serializers.IntegerField(allow_null=True)
    trial = serializers.IntegerField(allow_null=True, help_text="its number in the sweep")
    trial_state = serializers.CharField()
    config = serializers.DictField(help_text="its values and hyperparameters")
    final = serializers.DictField(help_text="its last metrics, steps, objective, seconds")


class CompareSerializer(serializers.Serializer):
    jobs = CompareJobSerializer(many=True)
    config_keys = serializers.ListField(child=serializers.CharField())
    final_keys = serializers.ListField(child=serializers.CharField())
    differs = serializers.ListField(
        child=serializers.CharField(), help_text="configuration keys whose values differ"
    )


# Cluster ---------------------------------------------------------------------------------


class SlotSerializer(serializers.Serializer):
    slot_id = serializers.CharField()
    host = serializers.CharField()
    index = serializers.IntegerField()
    device = serializers.CharField(help_text="'cpu', or the GPU's UUID")
    model = serializers.CharField(help_text="the GPU's model as NVML names it; '' for a CPU slot")
    host_slots = serializers.IntegerField(help_text="slots on its host (0: not said)")
    group = serializers.CharField(help_text="its resource group, by the groups' rules")
    queue = serializers.CharField()
    state = serializers.CharField(help_text="ALIVE, LOST or OFFLINE")
    pid = serializers.IntegerField()
    telemetry = serializers.DictField()
    busy = serializers.BooleanField(help_text="a job's learner runs there")
    job_idle = serializers.BooleanField(
        help_text="the scheduler flagged the job running there idle (its slots under "
        "EDT_IDLE_UTILISATION for EDT_IDLE_SECONDS)"
    )
    job = serializers.IntegerField(allow_null=True, help_text="that job, if it is yours")


class AllocationsSerializer(serializers.Serializer):
    series = serializers.DictField(
        child=serializers.ListField(child=serializers.ListField(child=serializers.FloatField())),
        help_text="job id -> [[unix time, workers], ...]",
    )
    names = serializers.DictField(child=serializers.CharField(), help_text="job id -> name")
    now = serializers.FloatField()
    decisions = serializers.ListField(child=serializers.DictField(), help_text="the latest")


class QueueEntrySerializer(JobSerializer):
    """A waiting job with its place and reason (``JobSerializer``'s, from the scheduler)."""

    class Meta(JobSerializer.Meta):
        fields = ["position", "reason", *[f for f in JobSerializer.Meta.fields
                                          if f not in ("position", "reason")]]  # fmt: skip
        read_only_fields = fields


class DecisionSerializer(serializers.Serializer):
    at = serializers.DateTimeField()
    job = serializers.IntegerField()
    job_name = serializers.CharField()
    message = serializers.CharField(help_text="the reason, as a person reads it")
    data = serializers.DictField(help_text="the decision's inputs")


# WMLA compatibility ----------------------------------------------------------------------

WMLA_STATES = ["SUBMITTED", "RUNNING", "PENDING_JOB_SCHEDULER", "FINISHED", "ERROR", "KILLED"]


class WmlaFrameworkSerializer(serializers.Serializer):
    name = serializers.CharField(help_text="a value for --exec-start")
    frameworkVersion = serializers.CharField()
    desc = serializers.ListField(child=serializers.CharField())


class WmlaSubmitSerializer(serializers.Serializer):
    file = serializers.FileField(help_text="the model folder as .tar, .tar.gz or .zip (or a .py)")
    args = serializers.CharField(
        required=False,
        help_text="e.g. --exec-start edtPyTorch --model-main main.py --edt-options maxWorkers=4 "
        "--epochs 5 --cs-datastore-meta type=fs,data_path=DATASET_NAME (or pass it in the query)",
    )
    data = serializers.CharField(required=False, help_text='JSON: {"args": "..."}')
    sigName = serializers.CharField(
        required=False, help_text="WMLA's instance group: a team of yours of that name, if any"
    )


class WmlaSubmittedSerializer(serializers.Serializer):
    id = serializers.CharField(help_text="the exec's id (the EDT job's id)")
    appId = serializers.CharField()
    state = serializers.CharField()
    ignored = serializers.ListField(child=serializers.CharField(), help_text="options not used")


class WmlaExecSerializer(serializers.Serializer):
    id = serializers.CharField()
    appId = serializers.CharField()
    name = serializers.CharField()
    appName = serializers.CharField()
    framework = serializers.CharField()
    creator = serializers.CharField()
    state = serializers.ChoiceField(choices=WMLA_STATES)
    edtState = serializers.CharField(help_text="the EDT job's state")
    elastic = serializers.BooleanField()
    numWorker = serializers.IntegerField(help_text="slots held now")
    maxWorkers = serializers.IntegerField()
    priority = serializers.IntegerField()
    createTime = serializers.CharField()
    startTime = serializers.CharField(allow_null=True)
    endTime = serializers.CharField(allow_null=True)
    progress = serializers.FloatField()
    error = serializers.CharField()
    args = serializers.CharField()


# Teams, resource groups, users, usage ---------------------------------------------------


class RuleSerializer(serializers.Serializer):
    host = serializers.CharField(help_text="glob on the host name; '' or '*': any")
    device = serializers.CharField(help_text="cpu, gpu, or '': either")
    model = serializers.CharField(help_text="glob on the GPU's model name (NVML); '': any")
    slots = serializers.IntegerField(allow_null=True, help_text="slots on its host; null: any")


class ResourceGroupSerializer(serializers.Serializer):
    name = serializers.CharField()
    position = serializers.IntegerField(help_text="groups' rules are tried in this order")
    shrink_idle = serializers.BooleanField(help_text="its idle jobs held at their minimum")
    rules = RuleSerializer(many=True, help_text="in order: a slot's group is its first match's")
    rule_texts = serializers.ListField(
        child=serializers.CharField(), help_text="the rules as written: host=gpu*,device=gpu"
    )


class ResourceGroupWriteSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100, required=False, help_text="on create only")
    position = serializers.IntegerField(min_value=0, required=False)
    shrink_idle = serializers.BooleanField(
        required=False, help_text="its idle jobs shrunk to their minimum, never stopped"
    )
    rules = serializers.ListField(
        child=BoundedJSONField(), required=False,
        help_text="each a text (host=gpu*,device=gpu,model=*H100*,slots=8) or an object "
        "{host, device, model, slots}",
    )  # fmt: skip


class MemberSerializer(serializers.Serializer):
    username = serializers.CharField()
    lead = serializers.BooleanField(
        help_text="may change the priority of the team's jobs, stop them"
    )
    default = serializers.BooleanField(help_text="the user's default team")


class MemberWriteSerializer(serializers.Serializer):
    username = serializers.CharField(required=False, help_text="on POST: the user to add")
    lead = serializers.BooleanField(required=False, help_text="left out: unchanged (new: no)")
    default = serializers.BooleanField(
        required=False, help_text="make it the user's default team (their first team is)"
    )


class TeamSerializer(serializers.Serializer):
    name = serializers.CharField()
    parent = serializers.CharField(allow_null=True)
    weight = serializers.IntegerField()
    guarantee = serializers.IntegerField(help_text="slots it is owed when it asks")
    limit = serializers.IntegerField(allow_null=True, help_text="the most slots; null: none")
    shrink_idle = serializers.BooleanField(help_text="its idle jobs held at their minimum")
    resource_group = serializers.CharField(help_text="its jobs' group unless they name another")
    allowed_groups = serializers.ListField(child=serializers.CharField())
    members = MemberSerializer(many=True)
    leads = serializers.ListField(child=serializers.CharField())


class TeamWriteSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100, required=False)
    parent = serializers.CharField(allow_null=True, allow_blank=True, required=False,
                                   help_text="a team's name; null or '': at the top")  # fmt: skip
    weight = serializers.IntegerField(min_value=1, required=False)
    guarantee = serializers.IntegerField(min_value=0, required=False)
    limit = serializers.IntegerField(min_value=0, allow_null=True, required=False)
    shrink_idle = serializers.BooleanField(
        required=False, help_text="its idle jobs (its sub-teams' too) shrunk to their minimum"
    )
    resource_group = serializers.CharField(max_length=100, required=False)
    allowed_groups = serializers.ListField(child=serializers.CharField(), required=False)


class NewUserSerializer(serializers.Serializer):
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(style={"input_type": "password"}, trim_whitespace=False)
    is_staff = serializers.BooleanField(default=False)


class UserListSerializer(serializers.Serializer):
    username = serializers.CharField()
    is_staff = serializers.BooleanField()
    teams = serializers.ListField(child=serializers.CharField())


class UsageRowSerializer(serializers.Serializer):
    period = serializers.DateField(help_text="the day, or the Monday of the week")
    team = serializers.CharField(required=False, help_text="by=team: '' for jobs without one")
    user = serializers.CharField(required=False, help_text="by=user")
    slot_hours = serializers.FloatField(help_text="allocated")
    used_slot_hours = serializers.FloatField(help_text="weighed by how busy the slots were")
    waits = serializers.IntegerField(help_text="waits for slots that ended (the job got slots)")
    average_wait_s = serializers.FloatField(allow_null=True, help_text="their mean, in seconds; "
                                            "null without any")  # fmt: skip
    shrinks = serializers.IntegerField(help_text="decisions that gave a job fewer slots")
    reclaims = serializers.IntegerField(help_text="shrinks of a team above its fair share")


class UsageTotalSerializer(serializers.Serializer):
    team = serializers.CharField(required=False)
    user = serializers.CharField(required=False)
    slot_hours = serializers.FloatField(help_text="allocated")
    used_slot_hours = serializers.FloatField(help_text="weighed by how busy the slots were")
    waits = serializers.IntegerField(help_text="waits for slots that ended (the job got slots)")
    average_wait_s = serializers.FloatField(allow_null=True, help_text="their mean, in seconds; "
                                            "null without any")  # fmt: skip
    shrinks = serializers.IntegerField(help_text="decisions that gave a job fewer slots")
    reclaims = serializers.IntegerField(help_text="shrinks of a team above its fair share")


class UsageSerializer(serializers.Serializer):
    since = serializers.DateTimeField()
    until = serializers.DateTimeField()
    by = serializers.ChoiceField(choices=["team", "user"])
    period = serializers.ChoiceField(choices=["day", "week"])
    rows = UsageRowSerializer(many=True)
    totals = UsageTotalSerializer(many=True)


# The teams' shares (the Cluster page's charts) and their preview ---------------------------


class TeamShareSerializer(serializers.Serializer):
    held = serializers.FloatField(help_text="slots its jobs hold (its sub-teams' counted)")
    entitled = serializers.FloatField(help_text="its entitlement, exact, in slots")
    demand = serializers.FloatField(help_text="slots its active jobs ask for")


class GroupShareSerializer(serializers.Serializer):
    capacity = serializers.FloatField(help_text="the group's slots")
    held = serializers.FloatField(help_text="slots held in the group, all teams together")
    teams = serializers.DictField(
        child=TeamShareSerializer(), help_text="team id ('' for jobs of no team) -> its share"
    )


class SharesEntrySerializer(serializers.Serializer):
    t = serializers.FloatField(help_text="unix time")
    groups = serializers.DictField(child=GroupShareSerializer(), help_text="by resource group")


class WaitingJobSerializer(serializers.Serializer):
    id = serializers.IntegerField(allow_null=True, help_text="null: a job you may not see")
    name = serializers.CharField()
    state = serializers.CharField()
    priority = serializers.IntegerField(allow_null=True)


class TeamQueueSerializer(serializers.Serializer):
    group = serializers.CharField()
    team = serializers.CharField(help_text="the team's name ('no team' for jobs of none)")
    jobs = WaitingJobSerializer(many=True, help_text="waiting, in the order they are served")


class SharesSerializer(serializers.Serializer):
    cursor = serializers.CharField(help_text="send as `after` to get only what comes next")
    now = serializers.FloatField()
    teams = serializers.DictField(child=serializers.CharField(), help_text="team id -> name")
    entries = SharesEntrySerializer(many=True, help_text="oldest first")
    queue = TeamQueueSerializer(many=True)


class UserPartSerializer(serializers.Serializer):
    user = serializers.CharField()
    held = serializers.FloatField(help_text="slots their jobs of the team hold")
    entitled = serializers.FloatField(help_text="their part of the team's fair share, exact")
    you = serializers.BooleanField(help_text="the user asking")


class TeamGroupLineSerializer(serializers.Serializer):
    group = serializers.CharField()
    capacity = serializers.FloatField(help_text="the group's slots")
    group_held = serializers.FloatField(help_text="slots held in the group, all teams together")
    weight = serializers.FloatField(help_text="its part beside its sibling teams")
    guarantee = serializers.FloatField(help_text="slots it may always claim here (0 elsewhere)")
    limit = serializers.FloatField(allow_null=True, help_text="null: none")
    entitled = serializers.FloatField(help_text="its fair share for what its jobs ask, exact")
    held = serializers.FloatField(help_text="slots its jobs hold (its sub-teams' counted)")
    demand = serializers.FloatField(help_text="slots its active jobs ask for")
    borrowed = serializers.FloatField(help_text="held beyond its guarantee: others may take "
                                      "them back when they ask")  # fmt: skip
    lent = serializers.FloatField(help_text="of its guarantee, what its jobs neither hold nor "
                                  "ask for: the others may use it until they do")  # fmt: skip
    users = UserPartSerializer(many=True, help_text="its own users' parts")


class TeamWaitingJobSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    owner = serializers.CharField()
    state = serializers.CharField()
    group = serializers.CharField()
    priority = serializers.IntegerField()
    min_workers = serializers.IntegerField()
    max_workers = serializers.IntegerField()
    position = serializers.IntegerField(help_text="its place in its group's queue; 0: none yet")
    reason = serializers.CharField(help_text="the scheduler's words: what it waits for")


class TeamNowSerializer(serializers.Serializer):
    team = serializers.CharField(help_text="its name; '' for the jobs of no team (staff)")
    name = serializers.CharField()
    member = serializers.BooleanField(help_text="you are in it")
    groups = TeamGroupLineSerializer(many=True, help_text="where it holds, asks or is owed")
    waiting = TeamWaitingJobSerializer(many=True, help_text="in the scheduler's order")


class TeamsNowSerializer(serializers.Serializer):
    t = serializers.FloatField(allow_null=True, help_text="unix time of the scheduler's entry")
    note = serializers.CharField(help_text="why there are no numbers; empty when there are")
    teams = TeamNowSerializer(many=True)


class TeamChangeSerializer(serializers.Serializer):
    weight = serializers.IntegerField(min_value=1, required=False)
    guarantee = serializers.IntegerField(min_value=0, required=False)
    limit = serializers.IntegerField(min_value=0, allow_null=True, required=False)
    parent = serializers.CharField(allow_null=True, allow_blank=True, required=False,
                                   help_text="a team's name; null or '': at the top")  # fmt: skip
    resource_group = serializers.CharField(
        max_length=100, required=False, help_text="its own group: where its guarantee counts"
    )


class SharesPreviewRequestSerializer(serializers.Serializer):
    teams = serializers.DictField(
        child=TeamChangeSerializer(), help_text="team name -> the changes to preview"
    )


class TeamPreviewSerializer(serializers.Serializer):
    team = serializers.CharField(help_text="'' for the jobs of no team")
    now = serializers.IntegerField(help_text="slots its jobs hold now")
    before = serializers.IntegerField(help_text="slots the policy gives it as the teams are")
    after = serializers.IntegerField(help_text="slots the policy would give it with the change")
    entitled_before = serializers.FloatField()
    entitled_after = serializers.FloatField()
    demand = serializers.IntegerField(help_text="slots its active jobs ask for")
    changed = serializers.BooleanField(help_text="one of the teams changed")


class GroupPreviewSerializer(serializers.Serializer):
    group = serializers.CharField()
    capacity = serializers.IntegerField(help_text="its alive slots")
    jobs = serializers.IntegerField(help_text="its active jobs")
    teams = TeamPreviewSerializer(many=True)


class SharesPreviewSerializer(serializers.Serializer):
    policy = serializers.CharField(help_text="the scheduler's policy, which computed both")
    divides_by_team = serializers.BooleanField()
    note = serializers.CharField(help_text="what the numbers do not show, if anything")
    groups = GroupPreviewSerializer(many=True)
