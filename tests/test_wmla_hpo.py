"""WMLA's hypersearch API (edtweb/api/wmla_hpo.py) as IBM's HPO notebooks call it: a
multipart POST of the model folder and ``data`` (a JSON string), answered by the
hypersearch's name; GET one and all, PUT (stop) and DELETE, scoped to their owner; every
rule broken a 400 at once, naming the request's own fields. Then the driver's side of such
a search (edtweb/sweeps/driver.py, edtweb/sweeps/results.py): it waits for the model's
check, hands each trial its values for config.json, reads its objective from
``$RESULT_DIR/val_dict_list.json`` and tells the best value of each (WMLA's ``metricVal``).
No learner runs here: each trial's training is played by writing its result file and
moving its job as the scheduler would (tests/test_wmla_hpo_live.py runs real ones)."""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from edtweb.api.wmla_hpo import hyper_param
from edtweb.datasets.models import Dataset
from edtweb.registry import services as registry
from edtweb.registry.models import ModelDefinition
from edtweb.sweeps import results, study
from edtweb.sweeps.driver import SweepDriver
from edtweb.sweeps.models import Sweep
from edtweb.training import services
from edtweb.training.models import Job
from scheduler.store import Store
from tests.harness.wmla_hpo import ARGS, PARAMS, SCRIPT, URL, basic, model_folder, request
from workers.learner.contract import write_config
from workers.learner.spec import JobSpec
from workers.learner.validate import validate

pytestmark = pytest.mark.django_db


def start(client: APIClient, data: Any) -> Any:
    upload = io.BytesIO(model_folder())
    upload.name = "model.modelDir.tar"
    body = {"file": upload, "data": json.dumps(data) if not isinstance(data, str) else data}
    return client.post(URL, body, format="multipart", HTTP_ACCEPT="application/json")


@pytest.fixture
def storage(tmp_path: Path, settings: Any) -> Iterator[None]:
    settings.EDT_SWEEP_STORAGE = f"sqlite:///{tmp_path / 'sweeps.sqlite3'}"
    study.storage.cache_clear()
    yield
    study.storage.cache_clear()


@pytest.fixture
def shapes(alice: Any, store: Store, storage: None) -> Dataset:
    return Dataset.objects.create(
        owner=alice, name="shapes", status=Dataset.Status.READY, format="cifar10",
        summary={"splits": {"train": {"count": 256}, "test": {"count": 64}}},
    )  # fmt: skip


# The request's hyperParams ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "entry", "fixed"),
    [
        ({"type": "Range", "dataType": "DOUBLE", "minDbVal": -3, "maxDbVal": 0, "power": 10},
         {"type": "loguniform", "low": 0.001, "high": 1.0}, None),
        ({"type": "Range", "dataType": "DOUBLE", "minDbVal": 0.01, "maxDbVal": 1.0,
          "step": "0.01"}, {"type": "uniform", "low": 0.01, "high": 1.0, "step": 0.01}, None),
        ({"type": "range", "dataType": "int", "minIntVal": 1, "maxIntVal": 14, "step": 1},
         {"type": "int", "low": 1, "high": 14, "step": 1}, None),
        ({"type": "Range", "dataType": "INT", "minIntVal": 6, "maxIntVal": 9, "power": 2},
         {"type": "choice", "choices": [64, 128, 256, 512]}, None),
        ({"type": "Discrete", "dataType": "STR", "discreateStrVal": ["sgd", "adam"]},
         {"type": "choice", "choices": ["sgd", "adam"]}, None),
        ({"type": "Discrete", "dataType": "DOUBLE", "discreteDbVal": ["0.1", 0.2]},
         {"type": "choice", "choices": [0.1, 0.2]}, None),
        ({"type": "Fix", "dataType": "INT", "fixedVal": "3"}, None, 3),
    ],
)  # fmt: skip
def test_each_kind_of_wmla_hyperparameter_becomes_a_sweep_parameter(
    raw: dict[str, Any], entry: dict[str, Any] | None, fixed: Any
) -> None:
    name, found, value, errors = hyper_param({"name": "x", **raw}, 0)
    assert (name, errors) == ("x", [])
    if entry and entry["type"] == "loguniform":
        assert found is not None and found["type"] == "loguniform"
        assert found["low"] == pytest.approx(entry["low"]) and found["high"] == entry["high"]
    else:
        assert found == entry
    assert value == fixed


