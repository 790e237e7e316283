"""``python -m scheduler.simulate philly --teams vc --trace philly.csv [--gpus 64] ...``.

Runs a week of the Philly trace (by default the full week of median GPU demand) with its
virtual clusters as teams, under hierarchical fair share and the baselines of
:mod:`scheduler.simulate.teams` (kill-preemption quotas, a static partition, per-job fair
share), and prints per team and overall: average and p99 JCT, utilisation, share deficit,
Jain's index while saturated, preemptions and work lost. With ``--load RHO`` the week is
replaced by a load-matched sample of it (:func:`scheduler.simulate.trace.sample_load`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from scheduler.simulate import (
    Config,
    jobs_from_trace,
    median_week,
    offered_load,
    read_trace,
    sample_load,
    window,
)
from scheduler.simulate.speedup import load_fits, usable
from scheduler.simulate.teams import (
    CHECKPOINT_EVERY,
    VARIANTS,
    WEIGHTS,
    simulate_teams,
    tables,
    vc_teams,
)
from scheduler.simulate.trace import DAY


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m scheduler.simulate philly", description=__doc__)
    p.add_argument("--teams", choices=["vc"], required=True, help="vc: virtual clusters as teams")
    p.add_argument("--trace", type=Path, required=True, help="trace CSV (Pollux's philly.csv)")
    p.add_argument("--gpus", type=int, default=64, help="slots in the cluster (default 64)")
    p.add_argument("--start-day", type=float, help="window start (default: the median week)")
    p.add_argument("--days", type=float, default=7.0, help="window length in days (default 7)")
    p.add_argument("--limit", type=int, help="only the first N jobs of the window")
    p.add_argument("--load", type=float, help="a load-matched sample of the window instead")
    p.add_argument("--seed", type=int, default=0, help="seed of the --load sample (default 0)")
    p.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    p.add_argument("--resize-pause", type=float, default=1.0, help="seconds per resize")
    p.add_argument("--restart-pause", type=float, default=30.0, help="seconds per restart")
    p.add_argument(
        "--checkpoint-every",
        type=float,
        default=CHECKPOINT_EVERY,
        help="quota-preempt: seconds of running between a job's checkpoints (default 1800)",
    )
    p.add_argument(
        "--weights",
        choices=WEIGHTS,
        default="one",
        help="the teams' weights: one (the default) or their guarantees",
    )
    p.add_argument("--serial-fraction", type=float, help="one Amdahl serial fraction for all")
    return p


def main(argv: Sequence[str]) -> int:
    args = parser().parse_args(argv)
    if args.gpus < 1 or args.days <= 0:
        parser().error("--gpus must be at least 1 and --days positive")
    if args.load is not None and args.load <= 0:
        parser().error("--load must be positive")
    if args.serial_fraction is not None:
        serials, model = [args.serial_fraction], f"Amdahl, serial fraction {args.serial_fraction}"
    else:
        kept = usable(load_fits(args.trace.parent / "scalability"))
        serials = [fit.serial for fit in kept]
        model = "Amdahl fitted: " + ", ".join(f"{f.app} s={f.serial:.3f}" for f in kept)
    everything = read_trace(args.trace)
    start = args.start_day if args.start_day is not None else median_week(everything, args.days)
    trace = window(everything, start, args.days, args.limit)
    lines = [f"{len(trace):,} jobs from day {start:g} for {args.days:g} days"]
    if args.load is not None:
        drawn = sample_load(trace, args.gpus, args.days * DAY, args.load, args.seed)
        lines = [
            f"load-matched sample (seed {args.seed}) of the {len(trace):,} jobs from day "
            f"{start:g} for {args.days:g} days: {len(drawn):,} jobs, offered load "
            f"{offered_load(drawn, args.gpus, args.days * DAY):.3g}"
        ]
        trace = drawn
    if not trace:
        print("no jobs in that window", file=sys.stderr)
        return 1
    teams = vc_teams(trace, args.gpus, args.weights)
    base = Config(
        args.gpus,
        resize_pause=args.resize_pause,
        restart_pause=args.restart_pause,
        checkpoint_every=args.checkpoint_every,
    )
    outcomes = simulate_teams(
        jobs_from_trace(trace, args.gpus, serials), teams, base, args.variants
    )
    print(
        "\n".join(
            [
                f"trace {args.trace.name}, {args.gpus} slots: {lines[0]}",
                f"teams: {len(teams)} virtual clusters, weights {args.weights}, guarantees "
                + ", ".join(f"{t.id} {t.guarantee}" for t in teams),
                f"speedup: {model}; pauses: resize {args.resize_pause:g} s, restart "
                f"{args.restart_pause:g} s; quota-preempt checkpoints every "
                f"{args.checkpoint_every:g} s",
                "",
                *tables(outcomes, teams),
            ]
        )
    )
    return 0
