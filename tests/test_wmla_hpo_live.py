"""A WMLA hypersearch against the run's live EDT (``manage.py edt_run``: web, scheduler,
metrics consumer, sweep driver, 2 CPU slots; tests/harness/stack.py), driven as IBM's
"HyperParameter Tuning with Elastic Distributed Training" notebook drives WMLA: requests
with HTTP basic auth, the model folder packed with tarfile, the request as ``data``; then
its state polled until it has ended.

The model (tests/models/wmla_hpo/main.py) is written as that notebook asks: it reads its
values from config.json in its working directory and writes its test loss to
``$RESULT_DIR/val_dict_list.json`` after each evaluation. Hyperband over 2 epochs (WMLA's
ResourceName/ResourceValue) stops a trial whose loss after its first epoch is behind; the
sampler's seed is chosen here so that a good learning rate comes first and bad ones after.
"""

from __future__ import annotations

import io
import json
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import optuna
import pytest
import requests
from requests.auth import HTTPBasicAuth

from edtweb.sweeps import study
from edtweb.sweeps.models import Sweep
from tests.harness.processes import PROJECT_DIR
from tests.harness.stack import LiveEdt, dataset_archive
from tests.harness.waiting import wait_for

pytestmark = pytest.mark.timeout(900)
USER = "dave"
HEADERS = {"accept": "application/json"}
MODEL = PROJECT_DIR / "tests" / "models" / "wmla_hpo" / "main.py"
GOOD, BAD = 0.1, 1e-05
STEPS_PER_EPOCH = 256 // 32  # the dataset's training samples by the script's batch
# What POST hypersearch turns the request's hyperParams into (tests/test_wmla_hpo.py)
SPACE = {"learning_rate": {"type": "choice", "choices": [BAD, GOOD]},
         "hidden": {"type": "choice", "choices": [16, 32]}}  # fmt: skip


def seed_where(trials: int) -> int:
    """A seed whose first draws (the driver's sampler, asked in order) give trial 0 the good
    learning rate and at least two of the others the bad one."""
    for seed in range(500):
        sweep = Sweep(space=SPACE, objective="loss", direction="minimize", algorithm="hyperband",
                      max_trials=trials, max_parallel=2, max_time=0, reduction_factor=3,
                      min_resource=1, seed=seed, wmla={"script": True})  # fmt: skip
        asked = optuna.create_study(sampler=study.sampler(sweep, 0))
        drawn = [asked.ask(study.distributions(sweep)).params["learning_rate"]
                 for _ in range(trials)]  # fmt: skip
        if drawn[0] == GOOD and drawn[1:].count(BAD) >= 2:
            return seed
    raise AssertionError("no seed draws what the test needs")


def model_folder(tmp: Path) -> Path:
    archive = tmp / "hpo-model.modelDir.tar"
    with tarfile.open(archive, "w:gz") as tar:  # as the notebooks' make_tarfile does
        tar.add(MODEL, arcname="pytorch-hpo/main.py")
    return archive


