"""Checking an uploaded model in a child process: good models pass, broken ones say why and
where, slow ones are killed with everything they started, and secrets stay out of reach.

Each check is a child that imports torch (seconds), so the cases run side by side once per
module and the tests read their results.
"""

from __future__ import annotations

import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.harness.processes import PROJECT_DIR, alive_pids
from tests.harness.waiting import bound, wait_for
from workers.learner.datasets import write_cifar10
from workers.learner.validate import ValidationResult, validate

EXAMPLES = PROJECT_DIR / "examples"

FORWARD_RAISES = """
import sys
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3 * 32 * 32, 10)

    def forward(self, x):
        raise ValueError("my layer expected 4 channels")

def build_model():
    return Net()

print("hello from the model", flush=True)
sys.stdout.write("{not the report\\n")
"""

WRONG_SHAPE = """
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3 * 32 * 32, 10)

    def forward(self, x):
        return self.fc(x.flatten(1)).mean(0, keepdim=True)

def build_model():
    return Net()
"""

READS_SECRET = """
import os
KEY = os.environ["SECRET_KEY"]

def build_model():
    raise AssertionError("never reached")
"""

CRASHES = """
import os, signal, sys
sys.stderr.write("about to crash\\n")
sys.stderr.flush()
os.kill(os.getpid(), signal.SIGKILL)
"""

SEQUENTIAL_MISMATCH = """
from torch import nn

def build_model():
    return nn.Sequential(nn.Flatten(), nn.Linear(5, 10))
"""

LOSS_NOT_SCALAR = """
from torch import nn

def build_model():
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 10))

def loss_fn(output, target):
    return nn.functional.cross_entropy(output, target, reduction="none")
"""

# name: (source, in the error, in the line)
BROKEN = {
    "syntax": ("def build_model(:\n    pass\n", "SyntaxError", 'File "syntax.py", line 1: def'),
    "no_build_model": ("import torch\n", "defines no build_model()", ""),
    "forward_raises": (FORWARD_RAISES, "the forward pass failed: ValueError: my layer expected "
                       "4 channels", 'File "forward_raises.py", line 11, in forward: raise'),
    "wrong_shape": (WRONG_SHAPE, "output has shape [1, 10] for a batch of 2",
                    'File "wrong_shape.py", line 9, in forward: def forward(self, x):'),
    "reads_secret": (READS_SECRET, "KeyError: 'SECRET_KEY'",
                     'File "reads_secret.py", line 3, in <module>: KEY = os.environ'),
    "crashes": (CRASHES, "about to crash", ""),
    "sequential_mismatch": (SEQUENTIAL_MISMATCH, "RuntimeError: mat1 and mat2 shapes cannot be "
                            "multiplied", 'File "sequential_mismatch.py", line 4, in build_model'),
    "loss_not_scalar": (LOSS_NOT_SCALAR, "the loss must be a tensor with one value; got [2]",
                        'File "loss_not_scalar.py", line 7, in loss_fn: def loss_fn'),
}  # fmt: skip

# name: (model file, validate()'s keyword arguments besides data, with the dataset?)
GOOD: dict[str, tuple[Path, dict[str, Any], bool]] = {
    "cnn": (EXAMPLES / "cnn.py", {}, False),
    "cnn_wmla_data": (EXAMPLES / "cnn_wmla.py", {}, True),
    "mlp_data_100_classes": (EXAMPLES / "mlp.py", {"classes": 100}, True),
}


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ValidationResult]:
    """Every case of this module, validated side by side with a secret in the environment."""
    root, data = tmp_path_factory.mktemp("models"), tmp_path_factory.mktemp("data")
    for folder in (root, data):
        folder.chmod(0o755)  # the check runs as the sandbox's user
    data = write_cifar10(data, train=20, test=10)
    calls: dict[str, tuple[Path, dict[str, Any]]] = {}
    for name, (source, _error, _line) in BROKEN.items():
        calls[name] = (_write(root, name, source), {})
    for name, (path, kwargs, with_data) in GOOD.items():
        calls[name] = (path, {**kwargs, "data": data if with_data else None})
    with pytest.MonkeyPatch.context() as mp, ThreadPoolExecutor(4) as pool:
        mp.setenv("SECRET_KEY", "do-not-leak")
        futures = {name: pool.submit(validate, path, **kw) for name, (path, kw) in calls.items()}
        return {name: future.result() for name, future in futures.items()}


