"""One training step of a learner and its collective (docs/architecture.md, "Elastic
training protocol"): forward and backward over the step's micro-batches, the gradient
all-reduce with the step's agreement riding on it, and the optimizer step.

:class:`Stepper` holds what a step changes: the model, its optimizer (and loss scaler),
the gradients' way to the other members (torch's reducer, reducer.py, or the engine's own
buckets, overlap.py) and the rehearsal's gradients until the first step. A learner alone
runs no collective; with peers, rank 0's generation, stop flag and records written
(``Membership.agreement_host``) ride on the all-reduce. The step's values stay on the
device, unread: the host reads them with :func:`read` once the next step is queued
(``Learner.train_step``), so a step does no device-to-host read of its own. A goodput-mode
step also sets its measurement up here and hands the squared norms to ``GoodputMode``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch

from workers.learner.contract import ModelDefinition, UserCodeError
from workers.learner.goodput import GoodputMode
from workers.learner.membership import Membership
from workers.learner.overlap import (
    BucketFailure,
    GradBuckets,
    MicroNorms,
    gloo_or_nccl_allreduce,
    inner_sums,
)
from workers.learner.reducer import TorchReducer, UnusedParameters
from workers.learner.spec import JobSpec

log = logging.getLogger("edt.learner")
AGREED = 5  # values the all-reduce carries after the gradients (Stepper.agreement)
LOCAL_SQR = AGREED  # goodput mode: then the sum of the ranks' local squared norms

Batches = list[tuple[Any, Any]]
_NO_AUTOCAST: AbstractContextManager[Any] = nullcontext()  # fp32 (reusable: it holds nothing)
HostPart = tuple[float, float, float]  # rank 0's generation, stop flag, records written


@dataclass
class Agreement:
    gen: int
    stop: bool


@dataclass
class InFlight:
    """A step taken whose agreement the host has not read yet (Learner.train_step)."""

    # on the device: right answers, loss (+ rank 0's part, all-reduced); alone on a CPU,
    # the two as they came (a stack would cost more than the two reads); read already
    # (goodput mode, which reads its step at once), a list of floats
    values: torch.Tensor | tuple[Any, Any] | list[float]
    host: HostPart | None  # alone: generation, stop, records written
    record: dict[str, Any]  # its train record but for loss, accuracy and rate
    epoch: int
    iteration: int
    started: float  # perf_counter at its start
    batch: int  # its global batch


@dataclass
class Read:
    """A step's agreement as the host read it (:func:`read`)."""

    correct: float  # the global batch's right answers (nan: not a classifier)
    loss: float  # the global batch's loss
    agreement: Agreement
    written: int  # the last train step Redis took from rank 0


def read(step: InFlight) -> Read:
    """A step's agreement, read by the host: the only read of the step's values."""
    if isinstance(step.values, tuple):
        correct, loss = (float(v) for v in step.values)
        values: list[float] = []
    else:
        values = step.values if isinstance(step.values, list) else step.values.tolist()
        correct, loss = values[0], values[1]
    gen, stop, written = step.host if step.host is not None else values[2:AGREED]
    if not math.isfinite(loss):
        raise UserCodeError(f"the loss is {loss} at epoch {step.epoch}, "
                            f"iteration {step.iteration}")  # fmt: skip
    return Read(correct, loss, Agreement(gen=int(gen), stop=bool(stop > 0)), int(written))


