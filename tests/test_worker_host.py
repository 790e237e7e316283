"""The worker host with real Celery workers against the test Redis."""

from __future__ import annotations

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
