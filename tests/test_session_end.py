"""A page's fetches after its session ended (logged out in another tab, expired) get 401 with
a JSON reason, which the pages' ``r.ok`` checks handle, not the login page's HTML (which a
page's ``r.json()`` would throw on); pages themselves still send the visitor to log in."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from edtweb.training.models import Job

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "path",
    ["/jobs/{pk}/state", "/jobs/{pk}/metrics", "/jobs/{pk}/log?slot=s&offset=0",
     "/jobs/{pk}/priority/preview?priority=5", "/api/cluster/allocations"],
)  # fmt: skip
def test_what_pages_fetch_answers_401_json_once_the_session_ended(alice: Any, path: str) -> None:
    job = Job.objects.create(owner=alice, name="j", max_workers=1)
    client = Client()
    client.force_login(alice)
    url = path.format(pk=job.pk)
    assert client.get(url).status_code == 200
    client.logout()
    answer = client.get(url)
    assert answer.status_code == 401 and answer["Content-Type"] == "application/json"
    assert answer.json() == {"detail": "not logged in: log in again"}


def test_a_page_still_sends_the_visitor_to_log_in(alice: Any) -> None:
    job = Job.objects.create(owner=alice, name="j", max_workers=1)
    answer = Client().get(f"/jobs/{job.pk}/")
    assert answer.status_code == 302 and answer["Location"].startswith("/accounts/login/")
