"""A WMLA hypersearch's trial reports its objective as WMLA's own trials do: its script
writes ``$RESULT_DIR/val_dict_list.json``, a list of ``{"steps": n, metric: value, ...}``
(``steps`` optional: the entry's position, from 1, stands for it), rewritten as it goes or
once at its end (docs/architecture.md, "Sweeps"). The sweep driver reads it here, with the
care a file its user's code wrote deserves: no link followed, a size limit, and a file
half-written (the script rewrites it while the driver reads) taken for one not there yet.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from edtweb.jsonbounds import too_deep
from edtweb.training.history import open_job_file
from edtweb.training.models import Job

RESULT_FILE = "val_dict_list.json"
WHERE = f"result/{RESULT_FILE}"  # in the job's directory: its $RESULT_DIR
MAX_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class Results:
    """What the trial's file says of the objective."""

    found: bool  # the file exists and reads as a list of entries
    points: tuple[tuple[int, float], ...] = ()  # (step, value) of the objective, in order
    keys: tuple[str, ...] = ()  # every metric the entries name
    error: str = ""  # why the file cannot be used: unreadable, or a value not a number

    def best(self, direction: str) -> float | None:
        """The best value of the objective (WMLA's ``metricVal``)."""
        values = [v for _, v in self.points]
        if not values:
            return None
        return max(values) if direction == "maximize" else min(values)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def read(job: Job, objective: str) -> Results:
    """The objective's values in the trial's ``val_dict_list.json``; ``found`` False while
    the file is missing or half-written."""
    try:
        with open_job_file(job, WHERE) as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError:  # missing, or a link: not there
        return Results(found=False)
    if len(raw) > MAX_BYTES:
        return Results(True, error=f"{RESULT_FILE} is larger than {MAX_BYTES // 2**20} MiB")
    try:
        text = raw.decode(json.detect_encoding(raw), "surrogatepass")
        deep = too_deep(text)  # the parser recurses once per level: judged before it runs
        entries = None if deep else json.loads(text)
    except ValueError:
        return Results(found=False)  # being written
    if deep:
        return Results(True, error=f"{RESULT_FILE}: {deep}")
    if isinstance(entries, dict):  # one entry on its own
        entries = [entries]
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        return Results(True, error=f"{RESULT_FILE} must hold a list of objects such as "
                                   f'{{"steps": 1, "{objective}": 0.5}}')  # fmt: skip
    keys: list[str] = []
    points: list[tuple[int, float]] = []
    for position, entry in enumerate(entries, start=1):
        keys += [str(k) for k in entry if k not in ("steps", "step") and str(k) not in keys]
        if objective not in entry:
            continue
        value = entry[objective]
        if not _number(value):
            return Results(True, error=f"{RESULT_FILE}: '{objective}' is {value!r} in entry "
                                       f"{position}, not a number")  # fmt: skip
        step = entry.get("steps", entry.get("step"))
        step = int(step) if _number(step) and float(step).is_integer() else position
        points.append((step, float(value)))
    return Results(True, tuple(points), tuple(keys))
