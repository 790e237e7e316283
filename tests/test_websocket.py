"""The Cluster WebSocket: origin and login are checked, and group messages reach the page."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.test import Client

from edtweb.asgi import application
from edtweb.redis_server import RedisServer
from edtweb.training.live import CLUSTER as CLUSTER_GROUP
from scheduler.store import Store

pytestmark = pytest.mark.django_db(transaction=True)


def session_cookie(user: Any) -> bytes:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


def communicator(origin: bytes, cookie: bytes | None = None) -> WebsocketCommunicator:
    headers = [(b"origin", origin), (b"host", b"127.0.0.1:8000")]
    if cookie:
        headers.append((b"cookie", cookie))
    return WebsocketCommunicator(application, "/ws/cluster/", headers=headers)


async def handshake(comm: WebsocketCommunicator) -> bool:
    connected, _ = await comm.connect(timeout=5)
    await comm.disconnect()
    return bool(connected)


def test_it_refuses_an_anonymous_websocket(redis_server: RedisServer) -> None:
    assert asyncio.run(handshake(communicator(b"http://127.0.0.1:8000"))) is False


def test_it_refuses_a_websocket_from_another_origin(redis_server: RedisServer, alice: Any) -> None:
    comm = communicator(b"http://evil.example.com", session_cookie(alice))
    assert asyncio.run(handshake(comm)) is False


def test_a_logged_in_page_gets_the_slots_then_live_changes(
    redis_server: RedisServer, store: Store, register_slot: Callable[..., str], alice: Any
) -> None:
    slot = register_slot("ws-host", 0)
    store.heartbeat(slot, {"kind": "cpu", "cpu_percent": 3.0}, ttl=30)

    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        comm = communicator(b"http://127.0.0.1:8000", cookie)
        connected, _ = await comm.connect(timeout=5)
        assert connected
        first = await comm.receive_json_from(timeout=5)
        layer = get_channel_layer()
        change = [{"slot_id": slot, "state": "lost"}]
        await layer.group_send(CLUSTER_GROUP, {"type": "cluster.slots", "slots": change})
        second = await comm.receive_json_from(timeout=5)
        await comm.disconnect()
        return first, second

    cookie = session_cookie(alice)
    first, second = asyncio.run(scenario())
    assert any(s["slot_id"] == slot and s["state"] == "alive" for s in first["slots"])
    lost = {"slot_id": slot, "state": "lost", "busy": False, "job": None}
    assert second == {"type": "slots", "slots": [lost]}


def test_the_slots_name_only_the_users_own_jobs(
    redis_server: RedisServer, alice: Any, bob: Any
) -> None:
    from edtweb.training.models import Job

    mine, theirs = (Job.objects.create(owner=u, name=u.username) for u in (alice, bob))
    slots = [{"slot_id": "a", "job": mine.pk}, {"slot_id": "b", "job": theirs.pk},
             {"slot_id": "c", "job": None}]  # fmt: skip

    cookie = session_cookie(alice)

    async def scenario() -> dict[str, Any]:
        comm = communicator(b"http://127.0.0.1:8000", cookie)
        connected, _ = await comm.connect(timeout=5)
        assert connected
        await comm.receive_json_from(timeout=5)  # the slots now
        await get_channel_layer().group_send(
            CLUSTER_GROUP, {"type": "cluster.slots", "slots": slots}
        )
        message: dict[str, Any] = await comm.receive_json_from(timeout=5)
        await comm.disconnect()
        return message

    seen = {s["slot_id"]: (s["busy"], s["job"]) for s in asyncio.run(scenario())["slots"]}
    assert seen == {"a": (True, mine.pk), "b": (True, None), "c": (False, None)}


def test_an_allocation_names_its_job_only_to_whom_may_see_it(
    redis_server: RedisServer, alice: Any, bob: Any
) -> None:
    """A job's first allocation can reach the Cluster page before any of its events is
    stored (a busy scheduler host): the frame names the job from its row, so the chart's
    legend never says "job 7". A user who may not see the job gets no frame."""
    from edtweb.training.models import Job

    job = Job.objects.create(owner=alice, name="robot-arm", state=Job.State.RUNNING)
    change = {"job": job.pk, "workers": 2, "at": 1.0}

    async def frames(cookie: bytes) -> list[dict[str, Any]]:
        comm = communicator(b"http://127.0.0.1:8000", cookie)
        assert (await comm.connect(timeout=5))[0]
        await comm.receive_json_from(timeout=5)  # the slots now
        layer = get_channel_layer()
        await layer.group_send(CLUSTER_GROUP, {"type": "cluster.allocation", **change})
        await layer.group_send(CLUSTER_GROUP, {"type": "cluster.allocations",
                                               "changes": [{**change, "workers": 3}]})  # fmt: skip
        got = []
        while not await comm.receive_nothing(timeout=1):
            got.append(await comm.receive_json_from(timeout=5))
        await comm.disconnect()
        return got

    assert not job.events.exists()
    assert asyncio.run(frames(session_cookie(alice))) == [
        {"type": "allocation", "job": job.pk, "workers": 2, "at": 1.0, "name": "robot-arm"},
        {"type": "allocations",
         "changes": [{"job": job.pk, "workers": 3, "at": 1.0, "name": "robot-arm"}]},
    ]  # fmt: skip
    assert asyncio.run(frames(session_cookie(bob))) == []


def test_a_steps_pushes_arrive_merged_and_each_page_keeps_its_own(
    redis_server: RedisServer, alice: Any, bob: Any
) -> None:
    """Inside ``services.batched`` (the scheduler's step) every allocation change goes to
    the Cluster page in one frame and every job's events in one group message: each page
    gets what its user may see, in order, and nothing twice; the job page then gets its
    job's status once."""
    from asgiref.sync import sync_to_async

    from edtweb.training import services
    from edtweb.training.models import Job

    mine, theirs = (Job.objects.create(owner=u, name=u.username) for u in (alice, bob))
    cookie = session_cookie(alice)

    def step() -> None:
        with services.batched():
            services.record_event(mine.pk, "scaled", "0→2: mine", current=0, target=2)
            services.record_event(theirs.pk, "scaled", "0→1: theirs", current=0, target=1)
            services.record_event(mine.pk, "generation", "now 2 worker(s)", workers=2)

    async def scenario() -> tuple[list[dict[str, Any]], dict[str, Any]]:
        headers = [(b"origin", b"http://127.0.0.1:8000"), (b"host", b"127.0.0.1:8000"),
                   (b"cookie", cookie)]  # fmt: skip
        page = WebsocketCommunicator(application, f"/ws/jobs/{mine.pk}/", headers=headers)
        cluster = communicator(b"http://127.0.0.1:8000", cookie)
        assert (await page.connect(timeout=5))[0] and (await cluster.connect(timeout=5))[0]
        await cluster.receive_json_from(timeout=5)  # the slots now
        await sync_to_async(step)()
        events = [await page.receive_json_from(timeout=5) for _ in range(2)]
        status = await page.receive_json_from(timeout=5)  # once, after the step's events
        assert (status["type"], status["status"]["id"]) == ("status", mine.pk)
        allocations = await cluster.receive_json_from(timeout=5)
        assert await page.receive_nothing(timeout=0.5)
        assert await cluster.receive_nothing(timeout=0.5)
        await page.disconnect()
        await cluster.disconnect()
        return events, allocations

    events, allocations = asyncio.run(scenario())
    kinds = [(e["type"], e["event"]["kind"]) for e in events]
    assert kinds == [("event", "scaled"), ("event", "generation")]
    assert allocations["type"] == "allocations"
    changes = allocations["changes"]
    assert [(c["job"], c["name"], c.get("decision"), c.get("workers")) for c in changes] == [
        (mine.pk, "alice", "0→2: mine", None),
        (mine.pk, "alice", None, 2),
    ]
    assert list(mine.events.values_list("kind", flat=True)) == ["scaled", "generation"]
