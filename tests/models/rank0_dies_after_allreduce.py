"""examples/mlp.py whose learner on slot d0 (rank 0 of a driven job) is killed in its
optimizer step at step 17: after that step's all-reduce, before its record is written, and
one step after epoch 0's evaluation (16 iterations an epoch of 1024 samples at batch 64),
whose record it had just queued. The others have taken the step; both records must still
reach the job."""

import os
import signal
import sys

import torch
from torch import nn

DIE_AT_STEP = 17


class DyingSGD(torch.optim.SGD):
    steps = 0

    def step(self, closure=None):
        DyingSGD.steps += 1
        dying = "--slot" in sys.argv and sys.argv[sys.argv.index("--slot") + 1] == "d0"
        if dying and DyingSGD.steps == DIE_AT_STEP:
            os.kill(os.getpid(), signal.SIGKILL)
        return super().step(closure)


def build_model():
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 64), nn.ReLU(), nn.Linear(64, 10))


def build_optimizer(params, lr):
    return DyingSGD(params, lr=lr, momentum=0.9)
