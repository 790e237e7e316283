"""The baselines of bench_engine.py, one process per rank, as people write them.

``train``: plain DistributedDataParallel (gloo) on the same model, data, global batch,
split and thread count as the engine, the sample order shuffled once per epoch. Rank 0
prints one JSON line: samples/s and CPU ms per step (mean over ranks) over the window.

``restart``: one worker of a torchrun-style restart. The agent (bench_engine.py) stays
alive and hosts the store; each worker imports torch, joins the group, loads the job's
checkpoint, takes its first step and prints when each of those ended, then trains on
until the agent stops it. ``--save`` makes rank 0 write the checkpoint first (not timed).
"""

from __future__ import annotations

import time

STARTED = time.time()  # before torch is imported: the end of the interpreter's spawn

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

IMPORTED = time.time()

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from workers.learner.contract import load_definition  # noqa: E402
from workers.learner.datasets import load_dataset  # noqa: E402
from workers.learner.partition import iterations_per_epoch, permutation, rank_indices  # noqa: E402


def group(a: argparse.Namespace) -> None:
    store = dist.TCPStore("127.0.0.1", a.port, is_master=False,
                          timeout=datetime.timedelta(seconds=120))  # fmt: skip
    timeout = datetime.timedelta(seconds=120)
    dist.init_process_group("gloo", store=dist.PrefixStore(a.prefix, store), rank=a.rank,
                            world_size=a.world, timeout=timeout)  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["train", "restart"])
    for name in ("rank", "world", "port", "warmup", "steps", "batch"):
        p.add_argument(name, type=int)
    p.add_argument("model")
    p.add_argument("data")
    p.add_argument("--prefix", default="ddp")
    p.add_argument("--checkpoint", default="")
    p.add_argument("--save", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(1)
    group(a)
    joined = time.time()
    defn = load_definition(Path(a.model))
    train, _test, _ = load_dataset(Path(a.data))
    x_all, y_all = train.tensors
    torch.manual_seed(0)
    module = defn.build_model()
    optimizer = defn.build_optimizer(module.parameters(), 0.01)
    if a.mode == "restart" and not a.save:
        state = torch.load(a.checkpoint, weights_only=True)
        module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    model = DistributedDataParallel(module)
    loaded = time.time()
    per_epoch = iterations_per_epoch(len(x_all), a.batch)
    order: tuple[int, list[int]] = (-1, [])

    def step(n: int) -> None:
        nonlocal order
        epoch, it = divmod(n, per_epoch)
        if order[0] != epoch:  # once per epoch, as a DistributedSampler's set_epoch does
            order = (epoch, permutation(len(x_all), 0, epoch))
        idx = torch.tensor(rank_indices(order[1], it, a.batch, a.world, a.rank))
        optimizer.zero_grad()
        defn.loss_fn(model(x_all[idx]), y_all[idx]).backward()
        optimizer.step()

    if a.mode == "restart":
        step(0)
        first = time.time()
        if a.save:
            if a.rank == 0:
                torch.save({"model": module.state_dict(), "optimizer": optimizer.state_dict()},
                           a.checkpoint)  # fmt: skip
            dist.barrier()
        times = {"started": STARTED, "imported": IMPORTED, "joined": joined,
                 "loaded": loaded, "first_step": first}  # fmt: skip
        print(json.dumps(times), flush=True)
        n = 1
        while True:  # until the agent stops this worker
            step(n)
            n += 1
    started, cpu = 0.0, 0.0
    for n in range(a.warmup + a.steps):
        if n == a.warmup:
            dist.barrier()
            started, cpu = time.perf_counter(), time.process_time()
        step(n)
    dist.barrier()
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    cpu_ms = torch.tensor([cpu * 1000 / a.steps])
    dist.all_reduce(cpu_ms)
    if a.rank == 0:
        result = {"samples_per_s": a.steps * a.batch / elapsed,
                  "cpu_ms_per_step": float(cpu_ms) / a.world}  # fmt: skip
        print(json.dumps(result), flush=True)
    dist.destroy_process_group()
    # The interpreter's teardown of c10d's objects then aborted one rank in ten or so here
    # ("terminate called without an active exception", SIGABRT) after the measurement,
    # with or without DDP's module deleted first: nothing is left to do, so leave at once.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
