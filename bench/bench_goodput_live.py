"""Goodput mode on a live EDT: time to the fixed-batch run's accuracy, growing from 1 to 4 slots.

    python bench/bench_goodput_live.py [--pairs N] [--epochs E]

A live EDT of its own (web, scheduler with ``--policy goodput``, metrics consumer, 4 CPU
slots on one worker host, a Redis with a password), the example MLP (``examples/mlp.py``)
on the synthetic CIFAR-10 the demo dataset is made of, faded under noise (``SIGNAL``) so
that its accuracy climbs for the whole run. Each run, a blocker (the paced MLP,
sleeping in its forward pass, priority 10000, 3 slots) holds 3 of the 4 slots; the measured
job is submitted (priority 1000: it gets the fourth); once it has finished ``GROW_AFTER``
epochs (its evaluations: the same point of training in either mode, on a machine of any
speed) the blocker is stopped and the measured job may grow to 4 slots. Each
pair, in turn (interleaved, the order alternating):

- **fixed batch** (the baseline): ``--batch-size 64``, E epochs; its final test accuracy
  ``A`` and its wall time ``T`` (submit to its last evaluation);
- **goodput mode**: ``--batch-size 64 --batch-range 64-1024``, the same learning rate, and
  ``GOODPUT_EPOCHS`` times the epochs as its budget (at a larger batch an epoch is worth
  fewer base-batch steps: the same epochs end below the fixed run's accuracy); the
  scheduler picks its batch with its slots (docs/architecture.md, "Goodput mode"); its time
  ``T'``, from its submit to its first evaluation at ``A - 1`` point or better (then it is
  stopped). A run that never gets there counts its whole run and is marked.

The goal: ``T' / T_A <= 1.0`` (median of the pairs; ``T_A`` the fixed run's time to its
first evaluation at ``A - 1`` point), and no goodput run shrinks and then
grows again in its first minute (an unsettled fit); the earlier ``<= 0.8`` is reported too.
Writes bench/results/goodput-live.md, with the load average before and after (the machine
is shared).
"""

from __future__ import annotations

import argparse
import itertools
import os
import pickle
import statistics
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import numpy as np

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "edtweb.settings")

from live import Slots, running_edt, spread, wait  # noqa: E402  (bench/ is this script's directory)

from protocol.jobstore import JobStore  # noqa: E402
from tests.harness.processes import PROJECT_DIR  # noqa: E402
from tests.harness.stack import LiveEdt  # noqa: E402
from workers.learner.datasets import write_cifar10  # noqa: E402

RESULTS = PROJECT / "bench" / "results" / "goodput-live.md"
MLP = PROJECT_DIR / "examples" / "mlp.py"
PACED = PROJECT_DIR / "tests" / "models" / "paced_mlp.py"
SLOTS = 4
BLOCKER_SLOTS = 3
# Epochs trained on one slot before the blocker leaves (the target is reached after about
# 9): counted in epochs, not seconds, so that every run grows at the same point of its
# training (with 10 s, a fast machine's runs reached the target before the blocker left).
GROW_AFTER = 2
TRAIN, TEST = 16384, 1024
# The demo data are easy: the MLP is at 100 % within seconds, and a fixed run then trains
# on with nothing left to learn (the results before 2026-11-29). Here each image is mostly
# noise (SIGNAL of the demo's image, the rest uniform noise): the gradient is noisy (a
# noise scale near 170 at batch 64) and the test accuracy climbs for about 10 epochs, from
# 23 % to the 86-87 % the noise allows.
SIGNAL = 0.15
LR = 0.001
BASE, RANGE = 64, "64-1024"
TOLERANCE = 0.01  # one point of test accuracy
GOODPUT_EPOCHS = 3  # the goodput run's budget of epochs, per epoch of the fixed run
USER = "carol"