def test_a_notebook_runs_a_hyperband_search_of_a_wmla_script_to_its_best_trial(
    live: LiveEdt, tmp_path: Path
) -> None:
    live.login(USER)
    data = dataset_archive(tmp_path / "data", train=256, test=64)
    uploaded = live.edt(USER, "datasets", "upload", str(data), "--name", "hpodata", timeout=300)
    assert uploaded.returncode == 0, uploaded.stderr
    url = f"{live.url}/platform/rest/deeplearning/v1"
    auth = HTTPBasicAuth(USER, f"{USER}-pass-1")
    seed = seed_where(4)
    hpo_input = {
        "modelSpec": {
            "sigName": "edt-ig",
            "args": "--exec-start edtPyTorch --cs-datastore-meta type=fs,data_path=hpodata "
                    "--model-main main.py --edt-options maxWorkers=1",
        },
        "algoDef": {
            "algorithm": "Hyperband", "maxRunTime": -1, "maxJobNum": 4, "maxParalleJobNum": 2,
            "objectiveMetric": "loss", "objective": "minimize", "hyperbandEta": 3.0,
            "algoParams": [{"name": "ResourceName", "value": "epochs"},
                           {"name": "ResourceValue", "value": "2"},
                           {"name": "RandomSeed", "value": str(seed)}],
        },
        "hyperParams": [
            {"name": "learning_rate", "type": "Range", "dataType": "DOUBLE", "minDbVal": -5,
             "maxDbVal": -1, "power": "10", "step": "4"},
            {"name": "hidden", "type": "Discrete", "dataType": "INT", "discreteIntVal": [16, 32]},
        ],
    }  # fmt: skip
    mydata = {"data": json.dumps(hpo_input)}
    with model_folder(tmp_path).open("rb") as f:
        created = requests.post(url + "/hypersearch", headers=HEADERS, auth=auth, data=mydata,
                                files={"file": f})  # fmt: skip
    assert created.ok, created.text
    hpo_name = created.json()
    assert hpo_name.startswith(f"{USER}-hpo-")

    def ended() -> dict[str, Any] | None:
        state: dict[str, Any] = requests.get(f"{url}/hypersearch/{hpo_name}", headers=HEADERS,
                                             auth=auth).json()  # fmt: skip
        return state if state["state"] not in ("SUBMITTED", "RUNNING") else None

    def seen() -> str:
        now = requests.get(f"{url}/hypersearch/{hpo_name}", auth=auth).text
        return f"the hypersearch to end: {now}"

    out = wait_for(ended, 600, seen, step=1.0)
    assert out["state"] == "FINISHED", out
    assert (out["progress"], out["complete"], out["running"], out["failed"]) == ("4/4", 4, 0, 0)
    listed = requests.get(url + "/hypersearch", headers=HEADERS, auth=auth).json()
    assert [item["hpoName"] for item in listed] == [hpo_name]
    experiments = out["experiments"]
    assert [e["id"] for e in experiments] == [0, 1, 2, 3]
    values = [{p["name"]: p["fixedVal"] for p in e["hyperParams"]} for e in experiments]
    assert values[0]["learning_rate"] == str(GOOD)

    # Losing trials were stopped early: Hyperband's rung after the first epoch.
    pruned = [e for e in experiments if e["trialState"] == "PRUNED"]
    assert pruned, experiments
    for e in pruned:
        assert e["state"] == "KILLED" and e["note"].startswith("pruned by Hyperband at step 1 ")
        job = live.json(USER, "jobs", "show", e["driverId"])
        assert job["steps_done"] < 2 * STEPS_PER_EPOCH, job  # it did not train to its end
        assert e["metricVal"] > experiments[0]["metricVal"]
    finished = [e for e in experiments if e["trialState"] == "COMPLETE"]
    assert all(e["state"] == "FINISHED" for e in finished)

    # The best: the finished experiment of the lowest loss, its values as WMLA shows them.
    best = out["best"]
    assert best["id"] == min(finished, key=lambda e: e["metricVal"])["id"]
    assert {p["name"]: p["fixedVal"] for p in best["hyperParams"]}["learning_rate"] == str(GOOD)
    assert [p["dataType"] for p in best["hyperParams"]] == ["double", "int"]

    # Each trial read its values from config.json, as WMLA hands them over.
    for e, asked in zip(experiments, values, strict=True):
        log = requests.get(f"{url}/execs/{e['driverId']}/log?logType=errlog", auth=auth).json()
        said = f"config.json: learning_rate {float(asked['learning_rate'])} hidden " \
               f"{asked['hidden']} epochs 2"  # fmt: skip
        assert said in log, (e, log[-2000:])

    # The best trial's result (its val_dict_list.json) and its model, as any exec's.
    result = requests.get(f"{url}/execs/{best['driverId']}/result", auth=auth)
    assert result.ok, result.text
    with zipfile.ZipFile(io.BytesIO(result.content)) as z:
        written = json.loads(z.read("result/val_dict_list.json"))
        assert "model.pt" in z.namelist()
    assert [entry["steps"] for entry in written] == [1, 2]
    assert best["metricVal"] == min(entry["loss"] for entry in written)
    target = tmp_path / "best.pt"
    got = live.edt(USER, "download", best["driverId"], "-o", str(target))
    assert got.returncode == 0 and target.stat().st_size > 0, got.stderr

    # Stopping an ended search is refused; deleting it leaves its trials' execs.
    assert requests.put(f"{url}/hypersearch/{hpo_name}", auth=auth).status_code == 409
    assert requests.delete(f"{url}/hypersearch/{hpo_name}", auth=auth).ok
    assert requests.get(f"{url}/hypersearch/{hpo_name}", auth=auth).status_code == 404
    assert requests.get(f"{url}/execs/{best['driverId']}", auth=auth).json()["state"] == "FINISHED"
