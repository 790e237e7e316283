"""examples/mlp.py (the same parameters and initialisation) with torch's own SGD, whose
step-pre hook adds weight decay to each gradient in place: torch's optimizer, but the
gradients written into all the same (their tensor versions count it). Goodput mode must
not take such a gradient, kept from one step for the next, as the gradient the step made."""

import torch
from torch import nn

DECAY = 1.0  # large: a gradient written into is far from the one measured


def _decay_into_grad(optimizer, args, kwargs):
    with torch.no_grad():
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.grad.add_(p, alpha=DECAY)


def build_model():
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 64), nn.ReLU(), nn.Linear(64, 10))


def build_optimizer(params, lr):
    optimizer = torch.optim.SGD(params, lr=lr, momentum=0.9)
    optimizer.register_step_pre_hook(_decay_into_grad)
    return optimizer
