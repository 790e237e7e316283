"""WMLA's hyperparameter search, ``/platform/rest/deeplearning/v1/hypersearch``, answering as
WMLA's does (the request and answers of IBM's HPO notebooks and the Deep Learning Impact
SDK's ``start_hpo``, ``get_all_hpo``, ``get_one_hpo``, ``stop_one_hpo``, ``delete_one_hpo``,
``delete_all_hpo``), onto EDT sweeps: a *hypersearch* (an "HPO task") is a sweep whose
trials (WMLA's *experiments*) are WMLA-style execs.

``POST hypersearch`` is multipart, as ``POST execs``: the model folder (field ``file``) and
``data``, a JSON string::

    {"hpoName": "optional",
     "modelSpec": {"sigName": "...", "args": "--exec-start edtPyTorch --model-main main.py
                   --cs-datastore-meta type=fs,data_path=DATASET ..."},
     "algoDef": {"algorithm": "Random|Bayesian|Tpe|Hyperband", "maxRunTime": -1,
                 "maxJobNum": 10, "maxParalleJobNum": 2, "objectiveMetric": "loss",
                 "objective": "minimize", "algoParams": [{"name": "RandomSeed", "value": "3"}]},
     "hyperParams": [{"name": "learning_rate", "type": "Range", "dataType": "DOUBLE",
                      "minDbVal": -3, "maxDbVal": -1, "power": "10"}, ...]}

Each trial finds its values in ``config.json`` in its working directory and writes its
objective to ``$RESULT_DIR/val_dict_list.json`` (docs/architecture.md, "Sweeps"). The answer
is the hypersearch's name, as a JSON string.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response

from edtweb import jsonbounds
from edtweb.api import serializers as s
from edtweb.api.common import CappedUploadView, scoped
from edtweb.api.errors import ApiError
from edtweb.api.parsers import BoundedJSONParser
from edtweb.api.wmla import STATES as EXEC_STATES
from edtweb.api.wmla import WmlaView, _dataset_named, _stored_model, parse_args
from edtweb.limits import LIMITS, number_text
from edtweb.registry import services as registry
from edtweb.sweeps import services
from edtweb.sweeps.models import Sweep
from edtweb.sweeps.space import SpaceRefused
from edtweb.sweeps.state import SweepView, TrialView, views
from edtweb.tenancy import services as tenancy
from edtweb.tenancy.models import Team
from edtweb.training.models import Job

TAGS = ["wmla"]
# WMLA's algorithms (any case) -> the sweep's; Bayesian is TPE, Optuna's Bayesian
# optimisation by Parzen estimators (no Gaussian-process sampler here).
ALGORITHMS = {"random": "random", "tpe": "tpe", "bayesian": "tpe", "hyperband": "hyperband"}
STATES = {
    Sweep.State.QUEUED: "SUBMITTED",
    Sweep.State.RUNNING: "RUNNING",
    Sweep.State.COMPLETED: "FINISHED",
    Sweep.State.STOPPED: "STOPPED",
    Sweep.State.FAILED: "FAILED",
}
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
DATA_TYPES = {"double": float, "int": int, "str": str}
NOT_FOUND = {404: s.problem("no such hypersearch, or not yours")}


# The request -----------------------------------------------------------------------------


def _get(raw: dict[str, Any], *names: str) -> Any:
    """The first of ``names`` present (WMLA's spellings vary: maxParalleJobNum,
    discreateStrVal)."""
    for name in names:
        if name in raw and raw[name] not in (None, ""):
            return raw[name]
    return None


def _num(value: Any, whole: bool = False) -> float | int | None:
    """A number as WMLA sends it (a number, or one in a string: ``"0.002"``); None if not."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return None
    if isinstance(value, int):
        return value  # of any size: judged against its limit where it is used
    if not isinstance(value, float) or not math.isfinite(value):
        return None
    if whole:
        return int(value) if value.is_integer() else None
    return value


