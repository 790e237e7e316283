"""A sweep's search space, objective, algorithm and budget: the rules, in one place, free of
Django and Optuna (the API judges a sweep with them once, at create; the driver turns the
judged space into Optuna's distributions, ``edtweb/sweeps/study.py``).

A space maps each hyperparameter's name to what it may take::

    lr:    {type: loguniform, low: 0.001, high: 0.3}
    width: {type: int, low: 8, high: 64, step: 8}
    drop:  {type: uniform, low: 0.0, high: 0.5}
    opt:   {type: choice, choices: [sgd, adam]}

``uniform`` and ``loguniform`` are real numbers (``uniform`` may take a ``step``), ``int``
whole numbers from ``low`` to ``high`` inclusive (a ``step``, 1 by default), ``choice`` one
of ``choices`` (strings, numbers, booleans). ``lr`` and ``batch_size`` set the trial job's
own learning rate and global batch (``workers.learner.submission.PLATFORM_HPARAMS``); every
other name reaches the model's functions (docs/architecture.md, "Model definition contract").

Every size is judged before anything is built from it, against ``edtweb/limits.py``: the
parameters and each one's choices counted, a grid's points by arithmetic (its values are
listed only once the grid is known to be small), duplicate choices found by hashing, every
number finite and within ±1e15 (a range's width and its count of steps stay finite).
"""

from __future__ import annotations

import keyword
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from edtweb.limits import LIMITS, number_text, show
from workers.learner.submission import BOUNDS, DEFAULTS, PLATFORM_HPARAMS

TYPES = ("uniform", "loguniform", "int", "choice")
KEYS = {"uniform": ("low", "high", "step"), "loguniform": ("low", "high"),
        "int": ("low", "high", "step"), "choice": ("choices",)}  # fmt: skip
DIRECTIONS = ("minimize", "maximize")
ALGORITHMS = ("random", "grid", "tpe", "asha", "hyperband")
PRUNING = {"asha": "ASHA", "hyperband": "Hyperband"}  # algorithms that stop trials early
# The submission's fields that are the platform's to set on the sweep, never searched.
NOT_SEARCHED = tuple(name for name in DEFAULTS if name not in PLATFORM_HPARAMS)
MAX_GRID = LIMITS["grid_points"].high
DEFAULT_TRIALS = 10  # a grid's default budget is its size


