"""A learner's large tensors go on transparent huge pages (workers/learner/allocator.py):
a step's gradients, allocated anew each step, fault in 2 MiB at a time, not 4 KiB."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from workers.learner import host
from workers.learner.allocator import HUGE_PAGES

PROJECT = Path(__file__).resolve().parent.parent
THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")
PAGES = 64 * 1024 * 1024 * 4 // 4096  # 4 KiB pages in the 256 MB tensor below

# Three "steps" that each allocate a 256 MB tensor, fill it and free it; their page faults.
STEPS = """
import json, resource, torch
torch.set_num_threads(1)  # as a learner does (one forked from a server: no OpenMP after fork)
def step():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t = torch.empty(64 * 1024 * 1024)
    t.fill_(1.0)
    del t
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
OUT.write_text(json.dumps([step() for _ in range(3)]))
"""


def _huge_pages_on() -> bool:
    return THP.exists() and "[never]" not in THP.read_text()


def _faults(env: dict[str, str], out: Path) -> list[int]:
    code = f"from pathlib import Path\nOUT = Path({str(out)!r})\n{STEPS}"
    subprocess.run([sys.executable, "-c", code], cwd=PROJECT, env=env, check=True)
    return json.loads(out.read_text())  # type: ignore[no-any-return]


def test_a_learner_is_started_asking_for_huge_pages_unless_the_admin_said_no() -> None:
    assert host.learner_env("redis://x", {})[HUGE_PAGES] == "1"
    assert host.learner_env("redis://x", {HUGE_PAGES: "0"})[HUGE_PAGES] == "0"


def test_a_learners_steps_fault_their_large_tensors_in_far_fewer_pages(tmp_path: Path) -> None:
    base = {k: v for k, v in os.environ.items() if k != HUGE_PAGES}
    plain = _faults({**base, HUGE_PAGES: "0"}, tmp_path / "plain.json")
    learner = _faults(host.learner_env("redis://x", base), tmp_path / "learner.json")
    assert all(f >= PAGES for f in plain)  # every step maps its tensor anew, 4 KiB pages
    if _huge_pages_on():
        assert all(f < PAGES / 20 for f in learner), (plain, learner)
    else:  # the kernel's huge pages are off: nothing changes, and nothing breaks
        assert all(f >= PAGES for f in learner)


def test_a_learner_forked_from_the_fork_server_allocates_on_huge_pages(tmp_path: Path) -> None:
    out = tmp_path / "forked.json"
    host.prewarm()
    code = f"from pathlib import Path\nOUT = Path({str(out)!r})\n{STEPS}"
    proc = host._forkserver.Process(target=exec, args=(code, {}))
    proc.start()
    proc.join(120)
    proc.kill()
    assert proc.exitcode == 0
    forked = json.loads(out.read_text())
    if _huge_pages_on():
        assert all(f < PAGES / 20 for f in forked), forked
    else:
        assert all(f >= PAGES for f in forked)
