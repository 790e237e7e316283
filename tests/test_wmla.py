"""The WMLA-compatible endpoints driven the way IBM's notebooks drive them (requests, HTTP
basic auth, the model folder packed with tarfile, an ``args`` string in the query), against
the live EDT of tests/test_cli.py."""

from __future__ import annotations

import io
import os
import tarfile
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest
import requests
import torch
from requests.auth import HTTPBasicAuth

from tests.test_cli import LiveEdt, dataset_archive, live_edt

HEADERS = {"accept": "application/json"}
ENDED = ("FINISHED", "ERROR", "KILLED")

# A WMLA-style model folder: the main script calls FabricModel, a helper module beside it.
MAIN = """
import pth_parameter_mgr
import torch.nn.functional as F
from callbacks import LoggerCallback
from fabric_model import FabricModel
from network import Net
from torch.utils.data import TensorDataset
import glob, os, pickle, numpy as np, torch


def batches(pattern):
    images, labels = [], []
    for path in sorted(glob.glob(pattern)):
        with open(path, "rb") as f:
            batch = pickle.load(f, encoding="bytes")
        images.append(batch[b"data"])
        labels.extend(batch[b"labels"])
    x = torch.from_numpy(np.concatenate(images).reshape(-1, 3, 32, 32)).float().div_(255)
    return TensorDataset(x, torch.tensor(labels))


def getDatasets():
    folder = glob.glob(os.path.join(train_data_dir, "**", "test_batch"), recursive=True)[0]
    folder = os.path.dirname(folder)
    return batches(folder + "/data_batch_*"), batches(folder + "/test_batch")


class Printer(LoggerCallback):
    def log_train_metrics(self, loss, accuracy, epoch, step):
        print(f"wmla-train epoch {epoch} step {step} loss {loss:.4f}", flush=True)


train_data_dir = pth_parameter_mgr.getTrainData(False)
model = Net()
optimizer = pth_parameter_mgr.getOptimizer(model)
FabricModel(model, getDatasets, F.cross_entropy, optimizer, driver_logger=Printer()).train(
    pth_parameter_mgr.getEpoch(), 64, 4
)
"""
NETWORK = """
from torch import nn

class Net(nn.Sequential):
    def __init__(self):
        super().__init__(nn.Flatten(), nn.Linear(3 * 32 * 32, 32), nn.ReLU(), nn.Linear(32, 10))
"""


