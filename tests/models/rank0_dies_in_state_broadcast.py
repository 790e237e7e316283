"""tests/models/paced_twin_mlp.py (examples/mlp.py's updates, 0.1 s a step) whose learner
on slot d0 (rank 0 of a driven job) is killed in the middle of the state broadcast at its
first resize: after the first large tensor went out (the first layer's weight, received in
place into the joiner's own parameter) and before the second (its momentum). The joiner is
then left with a torn state: rank 0's weight, its own everything else."""

import os
import signal

import torch.distributed as dist
from paced_twin_mlp import build_model, build_optimizer  # noqa: F401

FIRST_WEIGHT = 3 * 32 * 32 * 64  # elements of the first layer's weight, and of its momentum

if os.environ.get("EDT_SLOT") == "d0":
    _broadcast = dist.ProcessGroupGloo.broadcast
    _sent = []

    def _dying_broadcast(self, tensors, *args, **kwargs):
        if tensors[0].numel() == FIRST_WEIGHT:
            _sent.append(1)
            if len(_sent) == 2:
                os.kill(os.getpid(), signal.SIGKILL)
        return _broadcast(self, tensors, *args, **kwargs)

    dist.ProcessGroupGloo.broadcast = _dying_broadcast