def hyper_param(raw: Any, index: int) -> tuple[str, dict[str, Any] | None, Any, list[str]]:
    """One of ``hyperParams`` as the sweep's space entry: (name, entry, a fixed value for
    config.json (type Fix), errors). Range: DOUBLE ``minDbVal``/``maxDbVal`` or INT
    ``minIntVal``/``maxIntVal``, a ``step``, and a ``power`` (the values are power**x for
    x in the range: a log scale); Discrete: ``discreteDbVal``, ``discreteIntVal`` or
    ``discreateStrVal``; Fix: ``fixedVal``."""
    if not isinstance(raw, dict):
        where = f"hyperParams[{index}]"
        return where, None, None, [f"{where}: give an object such as {{name, type, dataType}}"]
    name = str(raw.get("name") or "").strip()
    label = name or f"hyperParams[{index}]"
    kind = str(raw.get("type") or "").lower()
    data_type = str(raw.get("dataType") or "").lower()
    if not name:
        return label, None, None, [f"{label}: give the hyperparameter's name (its key in "
                                   f"config.json)"]  # fmt: skip
    if kind not in ("range", "discrete", "fix"):
        return label, None, None, [f"{name}: type must be Range, Discrete or Fix, not "
                                   f"{raw.get('type')!r}"]  # fmt: skip
    if data_type not in DATA_TYPES:
        return label, None, None, [f"{name}: dataType must be DOUBLE, INT or STR, not "
                                   f"{raw.get('dataType')!r}"]  # fmt: skip
    if kind == "fix":
        value = raw.get("fixedVal")
        typed = _typed(value, data_type)
        if typed is None:
            return name, None, None, [f"{name}: fixedVal {value!r} is not a {data_type.upper()}"]
        return name, None, typed, []
    if kind == "discrete":
        return (name, *_discrete(name, raw, data_type))
    return (name, *_range(name, raw, data_type))


def _typed(value: Any, data_type: str) -> Any:
    if data_type == "str":
        return None if value is None else str(value)
    return _num(value, whole=data_type == "int")


def _discrete(name: str, raw: dict[str, Any], data_type: str) -> tuple[Any, Any, list[str]]:
    field = {"double": ("discreteDbVal",), "int": ("discreteIntVal",),
             "str": ("discreateStrVal", "discreteStrVal")}[data_type]  # fmt: skip
    values = _get(raw, *field)
    if not isinstance(values, list) or not values:
        return None, None, [f"{name}: a Discrete {data_type.upper()} parameter needs a "
                            f"non-empty list {field[0]}"]  # fmt: skip
    typed = [_typed(v, data_type) for v in values]
    if any(v is None for v in typed):
        bad = values[typed.index(None)]
        return None, None, [f"{name}: {bad!r} in {field[0]} is not a {data_type.upper()}"]
    return {"type": "choice", "choices": typed}, None, []


def _range(name: str, raw: dict[str, Any], data_type: str) -> tuple[Any, Any, list[str]]:
    if data_type == "str":
        return None, None, [f"{name}: a Range is of numbers: give dataType DOUBLE or INT, or "
                            f"type Discrete with discreateStrVal"]  # fmt: skip
    whole = data_type == "int"
    low_name, high_name = ("minIntVal", "maxIntVal") if whole else ("minDbVal", "maxDbVal")
    low, high = _num(raw.get(low_name), whole), _num(raw.get(high_name), whole)
    if low is None or high is None:
        kind = "whole numbers" if whole else "numbers"
        return None, None, [f"{name}: a Range {data_type.upper()} parameter needs {low_name} "
                            f"and {high_name}, {kind}; not {raw.get(low_name)!r} and "
                            f"{raw.get(high_name)!r}"]  # fmt: skip
    if low >= high:
        return None, None, [f"{name}: the range is empty or inverted: {low_name} {low:g} >= "
                            f"{high_name} {high:g}"]  # fmt: skip
    step = None
    if _get(raw, "step") is not None:
        step = _num(raw["step"], whole)
        if step is None or step <= 0:
            what = "a whole number 1 or more" if whole else "a number above 0"
            return None, None, [f"{name}: step must be {what}, not {raw['step']!r}"]
    power = None
    if _get(raw, "power") is not None:
        power = _num(raw["power"])
        if power is None or power <= 0 or power == 1:
            return None, None, [f"{name}: power is the base of a log scale: a number above 0 "
                                f"other than 1, not {raw['power']!r}"]  # fmt: skip
    if power is None:
        entry: dict[str, Any] = {"type": "int" if whole else "uniform", "low": low, "high": high}
        if step is not None:
            entry["step"] = step
        return entry, None, []
    return _powers(name, low, high, step, power, whole)


