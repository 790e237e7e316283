"""The one supervisor (workers/supervisor.py): restart delays by policy, with real children
that die, and a stop that leaves nothing behind."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import psutil
import pytest

from tests.harness.processes import PROJECT_DIR, alive_pids
from tests.harness.waiting import wait_for
from workers.supervisor import (
    DOUBLING,
    Child,
    RestartPolicy,
    Supervisor,
    describe_exit,
    supervise_commands,
)

QUICK = 0.5  # seconds a child ran before it died: a quick death for every policy below


@pytest.mark.parametrize(
    ("policy", "ran_for", "delays"),
    [
        # `make run`'s children: 1 s doubling to 30 s, back to 1 s after 30 s of running.
        (DOUBLING, [QUICK] * 8, [1, 2, 4, 8, 16, 30, 30, 30]),
        (DOUBLING, [QUICK, QUICK, QUICK, 30.0, QUICK, 29.9, QUICK], [1, 2, 4, 1, 2, 4, 8]),
        (DOUBLING, [45.0, 45.0, QUICK], [1, 1, 2]),
        # The worker host's --restart-delay: the same delay whatever happened before.
        (RestartPolicy.fixed(10.0), [QUICK, QUICK, 100.0, QUICK], [10, 10, 10, 10]),
        (RestartPolicy.fixed(0.0), [QUICK, QUICK], [0, 0]),
        (RestartPolicy(0.5, 3.0, healthy=5.0), [1, 1, 1, 1, 5, 1], [0.5, 1, 2, 3, 0.5, 1]),
    ],
)
def test_restart_delays_double_on_quick_deaths_and_reset_after_a_healthy_run(
    policy: RestartPolicy, ran_for: list[float], delays: list[float]
) -> None:
    quick_deaths, seen = 0, []
    for ran in ran_for:
        delay, quick_deaths = policy.after_exit(quick_deaths, ran)
        seen.append(delay)
    assert seen == delays


def test_the_delay_stays_at_its_cap_after_very_many_deaths() -> None:
    assert DOUBLING.after_exit(10_000, QUICK) == (30.0, 10_001)


@pytest.mark.parametrize(
    ("code", "words"),
    [(0, "exit code 0"), (3, "exit code 3"), (-9, "killed by SIGKILL"),
     (-15, "killed by SIGTERM"), (-200, "exit code -200")],
)  # fmt: skip
def test_an_exit_status_in_words(code: int, words: str) -> None:
    assert describe_exit(code) == words


def test_a_dying_child_is_started_again_after_its_policys_delays() -> None:
    """A real child that exits at once, on a clock of the test's own: each death is noticed
    and said, no restart comes before its delay, one comes at it."""
    out = io.StringIO()
    command = f"{sys.executable} -c 'raise SystemExit(3)'"
    supervisor = supervise_commands({"crash": command}, dict(os.environ), str(PROJECT_DIR), out)
    child = supervisor.children[0]
    now, delays = 1000.0, []
    supervisor.spawn(child, now)
    for ran in (QUICK, QUICK, QUICK, 31.0, QUICK):
        assert child.proc is not None
        child.proc.wait(timeout=30)
        now += ran
        supervisor.poll(now)
        assert child.proc is None and child.restart_at is not None
        delays.append(child.restart_at - now)
        supervisor.poll(child.restart_at - 0.01)
        assert child.proc is None, "started again before its delay"
        now = child.restart_at
        supervisor.poll(now)
    assert delays == [1, 2, 4, 1, 2]
    assert child.restarts == 5
    supervisor.stop(grace=5)
    assert "crash exited (exit code 3); restarting in 4 s" in out.getvalue()


STUBBORN = (
    "import signal, subprocess, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "subprocess.Popen(['sleep', '60'])\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)


@pytest.mark.parametrize("own_group", [True, False], ids=["own-session", "same-session"])
def test_a_child_that_ignores_sigterm_is_killed_with_what_it_started(own_group: bool) -> None:
    def launch() -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, "-c", STUBBORN], stdout=subprocess.PIPE,
                                start_new_session=own_group)  # fmt: skip

    out = io.StringIO()
    supervisor = Supervisor([Child("stubborn", launch, own_group)], DOUBLING, ReportTo(out))
    child = supervisor.children[0]
    supervisor.spawn(child, 0.0)
    assert child.proc is not None and child.proc.stdout is not None
    assert child.proc.stdout.readline() == b"ready\n"
    started = {p.pid for p in psutil.Process(child.proc.pid).children(recursive=True)}
    assert started, "its sleep runs"
    supervisor.stop(grace=0.5)
    assert child.proc.returncode == -9
    wait_for(lambda: not alive_pids(started), 10, "what it started to be gone")
    assert f"stubborn (pid {child.proc.pid}) ignored SIGTERM; killing it" in out.getvalue()


class ReportTo:
    """The supervisor's lines into a text buffer."""

    def __init__(self, out: io.StringIO) -> None:
        self.out = out

    def info(self, msg: str, /) -> None:
        self.out.write(msg + "\n")

    warning = info
