"""What a learner records of its training (docs/architecture.md, "Elastic training
protocol"): each step's train record, the evaluation's, and its checkpoints.

Every member builds the record of each step it trains (the loss and right answers are the
global batch's, from the all-reduce); rank 0 queues it for its writer thread (records.py).
A rank 0 killed after the all-reduce takes the records its writer had not written with it,
while the others have taken those steps: each step's all-reduce carries the last step
Redis took from rank 0, every member keeps its own copies of the later ones
(:meth:`Bookkeeping.keep_unwritten`), and whoever is rank 0 next writes them again
(:meth:`Bookkeeping.took_rank`). Rank 0 also writes the checkpoints (checkpoint.py), and
a learner resumes from the latest one.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from protocol.jobstore import JobStore
from workers.learner import checkpoint
from workers.learner.goodput import GoodputMode
from workers.learner.records import RecordWriter

log = logging.getLogger("edt.learner")
MAX_UNWRITTEN = 100_000  # train records kept while rank 0's may be unwritten (Redis away)


class Bookkeeping:
    """A learner's records and checkpoints (see the module)."""

    def __init__(self, jobs: JobStore, slot: str, workdir: Path) -> None:
        self.slot = slot
        self.records = RecordWriter(jobs)
        self.unwritten: deque[dict[str, Any]] = deque()  # train records past rank 0's
        self.rank0_written = 0  # the last train step Redis took from rank 0 (all-reduced)
        self.was_rank0 = False  # rank 0 of the last generation this learner trained in
        self.last_test: dict[str, Any] | None = None  # the last evaluation's record
        self.directory = workdir / "checkpoints"
        self.saved_step = -1

    # Records ------------------------------------------------------------------------------

    def train_record(
        self,
        counters: dict[str, int],
        place: tuple[int, int, int],
        lr: float,
        total_steps: int,
        goodput: GoodputMode | None,
    ) -> dict[str, Any]:
        """The record of the step just taken (``counters`` after it; ``place``: its group's
        size, generation and hosts; ``lr``: the optimizer's), but for what its agreement
        says (its loss and accuracy) and its rate (``trained`` adds them once it is read)."""
        c = counters
        size, gen, hosts = place
        record = {
            "type": "train", "step": c["step"], "epoch": c["epoch"],
            "iteration": c["iteration"], "workers": size, "gen": gen,
            "hosts": hosts,
            "lr": lr, "time": time.time(),
            "total_steps": total_steps,
        }  # fmt: skip
        if goodput is not None:
            record.update(goodput.record(lr, counters))
        return record

    def trained(
        self,
        record: dict[str, Any],
        read: tuple[float, float, int],
        batch: int,
        seconds: float,
        rank0: bool,
    ) -> float:
        """A step's record completed once its agreement is read (``read``: the global
        batch's right answers and loss, the last step Redis took from rank 0), its rate
        over ``seconds``; kept while rank 0 may not have written it, and queued as rank
        0's. Returns its accuracy in percent (nan: not a classifier)."""
        correct, loss, written = read
        accuracy = 100.0 * correct / batch
        record["loss"] = loss
        if math.isfinite(accuracy):  # a classifier's (JSON has no NaN for the pages)
            record["accuracy"] = accuracy / 100.0
        record["samples_per_s"] = batch / max(seconds, 1e-9)
        self.keep_unwritten(record, written=written)
        if rank0:
            self.records.put(record)
        return accuracy

    def tested(self, record: dict[str, Any], rank0: bool) -> None:
        """An evaluation's record (built by every member), queued as rank 0's."""
        self.last_test = record
        if rank0:
            self.records.put(record)

    def keep_unwritten(self, record: dict[str, Any], written: int) -> None:
        """Keep this step's record while rank 0 may not have written it: until a later
        step's all-reduce says Redis took rank 0's record of this step or a later one."""
        self.rank0_written = max(self.rank0_written, written)
        self.unwritten.append(record)
        while self.unwritten and self.unwritten[0]["step"] <= self.rank0_written:
            self.unwritten.popleft()
        if len(self.unwritten) > MAX_UNWRITTEN:  # Redis away for long: the oldest go
            self.unwritten.popleft()

    def took_rank(self, rank0: bool) -> None:
        """A generation formed, this learner its rank 0 or not: as a new rank 0, the
        records the last one may not have written go out again."""
        if rank0:
            self.write_unwritten_steps()
        self.was_rank0 = rank0

    def write_unwritten_steps(self) -> None:
        """As the new rank 0: the steps this learner trained whose records the last rank 0
        may not have written, and the last evaluation's record (no step all-reduce says
        whether that one was written). Readers keep the first record of each kind and step,
        so where it did write one, this copy (marked ``replay``) changes nothing."""
        if not self.was_rank0:  # as rank 0, its own writer writes them
            test = self.last_test  # the last evaluation's too, in its place by step
            for record in self.unwritten:
                if test is not None and record["step"] > test["step"]:
                    self.records.put({**test, "replay": True})
                    test = None
                self.records.put({**record, "replay": True})
            if test is not None:
                self.records.put({**test, "replay": True})
        self.unwritten.clear()

    def done(self, step: int) -> None:
        """The job's end, as rank 0."""
        self.records.put({"type": "done", "step": step, "time": time.time()})

    # Checkpoints --------------------------------------------------------------------------

    def save_checkpoint(self, step: int, state: Callable[[], dict[str, Any]]) -> None:
        """As rank 0: the training state (``state()``) at ``step``, unless saved already,
        then said in the records after those queued so far."""
        if self.saved_step == step:
            return
        self.saved_step = step
        path = checkpoint.save(self.directory, step, state())
        log.info("%s: checkpoint %s", self.slot, path.name)
        # Said after the records queued so far; kept while Redis does not answer.
        self.records.record_checkpoint(step)

    def latest_checkpoint(self) -> tuple[Path, dict[str, Any]] | None:
        """The latest checkpoint and the state in it; None where there is none."""
        path = checkpoint.latest(self.directory)
        return None if path is None else (path, checkpoint.load(path))