def _powers(name: str, low: float, high: float, step: float | None, power: float,
            whole: bool) -> tuple[Any, Any, list[str]]:  # fmt: skip
    """A Range with a ``power``: power**x for x from ``low`` to ``high``, a log scale; with
    whole exponents (INT) or a step, those values as choices. Sized and bounded before any
    power is taken: the exponents counted by arithmetic, the powers' magnitudes by
    logarithms, so that no power overflows a float nor takes long as an int."""
    magnitude = LIMITS["magnitude"].high
    exponent = max(abs(low), abs(high))  # compared as it came (an int may be any size)
    if exponent > magnitude or exponent * abs(math.log(power)) > math.log(magnitude):
        return None, None, [f"{name}: power {power:g} to the {number_text(exponent)} is out "
                            f"of range: the values power**x must lie within 1/{magnitude:g} "
                            f"to {magnitude:g}"]  # fmt: skip
    if not whole and step is None:  # a log scale
        return {"type": "loguniform", "low": power**low, "high": power**high}, None, []
    every = step or 1
    most = LIMITS["choices"].high
    steps = (high - low) / every
    if steps >= most:  # (inf too: a step too small for a float to count)
        return None, None, [f"{name}: x from {low:g} to {high:g} by {every:g} gives more than "
                            f"the {most} values a parameter may have: give a larger step, "
                            f"or no step for a log scale"]  # fmt: skip
    values = [float(power) ** (low + i * every) for i in range(math.floor(steps + 1e-9) + 1)]
    choices = [int(v) if whole and v.is_integer() else round(v, 12) for v in values]
    return {"type": "choice", "choices": choices}, None, []


def _point(space: dict[str, Any]) -> dict[str, Any]:
    """One point of the space (each range's low end, each list's first value): the model
    check's config.json."""
    return {name: entry["choices"][0] if entry["type"] == "choice" else entry["low"]
            for name, entry in space.items()}  # fmt: skip


