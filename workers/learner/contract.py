"""Loading a user's model definition (docs/architecture.md, "Model definition contract").

Native modules define ``build_model()`` and optionally ``get_datasets(data_dir)``,
``loss_fn(output, target)``, ``build_optimizer(params, lr)`` and ``lr_at(step, base_lr)``;
they are imported as a module. A sweep's trial hands its hyperparameters to those functions
as keyword arguments, each function only those it names (or all, to one that takes
``**kwargs``), and the whole mapping to one with a parameter ``hparams`` (:func:`bind`).

WMLA-style scripts (those that import ``fabric_model``) run as their author wrote them: as
``__main__``, with ``sys.argv`` as WMLA passes it; their ``FabricModel(...).train(...)`` call
hands the model, data, loss and optimizer to a *driver* (``workers/compat/fabric_model.py``):
the learner's elastic loop, or the model check. Only learner processes (and the check's
child) run user code.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib.util
import inspect
import json
import os
import runpy
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

from workers.learner.submission import PLATFORM_HPARAMS

COMPAT_DIR = Path(__file__).resolve().parent.parent / "compat"

# The functions of a native module that a trial's hyperparameters reach, with how many
# arguments the learner passes each by position (their names are the function's own).
HPARAM_FUNCTIONS = {"build_model": 0, "get_datasets": 1, "loss_fn": 2, "build_optimizer": 2,
                    "lr_at": 2}  # fmt: skip

Datasets = tuple[Dataset[Any], Dataset[Any]]
# Where a WMLA-style script reads a trial's hyperparameters, as WMLA's hypersearch writes
# them: a JSON object in its working directory (docs/architecture.md, "Sweeps").
CONFIG_FILE = "config.json"


class UserCodeError(Exception):
    """The user's model code is broken; the message says how, for the job's log."""


@dataclass
class ModelDefinition:
    build_model: Callable[[], nn.Module]
    get_datasets: Callable[[str], Datasets] | None
    loss_fn: Callable[[Any, Any], torch.Tensor]
    build_optimizer: Callable[[Any, float], torch.optim.Optimizer]
    # None: the learner leaves the optimizer's learning rate alone (a WMLA script's own, or
    # one its callbacks schedule). Its step: the global step; in goodput mode the progress
    # in base-batch steps, a float (docs/architecture.md, "Goodput mode").
    lr_at: Callable[[float, float], float] | None
    style: str = "native"
    script_values: dict[str, Any] | None = None
    callbacks: list[Any] = field(default_factory=list)
    logger: Any = None
    # A WMLA script's ``fn_step_train(model, data, eva, loader, fn_args) -> (acc, loss)``
    train_step: Callable[..., Any] | None = None
    # and its ``fn_test(model, test_iter, fn_args) -> mean loss``
    test_step: Callable[..., Any] | None = None
    fabric: Any = None  # the script's FabricModel (what fn_step_train gets as ``model``)


def default_optimizer(params: Any, lr: float) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=lr, momentum=0.9)


def constant_lr(step: float, base_lr: float) -> float:
    return base_lr


def import_module(path: Path) -> Any:
    """Execute the user's file as module ``edt_user_model`` (compat modules importable)."""
    if not path.is_file():
        raise UserCodeError(f"model file {path} does not exist")
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location("edt_user_model", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["edt_user_model"] = module
    spec.loader.exec_module(module)
    return module


def is_wmla_script(path: Path) -> bool:
    """Whether ``path`` is a WMLA-style script: it imports ``fabric_model``."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name == "fabric_model" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.module == "fabric_model":
            return True
    return False


def compat_on_path() -> Any:
    """Put ``workers/compat`` on the import path; returns its ``fabric_model`` module."""
    if str(COMPAT_DIR) not in sys.path:
        sys.path.insert(0, str(COMPAT_DIR))
    import fabric_model  # workers/compat: what WMLA-style scripts import

    return fabric_model


class _Captured(BaseException):
    """Unwinds a script out of its ``train()`` call once its definition is known."""


def write_config(folder: Path, hparams: Mapping[str, Any]) -> Path:
    """Write a trial's hyperparameters as ``folder/config.json``, what a WMLA-style script
    reads (``json.load(open("config.json"))``). Atomic: every learner of the job writes the
    same object, and a script never reads half of one."""
    target = folder / CONFIG_FILE
    part = folder / f".{CONFIG_FILE}.{os.getpid()}"
    part.write_text(json.dumps(dict(hparams), indent=2, sort_keys=True))
    os.replace(part, target)
    return target


def run_script(path: Path, argv: list[str], driver: Callable[[ModelDefinition], Any]) -> None:
    """Run the WMLA script at ``path`` as ``__main__`` with ``argv``; its
    ``FabricModel(...).train(...)`` calls ``driver`` with the definition. Raises
    UserCodeError when the script ends without calling ``train()``."""
    if not path.is_file():
        raise UserCodeError(f"model file {path} does not exist")
    fabric_model = compat_on_path()
    os.environ.setdefault("DATA_DIR", os.environ.get("EDT_JOB_DATA", ""))
    os.environ.setdefault("FABRIC_HOME", str(COMPAT_DIR))  # scripts print $FABRIC_HOME/libs
    fabric_model.set_driver(driver)
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [str(path), *argv]
    sys.path.insert(0, str(path.parent))
    exit_code: Any = None
    try:
        runpy.run_path(str(path.resolve()), run_name="__main__")
    except SystemExit as exc:  # a script may end with sys.exit(); argparse exits on bad argv
        exit_code = exc.code
    finally:
        called = fabric_model.train_called()
        sys.argv = saved_argv
        sys.path[:] = saved_path + [p for p in sys.path if p not in saved_path]
        fabric_model.set_driver(None)
    if not called:
        before = (
            f"exited (status {exit_code}) before calling"
            if exit_code
            else "ran to its end without calling"
        )
        raise UserCodeError(
            f"{path.name} {before} FabricModel(...).train(): call it from the script (under "
            '`if __name__ == "__main__":` or at the top level); EDT runs the script as __main__'
        )
    if exit_code not in (None, 0):
        raise UserCodeError(f"{path.name} exited with status {exit_code} after training")


def load_definition(
    path: Path, argv: list[str] | None = None, hparams: Mapping[str, Any] | None = None
) -> ModelDefinition:
    """The model definition in ``path``, native or WMLA style. A WMLA script runs until its
    ``train()`` call, which hands over its definition and ends the script there. A native
    module's functions get ``hparams`` (a sweep's trial) as :func:`bind` says."""
    compat_on_path()
    if is_wmla_script(path):
        found: list[ModelDefinition] = []

        def capture(defn: ModelDefinition) -> None:
            found.append(defn)
            raise _Captured

        with contextlib.suppress(_Captured):
            run_script(path, argv or [], capture)
        return found[0]
    module = import_module(path)
    if not callable(getattr(module, "build_model", None)):
        raise UserCodeError(
            f"{path.name} defines no build_model() and calls no FabricModel(...).train(): "
            "define `def build_model() -> torch.nn.Module` (see examples/cnn.py), or import "
            "fabric_model and call FabricModel(...).train() (see examples/cnn_wmla.py)"
        )
    own = bind_all(module, dict(hparams or {}), path.name)
    return ModelDefinition(
        build_model=own["build_model"],
        get_datasets=own.get("get_datasets"),
        loss_fn=own.get("loss_fn", nn.functional.cross_entropy),
        build_optimizer=own.get("build_optimizer", default_optimizer),
        lr_at=own.get("lr_at", constant_lr),
    )


def bind(fn: Callable[..., Any], hparams: Mapping[str, Any], positional: int
         ) -> tuple[Callable[..., Any], set[str]]:  # fmt: skip
    """``fn`` with the hyperparameters it accepts bound as keyword arguments, and their
    names. It accepts those it names as a parameter (after the first ``positional`` ones,
    which the learner passes itself) or all of them through ``**kwargs``; a parameter
    named ``hparams`` gets the whole mapping (read-only). ``fn`` alone when it takes none."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature: it takes none
        return fn, set()
    taken: set[str] = set()  # the names the learner's positional arguments fill
    for p in params[:positional]:
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            break
        taken.add(p.name)
    named = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    anything = any(p.kind == p.VAR_KEYWORD for p in params)
    kwargs = {k: v for k, v in hparams.items()
              if k not in taken and (k in named or anything)}  # fmt: skip
    reached = set(kwargs)
    if "hparams" in named - taken:
        kwargs["hparams"] = MappingProxyType(dict(hparams))
        reached = set(hparams)
    return (functools.partial(fn, **kwargs) if kwargs else fn), reached


def bind_all(module: Any, hparams: dict[str, Any], filename: str) -> dict[str, Any]:
    """The module's own functions of :data:`HPARAM_FUNCTIONS`, each with the trial's
    ``hparams`` it accepts (:func:`bind`). A hyperparameter that reaches none of them (and
    is not the platform's own) would make every trial the same model: UserCodeError."""
    found: dict[str, Any] = {}
    reached: set[str] = set(PLATFORM_HPARAMS)
    for name, positional in HPARAM_FUNCTIONS.items():
        fn = getattr(module, name, None)
        if not callable(fn):
            continue
        found[name], got = bind(fn, hparams, positional) if hparams else (fn, set())
        reached |= got
    lost = sorted(set(hparams) - reached)
    if lost:
        names = ", ".join(repr(n) for n in lost)
        functions = ", ".join(f"{n}()" for n in HPARAM_FUNCTIONS if n in found)
        raise UserCodeError(
            f"the hyperparameter {names} reaches none of {filename}'s functions ({functions}): "
            f"give the one that uses it a parameter of that name (with a default, for the "
            f"model check), or a parameter `hparams` for all of them"
        )
    return found