@pytest.fixture(scope="module")
def live(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> LiveEdt:
    return live_edt(request.config, tmp_path_factory)


@pytest.fixture(scope="module")
def wmla(live: LiveEdt, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Erin, with a dataset named ``shapes-wmla`` (uploaded through the EDT API in one
    multipart POST) and the notebook's model folder packed as a tar archive."""
    folder = tmp_path_factory.mktemp("wmla")
    api = f"{live.url}/api/v1/"
    token = requests.post(api + "auth/token/", json={"username": "erin", "password": "erin-pass-1"})
    session = requests.Session()
    session.headers["Authorization"] = f"Token {token.json()['token']}"
    with dataset_archive(folder, train=256, test=64).open("rb") as f:
        created = session.post(api + "datasets/", data={"name": "shapes-wmla"}, files={"file": f})
    assert created.status_code == 201, created.text
    url = f"{api}datasets/{created.json()['id']}/"
    for _ in range(120):
        if session.get(url).json()["status"] == "READY":
            break
        time.sleep(0.5)
    model_dir = folder / "pytorch-edt"
    model_dir.mkdir()
    (model_dir / "main.py").write_text(MAIN)
    (model_dir / "network.py").write_text(NETWORK)
    archive = folder / "pytorch-edt.modelDir.tar"
    with tarfile.open(archive, "w:gz") as tar:  # as the notebooks' make_tarfile does
        tar.add(model_dir, arcname=os.path.basename(model_dir))
    return {
        "url": f"{live.url}/platform/rest/deeplearning/v1",
        "auth": HTTPBasicAuth("erin", "erin-pass-1"),
        "archive": archive,
    }


def submit(wmla: dict[str, Any], args: str) -> requests.Response:
    with wmla["archive"].open("rb") as f:
        return requests.post(
            f"{wmla['url']}/execs?args={args}",
            files={"file": f},
            auth=wmla["auth"],
            headers=HEADERS,
        )


ARGS = (
    "--exec-start edtPyTorch --cs-datastore-meta type=fs,data_path=shapes-wmla "
    "--model-main main.py --edt-options maxWorkers=2 --epochs {epochs}"
)


def test_a_notebook_submits_polls_reads_the_log_and_gets_the_model(
    wmla: dict[str, Any], tmp_path: Path
) -> None:
    url, auth = wmla["url"], wmla["auth"]
    frameworks = requests.get(f"{url}/execs/frameworks", auth=auth, headers=HEADERS).json()
    assert "edtPyTorch" in [f["name"] for f in frameworks]

    reply = submit(wmla, ARGS.format(epochs=2))
    assert reply.ok, reply.text
    exec_id = reply.json()["id"]
    state = ""
    for _ in range(240):
        exec_ = requests.get(f"{url}/execs/{exec_id}", auth=auth, headers=HEADERS).json()
        state = exec_["state"]
        if state in ENDED:
            break
        time.sleep(0.5)
    assert state == "FINISHED", exec_
    assert exec_["maxWorkers"] == 2 and exec_["framework"] == "edtPyTorch"

    log = requests.get(f"{url}/execs/{exec_id}/log", auth=auth).text
    assert "==== learner" in log and "wmla-train epoch" in log, log[-2000:]

    result = requests.get(f"{url}/execs/{exec_id}/result", auth=auth)
    assert result.ok and result.headers["Content-Type"] == "application/zip"
    with zipfile.ZipFile(io.BytesIO(result.content)) as z:
        z.extract("model.pt", tmp_path)
    state_dict = torch.load(tmp_path / "model.pt", weights_only=True)
    assert state_dict["1.weight"].shape == (32, 3 * 32 * 32)

    listed = requests.get(f"{url}/execs/", auth=auth, headers=HEADERS).json()  # a slash too
    assert exec_id in [e["id"] for e in listed]
    assert requests.delete(f"{url}/execs/{exec_id}", auth=auth).ok
    assert requests.get(f"{url}/execs/{exec_id}", auth=auth).status_code == 404


def test_an_exec_can_be_stopped(wmla: dict[str, Any]) -> None:
    url, auth = wmla["url"], wmla["auth"]
    exec_id = submit(wmla, ARGS.format(epochs=500)).json()["id"]
    stopped = requests.post(f"{url}/execs/{exec_id}/stop", auth=auth, headers=HEADERS)
    assert stopped.ok and stopped.json()["state"] == "KILLED"
    busy = requests.delete(f"{url}/execs/{exec_id}", auth=auth)
    assert busy.ok  # it has ended: it can go


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (ARGS.format(epochs=1).replace("edtPyTorch", "TensorFlow"), "--exec-start TensorFlow"),
        (ARGS.format(epochs=1).replace("shapes-wmla", "nope"), "data_path=nope"),
        (ARGS.format(epochs=1).replace("main.py", "train.py"), "pytorch-edt/main.py"),
        (ARGS.format(epochs=1).replace("maxWorkers=2", "maxWorkers=lots"), "maxWorkers=lots"),
        ("--model-main main.py", "--exec-start"),
    ],
)
def test_a_wrong_submission_is_a_400_that_says_what_to_fix(
    wmla: dict[str, Any], args: str, words: str
) -> None:
    reply = submit(wmla, args)
    assert reply.status_code == 400 and words in reply.json()["error"], reply.text


def test_basic_auth_is_checked_and_execs_are_scoped(wmla: dict[str, Any]) -> None:
    url = wmla["url"]
    wrong = requests.get(f"{url}/execs", auth=HTTPBasicAuth("erin", "guess"))
    assert wrong.status_code == 401 and wrong.headers["WWW-Authenticate"].startswith("Basic")
    exec_id = submit(wmla, ARGS.format(epochs=500)).json()["id"]
    dave = HTTPBasicAuth("dave", "dave-pass-1")
    for method in ("get", "delete"):
        assert getattr(requests, method)(f"{url}/execs/{exec_id}", auth=dave).status_code == 404
    assert requests.post(f"{url}/execs/{exec_id}/stop", auth=dave).status_code == 404
    assert requests.get(f"{url}/execs/{exec_id}", auth=wmla["auth"]).json()["state"] != "KILLED"
    requests.post(f"{url}/execs/{exec_id}/stop", auth=wmla["auth"])
