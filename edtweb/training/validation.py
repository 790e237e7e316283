"""The Django side of a job submission's rules: the bounds, defaults and rule function are
``workers/learner/submission.py`` (free of Django, so the learner's driver uses them too).

Each submit path judges a submission once, with ``validated``: the Train form in its
``clean``, the REST API and the WMLA execs API once the dataset is resolved
(``serializers.judged``), ``services.submit_job`` for trusted callers that hand it raw
values. Field declarations take their stated bounds from here (the HTML inputs'
``min``/``max``, the OpenAPI schema's ``minimum``/``maximum``), never a rule of their own.
"""

from __future__ import annotations

from typing import Any

from django.core.validators import MaxValueValidator, MinValueValidator

from workers.learner.submission import (
    BOUNDS,
    DEFAULTS,
    Bound,
    Refused,
    Submission,
    submission_errors,
    validated,
)

__all__ = ["BOUNDS", "DEFAULTS", "Bound", "Refused", "Submission", "bounds", "html_limits",
           "submission_errors", "train_samples", "validated", "validators"]  # fmt: skip


def validators(field: str) -> list[Any]:
    """The field's bounds as Django validators (DRF runs them too), with one message: for
    the fields outside a submission (a priority change)."""
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


def bounds(request: Any) -> dict[str, Any]:
    """Template context: ``bounds.priority.low`` and so on, for the pages' own inputs
    (the priority sliders)."""
    return {"bounds": BOUNDS}


def train_samples(dataset: Any) -> int:
    """The dataset's training samples as its check counted them (0: unknown)."""
    if dataset is None:
        return 0
    return int(dataset.summary.get("splits", {}).get("train", {}).get("count", 0))
