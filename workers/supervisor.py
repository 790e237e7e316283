"""The one process supervisor: children that are started again when they die.

`make run` (``edtweb/launcher.py``) runs web, live updates, scheduler, metrics consumer and
worker host under it; the worker host (``workers/launcher.py``) runs its slot workers under
it. A child that exits (a crash, a ``kill -9``, Redis away at its start) is started again
after the delay its :class:`RestartPolicy` gives, and each exit and restart is said in one
line. One child's death never stops the others. ``stop`` ends them all: SIGTERM first,
SIGKILL to the stragglers after a grace period, then whatever they had started.

It imports nothing from the web app or Django, so both of its users may import it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import IO, Protocol

import psutil

from protocol.retry import doubling

log = logging.getLogger("edt.supervisor")


@dataclass(frozen=True)
class RestartPolicy:
    """How long a dead child waits before it is started again.

    ``first`` seconds after a death, doubled for each quick death in a row up to ``cap``;
    a child that had run ``healthy`` seconds or more when it died starts the count again.
    ``first == cap`` is a fixed delay (the worker host's ``--restart-delay``)."""

    first: float
    cap: float
    healthy: float = float("inf")

    @classmethod
    def fixed(cls, delay: float) -> RestartPolicy:
        return cls(delay, delay)

    def after_exit(self, quick_deaths: int, ran_for: float) -> tuple[float, int]:
        """The delay before restarting a child that died after ``ran_for`` seconds, with
        ``quick_deaths`` quick deaths before this one; and the count to keep for the next."""
        if ran_for >= self.healthy:
            quick_deaths = 0
        delay = doubling(self.first, self.cap, quick_deaths)
        return delay, quick_deaths + 1


# `make run`'s children: 1 s, doubling to 30 s while a child keeps dying within 30 s.
DOUBLING = RestartPolicy(first=1.0, cap=30.0, healthy=30.0)


def describe_exit(code: int) -> str:
    """A child's exit status in words: ``exit code 3``, ``killed by SIGKILL``."""
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"


class Report(Protocol):
    """Where the supervisor says what happened: a :class:`logging.Logger` or a
    :class:`Console`."""

    def info(self, msg: str, /) -> None: ...

    def warning(self, msg: str, /) -> None: ...


@dataclass
class Child:
    """One supervised process: ``launch`` starts it (again) and returns it."""

    name: str
    launch: Callable[[], subprocess.Popen[bytes]]
    own_group: bool = False  # started in a session of its own: its process group goes with it
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    restart_at: float | None = None
    quick_deaths: int = 0
    restarts: int = 0


class Supervisor:
    def __init__(self, children: Sequence[Child], policy: RestartPolicy,
                 report: Report = log) -> None:  # fmt: skip
        self.children = list(children)
        self.policy = policy
        self.report = report
        self.stopping = threading.Event()

    # Children ------------------------------------------------------------------------------

    def spawn(self, child: Child, now: float) -> None:
        child.proc = child.launch()
        child.started_at, child.restart_at = now, None
        self.report.info(f"{child.name} started (pid {child.proc.pid})")

    def poll(self, now: float) -> None:
        """Notice children that exited; start each again once its delay has passed
        (``now``: the monotonic clock)."""
        for child in self.children:
            if child.proc is not None and child.proc.poll() is not None:
                self._exited(child, now)
            elif child.proc is None and child.restart_at is not None and now >= child.restart_at:
                child.restarts += 1
                self.spawn(child, now)

    def _exited(self, child: Child, now: float) -> None:
        assert child.proc is not None
        code = child.proc.returncode
        if child.own_group:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.proc.pid, signal.SIGKILL)  # what it started goes with it
        child.proc = None
        delay, child.quick_deaths = self.policy.after_exit(child.quick_deaths,
                                                           now - child.started_at)  # fmt: skip
        child.restart_at = now + delay
        self.report.warning(f"{child.name} exited ({describe_exit(code)}); "
                            f"restarting in {delay:.0f} s")  # fmt: skip

    # The loop ------------------------------------------------------------------------------

    def run(self, poll_interval: float = 0.2, grace: float = 15.0) -> int:
        """Start every child and watch them until SIGINT or SIGTERM; then stop them all
        (the main thread only: it takes the signals)."""
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: self.stopping.set())
        try:
            self.watch(poll_interval)
        finally:
            self.stop(grace)
        return 0

    def watch(self, poll_interval: float = 0.2) -> None:
        """Start every child and restart whichever dies, until ``stopping`` is set (any
        thread may run this; ``run`` adds the signals and the final stop)."""
        for child in self.children:
            self.spawn(child, time.monotonic())
        while not self.stopping.wait(poll_interval):
            self.poll(time.monotonic())

    def stop(self, grace: float = 15.0) -> None:
        """SIGTERM every child, SIGKILL those still there after ``grace`` seconds, then
        whatever they started: nothing outlives the supervisor."""
        self.stopping.set()
        running = [c for c in self.children if c.proc is not None and c.proc.poll() is None]
        self.report.info("stopping every process")
        started = [p for c in running if c.proc is not None for p in descendants(c.proc.pid)]
        for child in running:
            assert child.proc is not None
            with contextlib.suppress(ProcessLookupError):
                child.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for child in running:
            self._end(child, deadline)
        for leftover in started:
            with contextlib.suppress(psutil.Error):
                leftover.kill()

    def _end(self, child: Child, deadline: float) -> None:
        """Wait for a child told to stop until ``deadline``; then kill it (and its group)."""
        proc = child.proc
        assert proc is not None
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.report.warning(f"{child.name} (pid {proc.pid}) ignored SIGTERM; killing it")
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if child.own_group:
                os.killpg(proc.pid, signal.SIGKILL)  # whatever it left in its group
            elif proc.poll() is None:
                proc.kill()
        proc.wait()


