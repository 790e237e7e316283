"""The engine's gradient overlap against DDP's own Reducer, the rest of the step the same.

    python bench/bench_reducer.py [--pairs 5] [--workers 2 4] [--model wide|cnn]

Issue: overlap the gradient all-reduce with backward either with hooks of our own
(workers/learner/overlap.py, ``GradBuckets``, what the engine runs) or with DDP's C++
Reducer re-created on each generation's process group; measure both, keep the faster.

Each run is ``--workers`` processes of gloo on this machine (one torch thread each),
training the communication-bound wide MLP (bench/wide_mlp.py, 21.0 M parameters, 84 MB of
gradients a step; ``--model cnn``: the small CNN, examples/cnn.py, 0.14 M parameters,
0.55 MB, where the per-step work outside the kernels weighs most) on the same synthetic
batches (global batch 64) with SGD and momentum.
The two variants differ only in how the gradients are summed:

- ``hooks``: ``GradBuckets`` (1 MiB first bucket, then 25 MiB), the step's agreement
  (right answers, loss, generation, stop flag, last written step) riding in the last
  bucket, as in the engine;
- ``reducer``: ``DistributedDataParallel`` (its Reducer, 25 MiB buckets, gradients as
  bucket views, built with ``init_sync=False`` as the engine would after its own state
  broadcast), plus the agreement as a 5-value all-reduce of its own after backward: DDP
  has no place for it.

Per run: samples/s over a window after a warm-up (barriers at both ends), CPU ms per step
(process time, every thread, mean over ranks), the time to build the variant on a new
group (what a resize would pay each generation), and checksums of the parameters after the
first step and at the end: the two variants take the same updates, so the first must agree
(to 1e-6). The final ones differ by float rounding grown over the run: with more than two
ranks the two sum each gradient in another order (other buckets); on the CNN, whose max
pooling amplifies it, that reached 1e-7 after 30 steps and 1 % after 220.
Runs alternate as interleaved pairs, the order swapped within each pair. The table goes to
bench/results/reducer.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

from edtweb.redis_server import free_port  # noqa: E402
from workers.learner.contract import load_definition  # noqa: E402
from workers.learner.overlap import GradBuckets, gloo_or_nccl_allreduce  # noqa: E402

WIDE = PROJECT / "bench" / "wide_mlp.py"
CNN = PROJECT / "examples" / "cnn.py"
BATCH = 64
# --model: (code, warm-up steps, timed steps, its name in the table)
MODELS = {
    "wide": (WIDE, 3, 15, "the wide MLP (21.0 M parameters)"),
    "cnn": (CNN, 20, 200, "the small CNN (examples/cnn.py, 0.14 M parameters, 0.55 MB)"),
}
VARIANTS = ("hooks", "reducer")


def worker(variant: str, rank: int, world: int, port: int, model: str = "wide") -> None:
    path, warmup, steps, _name = MODELS[model]
    torch.set_num_threads(1)
    store = dist.TCPStore("127.0.0.1", port, is_master=False,
                          timeout=datetime.timedelta(seconds=120))  # fmt: skip
    dist.init_process_group("gloo", store=dist.PrefixStore(variant, store), rank=rank,
                            world_size=world)  # fmt: skip
    pg = dist.group.WORLD
    defn = load_definition(path)
    torch.manual_seed(0)
    module = defn.build_model()
    params = [p for p in module.parameters() if p.requires_grad]
    optimizer = defn.build_optimizer(params, 0.01)
    per_rank = BATCH // world
    gen = torch.Generator().manual_seed(1)
    data = [(torch.randn(BATCH, 3, 32, 32, generator=gen),
             torch.randint(0, 10, (BATCH,), generator=gen)) for _ in range(4)]  # fmt: skip
    built = time.perf_counter()
    if variant == "hooks":
        buckets = GradBuckets(params, 5)
        launch = gloo_or_nccl_allreduce(pg)
    else:
        ddp = DistributedDataParallel(module, process_group=pg, bucket_cap_mb=25,
                                      gradient_as_bucket_view=True, init_sync=False)  # fmt: skip
    build_ms = (time.perf_counter() - built) * 1000
    share = per_rank / BATCH

    def step(n: int) -> None:
        x_all, y_all = data[n % len(data)]
        x = x_all[rank * per_rank : (rank + 1) * per_rank]
        y = y_all[rank * per_rank : (rank + 1) * per_rank]
        if variant == "hooks":
            buckets.begin()
            out = module(x)
            loss = defn.loss_fn(out, y)
            correct = float((out.argmax(1) == y).sum())
            buckets.arm(launch, [correct, float(loss.detach()) * share, 1.0, 0.0, float(n)])
            (loss * share).backward()
            buckets.finish()
            _agreed = buckets.tail.tolist()
        else:
            optimizer.zero_grad()
            out = ddp(x)
            loss = defn.loss_fn(out, y)
            correct = float((out.argmax(1) == y).sum())
            loss.backward()
            tail = torch.tensor([correct, float(loss.detach()) * share, 1.0, 0.0, float(n)],
                                dtype=torch.float64)  # fmt: skip
            dist.all_reduce(tail, group=pg)
            _agreed = tail.tolist()
        optimizer.step()

    def checksum() -> float:
        return sum(float(p.detach().double().sum()) for p in params)

    step(0)
    first = checksum()
    for n in range(1, warmup):
        step(n)
    dist.barrier()
    started, cpu = time.perf_counter(), time.process_time()
    for n in range(max(warmup, 1), warmup + steps):
        step(n)
    dist.barrier()
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    cpu_ms = torch.tensor([cpu * 1000 / steps])
    dist.all_reduce(cpu_ms)
    if rank == 0:
        print(json.dumps({"samples_per_s": steps * BATCH / elapsed,
                          "cpu_ms_per_step": float(cpu_ms) / world, "build_ms": build_ms,
                          "first": first, "checksum": checksum()}), flush=True)  # fmt: skip
    # Out without tearing gloo down: on the CNN's short runs a rank aborted in its teardown
    # ("terminate called without an active exception") once in three runs, after the result
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)


def run(variant: str, world: int, model: str = "wide") -> dict[str, float]:
    port = free_port()
    store = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)
    cmd = [sys.executable, __file__, "--worker", variant, "--world", str(world),
           "--port", str(port), "--model", model]  # fmt: skip
    procs = [subprocess.Popen([*cmd, "--rank", str(r)], cwd=PROJECT, stdout=subprocess.PIPE,
                              text=True, start_new_session=True)
             for r in range(world)]  # fmt: skip
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    del store
    if any(p.returncode for p in procs):
        raise RuntimeError(f"a {variant} rank failed")
    return dict(json.loads(outputs[0].strip().splitlines()[-1]))


class _Done:
    """The work handle of the one-process timing, which sends nothing: already done."""

    def wait(self) -> None:
        return None


def begin_ab(pairs: int) -> list[str]:
    """One process, no communication: a step of the wide MLP (32 samples, forward, backward,
    ``finish``) started as ``GradBuckets.begin`` does (no ``.grad``; the final gradient
    copied into its bucket) against zeroed buckets that backward adds into (what it did
    before). CPU ms per step; interleaved pairs after 4 of each as a warm-up."""
    torch.set_num_threads(1)
    defn = load_definition(WIDE)
    torch.manual_seed(0)
    module = defn.build_model()
    params = list(module.parameters())
    buckets = GradBuckets(params, 5)
    x, y = torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,))

    def zeroed() -> None:
        for buf in buckets.buffers:
            buf.zero_()
        for i, p in enumerate(params):
            p.grad = buckets.views[i]

    starts = {"begin": buckets.begin, "zeroed": zeroed}
    times: dict[str, list[float]] = {k: [] for k in starts}
    for i in range(4 + pairs):
        for name in list(starts) if i % 2 == 0 else list(starts)[::-1]:
            cpu = time.process_time()
            starts[name]()
            buckets.arm(lambda _t: _Done(), [0.0] * 5)
            defn.loss_fn(module(x), y).backward()  # type: ignore[no-untyped-call]
            buckets.finish()
            if i >= 4:
                times[name].append((time.process_time() - cpu) * 1000)
    ratio = [z / b for b, z in zip(times["begin"], times["zeroed"], strict=True)]
    return [
        "",
        "## Starting a step: no `.grad` against zeroed buckets (one process)",
        "",
        f"{pairs} interleaved pairs of one step of the wide MLP (32 samples, forward, "
        "backward, `finish`, no communication): `GradBuckets.begin` (no `.grad`; the final "
        "gradient copied into its bucket) against zeroing the buckets and letting backward "
        "add into them. CPU ms per step.",
        "",
        "| begin | zeroed | zeroed / begin, median (min-max) | load |",
        "|---|---|---|---|",
        f"| {spread(times['begin'], '.1f')} | {spread(times['zeroed'], '.1f')} | "
        f"{spread(ratio)} | {os.getloadavg()[0]:.1f} |",
    ]


def spread(values: list[float], fmt: str = ".3f") -> str:
    return (f"{statistics.median(values):{fmt}} "
            f"({min(values):{fmt}}-{max(values):{fmt}})")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pairs", type=int, default=5)
    p.add_argument("--workers", type=int, nargs="+", default=[2, 4])
    p.add_argument("--model", choices=list(MODELS), default="wide")
    p.add_argument("--worker", choices=VARIANTS, help=argparse.SUPPRESS)
    p.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    p.add_argument("--world", type=int, help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        worker(a.worker, a.rank, a.world, a.port, a.model)
        return
    _path, warmup, steps, name = MODELS[a.model]
    began = time.time()
    lines = [
        "# Gradient overlap: the engine's hooks against DDP's Reducer",
        "",
        f"`python bench/bench_reducer.py --pairs {a.pairs} --workers "
        f"{' '.join(map(str, a.workers))} --model {a.model}` "
        f"({time.strftime('%Y-%m-%d %H:%M')}): {name}, global batch {BATCH}, {steps} steps "
        f"after {warmup}, gloo, one "
        "torch thread per process, on this machine's "
        f"{os.cpu_count()} cores; interleaved pairs, the order swapped within each pair. "
        "Ratio: hooks samples/s over reducer samples/s (above 1: the hooks are faster).",
        "",
        "| workers | pairs | ratio median (min-max) | hooks CPU ms/step | reducer CPU ms/step "
        "| build on a new group, ms: hooks / reducer | same first update | final checksums, "
        "largest relative difference | load |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    # first: alone on the machine, before the groups
    begin = begin_ab(max(20, a.pairs)) if a.model == "wide" else []
    for world in a.workers:
        ratios: list[float] = []
        loads: list[float] = []
        cpu: dict[str, list[float]] = {v: [] for v in VARIANTS}
        build: dict[str, list[float]] = {v: [] for v in VARIANTS}
        agree, drift = True, 0.0
        for i in range(a.pairs):
            loads.append(os.getloadavg()[0])
            order = VARIANTS if i % 2 == 0 else VARIANTS[::-1]
            res = {v: run(v, world, a.model) for v in order}
            ratios.append(res["hooks"]["samples_per_s"] / res["reducer"]["samples_per_s"])
            for v in VARIANTS:
                cpu[v].append(res[v]["cpu_ms_per_step"])
                build[v].append(res[v]["build_ms"])
            a_sum, b_sum = res["hooks"]["checksum"], res["reducer"]["checksum"]
            a_one, b_one = res["hooks"]["first"], res["reducer"]["first"]
            agree &= abs(a_one - b_one) <= 1e-6 * max(1.0, abs(b_one))
            drift = max(drift, abs(a_sum - b_sum) / max(1.0, abs(b_sum)))
            speeds = [f"{v} {res[v]['samples_per_s']:.0f}/s" for v in VARIANTS]
            print(f"{world} workers, pair {i + 1}: {', '.join(speeds)}, "
                  f"ratio {ratios[-1]:.3f}, checksums {a_sum:.6f} / {b_sum:.6f}, "
                  f"load {loads[-1]:.1f}", flush=True)  # fmt: skip
        lines.append(
            f"| {world} | {a.pairs} | {spread(ratios)} | {spread(cpu['hooks'], '.1f')} | "
            f"{spread(cpu['reducer'], '.1f')} | {statistics.median(build['hooks']):.1f} / "
            f"{statistics.median(build['reducer']):.1f} | {'yes' if agree else '**no**'} | "
            f"{drift:.1e} | "
            f"{min(loads):.1f}-{max(loads):.1f} |"
        )
    lines += [*begin, "", f"Took {time.time() - began:.0f} s.", ""]
    out = PROJECT / "bench" / "results" / ("reducer.md" if a.model == "wide" else "reducer-cnn.md")
    out.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
