"""The job page explains itself: why a waiting job waits (the scheduler's words), its
configuration, Clone and Resume, and its metrics as CSV."""

from __future__ import annotations

import csv
import io
import re
from typing import Any

import pytest
from django.test import Client

from edtweb.redis_server import RedisServer
from edtweb.training import standing
from edtweb.training.models import Job, Metric
from edtweb.training.views import human_duration
from scheduler.store import Allocation, AllocationRecord, Store
from tests.harness.jobs import stored_job

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize(
    ("n", "text"), [(1, "1st"), (2, "2nd"), (3, "3rd"), (4, "4th"), (11, "11th"), (22, "22nd")]
)
def test_ordinals(n: int, text: str) -> None:
    assert standing.ordinal(n) == text


@pytest.mark.parametrize(
    ("seconds", "text"), [(0, "0 s"), (59, "59 s"), (61, "1 min 1 s"), (3720, "1 h 2 min")]
)
def test_durations(seconds: int, text: str) -> None:
    assert human_duration(seconds) == text


def test_a_job_shows_the_place_and_reason_the_scheduler_published_and_nothing_of_its_own(
    store: Store, alice: Any, bob: Any
) -> None:
    running = stored_job(alice, "big", Job.State.RUNNING, priority=8000)
    ahead = stored_job(bob, "theirs", priority=6000)
    mine = stored_job(alice, "mine", priority=5000, min_workers=6, max_workers=8)
    late = stored_job(alice, "late")  # submitted after the decision
    said = {running.pk: (0, "alone on 4 slots; exact share 4.00 (its max)"),
            ahead.pk: (1, "waits: minimums total 11 > 4 slots; …"),
            mine.pk: (2, "waits: minimums total 11 > 4 slots; …")}  # fmt: skip
    held = Allocation(("host.0", "host.1", "host.2", "host.3"), ())
    record = AllocationRecord({running.pk: held}, 4, "fairshare", standing=said)
    store.save_allocations(record, ttl=30)
    known = standing.record()
    assert standing.reason(ahead, known) == "1st in group default's queue; " + said[ahead.pk][1]
    assert standing.reason(mine, known) == "2nd in group default's queue; " + said[mine.pk][1]
    assert standing.reason(running, known) == said[running.pk][1]
    assert standing.reason(late, known) == standing.UNDECIDED
    assert [standing.position(j, known) for j in (running, ahead, mine, late)] == [0, 1, 2, 0]
    jobs, places, _ = standing.queue_of(Job.objects.all())
    assert [j.pk for j in jobs] == [ahead.pk, mine.pk, late.pk]
    assert places == {ahead.pk: 1, mine.pk: 2, late.pk: 0}
    store.save_allocations(AllocationRecord(), ttl=0.1)


def test_the_cluster_queue_says_why_each_job_waits_on_the_page_and_in_the_api(
    client: Client, store: Store, alice: Any, bob: Any
) -> None:
    theirs = stored_job(bob, "theirs", priority=9000)
    mine = stored_job(alice, "mine", min_workers=2, max_workers=2)
    stored_job(alice, "ran", Job.State.COMPLETED)
    said = {theirs.pk: (1, "waits: theirs"), mine.pk: (2, "waits: its min 2 does not fit")}
    store.save_allocations(AllocationRecord(capacity=1, standing=said), ttl=30)
    client.force_login(alice)
    page = client.get("/").content.decode()
    item = page[page.index(f'<li data-job="{mine.pk}">') :].split("</li>")[0]
    assert "2nd in group default&#x27;s queue; waits: its min 2 does not fit" in item, item
    assert "theirs" not in page  # another user's job is not shown to her
    queue = client.get("/api/v1/cluster/queue/").json()
    assert [(q["id"], q["position"]) for q in queue] == [(mine.pk, 2)]
    assert queue[0]["reason"] == "2nd in group default's queue; waits: its min 2 does not fit"
    store.save_allocations(AllocationRecord(), ttl=0.1)


def test_the_page_shows_the_reason_the_configuration_and_a_clone_link(
    client: Client, redis_server: RedisServer, alice: Any
) -> None:
    queued = stored_job(alice, "q", epochs=7, batch_size=32, lr=0.5, min_workers=2, max_workers=3)
    client.force_login(alice)
    page = client.get(f"/jobs/{queued.pk}/").content.decode()
    assert 'id="waiting"' in page and standing.UNDECIDED.replace("'", "&#x27;") in page
    for fact in ("<dd>7</dd>", "<dd>32</dd>", "<dd>0.5</dd>", "min 2, max 3"):
        assert fact in page
    assert "epochs=7" in page and "min_workers=2" in page and "name=q+%28copy%29" in page
    assert client.get(f"/jobs/{queued.pk}/state").json()["waiting"] == standing.UNDECIDED


