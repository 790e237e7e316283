"""A goodput-mode job's measurements and the throughput model fitted to them
(scheduler/policies/throughput_fit.py): tables, each case also run with its input in
reverse order. Pure code: no database, no Redis."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.policies.throughput import ThroughputModel
from scheduler.policies.throughput_fit import MIN_ITERATIONS, Measured, Timing, fit, measured
from tests.harness.policies import ORDERS


def timed(model: ThroughputModel, points: list[tuple[int, int]], max_micro: int = 0,
          per_host: int = 0) -> list[Timing]:  # fmt: skip
    return [Timing(n, b, model.iteration(n, b, max_micro, per_host)) for n, b in points]


def coefficients(model: ThroughputModel | None) -> tuple[float | None, ...] | None:
    if model is None:
        return None
    return (model.compute_s, model.compute_per_sample_s, model.sync_s, model.sync_per_learner_s,
            model.net_sync_s, model.net_sync_per_learner_s)  # fmt: skip


ONE_HOST = ThroughputModel(0.01, 0.0005, 0.05, 0.01)
HOSTS = ThroughputModel(0.01, 0.0005, 0.02, 0.005, 0.2, 0.05)

# name, timings, max_micro, per_host, the coefficients fitted (None: no model yet)
FITS: list[tuple[str, list[Timing], int, int, tuple[float | None, ...] | None]] = [
    ("nothing measured", [], 0, 0, None),
    ("one timing is not enough", timed(ONE_HOST, [(1, 64)]), 0, 0, None),
    (
        "one timing measured twice is still one",
        [Timing(2, 64, 0.1, 3), Timing(2, 64, 0.1, 5)],
        0,
        0,
        None,
    ),
    (
        # 1 and 2 learners at one batch: a cost per sample and an all-reduce, exactly
        "one batch on 1 and 2 learners: per sample and all-reduce",
        [Timing(1, 100, 0.1), Timing(2, 100, 0.08)],
        0,
        0,
        (0.0, 0.001, 0.03, 0.0, None, None),
    ),
    (
        "1, 2 and 4 learners at one batch add the all-reduce's growth",
        [Timing(1, 100, 0.1), Timing(2, 100, 0.08), Timing(4, 100, 0.065)],
        0,
        0,
        (0.0, 0.001, 0.03, 0.005, None, None),
    ),
    (
        "four timings determine the model on one host",
        timed(ONE_HOST, [(1, 64), (2, 64), (4, 64), (2, 256)]),
        0,
        0,
        coefficients(ONE_HOST),
    ),
    (
        "with micro-batches accumulating",
        timed(ONE_HOST, [(1, 64), (2, 64), (4, 64), (2, 256), (4, 1024)], 64),
        64,
        0,
        coefficients(ONE_HOST),
    ),
    (
        "across hosts of 4 slots, the network's own all-reduce",
        timed(HOSTS, [(1, 64), (2, 64), (2, 256), (4, 64), (3, 128), (6, 64), (8, 64)], 0, 4),
        0,
        4,
        coefficients(HOSTS),
    ),
    (
        # Two learners faster than twice one: the exact fit's all-reduce is below 0, so
        # none; what is left is a cost per sample b of the least relative error,
        # 2·(1000·b - 1)² + (1250·b - 1)², at b = 3250 / 3562500.
        "no coefficient below zero",
        [Timing(1, 100, 0.1), Timing(2, 100, 0.04), Timing(1, 200, 0.2)],
        0,
        0,
        (0.0, 3250 / 3562500, 0.0, 0.0, None, None),
    ),
]


@ORDERS
@pytest.mark.parametrize(("name", "timings", "micro", "per_host", "expected"), FITS,
                         ids=[row[0] for row in FITS])  # fmt: skip
def test_the_fit(name: str, timings: list[Timing], micro: int, per_host: int,
                 expected: tuple[float | None, ...] | None, reverse: bool) -> None:  # fmt: skip
    got = coefficients(fit(timings[::-1] if reverse else timings, micro, per_host))
    if expected is None:
        assert got is None
        return
    assert got is not None
    assert got == pytest.approx(expected, abs=1e-9), name


def test_a_fitted_model_predicts_its_timings() -> None:
    """Noisy timings of a known model: the fit predicts each within the noise."""
    points = [(1, 64), (1, 256), (2, 64), (2, 256), (4, 64), (4, 512), (3, 128)]
    noisy = [Timing(n, b, ONE_HOST.iteration(n, b) * (1.03 if i % 2 else 0.97))
             for i, (n, b) in enumerate(points)]  # fmt: skip
    model = fit(noisy)
    assert model is not None
    for n, b in points:
        assert model.iteration(n, b) == pytest.approx(ONE_HOST.iteration(n, b), rel=0.05)


def record(step: int, workers: int, batch: int, seconds: float, **more: Any) -> dict[str, Any]:
    return {"step": step, "workers": workers, "batch": batch,
            "samples_per_s": batch / seconds, **more}  # fmt: skip


# name, records, what they say
MEASURES: list[tuple[str, list[dict[str, Any]], Measured]] = [
    ("no records", [], Measured()),
    (
        "a fixed-batch job's records name no batch",
        [{"step": i, "workers": 2, "samples_per_s": 100.0} for i in range(5)],
        Measured(),
    ),
    (
        "the median of each (workers, batch), kept from MIN_ITERATIONS on",
        [
            record(1, 1, 64, 0.5, gns=10.0),  # the first of its generation: slow
            record(2, 1, 64, 0.1, gns=20.0),
            record(3, 1, 64, 0.12, gns=30.0),
            record(4, 2, 128, 0.2, gns=40.0),
            record(5, 2, 128, 0.2, gns=50.0),
        ],
        Measured(50.0, 128, (Timing(1, 64, 0.12, 3),)),
    ),
    (
        "the newest noise scale by step, replays and bad values left out",
        [
            record(7, 2, 256, 0.3, gns=90.0),
            record(8, 2, 256, 0.3),  # no estimate in the newest: the last one stands
            record(6, 2, 256, 0.3, gns=80.0),
            record(9, 4, 512, 0.1, gns=1.0, replay=True),
            {"step": 10, "workers": 4, "batch": 512, "samples_per_s": "fast", "gns": "x"},
            {"step": 11, "workers": True, "batch": 512, "samples_per_s": 1.0},
        ],
        Measured(90.0, 512, (Timing(2, 256, 0.3, 3),)),
    ),
]


@ORDERS
@pytest.mark.parametrize(("name", "records", "expected"), MEASURES,
                         ids=[row[0] for row in MEASURES])  # fmt: skip
def test_the_records_read(name: str, records: list[dict[str, Any]], expected: Measured,
                          reverse: bool) -> None:  # fmt: skip
    got = measured(records[::-1] if reverse else records)
    assert got.gns == expected.gns and got.batch == expected.batch, name
    assert [(t.learners, t.batch, t.iterations) for t in got.timings] == [
        (t.learners, t.batch, t.iterations) for t in expected.timings
    ]
    for seen, want in zip(got.timings, expected.timings, strict=True):
        assert seen.seconds == pytest.approx(want.seconds)
    assert MIN_ITERATIONS == 3
