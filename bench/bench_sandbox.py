"""Sandbox benchmark: the start-up time a learner pays for its sandbox (goal: <= 0.2 s).

    python bench/bench_sandbox.py [--pairs N]        (make bench runs it)

A learner forks from its slot's warm fork server (torch imported) and enters the sandbox
before the user's code is imported; when it ends, the slot kills what it left. Measured here
in the same fork server as a slot uses, interleaved pairs:

- **sandboxed**: fork, own session, scrubbed environment, ``sandbox.enter`` with a learner's
  policy (mount namespace, binds, limits, another user), exit; then ``kill_children``;
- **baseline**: the same fork, session and environment, exit; nothing else.

Both children stop where the learner would import the user's code, so the difference is the
sandbox's own cost. Root is needed for the namespace and the user switch (as in production).
Writes bench/results/sandbox.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))
DATA = Path(tempfile.mkdtemp(prefix="edt-bench-sandbox-"))
os.environ["EDT_DATA_DIR"] = str(DATA)  # before the sandbox module reads it

from workers import sandbox  # noqa: E402
from workers.learner import host  # noqa: E402
from workers.learner.datasets import write_cifar10  # noqa: E402


def child(env: dict[str, str], policy: str) -> None:
    """What a learner does before ``main``: session, environment, then (maybe) the sandbox."""
    os.setsid()
    os.environ.clear()
    os.environ.update(env)
    if policy:
        sandbox.enter(sandbox.Policy.loads(policy))
    os._exit(0)


def job_paths() -> host.JobPaths:
    DATA.chmod(0o755)
    data = write_cifar10(DATA / "datasets" / "1" / "data", train=64, test=16)
    code = DATA / "models" / "1" / "code"
    code.mkdir(parents=True)
    (code / "mlp.py").write_text((PROJECT / "examples" / "mlp.py").read_text())
    workdir = DATA / "jobs" / "1"
    workdir.mkdir(parents=True)
    return host.JobPaths(data=data, model=code / "mlp.py", workdir=workdir)


def start_once(env: dict[str, str], policy: str) -> float:
    started = time.perf_counter()
    proc = host._forkserver.Process(target=child, args=(env, policy))
    proc.start()
    proc.join()
    assert proc.exitcode == 0, f"the child failed ({proc.exitcode})"
    if policy:
        server = host.fork_server_pid()
        assert server is not None
        sandbox.kill_children(server)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=15)
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: the sandbox's namespace and user switch need it")
    policy = host.learner_policy(job_paths()).dumps()
    env = host.learner_env("redis://unused", dict(os.environ))
    host.prewarm()
    load_before = os.getloadavg()
    pairs = []
    for i in range(args.pairs + 2):  # the first two warm both paths up
        order = [("base", ""), ("sandbox", policy)]
        if i % 2:
            order.reverse()
        times = {name: start_once(env, p) for name, p in order}
        if i >= 2:
            pairs.append((times["base"], times["sandbox"]))
    shape = sandbox.Policy.loads(policy)
    what = f"{len(shape.read)} read-only binds, {len(shape.write)} writable, "
    what += f"{len(shape.hide)} hidden, user {shape.uid}, namespaces {shape.namespaces}"
    write(pairs, load_before, os.getloadavg(), what)
    shutil.rmtree(DATA, ignore_errors=True)


def write(
    pairs: list[tuple[float, float]],
    before: tuple[float, float, float],
    after: tuple[float, float, float],
    policy: str,
) -> None:
    added = [(s - b) * 1000 for b, s in pairs]
    ratios = [s / b for b, s in pairs]
    base = [b * 1000 for b, _ in pairs]
    boxed = [s * 1000 for _, s in pairs]

    def stats(values: list[float], fmt: str) -> str:
        return " / ".join(fmt.format(v) for v in (min(values), statistics.median(values),
                                                  max(values)))  # fmt: skip

    rows = [
        ("baseline start (ms)", stats(base, "{:.1f}"), ""),
        ("sandboxed start (ms)", stats(boxed, "{:.1f}"), ""),
        ("added per learner (ms)", stats(added, "{:.1f}"), "<= 200"),
        ("ratio sandboxed / baseline", stats(ratios, "{:.2f}"), ""),
    ]
    lines = [
        "# Sandbox: start-up added per learner",
        "",
        f"{len(pairs)} interleaved pairs in one warm fork server (torch imported), on "
        f"{os.cpu_count()} cores; load average {before[0]:.2f} before, {after[0]:.2f} after.",
        f"Policy: {policy}.",
        "",
        "| measure | min / median / max | goal |",
        "|---|---|---|",
        *[f"| {name} | {value} | {goal} |" for name, value, goal in rows],
        "",
    ]
    text = "\n".join(lines)
    print(text)
    (PROJECT / "bench" / "results").mkdir(exist_ok=True)
    (PROJECT / "bench" / "results" / "sandbox.md").write_text(text)


if __name__ == "__main__":
    main()
