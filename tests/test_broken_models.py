"""Broken model code ends the job with the user's error, fast, and leaves nothing behind."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from edtweb.redis_server import RedisServer
from tests.harness.processes import PROJECT_DIR, subprocess_env, using
from tests.harness.waiting import bound
from workers.learner.datasets import write_cifar10

FORWARD_RAISES = """
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3 * 32 * 32, 10)

    def forward(self, x):
        raise ValueError("my layer expected 4 channels")

def build_model():
    return Net()
"""

NAN_LOSS = """
import torch
from torch import nn

def build_model():
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 10))

def loss_fn(output, target):
    return output.sum() * float("nan")
"""

CASES = {
    "syntax": ("def build_model(:\n    pass\n", "SyntaxError", 'File "broken.py", line 1'),
    "no_build_model": ("import torch\n", "defines no build_model()", ""),
    "forward_raises": (FORWARD_RAISES, "ValueError: my layer expected 4 channels",
                       'File "broken.py", line 11, in forward'),
    "nan_loss": (NAN_LOSS, "the loss is nan at epoch 0, iteration 0", ""),
}  # fmt: skip


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_cifar10(tmp_path_factory.mktemp("data"), train=256, test=64)


@pytest.mark.parametrize("case", sorted(CASES))
def test_broken_model_code_fails_the_job_with_its_error(
    case: str, redis_server: RedisServer, tmp_path: Path, dataset: Path
) -> None:
    source, message, trace = CASES[case]
    model = tmp_path / "broken.py"
    model.write_text(source)
    workdir = tmp_path / "job"
    cmd = [sys.executable, "-m", "workers.learner.drive", "--model", str(model),
           "--data", str(dataset), "--schedule", "0:2", "--workdir", str(workdir)]  # fmt: skip
    started = time.monotonic()
    result = subprocess.run(cmd, cwd=PROJECT_DIR, capture_output=True, text=True, timeout=120,
                            env=subprocess_env(tmp_path, REDIS_URL=redis_server.url))  # fmt: skip
    assert result.returncode == 2, result.stdout + result.stderr
    assert time.monotonic() - started < bound(30)
    events = [json.loads(line) for line in (workdir / "events.jsonl").read_text().splitlines()]
    failed = next(e for e in events if e["kind"] == "failed")
    assert message in failed["error"]
    assert trace in failed["error"]
    logs = "".join(p.read_text() for p in (workdir / "logs").glob("*.log"))
    assert "Traceback" in logs and message.split(":")[0] in logs
    assert using(workdir) == []
