from __future__ import annotations

from typing import Any

from django import forms

from edtweb.datasets.models import Dataset
from edtweb.registry.models import ModelDefinition
from edtweb.training.models import PRECISION_CHOICES


class TrainForm(forms.Form):
    name = forms.CharField(
        max_length=200, required=False, help_text="defaults to the model and dataset names"
    )
    model = forms.ModelChoiceField(
        queryset=ModelDefinition.objects.none(), help_text="only models that passed their check"
    )
    dataset = forms.ModelChoiceField(queryset=Dataset.objects.none())
    epochs = forms.IntegerField(min_value=1, max_value=10_000, initial=5)
    batch_size = forms.IntegerField(
        min_value=1,
        max_value=65_536,
        initial=64,
        label="Effective batch size",
        help_text="the global batch: the same at any number of workers",
    )
    max_workers = forms.IntegerField(
        min_value=1, max_value=1024, initial=4, help_text="the most GPUs (slots) this job may hold"
    )
    min_workers = forms.IntegerField(
        min_value=1, max_value=1024, initial=1, help_text="fewer than this and the job waits"
    )
    priority = forms.IntegerField(
        min_value=1,
        max_value=10_000,
        initial=5000,
        help_text="1 to 10000; shares are weighted by priority",
    )
    checkpoint_every = forms.IntegerField(
        min_value=1, max_value=1000, initial=1, label="Checkpoint every N epochs"
    )
    lr = forms.FloatField(min_value=1e-8, max_value=10.0, initial=0.01, label="Learning rate")
    max_micro_batch = forms.IntegerField(
        min_value=0,
        initial=0,
        label="Micro-batch cap",
        help_text="0: none; else gradients accumulate over micro-batches of at most this size",
    )
    precision = forms.ChoiceField(
        choices=PRECISION_CHOICES,
        initial="fp32",
        help_text="bf16: autocast on CPU or GPU; fp16: GPU only, with a gradient scaler",
    )

    def __init__(self, *args: Any, owner_models: Any, owner_datasets: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.fields["model"].queryset = owner_models.filter(status=ModelDefinition.Status.VALID)
        self.fields["dataset"].queryset = owner_datasets.filter(status=Dataset.Status.READY)
        # A fresh form starts on the newest usable model and dataset (a link may name others).
        for name in ("model", "dataset"):
            if not self.is_bound and not self.initial.get(name):
                newest = self.fields[name].queryset.order_by("-created_at", "-pk").first()
                self.initial[name] = newest.pk if newest else None

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        low, high = data.get("min_workers"), data.get("max_workers")
        if low and high and low > high:
            self.add_error("min_workers", f"cannot exceed max workers ({high})")
        dataset, batch = data.get("dataset"), data.get("batch_size")
        if dataset and batch:
            train = dataset.summary.get("splits", {}).get("train", {}).get("count", 0)
            if train and batch > train:
                self.add_error("batch_size", f"larger than the {train} training samples")
        return data
