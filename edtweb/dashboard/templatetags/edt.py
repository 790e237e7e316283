"""Small formatting filters for the pages: {% load edt %}."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import template
from django.utils import timezone
from django.utils.timesince import timesince

from edtweb.training.status import eta_text

register = template.Library()


@register.filter
def ago(when: datetime | None) -> str:
    """ "just now" under a minute (never "0 minutes ago"), else "5 minutes ago"."""
    if when is None:
        return ""
    if (timezone.now() - when).total_seconds() < 60:
        return "just now"
    return f"{timesince(when, depth=1)} ago"


@register.filter
def count(n: int | None) -> str:
    """A parameter count people can read: 1234567 -> "1,234,567 (1.2 M)"."""
    if not n:
        return "—"
    for size, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= size:
            return f"{n:,} ({n / size:.1f} {unit})"
    return f"{n:,}"


@register.filter
def eta(seconds: float | None) -> str:
    """Time left as the jobs list writes it: "ETA 44 s", over 90 s in minutes ("ETA 3 min";
    ``training.status.eta_text``, as the job page shows it)."""
    if seconds is None or seconds == "":
        return ""
    return f"ETA {eta_text(float(seconds))}"


@register.filter
def item(mapping: dict[str, Any] | None, key: str) -> Any:
    """``mapping[key]`` in a template (a trial's hyperparameter by name); "" when absent."""
    return "" if mapping is None else mapping.get(key, "")


@register.filter
def num(value: Any) -> str:
    """A metric or hyperparameter as the sweep pages write it: 4 significant digits."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "—" if value is None or value == "" else str(value)
    return f"{value:.4g}"


@register.filter
def seconds(value: Any) -> str:
    """A span of seconds as the job page writes one ("3 min 20 s", "1 h 4 min"); "—" for
    none."""
    from edtweb.training.views import human_duration

    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "—"
    return human_duration(round(value))
