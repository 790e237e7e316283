"""A learner's large tensors on transparent huge pages.

Every training step allocates the same large tensors again (each parameter's gradient, the
activations) and frees them. Blocks of more than 32 MiB come from a fresh ``mmap`` and go
back to the kernel when freed, so each step faults all of that memory in again, a 4 KiB
page at a time. With ``THP_MEM_ALLOC_ENABLE=1``, PyTorch's CPU allocator aligns blocks of
2 MiB or more to 2 MiB and asks for transparent huge pages (``madvise``): the same memory
faults in about a hundredth as often (a 256 MB tensor: 640 faults instead of 65,537). On
the 1 GB MLP of ``bench/bench_engine.py`` (0.5 GB of gradients a step, one process) a step
took 0.49-0.78 s without and 0.32-0.36 s with it; the engine on the 21 M-parameter MLP, 2
and 4 workers, trained 1.18 and 1.16 times as fast (bench/results/engine.md, section 14).
Memory is still given back as it is freed. (glibc's own knobs, keeping freed blocks on the
heap, were tried first: PyTorch's aligned requests never refit the freed blocks, and the
heap grew by a step's tensors on each step.)

PyTorch reads the variable once, at a process's first allocation: it must be in the
environment a learner (or the fork server it comes from) starts with. Where the kernel's
transparent huge pages are off (``/sys/kernel/mm/transparent_hugepage/enabled`` says
``never``) nothing changes; an administrator can set the variable to 0 for the slot workers.
"""

from __future__ import annotations

from collections.abc import MutableMapping

HUGE_PAGES = "THP_MEM_ALLOC_ENABLE"


def huge_pages(env: MutableMapping[str, str]) -> MutableMapping[str, str]:
    """Ask for huge pages in ``env`` (a process's environment to be), unless it says."""
    env.setdefault(HUGE_PAGES, "1")
    return env
