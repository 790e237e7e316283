"""`make run`'s process supervisor: web, live updates, scheduler, metrics consumer and
worker host as children that are restarted when they die.

A child that exits (a crash, a `kill -9`, Redis away at its start) is started again after a
delay that doubles while it keeps dying quickly (1 s up to 30 s) and resets once it has run
for a while; each exit and restart is logged. One child's crash never stops the others.
SIGINT (Ctrl-C) or SIGTERM stops every child: SIGTERM first, SIGKILL to the stragglers'
process groups after a grace period. Each child's output is shown line by line, prefixed
with its name, as honcho does.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import IO

FIRST_DELAY = 1.0
MAX_DELAY = 30.0
STABLE_AFTER = 30.0  # seconds of running after which a child's backoff resets


@dataclass
class Child:
    name: str
    command: str
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    restart_at: float | None = None
    delay: float = FIRST_DELAY
    restarts: int = 0


def describe_exit(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"


class Supervisor:
    def __init__(self, commands: dict[str, str], env: dict[str, str], cwd: str,
                 out: IO[str] | None = None) -> None:  # fmt: skip
        self.children = [Child(name, cmd) for name, cmd in commands.items()]
        self.env, self.cwd = env, cwd
        self.out = out or sys.stdout
        self.width = max((len(name) for name in commands), default=0)
        self.lock = threading.Lock()
        self.stopping = threading.Event()

    def say(self, name: str, line: str) -> None:
        with self.lock:
            self.out.write(f"{time.strftime('%H:%M:%S')} {name.ljust(self.width)} | {line}\n")
            self.out.flush()

    # Children ------------------------------------------------------------------------------

    def spawn(self, child: Child) -> None:
        # Its own session: Ctrl-C reaches the supervisor alone, which stops children in order.
        child.proc = subprocess.Popen(
            shlex.split(child.command), env=self.env, cwd=self.cwd, start_new_session=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        child.started_at, child.restart_at = time.monotonic(), None
        self.say("system", f"{child.name} started (pid {child.proc.pid})")
        threading.Thread(target=self._relay, args=(child.name, child.proc), daemon=True).start()

    def _relay(self, name: str, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            self.say(name, raw.decode(errors="replace").rstrip("\n"))

    def poll(self, now: float) -> None:
        """Notice children that exited; start each again once its delay has passed."""
        for child in self.children:
            if child.proc is not None and child.proc.poll() is not None:
                self._exited(child, now)
            elif child.proc is None and child.restart_at is not None and now >= child.restart_at:
                child.restarts += 1
                self.spawn(child)

    def _exited(self, child: Child, now: float) -> None:
        assert child.proc is not None
        code = child.proc.returncode
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.proc.pid, signal.SIGKILL)  # what it started goes with it
        child.proc = None
        if now - child.started_at >= STABLE_AFTER:
            child.delay = FIRST_DELAY
        child.restart_at = now + child.delay
        self.say("system", f"{child.name} exited ({describe_exit(code)}); "
                           f"restarting in {child.delay:.0f} s")  # fmt: skip
        child.delay = min(MAX_DELAY, child.delay * 2)

    # The loop ------------------------------------------------------------------------------

    def run(self, poll_interval: float = 0.2) -> int:
        """Start every child and watch them until SIGINT or SIGTERM; then stop them all."""
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: self.stopping.set())
        try:
            self.watch(poll_interval)
        finally:
            self.stop()
        return 0

    def watch(self, poll_interval: float = 0.2) -> None:
        """Start every child and restart whichever dies, until ``stopping`` is set (any
        thread may run this; ``run`` adds the signals and the final stop)."""
        for child in self.children:
            self.spawn(child)
        while not self.stopping.wait(poll_interval):
            self.poll(time.monotonic())

    def stop(self, grace: float = 15.0) -> None:
        running = [c.proc for c in self.children if c.proc is not None and c.proc.poll() is None]
        self.say("system", "stopping every process")
        for proc in running:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in running:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.say("system", f"pid {proc.pid} ignored SIGTERM; killing it")
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)  # whatever it left in its group
            proc.wait()
