"""Goodput mode's statistics: the gradient noise scale, measured as training goes, with no
extra pass, and what it says of a batch (docs/architecture.md, "Goodput mode").

Each measuring step gives two views of the same gradient: the mean gradient of a *small*
batch (each learner's local batch before the all-reduce) and of the *big* one (the global
batch, after it). A lone learner has no peer to compare with: where its step is cut into
micro-batches (the job's cap) those are its small batches; else its small batches are two
consecutive steps' gradients and the big one their mean (AdaptDL's *difference*
estimator, biased by the one update between them: negligible at the learning rates that
train). It keeps the measuring step's gradient and takes the estimate in the step
after, with no pass of its own: cutting a lone step in two to measure it cost a whole extra
pass at half the batch. Their squared norms
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
steps (the sum of the gains): a schedule that reads it means the same at any batch.

:class:`GoodputMode` is a learner's side of it: the global batch it trains at (adopted
from each generation, within the job's range), what each step measured (``observe``, and
alone ``observe_pair``), which steps measure, and the statistics a train record adds. The step
measures the squared norms (overlap.py) and hands their values here. Pure Python: no
torch, no Redis.
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass
from typing import Any

from workers.learner.partition import slice_bounds
from workers.learner.spec import JobSpec

log = logging.getLogger("edt.learner")

SMOOTHING = 0.999  # AdaptDL's: the moving averages' decay per base batch of samples
# The noise scale is measured on every MEASURE_EVERY-th step (the first included), the same
# steps at any size, so that a resize changes no statistic (a lone learner's estimate comes
# one step later, from that step and the next). Measuring costs norms (and, alone, a copy of
# the gradient), so not every step pays them (bench/results/goodput-step.md).
MEASURE_EVERY = 4


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

    def observe(
        self,
        small_sqr: float,
        small: float,
        big_sqr: float,
        big: float,
        steps: int = 1,
        batch: float = 0.0,
    ) -> bool:
        """One measurement's two squared norms: ``small_sqr`` the mean of |g_b|² over the
        small batches (their effective size ``small``: the harmonic mean of theirs),
        ``big_sqr`` the big batch's |g_B|² (size ``big``); the averages decay by the
        ``steps`` of the global ``batch`` (``big`` unless given: two steps' mean is a big
        batch of two) since the last measurement. False, and nothing kept, where they give
        no estimate (one small batch only, a gradient not finite)."""
        values = (small_sqr, small, big_sqr, big)
        if not big > small > 0 or not all(math.isfinite(v) for v in values):
            return False
        sqr = (big * big_sqr - small * small_sqr) / (big - small)
        var = (small_sqr - big_sqr) / (1.0 / small - 1.0 / big)
        theta = SMOOTHING ** (steps * (batch or big) / self.base)
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


Counters = dict[str, int]  # a learner's: epoch, iteration, step, and here sample and batch


class GoodputMode:
    """A goodput-mode learner's batch and statistics (see the module): the one writer of
    its global batch, of the ``sample`` and ``batch`` counters and of the step's gain."""

    def __init__(self, spec: JobSpec, samples: int, slot: str = "") -> None:
        self.spec, self.samples, self.slot = spec, samples, slot
        self.noise = NoiseScale(base=spec.batch_size)
        self.batch = spec.batch_size  # the global batch of this iteration
        self.gain = 1.0  # the learning rate's factor in the last step
        self.micro_sqr: list[tuple[float, int]] = []  # alone: this step's micro-batches' norms
        self.step = 0  # this step's index: the steps taken before it
        self.measuring = True  # this step measures the noise scale (``begin``)
        self.pairing = False  # alone: this step's gradient pairs with the measuring one's

    def begin(self, counters: Counters) -> None:
        """A step begins (``counters``: the steps taken before it): whether it measures the
        noise scale (``MEASURE_EVERY``), or, alone, completes the measuring step's pair."""
        self.step = step = counters["step"]
        self.measuring = step % MEASURE_EVERY == 0
        self.pairing = step % MEASURE_EVERY == 1
        self.micro_sqr.clear()

    def start(self, counters: Counters) -> None:
        """A new run's counters: no sample done, the base batch."""
        counters.update(sample=0, batch=self.batch)

    def load(self, state: dict[str, Any], counters: Counters) -> None:
        """The noise scale's statistics and progress, and the batch, from a state received
        or a checkpoint (one of a fixed-batch run before: the spec's batch, no statistics);
        ``counters`` are the state's, loaded."""
        if "goodput" in state:
            self.noise.load_state_dict(state["goodput"])
        counters.setdefault("sample", counters["iteration"] * self.spec.batch_size)
        self.batch = self.fit(counters.get("batch", self.spec.batch_size))
        counters["batch"] = self.batch

    def fit(self, batch: int) -> int:
        """``batch`` within the job's range and its training set."""
        spec = self.spec
        return max(1, min(max(batch, spec.batch_min), spec.batch_max, self.samples))

    def take_batch(self, gen: int, asked: int, counters: Counters) -> None:
        """The global batch generation ``gen`` names (``asked``; 0: none named)."""
        if asked > 0:
            self.adopt_batch(gen, asked, counters)
        log.info("%s: generation %d trains at a global batch of %d; progress %.9g base-batch "
                 "steps, %d noise estimates", self.slot, gen, self.batch, self.noise.progress,
                 self.noise.observed)  # fmt: skip

    def adopt_batch(self, gen: int, asked: int, counters: Counters) -> None:
        batch = self.fit(asked)
        if batch != asked:
            log.warning("%s: generation %d asks for a global batch of %d, outside %d..%d "
                        "and the %d samples: training at %d", self.slot, gen, asked,
                        self.spec.batch_min, self.spec.batch_max, self.samples,
                        batch)  # fmt: skip
        if batch != self.batch:
            log.info("%s: global batch %d -> %d at step %d", self.slot, self.batch, batch,
                     counters["step"])  # fmt: skip
        self.batch = counters["batch"] = batch

    def observe(self, size: int, local_sqr: float, big_sqr: float, unscale: float) -> None:
        """This step's small- and big-batch squared norms into the noise scale: the ranks'
        local batches (``local_sqr``: the sum of theirs, all-reduced) against the global
        one's (``big_sqr``), or with one learner its micro-batches (``micro_sqr``); both
        times ``unscale`` (a loss scaler's)."""
        B = self.batch
        big_sqr = big_sqr * unscale
        if size > 1:
            bounds = (slice_bounds(B, size, r) for r in range(size))
            count, small = small_batch([hi - lo for lo, hi in bounds])
            small_sqr = local_sqr / count * unscale if count else math.nan
        else:
            count, small = small_batch([n for _, n in self.micro_sqr])
            total = sum(sqr for sqr, _ in self.micro_sqr)
            small_sqr = total / count * unscale if count else math.nan
        self.noise.observe(small_sqr, small, big_sqr, B, MEASURE_EVERY)

    def observe_pair(self, kept_sqr: float, sqr: float, mean_sqr: float) -> None:
        """Alone, one micro-batch a step: the measuring step's gradient (``kept_sqr``, its
        squared norm) and this step's (``sqr``) as two small batches of the global batch,
        their mean (``mean_sqr``) as the big one of twice it; all unscaled."""
        B = self.batch
        small_sqr = (kept_sqr + sqr) / 2.0
        self.noise.observe(small_sqr, B, mean_sqr, 2 * B, MEASURE_EVERY, batch=B)

    def take_gain(self) -> float:
        """This step's gain at its batch (AdaScale): its learning rate's factor."""
        self.gain = self.noise.gain(self.batch)
        return self.gain

    def stepped(self) -> None:
        """A step taken: its gain counted in progress."""
        self.noise.stepped(self.batch)

    def advance(self, counters: Counters) -> None:
        """The step's samples done in the epoch."""
        counters["sample"] += self.batch

    def epoch_over(self, counters: Counters) -> bool:
        """No whole batch left in the epoch."""
        return counters["sample"] + self.batch > self.samples

    def steps_estimate(self, counters: Counters) -> int:
        """The steps of the whole run at the current batch from here."""
        c, n, B = counters, self.samples, self.batch
        left = (n - c["sample"]) // B + (self.spec.epochs - c["epoch"] - 1) * (n // B)
        total = c["step"] + max(left, 0)
        return min(total, self.spec.max_steps) if self.spec.max_steps > 0 else total

    def record(self, lr: float, counters: Counters) -> dict[str, Any]:
        """A step's statistics (docs/architecture.md, "Goodput mode"): the batch it trained
        at, the learning rate it used (``lr``, the schedule's, times its gain), the
        smoothed noise scale and the estimates behind it, the batch's statistical
        efficiency and gain, the progress."""
        noise, B = self.noise, self.batch
        out = {
            "batch": B, "base_batch": noise.base, "lr": lr * self.gain, "gain": self.gain,
            "efficiency": noise.efficiency(B), "progress": noise.progress,
            "grad_sqr": noise.grad_sqr, "grad_var": noise.grad_var,
            "total_steps": self.steps_estimate(counters),
        }  # fmt: skip
        gns = noise.gns
        if gns is not None and math.isfinite(gns):
            out["gns"] = gns
        return out