def _write(root: Path, name: str, source: str) -> Path:
    path = root / f"{name}.py"
    path.write_text(source)
    return path


@pytest.mark.parametrize("name", sorted(GOOD))
def test_it_passes_working_models(name: str, results: dict[str, ValidationResult]) -> None:
    result = results[name]
    assert result.ok, result
    assert (result.error, result.line) == ("", "")
    assert result.output_shape == [2, 10]
    assert result.parameters > 10_000


def test_it_tells_native_from_wmla_style(results: dict[str, ValidationResult]) -> None:
    styles = {name: result.style for name, result in results.items() if result.ok}
    assert styles == {"cnn": "native", "mlp_data_100_classes": "native", "cnn_wmla_data": "wmla"}
    assert results["cnn"].parameters == results["cnn_wmla_data"].parameters == 136_874


def test_it_warns_when_outputs_and_classes_differ(results: dict[str, ValidationResult]) -> None:
    assert results["cnn"].warnings == results["cnn_wmla_data"].warnings == []
    assert results["mlp_data_100_classes"].warnings == [
        "the model has 10 outputs per sample; the dataset has 100 classes"
    ]


def test_the_models_prints_do_not_spoil_the_report(results: dict[str, ValidationResult]) -> None:
    assert "hello from the model" in results["forward_raises"].log


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_it_reports_broken_models_with_error_and_line(
    name: str, results: dict[str, ValidationResult]
) -> None:
    _source, error, line = BROKEN[name]
    result = results[name]
    assert not result.ok
    assert error in result.error, result
    assert result.line.startswith(line) if line else result.line == "", result


def test_the_secret_is_scrubbed_not_just_missing(results: dict[str, ValidationResult]) -> None:
    # The fixture set SECRET_KEY in the parent's environment: the KeyError shows it was removed.
    assert "KeyError: 'SECRET_KEY'" in results["reads_secret"].error
    assert "do-not-leak" not in results["reads_secret"].log


def test_it_kills_a_model_that_never_finishes_with_all_it_started(tmp_path: Path) -> None:
    model = _write(
        tmp_path,
        "forever",
        """
import os, subprocess, sys
child = subprocess.Popen(["sleep", "60"], start_new_session=True)
print("PIDS", os.getpid(), child.pid, file=sys.stderr, flush=True)
while True:
    pass  # spinning, not sleeping: only a kill stops it
""",
    )  # its folder is read-only to it: the pids go to its log
    started = time.monotonic()
    # Importing torch takes seconds on a busy machine (over 10 with two cores shared): the
    # model must have started before the time runs out, to start what must be killed.
    result = validate(model, timeout=25)
    assert time.monotonic() - started < 25 + bound(35)  # killed at the limit, not left to run
    assert not result.ok
    assert result.error == "the model took longer than 25 s to build and run one batch"
    line = next(line for line in result.log.splitlines() if line.startswith("PIDS "))
    started_pids = {int(pid) for pid in line.split()[1:]}
    assert len(started_pids) == 2
    wait_for(lambda: not alive_pids(started_pids), 5, "the model's processes to be gone")


def test_the_web_side_imports_no_torch() -> None:
    code = "import sys, workers.learner.validate; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=PROJECT_DIR, capture_output=True,
                         text=True, timeout=30, check=True).stdout  # fmt: skip
    assert out.strip() == "False"
