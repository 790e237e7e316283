"""A learner's large tensors on transparent huge pages.

Every training step allocates the same large tensors again (each parameter's gradient, the
activations) and frees them. Blocks of more than 32 MiB come from a fresh ``mmap`` and go
back to the kernel when freed, so each step faults all of that memory in again, a 4 KiB
page at a time. With ``THP_MEM_ALLOC_ENABLE=1``, PyTorch's CPU allocator asks the kernel
for transparent huge pages (``madvise``) on every block of 2 MiB or more: the block's
2 MiB-aligned parts then fault in 2 MiB at a time (a 256 MB tensor: 640 faults instead of
65,537; a block of 2-4 MiB may hold no aligned 2 MiB and gain nothing). Memory is still
given back as it is freed. Measured in interleaved pairs (``bench/bench_allocator.py``,
bench/results/allocator.md and engine.md section 14): a fresh process's step on the 1 GB
MLP of ``bench/bench_engine.py`` took 0.31 s instead of 0.49 s (ratio 1.51 / 1.59 / 1.64
over 6 pairs), on the 21 M-parameter MLP 0.100 s instead of 0.131 s (1.29 / 1.31 / 1.39);
the engine on the latter, at 2 and 4 workers, 1.18 and 1.16 times the samples/s (medians
of 6 pairs, pairs from 0.95 to 1.51) at 15-16 % less CPU a step.

The first huge pages of a process cost more here: the 1 GB MLP's first step took 2.28 s
instead of 0.63 s (medians). This machine is a virtual machine whose kernel reports free
memory to its host (virtio-balloon's free page reporting), and huge pages free for a
second or more come back from the host slowly: 0.5 GB of them filled in 0.47-0.99 s,
against 0.06 s for huge pages freed just before and 0.19-0.25 s for 4 KiB pages either way
(the kernel compacted nothing: ``compact_stall`` stayed 0; bench/results/engine.md,
section 15). Steps usually reuse the pages the step before them freed. A learner's
rehearsal before READY (``step.rehearse``) pays the first use while the others train,
and the learner holds the rehearsal's gradients until its first step, whose gradients then
get their pages; a WMLA script with its own step, which is not rehearsed, pays it in its
first step. glibc's own knobs (keeping freed blocks on the heap) were tried first:
PyTorch's aligned requests never refit the freed blocks, and the heap grew by a step's
tensors on each step.

PyTorch reads the variable once, at a process's first allocation: it must be in the
environment a learner (or the fork server it comes from) starts with, which is the slot
worker's (``workers/launcher.slot_env``). Where the kernel's transparent huge pages are off
(``/sys/kernel/mm/transparent_hugepage/enabled`` says ``never``) nothing changes; an
administrator's 0 (in the slot workers' environment) is kept.
"""

from __future__ import annotations

from collections.abc import MutableMapping

HUGE_PAGES = "THP_MEM_ALLOC_ENABLE"


def huge_pages(env: MutableMapping[str, str]) -> None:
    """Ask for huge pages in ``env`` (a process's environment to be), unless it already
    says whether to."""
    env.setdefault(HUGE_PAGES, "1")
