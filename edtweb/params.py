"""A request's query parameters read as numbers and ids, for the pages and the API alike.

A value that cannot be read, or is outside what the parameter may be, is the asker's
mistake: :class:`BadParameter` names the parameter and says what it may be (a 400), never
an exception from deeper down (a 500). Ids stop at the largest a database's id column
holds, so that an id past 64 bits is a job that does not exist, not an overflow.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from django.http import JsonResponse

MAX_ID = 2**63 - 1  # the largest id a BigAutoField holds, on every database EDT runs on


class BadParameter(ValueError):
    """A query parameter that cannot be taken; ``why`` says what it may be."""

    def __init__(self, name: str, why: str) -> None:
        super().__init__(f"{name}: {why}")
        self.name, self.why = name, why

    def response(self) -> JsonResponse:
        """The pages' JSON answer, in the API's shape (edtweb/api/errors.py)."""
        return JsonResponse({"error": str(self), "fields": {self.name: [self.why]}}, status=400)


def shown(raw: str) -> str:
    return repr(raw if len(raw) <= 40 else raw[:40] + "...")


def whole(query: Mapping[str, str], name: str, default: int | None, low: int | None = None,
          high: int | None = None) -> int:  # fmt: skip
    """The whole number ``query[name]`` (``default`` when absent or empty; None: it must be
    given), within ``low``..``high`` where given."""
    raw = query.get(name)
    span = "" if low is None and high is None else f" from {low} to {high}"
    if low is not None and high is None:
        span = f" from {low} up"
    if raw is None or not raw.strip():
        if default is None:
            raise BadParameter(name, f"give a whole number{span}")
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadParameter(name, f"must be a whole number{span}, not {shown(raw)}") from None
    if (low is not None and value < low) or (high is not None and value > high):
        raise BadParameter(name, f"must be a whole number{span}, not {shown(raw)}")
    return value


def finite(name: str, raw: str) -> float:
    """``raw`` as a finite number."""
    try:
        value = float(raw)
    except ValueError:
        raise BadParameter(name, f"must be a number, not {shown(raw)}") from None
    if not math.isfinite(value):
        raise BadParameter(name, f"must be a finite number, not {shown(raw)}")
    return value


def id_list(name: str, raw: str, most: int) -> list[int]:
    """Ids, comma-separated (each once, in order given): 1 to ``most`` of them. An id past
    :data:`MAX_ID` is kept: it names nothing, as an id that does not exist (the caller's
    404), and the caller never sends it to the database."""
    parts = [part.strip() for part in raw.split(",") if part.strip()]
    if not 1 <= len(parts) <= most:
        raise BadParameter(name, f"give 1 to {most} ids, comma-separated, not {len(parts)}")
    try:
        ids = [int(part) for part in parts]
    except ValueError:
        raise BadParameter(name, f"ids, comma-separated, not {shown(raw)}") from None
    return list(dict.fromkeys(ids))


def storable(ids: list[int]) -> list[int]:
    """Those of ``ids`` a database id could be (the rest name nothing)."""
    return [pk for pk in ids if 1 <= pk <= MAX_ID]
