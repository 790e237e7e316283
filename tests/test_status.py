"""One read model of a job's live view (edtweb/training/status.py): the jobs list, the job
page's ``/state`` and its socket, the REST API, WMLA's execs and the CLI show the same
workers and ETA during a resize (a joiner does not train yet; the training records still
say 1 worker) and a suspension (the scheduler took the slots back), and the job page shows
the server's values."""

from __future__ import annotations

import asyncio
import html
import json
import re
import subprocess
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from channels.testing import WebsocketCommunicator
from django.test import Client

from edtweb.asgi import application
from edtweb.redis_server import RedisServer
from edtweb.training import live, services
from edtweb.training.models import Job, Metric
from edtweb.training.status import eta_text, status_of
from scheduler.store import Allocation, AllocationRecord, Store
from tests.browser import browser_page, log_in_as
from tests.harness.stack import edt_command
from tests.harness.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

WMLA = "/platform/rest/deeplearning/v1"
CONDUCTOR = "/platform/rest/conductor/v1/instances/edt/applications"
SLOTS = ("status-h.0", "status-h.1", "status-h.2")
# Ten records 0.5 s apart, each written when the job had 1 worker; 1000 iterations in all.
PACE, TOTAL, LAST_STEP = 0.5, 1000, 9
ETA = (TOTAL - LAST_STEP) * PACE  # 495.5 s: "8 min"
SUSPENDED = "suspended: minimums total 5 > 3 slots"  # as the scheduler says it
# The test plays the scheduler and the slots' workers, and renews nothing it writes: it
# lasts the test (a record lapsing midway would show a job RUNNING with no worker).
TTL = 600


@pytest.fixture
def cluster(store: Store, register_slot: Callable[..., str]) -> Iterator[Store]:
    """Three live slots; the allocation record is the test's to write, and is cleared."""
    for index in range(len(SLOTS)):
        slot = register_slot("status-h", index)
        store.heartbeat(slot, {"kind": "cpu", "cpu_percent": 50.0 + index}, ttl=TTL)
    yield store
    store.save_allocations(AllocationRecord(), ttl=0.1)


def resizing(owner: Any, store: Store) -> Job:
    """A running job growing from 2 to 3 workers: its generation has two members and one
    joiner, and its training records (from before the grow) say 1 worker."""
    job = Job.objects.create(owner=owner, name="elastic", state=Job.State.RUNNING,
                             max_workers=4, total_steps=TOTAL, steps_done=LAST_STEP)  # fmt: skip
    Metric.objects.bulk_create(
        Metric(job=job, kind="train", step=step, epoch=0, time=1000 + PACE * step,
               values={"loss": 1.0, "workers": 1, "samples_per_s": 64.0})
        for step in range(LAST_STEP + 1)
    )  # fmt: skip
    held = Allocation(SLOTS[:2], SLOTS[2:])
    store.save_allocations(AllocationRecord({job.pk: held}, 3, "fairshare"), ttl=TTL)
    return job


def suspend(job: Job, store: Store) -> None:
    """The scheduler took the job's slots back: it waits, suspended, and holds none."""
    Job.objects.filter(pk=job.pk).update(state=Job.State.SUSPENDED)
    said = {job.pk: (1, SUSPENDED)}
    store.save_allocations(AllocationRecord({}, 3, "fairshare", standing=said), ttl=TTL)
    job.refresh_from_db()


def list_row(client: Client, job: Job) -> tuple[int, str]:
    """Workers and ETA as the jobs list writes them."""
    page = client.get("/jobs/").content.decode()
    row = re.search(rf'<tr data-job="{job.pk}".*?</tr>', page, re.S)
    assert row, page
    workers = re.search(r'<td class="workers"[^>]*>(\d+)/', row[0])
    eta = re.search(r'<small class="eta muted">(.*?)</small>', row[0], re.S)
    assert workers and eta, row[0]
    return int(workers[1]), html.unescape(eta[1]).strip()


