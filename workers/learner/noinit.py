"""A joiner's model, built without the random initialisation it would throw away.

A learner that joins a running job receives every parameter with the job's state
(``Learner.sync_state``), so the random values its own build gave them are overwritten
before they are used. For a large model those values are most of the build: torch's
initialisation of the 1 GB benchmark MLP's 126 M parameters takes about 0.8 s of CPU here,
against 0.05 s to zero them (bench/results/engine.md, section 17), and a joiner's start-up
is part of every grow's wait.

Inside :func:`no_initialisation`, torch.nn's own layers (``Linear``, ``Conv2d``, the norms,
``Embedding``, the recurrent layers, ``MultiheadAttention``, ...) zero their parameters
instead of drawing them (batch norm's running statistics are reset as usual). Nothing else
changes: a model's own code runs as written, tensors it makes itself (a buffer, a
parameter from ``torch.randn``, a weight it loads) are made as always, and user-defined
layers that initialise their own parameters still do. Only parameters, which the state
always carries, are left unset. But the random numbers those layers did not draw shift
what the model's own code draws after them, and a tensor the state does not carry (a
buffer registered with ``persistent=False``, a tensor kept as a plain attribute) may hold
such numbers, or values computed from a weight: a model that keeps any such tensor
(:func:`outside_state`) is built again the ordinary way, as a learner that cannot tell.

A learner that turns out to need its own initialisation after all (the first member of a
generation with no state to receive: the coordinator lost every member, say) builds the
model again from the job's seed and copies it in (``Learner._initialise``): the values
and the random generator's state are then those the ordinary build gives.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.nn.parameter import UninitializedParameter

METHODS = ("reset_parameters", "_reset_parameters")


def _torch_layers() -> list[tuple[type, str]]:
    """(class, method) for every torch.nn module class that defines an initialiser."""
    found, seen, todo = [], set(), [nn.Module]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            if sub not in seen:
                seen.add(sub)
                todo.append(sub)
            if sub.__module__.startswith("torch.nn.") or sub.__module__ == "torch.nn":
                found += [(sub, m) for m in METHODS if m in sub.__dict__]
    return sorted(set(found), key=lambda cm: (cm[0].__module__, cm[0].__qualname__, cm[1]))


def _zero_own(module: nn.Module) -> None:
    """In place of a torch layer's initialiser: its own parameters zeroed (zeros, not
    ``torch.empty``'s leftovers: a rehearsal on denormals or NaN would be slow or noisy),
    its running statistics reset as its initialiser would."""
    with torch.no_grad():
        for p in module._parameters.values():
            if p is not None and not isinstance(p, UninitializedParameter):
                p.zero_()
    reset_stats = getattr(module, "reset_running_stats", None)
    if callable(reset_stats):
        reset_stats()


@contextlib.contextmanager
def no_initialisation() -> Iterator[None]:
    """torch.nn's layers built in this block have their parameters zeroed, not drawn."""
    saved: list[tuple[type, str, Any]] = []
    try:
        for cls, name in _torch_layers():
            saved.append((cls, name, cls.__dict__[name]))
            setattr(cls, name, _zero_own)
        yield
    finally:
        for cls, name, method in reversed(saved):
            setattr(cls, name, method)


def outside_state(model: nn.Module) -> list[str]:
    """The tensors ``model`` keeps that its state_dict does not carry: buffers registered
    with ``persistent=False`` and tensors kept as attributes (directly, or in a list,
    tuple or dict attribute) of any of its modules."""
    found = []
    for prefix, module in model.named_modules():
        where = f"{prefix}." if prefix else ""
        found += [where + name for name in module._non_persistent_buffers_set]
        for name, value in vars(module).items():
            if name.startswith("_"):  # nn.Module's own bookkeeping (_parameters, ...)
                continue
            values = value.values() if isinstance(value, dict) else value
            if isinstance(value, torch.Tensor) or (
                isinstance(value, list | tuple | dict)
                and any(isinstance(v, torch.Tensor) for v in values)
            ):
                found.append(where + name)
    return found
