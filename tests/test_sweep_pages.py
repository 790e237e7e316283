"""The sweep pages (edtweb/sweeps/views.py) through Django's test client: New sweep (its
space as rows; every rule broken shown beside its field), a sweep's page with its trials
and best trial, whose model downloads as any job's; its state and curves polled; Stop,
Resume and Clone; the compare page of jobs picked on the jobs list, with what differs
marked, and its CSV. Every one of them is its owner's: another user gets a 404, exactly
as for a sweep or job that does not exist."""

from __future__ import annotations

import csv
import io
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from edtweb.sweeps.driver import SweepDriver
from edtweb.sweeps.models import Sweep
from edtweb.training import services
from edtweb.training.models import Job
from scheduler.store import Store
from tests.harness.sweeps import own_storage, sweep_inputs

pytestmark = pytest.mark.django_db


@pytest.fixture
def storage(tmp_path: Path, settings: Any) -> Iterator[None]:
    with own_storage(tmp_path, settings):
        yield


@pytest.fixture
def owned(alice: Any, store: Store, storage: None) -> dict[str, Any]:
    return {**sweep_inputs(alice), "store": store}


def logged_in(user: str) -> Client:
    client = Client()
    assert client.login(username=user, password=f"{user}-pass-1")
    return client


def form(owned: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """The New sweep form as a person fills it in: two rows of the space."""
    fields = {"name": "lrs", "model": owned["model"].pk, "dataset": owned["dataset"].pk,
              "objective": "loss", "direction": "minimize", "algorithm": "random",
              "max_trials": 3, "max_parallel": 2, "max_minutes": 0, "epochs": 1,
              "batch_size": 32, "lr": 0.01, "max_workers": 1, "seed": 0,
              "p_name": ["lr", "opt"], "p_type": ["loguniform", "choice"],
              "p_low": ["0.001", ""], "p_high": ["0.1", ""], "p_step": ["", ""],
              "p_choices": ["", "sgd, adam"]}  # fmt: skip
    return {**fields, **changes}


def test_new_sweep_from_the_form_then_its_page_state_stop_resume_and_clone(
    owned: dict[str, Any], alice: Any
) -> None:
    client = logged_in("alice")
    page = client.get("/sweeps/new/")
    assert page.status_code == 200 and b'name="p_name"' in page.content
    made = client.post("/sweeps/new/", form(owned))
    assert made.status_code == 302, made.content.decode()[-3000:]
    sweep = Sweep.objects.get(owner=alice)
    assert made["Location"] == f"/sweeps/{sweep.pk}/"
    assert sweep.space == {"lr": {"type": "loguniform", "low": 0.001, "high": 0.1},
                           "opt": {"type": "choice", "choices": ["sgd", "adam"]}}  # fmt: skip
    assert (sweep.max_trials, sweep.max_parallel, sweep.epochs, sweep.batch_size) == (3, 2, 1, 32)
    SweepDriver(owned["store"]).round()  # its first two trials are asked
    shown = client.get(f"/sweeps/{sweep.pk}/")
    text = shown.content.decode()
    assert shown.status_code == 200 and "lrs" in text and 'id="chart-parcoords"' in text
    assert text.count('class="pick"') == 2 and "vendor/plotly-gl2d/plotly-gl2d.min.js" in text
    state = client.get(f"/sweeps/{sweep.pk}/state").json()
    assert (state["state"], state["running"], state["total"]) == ("RUNNING", 2, 3)
    assert [t["number"] for t in state["trials"]] == [0, 1]
    assert set(state["trials"][0]["hparams"]) == {"lr", "opt"} and state["best"] is None
    curves = client.get(f"/sweeps/{sweep.pk}/curves").json()["curves"]
    assert [c["trial"] for c in curves] == [0, 1] and curves[0]["loss"] == []

    assert client.post(f"/sweeps/{sweep.pk}/stop").status_code == 302
    sweep.refresh_from_db()
    assert sweep.state == Sweep.State.STOPPED
    assert client.post(f"/sweeps/{sweep.pk}/resume").status_code == 302
    sweep.refresh_from_db()
    assert sweep.state == Sweep.State.RUNNING
    clone = client.get(f"/sweeps/new/?from={sweep.pk}").content.decode()
    assert "Clone of lrs" in clone and 'value="lrs (clone)"' in clone
    assert 'value="sgd, adam"' in clone and 'value="0.001"' in clone
    listed = client.get("/sweeps/").content.decode()
    assert f'href="/sweeps/{sweep.pk}/"' in listed and "2 running" in listed


def test_the_form_shows_each_rule_broken_beside_its_field(owned: dict[str, Any]) -> None:
    client = logged_in("alice")
    bad = form(owned, p_name=["lr", "opt"], p_low=["0.1", ""], p_high=["0.01", ""],
               p_choices=["", ""], max_trials=0)  # fmt: skip
    answer = client.post("/sweeps/new/", bad)
    text = answer.content.decode()
    assert answer.status_code == 200 and not Sweep.objects.exists()
    assert "lr: the range is empty or inverted: low 0.1 &gt;= high 0.01" in text
    assert "opt: choices must be a non-empty list, not []" in text
    assert "budget must be a whole number from 1 to 5000, not 0" in text
    assert 'value="0.1"' in text  # what was typed stays in its row


def test_the_best_trials_model_downloads_from_the_sweep_page(
    owned: dict[str, Any], alice: Any
) -> None:
    client = logged_in("alice")
    client.post("/sweeps/new/", form(owned, max_trials=1, max_parallel=1))
    sweep = Sweep.objects.get(owner=alice)
    driver = SweepDriver(owned["store"])
    driver.round()
    [job] = Job.objects.filter(sweep=sweep)
    services.start_job(job.pk)
    services.store_metrics(job.pk, [{"type": "train", "step": 1, "epoch": 0, "time": time.time(),
                                     "loss": 1.25, "accuracy": 0.5}])  # fmt: skip
    (job.workdir / "model.pt").write_bytes(b"weights")  # as rank 0 leaves it
    assert services.complete_job(job.pk)
    driver.round()
    state = client.get(f"/sweeps/{sweep.pk}/state").json()
    assert state["state"] == "COMPLETED" and state["best"]["job"] == job.pk
    link = state["best"]["download"]
    assert link == f"/jobs/{job.pk}/files/model.pt"
    assert f'href="{link}"' in client.get(f"/sweeps/{sweep.pk}/").content.decode()
    got = client.get(link)
    assert got.status_code == 200 and b"".join(got.streaming_content) == b"weights"
    curves = client.get(f"/sweeps/{sweep.pk}/curves").json()["curves"]
    assert curves[0]["loss"][0][0] == 1 and curves[0]["loss"][0][2] == 1.25


def test_compare_shows_what_differs_and_exports_csv(owned: dict[str, Any], alice: Any) -> None:
    client = logged_in("alice")
    model, dataset = owned["model"], owned["dataset"]
    paths = {"model_definition": model, "dataset": dataset, "model_path": str(model.entry_path),
             "data_path": str(dataset.data_dir), "epochs": 2}  # fmt: skip
    first = services.submit_job(alice, name="a", lr=0.01, **paths)
    second = services.submit_job(alice, name="b", lr=0.05, **paths)
    listed = client.get("/jobs/").content.decode()
    assert f'class="pick" value="{first.pk}"' in listed and 'id="compare-jobs"' in listed
    page = client.get(f"/compare/?ids={first.pk},{second.pk}")
    text = page.content.decode()
    assert page.status_code == 200 and "Compare 2 jobs" in text
    assert '<tr data-key="lr" class="differs">' in text
    assert '<tr data-key="epochs">' in text  # the same in both: not marked
    sheet = client.get(f"/compare.csv?ids={first.pk},{second.pk}")
    named = f'attachment; filename="compare-{first.pk}-{second.pk}.csv"'
    assert sheet["Content-Disposition"] == named
    rows = list(csv.reader(io.StringIO(sheet.content.decode())))
    assert rows[0][:3] == ["id", "name", "state"] and "final loss" in rows[0]
    lr = rows[0].index("lr")
    assert [r[lr] for r in rows[1:]] == ["0.01", "0.05"]
    curves = client.get(f"/compare/curves?ids={first.pk},{second.pk}").json()["curves"]
    assert [c["job"] for c in curves] == [first.pk, second.pk]
    assert client.get("/compare/?ids=").status_code == 404
    assert client.get("/compare/?ids=x").status_code == 404


def test_another_user_gets_404_on_every_sweep_page_and_comparison_of_mine(
    owned: dict[str, Any], alice: Any, bob: Any
) -> None:
    mine = logged_in("alice")
    mine.post("/sweeps/new/", form(owned))
    sweep = Sweep.objects.get(owner=alice)
    SweepDriver(owned["store"]).round()
    job = Job.objects.filter(sweep=sweep).first()
    assert job is not None
    other = logged_in("bob")
    for url in (f"/sweeps/{sweep.pk}/", f"/sweeps/{sweep.pk}/state",
                f"/sweeps/{sweep.pk}/curves", f"/sweeps/new/?from={sweep.pk}",
                f"/compare/?ids={job.pk}", f"/compare.csv?ids={job.pk}",
                f"/compare/curves?ids={job.pk}", f"/jobs/{job.pk}/files/model.pt"):  # fmt: skip
        assert other.get(url).status_code == 404, url
    for url in (f"/sweeps/{sweep.pk}/stop", f"/sweeps/{sweep.pk}/resume"):
        assert other.post(url).status_code == 404, url
    sweep.refresh_from_db()
    assert sweep.state == Sweep.State.RUNNING  # his stop did nothing
    assert f"/sweeps/{sweep.pk}/" not in other.get("/sweeps/").content.decode()
    # nor may he sweep over my model and dataset: they are not among his choices
    his = other.post("/sweeps/new/", form(owned))
    assert his.status_code == 200 and Sweep.objects.count() == 1
    assert "Select a valid choice" in his.content.decode()
    # and without logging in, every page sends to the login page
    for url in ("/sweeps/", f"/sweeps/{sweep.pk}/", f"/compare/?ids={job.pk}"):
        assert Client().get(url).status_code == 302, url
