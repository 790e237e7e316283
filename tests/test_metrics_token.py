"""``/metrics`` behind a bearer token where the admin set ``EDT_METRICS_TOKEN``; open where
not (the default, for a web only the monitoring reaches). ``/healthz`` and ``/readyz`` never
ask: a load balancer or a process manager sends no token."""

from __future__ import annotations

import pytest
from django.test import Client, override_settings

from edtweb.redis_server import RedisServer

pytestmark = pytest.mark.django_db


def scrape(authorization: str | None = None, path: str = "/metrics") -> tuple[int, str, str]:
    headers = {"Authorization": authorization} if authorization is not None else {}
    r = Client().get(path, headers=headers)
    return r.status_code, r.get("WWW-Authenticate", ""), r.content.decode()


def test_metrics_answer_anyone_where_no_token_is_set(redis_server: RedisServer) -> None:
    with override_settings(REDIS_URL=redis_server.url, EDT_METRICS_TOKEN=""):
        status, _, body = scrape()
    assert status == 200 and "edt_jobs" in body


@pytest.mark.parametrize(
    ("authorization", "status"),
    [
        (None, 401),
        ("Bearer wrong-token", 401),
        ("Basic czNjcmV0LXQwa2Vu", 401),
        ("Token s3cret-t0ken", 401),
        ("Bearer", 401),
        ("s3cret-t0ken", 401),
        ("Bearer s3cret-t0ken-but-longer", 401),
        ("Bearer s3cret-t0ken", 200),
        ("bearer s3cret-t0ken", 200),  # the scheme is case-insensitive (RFC 7235)
    ],
)
def test_metrics_ask_for_the_token_where_one_is_set(
    redis_server: RedisServer, authorization: str | None, status: int
) -> None:
    with override_settings(REDIS_URL=redis_server.url, EDT_METRICS_TOKEN="s3cret-t0ken"):
        got, challenge, body = scrape(authorization)
        health = [scrape(path=p)[0] for p in ("/healthz", "/readyz")]
    assert got == status, body
    if status == 401:
        assert challenge == 'Bearer realm="edt-metrics"'
        assert "Authorization: Bearer <token>" in body and "edt_" not in body
    else:
        assert "edt_jobs" in body
    assert health == [200, 200]  # never behind the token
