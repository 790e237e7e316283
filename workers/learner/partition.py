"""Deterministic global batches (docs/architecture.md, "Effective batch is constant"; a
goodput-mode job's batch moves, "Goodput mode", and its batches start where the samples
done so far end).

Iteration ``t`` of epoch ``e`` trains on ``perm(seed, e)[t*B:(t+1)*B]``, split into ``N``
near-equal contiguous slices, one per rank; a slice larger than ``max_micro`` is cut into
micro-batches whose gradients accumulate. Pure functions: no torch, no Redis.
"""

from __future__ import annotations

import random


def iterations_per_epoch(samples: int, batch: int) -> int:
    """Whole global batches per epoch (a last partial batch is dropped: B stays constant)."""
    if batch < 1:
        raise ValueError(f"batch size must be at least 1, not {batch}")
    if samples < batch:
        raise ValueError(f"the training set has {samples} samples, fewer than batch size {batch}")
    return samples // batch


def permutation(samples: int, seed: int, epoch: int) -> list[int]:
    """The epoch's sample order: the same on every rank, whatever the job's size."""
    order = list(range(samples))
    random.Random(seed * 1_000_003 + epoch).shuffle(order)
    return order


def slice_bounds(batch: int, size: int, rank: int) -> tuple[int, int]:
    """[lo, hi) of rank's contiguous share of a global batch; sizes differ by at most one."""
    if not 0 <= rank < size:
        raise ValueError(f"rank {rank} is outside a group of {size}")
    base, extra = divmod(batch, size)
    lo = rank * base + min(rank, extra)
    return lo, lo + base + (1 if rank < extra else 0)


def micro_batches(lo: int, hi: int, max_micro: int) -> list[tuple[int, int]]:
    """Cut [lo, hi) into the fewest near-equal pieces of at most ``max_micro`` samples."""
    count = hi - lo
    if count <= 0:
        return []
    pieces = -(-count // max_micro) if max_micro > 0 else 1
    return [slice_bounds(count, pieces, i) for i in range(pieces)] if pieces > 1 else [(0, count)]


def rank_indices(order: list[int], iteration: int, batch: int, size: int, rank: int) -> list[int]:
    """The sample indices rank trains on at ``iteration``."""
    return rank_slice(order, iteration * batch, batch, size, rank)


def rank_slice(order: list[int], start: int, batch: int, size: int, rank: int) -> list[int]:
    """The sample indices rank trains on in the global batch of ``batch`` samples that
    starts ``start`` samples into the epoch's order (goodput mode, whose batch may change
    within an epoch, counts the samples done)."""
    lo, hi = slice_bounds(batch, size, rank)
    return order[start + lo : start + hi]