# The API ---------------------------------------------------------------------------------


def test_a_notebook_starts_a_hypersearch_and_reads_it_back(
    shapes: Dataset, alice: Any, bob: Any
) -> None:
    answer = start(basic("alice"), request())
    assert answer.status_code == 200, answer.content
    name = answer.json()
    sweep = Sweep.objects.get(owner=alice)
    assert name == f"alice-hpo-{sweep.pk}" == sweep.name
    assert (sweep.state, sweep.algorithm, sweep.objective, sweep.direction) == (
        "QUEUED", "hyperband", "loss", "minimize")  # fmt: skip
    assert (sweep.max_trials, sweep.max_parallel, sweep.max_time, sweep.seed) == (4, 2, 0.0, 7)
    assert sweep.space == {
        "learning_rate": {"type": "choice", "choices": [1e-05, 0.1]},
        "hidden": {"type": "choice", "choices": [16, 32]},
    }
    assert (sweep.max_workers, sweep.trial_steps, sweep.min_resource) == (2, 2, 1)
    assert sweep.wmla["config"] == {"epochs": 2}  # Hyperband's resource, in every config.json
    assert sweep.wmla["argv"] == ["--some-option", "3"]  # what the script's argv holds
    assert sweep.wmla["script_decides"] == ["epochs", "batch_size", "lr"]
    model = sweep.model_definition
    assert model is not None and model.status == ModelDefinition.Status.CHECKING
    checked = json.loads((model.root / registry.CHECK_CONFIG).read_text())
    assert checked == {"learning_rate": 1e-05, "hidden": 16, "epochs": 2}

    client = basic("alice")
    shown = client.get(f"{URL}/{name}", HTTP_ACCEPT="application/json").json()
    assert (shown["hpoName"], shown["state"], shown["progress"]) == (name, "SUBMITTED", "0/4")
    assert (shown["running"], shown["complete"], shown["failed"]) == (0, 0, 0)
    assert shown["experiments"] == [] and shown["best"] is None
    assert shown["creator"] == "alice" and shown["duration"] == "00:00:00"
    listed = client.get(URL).json()
    assert [item["hpoName"] for item in listed] == [name]
    assert client.get(f"{URL}/{name}/").status_code == 200  # WMLA clients add a slash

    # Another user: nothing of it, exactly as for one that does not exist.
    other = basic("bob")
    assert other.get(URL).json() == []
    for method in ("get", "put", "delete"):
        refused = getattr(other, method)(f"{URL}/{name}")
        assert refused.status_code == 404, (method, refused.content)
        assert refused.json()["error"] == f"no hypersearch {name}: it does not exist or is not " \
            "yours"  # fmt: skip
    assert other.delete(URL).json() == {"deleted": [], "kept": []}

    # Stop (PUT), then delete; a running one is kept.
    stopped = client.put(f"{URL}/{name}")
    assert stopped.status_code == 200 and stopped.json()["state"] == "STOPPED"
    again = client.put(f"{URL}/{name}")
    assert again.status_code == 409 and "has ended (STOPPED)" in again.json()["error"]
    second = start(client, request(hpoName="second-try")).json()
    assert second == "second-try"
    taken = start(client, request(hpoName="second-try"))
    assert taken.status_code == 400, taken.content
    assert "you have a hypersearch named second-try already" in str(taken.json()["fields"])
    assert client.delete(f"{URL}/second-try").status_code == 409  # running: stop it first
    assert client.delete(URL).json() == {"deleted": [name], "kept": ["second-try"]}
    assert client.get(f"{URL}/{name}").status_code == 404


