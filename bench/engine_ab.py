"""The engine against itself: two checkouts of this project (say, a commit before a change
and the working tree), interleaved pairs of a model's throughput run of ``bench_engine.py``
(the same data, Redis, window and CPU accounting), each side's learners started from its
own tree. Prints each pair and the ratio's min/median/max.

    git worktree add /tmp/before <commit> && ln -s "$PWD/.venv" /tmp/before/.venv
    python bench/engine_ab.py /tmp/before . --workers 2 --pairs 12

``--env SIDE:NAME=VALUE`` sets a variable in one side's environment (its learners inherit
it): the same tree twice measures a setting, e.g. the huge pages of
workers/learner/allocator.py:

    python bench/engine_ab.py . . --model wide --env before:THP_MEM_ALLOC_ENABLE=0

Each side's learners get the environment its own tree gives them: a tree from before the
huge pages runs its learners on 4 KiB pages.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_engine as be


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("before", type=Path, help="a checkout of the project (the baseline)")
    p.add_argument("after", type=Path, help="another (the change)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--pairs", type=int, default=12)
    p.add_argument("--model", choices=be.MODEL_KEYS, default="cnn")
    p.add_argument("--env", action="append", default=[], metavar="SIDE:NAME=VALUE",
                   help="a variable in one side's environment (before or after)")  # fmt: skip
    a = p.parse_args()
    trees = {"before": a.before.resolve(), "after": a.after.resolve()}
    setup = be.SETUPS[be.MODEL_KEYS.index(a.model)]
    model = setup.model.relative_to(be.PROJECT)
    envs: dict[str, dict[str, str]] = {"before": {}, "after": {}}
    for item in a.env:
        side, _, assignment = item.partition(":")
        name, equals, value = assignment.partition("=")
        if side not in envs or not name or not equals:
            p.error(f"--env {item!r}: say before:NAME=VALUE or after:NAME=VALUE")
        envs[side][name] = value
    base = dict(os.environ)
    runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    with be.bench_dir() as (tmp, data, redis):
        for i in range(a.pairs):
            for side in ("before", "after") if i % 2 == 0 else ("after", "before"):
                be.PROJECT = trees[side]  # drive (and so the learners) from that tree
                s = dataclasses.replace(setup, model=trees[side] / model)
                os.environ.clear()
                os.environ.update(base, **envs[side])
                runs[side].append(be.engine_run(redis.url, s, a.workers, data, tmp))
            new, old = runs["after"][-1], runs["before"][-1]
            ratio = new["samples_per_s"] / old["samples_per_s"]
            print(f"pair {i + 1}: after/before {ratio:.3f}, CPU ms/step/worker after "
                  f"{new['cpu_ms_per_step']:.1f} before {old['cpu_ms_per_step']:.1f}, "
                  f"load {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
    ratios = [n["samples_per_s"] / o["samples_per_s"]
              for n, o in zip(runs["after"], runs["before"], strict=True)]  # fmt: skip
    cpu = {side: statistics.median(r["cpu_ms_per_step"] for r in rs) for side, rs in runs.items()}
    print(f"{setup.name}, {a.workers} workers, {a.pairs} pairs: after/before median "
          f"{statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f}); "
          f"CPU ms/step/worker after {cpu['after']:.2f}, before {cpu['before']:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
