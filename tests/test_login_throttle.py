"""Guessing a password is slow: past EDT_LOGIN_FAILURES failed logins with one user name
within EDT_LOGIN_WINDOW seconds, the login page, the token endpoint and WMLA's Basic
credentials each answer 429 with Retry-After (checking no password, the right one
included) until the window ends. Failures are counted in Redis, so another web process's
count the same."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from edtweb import throttle
from edtweb.redis_access import redis_client
from edtweb.redis_server import RedisServer
from tests.harness.processes import PROJECT_DIR
from tests.harness.waiting import wait_for

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def forget_failures() -> Any:
    """The names these tests lock out are free again after each: other tests in the run's
    Redis log in as alice."""
    yield
    for name in ("alice", "nobody"):
        throttle.succeeded(name)


TOKEN = "/api/v1/auth/token/"
LIMIT = 3


@pytest.fixture
def limited(settings: Any, redis_server: RedisServer, alice: Any, bob: Any) -> Any:
    settings.EDT_LOGIN_FAILURES, settings.EDT_LOGIN_WINDOW = LIMIT, 60
    keys = list(redis_client().scan_iter("edt:login:failures:*"))
    if keys:
        redis_client().delete(*keys)
    return settings


def token(username: str, password: str) -> Any:
    return APIClient().post(TOKEN, {"username": username, "password": password}, format="json")


def login_page(username: str, password: str) -> Any:
    return Client().post("/accounts/login/", {"username": username, "password": password})


def wmla(username: str, password: str) -> Any:
    basic = base64.b64encode(f"{username}:{password}".encode()).decode()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Basic {basic}")
    return client.get("/platform/rest/deeplearning/v1/execs")


def retry_after(reply: Any) -> int:
    assert reply.status_code == 429, (reply.status_code, reply.content[:200])
    seconds = int(reply["Retry-After"])
    assert 1 <= seconds <= 60
    return seconds


def test_the_token_endpoint_answers_429_past_the_failures(limited: Any) -> None:
    for _ in range(LIMIT):
        assert token("alice", "wrong").status_code == 400
    refused = token("alice", "alice-pass-1")  # the right password: not even checked
    retry_after(refused)
    assert refused.json()["error"].startswith("too many failed logins with this user name")
    assert token("bob", "bob-pass-1").status_code == 200  # another name is not held up


def test_the_login_page_answers_429_past_the_failures(limited: Any) -> None:
    for _ in range(LIMIT):
        wrong = login_page("alice", "wrong")
        assert wrong.status_code == 200 and b"do not match" in wrong.content
    refused = login_page("alice", "alice-pass-1")
    retry_after(refused)
    assert b"Too many failed logins with this user name" in refused.content
    assert "_auth_user_id" not in refused.wsgi_request.session


def test_wmla_basic_credentials_answer_429_past_the_failures(limited: Any) -> None:
    for _ in range(LIMIT):
        assert wmla("alice", "wrong").status_code == 401
    retry_after(wmla("alice", "alice-pass-1"))


def test_a_name_no_account_has_is_held_up_the_same(limited: Any) -> None:
    for _ in range(LIMIT):
        assert token("nobody", "wrong").status_code == 400
    retry_after(token("nobody", "wrong"))


def test_failures_in_another_process_count(limited: Any, redis_server: RedisServer) -> None:
    """Every web process counts in the one Redis: one failing logins elsewhere holds up
    this one's."""
    code = "from edtweb import throttle\nfor _ in range(3): throttle.failed('Alice')"
    env = {
        **os.environ,
        "REDIS_URL": redis_server.url,
        "EDT_LOGIN_FAILURES": str(LIMIT),
        "EDT_LOGIN_WINDOW": "60",
    }
    subprocess.run([sys.executable, "manage.py", "shell", "-c", code], cwd=PROJECT_DIR,
                   env=env, check=True, timeout=60)  # fmt: skip
    retry_after(token("alice", "alice-pass-1"))  # and the name's case does not matter


def test_a_login_that_works_forgets_the_failures_and_the_window_ends(limited: Any) -> None:
    for _ in range(LIMIT - 1):
        token("alice", "wrong")
    assert token("alice", "alice-pass-1").status_code == 200
    for _ in range(LIMIT - 1):
        assert token("alice", "wrong").status_code == 400  # counted afresh
    for _ in range(LIMIT):
        token("bob", "wrong")
    retry_after(token("bob", "bob-pass-1"))
    # The window's end brought forward (Redis expires the count with it), not waited for.
    redis_client().expire(throttle._key("bob"), 1)
    wait_for(lambda: token("bob", "bob-pass-1").status_code == 200, 10, "bob's window to end")
