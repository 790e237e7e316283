"""A job's observed speedup curve, from the samples/s its learners report at each size."""

from __future__ import annotations

from typing import Any

import pytest

from edtweb.training.live_adapter import observed_rates
from edtweb.training.models import Job, Metric
from scheduler.live.speedups import Curves

pytestmark = pytest.mark.django_db


def train(job: Job, step: int, workers: int, rate: float) -> Metric:
    values = {"workers": workers, "samples_per_s": rate, "loss": 1.0}
    return Metric(job=job, kind="train", step=step, epoch=0, time=float(step), values=values)


def test_the_median_rate_at_each_size_gives_the_curve(alice: Any) -> None:
    job = Job.objects.create(owner=alice, name="a", model_path="m.py", data_path="d", max_workers=4)
    other = Job.objects.create(owner=alice, name="b", model_path="m.py", data_path="d")
    rows = [train(job, s, 1, r) for s, r in enumerate([90.0, 100.0, 110.0])]
    rows += [train(job, 3 + s, 2, r) for s, r in enumerate([150.0, 170.0, 999.0, 160.0, 1.0])]
    rows += [train(other, 0, 4, 400.0)]
    Metric.objects.bulk_create(rows)
    assert observed_rates(job.pk) == {1: 100.0, 2: 160.0}
    curves = Curves(observed_rates, refresh=3600)
    assert curves.curve(job.pk, 4) == pytest.approx((1.0, 1.6, 2.4, 3.2))
    assert curves.curve(other.pk, 1) == (1.0,)  # seen at 4 only: linear below it
    Metric.objects.bulk_create([train(job, 20, 4, 200.0)])
    assert curves.curve(job.pk, 4) == pytest.approx((1.0, 1.6, 2.4, 3.2))  # not re-read yet
    assert Curves(observed_rates, refresh=0).curve(job.pk, 4) == pytest.approx((1.0, 1.6, 1.8, 2.0))


def test_a_job_with_no_iterations_yet_has_no_curve(alice: Any) -> None:
    job = Job.objects.create(owner=alice, name="a", model_path="m.py", data_path="d", max_workers=4)
    assert Curves(observed_rates).curve(job.pk, 4) == ()
