"""The malformed parameters once answered with a 500, each now a 4xx naming what to fix
(tests/test_fuzz_routes.py tries every route with such values)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from edtweb.training.models import Job
from tests.harness.api import token_client

pytestmark = pytest.mark.django_db
BIG = 2**70


@pytest.fixture
def job(alice: Any) -> Job:
    return Job.objects.create(owner=alice, name="robot-arm")


def page(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize(("path", "field"), [
    ("/jobs/{j}/metrics?points=abc", "points"),
    ("/jobs/{j}/metrics?points=1e999", "points"),
    ("/jobs/{j}/metrics?points=0", "points"),
    ("/jobs/{j}/log?slot=h.0&offset=abc", "offset"),
    ("/jobs/{j}/log?slot=h.0&offset=nan", "offset"),
    ("/jobs/{j}/priority/preview?priority=10001", "priority"),
    (f"/jobs/{{j}}/priority/preview?priority={BIG}", "priority"),
    ("/jobs/{j}/priority/preview?priority=-1", "priority"),
    ("/jobs/{j}/priority/preview", "priority"),
])  # fmt: skip
def test_a_job_pages_bad_parameter_is_a_400_naming_it(
    alice: Any, job: Job, path: str, field: str
) -> None:
    reply = page(alice).get(path.format(j=job.pk))
    assert reply.status_code == 400
    assert reply.json()["error"].startswith(f"{field}: ")
    assert "whole number" in reply.json()["error"]
    assert list(reply.json()["fields"]) == [field]


@pytest.mark.parametrize("since", ["9999999d", "99999999999999999999h", "9999999w"])
def test_a_span_back_past_year_one_is_a_400_on_usage(alice: Any, since: str) -> None:
    api = token_client(alice).get(f"/api/v1/usage/?since={since}")
    assert api.status_code == 400
    assert "reaches before year 1" in api.json()["fields"]["since"][0]
    assert page(alice).get(f"/usage/?until={since}").status_code == 400
    assert page(alice).get(f"/usage.csv?since={since}").status_code == 400


@pytest.mark.parametrize("ids", [str(BIG), f"{{j}},{BIG}", str(2**63), str(-BIG)])
def test_an_id_past_64_bits_on_compare_is_a_job_that_does_not_exist(
    alice: Any, job: Job, ids: str
) -> None:
    ids = ids.format(j=job.pk)
    reply = token_client(alice).get(f"/api/v1/jobs/compare/?ids={ids}")
    assert reply.status_code == 404
    assert reply.json()["error"].startswith("no job ")
    for path in ("/compare/", "/compare/curves", "/compare.csv"):
        assert page(alice).get(f"{path}?ids={ids}").status_code == 404


@pytest.mark.parametrize("since", ["nan", "inf", "-inf", "1e999", str(BIG), "-5",
                                   f"{2**63}-0", f"1-{BIG}", "abc"])  # fmt: skip
def test_a_shares_since_that_is_no_time_nor_cursor_is_a_400(
    alice: Any, store: Any, since: str
) -> None:
    reply = token_client(alice).get(f"/api/v1/cluster/shares/?since={since}")
    assert reply.status_code == 400
    assert reply.json()["fields"]["since"][0].startswith("a unix time in seconds, or the cursor")


def test_a_shares_since_in_range_is_taken(alice: Any, store: Any) -> None:
    for since in ("1767000000", "1767000000.5", f"{2**63 - 1}-{2**63 - 1}", "0-0"):
        assert token_client(alice).get(f"/api/v1/cluster/shares/?since={since}").status_code == 200
