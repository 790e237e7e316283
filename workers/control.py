"""The control worker's work: model checks and dataset preparations, off the web.

Each worker host runs one control worker (``workers/launcher.py``), a Celery worker of the
prefork pool on the queue ``control``. Its tasks (``workers/tasks.py``) run a management
command (``edt_check_model ID``, ``edt_prepare_dataset ID``) as a child process and wait for
it: the web's code and the user's never run in the Celery process, and the model check's
child runs the user's code in the sandbox as before (``workers/learner/validate.py``).

Surviving a lost process: the tasks are acknowledged late and rejected (put back on the
queue) when the pool process running them died, so another process takes them again. The
command counts each start in the database row; the start after a second loss fails the
check or the preparation with a message instead of running it. The command's child dies
with the task's process (``sandbox.dies_with_parent``), so two runs never overlap.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from workers import sandbox

CONTROL_QUEUE = "control"
CHECK_MODEL = "edt.check_model"
PREPARE_DATASET = "edt.prepare_dataset"
PROJECT_DIR = Path(__file__).resolve().parent.parent


def run_command(command: str, object_id: int, log: Path) -> int:
    """Run ``manage.py COMMAND OBJECT_ID`` to its end, its errors appended to ``log``; the
    exit status as ``Popen.returncode`` gives it (negative: killed by that signal). Without
    Django's system checks: the worker host ran them as it started (they import every view:
    most of a second of CPU, in each check and preparation)."""
    with log.open("ab") as err:
        proc = subprocess.Popen(
            [sys.executable, "manage.py", command, "--skip-checks", str(object_id)],
            cwd=PROJECT_DIR,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            # SIGKILL: the command is never half stopped; the model check's sandbox below it
            # ends its user's code when the command dies (validate's own dies_with_parent).
            preexec_fn=sandbox.dies_with_parent(signal.SIGKILL),
        )
        return proc.wait()
