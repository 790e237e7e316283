"""Gradient all-reduce in buckets, launched while backward is still running (as DDP does).

Parameters are grouped into buckets in reverse registration order, roughly the order in
which backward produces their gradients; the first bucket is small (1 MiB) so that
communication starts early, the others are capped at 25 MiB (DDP's defaults). Each
parameter's final gradient is copied into its bucket, and after the step its ``.grad``
is a view into the bucket (DDP's ``gradient_as_bucket_view``). During the last
micro-batch's backward a hook marks each finished gradient; a bucket whose gradients are
all in is launched as an asynchronous all-reduce once every bucket
before it is launched, so every rank issues the same collectives in the same order. A
model whose gradients all fit one bucket has nothing to overlap: it gets no hooks, and its
bucket is filled and launched after backward.

The last bucket carries a few extra values after the gradients (the engine's loss share,
generation and stop flag), so the per-step agreement rides on the gradient collective
itself and costs no collective of its own. Gradients are summed, never averaged: each rank
back-propagated ``loss * (its samples / B)``.

In goodput mode (``measure_at``), each bucket's gradients are summed in squares just
before it is launched, while they are still this rank's own, and the sum, times
``local_weight``, rides in the tail at ``measure_at``, written just before the last bucket
goes: the all-reduce adds every rank's up with the gradients (the gradient noise scale's
small batches, workers/learner/goodput.py). Off, nothing of this runs. A learner alone
measures its micro-batches' own gradients instead (:class:`MicroNorms`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist

FIRST_BUCKET_BYTES = 1 << 20
BUCKET_BYTES = 25 << 20
EXTRA_DTYPES = (torch.float32, torch.float64)


class BucketFailure(Exception):
    """A bucket's all-reduce could not be launched or did not complete."""


