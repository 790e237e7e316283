"""What one request may ask of the server: the one table of sizes and numeric bounds that
keeps every request's work bounded, free of Django (a sweep's rules in
``edtweb/sweeps/space.py`` read it as the API and the pages do).

Each size is judged before anything is built from it: a body before it is read, a JSON
text's depth before it is parsed, a grid's points by arithmetic before any list of them
exists. A refusal names the field and the limit (docs/api.md, "Limits"). A job
submission's own bounds are ``workers.learner.submission.BOUNDS``; the caps per user, which
an admin sets, are settings (``EDT_USER_MAX_*``, ``edtweb/usercaps.py``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limit:
    low: int | float
    high: int | float
    what: str  # what it bounds, as docs/api.md says it

    @property
    def span(self) -> str:
        return f"{show(self.low)} to {show(self.high)}"

    def holds(self, value: int | float) -> bool:
        return self.low <= value <= self.high


def show(value: int | float) -> str:
    """A limit as the docs and the refusals write it: whole numbers in full (``2147483647``),
    others as ``%g`` (``1e+15``)."""
    return str(value) if isinstance(value, int) else f"{value:g}"


def number_text(number: float) -> str:
    """A number a request sent, as a refusal quotes it: as ``%g`` writes it, or an int too
    large for a float by its count of digits."""
    if isinstance(number, int) and abs(number) > 10**300:
        return f"(a number of {len(str(abs(number)))} digits)"
    return f"{number:g}"


INT32 = 2**31 - 1  # a database's integer column, on every database EDT runs on

LIMITS: dict[str, Limit] = {
    # A request's body (edtweb/bodylimit.py, edtweb/jsonbounds.py): any body but an upload's
    # (multipart/form-data, application/octet-stream), before it is read; and a JSON text,
    # the body's or a field's, before it is parsed.
    "body_bytes": Limit(0, 2 * 1024**2, "bytes of a request's body (but an upload's)"),
    "json_depth": Limit(0, 64, "levels of arrays and objects nested in a JSON text"),
    # A sweep (edtweb/sweeps/space.py), and WMLA's hypersearch onto it
    "parameters": Limit(1, 100, "hyperparameters in a sweep's space"),
    "choices": Limit(1, 1_000, "choices of one parameter (a WMLA Range's powers too)"),
    "grid_points": Limit(1, 5_000, "points of a grid search (the product of its sizes)"),
    "magnitude": Limit(-1e15, 1e15, "every number of a range, its step, and a numeric choice"),
    "max_trials": Limit(1, 5_000, "a sweep's budget of trials"),
    "max_parallel": Limit(1, 1024, "a sweep's trials at once"),
    "max_time": Limit(0, 1e9, "a sweep's seconds (0: no limit)"),
    "reduction_factor": Limit(2, 100, "ASHA's and Hyperband's reduction factor"),
    "min_resource": Limit(0, INT32, "steps before ASHA's first rung (0: one epoch)"),
    "seed": Limit(0, INT32, "a sweep's seed"),
}
