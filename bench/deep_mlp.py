"""A host-bound model for bench_step_overhead.py: 42 Linear layers of width 64.

At a small batch each layer is a few microseconds of arithmetic, so a step's time is
mostly the framework's own work per operation: whatever a training engine adds on the
host per step or per parameter shows here, as it would on a GPU that waits for its host.
"""

from __future__ import annotations

import torch
from torch import nn

WIDTH = 64
HIDDEN_LAYERS = 40  # + the input and output layers: 42 Linear layers


def build_model() -> nn.Module:
    layers: list[nn.Module] = [nn.Flatten(), nn.Linear(3 * 32 * 32, WIDTH), nn.ReLU()]
    for _ in range(HIDDEN_LAYERS):
        layers += [nn.Linear(WIDTH, WIDTH), nn.ReLU()]
    layers.append(nn.Linear(WIDTH, 10))
    return nn.Sequential(*layers)


def build_optimizer(params, lr: float) -> torch.optim.Optimizer:  # type: ignore[no-untyped-def]
    return torch.optim.SGD(params, lr=lr, momentum=0.9)
