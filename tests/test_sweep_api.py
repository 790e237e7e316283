"""Sweeps over the REST API: create (every rule broken is a 400 naming its field), list, show,
stop, resume, clone, each scoped to its owner (another user's sweep is a 404, exactly as one
that does not exist), and jobs compared side by side."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from edtweb.datasets.models import Dataset
from edtweb.registry.models import ModelDefinition
from edtweb.sweeps import study
from edtweb.sweeps.driver import SweepDriver
from edtweb.training.models import Job
from scheduler.store import Store
from tests.harness.api import token_client
from tests.harness.processes import PROJECT_DIR

pytestmark = pytest.mark.django_db
API = "/api/v1/"
SPACE = {"lr": {"type": "loguniform", "low": 0.001, "high": 0.3},
         "width": {"type": "int", "low": 8, "high": 64, "step": 8}}  # fmt: skip


@pytest.fixture
def owned(alice: Any, store: Store, tmp_path: Path, settings: Any) -> dict[str, Any]:
    settings.EDT_SWEEP_STORAGE = f"sqlite:///{tmp_path / 'sweeps.sqlite3'}"
    study.storage.cache_clear()
    dataset = Dataset.objects.create(
        owner=alice, name="shapes", status=Dataset.Status.READY, format="cifar10",
        summary={"splits": {"train": {"count": 256}, "test": {"count": 64}}},
    )  # fmt: skip
    model = ModelDefinition.objects.create(owner=alice, name="mlp", entry="mlp.py",
                                           style="native", status="VALID")  # fmt: skip
    model.entry_path.parent.mkdir(parents=True, exist_ok=True)
    model.entry_path.write_bytes((PROJECT_DIR / "examples" / "mlp.py").read_bytes())
    return {"model": model.pk, "dataset": dataset.pk, "store": store}


def body(owned: dict[str, Any], **changes: Any) -> dict[str, Any]:
    asked = {"model": owned["model"], "dataset": owned["dataset"], "space": SPACE,
             "objective": "loss", "direction": "minimize", "algorithm": "asha",
             "max_trials": 16, "max_parallel": 4, "epochs": 3, "name": "widths"}  # fmt: skip
    return {**asked, **changes}


def test_create_show_list_stop_resume_and_clone(owned: dict[str, Any], alice: Any) -> None:
    api = token_client(alice)
    made = api.post(API + "sweeps/", body(owned), format="json")
    assert made.status_code == 201, made.json()
    sweep = made.json()
    assert (sweep["state"], sweep["algorithm"], sweep["space"]) == ("QUEUED", "asha", SPACE)
    assert sweep["progress"] == {"done": 0, "total": 16, "running": 0, "completed": 0,
                                 "pruned": 0, "failed": 0, "fraction": 0.0}  # fmt: skip
    assert sweep["best"] is None and sweep["trials"] == [] and sweep["owner"] == "alice"
    pk = sweep["id"]
    SweepDriver(owned["store"]).round()  # the driver asks for its first trials
    shown = api.get(f"{API}sweeps/{pk}/").json()
    assert shown["state"] == "RUNNING" and shown["progress"]["running"] == 4
    assert [t["number"] for t in shown["trials"]] == [0, 1, 2, 3]
    assert all(set(t["hparams"]) == {"lr", "width"} for t in shown["trials"])
    listed = api.get(API + "sweeps/").json()
    assert [s["id"] for s in listed["results"]] == [pk] and listed["results"][0]["progress"][
        "running"] == 4  # fmt: skip
    assert api.get(API + "sweeps/?state=stopped").json()["results"] == []
    assert api.get(API + "sweeps/?state=sleepy").status_code == 400

    stopped = api.post(f"{API}sweeps/{pk}/stop/")
    assert stopped.status_code == 200 and stopped.json()["state"] == "STOPPED"
    assert {t["state"] for t in stopped.json()["trials"]} == {"STOPPED"}
    again = api.post(f"{API}sweeps/{pk}/stop/")
    assert again.status_code == 409 and "already ended (STOPPED)" in again.json()["error"]
    resumed = api.post(f"{API}sweeps/{pk}/resume/")
    assert resumed.status_code == 200 and resumed.json()["state"] == "RUNNING"
    assert {t["state"] for t in resumed.json()["trials"]} == {"SUSPENDED"}
    twice = api.post(f"{API}sweeps/{pk}/resume/")
    assert twice.status_code == 409 and "only a STOPPED sweep resumes" in twice.json()["error"]

    clone = api.post(f"{API}sweeps/{pk}/clone/", {"name": "again"}, format="json")
    assert clone.status_code == 201, clone.json()
    copied = clone.json()
    assert copied["id"] != pk and (copied["name"], copied["state"]) == ("again", "QUEUED")
    same = ("space", "objective", "direction", "algorithm", "max_trials", "max_parallel",
            "epochs", "batch_size", "lr", "max_workers")  # fmt: skip
    assert {k: copied[k] for k in same} == {k: sweep[k] for k in same}


def test_another_user_gets_404_on_every_sweep_of_mine(
    owned: dict[str, Any], alice: Any, bob: Any
) -> None:
    pk = token_client(alice).post(API + "sweeps/", body(owned), format="json").json()["id"]
    bob_api = token_client(bob)
    for method, path in (("get", ""), ("post", "stop/"), ("post", "resume/"), ("post", "clone/")):
        answer = getattr(bob_api, method)(f"{API}sweeps/{pk}/{path}", format="json")
        assert answer.status_code == 404, (path, answer.content)
        assert answer.json()["error"] == f"no sweep {pk}: it does not exist or is not yours"
    assert bob_api.get(API + "sweeps/").json()["results"] == []
    # nor may he sweep over my model and dataset
    his = bob_api.post(API + "sweeps/", body(owned), format="json")
    assert his.status_code == 400 and "among yours" in str(his.json()["fields"]["model"])


def test_a_sweep_that_breaks_the_rules_is_a_400_naming_each_field(
    owned: dict[str, Any], alice: Any
) -> None:
    api = token_client(alice)
    bad = body(owned, space={"lr": {"type": "uniform", "low": 0.3, "high": 0.1},
                             "width": {"type": "loguniform", "low": 0, "high": 8}},
               direction="lower", max_trials=0, max_workers=0)  # fmt: skip
    answer = api.post(API + "sweeps/", bad, format="json")
    assert answer.status_code == 400
    fields = answer.json()["fields"]
    assert set(fields) == {"space", "direction", "max_trials", "max_workers"}, fields
    assert fields["space"] == ["lr: the range is empty or inverted: low 0.3 >= high 0.1",
                               "width: a log scale needs low > 0, not 0"]  # fmt: skip
    assert fields["direction"] == ["must be minimize or maximize, not 'lower'"]
    assert fields["max_trials"] == ["budget must be a whole number from 1 to 5000, not 0"]
    empty = api.post(API + "sweeps/", body(owned, space={}), format="json").json()
    assert "the search space is empty" in empty["fields"]["space"][0]
    # A WMLA-style script gets its values in config.json: any name, the platform's too.
    ModelDefinition.objects.filter(pk=owned["model"]).update(style="wmla")
    epochs = {**SPACE, "epochs": {"type": "int", "low": 1, "high": 3}}
    wmla = api.post(API + "sweeps/", body(owned, space=epochs), format="json")
    assert wmla.status_code == 201, wmla.json()
    native = ModelDefinition.objects.filter(pk=owned["model"]).update(style="native")
    refused = api.post(API + "sweeps/", body(owned, space=epochs), format="json").json()
    assert native and "epochs: the platform's own setting" in refused["fields"]["space"][0]
    ModelDefinition.objects.filter(pk=owned["model"]).update(status="CHECKING")
    checking = api.post(API + "sweeps/", body(owned), format="json").json()
    assert "is CHECKING, not VALID" in checking["fields"]["model"][0]


def test_jobs_compare_side_by_side_with_their_differences(
    owned: dict[str, Any], alice: Any, bob: Any
) -> None:
    api = token_client(alice)
    # seeded: its first two trials' widths differ (8 widths: unseeded, 1 run in 8 drew one
    # width twice)
    api.post(API + "sweeps/", body(owned, max_parallel=2, lr=0.05, seed=3), format="json")
    SweepDriver(owned["store"]).round()
    first, second = Job.objects.filter(owner=alice).order_by("trial_number")
    assert first.hparams["width"] != second.hparams["width"]
    answer = api.get(f"{API}jobs/compare/?ids={first.pk},{second.pk}")
    assert answer.status_code == 200, answer.content
    compared = answer.json()
    assert [j["id"] for j in compared["jobs"]] == [first.pk, second.pk]
    assert compared["jobs"][0]["config"]["width"] == first.hparams["width"]
    assert compared["jobs"][0]["config"]["model"] == "mlp"
    assert {"lr", "width"} <= set(compared["differs"]) and "epochs" not in compared["differs"]
    assert compared["final_keys"][:4] == ["loss", "accuracy", "test_loss", "test_accuracy"]
    assert token_client(bob).get(f"{API}jobs/compare/?ids={first.pk}").status_code == 404
    assert api.get(f"{API}jobs/compare/?ids=a,b").status_code == 400
    assert api.get(f"{API}jobs/compare/").status_code == 400
