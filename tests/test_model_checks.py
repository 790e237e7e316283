"""Model checks and dataset preparations on a real control worker survive a ``kill -9`` of the
Celery process running them: the task is taken again once, and the start after a second
loss fails the model or the dataset with a message that says so. Nothing of a killed run
(the management command, the sandbox, the user's code) outlives it."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import psutil
import pytest

from edtweb.datasets import services as datasets
from edtweb.datasets.models import Dataset
from edtweb.registry import services as registry
from edtweb.registry.models import ModelDefinition
from tests.harness.processes import alive_pids
from tests.harness.waiting import wait_for
from workers.learner.datasets import write_cifar10

# A valid model whose import waits while a file named "hold" lies beside it.
HELD = """
import os, time
while os.path.exists(os.path.join(os.path.dirname(__file__), "hold")):
    time.sleep(0.1)
from torch import nn

def build_model():
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 10))
"""


def running(worker: subprocess.Popen[str], command: str, pk: int) -> psutil.Process | None:
    """The live ``manage.py COMMAND [options] PK`` under the control worker, if any."""
    for proc in psutil.Process(worker.pid).children(recursive=True):
        try:
            line = proc.cmdline()
            if command in line and line[-1] == str(pk) and proc.status() != "zombie":
                return proc
        except psutil.NoSuchProcess:
            continue
    return None


def checking(worker: subprocess.Popen[str], pk: int) -> psutil.Process | None:
    """The check's command once the user's code runs in its sandbox below it."""
    command = running(worker, "edt_check_model", pk)
    if command is None:
        return None
    try:
        below = command.children(recursive=True)
        sandboxed = any("workers.learner.validate" in p.cmdline() for p in below)
    except psutil.NoSuchProcess:
        return None
    return command if sandboxed else None


def kill_task_process(command: psutil.Process) -> set[int]:
    """``kill -9`` the Celery process that runs ``command`` (its parent); the pids of the
    command and of all it started, to check that none outlives it."""
    tree = {command.pid, *(p.pid for p in command.children(recursive=True))}
    os.kill(command.ppid(), signal.SIGKILL)
    return tree


def held_model(alice: Any) -> ModelDefinition:
    model = registry.create(alice, "held", "held.py", HELD.encode(), check_async=None)
    (model.entry_path.parent / "hold").touch()
    registry.start_check(model)
    return model


def attempts(model: Any) -> int:
    return int(type(model).objects.get(pk=model.pk).attempts)


@pytest.mark.django_db(transaction=True)
def test_a_check_whose_process_is_killed_runs_again_and_ends_valid(
    control_worker: subprocess.Popen[str], alice: Any
) -> None:
    model = held_model(alice)
    command = wait_for(lambda: checking(control_worker, model.pk), 120, "the check to run")
    assert attempts(model) == 1
    # Frozen, the first run cannot end before its process is killed, the hold lifted.
    command.send_signal(signal.SIGSTOP)
    (model.entry_path.parent / "hold").unlink()
    first = kill_task_process(command)
    wait_for(lambda: not alive_pids(first), 30, "the killed check's processes to end")
    wait_for(lambda: ModelDefinition.objects.get(pk=model.pk).status != "CHECKING", 120, "2nd")
    model.refresh_from_db()
    assert (model.status, model.error, model.attempts) == ("VALID", "", 2)
    assert model.parameters == 3 * 32 * 32 * 10 + 10


@pytest.mark.django_db(transaction=True)
def test_a_check_killed_twice_fails_the_model_saying_so(
    control_worker: subprocess.Popen[str], alice: Any
) -> None:
    model = held_model(alice)
    for attempt in (1, 2):
        command = wait_for(
            lambda a=attempt: attempts(model) == a and checking(control_worker, model.pk),
            120,
            f"check {attempt} to run",
        )
        tree = kill_task_process(command)
        wait_for(lambda t=tree: not alive_pids(t), 30, "the killed check's processes to end")
    wait_for(lambda: ModelDefinition.objects.get(pk=model.pk).status != "CHECKING", 60, "end")
    model.refresh_from_db()
    assert model.status == "INVALID" and model.attempts == 3
    assert model.error == registry.INTERRUPTED
    assert "interrupted twice (its worker died)" in model.error


def uploaded(alice: Any, tmp_path: Path) -> Dataset:
    """A CIFAR-10 archive uploaded whole; its preparation queued."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(write_cifar10(tmp_path / "cifar", train=2000, test=200), "cifar-10-batches-py")
    content = buffer.getvalue()
    dataset = datasets.start_upload(alice, "cifar", "cifar.tar.gz", len(content))
    datasets.append_chunk(dataset, 0, content)
    dataset.refresh_from_db()
    datasets.finish_upload(dataset)
    return dataset


def preparing(worker: subprocess.Popen[str], dataset: Dataset, attempt: int) -> Any:
    """The preparation's command, frozen as soon as it counted start ``attempt`` (it cannot
    end before it is killed; extracting and drawing take seconds, the look a few ms)."""
    command = running(worker, "edt_prepare_dataset", dataset.pk)
    if command is None or attempts(dataset) != attempt:
        return None
    command.send_signal(signal.SIGSTOP)
    return command if Dataset.objects.get(pk=dataset.pk).status == "PREPARING" else None


@pytest.mark.django_db(transaction=True)
def test_a_preparation_whose_process_is_killed_runs_again_and_ends_ready(
    control_worker: subprocess.Popen[str], alice: Any, tmp_path: Path
) -> None:
    dataset = uploaded(alice, tmp_path)
    command = wait_for(lambda: preparing(control_worker, dataset, 1), 120, "the preparation",
                       step=0.005)  # fmt: skip
    first = kill_task_process(command)
    wait_for(lambda: not alive_pids(first), 30, "the killed preparation to end")
    wait_for(lambda: Dataset.objects.get(pk=dataset.pk).status != "PREPARING", 120, "2nd")
    dataset.refresh_from_db()
    assert (dataset.status, dataset.error, dataset.attempts) == ("READY", "", 2)
    assert dataset.summary["splits"]["train"]["count"] == 2000
    assert not dataset.archive_path.exists()


@pytest.mark.django_db(transaction=True)
def test_a_preparation_killed_twice_fails_the_dataset_saying_so(
    control_worker: subprocess.Popen[str], alice: Any, tmp_path: Path
) -> None:
    dataset = uploaded(alice, tmp_path)
    for attempt in (1, 2):
        command = wait_for(lambda a=attempt: preparing(control_worker, dataset, a), 120,
                           f"preparation {attempt}", step=0.005)  # fmt: skip
        tree = kill_task_process(command)
        wait_for(lambda t=tree: not alive_pids(t), 30, "the killed preparation to end")
    wait_for(lambda: Dataset.objects.get(pk=dataset.pk).status != "PREPARING", 60, "the end")
    dataset.refresh_from_db()
    assert dataset.status == "FAILED" and dataset.attempts == 3
    assert dataset.error == datasets.INTERRUPTED
    assert not dataset.data_dir.exists() and not dataset.archive_path.exists()