def everyone(client: Client, job: Job) -> dict[str, tuple[int, float | None]]:
    """Workers and ETA (seconds) as each reader shows them."""
    state = client.get(f"/jobs/{job.pk}/state").json()
    api = client.get(f"/api/v1/jobs/{job.pk}/").json()
    listed = next(j for j in client.get("/api/v1/jobs/").json()["results"] if j["id"] == job.pk)
    wmla = client.get(f"{WMLA}/execs/{job.pk}").json()
    execs = next(e for e in client.get(f"{WMLA}/execs").json() if e["id"] == str(job.pk))
    apps = client.get(CONDUCTOR).json()
    app = next(a for a in apps if a["id"] == f"edt-job-{job.pk}")
    return {
        "/state": (state["workers"], state["eta"]),
        "api": (api["workers"], api["eta_seconds"]),
        "api list": (listed["workers"], listed["eta_seconds"]),
        "wmla exec": (wmla["numWorker"], state["eta"]),  # WMLA has no ETA
        "wmla execs": (execs["numWorker"], state["eta"]),
        "conductor": (app["gpuslots"], state["eta"]),
    }


def test_every_reader_agrees_on_workers_and_eta_during_a_resize_and_a_suspension(
    client: Client, redis_server: RedisServer, cluster: Store, alice: Any
) -> None:
    client.force_login(alice)
    job = resizing(alice, cluster)
    status = status_of(job, alice)
    assert (status.workers, status.eta, status.eta_text) == (2, ETA, "8 min")
    assert set(everyone(client, job).values()) == {(2, ETA)}
    assert list_row(client, job) == (2, "ETA 8 min")
    state = client.get(f"/jobs/{job.pk}/state").json()
    assert [t["slot"] for t in state["telemetry"]] == list(SLOTS[:2])  # the members' own
    assert state["waiting"] == "" and state["progress"] == pytest.approx(LAST_STEP / TOTAL)

    suspend(job, cluster)
    assert set(everyone(client, job).values()) == {(0, None)}
    assert list_row(client, job) == (0, "")
    waiting = client.get(f"/jobs/{job.pk}/state").json()["waiting"]
    assert waiting == f"1st in group default's queue; {SUSPENDED}"  # the scheduler's words
    assert client.get(f"/api/v1/jobs/{job.pk}/").json()["waiting"] == waiting


@pytest.mark.parametrize("held", ["lapsed", "joiners only"])
def test_a_running_job_with_no_member_shows_no_eta_with_its_0_workers(
    client: Client, redis_server: RedisServer, cluster: Store, alice: Any, held: str
) -> None:
    """No worker trains the job, its row saying RUNNING still: its allocation lapsed (no
    scheduler renewed it), or it holds joiners alone (a generation forming). Its past pace
    says nothing of its end then: every reader shows 0 workers and no ETA, never 0 with
    the ETA of before (as the job page once did when the test's record lapsed)."""
    client.force_login(alice)
    job = resizing(alice, cluster)
    if held == "lapsed":
        cluster.save_allocations(cluster.allocations(), ttl=0.1)
        wait_for(lambda: not cluster.allocations().jobs, 10, "the allocation record to lapse")
    else:
        joining = Allocation((), SLOTS[:2])
        cluster.save_allocations(AllocationRecord({job.pk: joining}, 3, "fairshare"), ttl=TTL)
    assert Job.objects.get(pk=job.pk).state == Job.State.RUNNING
    status = status_of(job, alice)
    assert (status.workers, status.eta, status.eta_text) == (0, None, "")
    assert set(everyone(client, job).values()) == {(0, None)}
    assert list_row(client, job) == (0, "")


