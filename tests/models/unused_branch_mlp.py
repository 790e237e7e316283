"""examples/mlp.py's updates, with a side layer that a training batch uses or skips by its
first value (the rehearsal, in eval mode, uses it): a rank whose batch skips it gives that
layer no gradient. Where used, its output is multiplied by zero, so every update is the
MLP's either way and the side layer never moves."""

from __future__ import annotations

import torch
from torch import nn


class SideBranch(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Flatten(), nn.Linear(3 * 32 * 32, 64), nn.ReLU(), nn.Linear(64, 10)
        )
        self.side = nn.Linear(10, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.body(x)
        if not self.training or float(x.flatten()[0]) > 0.2:
            out = out + 0.0 * self.side(out)
        return out


def build_model() -> nn.Module:
    return SideBranch()


def build_optimizer(params, lr: float) -> torch.optim.Optimizer:  # type: ignore[no-untyped-def]
    return torch.optim.SGD(params, lr=lr, momentum=0.9)
