"""Plain DistributedDataParallel (gloo) on the same model, data and global batch as the engine.

Run by bench_engine.py as N processes: ``python bench/ddp_baseline.py RANK WORLD PORT ...``.
Rank 0 prints the steady-state throughput in samples per second.
"""

from __future__ import annotations

import argparse
import datetime
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from workers.learner.contract import load_definition
from workers.learner.datasets import load_dataset
from workers.learner.partition import iterations_per_epoch, permutation, rank_indices


def main() -> None:
    p = argparse.ArgumentParser()
    for name in ("rank", "world", "port", "warmup", "steps", "batch"):
        p.add_argument(name, type=int)
    p.add_argument("model")
    p.add_argument("data")
    a = p.parse_args()
    torch.set_num_threads(1)
    store = dist.TCPStore("127.0.0.1", a.port, a.world, a.rank == 0)
    dist.init_process_group("gloo", store=store, rank=a.rank, world_size=a.world,
                            timeout=datetime.timedelta(seconds=60))  # fmt: skip
    defn = load_definition(Path(a.model))
    train, _test, _ = load_dataset(Path(a.data))
    x_all, y_all = train.tensors
    torch.manual_seed(0)
    model = DistributedDataParallel(defn.build_model())
    optimizer = defn.build_optimizer(model.parameters(), 0.01)
    per_epoch = iterations_per_epoch(len(x_all), a.batch)
    started = 0.0
    for step in range(a.warmup + a.steps):
        if step == a.warmup:
            dist.barrier()
            started = time.perf_counter()
        epoch, it = divmod(step, per_epoch)
        order = permutation(len(x_all), 0, epoch)
        idx = torch.tensor(rank_indices(order, it, a.batch, a.world, a.rank))
        optimizer.zero_grad()
        defn.loss_fn(model(x_all[idx]), y_all[idx]).backward()
        optimizer.step()
    dist.barrier()
    if a.rank == 0:
        print(a.steps * a.batch / (time.perf_counter() - started), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
