"""How the CLI prints: tables for people, JSON (``--json``) for scripts; always stdout."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any


def emit_json(value: Any) -> None:
    json.dump(value, sys.stdout, indent=2, sort_keys=True, default=str)
    sys.stdout.write("\n")


def table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]]) -> None:
    """``columns`` are (key, heading) pairs; a key may be a dotted path or a function name
    already resolved into the row."""
    if not rows:
        print("(none)")
        return
    cells = [[heading.upper() for _, heading in columns]]
    cells += [[_cell(row.get(key)) for key, _ in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    for line in cells:
        print("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def fields(obj: dict[str, Any], keys: Sequence[str]) -> None:
    """One ``key: value`` line per key, for ``show`` commands."""
    width = max(len(k) for k in keys)
    for key in keys:
        value = obj.get(key)
        if value in (None, "", [], {}):
            continue
        print(f"{key.replace('_', ' '):<{width}}  {_cell(value)}")
