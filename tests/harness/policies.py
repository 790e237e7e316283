"""What the policy tests share: a job's view as they write it, and the two orders every
decision is checked in (a policy's answer must not depend on the order of its input)."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.policies import QUEUED, RUNNING, JobView

ORDERS = pytest.mark.parametrize("reverse", [False, True], ids=["given-order", "reversed"])


def job(job_id: str, max_workers: int = 8, submitted: float = 0.0, **fields: Any) -> JobView:
    """A job; RUNNING when it holds slots, unless a state is given."""
    fields.setdefault("state", RUNNING if fields.get("current") else QUEUED)
    return JobView(job_id, max_workers, submitted, **fields)