class Search:
    """A hypersearch request judged: every field broken is in ``errors`` (field -> its
    messages), as one 400 answers it."""

    def __init__(self, data: Any) -> None:
        self.errors: dict[str, list[str]] = {}
        self.data = data if isinstance(data, dict) else {}
        if not isinstance(data, dict):
            self.fail("data", 'send a JSON object: {"modelSpec": ..., "algoDef": ..., '
                              '"hyperParams": [...]}')  # fmt: skip
        self.model_spec = self.section("modelSpec")
        self.algo = self.section("algoDef")
        self.space: dict[str, Any] = {}
        self.config: dict[str, Any] = {}  # fixed values of every trial's config.json
        self.types: dict[str, str] = {}
        self.ignored: list[str] = []
        self.values: dict[str, Any] = {}
        self.seed: int | None = None  # none given: drawn at random
        self.trial_steps: int | None = None
        self.name = self.hpo_name()
        self.params()
        self.algorithm()

    def fail(self, field: str, message: str) -> None:
        self.errors.setdefault(field, []).append(message)

    def section(self, name: str) -> dict[str, Any]:
        found = self.data.get(name)
        if not isinstance(found, dict):
            if self.data:
                self.fail(name, f"{name} must be an object")
            return {}
        return found

    def hpo_name(self) -> str:
        name = self.data.get("hpoName")
        if name in (None, ""):
            return ""
        if not isinstance(name, str) or not NAME.match(name):
            self.fail("hpoName", f"use letters, digits, '.', '_' and '-' (at most 100), not "
                                 f"{name!r}")  # fmt: skip
            return ""
        return name

    def params(self) -> None:
        raw = self.data.get("hyperParams")
        if self.data.get("experiments"):
            self.fail("experiments", "ExperimentGridSearch's experiments are not supported: "
                                     "give hyperParams")  # fmt: skip
        if not isinstance(raw, list) or not raw:
            self.fail("hyperParams", "the search space is empty: give at least one, e.g. "
                                     '{"name": "learning_rate", "type": "Range", "dataType": '
                                     '"DOUBLE", "minDbVal": 0.001, "maxDbVal": 0.1}')  # fmt: skip
            return
        for index, item in enumerate(raw):
            name, entry, fixed, why = hyper_param(item, index)
            for message in why:
                self.fail("hyperParams", message)
            if name in self.space or name in self.config:
                self.fail("hyperParams", f"{name}: named twice")
                continue
            if entry is not None:
                self.space[name] = entry
            elif fixed is not None:
                self.config[name] = fixed
            if isinstance(item, dict):
                self.types[name] = str(item.get("dataType") or "").lower()
        if not self.space and "hyperParams" not in self.errors:
            self.fail("hyperParams", "every hyperparameter is Fix: give one to search "
                                     "(Range or Discrete)")  # fmt: skip

    def algorithm(self) -> None:
        algo = self.algo
        name = str(algo.get("algorithm") or "")
        if name.lower() == "experimentgridsearch":
            self.fail("algoDef.algorithm", "ExperimentGridSearch is not supported: use Random, "
                                           "Bayesian, Tpe or Hyperband")  # fmt: skip
        elif name.lower() not in ALGORITHMS:
            self.fail("algoDef.algorithm", f"one of Random, Bayesian, Tpe, Hyperband, not "
                                           f"{name!r}")  # fmt: skip
        self.values["algorithm"] = ALGORITHMS.get(name.lower(), "random")
        top = LIMITS["max_trials"].high
        asked = _get(algo, "maxJobNum")
        jobs = -1 if asked is None else _num(asked, whole=True)
        if jobs == -1:
            self.values["max_trials"] = top  # WMLA's "unlimited": the platform's most
        elif jobs is None or not 1 <= jobs <= top:
            self.fail("algoDef.maxJobNum", f"the budget of trials must be a whole number from 1 "
                                           f"to {top}, or -1 for as many as {top}; not "
                                           f"{algo.get('maxJobNum')!r}")  # fmt: skip
        else:
            self.values["max_trials"] = jobs
        parallel = _get(algo, "maxParalleJobNum", "maxParallelJobNum", "maxParalleJob")
        count = 1 if parallel is None else _num(parallel, whole=True)
        if count is None or not LIMITS["max_parallel"].holds(count):
            self.fail("algoDef.maxParalleJobNum", f"trials at once: a whole number from 1 to "
                                                  f"{LIMITS['max_parallel'].high}, not "
                                                  f"{parallel!r}")  # fmt: skip
        else:
            self.values["max_parallel"] = count
        minutes = _get(algo, "maxRunTime")
        run = -1 if minutes is None else _num(minutes)
        if run is None or (run <= 0 and run != -1):
            self.fail("algoDef.maxRunTime", f"minutes above 0, or -1 for no limit; not "
                                            f"{minutes!r}")  # fmt: skip
        else:
            self.values["max_time"] = 0.0 if run == -1 else float(run) * 60
        metric = algo.get("objectiveMetric")
        if not isinstance(metric, str) or not metric.strip():
            self.fail("algoDef.objectiveMetric", "name the metric to optimise, as the trials "
                                                 "write it in val_dict_list.json")  # fmt: skip
        self.values["objective"] = metric
        direction = str(algo.get("objective") or "").lower()
        if direction not in ("minimize", "maximize"):
            self.fail("algoDef.objective", f"minimize or maximize, not {algo.get('objective')!r}")
        self.values["direction"] = direction or None
        self.algo_params()

    def algo_params(self) -> None:
        """``algoParams`` (``[{"name", "value"}]``): RandomSeed, eta (and algoDef's
        hyperbandEta), Hyperband's ResourceName and ResourceValue (a fixed value of every
        trial's config.json; its val_dict_list.json counts its steps in it). Others are
        listed as ignored."""
        algo, given = self.algo, {}
        raw = algo.get("algoParams") or []
        if not isinstance(raw, list):
            self.fail("algoDef.algoParams", 'a list such as [{"name": "RandomSeed", "value": "1"}]')
            raw = []
        for item in raw:
            if isinstance(item, dict) and item.get("name"):
                given[str(item["name"])] = item.get("value")
        if algo.get("hyperbandEta") is not None:
            given.setdefault("eta", algo["hyperbandEta"])
        if "RandomSeed" in given:
            seed = _num(given.pop("RandomSeed"), whole=True)
            if seed is None:
                self.fail("algoDef.algoParams", "RandomSeed: a whole number")
            else:
                self.seed = int(seed)
        if "eta" in given:
            eta = _num(given.pop("eta"), whole=True)
            limit = LIMITS["reduction_factor"]
            if eta is None or not limit.holds(eta):
                self.fail("algoDef.algoParams", f"eta: a whole number from {limit.span}")
            else:
                self.values["reduction_factor"] = eta
        resource, amount = given.pop("ResourceName", None), given.pop("ResourceValue", None)
        if (resource is None) != (amount is None):
            self.fail("algoDef.algoParams", "ResourceName and ResourceValue go together (e.g. "
                                            "epochs and 10)")  # fmt: skip
        elif resource is not None:
            value = _num(amount, whole=True)
            most = LIMITS["min_resource"].high  # steps, as a database column holds them
            if value is None or not 1 <= value <= most:
                self.fail("algoDef.algoParams", f"ResourceValue: a whole number from 1 to "
                                                f"{most}, not {repr(amount)[:60]}")  # fmt: skip
            elif str(resource) in self.space:
                self.fail("algoDef.algoParams", f"ResourceName {resource}: it is searched too")
            else:
                self.config[str(resource)] = value
                self.trial_steps = int(value)
        if self.values.get("algorithm") == "hyperband":
            self.values["min_resource"] = 1  # the first entry of val_dict_list.json
        self.ignored += [f"algoParams {k}={v}" for k, v in given.items()]


