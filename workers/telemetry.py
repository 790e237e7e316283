"""Slot telemetry: NVML utilisation and memory for a GPU, CPU and memory use otherwise.

NVML is optional: where the driver or library is missing, ``discover_gpus`` says why and the
host runs in CPU mode. Nothing here raises for a missing GPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Protocol

import psutil


@dataclass(frozen=True)
class GpuInfo:
    index: int  # NVML index, in PCI bus order
    uuid: str
    name: str
    memory_total: int  # bytes


@dataclass(frozen=True)
class Discovery:
    gpus: list[GpuInfo]
    reason: str  # why no GPU was found, for a one-line message; "" when some were


def discover_gpus() -> Discovery:
    """GPUs visible through NVML, or none with the reason (no driver, no device...)."""
    try:
        import pynvml
    except ImportError as exc:  # pragma: no cover - nvidia-ml-py is a requirement
        return Discovery([], f"nvidia-ml-py is not installed ({exc})")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return Discovery([], f"NVML unavailable: {exc}")
    try:
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
            gpus.append(
                GpuInfo(
                    index=i,
                    uuid=_text(pynvml.nvmlDeviceGetUUID(handle)),
                    name=_text(pynvml.nvmlDeviceGetName(handle)),
                    memory_total=int(mem.total),
                )
            )
        return Discovery(gpus, "" if gpus else "NVML reports no GPU")
    finally:
        pynvml.nvmlShutdown()


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


class Sampler(Protocol):
    def sample(self) -> dict[str, Any]: ...


class CpuSampler:
    """CPU use of a slot: its worker process and every descendant (the learners).

    ``cpu_percent`` is in percent of one core, as ``top`` shows it.
    """

    def __init__(self, pid: int | None = None) -> None:
        self.root = psutil.Process(pid or os.getpid())
        self._procs: dict[int, psutil.Process] = {}
        self.sample()  # prime cpu_percent's interval

    def sample(self) -> dict[str, Any]:
        cpu = 0.0
        rss = 0
        seen: dict[int, psutil.Process] = {}
        for proc in [self.root, *self.root.children(recursive=True)]:
            proc = self._procs.get(proc.pid, proc)
            try:
                cpu += proc.cpu_percent(None)
                rss += proc.memory_info().rss
            except psutil.Error:
                continue
            seen[proc.pid] = proc
        self._procs = seen
        return {
            "kind": "cpu",
            "cpu_percent": round(cpu, 1),
            "rss": rss,
            "host_cpu_percent": psutil.cpu_percent(None),
        }


class NvmlSampler:
    """Utilisation and memory of one GPU, found by UUID (indices can differ per process)."""

    def __init__(self, uuid: str) -> None:
        import pynvml

        self._nvml = pynvml
        pynvml.nvmlInit()
        self.uuid = uuid
        self.handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
        self.name = _text(pynvml.nvmlDeviceGetName(self.handle))

    def sample(self) -> dict[str, Any]:
        nv = self._nvml
        util = nv.nvmlDeviceGetUtilizationRates(self.handle)
        mem = nv.nvmlDeviceGetMemoryInfo(self.handle)
        return {
            "kind": "gpu",
            "name": self.name,
            "gpu_util": int(util.gpu),
            "mem_util": int(util.memory),
            "mem_used": int(mem.used),
            "mem_total": int(mem.total),
        }


def sampler_for(device: str) -> Sampler:
    """The sampler for a slot's device: ``cpu`` or a GPU UUID."""
    if device == "cpu":
        return CpuSampler()
    return NvmlSampler(device)
