"""A sweep: a search over hyperparameters whose trials are jobs (``training.Job`` rows with
``sweep`` set). The sweep's row holds what was asked; its trials' outcome is on their jobs
(``trial_state``, ``objective``), written by the sweep driver alone; what a page, the API or
the CLI shows of a sweep is read in one place, ``edtweb/sweeps/state.py``."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from edtweb.sweeps.space import ALGORITHMS, DIRECTIONS
from edtweb.training.models import PRECISION_CHOICES
from edtweb.training.validation import DEFAULTS
from scheduler.policies.model import COMPLETED, FAILED, QUEUED, RUNNING, STOPPED


class Sweep(models.Model):
    # a job's states less SUSPENDED (scheduler/policies/model.py), as choices
    State = models.TextChoices(
        "State", [(s, s) for s in (QUEUED, RUNNING, COMPLETED, STOPPED, FAILED)]
    )

    ACTIVE = (State.QUEUED, State.RUNNING)

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sweeps"
    )
    name = models.CharField(max_length=200)
    model_definition = models.ForeignKey(
        "registry.ModelDefinition", null=True, blank=True, on_delete=models.SET_NULL,
        related_name="sweeps",
    )  # fmt: skip
    dataset = models.ForeignKey(
        "datasets.Dataset", null=True, blank=True, on_delete=models.SET_NULL,
        related_name="sweeps",
    )  # fmt: skip
    model_path = models.CharField(max_length=500, help_text="the model definition's entry file")
    data_path = models.CharField(max_length=500, help_text="the dataset's directory")
    # The search (edtweb/sweeps/space.py judged it)
    space = models.JSONField(help_text="name -> {type, low, high, step} or {type, choices}")
    objective = models.CharField(max_length=100, help_text="a metric the trials record")
    direction = models.CharField(max_length=8, choices=[(d, d) for d in DIRECTIONS])
    algorithm = models.CharField(max_length=10, choices=[(a, a) for a in ALGORITHMS])
    max_trials = models.PositiveIntegerField()
    max_parallel = models.PositiveIntegerField()
    max_time = models.FloatField(default=0.0, help_text="seconds of running; 0: no limit")
    reduction_factor = models.PositiveIntegerField(default=3, help_text="ASHA and Hyperband")
    min_resource = models.PositiveIntegerField(
        default=0, help_text="steps before the first rung; 0: one epoch"
    )
    trial_steps = models.PositiveIntegerField(
        default=0, help_text="a trial's iterations at the sweep's batch (0: unknown)"
    )
    # Every trial's job values (a searched lr or batch_size replaces the sweep's)
    epochs = models.PositiveIntegerField(default=DEFAULTS["epochs"])
    batch_size = models.PositiveIntegerField(default=DEFAULTS["batch_size"])
    max_workers = models.PositiveIntegerField(default=DEFAULTS["max_workers"],
                                              help_text="per trial")  # fmt: skip
    min_workers = models.PositiveIntegerField(default=DEFAULTS["min_workers"])
    priority = models.PositiveIntegerField(default=DEFAULTS["priority"])
    lr = models.FloatField(default=DEFAULTS["lr"])
    checkpoint_every = models.PositiveIntegerField(default=DEFAULTS["checkpoint_every"])
    max_micro_batch = models.PositiveIntegerField(default=DEFAULTS["max_micro_batch"])
    precision = models.CharField(max_length=4, choices=PRECISION_CHOICES,
                                 default=DEFAULTS["precision"])  # fmt: skip
    # The input pipeline (docs/architecture.md, "Input pipeline")
    image_size = models.PositiveIntegerField(default=DEFAULTS["image_size"])
    loader_workers = models.PositiveIntegerField(default=DEFAULTS["loader_workers"])
    augment = models.PositiveSmallIntegerField(default=DEFAULTS["augment"])
    seed = models.IntegerField(default=0)
    # A WMLA hypersearch's (edtweb/api/wmla_hpo.py); empty for others: its request as sent
    # (``args``, ``sigName``, ``algoDef``, ``hyperParams``), what each trial's spec adds
    # (``argv``, ``script_decides``) and the fixed values each trial's config.json holds
    # beside its hyperparameters (``config``: Hyperband's resource)
    wmla = models.JSONField(default=dict, blank=True)
    # Its course
    state = models.CharField(max_length=10, choices=State.choices, default=State.QUEUED)
    study_name = models.CharField(max_length=100, unique=True, help_text="its Optuna study")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True, help_text="this run's start")
    ended_at = models.DateTimeField(null=True, blank=True)
    spent = models.FloatField(default=0.0, help_text="seconds run before its last stop")
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"sweep {self.pk} ({self.name})"

    TRAINING = ("epochs", "batch_size", "max_workers", "min_workers", "priority", "lr",
                "checkpoint_every", "max_micro_batch", "precision", "image_size",
                "loader_workers", "augment")  # fmt: skip

    @property
    def hypersearch(self) -> bool:
        """A WMLA hypersearch's: its trials report their objective in
        ``$RESULT_DIR/val_dict_list.json`` (edtweb/sweeps/results.py)."""
        return bool(self.wmla.get("request"))

    def training_values(self) -> dict[str, object]:
        """Every trial's submission values before its hyperparameters."""
        return {name: getattr(self, name) for name in self.TRAINING}