class Bench(Slots):
    def __init__(self, live: LiveEdt, url: str, epochs: int) -> None:
        super().__init__(url)
        self.live, self.epochs = live, epochs

    def records(self, job_id: int, kind: str) -> list[dict[str, Any]]:
        return [r for _, r in JobStore(self.client, str(job_id)).read_metrics()
                if r.get("type") == kind and not r.get("replay")]  # fmt: skip

    def ended(self, job_id: int) -> bool:
        """Its learners wrote their last record (training over)."""
        return JobStore(self.client, str(job_id)).progress().ended

    def submit(self, *args: str) -> int:
        job = self.live.json(USER, "submit", "--dataset", "shapes", *args, timeout=120)
        return int(job["id"])

    def stop(self, job_id: int) -> None:
        done = self.live.edt(USER, "stop", str(job_id), timeout=120)
        assert done.returncode == 0, done.stderr

    def run(self, goodput: float | None) -> dict[str, Any]:
        """One run; ``goodput``: None for the fixed-batch run, else the accuracy to reach."""
        blocker = self.submit("--model", "paced", "--name", "blocker", "--priority", "10000",
                              "--max-workers", str(BLOCKER_SLOTS), "--epochs", "5000")  # fmt: skip
        wait(lambda: self.held(blocker) == BLOCKER_SLOTS, 300, "the blocker on its slots")
        extra = ["--batch-range", RANGE] if goodput is not None else []
        started = time.time()
        job = self.submit("--model", "mlp", "--name", "goodput" if extra else "fixed",
                          "--max-workers", str(SLOTS), "--priority", "1000", "--lr", str(LR),
                          "--batch-size", str(BASE), "--epochs",
                          str(self.epochs * (GOODPUT_EPOCHS if extra else 1)), *extra)  # fmt: skip
        wait(lambda: bool(self.records(job, "train")), 300, "the first training step")
        first = float(self.records(job, "train")[0]["time"])
        grow = min(GROW_AFTER, self.epochs)  # a run shorter than that: at its end
        wait(lambda: len(self.records(job, "test")) >= grow or self.ended(job), 300,
             "the time to grow")  # fmt: skip
        self.stop(blocker)
        reached: float | None = None

        def over() -> bool:
            nonlocal reached
            if goodput is not None:
                for r in self.records(job, "test"):
                    if float(r["test_accuracy"]) >= goodput - TOLERANCE:
                        reached = float(r["time"])
                        return True
            return self.ended(job)

        wait(over, 900, "the run's end")
        tests = self.records(job, "test")
        trains = self.records(job, "train")
        if not self.ended(job):
            self.stop(job)
        wait(lambda: not self.held(job) and not self.held(blocker), 300, "the slots free")
        end = reached if reached is not None else float(tests[-1]["time"]) if tests else time.time()
        final = float(tests[-1]["test_accuracy"]) if tests else 0.0
        # The fixed run's own time to its final accuracy less a point (a saturated run's
        # wall time is mostly spent where nothing improves).
        own = next((float(r["time"]) for r in tests
                    if float(r["test_accuracy"]) >= final - TOLERANCE), end)  # fmt: skip
        return {
            "to_target": own - started,
            "seconds": end - started,
            "accuracy": final,
            "reached": reached is not None,
            "batches": sorted({int(r.get("batch", BASE)) for r in trains}),
            "workers": max(int(r["workers"]) for r in trains),
            "sizes": sizes(trains),
            "dip": shrink_then_grow(trains, first + 60.0),
            "epochs": len(tests),
        }


def sizes(trains: list[dict[str, Any]]) -> list[int]:
    """The job's worker counts in the order it trained at them (repeats folded)."""
    out: list[int] = []
    for r in sorted(trains, key=lambda r: float(r["time"])):
        if not out or out[-1] != int(r["workers"]):
            out.append(int(r["workers"]))
    return out


def shrink_then_grow(trains: list[dict[str, Any]], until: float) -> bool:
    """Whether the job shrank and then grew again before ``until`` (its first minute)."""
    early = sizes([r for r in trains if float(r["time"]) <= until])
    return any(b < a and any(c > b for c in early[i + 2 :])
               for i, (a, b) in enumerate(itertools.pairwise(early)))  # fmt: skip


def faint_archive(folder: Path, train: int, test: int) -> Path:
    """The demo dataset's images blended with uniform noise (``SIGNAL`` of the image), packed
    as a user uploads it."""
    source = write_cifar10(folder / "src", train=train, test=test)
    rng = np.random.default_rng(1)
    for path in source.glob("*_batch*"):
        with path.open("rb") as f:
            batch = pickle.load(f)
        image = batch[b"data"].astype(np.float32)
        noise = rng.random(image.shape, dtype=np.float32) * 255
        batch[b"data"] = (SIGNAL * image + (1 - SIGNAL) * noise + 0.5).astype(np.uint8)
        with path.open("wb") as f:
            pickle.dump(batch, f, protocol=2)
    archive = folder / "faint.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(source, arcname="cifar-10-batches-py")
    return archive


def prepare(live: LiveEdt) -> None:
    live.login(USER)
    archive = faint_archive(live.tmp / USER, train=TRAIN, test=TEST)
    live.json(USER, "datasets", "upload", str(archive), "--name", "shapes", timeout=300)
    for path, name in ((MLP, "mlp"), (PACED, "paced")):
        model = live.json(USER, "models", "upload", str(path), "--name", name, timeout=300)
        assert model["status"] == "VALID", model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=40)
    args = parser.parse_args()
    load_before = os.getloadavg()
    rows: list[dict[str, dict[str, Any]]] = []
    with running_edt("edt-goodput-bench-", SLOTS, ["--policy", "goodput"]) as (live, url):
        prepare(live)
        bench = Bench(live, url, args.epochs)
        for i in range(args.pairs):
            if i % 2 == 0:
                fixed = bench.run(None)
                mode = bench.run(fixed["accuracy"])
            else:  # goodput first: its target is the last fixed run's accuracy
                mode = bench.run(rows[-1]["fixed"]["accuracy"])
                fixed = bench.run(None)
            rows.append({"fixed": fixed, "goodput": mode})
            print(f"pair {i + 1}: fixed {fixed}, goodput {mode}", flush=True)
    write(rows, load_before, os.getloadavg(), args.epochs)


