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

``--resize STATE`` ("0.1 GB" or "1.0 GB") compares a grow 1 -> 2 and the shrink after it
instead (``bench_engine.py``'s resize session, a warm-forked joiner), one session per
side in each pair, each in a process of its own started from its own tree (the fork
server that gives the joiner is that tree's): the grow's stall and pause, the first
step's own time and the median step after it, and the shrink's stall.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_engine as be

# One resize session in a process of its own, from the tree it runs in (its working
# directory): argv is Redis' URL, the bench directory, the dataset and the state's label.
RESIZE_ONE = """
import json, sys
from pathlib import Path
sys.path.insert(0, "bench")
import bench_engine as be
if __name__ == "__main__":
    url, tmp, data, label = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
    model = be.sized_model(tmp, be.RESIZE_MODELS[label])
    print(json.dumps(be.Session(url, model, data, tmp, True).run()))
"""
RESIZE_KEYS = ("stall", "pause", "first_step", "step", "startup", "to_first_step")


def resize_run(tree: Path, redis_url: str, tmp: Path, data: Path, label: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-c", RESIZE_ONE, redis_url, str(tmp), str(data), label],
                         cwd=tree, capture_output=True, text=True, timeout=600)  # fmt: skip
    lines = out.stdout.strip().splitlines()
    try:
        if out.returncode != 0 or not lines:
            raise ValueError(f"exit status {out.returncode}")
        result: dict[str, Any] = json.loads(lines[-1])
    except ValueError as exc:  # a JSONDecodeError too
        raise RuntimeError(f"resize session in {tree} failed ({exc}):\n"
                           f"{out.stdout[-1500:]}\n{out.stderr[-3000:]}") from exc  # fmt: skip
    return result


def compare_resizes(
    a: argparse.Namespace,
    trees: dict[str, Path],
    envs: dict[str, dict[str, str]],
    base: dict[str, str],
    tmp: Path,
    data: Path,
    redis_url: str,
) -> None:
    runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    for i in range(a.pairs):
        for side in ("before", "after") if i % 2 == 0 else ("after", "before"):
            os.environ.clear()
            os.environ.update(base, **envs[side])
            runs[side].append(resize_run(trees[side], redis_url, tmp, data, a.resize))
        new, old = runs["after"][-1]["grow"], runs["before"][-1]["grow"]
        print(f"pair {i + 1}, after / before: "
              + ", ".join(f"{k} {new[k]:.3f} / {old[k]:.3f}" for k in RESIZE_KEYS)
              + f"; load {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
    print(
        f"{a.resize} state, grow 1 -> 2, {a.pairs} pairs, after vs before, min / median / max (s):"
    )
    for key in RESIZE_KEYS:
        print(f"  {key}: after {be.span([r['grow'][key] for r in runs['after']])}; "
              f"before {be.span([r['grow'][key] for r in runs['before']])}")  # fmt: skip
    for key in ("stall", "to_first_step"):
        diffs = [n["grow"][key] - o["grow"][key]
                 for n, o in zip(runs["after"], runs["before"], strict=True)]  # fmt: skip
        print(f"  {key}, after - before, per pair: {be.span(diffs)}")
    print(f"  shrink stall: after {be.span([r['shrink']['stall'] for r in runs['after']])}; "
          f"before {be.span([r['shrink']['stall'] for r in runs['before']])}")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("before", type=Path, help="a checkout of the project (the baseline)")
    p.add_argument("after", type=Path, help="another (the change)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--pairs", type=int, default=12)
    p.add_argument("--model", choices=be.MODEL_KEYS, default="cnn")
    p.add_argument("--env", action="append", default=[], metavar="SIDE:NAME=VALUE",
                   help="a variable in one side's environment (before or after)")  # fmt: skip
    p.add_argument("--resize", choices=list(be.RESIZE_MODELS), default=None,
                   help="compare a grow and a shrink at this state instead (the resize "
                        "session's own model and group sizes: --workers and --model do "
                        "not apply)")  # fmt: skip
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
    runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    with be.bench_dir() as (tmp, data, redis):
        base = dict(os.environ)  # with the bench's EDT_DATA_DIR: a learner's sandbox reads it
        if a.resize is not None:
            compare_resizes(a, trees, envs, base, tmp, data, redis.url)
            return
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
