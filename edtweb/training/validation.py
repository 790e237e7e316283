"""What a job submission may ask for: the one place holding the bounds and the rules.

The Train form, the REST API's serializers (jobs and priority), the WMLA execs API and
``services.submit_job`` all check a submission here, so each refuses the same impossible
parameters with the same message. Field declarations take their bounds and validators
from :func:`validators` (the HTML inputs' ``min``/``max`` and the OpenAPI schema's
``minimum``/``maximum`` follow); the rules across fields are :func:`submission_errors`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.core.validators import MaxValueValidator, MinValueValidator


@dataclass(frozen=True)
class Bound:
    low: float
    high: float | None = None  # None: no upper bound

    @property
    def span(self) -> str:
        return f"{self.low:g} or more" if self.high is None else f"{self.low:g} to {self.high:g}"

    @property
    def message(self) -> str:
        return f"must be {self.span}"

    def holds(self, value: float) -> bool:
        return self.low <= value and (self.high is None or value <= self.high)


BOUNDS: dict[str, Bound] = {
    "epochs": Bound(1, 10_000),
    "batch_size": Bound(1, 65_536),  # the effective (global) batch
    "max_workers": Bound(1, 1024),
    "min_workers": Bound(1, 1024),
    "priority": Bound(1, 10_000),
    "checkpoint_every": Bound(1, 1000),  # epochs
    "lr": Bound(1e-8, 10.0),
    "max_micro_batch": Bound(0),  # 0: no cap
}

DEFAULTS: dict[str, Any] = {
    "epochs": 5, "batch_size": 64, "max_workers": 1, "min_workers": 1, "priority": 5000,
    "checkpoint_every": 1, "lr": 0.01, "max_micro_batch": 0, "precision": "fp32",
}  # fmt: skip


def validators(field: str) -> list[Any]:
    """The field's bounds as Django validators (DRF runs them too), with one message."""
    bound = BOUNDS[field]
    found: list[Any] = [MinValueValidator(bound.low, message=bound.message)]
    if bound.high is not None:
        found.append(MaxValueValidator(bound.high, message=bound.message))
    return found


def html_limits(field: str) -> dict[str, str]:
    """``min`` and ``max`` attributes for the field's number input."""
    bound = BOUNDS[field]
    attrs = {"min": f"{bound.low:g}"}
    if bound.high is not None:
        attrs["max"] = f"{bound.high:g}"
    return attrs


def submission_errors(values: Mapping[str, Any], train_samples: int = 0) -> dict[str, str]:
    """Field -> why it is refused, for every rule ``values`` break: each field's bounds,
    then the rules across fields (min workers at most max workers; the batch no larger than
    the dataset's ``train_samples``, when known). Fields absent from ``values`` (already
    refused, or left to their defaults) are not judged."""
    errors = {
        name: bound.message
        for name, bound in BOUNDS.items()
        if values.get(name) is not None and not bound.holds(values[name])
    }
    low, high = values.get("min_workers"), values.get("max_workers")
    if low and high and "min_workers" not in errors and low > high:
        errors["min_workers"] = f"cannot exceed max workers ({high})"
    batch = values.get("batch_size")
    if train_samples and batch and "batch_size" not in errors and batch > train_samples:
        errors["batch_size"] = f"larger than the {train_samples} training samples"
    return errors


def bounds(request: Any) -> dict[str, Any]:
    """Template context: ``bounds.priority.low`` and so on, for the pages' own inputs
    (the priority sliders)."""
    return {"bounds": BOUNDS}


def train_samples(dataset: Any) -> int:
    """The dataset's training samples as its check counted them (0: unknown)."""
    if dataset is None:
        return 0
    return int(dataset.summary.get("splits", {}).get("train", {}).get("count", 0))
