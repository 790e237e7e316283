"""The small CNN of examples/cnn.py with its width a hyperparameter: a sweep's trial passes
``width`` (the first convolution's channels; the second has twice as many) as a keyword
argument (bench/bench_sweep.py)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def build_model(width: int = 16) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(width, 2 * width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(2 * width * 8 * 8, 64), nn.ReLU(), nn.Linear(64, 10),
    )  # fmt: skip


def build_optimizer(params: Any, lr: float) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=lr, momentum=0.9)
