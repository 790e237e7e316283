"""A progress bar on stderr (stdout stays clean for --json and pipes).

On a terminal it redraws one line; elsewhere (a log, a CI job) it prints one line when done.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


def size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


class Progress:
    def __init__(self, label: str, total: int, quiet: bool = False, out: TextIO | None = None):
        self.label, self.total, self.quiet = label, total, quiet
        self.out = out or sys.stderr
        self.live = not quiet and self.out.isatty()
        self.started = time.monotonic()
        self.drawn = 0.0
        self.done = 0

    def __call__(self, done: int, total: int | None = None) -> None:
        self.done = done
        if total:
            self.total = total
        if self.live and (time.monotonic() - self.drawn > 0.1 or done == self.total):
            self.drawn = time.monotonic()
            self.out.write("\r" + self.line())
            self.out.flush()

    def line(self, width: int = 30) -> str:
        fraction = min(1.0, self.done / self.total) if self.total else 0.0
        bar = "#" * int(fraction * width)
        rate = self.done / max(time.monotonic() - self.started, 1e-6)
        return (
            f"{self.label} [{bar:<{width}}] {fraction:4.0%} "
            f"{size(self.done)}/{size(self.total)} {size(rate)}/s"
        )

    def finish(self) -> None:
        if self.quiet:
            return
        seconds = time.monotonic() - self.started
        if self.live:
            self.out.write("\r" + self.line() + "\n")
        else:
            self.out.write(f"{self.label}: {size(self.done)} in {seconds:.1f} s\n")
        self.out.flush()
