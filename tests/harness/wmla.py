"""IBM's WMLA notebook (tests/wmla_notebook.py), run unchanged against a live EDT."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.harness.processes import PROJECT_DIR
from tests.harness.stack import LiveEdt

NOTEBOOK = PROJECT_DIR / "tests" / "wmla_notebook.py"


def run_notebook(
    live: LiveEdt, cwd: Path, user: str, password: str, model_dir: Path, source: Path
) -> tuple[str, str]:
    """Run the notebook as ``user`` with the model folder ``source`` copied to
    ``model_dir``; its output and the exec's id (it must end with status 0)."""
    host, port = re.match(r"http://([^:/]+):(\d+)", live.url).groups()  # type: ignore[union-attr]
    env = dict(os.environ, WMLA_PROTOCOL="http", WMLA_HOST=host, WMLA_PORT=port,
               WMLA_USER=user, WMLA_PASSWORD=password, WMLA_MODEL_DIR=str(model_dir),
               WMLA_MODEL_SOURCE=str(source))  # fmt: skip
    run = subprocess.run([sys.executable, str(NOTEBOOK)], env=env, cwd=cwd,
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    out = run.stdout
    assert run.returncode == 0, out[-3000:] + run.stderr[-3000:]
    found = re.search(r"Exec ID: (\d+)", out)
    assert found, out[-3000:]
    return out, found.group(1)