def test_the_job_page_socket_pushes_the_status_after_a_change(
    client: Client, redis_server: RedisServer, cluster: Store, alice: Any
) -> None:
    """An event (here a resize's) reaches the page with the job's status right behind it:
    the workers the allocation record holds, not the training records' count."""
    client.force_login(alice)
    job = resizing(alice, cluster)
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()

    async def scenario() -> list[dict[str, Any]]:
        headers = [(b"origin", b"http://127.0.0.1:8000"), (b"host", b"127.0.0.1:8000"),
                   (b"cookie", cookie)]  # fmt: skip
        page = WebsocketCommunicator(application, f"/ws/jobs/{job.pk}/", headers=headers)
        assert (await page.connect(timeout=5))[0]
        from asgiref.sync import sync_to_async

        await sync_to_async(services.record_event)(job.pk, "generation", "now 2", workers=2)
        frames = [await page.receive_json_from(timeout=5) for _ in range(2)]
        await page.disconnect()
        return frames

    event, status = asyncio.run(scenario())
    assert (event["type"], event["event"]["kind"]) == ("event", "generation")
    assert status["type"] == "status"
    state = client.get(f"/jobs/{job.pk}/state").json()
    assert status["status"] == {key: state[key] for key in status["status"]}
    assert (status["status"]["workers"], status["status"]["eta"]) == (2, ETA)


def test_the_cli_shows_the_apis_workers_and_eta(
    live_server: Any, redis_server: RedisServer, cluster: Store, alice: Any, tmp_path: Any
) -> None:
    job = resizing(alice, cluster)

    def edt(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        env = {"XDG_CONFIG_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
        return subprocess.run([*edt_command(), *args], input=stdin, env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=60)  # fmt: skip

    login = edt("login", "--url", live_server.url, "--user", "alice", "--password-stdin",
                stdin="alice-pass-1\n")  # fmt: skip
    assert login.returncode == 0, login.stderr
    shown = json.loads(edt("--json", "jobs", "show", str(job.pk)).stdout)
    assert (shown["workers"], shown["eta_seconds"]) == (2, ETA)
    text = edt("jobs", "show", str(job.pk)).stdout
    assert re.search(r"^workers\s+2/4$", text, re.M), text
    assert re.search(r"^eta seconds\s+496$", text, re.M), text  # the CLI's 3 digits


@pytest.mark.browser
def test_the_job_page_shows_the_servers_workers_and_eta(
    live_server: Any, redis_server: RedisServer, cluster: Store, alice: Any
) -> None:
    """The page's workers and ETA are the server's status, in a resize (the records say 1
    worker: the page says 2) and once suspended (0 and no ETA), with no socket open to
    bring anything else (the test's server speaks HTTP only)."""
    job = resizing(alice, cluster)
    with browser_page() as page:
        log_in_as(page, live_server.url, "alice", "alice-pass-1")
        page.goto(f"{live_server.url}/jobs/{job.pk}/")
        page.wait_for_function("document.getElementById('workers').textContent === '2'")
        assert page.inner_text("#eta") == eta_text(ETA) == "8 min"
        page.goto(live_server.url + "/jobs/")
        assert page.inner_text(f"tr[data-job='{job.pk}'] .workers") == "2/4"
        assert page.inner_text(f"tr[data-job='{job.pk}'] .eta") == "ETA 8 min"

        page.goto(f"{live_server.url}/jobs/{job.pk}/")
        # Playwright's loop runs in this thread: the database is written from another.
        with ThreadPoolExecutor(1) as pool:
            pool.submit(suspend, job, cluster).result()  # seen by the page's next poll
        page.wait_for_function("document.getElementById('workers').textContent === '0'")
        assert page.inner_text("#eta") == "\u2013"


def test_the_push_module_sends_the_slots_to_the_cluster_group(
    redis_server: RedisServer, alice: Any
) -> None:
    """``publish_slots`` (the scheduler's publisher) goes through the one push module."""
    from channels.layers import get_channel_layer

    async def scenario() -> dict[str, Any]:
        layer = get_channel_layer()
        channel = await layer.new_channel()
        await layer.group_add(live.CLUSTER, channel)
        from asgiref.sync import sync_to_async

        await sync_to_async(live.publish_slots)([{"slot_id": "x.0", "job": None}])
        message: dict[str, Any] = await asyncio.wait_for(layer.receive(channel), 5)
        await layer.group_discard(live.CLUSTER, channel)
        return message

    assert asyncio.run(scenario()) == {
        "type": "cluster.slots",
        "slots": [{"slot_id": "x.0", "job": None}],
    }
