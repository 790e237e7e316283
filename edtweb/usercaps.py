"""Each user's share of the server's standing work, capped by an admin through the settings
(README, "Configuration"; 0: no cap):

- ``EDT_USER_MAX_SWEEPS``: sweeps queued or running (``sweeps/services.create_sweep``);
- ``EDT_USER_MAX_TRIALS``: trials in flight, a sweep's trial jobs not yet ended, over all
  of the user's sweeps: a sweep may not ask for more at once, and the sweep driver asks no
  trial past it (``sweeps/driver.py``);
- ``EDT_USER_MAX_QUEUED_JOBS``: jobs of the user's own waiting in the queue
  (``training/services.submit_from_form``: the Train form, the API, WMLA's execs).

A request past a cap is refused with a 429 that names the cap, the count, and the setting
that raises it (docs/api.md, "Limits"); the counting is each app's, the caps and the
refusal are here.
"""

from __future__ import annotations

from django.conf import settings


class OverCap(Exception):
    """A request past one of its user's caps; ``setting`` names the cap, ``limit`` its value."""

    status = 429

    def __init__(self, message: str, setting: str, limit: int) -> None:
        super().__init__(message)
        self.setting = setting
        self.limit = limit


def cap(setting: str) -> int:
    """The cap an admin set (0: none)."""
    return int(getattr(settings, setting))


def refuse_past(setting: str, count: int, what: str, way_out: str) -> None:
    """Raise :class:`OverCap` when ``count`` (the user's ``what`` now) has reached the cap
    ``setting``, so that one more would pass it; ``way_out`` says what the user can do."""
    limit = cap(setting)
    if limit and count >= limit:
        raise OverCap(f"you have {count} {what}, the most one user may have ({setting}="
                      f"{limit}): {way_out}, or ask an admin to raise {setting}",
                      setting, limit)  # fmt: skip


def room(setting: str, count: int) -> int:
    """How many more the cap ``setting`` allows beside ``count`` (no cap: as many as asked,
    a large number)."""
    limit = cap(setting)
    return max(0, limit - count) if limit else 2**31
