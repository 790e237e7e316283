"""The WMLA-compatible endpoints driven the way IBM's notebooks drive them (requests, HTTP
basic auth, the model folder packed with tarfile, an ``args`` string in the query), against
the run's live EDT (tests/harness/stack.py)."""

from __future__ import annotations

import csv
import io
import os
import signal
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import psutil
import pytest
import requests
import torch
from requests.auth import HTTPBasicAuth

from tests.harness.cluster import learners_on
from tests.harness.processes import PROJECT_DIR
from tests.harness.stack import LiveEdt, dataset_archive
from tests.harness.waiting import wait_for
from tests.harness.wmla import run_notebook

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
def wmla(live: LiveEdt, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Erin, with a dataset named ``shapes-wmla`` (uploaded through the EDT API in one
    multipart POST) and the notebook's model folder packed as a tar archive."""
    folder = tmp_path_factory.mktemp("wmla")
    api = f"{live.url}/api/v1/"
    token = requests.post(api + "auth/token/", json={"username": "erin", "password": "erin-pass-1"})
    session = requests.Session()
    session.headers["Authorization"] = f"Token {token.json()['token']}"
    for name in ("shapes-wmla", "pytorch-mnist"):  # the second as the notebook names it
        with dataset_archive(folder, train=256, test=64).open("rb") as f:
            created = session.post(api + "datasets/", data={"name": name}, files={"file": f})
        assert created.status_code == 201, created.text
        url = f"{api}datasets/{created.json()['id']}/"
        wait_for(lambda u=url: session.get(u).json()["status"] == "READY", 60, "the dataset")
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
        "live": live,
        "api": session,
        "folder": folder,
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
    seen: dict[str, Any] = {}

    def ended() -> bool:
        seen.update(requests.get(f"{url}/execs/{exec_id}", auth=auth, headers=HEADERS).json())
        return seen["state"] in ENDED

    wait_for(ended, 120, lambda: f"exec {exec_id} to end; it is {seen.get('state')}", step=0.5)
    exec_, state = seen, seen["state"]
    if state != "FINISHED":
        log = requests.get(f"{url}/execs/{exec_id}/log", auth=auth, headers=HEADERS).json()
        pytest.fail(f"exec {state}: {exec_['error']!r}; its log ends:\n{log[-3000:]}")
    assert exec_["maxWorkers"] == 2 and exec_["framework"] == "edtPyTorch"

    log = requests.get(f"{url}/execs/{exec_id}/log", auth=auth, headers=HEADERS).json()
    assert "==== learner" in log and "wmla-train epoch" in log, log[-2000:]  # no $LOG_DIR
    errlog = requests.get(f"{url}/execs/{exec_id}/log?logType=errlog", auth=auth).json()
    assert errlog == log

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


def learners_of(wmla: dict[str, Any], exec_id: str) -> list[psutil.Process]:
    """The learner processes of an exec now: on the slots the cluster API says run it."""
    slots = wmla["api"].get(f"{wmla['live'].url}/api/v1/cluster/slots/").json()
    return [p for s in slots if s["job"] == int(exec_id) for p in learners_on(s["slot_id"])]


def ended(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_running_exec_can_be_stopped_and_its_learners_end(wmla: dict[str, Any]) -> None:
    url, auth = wmla["url"], wmla["auth"]
    exec_id = submit(wmla, ARGS.format(epochs=500)).json()["id"]
    state = lambda: requests.get(f"{url}/execs/{exec_id}", auth=auth).json()["state"]  # noqa: E731
    wait_for(lambda: state() == "RUNNING", 120, lambda: f"the exec RUNNING, not {state()}")
    learners = wait_for(lambda: learners_of(wmla, exec_id), 60, "the exec's learners")
    stopped = requests.post(f"{url}/execs/{exec_id}/stop", auth=auth, headers=HEADERS)
    assert stopped.ok and stopped.json()["state"] == "KILLED"
    wait_for(lambda: all(map(ended, learners)), 60,
             lambda: f"its learners {[p.pid for p in learners]} to end")  # fmt: skip
    assert not learners_of(wmla, exec_id), "a learner started after the stop"
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


SEED = PROJECT_DIR / "tests" / "models" / "wmla_edt"


def elog_lines(text: str) -> tuple[list[dict[str, float]], list[dict[str, float]]]:
    """The Train and Test lines of the seeds' ELog format, as the notebook splits them."""
    train, test = [], []
    for row in csv.reader(io.StringIO(text.replace(":", ","))):
        if len(row) == 13 and row[2].endswith("Train"):
            keys = ("timestamp", "global_steps", "iteration", "loss", "accuracy")
            train.append(dict(zip(keys, (float(row[i]) for i in (4, 6, 8, 10, 12)), strict=True)))
        elif len(row) == 9 and row[2].endswith("Test"):
            test.append({"loss": float(row[6]), "accuracy": float(row[8])})
    return train, test


def test_the_notebook_trains_the_seed_script_whose_callbacks_log_what_wmla_would(
    wmla: dict[str, Any], tmp_path: Path
) -> None:
    live: LiveEdt = wmla["live"]
    out, exec_id = run_notebook(live, tmp_path, "erin", "erin-pass-1",
                                tmp_path / "resnet-wmla", SEED)  # fmt: skip
    assert "Logon succeeded" in out and "exec state: FINISHED" in out, out[-3000:]
    with zipfile.ZipFile(tmp_path / "resnet-wmla" / f"{exec_id}.zip") as z:
        assert "model.pt" in z.namelist()

    # What the seeds' EDTLoggerCallback wrote through ELog: the values EDT trained with
    url, auth = wmla["url"], wmla["auth"]
    outlog = requests.get(f"{url}/execs/{exec_id}/log?logType=outlog", auth=auth).json()
    assert "Accuracy:" in str(pprint_section(out)), out[-2000:]
    train, test = elog_lines(outlog)
    api = f"{live.url}/api/v1/jobs/{exec_id}/"
    records = wmla["api"].get(api + "metrics/records/", params={"limit": 1000}).json()
    records = records.get("results", records)
    steps = [r for r in records if r["kind"] == "train"]
    evals = [r for r in records if r["kind"] == "test"]
    # NUM_EPOCHS 2 and batch 32 are the script's (the args set neither): 256 / 32 * 2
    assert len(steps) == len(train) == 16 and len(evals) == len(test) == 2
    for line, record in zip(train, steps, strict=True):
        assert line["iteration"] == record["step"]  # completed_batch
        assert line["loss"] == pytest.approx(record["values"]["loss"], abs=1e-5)
        assert 0 <= line["accuracy"] <= 1  # WMLA passes percent; the helper divides by 100
        assert line["accuracy"] == pytest.approx(record["values"]["accuracy"], abs=1e-5)
    for line, record in zip(test, evals, strict=True):
        assert line["loss"] == pytest.approx(record["values"]["test_loss"], abs=1e-5)
        assert line["accuracy"] == pytest.approx(record["values"]["test_accuracy"], abs=1e-5)
    # The script's LRScheduleCallback halved its own learning rate (0.05) at epoch 1, in
    # every learner, through self.params['optimizer']
    assert {r["values"]["lr"] for r in steps if r["epoch"] == 0} == {0.05}
    assert {r["values"]["lr"] for r in steps if r["epoch"] == 1} == {0.025}
    job = wmla["api"].get(api).json()
    assert job["total_steps"] == job["steps_done"] == 16  # progress from the script's data

    # The native API: an ended job's priority is final (409; `edt priority` fails)
    refused = wmla["api"].post(api + "priority/", json={"priority": 9000})
    assert refused.status_code == 409, refused.text
    live.login("erin")
    cli = live.edt("erin", "priority", exec_id, "9000")
    assert cli.returncode != 0 and "priority is final" in cli.stderr + cli.stdout, cli
    assert wmla["api"].get(api).json()["priority"] == 5000


def pprint_section(out: str) -> str:
    """What the notebook printed after asking for the driver's stdout (logType=outlog)."""
    return out.split("retrieve_stdout_url:", 1)[-1]


BROKEN = {
    "raises": ("import fabric_model\nraise ValueError('no GPU in this cluster')\n",
               "no GPU in this cluster"),
    "never trains": ("from fabric_model import FabricModel\n\ndef main():\n    pass\n",
                     "without calling FabricModel(...).train()"),
}  # fmt: skip


def archive_of(folder: Path, source: str) -> Path:
    model_dir = folder / "broken-edt"
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "main.py").write_text(source)
    archive = folder / "broken.modelDir.tar"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(model_dir, arcname=model_dir.name)
    return archive


@pytest.mark.parametrize("case", list(BROKEN))
def test_post_execs_answers_at_once_and_the_exec_reports_the_model_check(
    wmla: dict[str, Any], tmp_path: Path, case: str
) -> None:
    source, words = BROKEN[case]
    url, auth = wmla["url"], wmla["auth"]
    with archive_of(tmp_path, source).open("rb") as f:
        reply = requests.post(f"{url}/execs?args={ARGS.format(epochs=1)}", files={"file": f},
                              auth=auth, headers=HEADERS)  # fmt: skip
    assert reply.ok, reply.text
    exec_id = reply.json()["id"]
    assert reply.json()["state"] == "SUBMITTED"
    exec_ = wait_for(lambda: (e := requests.get(f"{url}/execs/{exec_id}", auth=auth).json())
                     ["state"] in ENDED and e, 120, "the model check")  # fmt: skip
    assert exec_["state"] == "ERROR" and exec_["modelCheck"]["status"] == "INVALID"
    assert "the model check failed" in exec_["error"] and words in exec_["error"], exec_


def test_a_model_check_whose_process_is_killed_twice_fails_the_exec_saying_so(
    wmla: dict[str, Any], tmp_path: Path
) -> None:
    """The check runs on the worker host's control worker: a check whose Celery process is
    killed runs again; killed a second time, the model fails with a message that says why,
    and the exec that waits for it with it."""
    url, auth, live = wmla["url"], wmla["auth"], wmla["live"]
    with archive_of(tmp_path, "import time\nimport fabric_model\ntime.sleep(300)\n").open(
        "rb"
    ) as f:
        exec_id = requests.post(f"{url}/execs?args={ARGS.format(epochs=1)}", files={"file": f},
                                auth=auth).json()["id"]  # fmt: skip
    job = wmla["api"].get(f"{live.url}/api/v1/jobs/{exec_id}/").json()
    model = wmla["api"].get(f"{live.url}/api/v1/models/{job['model']}/").json()
    assert model["status"] == "CHECKING" and model["check"]["limit"] == 60
    killed: set[int] = set()
    for _ in range(2):
        command = wait_for(lambda: _checking(live, job["model"], killed), 60, "a check")
        killed.add(command.pid)
        os.kill(command.ppid(), signal.SIGKILL)  # the control worker's process running it
    exec_ = wait_for(lambda: (e := requests.get(f"{url}/execs/{exec_id}", auth=auth).json())
                     ["state"] == "ERROR" and e, 60, "the exec to fail")  # fmt: skip
    assert "the model check was interrupted twice (its worker died)" in exec_["error"], exec_


def _checking(live: LiveEdt, model: int, killed: set[int]) -> psutil.Process | None:
    """The live EDT's ``edt_check_model MODEL`` not yet killed, once the user's code runs
    in its sandbox (the check's start is counted by then)."""
    for proc in psutil.process_iter():
        try:
            if (
                proc.pid not in killed
                and "edt_check_model" in proc.cmdline()
                and proc.cmdline()[-1] == str(model)
                and proc.environ().get("EDT_DATA_DIR") == str(live.data_dir)
                and any("workers.learner.validate" in p.cmdline()
                        for p in proc.children(recursive=True))
            ):  # fmt: skip
                return proc
        except psutil.Error:
            continue
    return None


def test_a_compressed_bomb_is_refused_by_the_safe_extractor_before_anything_is_listed(
    wmla: dict[str, Any], tmp_path: Path
) -> None:
    bomb = tmp_path / "bomb.modelDir.tar"
    with tarfile.open(bomb, "w:gz") as tar:
        info = tarfile.TarInfo("pytorch-edt/main.py")
        info.size = 64 << 20  # 64 MiB of zeros: about 64 KiB compressed
        tar.addfile(info, io.BytesIO(bytes(info.size)))
    reply = submit({**wmla, "archive": bomb}, ARGS.format(epochs=1))
    assert reply.status_code == 400, reply.text
    assert "times its own size" in reply.json()["error"], reply.text


def test_a_learner_runs_the_script_as_main_with_its_argv_and_fails_one_that_never_trains(
    redis_server: Any, tmp_path: Path
) -> None:
    """Straight through the elastic engine (no web): the learner runs a WMLA script as
    ``__main__`` with the exec's argv and DATA_DIR; one that never calls train() fails."""
    from tests.harness.processes import subprocess_env
    from workers.learner.datasets import write_cifar10

    data = write_cifar10(tmp_path / "data", train=64, test=16)
    never = tmp_path / "never.py"
    never.write_text(BROKEN["never trains"][0])
    shows = tmp_path / "shows.py"
    shows.write_text(
        "import os, sys\nfrom fabric_model import FabricModel\n"
        "print('argv', sys.argv[1:], 'data', os.environ['DATA_DIR'] == sys.argv[-1], flush=True)\n"
    )
    results = {}
    for script in (never, shows):
        workdir = tmp_path / script.stem
        cmd = [sys.executable, "-m", "workers.learner.drive", "--model", str(script),
               "--data", str(data), "--workdir", str(workdir), "--deadline", "120",
               "--script-arg=--numWorker", "--script-arg=2",
               f"--script-arg={data}"]  # fmt: skip
        env = subprocess_env(tmp_path, REDIS_URL=redis_server.url)
        done = subprocess.run(cmd, cwd=PROJECT_DIR, env=env, capture_output=True, timeout=300)
        log = "".join(p.read_text() for p in (workdir / "logs").glob("*.log"))
        results[script.stem] = (done.returncode, done.stdout.decode(), log)
    code, out, _ = results["never"]
    assert code == 2 and "never.py ran to its end without calling FabricModel(...).train()" in out
    code, out, log = results["shows"]
    assert code == 2 and f"argv ['--numWorker', '2', '{data}'] data True" in log, log
