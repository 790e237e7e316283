from __future__ import annotations

from typing import Any

from django import forms

from edtweb.datasets.models import Dataset
from edtweb.registry.models import ModelDefinition
from edtweb.tenancy.models import Team
from edtweb.training.models import PRECISION_CHOICES
from edtweb.training.validation import (
    BOUNDS,
    DEFAULTS,
    Refused,
    html_limits,
    train_samples,
    validated,
)
from scheduler.groups import DEFAULT as DEFAULT_GROUP


def bounded(kind: Any, name: str, **kw: Any) -> Any:
    """A number field showing the default and the bounds of ``validation`` (its input's
    ``min`` and ``max``); the bounds are judged with the other rules, in ``clean``."""
    field = kind(initial=DEFAULTS[name], **kw)
    field.widget.attrs.update(html_limits(name))
    return field


class TrainForm(forms.Form):
    name = forms.CharField(
        max_length=200, required=False, help_text="defaults to the model and dataset names"
    )
    model = forms.ModelChoiceField(
        queryset=ModelDefinition.objects.none(), help_text="only models that passed their check"
    )
    dataset = forms.ModelChoiceField(queryset=Dataset.objects.none())
    epochs = bounded(forms.IntegerField, "epochs")
    batch_size = bounded(
        forms.IntegerField, "batch_size", label="Effective batch size",
        help_text="the global batch: the same at any number of workers",
    )  # fmt: skip
    max_workers = bounded(
        forms.IntegerField, "max_workers", help_text="the most GPUs (slots) this job may hold"
    )
    min_workers = bounded(
        forms.IntegerField, "min_workers", help_text="fewer than this and the job waits"
    )
    priority = bounded(
        forms.IntegerField, "priority",
        help_text=f"{BOUNDS['priority'].span}; shares are weighted by priority",
    )  # fmt: skip
    checkpoint_every = bounded(
        forms.IntegerField, "checkpoint_every", label="Checkpoint every N epochs"
    )
    lr = bounded(forms.FloatField, "lr", label="Learning rate")
    max_micro_batch = bounded(
        forms.IntegerField, "max_micro_batch", label="Micro-batch cap",
        help_text="0: none; else gradients accumulate over micro-batches of at most this size",
    )  # fmt: skip
    batch_min = bounded(
        forms.IntegerField, "batch_min", label="Goodput mode: smallest global batch",
        required=False,
        help_text="with the largest: the scheduler picks the global batch in this range and "
        "the learning rate follows it (the effective batch is then the learning rate's base); "
        "0 and 0: a fixed batch",
    )  # fmt: skip
    batch_max = bounded(
        forms.IntegerField, "batch_max", label="Goodput mode: largest global batch",
        required=False,
        help_text="at most the dataset's training samples",
    )  # fmt: skip
    precision = forms.ChoiceField(
        choices=PRECISION_CHOICES,
        initial=DEFAULTS["precision"],
        help_text="bf16: autocast on CPU or GPU; fp16: GPU only, with a gradient scaler",
    )
    image_size = bounded(
        forms.IntegerField, "image_size", label="Image size", required=False,
        help_text="an image folder's images: shorter side scaled to this, centre cut; "
        "0: the first image's size",
    )  # fmt: skip
    loader_workers = bounded(
        forms.IntegerField, "loader_workers", label="Loader workers", required=False,
        help_text="DataLoader processes per learner; 0: the slot's share of its host's cores",
    )  # fmt: skip
    augment = bounded(
        forms.IntegerField, "augment", label="Augmentation", required=False,
        help_text="1: random crop, flip and normalisation (seeded by the job and epoch)",
    )  # fmt: skip
    team = forms.ModelChoiceField(
        queryset=Team.objects.none(), required=False, empty_label="no team",
        to_field_name="name", help_text="its slots are shared by the team's weight and quota",
    )  # fmt: skip

    def __init__(self, *args: Any, owner_models: Any, owner_datasets: Any,
                 teams: Any = None, default_team: Any = None, **kw: Any) -> None:  # fmt: skip
        super().__init__(*args, **kw)
        self.fields["model"].queryset = owner_models.filter(status=ModelDefinition.Status.VALID)
        self.fields["dataset"].queryset = owner_datasets.filter(status=Dataset.Status.READY)
        # Only the user's own teams, their default one first chosen; none: no field at all.
        if teams is None or not teams.exists():
            del self.fields["team"]
        else:
            self.fields["team"].queryset = teams
            if not self.is_bound and not self.initial.get("team") and default_team is not None:
                self.initial["team"] = default_team.name
        # A fresh form starts on the newest usable model and dataset (a link may name others).
        for name in ("model", "dataset"):
            if not self.is_bound and not self.initial.get(name):
                newest = self.fields[name].queryset.order_by("-created_at", "-pk").first()
                self.initial[name] = newest.pk if newest else None

    # What a first job needs; the rest is folded under "Advanced" (its defaults are EDT's).
    BASIC = ("name", "model", "dataset", "epochs", "max_workers", "team")

    @property
    def basic_fields(self) -> list[Any]:
        return [self[name] for name in self.BASIC if name in self.fields]

    @property
    def advanced_fields(self) -> list[Any]:
        return [self[name] for name in self.fields if name not in self.BASIC]

    @property
    def advanced_errors(self) -> bool:
        """Whether a folded field has an error (then it opens)."""
        return self.is_bound and any(field.errors for field in self.advanced_fields)

    def clean(self) -> dict[str, Any]:
        """The submission judged once, when each of its values could be read (a field that
        could not already says so); ``submission`` is what the job is built from."""
        data = super().clean() or {}
        for name in ("batch_min", "batch_max"):  # optional: left empty, a fixed batch
            if name in data and data[name] is None:
                data[name] = DEFAULTS[name]
        team = data.get("team")
        data["resource_group"] = team.resource_group_id if team is not None else DEFAULT_GROUP
        if any(name not in data for name in DEFAULTS):
            return data
        try:
            data["submission"] = validated(data, train_samples(data.get("dataset")))
        except Refused as refused:
            for name, message in refused.errors.items():
                self.add_error(name, message)
        return data
