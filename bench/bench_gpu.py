"""The engine on one GPU against plain single-GPU PyTorch.

    python bench/bench_gpu.py [--pairs 5] [--only wide|resnet] [--diagnose]

Needs a CUDA device; without one it says so and leaves bench/results/gpu.md as it is.
For each model, interleaved pairs (the order alternates): the engine
(``workers.learner.drive``, one learner, NCCL) and a plain training loop on the same GPU
with the same model, data, batch, per-epoch order and precision (bf16 autocast on both
sides where the device supports it, fp32 otherwise), both timed over the same steps inside
the first epoch. The plain loop keeps the data on the device, as the engine does with an
in-memory dataset that fits. NVML samples the device's utilisation every 0.1 s during each
run (telemetry: a host-bound step shows as a device that idles).
Models: the wide MLP (bench/wide_mlp.py, communication- and memory-bound) and a
ResNet-18-sized CNN (bench/resnet18.py), batch 256.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

import torch  # noqa: E402

from bench.bench_engine import WIDE, Setup, engine_run  # noqa: E402
from edtweb.redis_server import RedisServer  # noqa: E402
from workers.learner.datasets import write_cifar10  # noqa: E402

RESNET = PROJECT / "bench" / "resnet18.py"
SETUPS = {
    "wide": Setup("wide MLP (bench/wide_mlp.py, 21.0 M parameters)", WIDE, 256, 20, 200, 0.95),
    "resnet": Setup(
        "ResNet-18-sized CNN (bench/resnet18.py, 11.2 M parameters)", RESNET, 256, 10, 60, 0.95
    ),
}


def precision() -> str:
    return "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "fp32"


def plain(model: str, data: str, warmup: int, steps: int, batch: int, prec: str) -> None:
    """Plain PyTorch on one GPU; prints samples/s over the window."""
    from workers.learner.contract import load_definition
    from workers.learner.datasets import load_dataset
    from workers.learner.partition import iterations_per_epoch, permutation

    if os.environ.get("EDT_TORCH_THREADS"):  # as a learner sets it (--diagnose)
        torch.set_num_threads(int(os.environ["EDT_TORCH_THREADS"]))
    defn = load_definition(Path(model))
    train, _test, _ = load_dataset(Path(data))
    x_all, y_all = (t.cuda() for t in train.tensors)
    torch.manual_seed(0)
    net = defn.build_model().cuda()
    optimizer = defn.build_optimizer(net.parameters(), 0.01)
    per_epoch = iterations_per_epoch(len(x_all), batch)
    order: tuple[int, torch.Tensor] = (-1, torch.empty(0))
    started = 0.0
    for n in range(warmup + steps):
        if n == warmup:
            torch.cuda.synchronize()
            started = time.perf_counter()
        epoch, it = divmod(n, per_epoch)
        if order[0] != epoch:
            order = (epoch, torch.tensor(permutation(len(x_all), 0, epoch), device="cuda"))
        idx = order[1][it * batch : (it + 1) * batch]
        optimizer.zero_grad()
        cast = torch.autocast("cuda", dtype=torch.bfloat16) if prec == "bf16" else nullcontext()
        with cast:
            loss = defn.loss_fn(net(x_all[idx]), y_all[idx])
        loss.backward()
        optimizer.step()
    torch.cuda.synchronize()
    print(json.dumps({"samples_per_s": steps * batch / (time.perf_counter() - started)}))


class Utilisation:
    """NVML's utilisation of device 0, sampled every 0.1 s while in the block."""

    def __enter__(self) -> Utilisation:
        import pynvml

        pynvml.nvmlInit()
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        self.samples: list[int] = []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def _run(self) -> None:
        import pynvml

        while not self.done.wait(0.1):
            self.samples.append(int(pynvml.nvmlDeviceGetUtilizationRates(self.handle).gpu))

    def __exit__(self, *exc: Any) -> None:
        self.done.set()
        self.thread.join()

    @property
    def mean(self) -> float:
        busy = [s for s in self.samples if s > 0]  # start-up and teardown idle: left out
        return statistics.mean(busy) if busy else 0.0


