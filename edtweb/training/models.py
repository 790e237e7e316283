from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import connections, models, router
from django.utils import timezone

from edtweb.training.validation import BOUNDS, DEFAULTS
from scheduler.policies.model import ACTIVE as ACTIVE_STATES_ORDERED
from scheduler.policies.model import JOB_STATES
from workers.learner.submission import PRECISIONS

PRECISION_CHOICES = [(p, p) for p in PRECISIONS]
PRIORITY = BOUNDS["priority"]


class Job(models.Model):
    # the scheduler's list of a job's states (scheduler/policies/model.py), as choices
    State = models.TextChoices("State", [(state, state) for state in JOB_STATES])
    ACTIVE = tuple(map(State, ACTIVE_STATES_ORDERED))

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="jobs"
    )
    name = models.CharField(max_length=200)
    # The team it was submitted into (null: none) and the resource group whose slots it runs
    # on (docs/architecture.md, "Tenancy"): both checked at submit (edtweb/tenancy/services.py).
    team = models.ForeignKey(
        "tenancy.Team", null=True, blank=True, on_delete=models.PROTECT, related_name="jobs"
    )
    resource_group = models.CharField(max_length=100, default="default")
    model_definition = models.ForeignKey(
        "registry.ModelDefinition", null=True, blank=True, on_delete=models.SET_NULL,
        related_name="jobs",
    )  # fmt: skip
    dataset = models.ForeignKey(
        "datasets.Dataset", null=True, blank=True, on_delete=models.SET_NULL, related_name="jobs"
    )
    model_path = models.CharField(max_length=500, help_text="the model definition's entry file")
    data_path = models.CharField(max_length=500, help_text="the dataset's directory")
    state = models.CharField(max_length=12, choices=State.choices, default=State.QUEUED)
    priority = models.PositiveIntegerField(
        default=DEFAULTS["priority"],
        validators=[MinValueValidator(PRIORITY.low), MaxValueValidator(PRIORITY.high)],
    )
    max_workers = models.PositiveIntegerField(
        default=DEFAULTS["max_workers"], validators=[MinValueValidator(BOUNDS["max_workers"].low)]
    )
    min_workers = models.PositiveIntegerField(
        default=DEFAULTS["min_workers"], validators=[MinValueValidator(BOUNDS["min_workers"].low)]
    )
    epochs = models.PositiveIntegerField(
        default=DEFAULTS["epochs"], validators=[MinValueValidator(BOUNDS["epochs"].low)]
    )
    batch_size = models.PositiveIntegerField(
        default=DEFAULTS["batch_size"], validators=[MinValueValidator(BOUNDS["batch_size"].low)]
    )
    max_micro_batch = models.PositiveIntegerField(
        default=DEFAULTS["max_micro_batch"], help_text="0: no cap"
    )
    # Goodput mode's global batch range (docs/architecture.md, "Goodput mode"); both 0: the
    # batch is fixed at batch_size
    batch_min = models.PositiveIntegerField(
        default=DEFAULTS["batch_min"], help_text="goodput mode: the smallest global batch"
    )
    batch_max = models.PositiveIntegerField(
        default=DEFAULTS["batch_max"], help_text="goodput mode: the largest global batch"
    )
    lr = models.FloatField(default=DEFAULTS["lr"])
    seed = models.IntegerField(default=0)
    checkpoint_every = models.PositiveIntegerField(default=DEFAULTS["checkpoint_every"])
    collective_timeout = models.FloatField(default=30.0)
    precision = models.CharField(
        max_length=4, choices=PRECISION_CHOICES, default=DEFAULTS["precision"],
        help_text="bf16: autocast on CPU or GPU; fp16: GPU only, with a gradient scaler",
    )  # fmt: skip
    # The input pipeline (docs/architecture.md, "Input pipeline")
    image_size = models.PositiveIntegerField(
        default=DEFAULTS["image_size"], help_text="an image folder's side; 0: the first image's"
    )
    loader_workers = models.PositiveIntegerField(
        default=DEFAULTS["loader_workers"], help_text="per learner; 0: the slot's share of cores"
    )
    augment = models.PositiveSmallIntegerField(
        default=DEFAULTS["augment"], help_text="1: random crop, flip and normalisation"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)
    steps_done = models.PositiveIntegerField(default=0)
    metrics_count = models.PositiveIntegerField(default=0, help_text="sequence of live updates")
    total_steps = models.PositiveIntegerField(default=0, help_text="iterations in all epochs")
    # A sweep's trial (edtweb/sweeps): its number in the sweep, its hyperparameters, and its
    # outcome as the sweep driver alone writes it: RUNNING until it is told to Optuna, then
    # COMPLETE, PRUNED or FAIL; the objective last reported (final once it ended) and why
    # it was pruned or failed as a trial
    sweep = models.ForeignKey(
        "sweeps.Sweep", null=True, blank=True, on_delete=models.SET_NULL, related_name="trials"
    )
    trial_number = models.PositiveIntegerField(null=True, blank=True)
    hparams = models.JSONField(default=dict, blank=True)
    trial_state = models.CharField(max_length=10, blank=True)
    objective = models.FloatField(null=True, blank=True)
    objective_step = models.PositiveIntegerField(null=True, blank=True)
    trial_note = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"job {self.pk} ({self.name})"

    @property
    def goodput(self) -> bool:
        """Goodput mode: the scheduler picks the global batch within the job's range."""
        return self.batch_max > 0

    @property
    def group_name(self) -> str:
        """The Channels group of this job's live page."""
        return f"job.{self.pk}"

    @property
    def store_id(self) -> str:
        """The job's id in Redis (protocol/keys.py)."""
        return str(self.pk)

    @property
    def workdir(self) -> Path:
        return Path(settings.EDT_DATA_DIR) / "jobs" / str(self.pk)

    @property
    def spec_path(self) -> Path:
        return self.workdir / "spec.json"


