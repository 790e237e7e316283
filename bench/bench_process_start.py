"""The start of a web-side process (the web, scheduler, metrics consumer, sweep driver, a
Celery slot or control worker: each loads Django, the URLs and the tasks) without torch,
against the same start with the learner's contract loaded as well, as every one of them
did while ``edtweb/sweeps/space.py`` imported it (torch with it).

    python bench/bench_process_start.py [--pairs 5]

Each sample is a fresh interpreter; the CPU time (user + system) and the wall time it took,
in interleaved pairs whose order alternates. Reported: min / median / max of the ratio
(with the contract over without), the medians, and the 1-minute load. The table goes to
bench/results/process-start.md.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
LOAD = (
    "import os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'edtweb.settings'); "
    "import django; django.setup(); import edtweb.urls; "
    "from edtweb.celery import app; app.loader.import_default_modules(); "
)
CASES = {"now": LOAD, "with torch": LOAD + "import workers.learner.contract"}


def sample(code: str) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one fresh interpreter running ``code``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", code], cwd=PROJECT, check=True)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=5)
    args = parser.parse_args()
    got: dict[str, list[tuple[float, float]]] = {name: [] for name in CASES}
    loads = []
    for i in range(args.pairs):
        order = list(CASES) if i % 2 == 0 else list(reversed(CASES))
        for name in order:
            got[name].append(sample(CASES[name]))
        loads.append(os.getloadavg()[0])
    rows = ["| measure | now (s, median) | with torch (s, median) | ratio min / median / max |",
            "|---|---|---|---|"]  # fmt: skip
    for index, measure in ((0, "CPU"), (1, "wall")):
        ratios = [b[index] / a[index] for a, b in zip(got["now"], got["with torch"], strict=True)]
        now = statistics.median(s[index] for s in got["now"])
        old = statistics.median(s[index] for s in got["with torch"])
        rows.append(f"| {measure} | {now:.2f} | {old:.2f} | {min(ratios):.2f} / "
                    f"{statistics.median(ratios):.2f} / {max(ratios):.2f} |")  # fmt: skip
    table = "\n".join(rows)
    note = (f"{args.pairs} interleaved pairs; 1-minute load {min(loads):.1f} to "
            f"{max(loads):.1f} on {os.cpu_count()} cores (a shared machine).")  # fmt: skip
    out = PROJECT / "bench" / "results" / "process-start.md"
    title = "# A web-side process's start, without torch and with it"
    out.write_text(f"{title}\n\n{table}\n\n{note}\n")
    print(table)
    print(note)


if __name__ == "__main__":
    main()
