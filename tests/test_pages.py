from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from scheduler.store import Store

pytestmark = pytest.mark.django_db


def test_cluster_page_needs_a_login(client: Client) -> None:
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_a_wrong_password_says_so(client: Client, alice: Any) -> None:
    response = client.post("/accounts/login/", {"username": "alice", "password": "nope"})
    assert response.status_code == 200
    assert b"do not match" in response.content


def test_cluster_page_lists_registered_slots(
    client: Client, alice: Any, store: Store, register_slot: Callable[..., str]
) -> None:
    slot = register_slot("pg-host", 0)
    store.heartbeat(slot, {"kind": "cpu", "cpu_percent": 1.0}, ttl=30)
    client.force_login(alice)
    response = client.get("/")
    assert response.status_code == 200
    assert f'data-slot-id="{slot}" data-state="alive"'.encode() in response.content


def test_cluster_page_explains_when_redis_is_down(
    client: Client, alice: Any, settings: Any
) -> None:
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    client.force_login(alice)
    response = client.get("/")
    assert response.status_code == 200
    assert b"Redis does not answer" in response.content
