"""A job as the tests make it: the live tests submit and observe it through the services and
the job's store, as the scheduler and the pages see it; the page, team and share tests write
its database row directly (``stored_job``, the one factory for those)."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path
from typing import Any

from edtweb.training import services
from edtweb.training.models import Job
from tests.harness.processes import PROJECT_DIR

MODEL = str(PROJECT_DIR / "tests" / "models" / "paced_mlp.py")


def submit(owner: Any, name: str, data: Path, epochs: int, model: str = MODEL,
           **fields: Any) -> Job:  # fmt: skip
    """A job of the paced MLP (50 ms a step) unless another ``model`` is named, batch 64, on
    up to 8 workers unless said."""
    fields.setdefault("max_workers", 8)
    return services.submit_job(owner, name=name, model_path=model, data_path=str(data),
                               epochs=epochs, batch_size=64, **fields)  # fmt: skip


class Throttle:
    """The throttled MLP (tests/models/throttled_mlp.py) in a folder of the test's: each
    step takes ``pace`` seconds (its forward pass sleeps) until :meth:`full_speed`. A job
    long enough to outlast a fault and its recovery, which then ends as fast as it trains,
    not after the time a busy machine might have needed."""

    def __init__(self, folder: Path, pace: float = 0.05) -> None:
        folder.mkdir(parents=True)
        self.model = folder / "throttled_mlp.py"
        shutil.copy(PROJECT_DIR / "tests" / "models" / "throttled_mlp.py", self.model)
        self.pace = folder / "pace"
        self.set(pace)

    def set(self, seconds: float) -> None:
        part = self.pace.with_suffix(".part")  # read at every step: never half written
        part.write_text(f"{seconds:g}")
        part.chmod(0o644)
        part.rename(self.pace)

    def full_speed(self) -> None:
        self.set(0)


def workers_of(job: Job) -> int:
    """Members of the job's adopted generation (0 when it holds none)."""
    jobs = services.job_store(job.pk)
    gen = jobs.adopted()
    return len(jobs.members(gen)) if gen and gen == jobs.generation() else 0


def completed(job: Job) -> bool:
    """The job ended COMPLETED; fails at once if it ended any other way."""
    job.refresh_from_db()
    assert job.state not in (Job.State.FAILED, Job.State.STOPPED), job.error
    return job.state == Job.State.COMPLETED


def redone(job: Job) -> int:
    """Iterations trained twice: steps the learners recorded more than once, at different
    times, in the job's stream (the database keeps the first; a record written twice by a
    retry has one time; a new rank 0's copy of the last step, ``replay``, is no second
    training). The iteration in flight at a fault, never recorded, is the one a fault may
    cost."""
    times = {(r["step"], r["time"]) for _, r in services.job_store(job.pk).read_metrics()
             if r.get("type") == "train" and not r.get("replay")}  # fmt: skip
    return sum(n - 1 for n in Counter(step for step, _ in times).values())


def stream_steps(job: Job) -> list[int]:
    """The job's training steps as its learners recorded them, in the order they did, read
    from the job's stream before the metrics consumer drops a step it has stored already
    (so that a training started again from step 1 shows there, where the database keeps
    each step once). A record written twice by a retry (one time) counts once; a new rank
    0's copy of the last step (``replay``) is no training."""
    seen: set[tuple[int, float]] = set()
    steps = []
    for _, r in services.job_store(job.pk).read_metrics():
        if r.get("type") == "train" and not r.get("replay") and (r["step"], r["time"]) not in seen:
            seen.add((r["step"], r["time"]))
            steps.append(int(r["step"]))
    return steps


def stored_job(owner: Any, name: str, state: str = Job.State.QUEUED, **fields: Any) -> Job:
    """A job row of ``owner``'s in ``state`` (QUEUED unless given); ``fields``: any more of
    its columns (``team``, ``max_workers``, ``priority``, ``resource_group``...)."""
    return Job.objects.create(owner=owner, name=name, state=state, **fields)