@dataclass(frozen=True)
class Param:
    """One hyperparameter of a judged space."""

    name: str
    type: str
    low: float | None = None
    high: float | None = None
    step: float | None = None
    choices: tuple[Any, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        if self.type == "choice":
            return {"type": "choice", "choices": list(self.choices)}
        found: dict[str, Any] = {"type": self.type, "low": self.low, "high": self.high}
        if self.step is not None:
            found["step"] = self.step
        return found

    def size(self) -> int | None:
        """How many values a grid search tries, by arithmetic (nothing is listed); None
        when the values are not discrete."""
        if self.type == "choice":
            return len(self.choices)
        if self.type == "loguniform" or (self.type == "uniform" and self.step is None):
            return None
        assert self.low is not None and self.high is not None
        step = self.step or 1
        if self.type == "int":
            return (int(self.high) - int(self.low)) // int(step) + 1
        return math.floor((self.high - self.low) / step + 1e-9) + 1

    def grid(self) -> list[Any] | None:
        """Every value a grid search tries; None when the values are not discrete. Listed:
        only for a space whose :func:`grid_size` was judged."""
        if self.type == "choice":
            return list(self.choices)
        count = self.size()
        if count is None:
            return None
        assert self.low is not None
        step = self.step or 1
        if self.type == "int":
            return [int(self.low + i * step) for i in range(count)]
        return [round(self.low + i * step, 12) for i in range(count)]


class SpaceRefused(ValueError):
    """A sweep that breaks the rules; ``errors`` maps each field to its messages."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        super().__init__("; ".join(f"{k}: {' '.join(v)}" for k, v in errors.items()))
        self.errors = errors


def _number(value: Any) -> bool:
    """A finite number (an int of any size is: ``math.isfinite`` would overflow on it)."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))


def _beyond(value: Any) -> bool:
    """A number past ``LIMITS["magnitude"]`` (which an int of any size may be: compared
    without converting it to a float, which would overflow)."""
    return _number(value) and not LIMITS["magnitude"].holds(value)


MAGNITUDE = f"within ±{show(LIMITS['magnitude'].high)}"


def param_errors(name: Any, raw: Any, train_samples: int = 0,
                 script: bool = False) -> tuple[Param | None, list[str]]:  # fmt: skip
    """The parameter ``name: raw`` judged: the Param, or None and why not (each message
    starts with the name). ``script``: a WMLA-style script's, which reads every value from
    its config.json, so that the platform's other settings may be its names too (its
    ``epochs``, say, is the script's to pass to ``train()``)."""
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
        return None, [f"{_short(name)}: a hyperparameter's name must be a Python identifier (it "
                      f"becomes a keyword argument of the model's functions)"]  # fmt: skip
    if name == "hparams":
        return None, ["'hparams' is the name of the whole mapping: choose another name"]
    if name in NOT_SEARCHED and not script:
        return None, [f"{name}: the platform's own setting, not a hyperparameter: set it on "
                      f"the sweep (every trial gets it)"]  # fmt: skip
    if not isinstance(raw, Mapping):
        return None, [f"{name}: give a mapping such as {{type: uniform, low: 0, high: 1}}, "
                      f"not {_short(raw)}"]  # fmt: skip
    kind = raw.get("type")
    if kind not in TYPES:
        return None, [f"{name}: unknown type {_short(kind)}; one of {', '.join(TYPES)}"]
    unknown = sorted(str(k) for k in raw if k != "type" and k not in KEYS[kind])
    if unknown:
        listed = ", ".join(map(repr, unknown[:5])) + (", ..." if len(unknown) > 5 else "")
        return None, [f"{name}: unknown key {listed}; a {kind} "
                      f"parameter takes {', '.join(KEYS[kind])}"]  # fmt: skip
    if kind == "choice":
        param, errors = _choice(name, raw.get("choices"))
    else:
        param, errors = _range(name, kind, raw)
    if param is not None and name in PLATFORM_HPARAMS:
        errors += _platform_values(param, train_samples)
    return (None if errors else param), errors


def _choice(name: str, choices: Any) -> tuple[Param | None, list[str]]:
    if not isinstance(choices, (list, tuple)) or not choices:
        return None, [f"{name}: choices must be a non-empty list, not {_short(choices)}"]
    most = LIMITS["choices"].high
    if len(choices) > most:
        return None, [f"{name}: {len(choices)} choices, more than the {most} a parameter may have"]
    bad = [c for c in choices if not (c is None or isinstance(c, (str, bool)) or _number(c))]
    if bad:
        return None, [f"{name}: a choice must be a string, a number or a boolean, not "
                      f"{_short(bad[0])}"]  # fmt: skip
    big = [c for c in choices if _beyond(c)]
    if big:
        return None, [f"{name}: choice {number_text(big[0])} is out of range: a number must be "
                      f"{MAGNITUDE}"]  # fmt: skip
    seen: set[tuple[type, Any]] = set()  # 1, 1.0 and True are three choices
    for c in choices:
        if (type(c), c) in seen:
            return None, [f"{name}: choice {_short(c)} is listed twice"]
        seen.add((type(c), c))
    return Param(name, "choice", choices=tuple(choices)), []


def _short(value: Any) -> str:
    """``repr(value)``, cut to a length a message can quote."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def _range(name: str, kind: str, raw: Mapping[str, Any]) -> tuple[Param | None, list[str]]:
    low: Any = raw.get("low")
    high: Any = raw.get("high")
    step: Any = raw.get("step")
    missing = [k for k in ("low", "high") if k not in raw]
    if missing:
        return None, [f"{name}: a {kind} parameter needs {' and '.join(missing)}"]
    if not _number(low) or not _number(high):
        return None, [f"{name}: low and high must be numbers, not {_short(low)} and "
                      f"{_short(high)}"]  # fmt: skip
    given = (("low", low), ("high", high), ("step", step))
    big = [f"{k} {number_text(v)}" for k, v in given if _beyond(v)]
    if big:
        return None, [f"{name}: {', '.join(big)}: a range's numbers must be {MAGNITUDE}"]
    if kind == "int" and not all(float(v).is_integer() for v in (low, high)):
        return None, [f"{name}: an int parameter's low and high must be whole, not {low} and "
                      f"{high}"]  # fmt: skip
    if low >= high:
        return None, [f"{name}: the range is empty or inverted: low {low:g} >= high {high:g}"]
    if kind == "loguniform" and low <= 0:
        return None, [f"{name}: a log scale needs low > 0, not {low:g}"]
    if step is not None:
        whole = kind == "int"
        if not _number(step) or step <= 0 or (whole and not float(step).is_integer()):
            what = "a whole number 1 or more" if whole else "a number above 0"
            return None, [f"{name}: step must be {what}, not {step!r}"]
        if step > high - low:
            return None, [f"{name}: step {step:g} is larger than the range {low:g} to {high:g}"]
        if (high - low) / step > LIMITS["magnitude"].high:
            return None, [f"{name}: step {step:g} cuts the range {low:g} to {high:g} into more "
                          f"than {show(LIMITS['magnitude'].high)} steps"]  # fmt: skip
    if kind == "int":
        low, high = int(low), int(high)
        step = int(step) if step is not None else None
    return Param(name, kind, float(low) if kind != "int" else low,
                 float(high) if kind != "int" else high, step), []  # fmt: skip


def _platform_values(param: Param, train_samples: int) -> list[str]:
    """``lr`` and ``batch_size`` become the trial's job values: within the job's bounds."""
    bound = BOUNDS[param.name]
    values: list[Any] = list(param.choices) if param.type == "choice" else [param.low, param.high]
    if param.name == "batch_size" and param.type not in ("int", "choice"):
        return [f"batch_size: a batch is a whole number: give type int or choice, not "
                f"{param.type}"]  # fmt: skip
    if any(not _number(v) or not bound.holds(v) for v in values):
        return [f"{param.name}: every value must be {bound.span} (the job's bound)"]
    if param.name == "batch_size" and train_samples and max(values) > train_samples:
        return [f"batch_size: {max(values):g} is larger than the {train_samples} training "
                f"samples"]  # fmt: skip
    return []


@dataclass(frozen=True)
class Plan:
    """A judged sweep's search: space, objective, algorithm, budget, seed."""

    space: tuple[Param, ...]
    objective: str
    direction: str
    algorithm: str
    max_trials: int
    max_parallel: int
    max_time: float  # seconds; 0: no limit
    reduction_factor: int
    min_resource: int  # steps; 0: chosen from the trial's length (driver)
    seed: int = 0  # the samplers' and every trial's

    def space_dict(self) -> dict[str, Any]:
        return {p.name: p.as_dict() for p in self.space}

    def grid(self) -> dict[str, list[Any]]:
        """name -> values, for a grid search (every parameter is discrete)."""
        found = {p.name: p.grid() for p in self.space}
        return {k: v for k, v in found.items() if v is not None}


def grid_size(space: tuple[Param, ...]) -> int:
    """The grid's points: the product of the parameters' sizes, by arithmetic (0 when one is
    not discrete)."""
    return math.prod(p.size() or 0 for p in space)


def judged(values: Mapping[str, Any], train_samples: int = 0, script: bool = False) -> Plan:
    """The sweep ``values`` ask for (``space``, ``objective``, ``direction``, ``algorithm``,
    ``max_trials``, ``max_parallel``, ``max_time``, ``reduction_factor``, ``min_resource``,
    ``seed``; one left out or None at its default), or :class:`SpaceRefused` with every
    rule broken. A grid's budget is at most its size, and by default the whole grid.
    ``script``: the sweep's model is a WMLA-style script (:func:`param_errors`)."""
    errors: dict[str, list[str]] = {}
    space = _space(values.get("space"), train_samples, script, errors)
    objective = values.get("objective")
    most = OBJECTIVE_LENGTH
    if not isinstance(objective, str) or not objective.strip() or len(objective) > most:
        errors["objective"] = [f"name the metric to optimise (at most {most} characters), e.g. "
                               f"test_loss or accuracy"]  # fmt: skip
    direction = "minimize" if values.get("direction") is None else values["direction"]
    if direction not in DIRECTIONS:
        errors["direction"] = [f"must be minimize or maximize, not {_short(direction)}"]
    algorithm = "random" if values.get("algorithm") is None else values["algorithm"]
    if algorithm not in ALGORITHMS:
        errors["algorithm"] = [f"must be one of {', '.join(ALGORITHMS)}, not {_short(algorithm)}"]
    numbers = {name: _bounded(name, values.get(name), errors) for name in WHOLE}
    max_time = values.get("max_time") or 0
    longest = show(LIMITS["max_time"].high)
    if not _number(max_time) or not LIMITS["max_time"].holds(max_time):
        errors["max_time"] = [f"must be seconds, 0 or more (0: no limit) and at most "
                              f"{longest}, not {_short(max_time)}"]  # fmt: skip
    max_trials = numbers["max_trials"]
    if algorithm == "grid" and "space" not in errors:
        size = _grid(space, errors)
        if size and "max_trials" not in errors:  # a grid's budget is at most its size
            max_trials = size if values.get("max_trials") is None else min(max_trials, size)
    if errors:
        raise SpaceRefused(errors)
    return Plan(tuple(space), str(objective).strip(), str(direction), str(algorithm),
                max_trials, numbers["max_parallel"], float(max_time),
                numbers["reduction_factor"], numbers["min_resource"], numbers["seed"])  # fmt: skip


OBJECTIVE_LENGTH = 100
# The whole numbers of a sweep, with their defaults (each bounded by LIMITS)
WHOLE = {"max_trials": DEFAULT_TRIALS, "max_parallel": 1, "reduction_factor": 3,
         "min_resource": 0, "seed": 0}  # fmt: skip


def _space(raw: Any, train_samples: int, script: bool,
           errors: dict[str, list[str]]) -> list[Param]:  # fmt: skip
    """The space's parameters judged, each one broken added to ``errors["space"]``; counted
    first, so that no more than the limit are judged."""
    most = LIMITS["parameters"].high
    if not isinstance(raw, Mapping) or not raw:
        errors["space"] = ["the search space is empty: give at least one hyperparameter, "
                           "e.g. {lr: {type: loguniform, low: 0.001, high: 0.1}}"]  # fmt: skip
        return []
    if len(raw) > most:
        errors["space"] = [f"{len(raw)} hyperparameters, more than the {most} a sweep may "
                           f"search"]  # fmt: skip
        return []
    space = []
    for name, spec in raw.items():
        param, why = param_errors(name, spec, train_samples, script)
        if param is None:
            errors.setdefault("space", []).extend(why)
        else:
            space.append(param)
    return space


def _bounded(name: str, value: Any, errors: dict[str, list[str]]) -> int:
    """The whole number ``name`` (its default when None) within its limit; else its
    default, and why not in ``errors``."""
    if value is None:
        return WHOLE[name]
    limit = LIMITS[name]
    if isinstance(value, int) and not isinstance(value, bool) and limit.holds(value):
        return value
    what = "budget " if name == "max_trials" else ""
    unit, note = ("steps", " (0: one epoch)") if name == "min_resource" else ("a whole number", "")
    errors[name] = [f"{what}must be {unit} from {limit.span}{note}, not {_short(value)}"]
    return WHOLE[name]


def _grid(space: list[Param], errors: dict[str, list[str]]) -> int:
    """The grid's size, by arithmetic, when every parameter is discrete and the grid within
    its limit; else 0, and why not in ``errors``."""
    continuous = [p.name for p in space if p.size() is None]
    if continuous:
        errors["space"] = [f"{n}: grid search needs discrete values: give it choices, an "
                           f"int range, or a step" for n in continuous]  # fmt: skip
        return 0
    size = grid_size(tuple(space))
    if size > MAX_GRID:
        errors["space"] = [f"the grid has {size} points, more than the {MAX_GRID} a grid "
                           f"search may try (the product of each parameter's number of "
                           f"values)"]  # fmt: skip
        return 0
    return size
