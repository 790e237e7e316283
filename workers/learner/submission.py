"""What a job submission may ask for: the one table of bounds, the one set of defaults and
the one rule function, free of Django so that the learner's own driver judges its values
as the web does.

Every submit path (the Train form, the REST API, the WMLA execs API, ``services.submit_job``
for trusted callers, ``python -m workers.learner.drive``) turns what it was asked into a
:class:`Submission` through :func:`validated`, once; what it builds afterwards (the job's
row, the learners' ``JobSpec``) is built from that submission and judged by nothing else.
``edtweb/training/validation.py`` adds the Django side (field validators, HTML bounds).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

PRECISIONS = ("fp32", "bf16", "fp16")  # training precision, a job option

# A trial's hyperparameters that the platform itself takes: they set the job's learning rate
# and global batch (what ``build_optimizer`` and ``lr_at`` get as ``lr`` and ``base_lr``).
# Here, free of torch, for the web and the sweep driver; the learner's contract reads it.
PLATFORM_HPARAMS = ("lr", "batch_size")


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
    "max_micro_batch": Bound(0, 65_536),  # 0: no cap; at most the largest global batch
    # Goodput mode's global batch range (docs/architecture.md, "Goodput mode"): both 0, the
    # fixed effective batch; else the scheduler picks each generation's batch within it
    "batch_min": Bound(0, 65_536),
    "batch_max": Bound(0, 65_536),
    # The input pipeline (docs/architecture.md, "Input pipeline"): the side an image
    # folder's images are brought to (0: the first image's size), DataLoader worker
    # processes per learner (0: the slot's share of its host's cores), augmentation (1: on)
    "image_size": Bound(0, 4096),
    "loader_workers": Bound(0, 64),
    "augment": Bound(0, 1),
}

# What a submission that leaves a value out gets, on every path. Five epochs: a run long
# enough to see the loss fall. One worker at most: a job takes more slots only when its
# owner asks for them (as WMLA's numWorker), and one worker is the least surprise on a
# shared cluster. Priority 5000: WMLA's default, the middle of its scale.
DEFAULTS: dict[str, Any] = {
    "epochs": 5, "batch_size": 64, "max_workers": 1, "min_workers": 1, "priority": 5000,
    "checkpoint_every": 1, "lr": 0.01, "max_micro_batch": 0, "precision": "fp32",
    "batch_min": 0, "batch_max": 0, "image_size": 0, "loader_workers": 0, "augment": 0,
}  # fmt: skip


@dataclass(frozen=True)
class Submission:
    """A submission's values, every rule held (only :func:`validated` makes one)."""

    epochs: int
    batch_size: int
    max_workers: int
    min_workers: int
    priority: int
    checkpoint_every: int
    lr: float
    max_micro_batch: int
    precision: str
    batch_min: int
    batch_max: int
    image_size: int
    loader_workers: int
    augment: int

    def values(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def goodput(self) -> bool:
        """Goodput mode: the global batch moves within ``batch_min``..``batch_max``."""
        return self.batch_max > 0


class Refused(ValueError):
    """A submission that breaks the rules; ``errors`` maps each field to why."""

    def __init__(self, errors: dict[str, str]) -> None:
        super().__init__("; ".join(f"{name}: {why}" for name, why in errors.items()))
        self.errors = errors


def validated(values: Mapping[str, Any], train_samples: int = 0) -> Submission:
    """The submission ``values`` ask for, a value left out (or None) at its default; raises
    :class:`Refused` when a rule is broken. ``train_samples``: the dataset's, when known."""
    asked = {name: values.get(name) for name in DEFAULTS}
    filled = {name: DEFAULTS[name] if value is None else value for name, value in asked.items()}
    errors = submission_errors(filled, train_samples)
    if errors:
        raise Refused(errors)
    return Submission(**filled)


def submission_errors(values: Mapping[str, Any], train_samples: int = 0) -> dict[str, str]:
    """Field -> why it is refused, for every rule ``values`` break: each field's bounds and
    the precision's choices, then the rules across fields (min workers at most max workers;
    the batch no larger than the dataset's ``train_samples``, when known). Fields absent
    from ``values`` are not judged."""
    errors = {
        name: bound.message
        for name, bound in BOUNDS.items()
        if values.get(name) is not None and not bound.holds(values[name])
    }
    precision = values.get("precision")
    if precision is not None and precision not in PRECISIONS:
        errors["precision"] = f"must be one of {', '.join(PRECISIONS)}, not {precision!r}"
    low, high = values.get("min_workers"), values.get("max_workers")
    if low and high and "min_workers" not in errors and low > high:
        errors["min_workers"] = f"cannot exceed max workers ({high})"
    batch = values.get("batch_size")
    if train_samples and batch and "batch_size" not in errors and batch > train_samples:
        errors["batch_size"] = f"larger than the {train_samples} training samples"
    errors.update(batch_range_errors(values, errors, train_samples))
    return errors


def batch_range_errors(
    values: Mapping[str, Any], found: Mapping[str, str], train_samples: int = 0
) -> dict[str, str]:
    """Goodput mode's rules: a range has both ends (1 or more), low to high, holds the
    base batch (``batch_size``, the batch the learning rate is given for) and fits in the
    dataset; ``found``: the errors already found (a field refused once is not judged
    again)."""
    low, high = values.get("batch_min") or 0, values.get("batch_max") or 0
    if "batch_min" in found or "batch_max" in found or not (low or high):
        return {}
    if not high:
        return {"batch_max": "set it with batch_min: the batch range's high end (goodput mode)"}
    if not low:
        return {"batch_min": "set it with batch_max: the batch range's low end (goodput mode)"}
    if low > high:
        return {"batch_min": f"cannot exceed batch max ({high})"}
    errors = {}
    if train_samples and high > train_samples:
        errors["batch_max"] = f"larger than the {train_samples} training samples"
    batch = values.get("batch_size")
    if batch and "batch_size" not in found and not low <= batch <= high:
        errors["batch_size"] = (f"must lie in the batch range {low} to {high}: it is the "
                                "batch the learning rate is given for")  # fmt: skip
    return errors
