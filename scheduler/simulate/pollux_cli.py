"""``python -m scheduler.simulate pollux --workloads DIR --policy NAME [--moves] [--json]``.

Simulates every ``workload-N.csv`` in DIR (the Pollux artifact's workloads) on the
artifact's cluster (:mod:`scheduler.simulate.cluster`) with one of our policies, and prints
the average JCT (the mean of the workloads' averages, as the artifact reports it), the p99
JCT over every job of every workload, and the mean makespan (first submission to last
completion). Workloads run in parallel on ``--procs`` processes.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

from scheduler.policies import POLICIES
from scheduler.simulate.cluster import (
    INTERVAL,
    RESIZE_PAUSE,
    RESTART_PAUSE,
    ClusterConfig,
    Outcome,
    alone_bound,
    simulate_workload,
)
from scheduler.simulate.metrics import percentile
from scheduler.simulate.pollux import (
    Application,
    load_applications,
    read_workload,
    workload_paths,
)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m scheduler.simulate pollux", description=__doc__)
    p.add_argument("--workloads", type=Path, required=True, help="folder of workload-N.csv")
    p.add_argument(
        "--traces",
        type=Path,
        help="the artifact's per-application traces (default: traces/ beside the folder)",
    )
    p.add_argument("--policy", choices=sorted(POLICIES), default="fairshare-speedup")
    p.add_argument("--gpus", type=int, default=64, help="GPUs in the cluster (default 64)")
    p.add_argument("--per-node", type=int, default=4, help="GPUs per node (default 4)")
    p.add_argument("--interval", type=float, default=INTERVAL, help="seconds between decisions")
    p.add_argument(
        "--restart-pause",
        type=float,
        default=RESTART_PAUSE,
        help="seconds a job pauses to start or resume (default 30, the artifact's)",
    )
    p.add_argument(
        "--resize-pause",
        type=float,
        default=RESIZE_PAUSE,
        help="seconds a running job pauses to grow or shrink (default 0.1, EDT's measured)",
    )
    p.add_argument(
        "--moves",
        action="store_true",
        help="move learners onto fewer nodes where it pays back within an interval",
    )
    p.add_argument(
        "--events",
        action="store_true",
        help="decide also at each arrival and completion, as EDT does, not only each interval",
    )
    p.add_argument("--load", type=float, help="the load to report (default: from the name)")
    p.add_argument("--procs", type=int, default=2, help="processes (default 2)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p


@dataclass(frozen=True, slots=True)
class Result:
    policy: str
    load: float | None
    workloads: list[str]
    outcomes: list[list[Outcome]]  # per workload
    bounds: list[float]  # per workload: every job alone at its best size (s)

    @property
    def avg_jct(self) -> float:
        return statistics.fmean(statistics.fmean(o.jct for o in w) for w in self.outcomes)

    @property
    def p99_jct(self) -> float:
        return percentile([o.jct for w in self.outcomes for o in w], 0.99)

    @property
    def makespan(self) -> float:
        return statistics.fmean(
            max(o.finished for o in w) - min(o.submitted for o in w) for w in self.outcomes
        )

    def as_json(self) -> dict[str, object]:
        return {
            "policy": self.policy,
            "load": self.load,
            "avg_jct_h": round(self.avg_jct / 3600, 4),
            "p99_jct_h": round(self.p99_jct / 3600, 4),
            "makespan_h": round(self.makespan / 3600, 4),
            "workloads": len(self.outcomes),
        }


def load_of(directory: Path) -> float | None:
    """The artifact's naming: ``workloads`` is 1.0x, ``workloads-1.5`` 1.5x."""
    if directory.name == "workloads":
        return 1.0
    match = re.fullmatch(r"workloads-(\d+(?:\.\d+)?)", directory.name)
    return float(match.group(1)) if match else None


_APPS: dict[str, Application] = {}


def _one(args: tuple[Path, Path, ClusterConfig]) -> tuple[list[Outcome], float]:
    path, traces, config = args
    if not _APPS:
        _APPS.update(load_applications(traces))
    workload = read_workload(path, _APPS)
    return simulate_workload(workload, _APPS, config), alone_bound(workload, _APPS, config.gpus)


def simulate_folder(
    workloads: Path,
    config: ClusterConfig,
    traces: Path | None = None,
    procs: int = 1,
    load: float | None = None,
) -> Result:
    """Every workload of ``workloads`` under ``config``; raises ValueError on bad input."""
    traces = traces or workloads.parent / "traces"
    paths = workload_paths(workloads)
    apps = load_applications(traces)
    for path in paths:  # refuse bad input before any process starts
        read_workload(path, apps)
    tasks = [(path, traces, config) for path in paths]
    _APPS.clear()
    _APPS.update(apps)  # forked processes inherit them
    if procs > 1 and len(tasks) > 1:
        with get_context("fork").Pool(min(procs, len(tasks))) as pool:
            done = pool.map(_one, tasks)
    else:
        done = [_one(task) for task in tasks]
    return Result(
        config.policy,
        load if load is not None else load_of(workloads),
        [path.stem for path in paths],
        [outcomes for outcomes, _ in done],
        [bound for _, bound in done],
    )


def main(argv: Sequence[str]) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.gpus < 1 or args.per_node < 1 or args.gpus % args.per_node:
        p.error("--gpus must be a positive multiple of --per-node")
    if args.interval <= 0 or args.restart_pause < 0 or args.resize_pause < 0:
        p.error("--interval must be positive and the pauses not negative")
    config = ClusterConfig(
        args.policy,
        args.gpus,
        args.per_node,
        args.interval,
        args.restart_pause,
        args.resize_pause,
        moves=args.moves,
        events=args.events,
    )
    try:
        result = simulate_folder(args.workloads, config, args.traces, args.procs, args.load)
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result.as_json()))
        return 0
    print(
        f"{args.workloads}: {len(result.outcomes)} workloads, policy {args.policy}, "
        f"{args.gpus} GPUs ({args.per_node} per node), decisions every {args.interval:g} s, "
        f"pauses: restart {args.restart_pause:g} s, resize {args.resize_pause:g} s"
        f"{', learner moves' if args.moves else ''}"
        f"{', and at each arrival and completion' if args.events else ''}"
    )
    for name, outcomes, bound in zip(result.workloads, result.outcomes, result.bounds, strict=True):
        avg = statistics.fmean(o.jct for o in outcomes)
        print(f"  {name:14} {len(outcomes):4} jobs  avg JCT {avg / 3600:6.3f} h  "
              f"(alone at best size: {bound / 3600:.3f} h)")  # fmt: skip
    print(
        f"average JCT {result.avg_jct / 3600:.3f} h, p99 {result.p99_jct / 3600:.3f} h, "
        f"makespan {result.makespan / 3600:.2f} h; every job alone at its best size: "
        f"{statistics.fmean(result.bounds) / 3600:.3f} h"
    )
    return 0
