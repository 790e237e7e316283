"""Goodput arithmetic: how fast a job trains on n learners at a global batch B. Pure.

A job in goodput mode (docs/architecture.md, "Scheduling contract") may train at any global
batch in its range; the scheduler picks the batch with its learners. What it maximises is
*goodput*: throughput times statistical efficiency, after Pollux (Qiao et al., OSDI'21).

**Throughput.** One iteration on ``n`` learners at global batch ``B``: each learner computes
``ceil(B/n)`` samples (the engine cuts B into n near-equal slices; the largest sets the pace),
in ``accum + 1`` micro-batches of at most ``max_micro`` samples whose gradients accumulate
(docs/architecture.md, "Effective batch is constant"), then the learners all-reduce::

    t_iter(n, B) = (accum + 1) · t_compute(micro) + t_sync(n)
    t_compute(m) = compute_s + compute_per_sample_s · max(m, min_micro_batch)
    t_sync(n)    = 0 on one learner; on one host sync_s + sync_per_learner_s · (n - 2);
                   across hosts net_sync_s + net_sync_per_learner_s · (n - 2)

(Pollux's model, its fitted coefficients named for what they are.) Below
``min_micro_batch`` a micro-batch costs as much as one of that size: the device is not kept
busy. With ``overlap`` gamma > 1 the last micro-batch's backward pass hides part of the
all-reduce, as Pollux models it: ``accum · t_compute + (t_compute^gamma +
t_sync^gamma)^(1/gamma)`` (gamma = 1: no overlap, the sum above).

**Statistical efficiency.** With the job's gradient noise scale ``gns`` (in samples; 0 when
unknown) and ``base`` the batch its learning rate was given for, a sample at batch B is worth
``E(B) = (gns + base) / (gns + B)`` samples at the base batch (1 at B = base; a large noise
scale keeps large batches efficient). Unknown noise scale: ``E(B) = base / B``, so a larger
batch buys nothing and the job stays at its smallest batch.

**Goodput** = ``B / t_iter(n, B) · E(B)``: base-batch-equivalent samples per second.

**The best batch.** A batch whose largest slice is m samples costs what ``n·m`` costs and
trains on more, so the candidates are multiples of n (and the range's ends). With no
overlap, for a fixed number of micro-batches (``accum``) goodput in B has one maximum, at
``B* = sqrt(gns · n · T0 / compute_per_sample_s)`` with ``T0 = (accum + 1) · compute_s +
t_sync(n)`` (the log-derivative ``1/B - c/(T0 + cB) - 1/(gns + B)``, ``c =
compute_per_sample_s / n``, vanishes there and nowhere else), rising below
``min_micro_batch``; over accumulation counts, full micro-batches peak near ``k = accum + 1
= sqrt(t_sync · gns / (n · max_micro · t_compute(max_micro)))``. :func:`best_batch` checks
the counts around both and at the ends, in each the multiples of ``n·k`` around B* and the
interval's ends, and keeps the best exactly evaluated (ties to the smaller batch): the best
of every batch (``tests/test_goodput_policy.py`` checks it against all of them). With
overlap there is no closed form: a search over the counts and, in each, over micro-batch
sizes (a grid, then a ternary search), within 1 % of the best in the tests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

_EPS = 1e-9
_GRID = 16  # grid points per accumulation count where compute and all-reduce overlap


@dataclass(frozen=True, slots=True)
class ThroughputModel:
    """A job's fitted time per iteration (see the module): seconds, by learners and local
    batch. ``net_*`` None: across hosts costs what one host does."""

    compute_s: float  # fixed seconds per micro-batch (forward + backward)
    compute_per_sample_s: float  # seconds per sample of a micro-batch
    sync_s: float = 0.0  # all-reduce, every learner on one host
    sync_per_learner_s: float = 0.0  # its growth per learner beyond two
    net_sync_s: float | None = None  # all-reduce across hosts
    net_sync_per_learner_s: float | None = None
    min_micro_batch: int = 1  # a smaller micro-batch costs as much as one this size
    overlap: float = 1.0  # gamma: the last micro-batch and the all-reduce overlap (1: not at all)

    def __post_init__(self) -> None:
        values = [self.compute_s, self.compute_per_sample_s, self.sync_s, self.sync_per_learner_s]
        values += [v for v in (self.net_sync_s, self.net_sync_per_learner_s) if v is not None]
        if any(not math.isfinite(v) or v < 0 for v in values):
            raise ValueError("throughput model: coefficients must be finite and not negative")
        if self.compute_s + self.compute_per_sample_s <= 0:
            raise ValueError("throughput model: an iteration must take some time")
        if self.min_micro_batch < 1:
            raise ValueError("throughput model: min_micro_batch must be at least 1")
        if not 1 <= self.overlap <= 10:
            raise ValueError("throughput model: overlap must be in [1, 10]")

    def compute(self, micro: int) -> float:
        """Seconds for one micro-batch of ``micro`` samples on one learner."""
        return self.compute_s + self.compute_per_sample_s * max(micro, self.min_micro_batch)

    def sync(self, learners: int, per_host: int = 0) -> float:
        """Seconds of all-reduce per iteration on ``learners`` packed on hosts of
        ``per_host`` slots (0: hosts unknown, taken as spread)."""
        if learners <= 1:
            return 0.0
        extra = learners - 2
        if per_host and learners <= per_host:
            return self.sync_s + self.sync_per_learner_s * extra
        fixed = self.sync_s if self.net_sync_s is None else self.net_sync_s
        slope = (
            self.sync_per_learner_s
            if self.net_sync_per_learner_s is None
            else self.net_sync_per_learner_s
        )
        return fixed + slope * extra

    def iteration(self, learners: int, batch: int, max_micro: int = 0, per_host: int = 0) -> float:
        """Seconds per iteration at global ``batch`` on ``learners`` (see the module)."""
        micro, accum = split(learners, batch, max_micro)
        compute, sync = self.compute(micro), self.sync(learners, per_host)
        if self.overlap == 1 or not sync:
            return (accum + 1) * compute + sync
        gamma = self.overlap
        return accum * compute + float((compute**gamma + sync**gamma) ** (1 / gamma))


def split(learners: int, batch: int, max_micro: int = 0) -> tuple[int, int]:
    """(micro-batch, accumulation steps) of each learner at global ``batch``: the largest
    slice ``ceil(batch / learners)`` in ``accum + 1`` near-equal micro-batches of at most
    ``max_micro`` samples (0: no cap)."""
    local = -(-batch // learners)
    accum = 0 if max_micro <= 0 else -(-local // max_micro) - 1
    return -(-local // (accum + 1)), accum


def efficiency(batch: float, gns: float, base: int) -> float:
    """Statistical efficiency E(batch) relative to ``base`` (see the module)."""
    return (gns + base) / (gns + batch)


def goodput(
    model: ThroughputModel,
    learners: int,
    batch: int,
    gns: float,
    base: int,
    max_micro: int = 0,
    per_host: int = 0,
) -> float:
    """Base-batch-equivalent samples per second on ``learners`` at global ``batch``."""
    seconds = model.iteration(learners, batch, max_micro, per_host)
    return batch / seconds * efficiency(batch, gns, base)


def best_batch(
    model: ThroughputModel,
    learners: int,
    low: int,
    high: int,
    gns: float,
    base: int,
    max_micro: int = 0,
    per_host: int = 0,
) -> tuple[int, float]:
    """(batch, goodput) of the best global batch in ``[max(low, learners), high]`` on
    ``learners`` (ties: the smaller batch). Requires ``learners <= high``.

    A batch whose largest slice is ``m`` samples costs what ``learners·m`` costs, which
    trains on more samples, so only those (and ``low`` and ``high``) are candidates; with
    ``a`` accumulations a micro-batch of ``u`` samples makes ``m = (a + 1)·u``. For each
    ``a`` near the one whose stationary batch fits its interval (and the first and last),
    the two multiples of ``learners·(a + 1)`` around B* and the interval's ends."""
    low = max(low, learners)
    if low > high:
        raise ValueError(f"no batch in [{low}, {high}] gives {learners} learners a sample each")
    candidates = {low, high}
    sync = model.sync(learners, per_host)
    beta, alpha = model.compute_per_sample_s, model.compute_s
    floor_micro = model.min_micro_batch
    if max_micro > 0:
        first, last = _accum(learners, low, max_micro), _accum(learners, high, max_micro)
        counts = {first, last}
        middles = [
            _fitting_accum(model, learners, gns, sync, max_micro),
            _full_accum(model, learners, gns, sync, max_micro),
        ]
        if model.overlap != 1:  # the closed forms assume no overlap: search
            middles.append(
                _search_accum(model, learners, first, last, high, gns, base, max_micro, per_host)
            )
        for middle in middles:
            middle = min(max(middle, first), last)
            counts.update(range(max(first, middle - 1), min(last, middle + 1) + 1))
    else:
        counts = {0}
    for accum in counts:
        step = learners * (accum + 1)  # the batches of full slices: multiples of this
        # Micro-batches u of this count: a·max_micro < (a + 1)·u <= (a + 1)·max_micro.
        u_low = -(-low // step)
        u_high = high // step
        if max_micro > 0:
            u_low = max(u_low, accum * max_micro // (accum + 1) + 1)
            u_high = min(u_high, max_micro)
        if u_low > u_high:
            continue
        t0 = (accum + 1) * alpha + sync
        peak = math.inf if beta <= 0 else math.sqrt(gns * learners * t0 / beta) / step
        peak = max(peak, floor_micro)
        for u in (u_low, u_high, math.floor(min(peak, u_high)), math.ceil(min(peak, u_high))):
            candidates.add(min(u_high, max(u_low, u)) * step)
        if model.overlap != 1 and u_high > u_low:  # no closed form: a fine geometric grid
            ratio = u_high / u_low
            candidates.update(round(u_low * ratio ** (i / _GRID)) * step for i in range(1, _GRID))
    best, rate = low, -1.0
    for batch in sorted(candidates):
        value = goodput(model, learners, batch, gns, base, max_micro, per_host)
        if value > rate * (1 + _EPS):
            best, rate = batch, value
    return best, rate


def _search_accum(
    model: ThroughputModel,
    learners: int,
    first: int,
    last: int,
    high: int,
    gns: float,
    base: int,
    max_micro: int,
    per_host: int,
) -> int:
    """The accumulation count of the best batch of full micro-batches, by a ternary search
    over the counts (where no closed form holds: compute and all-reduce overlap)."""

    def value(accum: int) -> float:
        batch = min(high, learners * (accum + 1) * max_micro)
        return goodput(model, learners, batch, gns, base, max_micro, per_host)

    left, right = first, last
    while right - left > 2:
        third = (right - left) // 3
        if value(left + third) < value(right - third):
            left += third
        else:
            right -= third
    return max(range(left, right + 1), key=value)


def _accum(learners: int, batch: int, max_micro: int) -> int:
    return split(learners, batch, max_micro)[1]


def _full_accum(
    model: ThroughputModel, learners: int, gns: float, sync: float, max_micro: int
) -> int:
    """The accumulation count of the best batch of full micro-batches: with ``k = a + 1``
    and ``c = t_compute(max_micro)``, goodput ``learners·k·max_micro / (k·c + sync) ·
    E(learners·k·max_micro)`` peaks at ``k = sqrt(sync·gns / (learners·max_micro·c))``."""
    if gns <= 0 or sync <= 0:
        return 0
    k = math.sqrt(sync * gns / (learners * max_micro * model.compute(max_micro)))
    return max(0, round(k) - 1)


def _fitting_accum(
    model: ThroughputModel, learners: int, gns: float, sync: float, max_micro: int
) -> int:
    """The smallest accumulation count ``a`` whose stationary batch B*(a) fits in its
    interval, ``B*(a) <= learners·(a + 1)·max_micro``: with ``k = a + 1``,
    ``gns·(k·compute_s + sync) <= learners·k²·max_micro²·compute_per_sample_s``."""
    beta = model.compute_per_sample_s
    if gns <= 0:
        return 0
    if beta <= 0:
        return 1 << 30
    q = learners * max_micro * max_micro * beta  # q·k² - gns·compute_s·k - gns·sync >= 0
    b = gns * model.compute_s
    k = (b + math.sqrt(b * b + 4 * q * gns * sync)) / (2 * q)
    return max(0, math.ceil(k - _EPS) - 1)
