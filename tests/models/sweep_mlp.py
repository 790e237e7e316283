"""A tiny MLP whose width and momentum are hyperparameters: a sweep's trial passes them as
keyword arguments (tests/test_sweeps_live.py); a width below 1 is refused with the model's
own error, as a user's model refuses a value it cannot take. Its training steps take at
least 50 ms (it sleeps), so that a trial lasts long enough for its pruner to stop it early."""

import time

import torch
from torch import nn

PACE_SECONDS = 0.05


class Paced(nn.Sequential):
    def forward(self, x):
        if self.training:
            time.sleep(PACE_SECONDS)
        return super().forward(x)


def build_model(width=32):
    if width < 1:
        raise ValueError(f"width must be at least 1, not {width}")
    print(f"building an MLP of width {width}", flush=True)
    return Paced(nn.Flatten(), nn.Linear(3 * 32 * 32, width), nn.ReLU(), nn.Linear(width, 10))


def build_optimizer(params, lr, momentum=0.9):
    return torch.optim.SGD(params, lr=lr, momentum=momentum)