class GradBuckets:
    def __init__(
        self,
        params: Sequence[torch.Tensor],
        extras: int,
        first_bytes: int = FIRST_BUCKET_BYTES,
        bucket_bytes: int = BUCKET_BYTES,
    ) -> None:
        self.params = params
        self.extras = extras
        groups: list[list[int]] = []
        size, cap = 0, first_bytes
        for i in reversed(range(len(params))):
            p = params[i]
            nbytes = p.numel() * p.element_size()
            same = bool(groups) and params[groups[-1][0]].dtype == p.dtype
            if groups and same and size + nbytes <= cap:
                groups[-1].append(i)
                size += nbytes
            else:
                if groups:
                    cap = bucket_bytes
                groups.append([i])
                size = nbytes
        last = params[groups[-1][0]] if groups else None
        if last is None or last.dtype not in EXTRA_DTYPES:
            groups.append([])  # the extras travel in a bucket of their own
        self.members = groups
        self.bucket_of: dict[int, int] = {}
        self.buffers: list[torch.Tensor] = []
        self.views: dict[int, torch.Tensor] = {}
        for b, idx in enumerate(groups):
            numel = sum(params[i].numel() for i in idx)
            if b == len(groups) - 1:
                numel += extras
            ref = params[idx[0]] if idx else None
            dtype = ref.dtype if ref is not None else torch.float64
            device = ref.device if ref is not None else (params[0].device if params else "cpu")
            buf = torch.zeros(numel, dtype=dtype, device=device)
            self.buffers.append(buf)
            offset = 0
            for i in idx:
                n = params[i].numel()
                self.views[i] = buf[offset : offset + n].view_as(params[i])
                self.bucket_of[i] = b
                offset += n
        self.tail = self.buffers[-1][-extras:] if extras else self.buffers[-1][:0]
        # written in place through NumPy on CPU (a new tensor and a copy: 0.03 ms a step)
        self._tail_np = self.tail.numpy() if self.tail.device.type == "cpu" else None
        self._pending: list[int] = []
        self._done: set[int] = set()
        self._next = 0
        self._works: list[Any] = []
        self._launch: Callable[[torch.Tensor], Any] | None = None
        self._error: BaseException | None = None
        # Goodput mode: where in the tail this rank's gradient's squared norm goes (times
        # ``local_weight``); None: not measured
        self.measure_at: int | None = None
        self.local_weight = 1.0
        # summed on the buckets' device: no synchronisation inside backward
        self._local_sqr = torch.zeros((), dtype=torch.float64, device=self.buffers[-1].device)
        # With every gradient in one bucket there is nothing to overlap: that bucket can
        # only go once backward is over, so ``finish`` copies the gradients in and
        # launches it, without a Python hook per parameter during backward.
        self._overlap = sum(1 for idx in groups if idx) > 1
        self._hooks: list[Any] = []
        self.hooked(True)

    @property
    def count(self) -> int:
        return len(self.buffers)

    def hooked(self, on: bool) -> None:
        """Hooks on the parameters while the buckets are in use (several buckets: each is
        launched as its gradients are in); off, backward runs no Python per parameter (a
        learner alone, which uses no bucket)."""
        if on and not self._hooks and self._overlap:
            self._hooks = [
                p.register_post_accumulate_grad_hook(self._hook(i))  # type: ignore[no-untyped-call]
                for i, p in enumerate(self.params)
            ]  # fmt: skip
        elif not on:
            self.remove()

    def hooked_now(self) -> bool:
        """Whether backward runs a hook of these buckets' on any parameter."""
        return bool(self._hooks)

    def remove(self) -> None:
        for handle in self._hooks:
            handle.remove()
        self._hooks = []

    def failed(self) -> None:
        """The generation failed: drop the step's launch and works, which hold its group."""
        self._works, self._launch, self._error = [], None, None

    def begin(self) -> None:
        """Start a step with no ``.grad``: backward's first gradient becomes ``.grad`` as
        autograd made it, later micro-batches add to it, and the final sum is copied into
        the bucket once (the hook, or ``finish``), as DDP's Reducer does. Zeroing the buckets
        instead and letting backward add into them costs a write of every gradient byte and
        a read more each step: 0-3.4 % of the wide MLP's forward and backward on CPU in
        three runs (bench/results/engine.md, section 7)."""
        for p in self.params:
            p.grad = None

    def arm(
        self, launch: Callable[[torch.Tensor], Any], extras: list[float] | torch.Tensor
    ) -> None:
        """The next backward is the step's last: launch its buckets with ``launch``; the
        tail gets ``extras`` (a tensor is copied in on the device, never read)."""
        self._pending = [len(idx) for idx in self.members]
        self._done = set()
        self._next = 0
        self._works = []
        self._error = None
        self._launch = launch
        if self.measure_at is not None:
            self._local_sqr.zero_()
        if isinstance(extras, torch.Tensor):
            self.tail.copy_(extras)
        elif self._tail_np is not None:
            self._tail_np[:] = extras
        elif self.extras:
            self.tail.copy_(torch.tensor(extras, dtype=self.tail.dtype))
        self._launch_ready()  # a bucket with nothing but extras is ready at once

    def _hook(self, index: int) -> Callable[[torch.Tensor], None]:
        def ready(param: torch.Tensor) -> None:
            if self._launch is None or index in self._done:
                return
            grad = param.grad
            if grad is None:
                self.views[index].zero_()
            elif grad.data_ptr() != self.views[index].data_ptr():
                self.views[index].copy_(grad)  # the step's gradient, into its bucket
            self._mark(index)

        return ready

    def _mark(self, index: int) -> None:
        self._done.add(index)
        self._pending[self.bucket_of[index]] -= 1
        self._launch_ready()

    def _launch_ready(self) -> None:
        while self._next < len(self.buffers) and self._pending[self._next] == 0:
            if self._error is None and self._launch is not None:
                if self.measure_at is not None:
                    self._measure(self._next)
                try:
                    self._works.append(self._launch(self.buffers[self._next]))
                except Exception as exc:  # raised from finish(), not from inside backward
                    self._error = exc
            self._next += 1

    def _grads(self, b: int) -> torch.Tensor:
        """Bucket ``b``'s gradients (the last one's without the tail)."""
        buf = self.buffers[b]
        return buf[: buf.numel() - self.extras] if b == len(self.buffers) - 1 else buf

    def _measure(self, b: int) -> None:
        """Add bucket ``b``'s squared norm, still this rank's own, to the step's; before the
        last bucket goes, put the sum in the tail."""
        grads = self._grads(b)
        if grads.numel():
            self._local_sqr += squared_norm(grads)
        if b == len(self.buffers) - 1 and self.measure_at is not None:
            self.tail[self.measure_at].copy_(self._local_sqr * self.local_weight)

    def sqnorm(self) -> float:
        """The squared norm of the gradients in the buckets (after ``finish``: the
        all-reduced sum), in float64."""
        grads = [self._grads(b) for b in range(len(self.buffers))]
        return inner_sums((grads, grads))[0]

    def finish(self) -> None:
        """After the last backward: launch what is left (a parameter without a gradient
        counts as zero), wait for every bucket and point each ``.grad`` at its sum."""
        if self._launch is None:
            raise RuntimeError("finish() without arm()")
        into, grads = [], []
        for i, p in enumerate(self.params):
            if i not in self._done:
                if p.grad is None:
                    self.views[i].zero_()
                elif p.grad.data_ptr() != self.views[i].data_ptr():
                    into.append(self.views[i])
                    grads.append(p.grad)
        if into:
            torch._foreach_copy_(into, grads)  # one call, not one copy per parameter
        for i in range(len(self.params)):
            if i not in self._done:
                self._mark(i)
        self._launch = None
        try:
            if self._error is not None:
                raise self._error
            for work in self._works:
                work.wait()
        except Exception as exc:
            raise BucketFailure(str(exc)) from exc
        for i, p in enumerate(self.params):
            p.grad = self.views[i]


