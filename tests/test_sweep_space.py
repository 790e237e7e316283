"""A sweep's rules (edtweb/sweeps/space.py): every impossible space, objective, algorithm and
budget is refused at create with a message naming the field and what to give instead; and a
trial's hyperparameters reach a native model's functions by their signatures
(workers/learner/contract.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from edtweb.sweeps.space import SpaceRefused, grid_size, judged
from workers.learner.contract import UserCodeError, load_definition

LR = {"type": "loguniform", "low": 1e-3, "high": 0.3}
GOOD = {"space": {"lr": LR}, "objective": "loss", "direction": "minimize",
        "algorithm": "asha", "max_trials": 16, "max_parallel": 4}  # fmt: skip


def refused(**changes: Any) -> dict[str, list[str]]:
    with pytest.raises(SpaceRefused) as caught:
        judged({**GOOD, **changes}, train_samples=256)
    return caught.value.errors


# (what is asked, the field refused, a part of the message)
IMPOSSIBLE = [
    ({"space": {}}, "space", "the search space is empty"),
    ({"space": None}, "space", "the search space is empty"),
    ({"space": {"lr": {"type": "uniform", "low": 0.1, "high": 0.1}}}, "space",
     "lr: the range is empty or inverted: low 0.1 >= high 0.1"),
    ({"space": {"width": {"type": "int", "low": 64, "high": 8}}}, "space",
     "width: the range is empty or inverted: low 64 >= high 8"),
    ({"space": {"lr": {"type": "loguniform", "low": 0, "high": 0.1}}}, "space",
     "lr: a log scale needs low > 0, not 0"),
    ({"space": {"lr": {"type": "loguniform", "low": -1, "high": 0.1}}}, "space",
     "lr: a log scale needs low > 0, not -1"),
    ({"space": {"lr": {"type": "logunif", "low": 0.1, "high": 1}}}, "space",
     "lr: unknown type 'logunif'; one of uniform, loguniform, int, choice"),
    ({"space": {"lr": {"low": 0.1, "high": 1}}}, "space", "lr: unknown type None"),
    ({"space": {"lr": {"type": "uniform", "low": 0.1, "hi": 1}}}, "space",
     "lr: unknown key 'hi'; a uniform parameter takes low, high, step"),
    ({"space": {"lr": {"type": "uniform", "low": 0.1}}}, "space",
     "lr: a uniform parameter needs high"),
    ({"space": {"lr": {"type": "uniform", "low": "a", "high": 1}}}, "space",
     "lr: low and high must be numbers"),
    ({"space": {"width": {"type": "int", "low": 1.5, "high": 8}}}, "space",
     "width: an int parameter's low and high must be whole"),
    ({"space": {"width": {"type": "int", "low": 1, "high": 8, "step": 0}}}, "space",
     "width: step must be a whole number 1 or more, not 0"),
    ({"space": {"drop": {"type": "uniform", "low": 0, "high": 0.5, "step": 1}}}, "space",
     "drop: step 1 is larger than the range 0 to 0.5"),
    ({"space": {"opt": {"type": "choice", "choices": []}}}, "space",
     "opt: choices must be a non-empty list"),
    ({"space": {"opt": {"type": "choice", "choices": ["sgd", "sgd"]}}}, "space",
     "opt: choice 'sgd' is listed twice"),
    ({"space": {"opt": {"type": "choice", "choices": [[1]]}}}, "space",
     "opt: a choice must be a string, a number or a boolean"),
    ({"space": {"lr": 0.1}}, "space", "lr: give a mapping"),
    ({"space": {"2x": {"type": "choice", "choices": [1]}}}, "space",
     "'2x': a hyperparameter's name must be a Python identifier"),
    ({"space": {"hparams": {"type": "choice", "choices": [1]}}}, "space",
     "'hparams' is the name of the whole mapping"),
    ({"space": {"max_workers": {"type": "int", "low": 1, "high": 4}}}, "space",
     "max_workers: the platform's own setting, not a hyperparameter"),
    ({"space": {"lr": {"type": "uniform", "low": 0.1, "high": 20}}}, "space",
     "lr: every value must be 1e-08 to 10 (the job's bound)"),
    ({"space": {"batch_size": {"type": "int", "low": 32, "high": 512}}}, "space",
     "batch_size: 512 is larger than the 256 training samples"),
    ({"space": {"batch_size": {"type": "uniform", "low": 32, "high": 64}}}, "space",
     "batch_size: a batch is a whole number"),
    ({"objective": ""}, "objective", "name the metric to optimise"),
    ({"direction": "min"}, "direction", "must be minimize or maximize, not 'min'"),
    ({"algorithm": "bayes"}, "algorithm",
     "must be one of random, grid, tpe, asha, hyperband, not 'bayes'"),
    ({"max_trials": 0}, "max_trials", "budget must be a whole number from 1 to 5000, not 0"),
    ({"max_parallel": 0}, "max_parallel", "must be a whole number from 1 to 1024, not 0"),
    ({"max_time": -1}, "max_time", "must be seconds, 0 or more"),
    ({"reduction_factor": 1}, "reduction_factor", "must be a whole number from 2 to 100"),
    ({"algorithm": "grid"}, "space", "lr: grid search needs discrete values"),
]  # fmt: skip


@pytest.mark.parametrize(("changes", "field", "message"), IMPOSSIBLE)
def test_an_impossible_sweep_is_refused_naming_the_field(
    changes: dict[str, Any], field: str, message: str
) -> None:
    errors = refused(**changes)
    assert field in errors, errors
    assert any(message in line for line in errors[field]), errors[field]


def test_every_rule_broken_is_named_at_once() -> None:
    errors = refused(space={"a": {"type": "uniform", "low": 2, "high": 1},
                            "b": {"type": "nope"}}, direction="up", max_trials=0)  # fmt: skip
    assert set(errors) == {"space", "direction", "max_trials"}
    assert len(errors["space"]) == 2


def test_a_good_space_is_kept_as_asked_with_its_defaults() -> None:
    space = {"lr": LR, "width": {"type": "int", "low": 8, "high": 64, "step": 8},
             "drop": {"type": "uniform", "low": 0.0, "high": 0.5},
             "opt": {"type": "choice", "choices": ["sgd", "adam", True, 3]}}  # fmt: skip
    plan = judged({"space": space, "objective": "test_loss"})
    assert plan.space_dict() == space
    assert (plan.direction, plan.algorithm, plan.max_trials, plan.max_parallel) == (
        "minimize", "random", 10, 1)  # fmt: skip
    assert (plan.max_time, plan.reduction_factor, plan.min_resource) == (0.0, 3, 0)


def test_a_grid_covers_every_point_and_its_budget_is_at_most_its_size() -> None:
    space = {"width": {"type": "int", "low": 8, "high": 32, "step": 8},
             "drop": {"type": "uniform", "low": 0.0, "high": 0.5, "step": 0.25},
             "opt": {"type": "choice", "choices": ["sgd", "adam"]}}  # fmt: skip
    plan = judged({"space": space, "objective": "loss", "algorithm": "grid"})
    assert plan.grid() == {"width": [8, 16, 24, 32], "drop": [0.0, 0.25, 0.5],
                           "opt": ["sgd", "adam"]}  # fmt: skip
    assert grid_size(plan.space) == plan.max_trials == 24  # the whole grid by default
    fewer = judged({"space": space, "objective": "loss", "algorithm": "grid", "max_trials": 5})
    more = judged({"space": space, "objective": "loss", "algorithm": "grid", "max_trials": 99})
    assert (fewer.max_trials, more.max_trials) == (5, 24)


# Hyperparameters reaching the model ----------------------------------------------------------

MODEL = """
import torch
from torch import nn

