"""The worker host with real Celery workers against the test Redis."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import psutil
import pytest
from celery import Celery

from edtweb.redis_server import RedisServer
from protocol.keys import ALIVE, LOST, OFFLINE
from scheduler.store import Store
from tests.harness.processes import Processes, alive_pids, subprocess_env
from tests.harness.waiting import wait_for
from workers.control import CONTROL_QUEUE
from workers.launcher import plan_slots, slot_env
from workers.learner import host as learner_host
from workers.learner.zygote import ZYGOTE_ENV
from workers.telemetry import Discovery, GpuInfo

GPUS = Discovery(
    [GpuInfo(0, "GPU-aaaa", "H100", 80 << 30), GpuInfo(1, "GPU-bbbb", "H100", 80 << 30)], ""
)


def test_one_slot_per_gpu_identified_by_uuid() -> None:
    specs = plan_slots("gpu-host", GPUS, None)
    assert [(s.slot_id, s.device, s.queue) for s in specs] == [
        ("gpu-host.0", "GPU-aaaa", "slot.gpu-host.0"),
        ("gpu-host.1", "GPU-bbbb", "slot.gpu-host.1"),
    ]
    env = slot_env(specs[1], {}, parent_pid=1)
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-bbbb"
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    # The GPU's model as NVML named it: resource groups' rules read it from the slot.
    assert [s.model for s in specs] == ["H100", "H100"] and env["EDT_SLOT_MODEL"] == "H100"


def test_cpu_mode_defaults_to_four_single_threaded_slots() -> None:
    specs = plan_slots("cpu-host", Discovery([], "NVML unavailable"), None)
    assert [s.device for s in specs] == ["cpu"] * 4
    env = slot_env(specs[0], {}, parent_pid=1)
    assert env["CUDA_VISIBLE_DEVICES"] == "" and env["EDT_SLOT_MODEL"] == ""
    assert env["OMP_NUM_THREADS"] == "1"


def test_a_gpu_slot_names_its_model_as_the_launcher_or_nvml_found_it() -> None:
    from workers.slot import gpu_model

    class Nvml:  # what a GPU slot's sampler knows: NVML's name for its GPU
        name = "NVIDIA H100 80GB HBM3"

        def sample(self) -> dict[str, object]:
            return {}

    assert gpu_model("GPU-aaaa", "H100", Nvml()) == "H100"
    assert gpu_model("GPU-aaaa", "", Nvml()) == "NVIDIA H100 80GB HBM3"
    assert gpu_model("cpu", "H100", Nvml()) == ""


def test_cpu_slots_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        plan_slots("h", Discovery([], ""), 0)


def host_slots(store: Store, host: str) -> dict[str, str]:
    return {s.slot_id: s.state for s in store.list_slots() if s.host == host}


def test_three_slots_register_and_a_killed_one_is_lost_then_restarted(
    redis_server: RedisServer, store: Store, processes: Processes, tmp_path: Path
) -> None:
    host = "wh-three"
    log = tmp_path / "worker.log"
    proc = processes.manage(
        "edt_worker", "--cpu-slots", "3", "--host-name", host,
        env=subprocess_env(tmp_path), log=log,
    )  # fmt: skip
    ids = [f"{host}.{i}" for i in range(3)]
    wait_for(lambda: host_slots(store, host) == dict.fromkeys(ids, ALIVE), 10, "three alive slots")
    # What resource groups' rules read: the host's slot count; no GPU model on a CPU slot.
    described = {(s.host_slots, s.model) for s in store.list_slots() if s.host == host}
    assert described == {(3, "")}

    # Each slot's worker consumes its own queue.
    celery = Celery(broker=redis_server.url, backend=redis_server.url)
    reply = celery.send_task("edt.ping", queue="slot." + ids[1]).get(timeout=10)
    assert reply["slot"] == ids[1]
    # Its control worker takes model checks and dataset preparations.
    control = celery.send_task("edt.ping", queue=CONTROL_QUEUE).get(timeout=30)
    assert control["pid"] in {p.pid for p in psutil.Process(proc.pid).children(recursive=True)}

    victim = next(s for s in store.list_slots() if s.slot_id == ids[1])
    os.kill(victim.pid, signal.SIGKILL)
    wait_for(lambda: host_slots(store, host)[ids[1]] == LOST, 10, "the killed slot to be lost")
    states = host_slots(store, host)
    assert states[ids[0]] == ALIVE and states[ids[2]] == ALIVE

    # The host starts a new worker for the slot after its restart delay.
    wait_for(
        lambda: (
            [s.pid for s in store.list_slots() if s.slot_id == ids[1] and s.alive]
            not in ([], [victim.pid])
        ),
        30,
        "the slot's worker to be restarted",
    )
    output = log.read_text()
    assert "CPU mode with 3 slot(s)" in output
    assert "control worker of wh-three: worker started" in output
    assert "worker exited (killed by SIGKILL); restarting in 10 s" in output
    assert "Traceback" not in output

    children = processes.remember_descendants(proc)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0
    assert host_slots(store, host) == dict.fromkeys(ids, OFFLINE)
    assert alive_pids(children) == set()


def test_worker_host_says_in_one_line_when_redis_is_down(
    processes: Processes, tmp_path: Path
) -> None:
    log = tmp_path / "worker.log"
    proc = processes.manage(
        "edt_worker", "--cpu-slots", "1",
        env=subprocess_env(tmp_path, REDIS_URL="redis://127.0.0.1:1/0"), log=log,
    )  # fmt: skip
    assert proc.wait(timeout=30) != 0
    output = log.read_text().strip()
    assert "Traceback" not in output
    assert output.startswith("CommandError: Redis at redis://127.0.0.1:1/0 does not answer")


def running(proc: psutil.Process) -> bool:
    return bool(alive_pids({proc.pid}))


def test_a_hosts_slots_fork_their_fork_servers_from_its_zygote(
    redis_server: RedisServer, store: Store, processes: Processes, tmp_path: Path
) -> None:
    """A CPU host imports the learner once, in its zygote (workers/learner/zygote.py):
    each slot's fork server is forked from it, with none of the platform's environment. A
    killed slot worker's fork server ends with it; a killed zygote is started again, and a
    slot worker started after that has its fork server from the new one."""
    host = "wh-zygote"
    log = tmp_path / "worker.log"
    proc = processes.manage(
        "edt_worker", "--cpu-slots", "2", "--host-name", host, "--restart-delay", "1",
        env=subprocess_env(tmp_path), log=log,
    )  # fmt: skip
    ids = [f"{host}.{i}" for i in range(2)]

    def warm() -> dict[str, int]:  # slot -> its worker's pid, for the warm ones
        return {s.slot_id: s.pid for s in store.list_slots()
                if s.host == host and s.alive and s.telemetry.get("warm")}  # fmt: skip

    def zygote() -> psutil.Process | None:
        for child in psutil.Process(proc.pid).children():
            with contextlib.suppress(psutil.Error):  # a dead one, not reaped yet
                if "workers.learner.zygote" in " ".join(child.cmdline()):
                    return child
        return None

    def servers_of(parent: psutil.Process | None) -> list[psutil.Process]:
        return [p for p in parent.children() if running(p)] if parent is not None else []

    wait_for(lambda: set(warm()) == set(ids), 120, "both slots warm")
    first = zygote()
    assert first is not None
    servers = servers_of(first)
    assert len(servers) == 2, servers  # one fork server per slot, forked: no import each
    for server in servers:
        environ = Path(f"/proc/{server.pid}/environ").read_bytes()
        assert b"REDIS_URL" not in environ and b"EDT_SLOT_" not in environ
        assert b"OMP_NUM_THREADS=1" in environ
    for pid in warm().values():  # no slot worker started a fork server of its own
        assert not any("multiprocessing.forkserver" in " ".join(c.cmdline())
                       for c in psutil.Process(pid).children())  # fmt: skip

    os.kill(warm()[ids[0]], signal.SIGKILL)
    wait_for(lambda: sum(not running(s) for s in servers) == 1, 10,
             "the dead slot's fork server to end, and only it")  # fmt: skip
    first.kill()
    wait_for(lambda: zygote() not in (None, first), 30, "a new zygote")
    wait_for(lambda: set(warm()) == set(ids), 120, "the killed slot warm again")
    wait_for(lambda: len(servers_of(zygote())) == 1, 30,
             "the restarted slot's fork server, from the new zygote")  # fmt: skip
    assert "learner zygote exited (killed by SIGKILL)" in log.read_text()
    children = processes.remember_descendants(proc)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert alive_pids(children) == set()


def test_a_slot_whose_zygote_does_not_answer_starts_its_fork_server_as_before(
    tmp_path: Path,
) -> None:
    """No zygote listening (gone, or not within the wait): nothing is changed, and the
    slot's fork server starts the stock way."""
    from multiprocessing.forkserver import ForkServer

    server = ForkServer()
    assert not learner_host._from_zygote(str(tmp_path / "none.sock"), 0.3, server)
    assert server._forkserver_pid is None  # type: ignore[attr-defined]
    assert "ensure_running" not in vars(server)
    assert ZYGOTE_ENV not in os.environ
