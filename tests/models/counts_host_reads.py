"""examples/mlp.py that counts, in each learner, every host read of a tensor's values
(``item``, ``tolist``, ``float``, ``int``, ``bool``, ``cpu``, ``numpy``) over steady-state
steps, and which step made the tensor read: a TorchFunctionMode entered when the model is
built tags every tensor a torch call returns with the step being queued then (optimizer
steps taken + 1), and the optimizer counts the steps queued. A read of step k's values
before step k+1's optimizer step is queued is a sync inside the step. Each learner writes
what it saw to ``$EDT_TEST_READS_DIR/reads-<pid>.json`` once the window is over."""

import contextlib
import json
import os
import weakref
from pathlib import Path

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

WINDOW = (3, 9)  # optimizer steps queued: after the first generation's start, before the end
READS = {
    torch.Tensor.item,
    torch.Tensor.tolist,
    torch.Tensor.__float__,
    torch.Tensor.__int__,
    torch.Tensor.__bool__,
    torch.Tensor.cpu,
    torch.Tensor.numpy,
    torch.Tensor.__index__,
}


class Counter:
    queued = 0
    reads = []  # (what, tag, queued)
    early = []
    tags = {}  # id -> (weakref, the step being queued when it was made)
    written = False


class Tagging(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        q = Counter.queued
        if func in READS and WINDOW[0] <= q < WINDOW[1] and args:
            t = args[0]
            held = Counter.tags.get(id(t))
            tag = held[1] if held is not None and held[0]() is t else None
            Counter.reads.append((getattr(func, "__name__", str(func)), tag, q))
            if tag is not None and q < tag + 1:
                Counter.early.append((getattr(func, "__name__", str(func)), tag, q))
        out = func(*args, **kwargs)
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                with contextlib.suppress(TypeError):
                    Counter.tags[id(t)] = (weakref.ref(t), q + 1)
        return out


class CountingSGD(torch.optim.SGD):
    def step(self, closure=None):
        out = super().step(closure)
        Counter.queued += 1
        if Counter.queued >= WINDOW[1] and not Counter.written:
            Counter.written = True
            folder = Path(os.environ["EDT_TEST_READS_DIR"])
            (folder / f"reads-{os.getpid()}.json").write_text(
                json.dumps({"reads": Counter.reads, "early": Counter.early})
            )
        return out


def build_model():
    Tagging().__enter__()  # for the rest of this process's main thread
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 64), nn.ReLU(), nn.Linear(64, 10))


def build_optimizer(params, lr):
    return CountingSGD(params, lr=lr, momentum=0.9)