def plain_run(s: Setup, data: Path, prec: str, as_learner: bool = False) -> float:
    """The plain loop in a process of its own; ``as_learner``: with what a learner's process
    is given besides the engine (one torch thread, ``EDT_TORCH_THREADS``; huge pages for the
    CPU allocator, ``THP_MEM_ALLOC_ENABLE``), to tell that apart from the engine's step."""
    cmd = [sys.executable, __file__, "--plain", str(s.model), str(data), str(s.warmup),
           str(s.steps), str(s.batch), prec]  # fmt: skip
    env = {k: v for k, v in os.environ.items()
           if k not in ("EDT_TORCH_THREADS", "THP_MEM_ALLOC_ENABLE")}  # fmt: skip
    if as_learner:
        env.update(EDT_TORCH_THREADS="1", THP_MEM_ALLOC_ENABLE="1")
    out = subprocess.run(cmd, cwd=PROJECT, env=env, check=True, capture_output=True,
                         text=True).stdout  # fmt: skip
    return float(json.loads(out.strip().splitlines()[-1])["samples_per_s"])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--only", choices=sorted(SETUPS))
    p.add_argument("--diagnose", action="store_true",
                   help="a third side in each pair: the plain loop with a learner's process "
                        "settings (printed, not in the table)")  # fmt: skip
    p.add_argument("--plain", nargs=6, metavar=("MODEL", "DATA", "WARMUP", "STEPS", "BATCH",
                                                "PRECISION"))  # fmt: skip
    a = p.parse_args()
    if a.plain:
        model, data, warmup, steps, batch, prec = a.plain
        plain(model, data, int(warmup), int(steps), int(batch), prec)
        return
    if not torch.cuda.is_available():
        print("no CUDA device: bench_gpu.py needs one; bench/results/gpu.md left as it is")
        return
    device, prec = torch.cuda.get_device_name(0), precision()
    rows = []
    with tempfile.TemporaryDirectory(prefix="edt-bench-gpu-") as tmpdir:
        tmp = Path(tmpdir)
        data = write_cifar10(tmp / "data", train=65536, test=256)
        redis = RedisServer(tmp / "redis", appendonly=False, dies_with_parent=True).start()
        try:
            for key, s in SETUPS.items():
                if a.only and key != a.only:
                    continue
                runs = []
                for i in range(a.pairs):
                    load = os.getloadavg()[0]
                    order = ["engine", "plain"] if i % 2 == 0 else ["plain", "engine"]
                    if a.diagnose:
                        order.insert(1, "plain as a learner")
                    got: dict[str, tuple[float, float]] = {}
                    for side in order:
                        with Utilisation() as util:
                            if side == "engine":
                                rate = engine_run(redis.url, s, 1, data, tmp, "--precision",
                                                  prec)["samples_per_s"]  # fmt: skip
                            else:
                                rate = plain_run(s, data, prec, side != "plain")
                        got[side] = (rate, util.mean)
                    ratio = got["engine"][0] / got["plain"][0]
                    runs.append({"engine": got["engine"], "plain": got["plain"], "ratio": ratio,
                                 "load": load})  # fmt: skip
                    (e, eu), (b, bu) = got["engine"], got["plain"]
                    also = ""
                    if a.diagnose:
                        d, du = got["plain as a learner"]
                        also = f"; plain as a learner {d:.0f}/s (GPU {du:.0f} %)"
                    print(f"{key} pair {i + 1}: engine {e:.0f}/s (GPU {eu:.0f} %), plain "
                          f"{b:.0f}/s (GPU {bu:.0f} %), ratio {ratio:.3f}{also}",
                          flush=True)  # fmt: skip
                rows.append((s, runs))
        finally:
            redis.stop()
    lines = [
        "# The engine on a GPU", "",
        f"Device: {device}; torch {torch.__version__}. `python bench/bench_gpu.py --pairs "
        f"{a.pairs}`: one learner (NCCL) against a plain loop on the same GPU, precision "
        f"{prec} on both sides, interleaved pairs; GPU %: NVML's mean utilisation while busy.",
        "", "| model | batch | engine samples/s | plain samples/s | engine GPU % | plain GPU % "
        "| ratio min / median / max | goal | load 1-min |", "|---|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for s, runs in rows:
        ratios = [r["ratio"] for r in runs]
        med = statistics.median(ratios)
        loads = [r["load"] for r in runs]
        lines.append(
            f"| {s.name} | {s.batch} | {statistics.median(r['engine'][0] for r in runs):.0f} | "
            f"{statistics.median(r['plain'][0] for r in runs):.0f} | "
            f"{statistics.median(r['engine'][1] for r in runs):.0f} | "
            f"{statistics.median(r['plain'][1] for r in runs):.0f} | "
            f"{min(ratios):.3f} / {med:.3f} / {max(ratios):.3f} | >= {s.goal} "
            f"({'met' if med >= s.goal else 'missed'}) | {min(loads):.1f}-{max(loads):.1f} |"
        )
    lines += ["", "The GPU tests (`pytest tests/test_gpu.py`) ran on the same machine.", ""]
    result = "\n".join(lines)
    (PROJECT / "bench" / "results" / "gpu.md").write_text(result)
    print(result)


if __name__ == "__main__":
    main()
