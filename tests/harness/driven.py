"""Jobs driven without the scheduler (``python -m workers.learner.drive``) and the plain
single-process training they must equal, for the input pipeline's tests: the same seed,
order and global batch, read from any of the platform's datasets (an image folder's
samples decoded one by one, as a plain loop over the dataset would)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from edtweb.redis_server import RedisServer
from tests.harness.processes import PROJECT_DIR, subprocess_env
from workers.learner.contract import load_definition
from workers.learner.datasets import load_dataset
from workers.learner.partition import iterations_per_epoch, permutation

MLP = PROJECT_DIR / "examples" / "mlp.py"
PACED_TWIN = PROJECT_DIR / "tests" / "models" / "paced_twin_mlp.py"  # MLP, 0.1 s a step
BATCH, LR, SEED = 64, 0.01, 0


def drive(redis: RedisServer, tmp: Path, data: Path, schedule: str, steps: int, *extra: str,
          model: Path = MLP) -> Path:  # fmt: skip
    """Run the job to ``steps`` on the schedule's sizes; its working directory."""
    workdir = tmp / f"run-{schedule.replace(':', '_').replace(',', '-')}"
    cmd = [
        sys.executable, "-m", "workers.learner.drive", "--model", str(model), "--data", str(data),
        "--schedule", schedule, "--batch-size", str(BATCH), "--max-steps", str(steps),
        "--epochs", "100", "--lr", str(LR), "--seed", str(SEED), "--workdir", str(workdir),
        "--deadline", "240", *extra,
    ]  # fmt: skip
    env = subprocess_env(tmp, REDIS_URL=redis.url)
    result = subprocess.run(
        cmd, cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return workdir


def records(workdir: Path, kind: str) -> list[dict[str, Any]]:
    lines = (workdir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["type"] == kind]


def train_steps(workdir: Path) -> list[dict[str, Any]]:
    """The last record of each step (a step redone after a restart counts once)."""
    return list({r["step"]: r for r in records(workdir, "train")}.values())


def events(workdir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (workdir / "events.jsonl").read_text().splitlines()]


def plain_training(
    data: Path, steps: int, transform: Any = None
) -> tuple[list[float], dict[str, torch.Tensor]]:
    """One process, the dataset held whole, ``steps`` updates in the protocol's order;
    ``transform(epoch, index, x)`` augments a sample where given."""
    defn = load_definition(MLP)
    train, _test, _ = load_dataset(data)
    samples = [train[i] for i in range(len(train))]  # type: ignore[arg-type]
    torch.manual_seed(SEED)
    model = defn.build_model()
    optimizer = defn.build_optimizer(model.parameters(), LR)
    per_epoch = iterations_per_epoch(len(samples), BATCH)
    losses = []
    for step in range(steps):
        epoch, it = divmod(step, per_epoch)
        idx = permutation(len(samples), SEED, epoch)[it * BATCH : (it + 1) * BATCH]
        xs = [samples[i][0] if transform is None else transform(epoch, i) for i in idx]
        x, y = torch.stack(xs), torch.tensor([samples[i][1] for i in idx])
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses, model.state_dict()


def assert_same_training(
    workdir: Path, steps: int, losses: list[float], params: dict[str, torch.Tensor]
) -> None:
    """Every step once, each loss and the final parameters within 1e-4 of the plain run's."""
    done = train_steps(workdir)
    assert [r["step"] for r in done] == list(range(1, steps + 1))
    for record, expected in zip(done, losses, strict=True):
        assert record["loss"] == pytest.approx(expected, rel=1e-4), record
    final = torch.load(workdir / "model.pt", weights_only=True)
    for name, value in params.items():
        torch.testing.assert_close(final[name], value, rtol=1e-4, atol=1e-6)


def sizes(workdir: Path) -> list[int]:
    """The job's sizes in the order it trained at them."""
    seq: list[int] = []
    for r in train_steps(workdir):
        if not seq or seq[-1] != r["workers"]:
            seq.append(r["workers"])
    return seq