def test_bad_input_is_a_400_at_create_naming_each_field_and_nothing_is_made(
    shapes: Dataset, alice: Any
) -> None:
    client = basic("alice")
    empty = dict(PARAMS[1], name="empty", type="Range", dataType="INT", minIntVal=4, maxIntVal=4)
    inverted = {"name": "inverted", "type": "Range", "dataType": "DOUBLE", "minDbVal": 0.5,
                "maxDbVal": 0.1}  # fmt: skip
    words = {"name": "words", "type": "Range", "dataType": "STR"}
    answer = start(client, request(hyperParams=[empty, inverted, words], maxJobNum=0,
                                   objective="lowest", algorithm="Annealing"))  # fmt: skip
    assert answer.status_code == 400, answer.content
    fields = answer.json()["fields"]
    assert fields["hyperParams"] == [
        "empty: the range is empty or inverted: minIntVal 4 >= maxIntVal 4",
        "inverted: the range is empty or inverted: minDbVal 0.5 >= maxDbVal 0.1",
        "words: a Range is of numbers: give dataType DOUBLE or INT, or type Discrete with "
        "discreateStrVal",
    ]
    assert fields["algoDef.maxJobNum"] == [
        "the budget of trials must be a whole number from 1 to 5000, or -1 for as many as 5000;"
        " not 0"
    ]
    assert fields["algoDef.objective"] == ["minimize or maximize, not 'lowest'"]
    assert "one of Random, Bayesian, Tpe, Hyperband" in fields["algoDef.algorithm"][0]
    # The sweep's own rules, under the request's names; the args' job values too.
    huge = start(client, request(maxRunTime=0, hyperParams=[]))
    assert set(huge.json()["fields"]) == {"algoDef.maxRunTime", "hyperParams"}
    batch = start(client, {**request(), "modelSpec": {"args": ARGS + " --batch-size 100000"}})
    assert batch.status_code == 400 and "batch_size" in str(batch.json()["fields"]), batch.json()
    unknown = start(client, {**request(), "modelSpec": {"args": ARGS.replace("shapes", "nope")}})
    assert unknown.status_code == 400 and "no READY dataset of yours" in unknown.json()["error"]
    assert start(client, "{not json").status_code == 400
    assert not Sweep.objects.exists() and not ModelDefinition.objects.exists()


# The driver's side -----------------------------------------------------------------------


def played(job: Job, entries: list[dict[str, Any]] | str) -> None:
    """The trial's script wrote its val_dict_list.json (as a learner, in its $RESULT_DIR)."""
    folder = job.workdir / "result"
    folder.mkdir(parents=True, exist_ok=True)
    text = entries if isinstance(entries, str) else json.dumps(entries)
    (folder / results.RESULT_FILE).write_text(text)


def test_the_driver_waits_for_the_check_then_trials_get_config_json_and_report_from_the_file(
    shapes: Dataset, alice: Any, store: Store
) -> None:
    name = start(basic("alice"), request(algorithm="Random", maxJobNum=2)).json()
    sweep = Sweep.objects.get(name=name)
    driver = SweepDriver(store)
    driver.round()
    sweep.refresh_from_db()
    assert sweep.state == Sweep.State.QUEUED and not Job.objects.exists()  # being checked
    ModelDefinition.objects.filter(pk=sweep.model_definition_id).update(status="VALID")
    driver.round()
    sweep.refresh_from_db()
    assert sweep.state == Sweep.State.RUNNING
    first, second = Job.objects.filter(sweep=sweep).order_by("trial_number")
    for job in (first, second):
        spec = JobSpec.load(job.spec_path)
        assert spec.hparams == {**job.hparams, "epochs": 2}  # its config.json's
        assert (spec.argv, spec.script_decides) == (["--some-option", "3"],
                                                    ["epochs", "batch_size", "lr"])  # fmt: skip
        assert job.max_workers == 2 and set(job.hparams) == {"learning_rate", "hidden"}
        assert job.events.filter(kind="wmla").exists()  # an exec, as the execs API shows it

    # A half-written file is one not there yet; the next value is reported each round.
    services.start_job(first.pk)
    played(first, '[{"steps": 1, "loss": 2.')
    driver.round()
    first.refresh_from_db()
    assert first.objective_step is None
    played(first, [{"steps": 1, "loss": 2.0, "accuracy": 0.1},
                   {"steps": 2, "loss": 1.5, "accuracy": 0.3}])  # fmt: skip
    driver.round()
    first.refresh_from_db()
    assert (first.objective_step, first.objective) == (1, 2.0)
    # It completes: its objective is the best value it wrote (WMLA's metricVal).
    played(first, [{"steps": 1, "loss": 2.0}, {"steps": 2, "loss": 1.5}, {"steps": 3, "loss": 1.7}])
    assert services.complete_job(first.pk)
    driver.round()
    first.refresh_from_db()
    assert (first.trial_state, first.objective) == ("COMPLETE", 1.5)
    # One that never writes the objective fails, and the search with it, saying so.
    services.start_job(second.pk)
    played(second, [{"steps": 1, "accuracy": 0.2}])
    assert services.complete_job(second.pk)
    driver.round()
    second.refresh_from_db()
    sweep.refresh_from_db()
    assert second.trial_state == "FAIL" and sweep.state == Sweep.State.FAILED
    assert sweep.error == ("the objective 'loss' was never written to "
                           "$RESULT_DIR/val_dict_list.json; it holds: accuracy")  # fmt: skip

    shown = basic("alice").get(f"{URL}/{name}").json()
    assert (shown["state"], shown["progress"], shown["failed"]) == ("FAILED", "2/2", 1)
    best = shown["best"]
    assert (best["id"], best["metricVal"], best["state"]) == (0, 1.5, "FINISHED")
    assert best["hyperParams"] == [
        {"name": "learning_rate", "dataType": "double",
         "fixedVal": str(first.hparams["learning_rate"]), "userDefined": False},
        {"name": "hidden", "dataType": "int", "fixedVal": str(first.hparams["hidden"]),
         "userDefined": False},
    ]  # fmt: skip
    assert [e["trialState"] for e in shown["experiments"]] == ["COMPLETE", "FAIL"]


