"""Huge pages for a learner's large tensors (workers/learner/allocator.py) against 4 KiB pages.

    python bench/bench_allocator.py [--pairs 6]

Each sample is a fresh process, as a learner is, training a model for a few steps on one
torch thread: ``THP_MEM_ALLOC_ENABLE=1`` (huge pages asked for on blocks of 2 MiB or more,
what learners start with) against ``0`` (PyTorch's default), in interleaved pairs whose
order alternates. Everything else is the same: model, seed, batch, steps. Reported per
model: the first step (a process's first huge pages cost more), the median of the steps
after it, the ratio of those medians (4 KiB over huge: above 1, huge pages are faster) as
min / median / max over the pairs, the peak resident memory and the 1-minute load. The
table goes to bench/results/allocator.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from bench_engine import span  # noqa: E402  (bench/ is this script's directory)

from workers.learner.allocator import HUGE_PAGES  # noqa: E402

# name: (hidden widths of an MLP on 3x32x32 input, batch, steps)
MODELS = {
    "1 GB MLP (bench_engine.py's resize model: 0.25 G parameters, state 1 GB)": (
        (10240, 9216), 8, 8),
    "wide MLP (bench/wide_mlp.py, 21.0 M parameters)": ((4096, 2048), 64, 12),
}  # fmt: skip

STEPS = """
import json, resource, sys, time, torch
from torch import nn
torch.set_num_threads(1)
torch.manual_seed(0)
hidden, batch, steps = json.loads(sys.argv[1])
layers, width = [nn.Flatten()], 3 * 32 * 32
for h in hidden:
    layers += [nn.Linear(width, h), nn.ReLU()]
    width = h
model = nn.Sequential(*layers, nn.Linear(width, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x, y = torch.randn(batch, 3, 32, 32), torch.randint(0, 10, (batch,))
times = []
for _ in range(steps):
    started = time.perf_counter()
    opt.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    times.append(time.perf_counter() - started)
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"times": times, "rss_mb": rss}))
"""


def sample(hidden: tuple[int, ...], batch: int, steps: int, huge: bool) -> dict[str, float]:
    env = {**os.environ, HUGE_PAGES: "1" if huge else "0", "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", STEPS, json.dumps([hidden, batch, steps])],
                         env=env, check=True, capture_output=True, text=True).stdout  # fmt: skip
    got = json.loads(out)
    return {"first": got["times"][0], "step": statistics.median(got["times"][1:]),
            "rss_mb": got["rss_mb"], "load": os.getloadavg()[0]}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--pairs", type=int, default=6)
    a = p.parse_args()
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    mode = thp.read_text().strip() if thp.exists() else "(no transparent huge pages)"
    started = time.time()
    out = ["# Huge pages for large tensors against 4 KiB pages", "",
           f"One run of `python bench/bench_allocator.py {' '.join(sys.argv[1:])}` on "
           f"{os.cpu_count()} cores; the kernel's transparent huge pages: `{mode}`. Each "
           "sample a fresh process on one torch thread; pairs interleaved, their order "
           "alternating. Ratio: the median step after the first, 4 KiB over huge pages.", "",
           "| model | pairs | first step, s: huge / 4 KiB (medians) | step after it, s: huge / "
           "4 KiB (medians) | ratio min / median / max | peak RSS, MB: huge / 4 KiB | "
           "load 1-min |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for name, (hidden, batch, steps) in MODELS.items():
        runs: dict[bool, list[dict[str, float]]] = {True: [], False: []}
        for i in range(a.pairs):
            for huge in (True, False) if i % 2 == 0 else (False, True):
                runs[huge].append(sample(hidden, batch, steps, huge))
            ratio = runs[False][-1]["step"] / runs[True][-1]["step"]
            print(f"{name}, pair {i + 1}: step huge {runs[True][-1]['step']:.3f} s, 4 KiB "
                  f"{runs[False][-1]['step']:.3f} s, ratio {ratio:.3f}", flush=True)  # fmt: skip
        med = {(huge, key): statistics.median(r[key] for r in rs)
               for huge, rs in runs.items() for key in ("first", "step", "rss_mb")}  # fmt: skip
        ratios = [o["step"] / h["step"] for h, o in zip(runs[True], runs[False], strict=True)]
        loads = [r["load"] for rs in runs.values() for r in rs]
        out.append(f"| {name} | {a.pairs} | {med[True, 'first']:.3f} / {med[False, 'first']:.3f} "
                   f"| {med[True, 'step']:.3f} / {med[False, 'step']:.3f} | {span(ratios)} | "
                   f"{med[True, 'rss_mb']:.0f} / {med[False, 'rss_mb']:.0f} | "
                   f"{min(loads):.1f}-{max(loads):.1f} |")  # fmt: skip
    out += ["", f"Took {time.time() - started:.0f} s."]
    result = "\n".join(out) + "\n"
    (PROJECT / "bench" / "results").mkdir(exist_ok=True)
    (PROJECT / "bench" / "results" / "allocator.md").write_text(result)
    print(result)


if __name__ == "__main__":
    main()
