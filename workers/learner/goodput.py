"""Goodput mode's statistics: the gradient noise scale, measured as training goes, with no
extra pass, and what it says of a batch (docs/architecture.md, "Goodput mode").

Each step gives two views of the same gradient: the mean gradient of a *small* batch
(each learner's local batch before the all-reduce; with one learner, each of its
micro-batches) and of the *big* one (the global batch, after it). Their squared norms
estimate, without bias (McCandlish et al., "An Empirical Model of Large-Batch Training",
appendix A.1, as Pollux and AdaptDL use them), the true gradient's squared norm |G|² and
the trace of the per-sample gradients' covariance tr(Σ):

    E|g_b|² = |G|² + tr(Σ)/b, so
    |G|²  ≈ (B·|g_B|² - b·|g_b|²) / (B - b)
    tr(Σ) ≈ (|g_b|² - |g_B|²) / (1/b - 1/B)

Both are noisy step to step; each is smoothed by an exponential moving average with the
bias of its start corrected (as AdaptDL's ``GradientNoiseScale``), whose decay per step
grows with the batch (``SMOOTHING ** (B / M0)``): a step of a larger batch has seen more
samples. The noise scale is their ratio, ``gns = tr(Σ) / |G|²``.

For a batch M, against the base batch M0 the learning rate was given for (Pollux):

- the *gain* (AdaScale's): how many base-batch steps one step of M is worth,
  ``r = (tr(Σ)/M0 + |G|²) / (tr(Σ)/M + |G|²) = (gns + M0)/(gns + M) · M/M0``;
- the *statistical efficiency*: the progress per sample against M0,
  ``E = r · M0/M = (gns + M0)/(gns + M)``, 1 at M0, falling as M outgrows the noise scale.

The learning rate is the base one times the gain, and progress is counted in base-batch
steps (the sum of the gains): a schedule that reads it means the same at any batch. Pure
Python: no torch, no Redis.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

SMOOTHING = 0.999  # AdaptDL's: the moving averages' decay per base batch of samples


@dataclass
class NoiseScale:
    """The smoothed |G|² and tr(Σ) of one job, and its progress in base-batch steps: part
    of the job's state (broadcast at a resize, kept in checkpoints)."""

    base: int  # M0: the batch the learning rate is given for
    sqr_sum: float = 0.0  # the moving averages, before their start's bias is corrected
    sqr_weight: float = 0.0
    var_sum: float = 0.0
    var_weight: float = 0.0
    progress: float = 0.0  # steps at the base batch that training is worth so far
    observed: int = 0  # steps that gave an estimate

    def observe(self, small_sqr: float, small: float, big_sqr: float, big: float) -> bool:
        """One step's two squared norms: ``small_sqr`` the mean of |g_b|² over the small
        batches (their effective size ``small``: the harmonic mean of theirs), ``big_sqr``
        the global batch's |g_B|² (size ``big``). False, and nothing kept, where they give
        no estimate (one small batch only, a gradient not finite)."""
        values = (small_sqr, small, big_sqr, big)
        if not big > small > 0 or not all(math.isfinite(v) for v in values):
            return False
        sqr = (big * big_sqr - small * small_sqr) / (big - small)
        var = (small_sqr - big_sqr) / (1.0 / small - 1.0 / big)
        theta = SMOOTHING ** (big / self.base)
        self.sqr_sum = theta * self.sqr_sum + (1.0 - theta) * sqr
        self.sqr_weight = theta * self.sqr_weight + (1.0 - theta)
        self.var_sum = theta * self.var_sum + (1.0 - theta) * var
        self.var_weight = theta * self.var_weight + (1.0 - theta)
        self.observed += 1
        return True

    @property
    def known(self) -> bool:
        return self.sqr_weight > 0.0

    @property
    def grad_sqr(self) -> float:
        """The smoothed |G|² (0 before any estimate; never below 0)."""
        return max(self.sqr_sum / self.sqr_weight, 0.0) if self.known else 0.0

    @property
    def grad_var(self) -> float:
        """The smoothed tr(Σ), per sample (0 before any estimate; never below 0)."""
        return max(self.var_sum / self.var_weight, 0.0) if self.known else 0.0

    @property
    def gns(self) -> float | None:
        """tr(Σ)/|G|²: the batch around which larger batches start to pay less per sample;
        None before any estimate, or while |G|² is estimated at 0 (all noise)."""
        sqr = self.grad_sqr
        return self.grad_var / sqr if self.known and sqr > 0.0 else None

    def gain(self, batch: float) -> float:
        """How many base-batch steps a step of ``batch`` is worth (1 before any estimate)."""
        var, sqr = self.grad_var, self.grad_sqr
        below = var / batch + sqr
        return (var / self.base + sqr) / below if self.known and below > 0.0 else 1.0

    def efficiency(self, batch: float) -> float:
        """The statistical efficiency of ``batch``: progress per sample against the base
        batch's (1 at the base batch and before any estimate)."""
        return self.gain(batch) * self.base / batch

    def stepped(self, batch: float) -> float:
        """Count one step of ``batch`` in progress; returns its gain."""
        gain = self.gain(batch)
        self.progress += gain
        return gain

    def state_dict(self) -> dict[str, Any]:
        return asdict(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            if name in self.__dataclass_fields__ and name != "base":
                setattr(self, name, type(getattr(self, name))(value))


def small_batch(sizes: list[int]) -> tuple[int, float]:
    """The small batches that count (those holding samples) and their effective size, the
    harmonic mean: E|g_b|² averaged over them is |G|² + tr(Σ)·mean(1/n)."""
    held = [n for n in sizes if n > 0]
    return len(held), (len(held) / sum(1.0 / n for n in held) if held else 0.0)


def micro_cap(cap: int, batch: int, size: int) -> int:
    """The micro-batch cap of a goodput-mode step (``cap`` the job's, 0: none): a lone
    learner cuts its batch in two at least, so that it has two small batches to measure
    the noise scale from (as AdaptDL does)."""
    if size == 1 and batch >= 2:
        half = -(-batch // 2)
        return min(cap, half) if cap > 0 else half
    return cap