def write(rows: list[dict[str, dict[str, Any]]], before: tuple[float, ...],
          after: tuple[float, ...], epochs: int) -> None:  # fmt: skip
    ratios = [r["goodput"]["seconds"] / r["fixed"]["seconds"] for r in rows]
    own = [r["goodput"]["seconds"] / r["fixed"]["to_target"] for r in rows]
    fixed_t = [r["fixed"]["seconds"] for r in rows]
    mode_t = [r["goodput"]["seconds"] for r in rows]
    missed = sum(not r["goodput"]["reached"] for r in rows)
    dips = sum(bool(r["goodput"]["dip"]) for r in rows)
    # Judged on time to the same accuracy: a fixed run's wall time to its last evaluation
    # counts epochs after it has stopped improving (the demo data saturate), which a
    # goodput run, stopped at A - 1 point, never pays.
    median = statistics.median(own)
    lines = [
        "# Goodput mode on a live EDT: time to the fixed-batch run's accuracy",
        "",
        f"`python bench/bench_goodput_live.py --pairs {len(rows)} --epochs {epochs}`: a live "
        f"EDT (scheduler `--policy goodput`), {SLOTS} CPU slots on {os.cpu_count()} cores, "
        f"the example MLP on the synthetic CIFAR-10 ({TRAIN} training, {TEST} test samples) "
        f"faded to {SIGNAL:.0%} of each image under uniform noise, "
        f"learning rate {LR} for batch {BASE}, {epochs} epochs. Each run starts on 1 slot "
        f"beside a blocker on {BLOCKER_SLOTS}, which leaves once the run has trained "
        f"{GROW_AFTER} epochs: the job may grow from 1 to 4 slots. Fixed batch: batch 64, "
        "wall time from submit to its last evaluation, its final test accuracy A. Goodput mode: "
        f"batch range {RANGE}, base 64, at most {GOODPUT_EPOCHS}x the epochs, wall time "
        "from submit to its first evaluation at "
        f"A - {TOLERANCE * 100:.0f} point or better. {len(rows)} interleaved pairs, the order "
        "alternating. Load average (1, 5, 15 min) before: "
        + " / ".join(f"{v:.1f}" for v in before)
        + "; after: "
        + " / ".join(f"{v:.1f}" for v in after)
        + " (the machine is shared).",
        "",
        "| pair | fixed: s (to A - 1 point), A, batches | goodput: s, accuracy, batches, "
        "reached | goodput's worker counts in order | ratio | ratio to fixed's time to A - 1 "
        "point |",
        "|---|---|---|---|---|---|",
    ]
    for i, (r, ratio) in enumerate(zip(rows, ratios, strict=True), start=1):
        f, g = r["fixed"], r["goodput"]
        lines.append(
            f"| {i} | {f['seconds']:.1f} ({f['to_target']:.1f}), {f['accuracy']:.3f}, "
            f"{f['batches']} | {g['seconds']:.1f}, {g['accuracy']:.3f}, {g['batches']}, "
            f"{'yes' if g['reached'] else 'NO'} | {' → '.join(map(str, g['sizes']))}"
            f"{' (shrank then grew in its first minute)' if g['dip'] else ''} | {ratio:.2f} | "
            f"{g['seconds'] / f['to_target']:.2f} |"
        )
    lines += [
        "",
        "| | min / median / max |",
        "|---|---|",
        f"| fixed batch, s | {spread(fixed_t)} |",
        f"| goodput mode, s | {spread(mode_t)} |",
        f"| ratio goodput / fixed | {spread(ratios)} |",
        f"| ratio goodput / fixed's time to A - 1 point | {spread(own)} |",
        "",
        f"Goal (median ratio to fixed's time to A - 1 point <= 1.0, the accuracy reached in "
        f"every pair, no shrink then grow in a goodput run's first minute): "
        f"{'met' if median <= 1.0 and not missed and not dips else 'NOT met'} (median "
        f"{median:.2f}{f', {missed} run(s) never reached it' if missed else ''}"
        f"{f', {dips} run(s) shrank then grew in their first minute' if dips else ''}). "
        f"The stricter earlier goal (median <= 0.80): {'met' if median <= 0.8 else 'not met'}.",
        "",
    ]
    RESULTS.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