class JobEvent(models.Model):
    """One line of a job's timeline: allocation changes, failures, state changes."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    # When it happened (the scheduler writes a step's events together, after the step).
    at = models.DateTimeField(default=timezone.now, editable=False)
    kind = models.CharField(max_length=40)
    message = models.TextField()
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["at", "pk"]

    @classmethod
    def insert_many(cls, events: list[JobEvent]) -> None:
        """Write ``events`` in one statement, as ``bulk_create`` does (their ids are not
        set), each value adapted by the database's own operations for its field type but
        without Django's per-object path: a cold start records an event per job, 10,000 at
        once at 10k jobs (about 0.1 s this way, 0.3 s through ``bulk_create``)."""
        db = connections[router.db_for_write(cls)]
        ops, at, data = db.ops, db.ops.adapt_datetimefield_value, db.ops.adapt_json_value
        rows = [(e.job_id, at(e.at), e.kind, e.message, data(e.data, None)) for e in events]
        names = ("job", "at", "kind", "message", "data")
        columns = ", ".join(ops.quote_name(cls._meta.get_field(n).column) for n in names)  # type: ignore[union-attr]
        table = ops.quote_name(cls._meta.db_table)
        with db.cursor() as cursor:
            cursor.executemany(f"INSERT INTO {table} ({columns}) VALUES (%s, %s, %s, %s, %s)", rows)


class Metric(models.Model):
    """A training iteration (kind "train") or an epoch's evaluation (kind "test")."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="metrics")
    kind = models.CharField(max_length=8)
    step = models.PositiveIntegerField()
    epoch = models.PositiveIntegerField()
    time = models.FloatField(help_text="Unix time, seconds")
    values = models.JSONField(default=dict)

    class Meta:
        ordering = ["step", "pk"]
        indexes = [models.Index(fields=["job", "kind", "step"])]

    @classmethod
    def from_record(cls, job_id: int, record: dict[str, Any]) -> Metric:
        core = ("type", "step", "epoch", "time")
        values = {k: v for k, v in record.items() if k not in core}
        return cls(job_id=job_id, kind=record["type"], step=record["step"],
                   epoch=record.get("epoch", 0), time=record["time"], values=values)  # fmt: skip
