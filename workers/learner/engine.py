"""The elastic training loop of one learner (DESIGN.md, "Elastic training protocol").

Rank 0 reads the job's generation and stop flag once per iteration and adds them to the
gradient all-reduce, so every member learns the same decision at the same boundary without
an extra collective. On a change the members form the new generation's process group and
rank 0 broadcasts the whole training state. A collective that raises or times out is
reported; the learner waits for the next generation and redoes the iteration (no optimizer
step was taken).
"""

from __future__ import annotations

import datetime
import io
import logging
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import Dataset, TensorDataset

from scheduler.store import JobStore
from workers.learner import checkpoint
from workers.learner.contract import ModelDefinition, UserCodeError, load_definition
from workers.learner.partition import (
    iterations_per_epoch,
    micro_batches,
    permutation,
    rank_indices,
    slice_bounds,
)
from workers.learner.rendezvous import RedisStore
from workers.learner.spec import JobSpec

log = logging.getLogger("edt.learner")
JOIN_POLL_SECONDS = 0.01
JOIN_PATIENCE_SECONDS = 600.0
EVAL_CHUNK = 512


class CollectiveFailure(Exception):
    """A peer died or froze: the process group is unusable."""


@dataclass
class Agreement:
    gen: int
    stop: bool


class Learner:
    def __init__(self, spec: JobSpec, slot: str, jobs: JobStore, redis_url: str) -> None:
        self.spec = spec
        self.slot = slot
        self.jobs = jobs
        self.rdv = RedisStore(redis_url, jobs.key("rdv"), spec.collective_timeout)
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.gen = 0
        self.rank = 0
        self.size = 1
        self.pg: Any = None
        self.counters = {"epoch": 0, "iteration": 0, "step": 0}
        self._order: tuple[int, list[int]] | None = None
        self._saved_step = -1
        # The process whose death ends this learner: the slot's worker (EDT_WATCH_PID), or
        # whoever started it.
        self.parent_pid = int(os.environ.get("EDT_WATCH_PID") or os.getppid())

    # Start-up ----------------------------------------------------------------------------

    def prepare(self) -> None:
        """Import the user's code, load the data, build the model: all before READY."""
        started = time.perf_counter()
        os.environ["EDT_JOB_DATA"] = self.spec.data  # for WMLA's pth_parameter_mgr
        os.environ["EDT_JOB_EPOCHS"] = str(self.spec.epochs)
        os.environ["EDT_JOB_LR"] = str(self.spec.lr)
        torch.manual_seed(self.spec.seed)  # WMLA-style scripts build their model on import
        self.defn: ModelDefinition = load_definition(Path(self.spec.model))
        self.train_set, self.test_set = self._datasets()
        torch.manual_seed(self.spec.seed)
        self.model = self.defn.build_model().to(self.device)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = self.defn.build_optimizer(self.params, self.spec.lr)
        self.per_epoch = iterations_per_epoch(len(self.train_set), self.spec.batch_size)  # type: ignore[arg-type]
        self._resume_from_checkpoint()
        log.info("%s: ready in %.2f s (code, %d training samples, model)",
                 self.slot, time.perf_counter() - started, len(self.train_set))  # type: ignore[arg-type]  # fmt: skip

    def _datasets(self) -> tuple[Dataset[Any], Dataset[Any]]:
        if self.defn.get_datasets is not None:
            return self.defn.get_datasets(self.spec.data)
        from workers.learner.datasets import load_dataset

        train, test, _classes = load_dataset(Path(self.spec.data))
        return train, test

    def _resume_from_checkpoint(self) -> None:
        path = checkpoint.latest(Path(self.spec.workdir) / "checkpoints")
        if path is None:
            return
        state = checkpoint.load(path)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.counters = {k: int(v) for k, v in state["counters"].items()}
        log.info("%s: loaded checkpoint %s (step %d)", self.slot, path.name, self.counters["step"])

    # The loop ----------------------------------------------------------------------------

    def run(self) -> int:
        """Train until the job ends or this learner leaves it. Returns the exit code."""
        self.ready_at = time.perf_counter()
        # Only a generation published after this READY can include this learner.
        seen = self.jobs.generation()
        self.jobs.announce_ready(self.slot)
        gen = self.wait_for_generation(after=seen, member=False)
        while gen is not None:
            if self.slot not in self.jobs.members(gen):
                log.info("%s: not in generation %d; leaving the job", self.slot, gen)
                break
            try:
                self.form_group(gen)
                self.sync_state()
                gen = self.train_until_change()
            except CollectiveFailure as exc:
                log.warning("%s: generation %d failed at step %d: %s",
                            self.slot, self.gen, self.counters["step"], exc)  # fmt: skip
                self.jobs.report_failure(self.slot, self.gen, self.counters["step"], str(exc))
                self.pg = None
                gen = self.wait_for_generation(after=self.gen, member=True)
        return 0

    def wait_for_generation(self, after: int, member: bool) -> int | None:
        """The next generation that includes this slot; None when it must leave or stop."""
        deadline = time.monotonic() + JOIN_PATIENCE_SECONDS
        while time.monotonic() < deadline:
            if self.jobs.stop_requested() or self.orphaned():
                return None
            latest = self.jobs.generation()
            if latest > after:
                if self.slot in self.jobs.members(latest):
                    return latest
                if member:
                    return None  # dropped from the job: leave
            time.sleep(JOIN_POLL_SECONDS)
        log.warning("%s: no generation took this learner in time; leaving", self.slot)
        return None

    def orphaned(self) -> bool:
        """The process that started this learner is gone (a slot worker killed, say)."""
        try:
            os.kill(self.parent_pid, 0)
            return False
        except ProcessLookupError:
            pass
        log.warning("%s: the process that started this learner is gone; leaving", self.slot)
        return True

    def form_group(self, gen: int) -> None:
        members = self.jobs.members(gen)
        self.gen, self.rank, self.size = gen, members.index(self.slot), len(members)
        timeout = datetime.timedelta(seconds=self.spec.collective_timeout)
        store = dist.PrefixStore(f"gen{gen}", self.rdv)  # type: ignore[attr-defined]
        try:
            if self.device.type == "cuda":
                options = dist.ProcessGroupNCCL.Options()
                options._timeout = timeout
                self.pg = dist.ProcessGroupNCCL(store, self.rank, self.size, options)
            else:
                self.pg = dist.ProcessGroupGloo(store, self.rank, self.size, timeout)
        except Exception as exc:
            raise CollectiveFailure(f"could not form generation {gen}: {exc}") from exc
        if self.rank == 0:
            self.jobs.adopt(gen)
        log.info("%s: generation %d, rank %d of %d (%.2f s after READY)", self.slot, gen,
                 self.rank, self.size, time.perf_counter() - self.ready_at)  # fmt: skip

    def collective(self, op: str, tensor: torch.Tensor, **kw: Any) -> None:
        try:
            if op == "allreduce":
                opts = dist.AllreduceOptions()
                opts.reduceOp = kw.get("reduce", dist.ReduceOp.SUM)
                self.pg.allreduce([tensor], opts).wait()
            else:
                opts_b = dist.BroadcastOptions()
                opts_b.rootRank = 0
                self.pg.broadcast([tensor], opts_b).wait()
        except Exception as exc:
            raise CollectiveFailure(str(exc)) from exc

    def sync_state(self) -> None:
        """Rank 0 (the longest-standing member) gives everyone its full training state."""
        if self.size == 1:
            return
        blob = self._state_bytes() if self.rank == 0 else b""
        length = torch.tensor([len(blob)], dtype=torch.int64, device=self.device)
        self.collective("broadcast", length)
        data = torch.empty(int(length.item()), dtype=torch.uint8, device=self.device)
        if self.rank == 0:
            data.copy_(torch.frombuffer(bytearray(blob), dtype=torch.uint8))
        self.collective("broadcast", data)
        if self.rank != 0:
            self._load_state_bytes(data.cpu().numpy().tobytes())

    def _state_bytes(self) -> bytes:
        buf = io.BytesIO()
        torch.save(self._state(rng=True), buf)
        return buf.getvalue()

    def _state(self, rng: bool = False) -> dict[str, Any]:
        state: dict[str, Any] = {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "counters": dict(self.counters),
        }
        if rng:
            state["rng"] = torch.get_rng_state()
        return state

    def _load_state_bytes(self, blob: bytes) -> None:
        state = torch.load(io.BytesIO(blob), weights_only=True, map_location=self.device)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.counters = {k: int(v) for k, v in state["counters"].items()}
        torch.set_rng_state(state["rng"].cpu())

    def train_until_change(self) -> int | None:
        """Iterate until the generation changes (its number) or the job ends (None)."""
        while True:
            if self._finished():
                self.finish()
                return None
            if self.orphaned():
                return None
            if self.counters["iteration"] >= self.per_epoch:
                self.end_epoch()
                continue
            agreed = self.train_step()
            if agreed.stop:
                self.save_checkpoint()
                return None
            if agreed.gen != self.gen:
                return agreed.gen

    def _finished(self) -> bool:
        c, spec = self.counters, self.spec
        return c["epoch"] >= spec.epochs or (spec.max_steps > 0 and c["step"] >= spec.max_steps)

    # One iteration ------------------------------------------------------------------------

    def train_step(self) -> Agreement:
        started = time.perf_counter()
        epoch, iteration = self.counters["epoch"], self.counters["iteration"]
        if iteration == 0 and self.rank == 0:
            self._callbacks("on_epoch_begin", epoch)
        loss_part = self._accumulate(self._my_indices(epoch, iteration))
        gen, stop = self.jobs.poll() if self.rank == 0 else (0, False)
        tail = torch.tensor([loss_part, float(gen), float(stop)], device=self.device)
        flat = torch.cat([g.reshape(-1) for g in self._grads()] + [tail])
        self.collective("allreduce", flat)
        loss = float(flat[-3])
        if not math.isfinite(loss):
            raise UserCodeError(f"the loss is {loss} at epoch {epoch}, iteration {iteration}")
        self._apply(flat[:-3])
        self._advance()
        if self.rank == 0:
            self._emit_train(loss, time.perf_counter() - started)
        return Agreement(gen=int(flat[-2]), stop=bool(flat[-1] > 0))

    def _my_indices(self, epoch: int, iteration: int) -> list[int]:
        if self._order is None or self._order[0] != epoch:
            self._order = (epoch, permutation(len(self.train_set), self.spec.seed, epoch))  # type: ignore[arg-type]
        B = self.spec.batch_size
        return rank_indices(self._order[1], iteration, B, self.size, self.rank)

    def _accumulate(self, indices: list[int]) -> float:
        """Forward and backward over micro-batches; returns this rank's share of the loss."""
        self.model.train()
        for p in self.params:
            p.grad = None
        B, loss_part = self.spec.batch_size, 0.0
        for lo, hi in micro_batches(0, len(indices), self.spec.max_micro_batch):
            x, y = self._batch(self.train_set, indices[lo:hi])
            loss = self.defn.loss_fn(self.model(x), y)
            (loss * ((hi - lo) / B)).backward()  # type: ignore[no-untyped-call]
            loss_part += float(loss.detach()) * (hi - lo) / B
        return loss_part

    def _batch(self, dataset: Dataset[Any], indices: list[int]) -> tuple[Any, Any]:
        if isinstance(dataset, TensorDataset):
            idx = torch.as_tensor(indices, dtype=torch.long)
            x, y = dataset.tensors[0][idx], dataset.tensors[1][idx]
        else:
            x, y = torch.utils.data.default_collate([dataset[i] for i in indices])
        return x.to(self.device), y.to(self.device)

    def _grads(self) -> list[torch.Tensor]:
        return [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]

    def _apply(self, flat: torch.Tensor) -> None:
        offset = 0
        for p in self.params:
            n = p.numel()
            p.grad = flat[offset : offset + n].view_as(p).clone()
            offset += n
        lr = self.defn.lr_at(self.counters["step"], self.spec.lr)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.step()

    def _advance(self) -> None:
        self.counters["iteration"] += 1
        self.counters["step"] += 1

    def _emit_train(self, loss: float, seconds: float) -> None:
        c = self.counters
        record = {
            "type": "train", "step": c["step"], "epoch": c["epoch"],
            "iteration": c["iteration"], "loss": loss, "workers": self.size, "gen": self.gen,
            "lr": self.optimizer.param_groups[0]["lr"], "time": time.time(),
            "samples_per_s": self.spec.batch_size / max(seconds, 1e-9),
        }  # fmt: skip
        self.jobs.emit(record)
        self._callbacks("log_train_metrics", loss, float("nan"), c["epoch"], c["step"])

    def _callbacks(self, name: str, *args: Any) -> None:
        from callbacks import call_all  # workers/compat, on sys.path once code is loaded

        call_all(self.defn.callbacks, name, *args)
        if self.defn.logger is not None:
            call_all([self.defn.logger], name, *args)

    # Epoch end ---------------------------------------------------------------------------

    def end_epoch(self) -> None:
        """Evaluate on the test set spread over the members, then checkpoint when due."""
        totals = self._evaluate()
        self.collective("allreduce", totals)
        epoch = self.counters["epoch"]
        self.counters["epoch"] += 1
        self.counters["iteration"] = 0
        if self.rank != 0:
            return
        loss, correct, count = (float(v) for v in totals)
        acc = correct / max(count, 1.0)
        self.jobs.emit({"type": "test", "epoch": epoch, "step": self.counters["step"],
                        "test_loss": loss / max(count, 1.0), "test_accuracy": acc,
                        "time": time.time()})  # fmt: skip
        self._callbacks("log_test_metrics", loss / max(count, 1.0), acc, epoch)
        self._callbacks("on_epoch_end", epoch)
        if self.counters["epoch"] % max(self.spec.checkpoint_every, 1) == 0:
            self.save_checkpoint()

    @torch.no_grad()
    def _evaluate(self) -> torch.Tensor:
        self.model.eval()
        lo, hi = slice_bounds(len(self.test_set), self.size, self.rank)  # type: ignore[arg-type]
        loss_sum, correct = 0.0, 0.0
        for start in range(lo, hi, EVAL_CHUNK):
            x, y = self._batch(self.test_set, list(range(start, min(start + EVAL_CHUNK, hi))))
            out = self.model(x)
            loss_sum += float(self.defn.loss_fn(out, y)) * len(y)
            if out.dim() == 2 and out.shape[1] > 1:
                correct += float((out.argmax(dim=1) == y).sum())
        return torch.tensor([loss_sum, correct, float(hi - lo)], device=self.device)

    def save_checkpoint(self) -> None:
        if self.rank == 0 and self._saved_step != self.counters["step"]:
            self._saved_step = self.counters["step"]
            path = checkpoint.save(
                Path(self.spec.workdir) / "checkpoints", self.counters["step"], self._state()
            )
            self.jobs.record_checkpoint(self.counters["step"])
            log.info("%s: checkpoint %s", self.slot, path.name)

    def finish(self) -> None:
        if self.rank != 0:
            return
        self.save_checkpoint()
        torch.save(self.model.state_dict(), Path(self.spec.workdir) / "model.pt")
        self.jobs.emit({"type": "done", "step": self.counters["step"], "time": time.time()})