class Stepper:
    """The model, its optimizer and the gradients' all-reduce (see the module). Built from
    the definition after the job's seed is set: its model is built here."""

    def __init__(
        self,
        spec: JobSpec,
        defn: ModelDefinition,
        device: torch.device,
        membership: Membership,
        host: Callable[[], HostPart],
    ) -> None:
        self.spec, self.defn, self.device = spec, defn, device
        self.membership = membership  # read only: the group's size and process group
        self.host = host  # rank 0's part of the agreement, when the step arms it
        self.precision = spec.precision
        self.model = defn.build_model().to(device)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        lr = None if defn.style == "wmla" and "lr" in spec.script_decides else spec.lr
        self.optimizer = defn.build_optimizer(self.params, lr)  # type: ignore[arg-type]
        self.scaler = self._scaler()
        # The gradient all-reduce with peers: torch's reducer for a native model's
        # fixed-batch step whose every parameter takes part (reducer.py); else the
        # engine's own buckets (overlap.py: goodput mode, WMLA scripts, unused parameters)
        self.reducer: TorchReducer | None = None
        self.buckets: GradBuckets | None = None
        self.held: list[torch.Tensor] = []  # the rehearsal's gradients, until the first step
        self.goodput: GoodputMode | None = None  # goodput mode (measure)
        self.micro: MicroNorms | None = None  # goodput mode, one learner
        # goodput mode, one learner, one micro-batch a step: the measuring step's gradients
        # (unscaled, of the parameters that had one), for the step after (``observe``)
        self.kept: tuple[int, int, list[int], tuple[list[torch.Tensor], list[int]]] | None = None
        self.copy_kept = False  # the optimizer writes into gradients: keep copies (_keep)

    def measure(self, goodput: GoodputMode) -> None:
        """Goodput mode: measure the noise scale's squared norms for ``goodput`` (the sum of
        the local ones rides on the all-reduce too)."""
        self.goodput = goodput
        self.micro = MicroNorms(self.params)

    def _scaler(self) -> torch.amp.GradScaler | None:
        if self.precision != "fp16":
            return None
        if self.device.type != "cuda":
            raise ValueError("fp16 training needs a CUDA device; on CPU choose bf16")
        return torch.amp.GradScaler("cuda")

    def autocast(self) -> AbstractContextManager[Any]:
        if self.precision == "fp32":
            return _NO_AUTOCAST
        dtype = torch.bfloat16 if self.precision == "bf16" else torch.float16
        return torch.autocast(self.device.type, dtype=dtype)

    def rehearse(self, x: Any, y: Any) -> None:
        """The first step rehearsed on ``x``, ``y`` (:func:`rehearse`), then the gradients'
        way to the other members: torch's reducer where every parameter took part."""
        held = rehearse(self.model, self.params, self.defn.loss_fn, x, y, self.autocast)
        if self.goodput is None and self.params and len(held) == len(self.params):
            # every parameter takes part (as the rehearsal saw): torch's reducer
            self.reducer = TorchReducer(self.params, AGREED, self.spec.bucket_bytes)
        # (on a GPU the caching allocator keeps freed memory for the step anyway)
        self.held = held if self.device.type == "cpu" else []

    def formed(self) -> None:
        """A generation formed: its members all-reduce alike (see ``own_buckets``); a lone
        learner's kept gradient pairs with nothing in another generation, and no hook
        of a step that failed while it measured stays on."""
        self.kept = None
        if self.micro is not None:
            self.micro.on = False
        if self.reducer is not None and self.membership.jobs.unused_parameters():
            self.own_buckets()  # a parameter went without a gradient in an earlier step
        if self.buckets is not None:
            self.buckets.hooked(not self.alone())  # alone, backward runs no hook of ours

    def let_go(self) -> None:
        """The generation failed: nothing of this learner's step holds its group any more
        (the failed step's launches, works and error), so that the group can close."""
        self.kept = None
        if self.reducer is not None:
            if self.reducer.armed:  # a step never finished: ready the reducer again
                self.reducer.failed()
            else:
                self.reducer.let_go()
        if self.buckets is not None:
            self.buckets.failed()

    def own_buckets(self) -> GradBuckets:
        """The engine's own buckets, made on first need: torch's reducer, if any, gives
        way to them for the rest of this learner (every member reads the same flag when
        it forms a generation, so a generation's members all use the same)."""
        if self.buckets is None:
            if self.reducer is not None:
                self.reducer.close()
                self.reducer = None
            spec = self.spec
            caps = (spec.bucket_bytes,) * 2 if spec.bucket_bytes > 0 else ()
            # + right answers, loss, generation, stop, rank 0's last written step (exact as
            # a float32 up to 2**24 steps)
            self.buckets = GradBuckets(self.params, AGREED + (self.goodput is not None), *caps)
            self.buckets.hooked(not self.alone())
        return self.buckets

    def alone(self) -> bool:
        """A native model's step with no peer: no bucket copy and no collective (goodput
        mode's too: its noise scale then comes from the micro-batches and the gradients
        where autograd puts them)."""
        return self.membership.size == 1 and self.defn.train_step is None

    def accumulate(
        self, batches: Batches, batch: int
    ) -> tuple[torch.Tensor | tuple[Any, Any], HostPart | None]:
        """Forward and backward over micro-batches of a global batch of ``batch``; with
        peers, the gradient all-reduce launched in buckets during the last backward (after
        it, for a WMLA script's own step) and waited for. Returns the step's agreement on
        the device, unread: the global batch's right answers (nan: not a classifier) and
        loss, then (all-reduced with peers) rank 0's generation, stop flag and records
        written; alone, those three come from this host (the second value)."""
        if not self.model.training:  # after an evaluation (every module: 0.05 ms a step)
            self.model.train()
        if self.held:  # just before the step's forward and backward need as much (rehearse)
            self.held.clear()
        if self.alone():
            goodput = self.goodput
            if goodput is not None and goodput.measuring and len(batches) > 1:
                return self._accumulate_measured_alone(goodput, batches, batch), self.host()
            values = self._accumulate_alone(batches, batch)
            return values, self.host()
        if self.reducer is not None:
            return self._accumulate_reduced(self.reducer, batches, batch), None
        buckets = self.own_buckets()
        buckets.begin()
        B = batch
        loss_part: Any = 0.0
        correct: Any = 0.0
        launch = gloo_or_nccl_allreduce(self.membership.pg)
        micro = self._measuring(batches, B)
        for k, (x, y) in enumerate(batches):
            n = len(y)
            if self.defn.train_step is not None:
                loss_value, right = self._script_step(x, y, n / B)
                loss_part += loss_value * n / B
                correct += right
                if micro is not None:  # the script's own loss: its gradient is unscaled
                    self._micro_sqr().append((micro.take(), n))
                continue
            with self.autocast():
                out = self.model(x)
                loss = self.defn.loss_fn(out, y)
            loss_part = loss_part + _share(loss.detach(), n, B)
            correct = correct + _right_answers(out.detach(), y)
            if k == len(batches) - 1:
                buckets.arm(launch, self.agreement(correct, loss_part))
            scaled = loss * (n / B)
            if self.scaler is not None:
                scaled = self.scaler.scale(scaled)
            scaled.backward()  # type: ignore[no-untyped-call]
            if micro is not None:  # its mean gradient's: backward's is n/B of it
                self._micro_sqr().append((micro.take() * (B / n) ** 2, n))
        if micro is not None:
            micro.on = False
        if self.defn.train_step is not None or not batches:
            buckets.arm(launch, self.agreement(correct, loss_part))
        buckets.finish()
        return buckets.tail.clone(), None  # the next step's arm writes the tail again

    def _accumulate_alone(self, batches: Batches, batch: int) -> torch.Tensor | tuple[Any, Any]:
        """One learner: forward and backward as a plain loop does them, gradients where
        autograd puts them (no bucket, no copy, no collective); right answers and loss
        summed on the device. On a CPU the two stay apart: stacking them took 6.5 µs a
        step against about 1 µs for reading each (bench/results/step-overhead.md, Notes);
        on a GPU one stack makes one copy to the host."""
        if not batches:
            return torch.zeros(2, device=self.device)
        correct, loss_part = self._forward_backward(batches, batch)
        if self.device.type == "cpu":
            return correct, loss_part
        return torch.stack([_as_value(correct, self.device), _as_value(loss_part, self.device)])

    def _accumulate_measured_alone(
        self, goodput: GoodputMode, batches: Batches, batch: int
    ) -> torch.Tensor:
        """Goodput mode, one learner, a measuring step cut into micro-batches (the job's
        cap): forward and backward as alone (no bucket copy, no collective), each
        micro-batch's own gradient's squared norm measured on the way (``MicroNorms``, as
        its mean gradient's: backward's is n/B of it). Returns right answers and loss on
        the device, unread. The engine's buckets are made (unhooked) all the same, so that
        a resize to more learners does not pay for their memory."""
        self.own_buckets()
        goodput.micro_sqr.clear()
        micro = self.micro
        assert micro is not None
        micro.take()
        micro.on = True

        def measured(n: int) -> None:
            goodput.micro_sqr.append((micro.take() * (batch / n) ** 2, n))

        try:
            correct, loss_part = self._forward_backward(batches, batch, after=measured)
        finally:
            micro.on = False
        return torch.stack([_as_value(correct, self.device), _as_value(loss_part, self.device)])

    def _accumulate_reduced(
        self, reducer: TorchReducer, batches: Batches, batch: int
    ) -> torch.Tensor:
        """With peers, a native model's fixed-batch step: forward and backward as alone,
        the last backward's gradients all-reduced by torch's reducer as they are in, the
        agreement with them (reducer.py). A rank with no sample (a global batch smaller
        than the generation) back-propagates zeros, so that its buckets go too."""
        launch = gloo_or_nccl_allreduce(self.membership.pg)

        def arm(correct: Any, loss_part: Any) -> torch.Tensor:
            return reducer.arm(launch, self.agreement(correct, loss_part))

        try:
            if batches:
                self._forward_backward(batches, batch, arm)
            else:
                self.optimizer.zero_grad(set_to_none=True)
                zero = torch.zeros((), device=self.device)
                carry = arm(zero, zero)
                (torch.stack([p.sum() for p in self.params]).sum() * 0.0 + carry).backward()  # type: ignore[no-untyped-call]
            return reducer.finish()
        except UnusedParameters:
            # read by every member at the next generation
            self.membership.jobs.note_unused_parameters()
            raise
        except BucketFailure:
            raise
        except Exception as exc:
            failure = reducer.error
            reducer.failed()
            if failure is None:  # the model's own error
                raise
            raise BucketFailure(str(failure)) from exc

    def _forward_backward(
        self,
        batches: Batches,
        batch: int,
        arm: Callable[[Any, Any], torch.Tensor] | None = None,
        after: Callable[[int], None] | None = None,
    ) -> tuple[Any, Any]:
        """A native model's forward and backward over the step's micro-batches, gradients
        accumulated in ``.grad``; ``arm`` gets the right answers and loss share so far
        before the last backward and returns what that backward adds to the loss (the
        agreement's carrier, reducer.py), ``after`` each micro-batch's sample count after
        its backward. Returns the step's right answers and loss on the device, unread."""
        self.optimizer.zero_grad(set_to_none=True)
        B = batch
        loss_part: Any = None
        correct: Any = None
        for k, (x, y) in enumerate(batches):
            n = len(y)
            with self.autocast():
                out = self.model(x)
                loss = self.defn.loss_fn(out, y)
            share, right = _share(loss.detach(), n, B), _right_answers(out.detach(), y)
            loss_part = share if loss_part is None else loss_part + share
            correct = right if correct is None else correct + right
            carry = None
            if arm is not None and k == len(batches) - 1:
                carry = arm(correct, loss_part)
            scaled = loss if n == B else loss * (n / B)
            if self.scaler is not None:
                scaled = self.scaler.scale(scaled)
            if carry is not None:  # after the scaler: the agreement is not scaled
                scaled = scaled + carry
            scaled.backward()  # type: ignore[no-untyped-call]
            if after is not None:
                after(n)
        return correct, loss_part

    def agreement(self, correct: Any, loss_part: Any) -> torch.Tensor:
        """What rides on the gradient all-reduce (docs/architecture.md, "Elastic training
        protocol"): this rank's right answers and loss share (device values, or a script's
        host numbers), rank 0's generation, stop flag and records written (``host``), and
        in goodput mode a place for the local squared norm (written as the last bucket
        goes, overlap.py)."""
        host = [*self.host(), *([0.0] if self.goodput is not None else [])]
        if not isinstance(correct, torch.Tensor) and not isinstance(loss_part, torch.Tensor):
            return torch.tensor([float(correct), float(loss_part), *host], dtype=torch.float64)
        mine = torch.stack([_as_value(correct, self.device), _as_value(loss_part, self.device)])
        rest = torch.tensor(host, dtype=mine.dtype)
        if self.device.type != "cpu":
            rest = rest.pin_memory().to(self.device, non_blocking=True)
        return torch.cat([mine, rest])

    def _micro_sqr(self) -> list[tuple[float, int]]:
        assert self.goodput is not None
        return self.goodput.micro_sqr

    def _measuring(self, batches: Batches, batch: int) -> MicroNorms | None:
        """Goodput mode: set this step's measurement up (off: nothing, None). With peers,
        the buckets sum this rank's gradient's squared norm, as its local batch's mean
        gradient's; alone, the micro-batches' own are summed (returned)."""
        if self.goodput is None:
            return None
        self.goodput.micro_sqr.clear()
        if not self.goodput.measuring:
            if self.buckets is not None:
                self.buckets.measure_at = None
            return None
        if self.membership.size > 1:
            local = sum(len(y) for _, y in batches)
            buckets = self.own_buckets()
            buckets.measure_at = LOCAL_SQR
            buckets.local_weight = (batch / local) ** 2 if local else 0.0
            return None
        self.own_buckets().measure_at = None
        assert self.micro is not None
        self.micro.take()
        self.micro.on = True
        return self.micro

    def observe(self, tail: list[float]) -> None:
        """Goodput mode: this step's squared norms (the all-reduced ``tail`` of its
        agreement, read) into the noise scale; alone, from its micro-batches, else from the
        measuring step's gradient and the next one's (goodput.py)."""
        goodput = self.goodput
        assert goodput is not None
        if self.membership.size == 1:
            self._observe_alone(goodput)
            return
        self.kept = None
        if not goodput.measuring:
            return
        unscale = self.scaler.get_scale() ** -2 if self.scaler is not None else 1.0
        big_sqr = self.own_buckets().sqnorm()
        goodput.observe(self.membership.size, tail[LOCAL_SQR], big_sqr, unscale)

    def _observe_alone(self, goodput: GoodputMode) -> None:
        """One learner, its gradients in ``.grad`` (a script's too): a measuring step cut into
        micro-batches measures from them; one of a single micro-batch keeps its gradient
        (``_keep``), which the next step pairs with its own, at the same batch."""
        if not goodput.measuring and not goodput.pairing:
            return
        scale = self.scaler.get_scale() if self.scaler is not None else 1.0
        held = [i for i, p in enumerate(self.params) if p.grad is not None]
        grads = [g for p in self.params if (g := p.grad) is not None]
        grads = [g.to_dense() if g.is_sparse else g for g in grads]
        if goodput.measuring:
            self.kept = None
            if len(goodput.micro_sqr) > 1:
                goodput.observe(1, math.nan, inner_sums((grads, grads))[0], scale**-2)
            elif grads:
                self.kept = (goodput.step, goodput.batch, held, self._keep(grads, scale))
            return
        kept, self.kept = self.kept, None
        if kept is None or kept[:3] != (goodput.step - 1, goodput.batch, held):
            return  # no measuring step just before, at this batch, with these gradients
        before, versions = kept[3]
        if versions and versions != [g._version for g in before]:
            # something wrote into the gradients kept (an optimizer's step, a zero_grad
            # that does not free them): copy them from now on
            log.info("the optimizer writes into the gradients: goodput mode copies the "
                     "measuring step's from now on")  # fmt: skip
            self.copy_kept = True
            return
        kept_sqr, sqr, cross = inner_sums((before, before), (grads, grads), (before, grads))
        sqr, cross = sqr / scale**2, cross / scale
        # |(a + b) / 2|² from the three products: no sum made
        goodput.observe_pair(kept_sqr, sqr, (kept_sqr + sqr + 2.0 * cross) / 4.0)

    def _keep(
        self, grads: list[torch.Tensor], scale: float
    ) -> tuple[list[torch.Tensor], list[int]]:
        """The measuring step's gradients for the next step, unscaled, and their versions
        (empty: a copy). Under a step of torch's own optimizers (``_frees_gradients``)
        they are kept as they are, no copy made: the next step frees them
        (``zero_grad(set_to_none=True)``) and the optimizer reads them without writing
        into them; their versions show a write all the same (a hook's, say). Else they
        are copied: a hand-written optimizer may write into them (in place through
        ``.data`` too, which no version counts), a loss scaler unscales them in place, a
        script's are views of the buckets, which the next step fills."""
        if self.copy_kept or self.scaler is not None or not self._frees_gradients():
            return list(torch._foreach_mul(grads, 1.0 / scale)), []
        return grads, [g._version for g in grads]

    def _frees_gradients(self) -> bool:
        """A native model's step whose optimizer's ``step`` is torch's own (torch.optim's,
        not a subclass's): such gradients are the step's alone until the next one frees
        them."""
        step = getattr(type(self.optimizer), "step", None)
        module = getattr(step, "__module__", "") or ""
        return self.defn.train_step is None and module.startswith("torch.optim.")

    def _script_step(self, x: Any, y: Any, share: float) -> tuple[float, float]:
        """A WMLA script's ``fn_step_train`` on one micro-batch: it clears the gradients,
        runs forward and backward and returns (accuracy %, loss); its gradients are scaled
        to this micro-batch's share of the global batch and added to those so far."""
        kept = [p.grad for p in self.params]
        for p in self.params:
            p.grad = None
        acc, loss = self.defn.train_step(self.defn.fabric, (x, y), _accuracy, None, {})  # type: ignore[misc]
        for p, before in zip(self.params, kept, strict=True):
            if p.grad is not None:
                p.grad.mul_(share)
            if before is not None:
                p.grad = before if p.grad is None else p.grad.add_(before)
        return float(loss), float(acc) / 100.0 * len(y)

    def apply(self, step: int) -> None:
        """The optimizer step, at the schedule's learning rate for ``step`` (steps taken)
        or, in goodput mode, for the progress so far."""
        if self.goodput is not None:
            self._apply_scaled(self.goodput)
            return
        if self.defn.lr_at is not None:
            lr = self.defn.lr_at(step, self.spec.lr)
            for group in self.optimizer.param_groups:
                group["lr"] = lr
        self._optimizer_step()

    def _optimizer_step(self) -> None:
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()

    def _apply_scaled(self, goodput: GoodputMode) -> None:
        """Goodput mode: the schedule's learning rate at the progress so far (in base-batch
        steps), times the gain of this batch for this step (AdaScale); the step then counts
        its gain in progress."""
        groups = self.optimizer.param_groups
        if self.defn.lr_at is not None:
            lr = self.defn.lr_at(goodput.noise.progress, self.spec.lr)
            for group in groups:
                group["lr"] = lr
        base = [group["lr"] for group in groups]
        gain = goodput.take_gain()
        for group, lr in zip(groups, base, strict=True):
            group["lr"] = lr * gain
        try:
            self._optimizer_step()
        finally:
            for group, lr in zip(groups, base, strict=True):
                group["lr"] = lr
        goodput.stepped()

    @torch.no_grad()
    def evaluate(self, lo: int, hi: int, chunks: Callable[[], Iterator[Any]]) -> torch.Tensor:
        """The loss summed, the right answers and the samples of this rank's share [lo, hi)
        of the test set (``chunks``: its batches on the device), on the device."""
        self.model.eval()
        loss_sum, correct = 0.0, 0.0
        for x, y in chunks():
            out = self.model(x)
            loss_sum += float(self.defn.loss_fn(out, y)) * len(y)
            if out.dim() == 2 and out.shape[1] > 1:
                correct += float((out.argmax(dim=1) == y).sum())
        if self.defn.test_step is not None and hi > lo:
            # A WMLA script's fn_test(model, test_iter, fn_args): its mean loss over this
            # learner's share of the test set (the accuracy is counted above)
            loss_sum = float(self.defn.test_step(self.defn.fabric, chunks(), {})) * (hi - lo)
        return torch.tensor([loss_sum, correct, float(hi - lo)], device=self.device)

    def state(self) -> dict[str, Any]:
        """The model's and optimizer's state."""
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict()}

    def load(self, state: dict[str, Any], model: bool) -> None:
        """The optimizer's state (and the model's where ``model``) and the scaler's, where
        it has one and ``state`` holds one."""
        if model:
            self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scaler is not None and "scaler" in state:
            self.scaler.load_state_dict(state["scaler"])


