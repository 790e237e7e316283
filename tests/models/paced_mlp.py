"""A tiny MLP whose forward pass takes a fixed time (sleeping, not computing), so that many
learners share two cores and a job runs long enough to watch the scheduler move it."""

import time

from torch import nn

PACE_SECONDS = 0.05


class Paced(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 32), nn.ReLU(),
                                 nn.Linear(32, 10))  # fmt: skip

    def forward(self, x):
        if self.training:
            time.sleep(PACE_SECONDS)
        return self.net(x)


def build_model():
    return Paced()
