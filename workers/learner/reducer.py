"""The gradient all-reduce of a native model's fixed-batch step with peers, by torch's own
C++ reducer (the one inside DistributedDataParallel) rather than a Python hook per
parameter (docs/architecture.md, "Torch's reducer").

The reducer is built once per learner, before READY, on the model's parameters: it
registers its hooks on their gradient accumulators in C++, groups them into buckets in
reverse registration order (DDP's 1 MiB first bucket, then 25 MiB, or the job's
``bucket_bytes``), and after the first step each ``.grad`` is a view into its bucket
(``gradient_as_bucket_view``). Its own process group is a placeholder of one rank that
carries nothing: every bucket goes through a comm hook that all-reduces it (a SUM: each
rank back-propagated ``loss * (its samples / B)``) on the process group of the generation
the learner is in now, so a resize changes one reference and builds nothing, and the
buckets keep their memory and their order across generations.

The step's agreement (right answers, loss, rank 0's generation, stop flag and records
written) rides in the first bucket, as the gradient of a *carrier*: a leaf of zeros, as
many as the agreement's values, that the reducer holds beside the parameters (first, so in
bucket 0). The step's last backward adds ``(carrier * agreement).sum()`` to its loss (its
value unchanged: the carrier is zero; the model's gradients unchanged: the agreement is
detached), so the carrier's gradient is the agreement, summed over the ranks with the
gradients, and no collective of its own is launched (against a small all-reduce of its
own, the engine's step rate at two learners rose by a median 4 %, bench/results/
step-overhead.md).

A parameter that gets no gradient in the step's last backward leaves its bucket unlaunched
and the reducer unfinished; :meth:`finish` says so (``UnusedParameters``), and the learner
goes back to the engine's own buckets for the rest of the job (``Stepper.own_buckets``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import (
    GradBucket,
    ProcessGroup,
    Reducer,
    _compute_bucket_assignment_by_size,
    _register_comm_hook,
)

from workers.learner.overlap import BUCKET_BYTES, FIRST_BUCKET_BYTES, BucketFailure


class UnusedParameters(BucketFailure):
    """A parameter got no gradient in the step: its bucket was never launched."""


class _Kept:
    """A launch that sends nothing: its tensor, as it is, at once."""

    def __init__(self, tensor: torch.Tensor) -> None:
        self.future: torch.futures.Future[list[torch.Tensor]] = torch.futures.Future()
        self.future.set_result([tensor])

    def get_future(self) -> torch.futures.Future[list[torch.Tensor]]:
        return self.future

    def wait(self) -> bool:
        return True


def _kept(tensor: torch.Tensor) -> _Kept:
    return _Kept(tensor)


def _placeholder() -> ProcessGroup:
    """The reducer's own process group: one rank, gloo over loopback. Every bucket goes
    through the comm hook instead; only the rebuild's broadcast of the bucket layout
    (trivial with one rank) runs on it."""
    store = dist.HashStore()  # type: ignore[attr-defined]
    options = dist.ProcessGroupGloo._Options()  # type: ignore[attr-defined]
    options._devices = [dist.ProcessGroupGloo.create_device(hostname="127.0.0.1")]
    gloo = dist.ProcessGroupGloo(store, 0, 1, options)
    group = ProcessGroup(store, 0, 1)
    group._set_default_backend(ProcessGroup.BackendType.GLOO)
    for device in ("cpu", "cuda"):
        group._register_backend(torch.device(device), ProcessGroup.BackendType.GLOO, gloo)
    return group


class TorchReducer:
    def __init__(self, params: Sequence[torch.Tensor], carried: int, bucket_bytes: int = 0) -> None:
        first, rest = (bucket_bytes, bucket_bytes) if bucket_bytes > 0 else (
            FIRST_BUCKET_BYTES, BUCKET_BYTES)  # fmt: skip
        # the agreement's carrier (``carried`` values), beside the parameters' dtype and
        # device: its gradient comes first in backward (arm), and goes in bucket 0
        like = params[0] if params else torch.zeros(())
        self.carrier = torch.zeros(carried, dtype=torch.float32, device=like.device,
                                   requires_grad=True)  # fmt: skip
        # The reducer holds the parameters in reverse (roughly the order their gradients
        # come in), so that its buckets, made in its own order, go out early in backward.
        backward = [self.carrier, *reversed(params)]
        groups, limits = _compute_bucket_assignment_by_size(backward, [first, rest])
        self.members = groups
        # (params, buckets, their limits, group, sparse, cap, find unused, grads as bucket
        # views, names, first cap: positional, as the stubs misspell one name)
        self._reducer = Reducer(
            backward, groups, limits, _placeholder(), [], rest, False, True, {}, first
        )
        # Until its buckets are "rebuilt" the reducer records the order of every gradient
        # of every step (DDP rebuilds them in its second iteration): it would grow for
        # good. Rebuilt now, from the order it holds, it records nothing and keeps the
        # same buckets: made the same way on every learner, whenever it starts.
        self._reducer._push_all_rebuilt_params()
        self._reducer._rebuild_buckets()
        _register_comm_hook(self._reducer, None, self._hook)
        self._launch: Callable[[torch.Tensor], Any] | None = None
        # the first failure of a launch or of an all-reduce in the step (backward raised
        # because of it, not because of the model)
        self.error: BaseException | None = None
        self._touch(params)

    def _touch(self, params: Sequence[torch.Tensor]) -> None:
        """Write every bucket once, now (a backward of zeros through the reducer, nothing
        sent): the reducer makes its buckets without writing them, and the first step with
        peers, in a resize's stall, paid for the first touch of their memory (0.72 s
        against 0.25 s for 1 GB of state, bench/results/engine-resize.md)."""
        if not params:
            return
        carry = self.arm(_kept, torch.zeros_like(self.carrier, requires_grad=False))
        (torch.stack([p.sum() for p in params]).sum() * 0.0 + carry).backward()  # type: ignore[no-untyped-call]
        self.finish()
        for p in params:
            p.grad = None
        self.carrier.grad = None

    @property
    def count(self) -> int:
        return len(self.members)

    def arm(self, launch: Callable[[torch.Tensor], Any], agreement: torch.Tensor) -> torch.Tensor:
        """The next backward is the step's last: its gradients are all-reduced with
        ``launch`` as they are in. Returns what that backward adds to its loss so that
        ``agreement`` rides in the first bucket (the carrier's gradient, see the module)."""
        self._launch = launch
        self.error = None
        self.carrier.grad = None  # its bucket view holds the step before's sum: not added to
        self._reducer.prepare_for_forward()
        self._reducer.prepare_for_backward([])
        return (self.carrier * agreement.detach().to(self.carrier.dtype)).sum()

    def _hook(self, _state: object, bucket: GradBucket) -> torch.futures.Future[torch.Tensor]:
        try:
            if self._launch is None:
                raise RuntimeError("a bucket became ready outside an armed step")
            work = self._launch(bucket.buffer())
        except Exception as exc:
            self.error = self.error or exc
            failed: torch.futures.Future[torch.Tensor] = torch.futures.Future()
            # without its traceback: the reducer keeps the future, and the launch's frame
            # in it would keep the generation's group open (Membership.leave_group)
            failed.set_exception(RuntimeError(str(exc)))  # type: ignore[arg-type]
            return failed
        return work.get_future().then(self._summed)  # type: ignore[no-any-return]

    def _summed(self, fut: torch.futures.Future[list[torch.Tensor]]) -> torch.Tensor:
        try:
            return fut.value()[0]
        except Exception as exc:
            self.error = self.error or exc
            raise

    def failed(self) -> None:
        """The last backward raised (a bucket's all-reduce failed): make the reducer ready
        for the next step; no gradient of this one is used. Its launch and error go too:
        they hold the generation's group (the caller has read the error). Resetting it
        also sets it recording every gradient's order again, for good: its buckets are
        rebuilt at once from the order it holds, as at its start, so that it records
        nothing (their memory is made anew, once)."""
        self.let_go()
        self._reducer._reset_state()
        self._reducer._push_all_rebuilt_params()
        self._reducer._rebuild_buckets()

    def let_go(self) -> None:
        """Drop what the step holds of the generation's group (its launch, works, error)."""
        self._launch = None
        self.error = None

    @property
    def armed(self) -> bool:
        """A step was armed and has not finished (its backward raised, say)."""
        return self._launch is not None

    def finish(self) -> torch.Tensor:
        """After the last backward (which waited for every bucket, in the reducer): the
        summed agreement, on the device, unread (a copy: the next step's sum goes where the
        carrier's gradient is)."""
        try:
            self._reducer._check_reducer_finalized()
        except RuntimeError as exc:
            self.failed()
            raise UnusedParameters(str(exc).split(". ")[0]) from exc
        self._launch = None
        summed = self.carrier.grad
        if summed is None:
            raise BucketFailure("the step's agreement was not reduced")
        return summed.clone()

    def close(self) -> None:
        """Take the reducer's hooks off the parameters (the engine's buckets take over)."""
        self._reducer._remove_autograd_hooks()
