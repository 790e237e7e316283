"""The New sweep page's form: the model and dataset, the search space as rows (name, type,
low, high, step, choices), the objective, direction, algorithm, budget and every trial's
job values. What it asks is judged where the API's is, ``services.create_sweep``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django import forms

from edtweb.datasets.models import Dataset
from edtweb.registry.models import ModelDefinition
from edtweb.sweeps.space import ALGORITHMS, DEFAULT_TRIALS, DIRECTIONS, TYPES
from edtweb.training.validation import DEFAULTS, html_limits

ROW_FIELDS = ("name", "type", "low", "high", "step", "choices")
OBJECTIVES = ("loss", "accuracy", "test_loss", "test_accuracy")


def _bounded(kind: Any, name: str, **kw: Any) -> Any:
    field = kind(initial=DEFAULTS[name], required=False, **kw)
    field.widget.attrs.update(html_limits(name))
    return field


class SweepForm(forms.Form):
    name = forms.CharField(max_length=200, required=False,
                           help_text="defaults to the model and dataset names")  # fmt: skip
    model = forms.ModelChoiceField(queryset=ModelDefinition.objects.none(),
                                   help_text="only models that passed their check")  # fmt: skip
    dataset = forms.ModelChoiceField(queryset=Dataset.objects.none())
    objective = forms.CharField(
        max_length=100,
        initial="test_loss",
        help_text="a metric the trials record: loss, test_loss, ...",
    )
    direction = forms.ChoiceField(choices=[(d, d) for d in DIRECTIONS], initial="minimize")
    algorithm = forms.ChoiceField(
        choices=[(a, a) for a in ALGORITHMS], initial="random",
        help_text="asha and hyperband stop the trials that fall behind",
    )  # fmt: skip
    max_trials = forms.IntegerField(label="Budget (trials)", initial=DEFAULT_TRIALS,
                                    required=False, min_value=0)  # fmt: skip
    max_parallel = forms.IntegerField(label="Trials at once", initial=1, required=False)
    max_minutes = forms.FloatField(label="Time limit (minutes)", initial=0, required=False,
                                   help_text="0: none; running trials finish after it")  # fmt: skip
    epochs = _bounded(forms.IntegerField, "epochs", help_text="each trial's")
    batch_size = _bounded(forms.IntegerField, "batch_size", label="Effective batch size")
    lr = _bounded(forms.FloatField, "lr", label="Learning rate",
                  help_text="unless the space searches lr")  # fmt: skip
    max_workers = _bounded(forms.IntegerField, "max_workers", help_text="per trial")
    seed = forms.IntegerField(
        required=False, help_text="empty: drawn at random, so a sweep run again explores new points"
    )

    def __init__(self, *args: Any, models: Any, datasets: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.fields["model"].queryset = models.filter(status=ModelDefinition.Status.VALID)
        self.fields["dataset"].queryset = datasets.filter(status=Dataset.Status.READY)
        for name in ("model", "dataset"):
            if not self.is_bound and not self.initial.get(name):
                newest = self.fields[name].queryset.order_by("-created_at", "-pk").first()
                self.initial[name] = newest.pk if newest else None

    def values(self) -> dict[str, Any]:
        """What ``create_sweep`` takes, from the cleaned fields (a field left empty: its
        default)."""
        data = self.cleaned_data
        found = {k: data.get(k) for k in ("objective", "direction", "algorithm", "max_trials",
                                          "max_parallel", "epochs", "batch_size", "lr",
                                          "max_workers")}  # fmt: skip
        minutes = data.get("max_minutes")
        found["max_time"] = float(minutes) * 60 if minutes else 0
        return {k: v for k, v in found.items() if v is not None}


@dataclass
class Row:
    """One row of the space's table, as typed."""

    name: str = ""
    type: str = "loguniform"
    low: str = ""
    high: str = ""
    step: str = ""
    choices: str = ""


def _number(text: str) -> Any:
    try:
        value = float(text)
    except ValueError:
        return text
    return int(value) if value.is_integer() and "." not in text and "e" not in text.lower() \
        else value  # fmt: skip


def _choice(text: str) -> Any:
    text = text.strip()
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    return _number(text)


def rows_of(post: Any) -> list[Row]:
    """The space's rows as posted (``p_name``, ``p_type``, ... repeated), empty ones
    dropped."""
    columns = {f: post.getlist(f"p_{f}") for f in ROW_FIELDS}
    count = max((len(v) for v in columns.values()), default=0)
    rows = []
    for i in range(count):
        row = Row(**{f: (columns[f][i] if i < len(columns[f]) else "").strip()
                     for f in ROW_FIELDS})  # fmt: skip
        if row.name or row.low or row.high or row.choices:
            rows.append(row)
    return rows


def space_of(rows: list[Row]) -> dict[str, Any]:
    """The rows as a sweep's space; what they mean is judged by ``space.judged``."""
    space: dict[str, Any] = {}
    for row in rows:
        if row.type == "choice":
            entry: dict[str, Any] = {"type": "choice", "choices": [
                _choice(c) for c in row.choices.split(",") if c.strip()]}  # fmt: skip
        else:
            entry = {"type": row.type, "low": _number(row.low), "high": _number(row.high)}
            if row.step:
                entry["step"] = _number(row.step)
        space[row.name] = entry
    return space


def rows_from(space: dict[str, Any]) -> list[Row]:
    """A sweep's space as the form's rows (a clone starts from them)."""
    rows = []
    for name, entry in space.items():
        if entry.get("type") == "choice":
            rows.append(
                Row(
                    name,
                    "choice",
                    choices=", ".join(
                        json.dumps(c) if isinstance(c, bool) else str(c) for c in entry["choices"]
                    ),
                )
            )
        else:
            step = entry.get("step")
            rows.append(
                Row(
                    name,
                    entry.get("type", "uniform"),
                    f"{entry.get('low'):g}",
                    f"{entry.get('high'):g}",
                    "" if step is None else f"{step:g}",
                )
            )
    return rows


TYPE_CHOICES = TYPES
