"""The tiny MLP of paced_mlp.py, whose forward pass sleeps for as long as the file ``pace``
next to this file says (seconds; 0.05 without it): a test slows the job down while it
injects faults, then lets it finish at full speed."""

import time
from pathlib import Path

from torch import nn

PACE_FILE = Path(__file__).with_name("pace")


def pace():
    try:
        return float(PACE_FILE.read_text())
    except (OSError, ValueError):
        return 0.05


class Throttled(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 32), nn.ReLU(),
                                 nn.Linear(32, 10))  # fmt: skip

    def forward(self, x):
        if self.training:
            time.sleep(pace())
        return self.net(x)


def build_model():
    return Throttled()