def test_a_model_that_fails_its_check_fails_the_search_with_the_checks_error(
    shapes: Dataset, store: Store
) -> None:
    name = start(basic("alice"), request()).json()
    sweep = Sweep.objects.get(name=name)
    ModelDefinition.objects.filter(pk=sweep.model_definition_id).update(
        status="INVALID", error="loading main.py failed: NameError: name 'x' is not defined",
        error_line='File "main.py", line 3',
    )  # fmt: skip
    SweepDriver(store).round()
    shown = basic("alice").get(f"{URL}/{name}").json()
    assert shown["state"] == "FAILED"
    assert shown["error"] == ("the model check failed: loading main.py failed: NameError: name "
                              "'x' is not defined (File \"main.py\", line 3)")  # fmt: skip


def test_the_result_file_is_read_with_care(tmp_path: Path, settings: Any, alice: Any) -> None:
    settings.EDT_DATA_DIR = tmp_path
    job = Job.objects.create(owner=alice, name="t")
    assert results.read(job, "loss") == results.Results(found=False)
    played(job, [{"loss": 3.0}, {"loss": 2.0, "acc": 1}, {"steps": 7, "loss": 2.5}])
    found = results.read(job, "loss")
    assert found.points == ((1, 3.0), (2, 2.0), (7, 2.5)) and found.keys == ("loss", "acc")
    assert (found.best("minimize"), found.best("maximize")) == (2.0, 3.0)
    played(job, [{"steps": 1, "loss": "low"}])
    assert results.read(job, "loss").error == ("val_dict_list.json: 'loss' is 'low' in entry 1, "
                                               "not a number")  # fmt: skip
    target = job.workdir / "result" / results.RESULT_FILE
    target.unlink()
    (tmp_path / "secret.json").write_text('[{"loss": 0.0}]')
    os.symlink(tmp_path / "secret.json", target)  # the user's code points it elsewhere
    assert results.read(job, "loss") == results.Results(found=False)


def test_a_trial_and_the_model_check_find_config_json_where_wmla_puts_it(tmp_path: Path) -> None:
    written = write_config(tmp_path, {"learning_rate": 0.1, "hidden": 16, "epochs": 2})
    assert json.loads(written.read_text()) == {"learning_rate": 0.1, "hidden": 16, "epochs": 2}
    checked = validate(SCRIPT, config={"learning_rate": 1e-5, "hidden": 8, "epochs": 1})
    assert checked.ok and checked.style == "wmla", checked
    assert "config.json: learning_rate 1e-05 hidden 8 epochs 1" in checked.log
    without = validate(SCRIPT)
    assert not without.ok and "No such file or directory: 'config.json'" in without.error
