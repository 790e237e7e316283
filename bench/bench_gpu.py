"""The engine on one GPU against plain single-GPU PyTorch, on the communication-bound model.

    python bench/bench_gpu.py [--pairs 5]

Needs a CUDA device; without one it says so and leaves bench/results/gpu.md as it is.
Interleaved pairs (the order alternates): the engine (``workers.learner.drive``, one learner,
NCCL) and a plain training loop on the same GPU with the same model (bench/wide_mlp.py),
data, batch and per-epoch order, both timed over the same steps inside the first epoch.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

import torch  # noqa: E402

from bench.bench_engine import WIDE, Setup, engine_run  # noqa: E402
from edtweb.redis_server import RedisServer  # noqa: E402
from workers.learner.datasets import write_cifar10  # noqa: E402

SETUP = Setup("wide MLP (bench/wide_mlp.py, 21.0 M parameters)", WIDE, 256, 20, 200, 0.98)


def plain(model: str, data: str, warmup: int, steps: int, batch: int) -> None:
    """Plain PyTorch on one GPU; prints samples/s over the window."""
    from workers.learner.contract import load_definition
    from workers.learner.datasets import load_dataset
    from workers.learner.partition import iterations_per_epoch, permutation

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
        defn.loss_fn(net(x_all[idx]), y_all[idx]).backward()
        optimizer.step()
    torch.cuda.synchronize()
    print(json.dumps({"samples_per_s": steps * batch / (time.perf_counter() - started)}))


def plain_run(data: Path) -> float:
    s = SETUP
    cmd = [sys.executable, __file__, "--plain", str(s.model), str(data), str(s.warmup),
           str(s.steps), str(s.batch)]  # fmt: skip
    out = subprocess.run(cmd, cwd=PROJECT, check=True, capture_output=True, text=True).stdout
    return float(json.loads(out.strip().splitlines()[-1])["samples_per_s"])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--plain", nargs=5, metavar=("MODEL", "DATA", "WARMUP", "STEPS", "BATCH"))
    a = p.parse_args()
    if a.plain:
        model, data, warmup, steps, batch = a.plain
        plain(model, data, int(warmup), int(steps), int(batch))
        return
    if not torch.cuda.is_available():
        print("no CUDA device: bench_gpu.py needs one; bench/results/gpu.md left as it is")
        return
    device = torch.cuda.get_device_name(0)
    ratios, loads, engine, base = [], [], [], []
    with tempfile.TemporaryDirectory(prefix="edt-bench-gpu-") as tmpdir:
        tmp = Path(tmpdir)
        data = write_cifar10(tmp / "data", train=65536, test=256)
        redis = RedisServer(tmp / "redis", appendonly=False).start()
        try:
            for i in range(a.pairs):
                loads.append(os.getloadavg()[0])
                if i % 2 == 0:
                    e = engine_run(redis.url, SETUP, 1, data, tmp)["samples_per_s"]
                    b = plain_run(data)
                else:
                    b = plain_run(data)
                    e = engine_run(redis.url, SETUP, 1, data, tmp)["samples_per_s"]
                engine.append(e)
                base.append(b)
                ratios.append(e / b)
                print(f"pair {i + 1}: engine {e:.0f}/s, plain {b:.0f}/s, ratio {e / b:.3f}")
        finally:
            redis.stop()
    med = statistics.median(ratios)
    result = (
        f"# The engine on a GPU\n\nDevice: {device}. One run of `python bench/bench_gpu.py "
        f"--pairs {a.pairs}`; {SETUP.name}, batch {SETUP.batch}, {SETUP.steps} steps after "
        f"{SETUP.warmup} of warm-up, one learner (NCCL) vs a plain loop on the same GPU.\n\n"
        "| engine samples/s (median) | plain samples/s (median) | ratio min / median / max "
        "| goal | load 1-min |\n|---|---|---|---|---|\n"
        f"| {statistics.median(engine):.0f} | {statistics.median(base):.0f} | "
        f"{min(ratios):.3f} / {med:.3f} / {max(ratios):.3f} | >= {SETUP.goal} "
        f"({'met' if med >= SETUP.goal else 'missed'}) | {min(loads):.1f}-{max(loads):.1f} |\n"
        "\nThe GPU tests (`pytest tests/test_gpu.py`) ran on the same machine.\n"
    )
    (PROJECT / "bench" / "results" / "gpu.md").write_text(result)
    print(result)


if __name__ == "__main__":
    main()
