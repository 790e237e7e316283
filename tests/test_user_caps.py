"""Each user's caps (edtweb/usercaps.py), set by an admin in the settings: sweeps queued or
running, trials in flight over all of a user's sweeps, jobs waiting in the queue. Past one,
a clear 4xx naming the cap and the setting that raises it; the sweep driver starts no trial
past a user's cap, and the others' work is not counted against them."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from edtweb.sweeps import services as sweeps
from edtweb.sweeps.driver import SweepDriver
from edtweb.sweeps.models import Sweep
from edtweb.training import services
from edtweb.training.models import Job
from scheduler.store import Store
from tests.harness.api import token_client
from tests.harness.sweeps import own_storage, sweep_inputs

pytestmark = pytest.mark.django_db
API = "/api/v1/"
SPACE = {"lr": {"type": "loguniform", "low": 1e-3, "high": 0.3}}


@pytest.fixture
def inputs(alice: Any, bob: Any, store: Store, tmp_path: Path, settings: Any) -> Any:
    """Alice's and Bob's datasets and models, a study storage of the test's own."""
    with own_storage(tmp_path, settings):
        yield {"alice": sweep_inputs(alice), "bob": sweep_inputs(bob), "store": store}


def sweep_body(mine: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {"model": mine["model"].pk, "dataset": mine["dataset"].pk, "space": SPACE,
            "objective": "loss", "max_trials": 8, **changes}  # fmt: skip


def job_body(mine: dict[str, Any]) -> dict[str, Any]:
    return {"model": mine["model"].pk, "dataset": mine["dataset"].pk, "epochs": 1}


def test_sweeps_queued_or_running_are_capped_per_user(inputs: Any, settings: Any) -> None:
    settings.EDT_USER_MAX_SWEEPS = 2
    alice, bob = token_client(inputs["alice"]["owner"]), token_client(inputs["bob"]["owner"])
    made = [alice.post(API + "sweeps/", sweep_body(inputs["alice"]), format="json")
            for _ in range(2)]  # fmt: skip
    assert [m.status_code for m in made] == [201, 201]
    third = alice.post(API + "sweeps/", sweep_body(inputs["alice"]), format="json")
    assert third.status_code == 429
    assert third.json() == {
        "error": "you have 2 sweeps queued or running, the most one user may have "
        "(EDT_USER_MAX_SWEEPS=2): stop one or wait for one to end, or ask an admin to raise "
        "EDT_USER_MAX_SWEEPS",
        "cap": "EDT_USER_MAX_SWEEPS",
        "limit": 2,
    }
    clone = alice.post(f"{API}sweeps/{made[0].json()['id']}/clone/", {}, format="json")
    assert clone.status_code == 429, "a clone is a new sweep too"
    assert bob.post(API + "sweeps/", sweep_body(inputs["bob"]), format="json").status_code == 201
    assert alice.post(f"{API}sweeps/{made[0].json()['id']}/stop/").status_code == 200
    again = alice.post(API + "sweeps/", sweep_body(inputs["alice"]), format="json")
    assert again.status_code == 201, "a stopped sweep leaves room"
    settings.EDT_USER_MAX_SWEEPS = 0  # no cap
    assert (
        alice.post(API + "sweeps/", sweep_body(inputs["alice"]), format="json").status_code == 201
    )


def test_trials_in_flight_are_capped_over_a_users_sweeps(inputs: Any, settings: Any) -> None:
    settings.EDT_USER_MAX_TRIALS = 3
    alice = token_client(inputs["alice"]["owner"])
    wide = alice.post(API + "sweeps/", sweep_body(inputs["alice"], max_parallel=4), format="json")
    assert wide.status_code == 400
    assert wide.json()["fields"] == {"max_parallel": [
        "at most 3: the trials one user may have in flight at once (EDT_USER_MAX_TRIALS=3); "
        "ask an admin to raise it"]}  # fmt: skip
    first, second = (
        alice.post(API + "sweeps/", sweep_body(inputs["alice"], max_parallel=2), format="json")
        for _ in range(2)
    )
    bobs = sweeps.create_sweep(inputs["bob"]["owner"], inputs["bob"]["model"],
                               inputs["bob"]["dataset"], {**sweep_body(inputs["bob"]),
                                                          "max_parallel": 3})  # fmt: skip
    driver = SweepDriver(inputs["store"])
    driver.round()
    in_flight = Job.objects.filter(owner=inputs["alice"]["owner"], state__in=Job.ACTIVE)
    assert in_flight.count() == 3, "two sweeps of two at once, three trials of Alice's at most"
    assert Job.objects.filter(sweep=bobs).count() == 3, "Bob's trials are his own"
    driver.round()
    assert in_flight.count() == 3, "no trial past the cap in a later round either"
    ended = in_flight.order_by("pk").first()
    assert ended is not None and services.start_job(ended.pk)
    record = {"type": "train", "step": 1, "epoch": 0, "time": time.time(), "loss": 0.5}
    services.store_metrics(ended.pk, [record])
    assert services.complete_job(ended.pk)
    driver.round()
    assert in_flight.count() == 3, "one ended, one more starts"
    for sweep in (first.json()["id"], second.json()["id"]):
        assert Sweep.objects.get(pk=sweep).state == Sweep.State.RUNNING


def test_queued_jobs_are_capped_per_user(inputs: Any, settings: Any) -> None:
    settings.EDT_USER_MAX_QUEUED_JOBS = 2
    alice, bob = token_client(inputs["alice"]["owner"]), token_client(inputs["bob"]["owner"])
    made = [alice.post(API + "jobs/", job_body(inputs["alice"]), format="json") for _ in range(2)]
    assert [m.status_code for m in made] == [201, 201], made[0].content
    third = alice.post(API + "jobs/", job_body(inputs["alice"]), format="json")
    assert third.status_code == 429 and third.json()["cap"] == "EDT_USER_MAX_QUEUED_JOBS"
    assert third.json()["error"] == (
        "you have 2 jobs waiting in the queue, the most one user may have "
        "(EDT_USER_MAX_QUEUED_JOBS=2): wait for one to start, or stop one, or ask an admin to "
        "raise EDT_USER_MAX_QUEUED_JOBS"
    )
    assert bob.post(API + "jobs/", job_body(inputs["bob"]), format="json").status_code == 201
    assert services.start_job(made[0].json()["id"])  # one starts: it waits no more
    assert alice.post(API + "jobs/", job_body(inputs["alice"]), format="json").status_code == 201


def test_the_train_page_says_the_queue_cap(inputs: Any, settings: Any, client: Any) -> None:
    settings.EDT_USER_MAX_QUEUED_JOBS = 1
    alice = inputs["alice"]
    client.force_login(alice["owner"])
    form = {"model": alice["model"].pk, "dataset": alice["dataset"].pk, "epochs": 1,
            "batch_size": 32, "max_workers": 1, "min_workers": 1, "priority": 5000,
            "checkpoint_every": 1, "lr": 0.01, "max_micro_batch": 0, "precision": "fp32",
            "batch_min": 0, "batch_max": 0, "team": ""}  # fmt: skip
    assert client.post("/train/", form).status_code == 302
    refused = client.post("/train/", form)
    assert refused.status_code == 429
    assert "EDT_USER_MAX_QUEUED_JOBS=1" in refused.content.decode()
    assert Job.objects.filter(owner=alice["owner"]).count() == 1
