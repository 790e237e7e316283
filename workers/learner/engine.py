"""The elastic training loop of one learner (docs/architecture.md, "Elastic training protocol").

Rank 0 adds the job's generation and stop flag, as its watch thread last read them from
Redis, to the gradient all-reduce, so every member learns the same decision at the same
boundary without an extra collective and without a Redis round trip in the step. The host
reads that agreement one step late, once the next step is queued (``train_step``), so on a
GPU it never waits for the device inside a step; a learner alone runs no collective. The
gradients are all-reduced in buckets launched during backward (reducer.py, overlap.py);
the next iteration's batches are built by a background thread while this one trains. On a
change the members form the new generation's process group and rank 0 broadcasts the
whole training state. A collective that raises or times out is reported; the learner
waits for the next generation and redoes the iteration (no optimizer step was taken).

A goodput-mode job (docs/architecture.md, "Goodput mode") also measures its gradient
noise scale from the gradients the step makes anyway (goodput.py), trains at the global
batch each generation names, with the learning rate scaled by AdaScale's gain, and counts
its progress in base-batch steps; a fixed-batch job runs none of that.

:class:`Learner` is the composition that runs the loop; each concern is a part of its
own, testable alone: membership.py (generations, the process group, the control watch),
inputs.py (datasets, the order, each rank's batches), step.py (forward, backward, the
all-reduce and its agreement, the optimizer step), bookkeeping.py (records, checkpoints)
and goodput.py (goodput mode's batch and statistics).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import time
from pathlib import Path
from typing import Any

import torch

from protocol.exits import Exit
from protocol.jobstore import JobStore
from workers.learner import statecast
from workers.learner.bookkeeping import Bookkeeping
from workers.learner.contract import (
    ModelDefinition,
    UserCodeError,
    is_wmla_script,
    load_definition,
    run_script,
    write_config,
)
from workers.learner.goodput import GoodputMode
from workers.learner.inputs import Inputs
from workers.learner.loader import Batches
from workers.learner.membership import CollectiveFailure, Membership
from workers.learner.overlap import BucketFailure
from workers.learner.spec import JobSpec
from workers.learner.step import Agreement, InFlight, Stepper, read

log = logging.getLogger("edt.learner")


class Learner:
    """One learner of a job: the loop over generations and steps, over its parts."""

    def __init__(self, spec: JobSpec, slot: str, jobs: JobStore, redis_url: str) -> None:
        self.spec = spec
        self.slot = slot
        self.jobs = jobs
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.membership = Membership(spec, slot, jobs, redis_url, self.device)
        self.inputs = Inputs(spec, self.device)
        self.bookkeeping = Bookkeeping(jobs, slot, Path(spec.workdir))
        self.stepper: Stepper  # built with the model (adopt)
        self.goodput: GoodputMode | None = None  # goodput mode's batch and statistics
        self.spares: statecast.Spares = {}  # memory for the first state received (adopt)
        self.ready_at = time.perf_counter()  # READY (run); until then, this learner's making
        # Holds the job's state (rank 0's, or received whole): then a state broadcast
        # lands in new buffers, loaded only once all of it is in, so that a failure
        # midway cannot leave a torn state that this learner might later give on.
        self._has_state = False
        self._torn = False  # a broadcast into its own tensors failed midway
        self.counters = {"epoch": 0, "iteration": 0, "step": 0}
        self.total_steps = 0
        self._in_flight: InFlight | None = None  # the step whose agreement is still unread

    @property
    def batch(self) -> int:
        """The global batch of this iteration: the spec's, fixed; in goodput mode the one
        the generation names."""
        return self.goodput.batch if self.goodput is not None else self.spec.batch_size

    def _agreement_host(self) -> tuple[float, float, float]:
        """Rank 0's part of the agreement (Membership.agreement_host)."""
        return self.membership.agreement_host(self.bookkeeping.records.written)

    # Start-up ----------------------------------------------------------------------------

    def start(self) -> int:
        """Load the user's code and train; returns the exit code. A native module is
        imported; a WMLA script runs as ``__main__`` and its ``train()`` call runs
        :meth:`run` (README, "Models")."""
        self._environment()
        path = Path(self.spec.model)
        if not is_wmla_script(path):
            self.prepare()
            return self.run()
        codes: list[int] = []
        failure: list[BaseException] = []

        def drive(defn: ModelDefinition) -> None:
            try:
                self.adopt(defn)
                codes.append(self.run())
            except BaseException as exc:
                failure.append(exc)
                raise

        workdir = Path(self.spec.workdir)
        os.chdir(workdir)
        if self.spec.hparams:  # a sweep's trial: its values where WMLA puts them
            write_config(workdir, self.spec.hparams)
        torch.manual_seed(self.spec.seed)  # WMLA scripts build their model as they run
        try:
            run_script(path, self.spec.argv, drive)
        except BaseException:
            if not failure:
                raise
        if failure:  # raised in training, whatever the script did with it
            raise failure[0]
        return codes[0]

    def _environment(self) -> None:
        """What WMLA scripts read from the environment (README, "Models")."""
        spec, workdir = self.spec, Path(self.spec.workdir)
        os.environ["EDT_JOB_DATA"] = spec.data  # for WMLA's pth_parameter_mgr
        os.environ["EDT_JOB_EPOCHS"] = str(spec.epochs)
        os.environ["EDT_JOB_LR"] = str(spec.lr)
        os.environ["EDT_JOB_BATCH"] = str(spec.batch_size)
        os.environ["DATA_DIR"] = spec.data
        os.environ["LOG_DIR"] = str(workdir / "driver")
        os.environ["RESULT_DIR"] = str(workdir / "result")
        os.environ["JOB_STATE_DIR"] = str(workdir)
        os.environ["DLI_EXECID"] = spec.exec_id or spec.job_id
        os.environ["EDT_SLOT"] = self.slot
        for name in ("driver", "result"):
            (workdir / name).mkdir(parents=True, exist_ok=True)

    def prepare(self) -> None:
        """Import the user's code, load the data, build the model: all before READY."""
        self._environment()
        torch.manual_seed(self.spec.seed)
        self.adopt(load_definition(Path(self.spec.model), hparams=self.spec.hparams))

    def adopt(self, defn: ModelDefinition) -> None:
        """Take the definition: the job's values (or the script's, where it decides), the
        data, the model and its optimizer, the latest checkpoint."""
        started = time.perf_counter()
        self.defn = defn
        spec, script = self.spec, defn.script_values or {}
        for name in ("epochs", "batch_size"):
            if name in spec.script_decides and script.get(name):
                setattr(spec, name, int(script[name]))
        inputs = self.inputs
        inputs.load(defn)
        torch.manual_seed(spec.seed)
        self.stepper = stepper = Stepper(spec, defn, self.device, self.membership,
                                         self._agreement_host)  # fmt: skip
        if spec.goodput:  # the sum of the local squared norms rides on the all-reduce too
            self.goodput = GoodputMode(spec, len(inputs), self.slot)
            stepper.measure(self.goodput)
            self.goodput.start(self.counters)
        per_epoch = inputs.count_iterations()
        self.total_steps = per_epoch * spec.epochs
        if spec.max_steps > 0:
            self.total_steps = min(self.total_steps, spec.max_steps)
        if defn.callbacks:
            from callbacks import give_params  # workers/compat

            give_params(defn.callbacks, {
                "model": stepper.model, "optimizer": stepper.optimizer,
                "loss_function": defn.loss_fn, "epochs": spec.epochs,
                "batch_size": spec.batch_size,
            })  # fmt: skip
        self._resume_from_checkpoint()
        # a joiner's optimizer has no state yet: memory for the state it will receive
        optimizer = stepper.optimizer
        per_param = 0 if optimizer.state else statecast.spare_count(optimizer)
        self.spares = statecast.spares_for(stepper.params, per_param)
        if defn.train_step is None and len(inputs):
            n = min(spec.batch_size, spec.max_micro_batch or spec.batch_size, len(inputs))
            stepper.rehearse(*inputs.batch(inputs.train_set, list(range(n))))
        if stepper.reducer is None:
            stepper.own_buckets()
        # its workers start decoding where training will resume
        inputs.start(self.counters, self.batch)
        log.info("%s: ready in %.2f s (code, %d training samples, model)",
                 self.slot, time.perf_counter() - started, len(inputs))  # fmt: skip

    def _resume_from_checkpoint(self) -> bool:
        found = self.bookkeeping.latest_checkpoint()
        if found is None:
            return False
        path, state = found
        self.stepper.load(state, model=True)
        self.counters = {k: int(v) for k, v in state["counters"].items()}
        if self.goodput is not None:
            self.goodput.load(state, self.counters)
        log.info("%s: loaded checkpoint %s (step %d)", self.slot, path.name, self.counters["step"])
        return True

    # The loop ----------------------------------------------------------------------------

    def run(self) -> int:
        """Train until the job ends or this learner leaves it. Returns the exit code."""
        self.ready_at = time.perf_counter()
        membership = self.membership
        membership.watch.start()
        self.bookkeeping.records.start()
        # Only a generation published after this READY can include this learner.
        seen = self.jobs.generation()
        self.jobs.announce_ready(self.slot)
        gen = membership.wait_for_generation(after=seen, member=False)
        while gen is not None:
            if self.slot not in self.jobs.members(gen):
                log.info("%s: not in generation %d; leaving the job", self.slot, gen)
                break
            try:
                self.form_group(gen)
                self.sync_state()
                self.take_batch(gen)
                gen = self.train_until_change()
                continue
            except CollectiveFailure as exc:
                why = str(exc)
            # Out of the handler, whose traceback held the failed step's frames: reported,
            # then the group freed, so that peers' waits on this learner raise now.
            log.warning("%s: generation %d failed at step %d: %s",
                        self.slot, membership.gen, self.counters["step"], why)  # fmt: skip
            self.stepper.let_go()
            if self._torn and not self._untear():
                return Exit.TORN
            self.jobs.report_failure(self.slot, membership.gen, self.counters["step"], why)
            if not membership.leave_group():
                log.warning("%s: generation %d's group is still held: peers waiting on it "
                            "go on at their timeout", self.slot, membership.gen)  # fmt: skip
            # the next state may come into new buffers: memory for them
            self.stepper.held.clear()
            gen = membership.wait_for_generation(after=membership.gen, member=True)
        return Exit.FINISHED

    def _untear(self) -> bool:
        """After a state broadcast into this joiner's own tensors failed midway: back to
        the latest checkpoint, as it started, so that it never gives a torn state on. False
        where there is none: it then leaves the job, a lost learner to the coordinator."""
        if self._resume_from_checkpoint():
            self._torn = False
            return True
        log.warning("%s: the state it was receiving is incomplete and no checkpoint exists "
                    "to go back to: leaving the job", self.slot)  # fmt: skip
        return False

    def form_group(self, gen: int) -> None:
        """Form generation ``gen``'s group, and each part's side of it."""
        membership = self.membership
        membership.form_group(gen)
        self.bookkeeping.took_rank(membership.rank == 0)
        self.stepper.formed()
        log.info("%s: generation %d, rank %d of %d (%.2f s after READY)", self.slot, gen,
                 membership.rank, membership.size,
                 time.perf_counter() - self.ready_at)  # fmt: skip

    def sync_state(self) -> None:
        """Rank 0 (the longest-standing member) gives everyone its full training state:
        a small pickled header, one flat byte buffer per part for the small tensors, then
        each large tensor on its own: into a joiner's own tensor at the same place (its
        parameters; its optimizer's state into the spares it made while starting up),
        into new buffers on a learner that holds the state already (statecast.py)."""
        spares, self.spares = self.spares, {}  # for the first state received, if any
        rank, size = self.membership.rank, self.membership.size
        collective = self.membership.collective
        if size == 1:
            self._has_state = True
            return
        started = time.perf_counter()
        packed = statecast.Packed(b"", {})
        if rank == 0:
            state = self._state(rng=True)
            packed = statecast.pack({"model": state.pop("model"), "rest": state}, self.device)
        length = torch.tensor([len(packed.header)], dtype=torch.int64, device=self.device)
        collective("broadcast", length)
        data = torch.empty(int(length.item()), dtype=torch.uint8, device=self.device)
        if rank == 0:
            data.copy_(torch.frombuffer(bytearray(packed.header), dtype=torch.uint8))
        collective("broadcast", data)
        header = statecast.read_header(data.cpu().numpy().tobytes())
        skeleton = header["skeleton"]
        in_place: set[int] = set()
        if rank != 0:
            own: dict[str, Any] | None = None
            if not self._has_state:  # a joiner: its own tensors are the destinations
                own = self._state()
                own = {"model": own.pop("model"), "rest": own}  # the places of rank 0's
            packed.flats = {part: torch.empty(size, dtype=torch.uint8, device=self.device)
                            for part, size in header["sizes"].items()}  # fmt: skip
            packed.bigs, in_place = statecast.destinations(skeleton, own, spares)
            del own
        for flat in packed.flats.values():
            collective("broadcast", flat)
        self._torn = rank != 0 and bool(in_place)
        for tensor in packed.bigs:
            collective("broadcast", tensor)
        if rank != 0:
            model = statecast.rebuild(skeleton["model"], packed.flats, packed.bigs)
            skip = statecast.in_place_keys(skeleton["model"], in_place)
            result = self.stepper.model.load_state_dict(
                {k: v for k, v in model.items() if k not in skip}, strict=False
            )
            if result.unexpected_keys or set(result.missing_keys) - skip:
                raise RuntimeError(f"the state received does not fit this model: {result}")
            del model, packed.flats["model"]
            self._load_state(statecast.rebuild(skeleton["rest"], packed.flats, packed.bigs))
        self._has_state, self._torn = True, False
        total = sum(header["sizes"].values()) + sum(t.nbytes for t in packed.bigs)
        log.info("%s: state of %.1f MB in %.3f s (%d large tensors)", self.slot, total / 1e6,
                 time.perf_counter() - started, len(packed.bigs))  # fmt: skip

    def _state(self, rng: bool = False) -> dict[str, Any]:
        """The whole training state: the stepper's, the counters, the scaler's, goodput
        mode's statistics, and (given to joiners) the random generator's."""
        state: dict[str, Any] = {**self.stepper.state(), "counters": dict(self.counters)}
        if self.stepper.scaler is not None:
            state["scaler"] = self.stepper.scaler.state_dict()
        if self.goodput is not None:
            state["goodput"] = self.goodput.noise.state_dict()
        if rng:
            state["rng"] = torch.get_rng_state()
        return state

    def _load_state(self, state: dict[str, Any]) -> None:
        """What sync_state received besides the model: optimizer, counters, scaler, RNG."""
        self.stepper.load(state, model=False)
        self.counters = {k: int(v) for k, v in state["counters"].items()}
        if self.goodput is not None:
            self.goodput.load(state, self.counters)
        torch.set_rng_state(state["rng"].cpu().clone())  # its own storage: a view would crash

    def take_batch(self, gen: int) -> None:
        """Goodput mode: the global batch generation ``gen`` names, if it names one (every
        member reads the same key, after the state broadcast: they agree)."""
        if self.goodput is not None:
            self.goodput.take_batch(gen, self.jobs.generation_batch(gen), self.counters)

    def train_until_change(self) -> int | None:
        """Iterate until the generation changes (its number) or the job ends (None).

        Each step's agreement is acted on one step late (``train_step``): every member
        reads step k's once step k+1 is queued, and all of them act on it at that same
        boundary. Before the epoch's evaluation, the end, and on leaving, the step still
        in flight is settled (its agreement read, its record written)."""
        gen = self.membership.gen
        while True:
            if self._finished():
                self._settle()
                self.finish()
                return None
            if self.membership.orphaned():
                with contextlib.suppress(Exception):
                    self._settle()
                return None
            if self._epoch_over():
                agreed = self._settle()
                if agreed is not None and (agreed.stop or agreed.gen != gen):
                    return self._act(agreed)
                self.end_epoch()
                continue
            agreed = self.train_step()
            if agreed is not None and (agreed.stop or agreed.gen != gen):
                last = self._settle()  # the step taken meanwhile, in this generation
                if last is not None:
                    agreed = Agreement(max(agreed.gen, last.gen), agreed.stop or last.stop)
                return self._act(agreed)

    def _act(self, agreed: Agreement) -> int | None:
        """A stop (checkpoint, None) or the new generation's number."""
        if agreed.stop:
            self.save_checkpoint()
            return None
        return agreed.gen

    def _epoch_over(self) -> bool:
        """No whole global batch left in the epoch (a last partial one is dropped)."""
        if self.goodput is None:
            return self.counters["iteration"] >= self.inputs.per_epoch
        return self.goodput.epoch_over(self.counters)

    def _finished(self) -> bool:
        c, spec = self.counters, self.spec
        return c["epoch"] >= spec.epochs or (spec.max_steps > 0 and c["step"] >= spec.max_steps)

    # One iteration ------------------------------------------------------------------------

    def train_step(self) -> Agreement | None:
        """Queue one iteration (forward, backward, the gradient all-reduce with the
        agreement riding on it, the optimizer step), then read the agreement of the step
        before it: the host never waits for this step's values (on a GPU it runs a step
        ahead of the device). Returns that earlier step's agreement (None: no step was in
        flight). A goodput-mode step and a WMLA script's read their own at once: the noise
        scale's statistics decide their learning rate, and a script's step returns host
        numbers anyway."""
        started = time.perf_counter()
        epoch, iteration = self.counters["epoch"], self.counters["iteration"]
        if self.counters.get("begun", 0) <= epoch:  # once per epoch, joiners included
            self.counters["begun"] = epoch + 1
            self._every_rank("on_epoch_begin", epoch)
        stepper, batch = self.stepper, self.batch
        if self.goodput is not None:
            self.goodput.begin(self.counters)
        batches = self._batches_for(epoch, iteration)
        values: torch.Tensor | tuple[Any, Any] | list[float]
        try:
            values, host = stepper.accumulate(batches, batch)
        except BucketFailure as exc:
            # the step before this one completed (its all-reduce was waited for): its
            # record is kept before this generation is given up
            self._settle()
            raise CollectiveFailure(str(exc)) from exc
        if self.goodput is not None:  # read at once, and only once (the record's read too)
            values = values.tolist() if isinstance(values, torch.Tensor) else [
                float(v) for v in values]  # fmt: skip
            if not math.isfinite(values[1]):
                raise UserCodeError(
                    f"the loss is {values[1]} at epoch {epoch}, iteration {iteration}"
                )
            stepper.observe(values)
        stepper.apply(self.counters["step"])
        self._advance()
        taken = InFlight(values, host, self._train_record(), epoch, iteration, started, batch)
        earlier, self._in_flight = self._in_flight, taken
        if self.goodput is not None or self.defn.train_step is not None:
            return self._settle()
        return self._resolve(earlier, started) if earlier is not None else None

    def _batches_for(self, epoch: int, iteration: int) -> Batches:
        """This iteration's micro-batches, and the next iteration's started."""
        size, rank = self.membership.size, self.membership.rank
        if self.inputs.feed is not None:  # DataLoader workers (loader.py)
            return self.inputs.fed(self.counters, self.batch, size, rank)
        if self.goodput is None:
            return self.inputs.batches_for(epoch, iteration, size, rank)
        goodput, start = self.goodput, self.counters["sample"]
        cap = self.spec.max_micro_batch
        return self.inputs.goodput_batches(epoch, start, goodput.batch, size, rank, cap)

    def _settle(self) -> Agreement | None:
        """Read the agreement of the step in flight, if any, and write its record."""
        pending, self._in_flight = self._in_flight, None
        if pending is None:
            return None
        return self._resolve(pending, time.perf_counter())

    def _resolve(self, step: InFlight, until: float) -> Agreement:
        """A step's agreement, read by the host (the only read of the step's values), and
        its record: the global batch's loss and right answers from the all-reduce, its time
        up to ``until`` (the next step's start: in steady state the step's own period)."""
        got = read(step)
        rank0 = self.membership.rank == 0
        accuracy = self.bookkeeping.trained(step.record, (got.correct, got.loss, got.written),
                                            step.batch, until - step.started, rank0)  # fmt: skip
        if rank0:
            self._driver_log("log_train_metrics", got.loss, accuracy, step.record["step"], 0)
        return got.agreement

    def _advance(self) -> None:
        self.counters["iteration"] += 1
        self.counters["step"] += 1
        if self.goodput is not None:
            self.goodput.advance(self.counters)

    def _train_record(self) -> dict[str, Any]:
        m = self.membership
        return self.bookkeeping.train_record(
            self.counters, (m.size, m.gen, m.hosts),
            self.stepper.optimizer.param_groups[0]["lr"], self.total_steps, self.goodput,
        )  # fmt: skip

    def _every_rank(self, name: str, *args: Any) -> None:
        """A WMLA ``Callback`` hook, in every learner (it may change the optimizer)."""
        from callbacks import call_all  # workers/compat, on sys.path once code is loaded

        call_all(self.defn.callbacks, name, *args)

    def _driver_log(self, name: str, *args: Any) -> None:
        """A WMLA ``LoggerCallback`` hook, once per job (rank 0, as WMLA's driver)."""
        if not self.defn.callbacks and self.defn.logger is None:
            return  # a native model's: nothing to call, every step
        from callbacks import call_all

        loggers = [c for c in self.defn.callbacks if hasattr(c, name)]
        if self.defn.logger is not None:
            loggers.append(self.defn.logger)
        call_all(loggers, name, *args)

    # Epoch end ---------------------------------------------------------------------------

    def end_epoch(self) -> None:
        """Evaluate on the test set spread over the members, then checkpoint when due."""
        m = self.membership
        totals = self.stepper.evaluate(*self.inputs.evaluation(m.size, m.rank))
        m.collective("allreduce", totals)
        epoch = self.counters["epoch"]
        self.counters["epoch"] += 1
        self.counters["iteration"] = 0
        if self.goodput is not None:
            self.counters["sample"] = 0
        loss, correct, count = (float(v) for v in totals)
        loss, acc = loss / max(count, 1.0), correct / max(count, 1.0)
        # built by every member (the totals are all-reduced), like the train records
        test = {"type": "test", "epoch": epoch, "step": self.counters["step"],
                "test_loss": loss, "test_accuracy": acc, "time": time.time()}  # fmt: skip
        self.bookkeeping.tested(test, m.rank == 0)
        if m.rank == 0:
            self._driver_log("log_test_metrics", loss, 100.0 * acc, self.counters["step"],
                             m.rank)  # fmt: skip
        self._every_rank("on_epoch_end", epoch)
        if m.rank == 0 and self.counters["epoch"] % max(self.spec.checkpoint_every, 1) == 0:
            self.save_checkpoint()

    def save_checkpoint(self) -> None:
        if self.membership.rank == 0:
            self.bookkeeping.save_checkpoint(self.counters["step"], self._state)

    def finish(self) -> None:
        if self.membership.rank != 0:
            return
        self.save_checkpoint()
        torch.save(self.stepper.model.state_dict(), Path(self.spec.workdir) / "model.pt")
        if self.defn.style == "wmla":  # where WMLA's loggers write val_dict_list.json
            self._driver_log("on_train_end")
        self.bookkeeping.done(self.counters["step"])