def _data(request: Request) -> Any:
    raw = request.data.get("data")
    if raw is None:  # a JSON body, or the fields posted on their own
        keys = ("hpoName", "modelSpec", "algoDef", "hyperParams", "experiments")
        return {k: request.data[k] for k in keys if k in request.data}
    try:
        return jsonbounds.loads(raw, "data") if isinstance(raw, str) else raw
    except jsonbounds.Refused:
        raise
    except ValueError as exc:
        raise ApiError(f"data: not JSON ({exc}); send the request as json.dumps(...)") from None


# The answers -----------------------------------------------------------------------------


def _time(moment: Any) -> str | None:
    return timezone.localtime(moment).strftime("%Y-%m-%d %H:%M:%S") if moment else None


def _duration(seconds: float) -> str:
    seconds = int(max(0.0, seconds))
    return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def experiment(trial: TrialView, job: Job | None, types: dict[str, str]) -> dict[str, Any]:
    """A trial as WMLA shows an experiment: its values as ``fixedVal`` strings."""
    params = []
    for name, value in trial.hparams.items():
        kind = types.get(name) or ("str" if isinstance(value, str) else
                                   "int" if isinstance(value, int) else "double")  # fmt: skip
        params.append({"name": name, "dataType": kind, "fixedVal": str(value),
                       "userDefined": False})  # fmt: skip
    return {
        "id": trial.number,
        "state": EXEC_STATES.get(trial.state, trial.state),
        "metricVal": trial.objective,
        "maxiteration": trial.total_steps,
        "hyperParams": params,
        "appId": f"edt-job-{trial.job}",
        "driverId": str(trial.job),
        "startTime": _time(job.started_at if job else trial.created_at),
        "endTime": _time(trial.finished_at),
        "trialState": trial.trial_state,  # EDT's: RUNNING, COMPLETE, PRUNED or FAIL
        "note": trial.note,
    }


