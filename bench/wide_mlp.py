"""A communication-bound model for bench_engine.py: a wide MLP of 21.0 M parameters.

On CIFAR-sized input (3x32x32) its gradients are 84 MB a step against little compute per
sample, so the gradient all-reduce is a large share of the step, unlike the small CNN.
"""

from __future__ import annotations

import torch
from torch import nn

HIDDEN = (4096, 2048)


def build_model() -> nn.Module:
    layers: list[nn.Module] = [nn.Flatten()]
    width = 3 * 32 * 32
    for h in HIDDEN:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    layers.append(nn.Linear(width, 10))
    return nn.Sequential(*layers)


def build_optimizer(params, lr: float) -> torch.optim.Optimizer:  # type: ignore[no-untyped-def]
    return torch.optim.SGD(params, lr=lr, momentum=0.9)
