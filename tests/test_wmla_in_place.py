"""IBM's WMLA notebook, unchanged, trains on a dataset that lies under a data root
(docs/architecture.md, "Datasets in place"): its ``data_path`` (``pytorch-mnist``) is a
folder of the run's live EDT's root (tests/harness/stack.py), read where it lies. A
``data_path`` under no root, with ``..``, or through a link out of a root, is refused
before anything is stored, with the reason in WMLA's error body."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.harness.processes import PROJECT_DIR
from tests.harness.stack import LiveEdt
from tests.harness.waiting import wait_for
from tests.harness.wmla import run_notebook
from workers.learner.datasets import write_cifar10

USER = "mallory"  # no dataset of this name is hers: data_path names the folder
AUTH = (USER, f"{USER}-pass-1")
SEED = PROJECT_DIR / "tests" / "models" / "wmla_edt"


@pytest.fixture(scope="module")
def in_place(live: LiveEdt, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``pytorch-mnist`` under the live EDT's data root, registered by its path (as
    ``edt datasets add --path`` does) under another name; a folder outside every root
    with data in it, and a link from the root to it."""
    root = live.tmp / "roots"
    folder = root / "pytorch-mnist"
    write_cifar10(folder, train=256, test=64)
    outside = write_cifar10(tmp_path_factory.mktemp("outside"), train=64, test=16).parent
    (root / "escape-wmla").symlink_to(outside, target_is_directory=True)
    api = f"{live.url}/api/v1/"
    token = requests.post(api + "auth/token/", json={"username": USER, "password": AUTH[1]})
    session = requests.Session()
    session.headers["Authorization"] = f"Token {token.json()['token']}"
    reply = session.post(api + "datasets/register/", data={"name": "mnist-in-place",
                                                           "path": "pytorch-mnist"})  # fmt: skip
    assert reply.status_code == 201, reply.text
    url = f"{api}datasets/{reply.json()['id']}/"
    wait_for(lambda: session.get(url).json()["status"] in ("READY", "FAILED"), 120, "the check")
    dataset = session.get(url).json()
    assert dataset["status"] == "READY" and dataset["source"] == str(folder), dataset
    return {"live": live, "api": session, "folder": folder, "outside": outside,
            "dataset": dataset}  # fmt: skip


def test_the_notebook_unchanged_trains_on_a_data_path_under_a_root_read_in_place(
    in_place: dict[str, Any], tmp_path: Path
) -> None:
    live: LiveEdt = in_place["live"]
    out, exec_id = run_notebook(live, tmp_path, USER, AUTH[1], tmp_path / "model", SEED)
    assert "data_path=pytorch-mnist" in out and "exec state: FINISHED" in out, out[-3000:]

    job = in_place["api"].get(f"{live.url}/api/v1/jobs/{exec_id}/").json()
    assert job["state"] == "COMPLETED" and job["dataset"] == in_place["dataset"]["id"], job
    url = f"{live.url}/platform/rest/deeplearning/v1/execs/{exec_id}/log?logType=errlog"
    errlog = requests.get(url, auth=AUTH).json()
    assert f"DATA_DIR: {in_place['folder']}" in errlog, errlog[-3000:]  # the script's own print
    # Nothing copied: the dataset's store holds its thumbnails and check log, the exec's
    # folder no batch of the data
    store = live.data_dir / "datasets" / str(in_place["dataset"]["id"])
    kept = [p.relative_to(store).as_posix() for p in store.rglob("*") if p.is_file()]
    assert kept and all(k.startswith("thumbs/") or k == "prepare.log" for k in kept), kept
    workdir = live.data_dir / "jobs" / exec_id
    assert workdir.is_dir() and not list(workdir.rglob("*_batch*")), list(workdir.rglob("*"))


REFUSED = [
    ("{outside}", "is under no data root"),
    ("pytorch-mnist/../../outside", "a path with '..' is refused"),
    ("{folder}/../escape-wmla", "a path with '..' is refused"),
    ("escape-wmla", "leads out of the data root"),
    ("{root}/escape-wmla/cifar-10-batches-py", "leads out of the data root"),
]


@pytest.mark.parametrize(("data_path", "why"), REFUSED)
def test_a_data_path_outside_the_roots_is_refused_with_a_message(
    in_place: dict[str, Any], data_path: str, why: str
) -> None:
    """The notebook's own submission (its args string, query and files); nothing of it
    stays: no exec, no model."""
    live: LiveEdt = in_place["live"]
    given = data_path.format(folder=in_place["folder"], outside=in_place["outside"],
                             root=in_place["folder"].parent)  # fmt: skip
    args = (
        f"--exec-start edtPyTorch --cs-datastore-meta type=fs,data_path={given} "
        "--model-dir resnet-wmla --edt-options maxWorkers=2 --model-main elastic-main.py"
    )
    api = in_place["api"]
    before = ids(api, live, "jobs"), ids(api, live, "models")
    reply = requests.post(
        f"{live.url}/platform/rest/deeplearning/v1/execs?sigName=elasticsig&args={args}",
        files={"file": ("elastic-main.py", (SEED / "elastic-main.py").read_bytes())},
        auth=AUTH, headers={"Accept": "application/json"},
    )  # fmt: skip
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert f"--cs-datastore-meta data_path={given}: " in error and re.search(why, error), error
    assert (ids(api, live, "jobs"), ids(api, live, "models")) == before


def ids(api: requests.Session, live: LiveEdt, kind: str) -> set[int]:
    listed = api.get(f"{live.url}/api/v1/{kind}/", params={"limit": 1000}).json()
    return {row["id"] for row in listed.get("results", listed)}
