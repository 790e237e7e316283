"""A small MLP in EDT's native style: `build_model()` is all a model needs.

The data comes from the platform's loader for the dataset's format (CIFAR-10 batches here).
"""

from __future__ import annotations

import torch
from torch import nn


def build_model() -> nn.Module:
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 64), nn.ReLU(), nn.Linear(64, 10))


def build_optimizer(params, lr: float) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=lr, momentum=0.9)