def descendants(pid: int) -> list[psutil.Process]:
    with contextlib.suppress(psutil.Error):
        return psutil.Process(pid).children(recursive=True)
    return []


# Command lines with their output shown (`make run`) ------------------------------------------


class Console:
    """Children's output line by line, each prefixed with the time and the child's name, as
    honcho shows it; the supervisor's own lines under ``system``."""

    def __init__(self, names: Iterable[str], out: IO[str] | None = None) -> None:
        self.out = out or sys.stdout
        self.width = max((len(name) for name in names), default=0)
        self.lock = threading.Lock()

    def say(self, name: str, line: str) -> None:
        with self.lock:
            self.out.write(f"{time.strftime('%H:%M:%S')} {name.ljust(self.width)} | {line}\n")
            self.out.flush()

    def info(self, msg: str, /) -> None:
        self.say("system", msg)

    warning = info

    def relay(self, name: str, proc: subprocess.Popen[bytes]) -> None:
        """Show ``proc``'s output as it comes, from a thread of its own."""

        def lines() -> None:
            assert proc.stdout is not None
            for raw in proc.stdout:
                self.say(name, raw.decode(errors="replace").rstrip("\n"))

        threading.Thread(target=lines, daemon=True).start()


def command_child(name: str, command: str, env: dict[str, str], cwd: str,
                  console: Console) -> Child:  # fmt: skip
    """A child that runs ``command`` in a session of its own (Ctrl-C reaches the
    supervisor alone, which stops children in order), its output shown on ``console``."""

    def launch() -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            shlex.split(command), env=env, cwd=cwd, start_new_session=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        console.relay(name, proc)
        return proc

    return Child(name, launch, own_group=True)


def supervise_commands(commands: dict[str, str], env: dict[str, str], cwd: str,
                       out: IO[str] | None = None,
                       policy: RestartPolicy = DOUBLING) -> Supervisor:  # fmt: skip
    """A supervisor of command lines (name -> command), their output and its own lines
    written to ``out`` (standard output by default)."""
    console = Console(commands, out)
    children = [command_child(name, cmd, env, cwd, console) for name, cmd in commands.items()]
    return Supervisor(children, policy, console)