seen = {}


def build_model(width: int = 16, depth=1):
    seen["build_model"] = {"width": width, "depth": depth}
    if width < 1:
        raise ValueError(f"width must be positive, not {width}")
    return nn.Sequential(nn.Flatten(), nn.Linear(4, width), nn.ReLU(), nn.Linear(width, 2))


def build_optimizer(params, lr, momentum=0.0, **rest):
    seen["build_optimizer"] = {"lr": lr, "momentum": momentum, **rest}
    return torch.optim.SGD(params, lr=lr, momentum=momentum)


def lr_at(step, base_lr, hparams):
    seen["lr_at"] = dict(hparams)
    return base_lr * hparams.get("decay", 1.0) ** step
"""


def model_file(tmp_path: Path, source: str = MODEL) -> Path:
    path = tmp_path / "model.py"
    path.write_text(source)
    return path


def test_each_function_gets_the_hyperparameters_its_signature_names(tmp_path: Path) -> None:
    hparams = {"width": 8, "momentum": 0.5, "decay": 0.9, "lr": 0.3}
    defn = load_definition(model_file(tmp_path), hparams=hparams)
    model = defn.build_model()
    optimizer = defn.build_optimizer(model.parameters(), 0.3)
    rate = defn.lr_at(2, 0.3)  # type: ignore[misc]
    import edt_user_model  # type: ignore[import-not-found]  # the module load_definition ran

    seen = edt_user_model.seen
    assert seen["build_model"] == {"width": 8, "depth": 1}  # depth not searched: its default
    # **rest takes the others, but never the lr the learner passes by position
    assert seen["build_optimizer"] == {"lr": 0.3, "momentum": 0.5, "width": 8, "decay": 0.9}
    assert optimizer.param_groups[0]["momentum"] == 0.5
    assert seen["lr_at"] == hparams  # a parameter named hparams gets all of them
    assert rate == pytest.approx(0.3 * 0.81)


def test_without_hyperparameters_the_functions_are_the_modules_own(tmp_path: Path) -> None:
    defn = load_definition(model_file(tmp_path))
    import edt_user_model  # type: ignore[import-not-found]

    assert defn.build_model is edt_user_model.build_model


def test_a_hyperparameter_no_function_takes_is_a_clear_error(tmp_path: Path) -> None:
    plain = "from torch import nn\n\ndef build_model(width=4):\n    return nn.Linear(4, width)\n"
    with pytest.raises(UserCodeError) as caught:
        load_definition(model_file(tmp_path, plain), hparams={"width": 2, "dropout": 0.1})
    assert "the hyperparameter 'dropout' reaches none of model.py's functions " \
           "(build_model())" in str(caught.value)  # fmt: skip
    # lr and batch_size are the platform's: they need no parameter of the model's
    load_definition(model_file(tmp_path, plain), hparams={"width": 2, "lr": 0.1})


def test_a_value_the_model_rejects_fails_with_the_models_own_error(tmp_path: Path) -> None:
    defn = load_definition(model_file(tmp_path), hparams={"width": 0})
    with pytest.raises(ValueError, match="width must be positive, not 0"):
        defn.build_model()
