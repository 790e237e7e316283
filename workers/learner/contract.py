"""Loading a user's model definition (DESIGN.md, "Model definition contract").

Native modules define ``build_model()`` and optionally ``get_datasets(data_dir)``,
``loss_fn(output, target)``, ``build_optimizer(params, lr)`` and ``lr_at(step, base_lr)``.
WMLA-style scripts call ``FabricModel(...).train(...)``; here that call hands its pieces to
the learner instead of training (``workers/compat``). Only learner processes import user code.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import Dataset

COMPAT_DIR = Path(__file__).resolve().parent.parent / "compat"

Datasets = tuple[Dataset[Any], Dataset[Any]]


class UserCodeError(Exception):
    """The user's model code is broken; the message says how, for the job's log."""


@dataclass
class ModelDefinition:
    build_model: Callable[[], nn.Module]
    get_datasets: Callable[[str], Datasets] | None
    loss_fn: Callable[[Any, Any], torch.Tensor]
    build_optimizer: Callable[[Any, float], torch.optim.Optimizer]
    lr_at: Callable[[int, float], float]
    style: str = "native"
    script_values: dict[str, Any] | None = None
    callbacks: list[Any] = field(default_factory=list)
    logger: Any = None


def default_optimizer(params: Any, lr: float) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=lr, momentum=0.9)


def constant_lr(step: int, base_lr: float) -> float:
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


def load_definition(path: Path) -> ModelDefinition:
    """The model definition in ``path``, native or WMLA style."""
    if str(COMPAT_DIR) not in sys.path:
        sys.path.insert(0, str(COMPAT_DIR))
    import fabric_model  # workers/compat: what WMLA-style scripts import

    fabric_model.reset_capture()
    module = import_module(path)
    captured: ModelDefinition | None = fabric_model.captured()
    if captured is not None:
        return captured
    if not callable(getattr(module, "build_model", None)):
        raise UserCodeError(
            f"{path.name} defines no build_model() and calls no FabricModel(...).train(): "
            "define `def build_model() -> torch.nn.Module` (see examples/cnn.py)"
        )
    return ModelDefinition(
        build_model=module.build_model,
        get_datasets=getattr(module, "get_datasets", None),
        loss_fn=getattr(module, "loss_fn", nn.functional.cross_entropy),
        build_optimizer=getattr(module, "build_optimizer", default_optimizer),
        lr_at=getattr(module, "lr_at", constant_lr),
    )
