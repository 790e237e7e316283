"""The elastic engine, driven without the scheduler: real learner processes, real gloo."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from edtweb.redis_server import RedisServer
from tests.conftest import PROJECT_DIR, subprocess_env
from workers.learner.contract import load_definition
from workers.learner.datasets import load_dataset, write_cifar10
from workers.learner.partition import iterations_per_epoch, permutation

MLP = PROJECT_DIR / "examples" / "mlp.py"
BATCH, STEPS, LR, SEED = 64, 100, 0.01, 0


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_cifar10(tmp_path_factory.mktemp("data"), train=1024, test=256)


def drive(redis: RedisServer, tmp: Path, data: Path, schedule: str, *extra: str) -> Path:
    workdir = tmp / f"run-{schedule.replace(':', '_').replace(',', '-')}"
    cmd = [
        sys.executable, "-m", "workers.learner.drive", "--model", str(MLP), "--data", str(data),
        "--schedule", schedule, "--batch-size", str(BATCH), "--max-steps", str(STEPS),
        "--epochs", "100", "--lr", str(LR), "--seed", str(SEED), "--workdir", str(workdir),
        "--deadline", "240", *extra,
    ]  # fmt: skip
    env = subprocess_env(tmp, REDIS_URL=redis.url)
    result = subprocess.run(
        cmd, cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return workdir


def train_records(workdir: Path) -> list[dict[str, Any]]:
    records = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in records if r["type"] == "train"]


def reference_run(data: Path) -> tuple[list[float], dict[str, torch.Tensor]]:
    """Plain single-process training with the same seed, order and global batch."""
    defn = load_definition(MLP)
    train, _test, _ = load_dataset(data)
    x_all, y_all = train.tensors
    torch.manual_seed(SEED)
    model = defn.build_model()
    optimizer = defn.build_optimizer(model.parameters(), LR)
    per_epoch = iterations_per_epoch(len(x_all), BATCH)
    losses = []
    for step in range(STEPS):
        epoch, it = divmod(step, per_epoch)
        idx = torch.tensor(permutation(len(x_all), SEED, epoch)[it * BATCH : (it + 1) * BATCH])
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x_all[idx]), y_all[idx])
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses, model.state_dict()


def assert_same_training(
    workdir: Path, losses: list[float], params: dict[str, torch.Tensor], replayed: bool = False
) -> None:
    records = train_records(workdir)
    if replayed:  # after a restart from a checkpoint, the last record of each step counts
        records = list({r["step"]: r for r in records}.values())
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))  # none skipped or repeated
    for record, expected in zip(records, losses, strict=True):
        assert record["loss"] == pytest.approx(expected, rel=1e-4), record
    final = torch.load(workdir / "model.pt", weights_only=True)
    for name, value in params.items():
        torch.testing.assert_close(final[name], value, rtol=1e-4, atol=1e-6)


def worker_sequence(records: list[dict[str, Any]]) -> list[int]:
    seq: list[int] = []
    for r in records:
        if not seq or seq[-1] != r["workers"]:
            seq.append(r["workers"])
    return seq


def test_resizing_1_3_2_3_1_gives_the_single_process_updates(
    redis_server: RedisServer, tmp_path: Path, dataset: Path
) -> None:
    workdir = drive(redis_server, tmp_path, dataset, "0:1,20:3,40:2,60:3,80:1")
    assert worker_sequence(train_records(workdir)) == [1, 3, 2, 3, 1]
    losses, params = reference_run(dataset)
    assert losses[-1] < losses[0]  # it learns
    assert_same_training(workdir, losses, params)


def test_micro_batches_of_16_on_one_worker_match_four_workers(
    redis_server: RedisServer, tmp_path: Path, dataset: Path
) -> None:
    one = drive(redis_server, tmp_path, dataset, "0:1", "--max-micro-batch", "16")
    four = drive(redis_server, tmp_path, dataset, "0:4")
    assert worker_sequence(train_records(four)) == [4]
    losses, params = reference_run(dataset)
    assert_same_training(one, losses, params)
    assert_same_training(four, losses, params)


def test_a_learner_killed_with_sigkill_costs_no_iteration(
    redis_server: RedisServer, tmp_path: Path, dataset: Path
) -> None:
    workdir = drive(redis_server, tmp_path, dataset, "0:3", "--kill", "50:KILL")
    events = [json.loads(line) for line in (workdir / "events.jsonl").read_text().splitlines()]
    fault = next(e for e in events if e["kind"] == "fault")
    assert fault["signal"] == "SIGKILL"
    records = train_records(workdir)
    resumed = next(r for r in records if r["time"] > fault["time"] and r["workers"] < 3)
    assert resumed["time"] - fault["time"] < 2.0  # the others go on within 2 s
    losses, params = reference_run(dataset)
    assert_same_training(workdir, losses, params)


def events_of(workdir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (workdir / "events.jsonl").read_text().splitlines()]


def test_a_frozen_learner_is_dropped_at_the_timeout_and_reaped(
    redis_server: RedisServer, tmp_path: Path, dataset: Path
) -> None:
    workdir = drive(redis_server, tmp_path, dataset, "0:3", "--kill", "50:STOP", "--timeout", "5")
    events = events_of(workdir)
    fault = next(e for e in events if e["kind"] == "fault")
    failure = next(e for e in events if e["kind"] == "failure")
    assert failure["lost"] == fault["slots"]
    assert failure["time"] - fault["time"] < 5 + 2  # the timeout, plus the report's grace
    losses, params = reference_run(dataset)
    assert_same_training(workdir, losses, params)
    # drive() returned only after every learner, the frozen one too, was killed and reaped


def test_when_every_learner_dies_the_job_resumes_from_its_checkpoint(
    redis_server: RedisServer, tmp_path: Path, dataset: Path
) -> None:
    workdir = drive(redis_server, tmp_path, dataset, "0:2", "--kill", "40:KILL:all")
    restart = next(e for e in events_of(workdir) if e["kind"] == "restart")
    assert restart["from_step"] == 32  # 16 iterations per epoch, a checkpoint each epoch
    assert restart["iterations_lost"] == restart["step"] - 32 > 0
    losses, params = reference_run(dataset)
    assert_same_training(workdir, losses, params, replayed=True)


def test_the_wmla_style_example_trains_like_its_native_twin(
    redis_server: RedisServer, tmp_path: Path, dataset: Path
) -> None:
    runs = {}
    for name in ("cnn", "cnn_wmla"):
        workdir = tmp_path / name
        cmd = [sys.executable, "-m", "workers.learner.drive",
               "--model", str(PROJECT_DIR / "examples" / f"{name}.py"), "--data", str(dataset),
               "--schedule", "0:2", "--max-steps", "24", "--epochs", "2",
               "--workdir", str(workdir)]  # fmt: skip
        env = subprocess_env(tmp_path, REDIS_URL=redis_server.url)
        done = subprocess.run(cmd, cwd=PROJECT_DIR, env=env, capture_output=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        runs[name] = train_records(workdir)
    native = [r["loss"] for r in runs["cnn"]]
    wmla = [r["loss"] for r in runs["cnn_wmla"]]
    assert len(native) == 24
    assert wmla == pytest.approx(native, rel=1e-5)
    logs = "".join(p.read_text() for p in (tmp_path / "cnn_wmla" / "logs").glob("*.log"))
    assert "epoch 0 ended" in logs  # the script's Callback.on_epoch_end ran
    assert "test: epoch 0 loss" in logs  # and its LoggerCallback.log_test_metrics