def rehearse(
    model: torch.nn.Module,
    params: Sequence[torch.Tensor],
    loss_fn: Any,
    x: Any,
    y: Any,
    autocast: Any = nullcontext,
) -> list[torch.Tensor]:
    """One forward and backward before READY, so that a learner's first step pays no
    first-use costs (memory for the gradients and activations, lazy kernels and their
    workspaces; on a GPU, cuBLAS and the caching allocator) while the others wait for it at
    a resize: the 1 GB model's first step at a new size took 1.7 s against 1.1 s for the
    steps after it (bench/results/engine.md, section 9). In eval mode, with the RNG put
    back: the model's state is as it was (batch norm's running statistics untouched, no
    dropout mask drawn), and no parameter keeps a gradient.

    Returns the gradients it made, taken off the parameters, for a learner on CPU to hold
    until its first step starts (``Stepper.accumulate`` drops them there), so that the
    step's own gradients get memory this process has just given back. A virtual machine
    whose kernel reports free memory to its host (virtio-balloon's free page reporting, as
    this one's does) gives huge pages back to the host in a pass that takes every free
    block of 8 MiB or more, about 2 s after such a block was freed: huge pages free for a
    second or more may be gone. Filling 0.5 GB of those again took 0.47-0.99 s here
    against 0.06 s for huge pages freed just before (bench/results/engine.md, section 15),
    and a joiner's first step paid that while every member waited. Elsewhere holding them
    costs nothing: the step needs that memory anyway.

    Only a rehearsal: a model that fails it (one whose output in eval mode its loss does
    not take, say) is left to its first step, which raises whatever is wrong with it;
    nothing is returned then."""
    was_training = model.training
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    grads: list[torch.Tensor] = []
    with torch.random.fork_rng(devices=devices):
        model.eval()
        try:
            with autocast():
                loss = loss_fn(model(x), y)
            loss.backward()
            grads = [p.grad for p in params if p.grad is not None]
        except Exception as exc:
            log.info("no rehearsal of the first step (%s: %s)", type(exc).__name__, exc)
        finally:
            model.train(was_training)
            for p in params:
                p.grad = None
    return grads


