"""Access taken away reaches open WebSockets at once (docs/architecture.md, "Tenancy"): a
member removed from the team whose job their page shows, an account deactivated, a session
logged out. Bob's socket on Alice's team job closes (code 4403) and receives nothing of the
job after the change, while Alice's, beside it, keeps receiving every frame."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.test import Client

from edtweb.asgi import application
from edtweb.dashboard.consumers import REVOKED
from edtweb.redis_server import RedisServer
from edtweb.tenancy.services import save_team, set_member
from edtweb.training.live import CLUSTER
from edtweb.training.models import Job
from tests.harness.api import token_client

pytestmark = pytest.mark.django_db(transaction=True)
ORIGIN = [(b"origin", b"http://127.0.0.1:8000"), (b"host", b"127.0.0.1:8000")]
FRAMES = 20  # pushes of the job after the change, as the metrics consumer sends them


def logged_in(user: Any) -> tuple[Client, bytes]:
    client = Client()
    client.force_login(user)
    return client, f"sessionid={client.cookies['sessionid'].value}".encode()


def socket(path: str, cookie: bytes) -> WebsocketCommunicator:
    return WebsocketCommunicator(application, path, headers=[*ORIGIN, (b"cookie", cookie)])


def metrics(job: Job, n: int) -> dict[str, Any]:
    return {"type": "job.metrics", "from": n, "to": n, "records": [{"step": n, "loss": 1.0}]}


@pytest.fixture
def team_job(people: dict[str, Any]) -> Job:
    """Alice's job in team blue, of which Bob is a member."""
    blue = save_team(None, {"name": "blue"})
    set_member(blue, people["alice"])
    set_member(blue, people["bob"])
    return Job.objects.create(owner=people["alice"], name="robot-arm", team=blue)


def remove_bob(people: dict[str, Any], bob_client: Client) -> None:
    reply = token_client(people["root"]).delete("/api/v1/teams/blue/members/bob/")
    assert reply.status_code == 200, reply.content


def deactivate_bob(people: dict[str, Any], bob_client: Client) -> None:
    people["bob"].is_active = False
    people["bob"].save()  # as Django's admin does


def log_bob_out(people: dict[str, Any], bob_client: Client) -> None:
    assert bob_client.post("/accounts/logout/").status_code == 302


@pytest.mark.parametrize("change", [remove_bob, deactivate_bob, log_bob_out])
def test_bobs_socket_on_the_teams_job_gets_nothing_after_his_access_goes(
    redis_server: RedisServer, people: dict[str, Any], team_job: Job,
    change: Callable[[dict[str, Any], Client], None],
) -> None:  # fmt: skip
    path = f"/ws/jobs/{team_job.pk}/"
    bob_client, bob_cookie = logged_in(people["bob"])
    _, alice_cookie = logged_in(people["alice"])

    async def scenario() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        layer = get_channel_layer()
        bob, alice = socket(path, bob_cookie), socket(path, alice_cookie)
        assert (await bob.connect(timeout=5))[0] and (await alice.connect(timeout=5))[0]
        await layer.group_send(team_job.group_name, metrics(team_job, 0))
        assert (await bob.receive_json_from(timeout=5))["from"] == 0  # Bob sees it now
        assert (await alice.receive_json_from(timeout=5))["from"] == 0
        await sync_to_async(change)(people, bob_client)
        for n in range(1, FRAMES + 1):
            await layer.group_send(team_job.group_name, metrics(team_job, n))
        seen_by_alice = [await alice.receive_json_from(timeout=5) for _ in range(FRAMES)]
        closed = await bob.receive_output(timeout=5)
        assert closed == {"type": "websocket.close", "code": REVOKED}
        after: list[dict[str, Any]] = []
        while not await bob.receive_nothing(timeout=0.5):
            after.append(await bob.receive_output(timeout=5))
        await bob.disconnect()
        await alice.disconnect()
        return seen_by_alice, after

    seen_by_alice, after = asyncio.run(scenario())
    assert [f["from"] for f in seen_by_alice] == list(range(1, FRAMES + 1))
    assert after == []


def test_a_member_still_in_the_team_keeps_the_socket_when_another_leaves(
    redis_server: RedisServer, people: dict[str, Any], team_job: Job
) -> None:
    """Only whose access went is closed: Lena, another member, keeps hers."""
    set_member(team_job.team, people["lena"])
    bob_client, _ = logged_in(people["bob"])
    _, lena_cookie = logged_in(people["lena"])

    async def scenario() -> dict[str, Any]:
        lena = socket(f"/ws/jobs/{team_job.pk}/", lena_cookie)
        assert (await lena.connect(timeout=5))[0]
        await sync_to_async(remove_bob)(people, bob_client)
        await get_channel_layer().group_send(team_job.group_name, metrics(team_job, 1))
        frame: dict[str, Any] = await lena.receive_json_from(timeout=5)
        await lena.disconnect()
        return frame

    assert asyncio.run(scenario())["from"] == 1


def test_the_cluster_socket_of_a_deactivated_account_closes(
    redis_server: RedisServer, people: dict[str, Any]
) -> None:
    bob_client, cookie = logged_in(people["bob"])

    async def scenario() -> dict[str, Any]:
        cluster = socket("/ws/cluster/", cookie)
        assert (await cluster.connect(timeout=5))[0]
        await cluster.receive_json_from(timeout=5)  # the slots now
        await sync_to_async(deactivate_bob)(people, bob_client)
        await get_channel_layer().group_send(CLUSTER, {"type": "cluster.slots", "slots": []})
        closed: dict[str, Any] = await cluster.receive_output(timeout=5)
        assert await cluster.receive_nothing(timeout=0.5)
        await cluster.disconnect()
        return closed

    assert asyncio.run(scenario()) == {"type": "websocket.close", "code": REVOKED}
