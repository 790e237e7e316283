"""examples/mlp.py (the same parameters and initialisation) with a hand-written optimizer
that writes into the gradients: its weight decay is added to each gradient in place,
through ``.data`` (which no tensor version counts), before SGD's step, as older
hand-written optimizers do. Goodput mode must not take such a gradient, kept from one step
for the next, as the gradient the step made."""

import torch
from torch import nn

DECAY = 1.0  # large: a gradient written into is far from the one measured


class DecayIntoGrad(torch.optim.SGD):
    def __init__(self, params, lr):
        super().__init__(params, lr=lr, momentum=0.9)

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.grad.data.add_(p.data, alpha=DECAY)
        return super().step(closure)


def build_model():
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 64), nn.ReLU(), nn.Linear(64, 10))


def build_optimizer(params, lr):
    return DecayIntoGrad(params, lr)
