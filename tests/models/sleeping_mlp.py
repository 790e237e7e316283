"""A tiny MLP that sleeps in every forward pass (training and evaluation) and computes
almost nothing: its slots' utilisation stays near zero, as a job stuck waiting on I/O or on
a person would (tests/test_idle_live.py)."""

import time

from torch import nn

SLEEP_SECONDS = 0.5


class Sleeping(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 10))

    def forward(self, x):
        time.sleep(SLEEP_SECONDS)
        return self.net(x)


def build_model():
    return Sleeping()
