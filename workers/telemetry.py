"""Slot telemetry: NVML utilisation and memory for a GPU, CPU and memory use otherwise.

NVML is optional: where the driver or library is missing, ``discover_gpus`` says why and the
host runs in CPU mode. Nothing here raises for a missing GPU.

Every sample carries ``utilisation``, 0..1 over the window since the slot's last sample
(its heartbeat's interval): NVML's GPU utilisation averaged over the samples the driver
took in that window where a GPU is held, else the CPU use of the slot's process tree (its
worker and learner) as a fraction of the cores its learner computes on
(``EDT_TORCH_THREADS``, one by default). It is the one figure of how busy a slot is: the
idle rule (docs/architecture.md, "Idle jobs") and the slot-time ledger read it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
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

    ``cpu_percent`` is in percent of one core, as ``top`` shows it; ``utilisation`` that
    over the ``cores`` the learner computes on, at most 1.
    """

    def __init__(self, pid: int | None = None, cores: int | None = None) -> None:
        self.root = psutil.Process(pid or os.getpid())
        self.cores = max(1, cores or int(os.environ.get("EDT_TORCH_THREADS") or 1))
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
            "utilisation": round(min(1.0, cpu / 100 / self.cores), 3),
            "cpu_percent": round(cpu, 1),
            "rss": rss,
            "host_cpu_percent": psutil.cpu_percent(None),
        }


class NvmlSampler:
    """Utilisation and memory of one GPU, found by UUID (indices can differ per process).
    ``gpu_util`` is NVML's utilisation now (its last sample period); ``utilisation`` the
    mean of the driver's samples since this sampler's last call (:func:`window_mean`), or
    ``gpu_util`` where the driver keeps none."""

    def __init__(self, uuid: str) -> None:
        import pynvml

        self._nvml = pynvml
        pynvml.nvmlInit()
        self.uuid = uuid
        self.handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
        self.name = _text(pynvml.nvmlDeviceGetName(self.handle))
        self.seen_until = 0  # the driver's timestamp (µs) of the last sample averaged
        self.window()  # what came before this sampler is no slot's window

    def window(self) -> float | None:
        """The mean GPU utilisation (0..1) of the driver's samples since the last call;
        None where it has none to give (no new sample, or a driver without them)."""
        nv = self._nvml
        try:
            kind, samples = nv.nvmlDeviceGetSamples(
                self.handle, nv.NVML_GPU_UTILIZATION_SAMPLES, self.seen_until
            )
        except nv.NVMLError:
            return None
        mean, self.seen_until = window_mean(kind, samples, self.seen_until)
        return mean

    def sample(self) -> dict[str, Any]:
        nv = self._nvml
        util = nv.nvmlDeviceGetUtilizationRates(self.handle)
        mem = nv.nvmlDeviceGetMemoryInfo(self.handle)
        mean = self.window()
        return {
            "kind": "gpu",
            "utilisation": round(util.gpu / 100 if mean is None else mean, 3),
            "name": self.name,
            "gpu_util": int(util.gpu),
            "mem_util": int(util.memory),
            "mem_used": int(mem.used),
            "mem_total": int(mem.total),
        }


def window_mean(kind: int, samples: Sequence[Any], after: int) -> tuple[float | None, int]:
    """The mean of NVML samples (``nvmlDeviceGetSamples``: each a ``timeStamp`` in µs and
    a ``sampleValue`` union read as ``kind`` says) newer than ``after``, as a fraction of
    100 %, and the newest timestamp; (None, ``after``) when none is newer."""
    field = VALUE_FIELDS.get(kind, "uiVal")
    fresh = [s for s in samples if s.timeStamp > after]
    if not fresh:
        return None, after
    values = [float(getattr(s.sampleValue, field)) for s in fresh]
    mean = min(1.0, max(0.0, sum(values) / len(values) / 100))
    return mean, max(s.timeStamp for s in fresh)


# nvmlValueType_t -> the field of nvmlValue_t it fills (NVML's utilisation samples are
# unsigned ints in percent)
VALUE_FIELDS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def sampler_for(device: str) -> Sampler:
    """The sampler for a slot's device: ``cpu`` or a GPU UUID."""
    if device == "cpu":
        return CpuSampler()
    return NvmlSampler(device)