def task_state(sweep: Sweep, view: SweepView) -> dict[str, Any]:
    """The hypersearch as WMLA answers ``GET hypersearch/{name}`` (HpoTaskState), with
    EDT's own state and error beside."""
    types = (sweep.wmla or {}).get("types", {})
    jobs = {j.pk: j for j in Job.objects.filter(sweep=sweep).only("pk", "started_at")}
    experiments = [experiment(t, jobs.get(t.job), types) for t in view.trials]
    best = None
    if view.best is not None:
        best = experiment(view.best, jobs.get(view.best.job), types)
    return {
        "hpoName": sweep.name,
        "state": STATES[sweep.state],
        "edtState": sweep.state,
        "sweepId": sweep.pk,
        "running": view.running,
        "complete": view.done,
        "failed": view.failed,
        "progress": f"{view.done}/{view.total}",
        "createtime": _time(sweep.created_at),
        "creator": sweep.owner.get_username(),
        "duration": _duration(view.elapsed),
        "objectiveMetric": sweep.objective,
        "objective": sweep.direction,
        "best": best,
        "experiments": experiments,
        "error": view.error,
    }


def find(request: Request, name: str) -> Sweep:
    """The hypersearch ``name`` of the user's (staff: anyone's, their own first); a 404
    like WMLA's for one that does not exist or is not theirs."""
    mine = scoped(request, Sweep).select_related("owner").filter(name=name)
    found = (mine.filter(owner=request.user).first() or mine.first()) if name else None
    if found is None and name.isascii() and name.isdigit():  # "²" is a digit, but no number
        found = scoped(request, Sweep).select_related("owner").filter(pk=int(name)).first()
    if found is None:
        raise ApiError(f"no hypersearch {name}: it does not exist or is not yours", 404)
    return found  # type: ignore[no-any-return]


class HpoTaskStateSerializer(serializers.Serializer):
    """A hypersearch as WMLA's ``HpoTaskState``."""

    hpoName = serializers.CharField()
    state = serializers.ChoiceField(choices=list(STATES.values()))
    edtState = serializers.CharField(help_text="the EDT sweep's state")
    sweepId = serializers.IntegerField(help_text="the EDT sweep (/api/v1/sweeps/{id}/)")
    running = serializers.IntegerField()
    complete = serializers.IntegerField(help_text="trials ended: finished, pruned or failed")
    failed = serializers.IntegerField()
    progress = serializers.CharField(help_text="ended/budget, e.g. 3/5")
    createtime = serializers.CharField()
    creator = serializers.CharField()
    duration = serializers.CharField(help_text="hh:mm:ss")
    objectiveMetric = serializers.CharField()
    objective = serializers.CharField()
    best = serializers.DictField(allow_null=True, help_text="the experiment of the best value")
    experiments = serializers.ListField(child=serializers.DictField())
    error = serializers.CharField()


