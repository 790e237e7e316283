"""A goodput-mode job's measurements, as the live scheduler reads them, and its throughput
model fitted to them. Pure: no Django, Redis or torch (docs/architecture.md, "Goodput mode").

**What is measured.** Every train record of a goodput-mode job names the step's global
``batch``, its ``workers`` and ``samples_per_s`` (``batch`` over the iteration's seconds),
and, once the learners estimate it, ``gns``, the smoothed gradient noise scale
(``workers/learner/goodput.py``). :func:`measured` reads the latest records (newest first):
the noise scale and batch of the newest, and per ``(workers, batch)`` the median seconds of
an iteration, kept once :data:`MIN_ITERATIONS` were measured there (the first iteration of a
generation forms its group; the median ignores it).

**The fit** (:func:`fit`). The model of :class:`ThroughputModel` is linear in its
coefficients once the overlap is taken as none (gamma = 1): an iteration on ``n`` learners at
``B`` costs ``k·compute_s + k·micro·compute_per_sample_s + sync(n)`` with ``(micro, k - 1) =
split(n, B, max_micro)``, and ``sync(n)`` = ``sync_s + sync_per_learner_s·(n - 2)`` on one host
(``net_*`` across hosts, where a timing spans hosts). Least squares of the relative error
(each row divided by its seconds), coefficients not negative (every subset of the
coefficients is solved, the best non-negative kept, ties to the fewer). Only the coefficients
the timings determine are fitted, taken in the order ``compute_per_sample_s``, ``sync_s``,
``sync_per_learner_s``, ``compute_s``, ``net_sync_s``, ``net_sync_per_learner_s``: each is
kept while the design stays of full rank with no more coefficients than timings; the others
are 0 (``net_*``: None, the same as one host). So two timings of one batch on 1 and 2
learners give a cost per sample and an all-reduce; a third on 4 learners, the all-reduce's
growth (what a job grown at its base batch, as the fallback below runs it, measures first);
a fourth at another batch, the fixed cost of a micro-batch.

**Until then** (fewer than :data:`MIN_TIMINGS` timings, or none that costs anything) the fit
is None, and the policy's fallback holds: a job not measured yet is taken as linear in slots
at its base batch (:mod:`scheduler.policies.goodput`).

Both are pure functions of their input's contents, not its order (records are ordered by
their ``step``; timings are sorted before the fit).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from scheduler.policies.throughput import ThroughputModel, split

MIN_ITERATIONS = 3  # iterations at one (workers, batch) before its median counts
MIN_TIMINGS = 2  # timings before a model is fitted
_RANK_TOL = 1e-9


class Timing(NamedTuple):
    """The median seconds of an iteration on ``learners`` at global ``batch``, over
    ``iterations`` iterations."""

    learners: int
    batch: int
    seconds: float
    iterations: int = MIN_ITERATIONS


@dataclass(frozen=True)
class Measured:
    """What a goodput-mode job's latest records say: its noise scale (0: not estimated
    yet), the batch of its newest step (0: none) and its timings."""

    gns: float = 0.0
    batch: int = 0
    timings: tuple[Timing, ...] = ()


def measured(records: Iterable[Mapping[str, Any]]) -> Measured:
    """The noise scale, batch and timings of a job's train records (any order; the newest
    is the one of the highest ``step``). Records without a goodput batch, replays and
    malformed values are left out."""
    kept: list[tuple[int, int, int, Mapping[str, Any]]] = []  # step, workers, batch, record
    for record in records:
        step, batch, workers = (_whole(record.get(k)) for k in ("step", "batch", "workers"))
        if record.get("replay") or step is None or not batch or not workers:
            continue
        kept.append((step, workers, batch, record))
    kept.sort(key=lambda row: row[0], reverse=True)
    gns = next((v for *_, r in kept if (v := _positive(r.get("gns"))) is not None), 0.0)
    seconds: dict[tuple[int, int], list[float]] = {}
    for _, workers, batch, record in kept:
        rate = _positive(record.get("samples_per_s"))
        if rate is not None:
            seconds.setdefault((workers, batch), []).append(batch / rate)
    timings = tuple(
        Timing(n, b, statistics.median(values), len(values))
        for (n, b), values in sorted(seconds.items())
        if len(values) >= MIN_ITERATIONS
    )
    return Measured(gns, kept[0][2] if kept else 0, timings)


def _whole(value: Any) -> int | None:
    """``value`` if it is a whole number at least 0 (a JSON integer), else None."""
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    return int(value) if ok else None


def _positive(value: Any) -> float | None:
    """``value`` if it is a finite number above 0, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) and number > 0 else None


