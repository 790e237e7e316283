"""How much faster a job runs on n slots: Amdahl's law, fitted to the Pollux measurements.

Why Amdahl fitted this way. Our engine keeps the global batch B constant whatever the number of
workers (docs/architecture.md, "Effective batch is constant"), so n workers each compute B/n
samples and then all-reduce. From ``scalability/<app>.csv`` (step and sync times by replicas
and local batch, measured on 6-64 GPUs) we fit, per application:

1. compute time per step ``a + b·m`` for local batch m: least squares on step - sync time;
2. exposed all-reduce time ``g + d·log2(n)``: least squares on the sync time of each
   (nodes, replicas) configuration at its smallest local batch, where nothing hides it;
3. the step time at n workers for the application's median measured global batch B:
   ``T(n) = a + b·B/n + sync(n)``, with no all-reduce at n = 1 and no overlap assumed
   (conservative);
4. Amdahl's serial fraction s by least squares on ``T(n)/T(1) ≈ s + (1 - s)/n`` for
   n = 1..64, so speedup(n) = n / (1 + s·(n - 1)).

A single number per application keeps the simulator's inner loop to one division. Two of the
six applications (ncf, yolov3) barely compute per sample, so at a fixed global batch their
fitted step time does not fall with more workers (s ≥ 0.5): nobody would run them on several
GPUs, and they are left out. Each multi-GPU trace job is given one of the remaining
applications in turn (by its row in the trace).
"""

from __future__ import annotations

import csv
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

FIT_UP_TO = 64
# Applications whose fitted serial fraction reaches this do not scale at a fixed batch.
USABLE_BELOW = 0.5


@dataclass(frozen=True, slots=True)
class AppFit:
    app: str
    serial: float  # Amdahl's serial fraction s
    batch: int  # the global batch the fit is for


def speedup(serial: float, workers: int) -> float:
    """Amdahl: how many times faster than one slot a job runs on ``workers`` slots."""
    return workers / (1.0 + serial * (workers - 1))


def _line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares (intercept, slope) of ys on xs."""
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mean_x) ** 2 for x in xs)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / sxx
    return mean_y - slope * mean_x, slope


def fit_app(path: Path) -> AppFit:
    """Fit one ``scalability/<app>.csv`` (see the module docstring, steps 1-4)."""
    with path.open(newline="") as handle:
        rows = [{key: float(value) for key, value in row.items()} for row in csv.DictReader(handle)]
    a, b = _line([r["local_bsz"] for r in rows], [r["step_time"] - r["sync_time"] for r in rows])
    smallest: dict[tuple[float, float], dict[str, float]] = {}
    for row in sorted(rows, key=lambda r: -r["local_bsz"]):
        smallest[(row["num_nodes"], row["num_replicas"])] = row
    g, d = _line(
        [math.log2(r["num_replicas"]) for r in smallest.values()],
        [r["sync_time"] for r in smallest.values()],
    )
    batch = statistics.median(r["num_replicas"] * r["local_bsz"] for r in rows)

    def step(n: int) -> float:
        sync = max(0.0, g + d * math.log2(n)) if n > 1 else 0.0
        return a + b * batch / n + sync

    return AppFit(
        path.stem,
        _amdahl_fraction([step(n) / step(1) for n in range(1, FIT_UP_TO + 1)]),
        int(batch),
    )


def _amdahl_fraction(ratios: Sequence[float]) -> float:
    """s minimising Σ (ratio_n - 1/n - s·(1 - 1/n))² where ratios[n-1] = T(n)/T(1)."""
    pairs = [(1 - 1 / n, ratio - 1 / n) for n, ratio in enumerate(ratios, start=1)]
    return sum(x * y for x, y in pairs) / sum(x * x for x, _ in pairs)


def load_fits(directory: Path) -> list[AppFit]:
    """Every application's fit in ``directory``, by name."""
    fits = [fit_app(path) for path in sorted(directory.glob("*.csv"))]
    if not fits:
        raise ValueError(f"no scalability CSV files in {directory}")
    return fits


def usable(fits: Sequence[AppFit]) -> list[AppFit]:
    """The applications that do speed up at a fixed global batch."""
    return [fit for fit in fits if fit.serial < USABLE_BELOW]