def _right_answers(out: torch.Tensor, y: Any) -> torch.Tensor | float:
    """How many samples a classifier's output gets right, on the device, unread (nan for
    other outputs): a float32 count (exact to 2**24), so that stacking it with the loss
    launches no conversion."""
    if out.dim() == 2 and out.shape[1] > 1 and isinstance(y, torch.Tensor) and y.dim() == 1:
        return (out.argmax(dim=1) == y).sum(dtype=torch.float32)
    return math.nan


def _share(loss: torch.Tensor, n: int, batch: int) -> torch.Tensor:
    """A micro-batch's mean loss as its share of the global batch's."""
    return loss if n == batch else loss * (n / batch)


def _as_value(value: torch.Tensor | float, device: torch.device) -> torch.Tensor:
    """A float32 scalar on ``device`` (a tensor stays where it is, unread)."""
    if isinstance(value, torch.Tensor):
        return value.to(torch.float32)
    return torch.tensor(value, dtype=torch.float32, device=device)


def _correct(out: torch.Tensor, y: Any) -> float:
    """How many samples a classifier's output gets right, read (nan for other outputs)."""
    return float(_right_answers(out, y))


def _accuracy(out: torch.Tensor, y: Any) -> float:
    """WMLA's ``eva`` for fn_step_train: a batch's accuracy in percent."""
    return 100.0 * _correct(out.detach(), y) / max(len(y), 1)
