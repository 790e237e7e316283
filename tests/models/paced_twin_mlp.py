"""examples/mlp.py with every forward pass in training held back a fixed time (a sleep,
not computing): the same parameters, initialisation and updates, but a run long enough
that a driver on a busy machine carries out each resize of a schedule before the next one
is due."""

import time

import torch
from torch import nn

PACE_SECONDS = 0.1


class PacedSequential(nn.Sequential):
    def forward(self, x):
        if self.training:
            time.sleep(PACE_SECONDS)
        return super().forward(x)


def build_model():
    return PacedSequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 64), nn.ReLU(),
                           nn.Linear(64, 10))  # fmt: skip


def build_optimizer(params, lr):
    return torch.optim.SGD(params, lr=lr, momentum=0.9)