def test_an_ended_job_shows_its_priority_as_a_plain_value_without_slider_or_hint(
    client: Client, redis_server: RedisServer, alice: Any
) -> None:
    done = stored_job(alice, "d", Job.State.COMPLETED, priority=7000)
    queued = stored_job(alice, "q", priority=6000)
    client.force_login(alice)
    ended = client.get(f"/jobs/{done.pk}/").content.decode()
    assert re.search(r'id="priority-edit" hidden', ended)
    assert re.search(r'id="priority-fixed"[^>]*><small>Priority</small><strong>7000<', ended)
    active = client.get(f"/jobs/{queued.pk}/").content.decode()
    assert re.search(r'id="priority-fixed"[^>]* hidden>', active)
    assert not re.search(r'id="priority-edit" hidden', active)


def test_resume_moves_a_stopped_job_back_to_waiting_and_refuses_a_running_one(
    client: Client, redis_server: RedisServer, alice: Any, bob: Any
) -> None:
    stopped = stored_job(alice, "s", Job.State.STOPPED, error="x")
    running = stored_job(alice, "r", Job.State.RUNNING)
    client.force_login(alice)
    client.post(f"/jobs/{stopped.pk}/resume")
    stopped.refresh_from_db()
    assert (stopped.state, stopped.error, stopped.finished_at) == (Job.State.SUSPENDED, "", None)
    assert stopped.events.filter(kind="resumed").exists()
    client.post(f"/jobs/{running.pk}/resume")
    running.refresh_from_db()
    assert running.state == Job.State.RUNNING
    client.force_login(bob)
    assert client.post(f"/jobs/{stopped.pk}/resume").status_code == 404


def test_the_metrics_download_holds_every_record(client: Client, alice: Any) -> None:
    done = stored_job(alice, "d", Job.State.COMPLETED)
    Metric.objects.bulk_create(
        [Metric(job=done, kind="train", step=s, epoch=0, time=s, values={"loss": 1 / (s + 1)})
         for s in range(5000)]
        + [Metric(job=done, kind="test", step=4999, epoch=0, time=9, values={"test_accuracy": 1})]
    )  # fmt: skip
    client.force_login(alice)
    response = client.get(f"/jobs/{done.pk}/metrics.csv")
    rows = list(csv.reader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert rows[0] == ["kind", "step", "epoch", "time", "loss", "test_accuracy"]
    assert len(rows) == 1 + 5001
    assert rows[1][:2] == ["test", "4999"] and rows[-1][:2] == ["train", "4999"]


def test_the_jobs_list_has_model_dataset_owner_best_duration_and_no_zero_minutes(
    client: Client, alice: Any
) -> None:
    from datetime import timedelta

    from django.utils import timezone

    started = timezone.now() - timedelta(minutes=3, seconds=5)
    done = stored_job(
        alice, "done", Job.State.COMPLETED, started_at=started, finished_at=timezone.now()
    )
    Metric.objects.bulk_create(
        [Metric(job=done, kind="test", step=s, epoch=s, time=s, values={"test_accuracy": a})
         for s, a in ((1, 0.5), (2, 0.875), (3, 0.75))]
    )  # fmt: skip
    client.force_login(alice)
    page = client.get("/jobs/").content.decode()
    assert "<th" in page and ">Best accuracy<" in page and ">Owner<" in page
    assert 'data-best="0.875"' in page and "88 %" in page
    assert "3 min 5 s" in page and "just now" in page and "0 minutes" not in page
    assert "<td>alice</td>" in page


@pytest.mark.parametrize(
    ("n", "text"),
    [(0, "—"), (999, "999"), (12_345, "12,345 (12.3 k)"), (1_234_567, "1,234,567 (1.2 M)")],
)
def test_parameter_counts_read_well(n: int, text: str) -> None:
    from edtweb.dashboard.templatetags.edt import count

    assert count(n) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(None, ""), ("", ""), (44.4, "ETA 44 s"), (90, "ETA 90 s"), (2664, "ETA 44 min")],
)
def test_the_jobs_list_writes_an_eta_as_the_job_page_does(seconds: Any, text: str) -> None:
    from edtweb.dashboard.templatetags.edt import eta

    assert eta(seconds) == text


def test_admin_pages_list_jobs_datasets_and_models(client: Client, django_user_model: Any) -> None:
    root = django_user_model.objects.create_superuser("root", "", "root-pass-1")
    stored_job(root, "admin-visible")
    client.force_login(root)
    for path in (
        "/admin/training/job/",
        "/admin/datasets/dataset/",
        "/admin/registry/modeldefinition/",
    ):
        assert client.get(path).status_code == 200, path
    assert "admin-visible" in client.get("/admin/training/job/").content.decode()
