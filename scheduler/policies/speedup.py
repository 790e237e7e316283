"""Speedup curves: how much faster a job runs on n slots than on one. Pure arithmetic.

A curve is a tuple ``s`` with ``s[n - 1]`` the speedup on n slots (``s[0] == 1``). The
simulator takes it from measured throughput; the live scheduler from the samples/s a job
reported at each size it has run at (:func:`from_rates`). An empty curve means "unknown",
taken as linear: then nothing here changes what plain fair share would do.

Curves measured on real clusters are not concave: crossing a host boundary costs an
all-reduce over the network, so 5 slots can be slower than 4 while 8 are faster again.
Decisions therefore look along the curve's upper concave envelope: from n slots, the next
useful size is the m > n with the best average gain per added slot, ``(s(m) - s(n)) / (m - n)``.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable, Hashable, Iterable, Mapping
from functools import lru_cache
from typing import Any, TypeVar

K = TypeVar("K", bound=Hashable)

# A slot is "useful" to a job while it adds at least this much of one slot's throughput
# (on the envelope). Below it, the job's fair share stops there and the slot goes where it
# adds more; no job is ever held below its minimum, nor given more than its max.
USEFUL_GAIN = 0.3


def value(curve: tuple[float, ...], n: int) -> float:
    """s(n): linear when unknown, flat beyond the last known size."""
    if not curve:
        return float(n)
    if n <= 0:
        return 0.0
    return curve[min(n, len(curve)) - 1]


@lru_cache(maxsize=4096)
def steps(curve: tuple[float, ...], top: int) -> tuple[tuple[int, float], ...]:
    """For n = 0..top: (the next useful size m, the average gain per slot up to it), along
    the upper envelope of ``curve`` up to ``top`` slots; (top, 0.0) at ``top``."""
    table = []
    for n in range(top + 1):
        best, gain = top, 0.0
        base = value(curve, n)
        for m in range(n + 1, top + 1):
            g = (value(curve, m) - base) / (m - n)
            if g >= gain - 1e-12 or m == n + 1:
                best, gain = m, g
        table.append((best, gain))
    return tuple(table)


@lru_cache(maxsize=4096)
def useful(curve: tuple[float, ...], low: int, top: int) -> int:
    """The most slots (from ``low`` up to ``top``) reached while each step along the
    envelope adds at least :data:`USEFUL_GAIN` of a slot per slot."""
    if not curve:
        return top
    table = steps(curve, top)
    n = low
    while n < top and table[n][1] >= USEFUL_GAIN:
        n = table[n][0]
    return n


def median_rates(records: Iterable[dict[str, Any]],
                 key: Callable[[dict[str, Any]], K | None]) -> dict[K, float]:  # fmt: skip
    """``key(record)`` -> the median samples/s of the train ``records`` with that key (None:
    the record is left out), records without a positive rate left out."""
    seen: dict[K, list[float]] = {}
    for values in records:
        rate, at = values.get("samples_per_s"), key(values)
        if at is not None and isinstance(rate, (int, float)) and rate > 0:
            seen.setdefault(at, []).append(float(rate))
    return {at: statistics.median(rates) for at, rates in seen.items()}


def from_rates(rates: Mapping[int, float], top: int) -> tuple[float, ...]:
    """A curve up to ``top`` slots from observed throughput (samples/s) by slot count.

    Sizes between two observed ones are interpolated linearly; sizes above the largest keep
    its per-slot efficiency (optimistic, so a job is tried larger); below the smallest, the
    job is taken to scale linearly down to one slot. Empty when nothing was observed.
    """
    seen = sorted((n, r) for n, r in rates.items() if n >= 1 and r > 0)
    if not seen or top < 1:
        return ()
    first_n, first_r = seen[0]
    one = first_r / first_n  # samples/s on one slot, assuming linear below the first size
    if first_n == 1:
        one = first_r
    curve = []
    for n in range(1, top + 1):
        if n <= first_n:
            rate = first_r * n / first_n
        elif n >= seen[-1][0]:
            last_n, last_r = seen[-1]
            rate = last_r * n / last_n
        else:
            for (n0, r0), (n1, r1) in itertools.pairwise(seen):
                if n0 <= n <= n1:
                    rate = r0 + (r1 - r0) * (n - n0) / (n1 - n0)
                    break
        curve.append(rate / one)
    return tuple(curve)