def _flat(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` as one dense vector of float32 or float64 (a sparse gradient densified)."""
    tensor = tensor.detach()
    flat = (tensor.to_dense() if tensor.is_sparse else tensor).reshape(-1)
    return flat if flat.dtype in (torch.float32, torch.float64) else flat.float()


def squared_norm(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor``'s squared L2 norm, a float64 scalar on its device, unread: one BLAS dot
    product of it with itself (accumulated in float32, or its own float64; half precision
    taken as float32). ``pow(2).sum(dtype=float64)`` made two full-size temporaries: on the
    example MLP's 3072 x 64 weight, 0.65-1.5 ms against 0.14 ms
    (bench/results/goodput-step.md)."""
    flat = _flat(tensor)
    return torch.dot(flat, flat).to(torch.float64)


def inner_sums(*pairs: tuple[Sequence[torch.Tensor], Sequence[torch.Tensor]]) -> list[float]:
    """For each pair (``a``, ``b``), the sum of the inner products of ``a`` and ``b``
    pairwise (the inner product of two gradients; ``a`` with itself, its squared norm),
    read: one dot product each, their sums in float64, one read for them all."""
    sums = []
    for a, b in pairs:
        dots = [torch.dot(_flat(x), _flat(y)) for x, y in zip(a, b, strict=True)]
        sums.append(torch.stack(dots).to(torch.float64).sum() if dots else None)
    held = [v for v in sums if v is not None]
    values = iter(torch.stack(held).tolist() if held else [])
    return [0.0 if v is None else next(values) for v in sums]


class MicroNorms:
    """Goodput mode with one learner: the squared norm of each micro-batch's own gradient,
    summed by a hook on each parameter as backward makes its gradient, before autograd adds
    it to the micro-batches' before (the small batches of the noise scale when no other
    learner's gradient is there to compare with). Hooked only while ``on``: a hook on a
    parameter costs a Python call in every backward, and most steps measure nothing
    (bench/results/goodput-step.md)."""

    def __init__(self, params: Sequence[torch.Tensor]) -> None:
        device = params[0].device if params else torch.device("cpu")
        self.params = list(params)
        self.total = torch.zeros((), dtype=torch.float64, device=device)
        self.handles: list[Any] = []

    @property
    def on(self) -> bool:
        return bool(self.handles)

    @on.setter
    def on(self, value: bool) -> None:
        if value and not self.handles:
            self.handles = [p.register_hook(self._add) for p in self.params]  # type: ignore[no-untyped-call]
        elif not value:
            for handle in self.handles:
                handle.remove()
            self.handles = []

    def _add(self, grad: torch.Tensor) -> None:
        self.total += squared_norm(grad)

    def take(self) -> float:
        """The squared norm summed since the last take."""
        value = float(self.total)
        self.total.zero_()
        return value


def gloo_or_nccl_allreduce(pg: Any) -> Callable[[torch.Tensor], Any]:
    """An asynchronous SUM all-reduce of one tensor on ``pg``; returns its work handle."""

    def launch(tensor: torch.Tensor) -> Any:
        opts = dist.AllreduceOptions()
        opts.reduceOp = dist.ReduceOp.SUM  # type: ignore[assignment]
        return pg.allreduce([tensor], opts)

    return launch
