"""JSON from outside, its depth judged before it is parsed: Python's parser recurses once per
level of nesting, so a text nested 50,000 deep would raise RecursionError (a 500) deep in
it; and whatever reads the value afterwards recurses too. Every JSON text a request or a
trial hands the server (a body, a form field, a WMLA ``data`` field, a trial's
``val_dict_list.json``) goes through :func:`loads`.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any

from edtweb.limits import LIMITS

# A string literal, to its closing quote or to the text's end (one never closed is read to
# the end, as the parser would: so that no quote is tried twice and the scan stays linear).
STRING = re.compile(r'"(?:[^"\\]++|\\.)*+(?:"|\\?\Z)', re.S)
NOT_BRACKET = re.compile(r"[^\[\]{}]++")
STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


class Refused(ValueError):
    """A JSON text refused before it was parsed; ``status``: the HTTP status that says so."""

    status = 400


class TooDeep(Refused):
    """Nested deeper than the limit."""


class TooLarge(Refused):
    """Longer than a body may be."""

    status = 413


def depth(text: str) -> int:
    """How deep ``text``'s arrays and objects nest (0: a scalar), without parsing it: its
    strings are dropped and its brackets counted, in C loops (linear, never recursive). For
    a text that is not JSON the number is at least the depth the parser reaches before it
    stops at the error."""
    brackets = NOT_BRACKET.sub("", STRING.sub("", text))
    return max(accumulate(map(STEP.__getitem__, brackets)), default=0)


def too_deep(text: str) -> str:
    """Why ``text`` is refused (a sentence to follow the field's name), or "" when its
    depth is within the limit."""
    limit = LIMITS["json_depth"].high
    found = depth(text)
    if found <= limit:
        return ""
    return f"JSON nested {found} levels deep, more than the {limit} levels EDT reads"


def loads(text: str | bytes, what: str = "body") -> Any:
    """``json.loads(text)`` once its size and depth are judged: :class:`TooLarge` or
    :class:`TooDeep` (ValueErrors, as a parse error is) name ``what`` and the limit."""
    limit = LIMITS["body_bytes"].high
    if len(text) > limit:
        raise TooLarge(f"{what}: {len(text)} bytes of JSON, more than the {limit} EDT reads")
    if isinstance(text, (bytes, bytearray)):
        text = text.decode(json.detect_encoding(text), "surrogatepass")
    why = too_deep(text)
    if why:
        raise TooDeep(f"{what}: {why}")
    return json.loads(text)