HPO = HpoTaskStateSerializer
START = inline_serializer("HpoStart", {
    "file": serializers.FileField(help_text="the model folder (.modelDir.tar) or a .py"),
    "data": serializers.CharField(help_text="JSON: hpoName, modelSpec, algoDef, hyperParams "
                                            "(see the module's docs)"),
})  # fmt: skip
DELETED = inline_serializer("HpoDeleted", {
    "deleted": serializers.ListField(child=serializers.CharField()),
    "kept": serializers.ListField(child=serializers.CharField(),
                                  help_text="still running: stop them first"),
})  # fmt: skip
EXAMPLE = ("--exec-start edtPyTorch --model-main main.py "
           "--cs-datastore-meta type=fs,data_path=DATASET")  # fmt: skip


# Views -----------------------------------------------------------------------------------


class Hypersearches(CappedUploadView, WmlaView):
    parser_classes = [MultiPartParser, FormParser, BoundedJSONParser]

    def upload_limit(self) -> int:
        return registry.MAX_MODEL_BYTES

    @extend_schema(tags=TAGS, responses={200: HPO(many=True)})
    def get(self, request: Request) -> Response:
        """Every hypersearch you may see (staff: everyone's), newest first."""
        sweeps = list(scoped(request, Sweep).select_related("owner"))
        shown = views(sweeps)
        return Response([task_state(sweep, shown[sweep.pk]) for sweep in sweeps])

    @extend_schema(
        tags=TAGS,
        request={"multipart/form-data": START},
        responses={
            200: OpenApiResponse(OpenApiTypes.STR, description="the hypersearch's name"),
            400: s.problem("a rule broken; `fields` names each"),
            413: s.problem("archive over 50 MiB"),
        },
    )
    def post(self, request: Request) -> Response:
        """Start a hypersearch: its model folder and its request (``data``); answers its
        name at once. The model is checked meanwhile (the search waits, ``SUBMITTED``); a
        model that fails its check fails the search with the check's error and line."""
        _form, upload = self.uploaded_file()
        search = Search(_data(request))
        spec = search.model_spec
        args = spec.get("args")
        if not isinstance(args, str) or not args.strip():
            args = ""
            search.fail("modelSpec.args", f"the args string of the trials' execs, e.g. {EXAMPLE}")
        if search.errors:
            raise ValidationError(search.errors)
        try:
            wmla = parse_args(args)
        except ApiError as exc:
            raise ValidationError({"modelSpec.args": [str(exc.detail)]}) from None
        dataset = _dataset_named(request, wmla.data_path)
        team, group = _team(request, spec.get("sigName"))
        if search.name and Sweep.objects.filter(owner=request.user, name=search.name).exists():
            raise ValidationError({"hpoName": [f"you have a hypersearch named {search.name} "
                                               f"already"]})  # fmt: skip
        model = _stored_model(request, upload, wmla.model_main)
        decides = [f for f in ("epochs", "batch_size", "lr") if f not in wmla.fields]
        record = {
            "request": {k: search.data[k] for k in ("modelSpec", "algoDef", "hyperParams")
                        if k in search.data},
            "args": args, "argv": wmla.argv, "script_decides": decides, "config": search.config,
            "types": search.types, "framework": wmla.framework, "sigName": spec.get("sigName"),
            "team": team.pk if team else None, "resource_group": group,
            "ignored": wmla.ignored + search.ignored,
        }  # fmt: skip
        try:
            sweep = services.create_sweep(
                request.user, model, dataset, {**search.values, **wmla.fields,
                                               "space": search.space},
                name=search.name or f"hpo-{timezone.now():%Y%m%d%H%M%S}", seed=search.seed,
                wmla=record, trial_steps=search.trial_steps or 0,
            )  # fmt: skip
        except SpaceRefused as exc:
            registry.delete(model)
            raise ValidationError(_wmla_fields(exc.errors)) from None
        except Exception:
            registry.delete(model)
            raise
        if not search.name:  # WMLA's form: <user>-hpo-<id>
            sweep.name = f"{request.user.get_username()}-hpo-{sweep.pk}"
            Sweep.objects.filter(pk=sweep.pk).update(name=sweep.name)
        (model.root / registry.CHECK_CONFIG).write_text(
            json.dumps({**search.config, **_point(search.space)})
        )
        registry.start_check(model)  # in the background; the search waits for it
        services.created(sweep)
        return Response(sweep.name)

    @extend_schema(tags=TAGS, operation_id="hypersearch_delete_all", responses={200: DELETED})
    def delete(self, request: Request) -> Response:
        """Delete every hypersearch of yours that has ended (their trials' jobs stay, as
        WMLA keeps their trainings); those still running are kept."""
        mine = Sweep.objects.filter(owner=request.user)
        kept = list(mine.filter(state__in=Sweep.ACTIVE).values_list("name", flat=True))
        ended = mine.exclude(state__in=Sweep.ACTIVE)
        names = list(ended.values_list("name", flat=True))
        ended.delete()
        return Response({"deleted": names, "kept": kept})


