"""The model check's pid file, read by every page that looks for dead checkers while the
checker rewrites it: a reader that found it empty or half written took the checker for
gone and started another (after two, the model failed as "interrupted 3 times")."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from django.test import override_settings

from edtweb.registry import services
from tests.harness.processes import PROJECT_DIR, subprocess_env
from tests.harness.waiting import wait_for

MODEL = 7
# Another process rewrites the pid file as run_check does, naming itself, until told to stop.
REWRITER = f"""
import os, sys, time, django
django.setup()
from edtweb.registry import services
stop = services._pid_file({MODEL}).with_name("stop")
while not stop.exists():
    services._write_pid_file({MODEL}, f"{{os.getpid()}} {{time.time()}} here")
"""


def test_a_checker_rewriting_its_pid_file_is_never_taken_for_gone(tmp_path: Path) -> None:
    folder = tmp_path / "models" / str(MODEL)
    folder.mkdir(parents=True)
    proc = subprocess.Popen(
        [sys.executable, "-c", REWRITER],
        cwd=PROJECT_DIR,
        env=subprocess_env(tmp_path, DJANGO_SETTINGS_MODULE="edtweb.settings"),
    )
    try:
        with override_settings(EDT_DATA_DIR=str(tmp_path)):
            wait_for(lambda: (folder / "check.pid").exists(), 60, "the rewriter's pid file")
            looks = gone = 0
            end = time.monotonic() + 2.0
            while time.monotonic() < end:
                looks += 1
                gone += not services._checker_alive(MODEL)
            assert proc.poll() is None, "the rewriter stopped early"
    finally:
        (folder / "stop").touch()
        proc.wait(30)
    assert looks > 1000, looks
    assert gone == 0, f"{gone} of {looks} looks took a running checker for gone"
    assert sorted(p.name for p in folder.iterdir()) == ["check.pid", "stop"]  # no parts left
