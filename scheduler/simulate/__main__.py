"""``python -m scheduler.simulate --trace philly.csv --gpus 64 --policy fairshare``.

``python -m scheduler.simulate pollux --workloads DIR --policy NAME`` simulates the Pollux
artifact's workloads instead (:mod:`scheduler.simulate.pollux_cli`);
``python -m scheduler.simulate philly --teams vc --trace philly.csv`` a week of the trace with
its virtual clusters as teams, against the teams baselines (:mod:`.teams_cli`).

With ``--load RHO`` (and ``--days``), the window is replaced by a workload sampled from it
whose offered load on ``--gpus`` slots is RHO (:func:`scheduler.simulate.trace.sample_load`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from scheduler.policies import POLICIES
from scheduler.simulate import (
    Config,
    GoodputProfile,
    Run,
    jobs_from_trace,
    offered_load,
    pollux_cli,
    read_trace,
    run,
    sample_load,
    teams_cli,
    window,
)
from scheduler.simulate.pollux import load_applications, trace_profiles
from scheduler.simulate.speedup import load_fits, usable
from scheduler.simulate.trace import DAY


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m scheduler.simulate", description=__doc__)
    p.add_argument("--trace", type=Path, required=True, help="trace CSV (Pollux's philly.csv)")
    p.add_argument("--gpus", type=int, default=64, help="slots in the cluster (default 64)")
    p.add_argument("--policy", choices=sorted(POLICIES), default="fairshare")
    p.add_argument("--start-day", type=float, default=0.0, help="window start, in days")
    p.add_argument("--days", type=float, help="window length in days (default: to the end)")
    p.add_argument("--limit", type=int, help="simulate only the first N jobs of the window")
    p.add_argument(
        "--load",
        type=float,
        help="sample from the window (needs --days) a workload of this offered load "
        "(GPU-time / (slots x window)); 1.0 = exactly the cluster's capacity",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the --load sample (default 0)")
    p.add_argument("--resize-pause", type=float, default=1.0, help="seconds per resize")
    p.add_argument("--restart-pause", type=float, default=30.0, help="seconds per restart")
    p.add_argument(
        "--threshold",
        type=float,
        default=Config(1).threshold,
        help="tiresias: slot-seconds of service before a job drops to queue 2",
    )
    p.add_argument(
        "--scalability", type=Path, help="directory of scalability CSVs (default: beside the trace)"
    )
    p.add_argument(
        "--goodput-profiles",
        type=Path,
        metavar="TRACES",
        help="give every job the goodput profile of an application of the Pollux artifact "
        "(its traces/ folder), by row as the speedup fits are handed out: its throughput "
        "model, batch range and noise scale; every policy runs it (goodput picks batches)",
    )
    p.add_argument(
        "--serial-fraction",
        type=float,
        help="one Amdahl serial fraction for every job instead of the fit",
    )
    return p


def speedup_model(args: argparse.Namespace) -> tuple[list[float], str]:
    """The serial fractions to hand out to jobs, and a line describing them."""
    if args.serial_fraction is not None:
        return [args.serial_fraction], f"Amdahl, serial fraction {args.serial_fraction}"
    directory = args.scalability or args.trace.parent / "scalability"
    fits = load_fits(directory)
    kept = usable(fits)
    named = ", ".join(f"{fit.app} s={fit.serial:.3f}" for fit in kept)
    dropped = ", ".join(fit.app for fit in fits if fit not in kept) or "none"
    return [
        fit.serial for fit in kept
    ], f"Amdahl fitted from {directory}: {named} (left out: {dropped})"


def goodput_model(args: argparse.Namespace) -> tuple[list[GoodputProfile], str]:
    """The goodput profiles of the applications the speedup fit keeps, and a line saying so."""
    directory = args.scalability or args.trace.parent / "scalability"
    kept = usable(load_fits(directory))
    apps = load_applications(args.goodput_profiles)
    missing = [fit.app for fit in kept if fit.app not in apps]
    if missing:
        raise ValueError(f"no traces of {', '.join(missing)} in {args.goodput_profiles}")
    profiles = trace_profiles(apps, kept)
    named = ", ".join(
        f"{fit.app} batch {p.batch} in {p.low}-{p.high}, noise scale {p.gns:.0f}"
        for fit, p in zip(kept, profiles, strict=True)
    )
    return profiles, (
        f"goodput profiles (every job's speed; the Amdahl fit only picks its application) "
        f"from {args.goodput_profiles}: {named}"
    )


def report(result: Run, header: Sequence[str]) -> str:
    s = result.summary
    lines = [
        *header,
        f"average JCT        {s.avg_jct:12.0f} s  ({s.avg_jct / 3600:.2f} h)",
        f"median JCT         {s.median_jct:12.0f} s",
        f"p99 JCT            {s.p99_jct:12.0f} s  ({s.p99_jct / 3600:.2f} h)",
        f"makespan           {s.makespan:12.0f} s  ({s.makespan / 86400:.2f} days)",
        f"utilisation        {s.utilisation:12.1%}",
        f"Jain's fairness    {s.jain:12.3f}",
        f"reallocations/job  {s.reallocations:12.2f}",
        f"simulated in {result.seconds:.1f} s ({result.decisions} decisions)",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["pollux"]:
        return pollux_cli.main(argv[1:])
    if argv[:1] == ["philly"]:
        return teams_cli.main(argv[1:])
    args = parser().parse_args(argv)
    if args.gpus < 1:
        parser().error("--gpus must be at least 1")
    if args.load is not None and (args.load <= 0 or not args.days):
        parser().error("--load must be positive and needs --days (the window it spreads over)")
    serials, model = speedup_model(args)
    trace = window(read_trace(args.trace), args.start_day, args.days, args.limit)
    sampled = []
    if args.load is not None:
        seconds = args.days * DAY
        drawn = sample_load(trace, args.gpus, seconds, args.load, args.seed)
        sampled = [
            f"load-matched sample (seed {args.seed}): {len(drawn)} of the window's "
            f"{len(trace)} jobs, offered load {offered_load(drawn, args.gpus, seconds):.3g} "
            f"(target {args.load:g}; the whole window: "
            f"{offered_load(trace, args.gpus, seconds):.3g})"
        ]
        trace = drawn
    if not trace:
        print("no jobs in that window", file=sys.stderr)
        return 1
    config = Config(args.gpus, args.policy, args.resize_pause, args.restart_pause, args.threshold)
    profiles: list[GoodputProfile] = []
    profile_line = ""
    if args.goodput_profiles is not None:
        try:
            profiles, profile_line = goodput_model(args)
        except (OSError, ValueError) as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
    result = run(jobs_from_trace(trace, args.gpus, serials, profiles), config)
    header = [
        f"trace {args.trace.name}: {len(trace)} jobs from day {args.start_day:g}"
        f"{f' for {args.days:g} days' if args.days else ''}, {args.gpus} slots, "
        f"policy {args.policy}",
        *sampled,
        f"speedup: {model}",
        *([profile_line] if profiles else []),
        f"pauses: resize {args.resize_pause:g} s, restart {args.restart_pause:g} s",
    ]
    print(report(result, header))
    return 0


if __name__ == "__main__":
    sys.exit(main())