WMLA_FIELDS = {
    "space": "hyperParams",
    "objective": "algoDef.objectiveMetric",
    "direction": "algoDef.objective",
    "algorithm": "algoDef.algorithm",
    "max_trials": "algoDef.maxJobNum",
    "max_parallel": "algoDef.maxParalleJobNum",
    "max_time": "algoDef.maxRunTime",
    "reduction_factor": "algoDef.algoParams",
    "seed": "algoDef.algoParams (RandomSeed)",
    "min_resource": "algoDef.algoParams",
}


def _wmla_fields(errors: dict[str, list[str]]) -> dict[str, list[str]]:
    """The sweep's rules broken, under the request's own names (the job's values are the
    args string's)."""
    return {WMLA_FIELDS.get(k, f"modelSpec.args ({k})"): v for k, v in errors.items()}


def _team(request: Request, sig: Any) -> tuple[Team | None, str]:
    """The trials' team: the one ``sigName`` names when it is a team of the user's, else
    the user's default, as for an exec (edtweb/api/wmla.py)."""
    try:
        return tenancy.placement(request.user, tenancy.sig_team(request.user, sig))
    except DjangoValidationError as exc:
        raise ValidationError({"modelSpec.sigName": exc.messages}) from None


class HypersearchDetail(WmlaView):
    @extend_schema(tags=TAGS, responses={200: HPO, **NOT_FOUND})
    def get(self, request: Request, name: str) -> Response:
        """The hypersearch: its state (SUBMITTED, RUNNING, FINISHED, STOPPED, FAILED),
        ``progress`` (ended/budget), each experiment with its values and ``metricVal``,
        and the ``best``."""
        sweep = find(request, name)
        return Response(task_state(sweep, views([sweep])[sweep.pk]))

    @extend_schema(
        tags=TAGS, request=None,
        responses={200: HPO, 409: s.problem("it has ended"), **NOT_FOUND},
    )  # fmt: skip
    def put(self, request: Request, name: str) -> Response:
        """Stop the hypersearch and its running experiments (they checkpoint first)."""
        sweep = find(request, name)
        if not services.stop_sweep(sweep):
            raise ApiError(f"hypersearch {name} has ended ({STATES[sweep.state]})", 409)
        sweep.refresh_from_db()
        return Response(task_state(sweep, views([sweep])[sweep.pk]))

    @extend_schema(
        tags=TAGS,
        responses={200: HPO, 409: s.problem("still running: stop it first"), **NOT_FOUND},
    )
    def delete(self, request: Request, name: str) -> Response:
        """Delete a hypersearch that has ended (its trials' jobs stay, as plain execs)."""
        sweep = find(request, name)
        gone = task_state(sweep, views([sweep])[sweep.pk])
        deleted, _ = Sweep.objects.filter(pk=sweep.pk).exclude(state__in=Sweep.ACTIVE).delete()
        if not deleted:
            raise ApiError(f"hypersearch {name} is {STATES[sweep.state]}: stop it first", 409)
        return Response(gone)