# The fit ----------------------------------------------------------------------------------

# The coefficients, in the order they are fitted as the timings allow.
_ORDER = ("per_sample", "sync", "sync_slope", "fixed", "net", "net_slope")


def _features(t: Timing, max_micro: int, per_host: int) -> dict[str, float]:
    micro, accum = split(t.learners, t.batch, max_micro)
    k = accum + 1
    row = {"per_sample": float(k * micro), "fixed": float(k)}
    if t.learners >= 2:
        across = per_host > 0 and t.learners > per_host
        fixed, slope = ("net", "net_slope") if across else ("sync", "sync_slope")
        row[fixed] = 1.0
        row[slope] = float(t.learners - 2)
    return row


def fit(timings: Iterable[Timing], max_micro: int = 0, per_host: int = 0) -> ThroughputModel | None:
    """The throughput model of ``timings`` (see the module), or None while they do not
    determine one. ``max_micro``: the job's micro-batch cap (0: none); ``per_host``: the
    slots of one host (0: every learner on one host)."""
    points = sorted(set(timings))
    points = [t for t in points if t.learners >= 1 and t.batch >= 1 and t.seconds > 0]
    if len({(t.learners, t.batch) for t in points}) < MIN_TIMINGS:
        return None
    rows = [_features(t, max_micro, per_host) for t in points]
    # Each row divided by its seconds: the relative error is what is minimised.
    matrix = {name: [row.get(name, 0.0) / t.seconds for row, t in zip(rows, points, strict=True)]
              for name in _ORDER}  # fmt: skip
    target = [1.0] * len(points)
    chosen: list[str] = []
    for name in _ORDER:
        if not any(matrix[name]) or len(chosen) >= len(points):
            continue
        if _solve([matrix[c] for c in [*chosen, name]], target) is not None:
            chosen.append(name)
    best: tuple[float, int, dict[str, float]] | None = None
    for size in range(1, len(chosen) + 1):
        for subset in itertools.combinations(chosen, size):
            coef = _solve([matrix[c] for c in subset], target)
            if coef is None or min(coef) < 0:
                continue
            error = sum(
                (sum(c * matrix[name][i] for c, name in zip(coef, subset, strict=True)) - 1) ** 2
                for i in range(len(points))
            )
            if best is None or error < best[0] * (1 - 1e-9):
                best = (error, size, dict(zip(subset, coef, strict=True)))
    if best is None:
        return None
    c = best[2]
    if c.get("fixed", 0.0) + c.get("per_sample", 0.0) <= 0:
        return None
    across = any("net" in name for name in chosen)
    return ThroughputModel(
        compute_s=c.get("fixed", 0.0),
        compute_per_sample_s=c.get("per_sample", 0.0),
        sync_s=c.get("sync", 0.0),
        sync_per_learner_s=c.get("sync_slope", 0.0),
        net_sync_s=c.get("net", 0.0) if across else None,
        net_sync_per_learner_s=c.get("net_slope", 0.0) if across else None,
    )


def _solve(columns: list[list[float]], target: list[float]) -> list[float] | None:
    """Least squares ``columns · x ≈ target`` by the normal equations (columns scaled to unit
    length first); None when the columns are not independent."""
    norms = [math.sqrt(sum(v * v for v in col)) for col in columns]
    if any(n <= 0 for n in norms):
        return None
    cols = [[v / n for v in col] for col, n in zip(columns, norms, strict=True)]
    size = len(cols)
    a = [[sum(x * y for x, y in zip(ci, cj, strict=True)) for cj in cols] for ci in cols]
    b = [sum(x * y for x, y in zip(ci, target, strict=True)) for ci in cols]
    for p in range(size):  # Gaussian elimination with partial pivoting
        pivot = max(range(p, size), key=lambda r: abs(a[r][p]))
        if abs(a[pivot][p]) < _RANK_TOL:
            return None
        a[p], a[pivot], b[p], b[pivot] = a[pivot], a[p], b[pivot], b[p]
        for r in range(p + 1, size):
            factor = a[r][p] / a[p][p]
            for q in range(p, size):
                a[r][q] -= factor * a[p][q]
            b[r] -= factor * b[p]
    x = [0.0] * size
    for p in reversed(range(size)):
        x[p] = (b[p] - sum(a[p][q] * x[q] for q in range(p + 1, size))) / a[p][p]
    return [v / n for v, n in zip(x, norms, strict=True)]
