"""The Pollux (OSDI'21) artifact's applications and workloads, and how a job progresses.

Inputs (``../shared/traces/pollux-osdi21``, copied from the artifact's ``simulator/``):
``traces/<app>/placements.csv`` (step and sync time per placement and local batch),
``scalability.csv`` (the same per nodes and replicas, for placements over more nodes),
``validation-<batch>.csv`` (per epoch: progress, iterations, gradient statistics at that
global batch) and ``workloads*/workload-N.csv`` (``name,time,application,num_replicas,
batch_size``). This module follows the artifact's conventions (its ``applications.py`` and
``simulator.py``), re-implemented here:

- **Throughput.** A placement is the number of GPUs a job holds on each node it uses; it is
  named by the lexicographically smallest rotation of that tuple. A measured placement
  (every one on at most four nodes is) is interpolated linearly in the local batch. Others
  (five or more nodes) are interpolated from the per-(nodes, replicas) means: the artifact
  uses a Delaunay-based linear interpolation in (nodes, replicas, local batch) for those; we
  interpolate linearly in the local batch, then in GPUs per node at the two measured node
  counts around the placement's, then in the node count (nodes capped at 16, as there).
- **Batch.** A job of global batch B on r replicas computes ``ceil(B/r)`` samples per replica,
  in ``accum + 1`` micro-batches of at most the largest measured local batch (a single
  replica with B above the application's smallest batch always accumulates at least once);
  a step takes ``step + accum·(step - sync)`` seconds.
- **Statistical efficiency.** At batch B in epoch e, with the gradient statistics
  interpolated linearly between the validated batches around B, one step makes
  ``gain = (var + sqr) / (var/scale + sqr)`` units of progress, ``scale = B / B0`` (B0 the
  smallest validated batch).
- **Completion.** Epoch e ends at progress ``min over batches of progress[e - 1]``; the job
  completes when it ends epoch ``max_epochs`` (2 bert, 100 cifar10, 80 deepspeech2,
  90 imagenet, 10 ncf, 50 yolov3), the time rounded to a second as the artifact does.
"""

from __future__ import annotations

import csv
import math
import statistics
from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from scheduler.policies.throughput import ThroughputModel
from scheduler.simulate.engine import GoodputProfile
from scheduler.simulate.speedup import AppFit

# The artifact's per-application settings (``applications.py``).
MAX_EPOCHS = {"bert": 2, "cifar10": 100, "deepspeech2": 80, "imagenet": 90, "ncf": 10, "yolov3": 50}
MAX_LOCAL_BSZ = {"yolov3": 8}
MAX_NODES = 16
OVERLAPS = (1.0, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0)  # the overlaps fit_model tries
NOISE_CAP = 1e9  # a noise scale beyond any batch: every batch as efficient as the smallest

Placement = tuple[int, ...]


def _interp(xs: Sequence[float], ys: Sequence[float], x: float) -> float:
    """Piecewise-linear y(x) over sorted ``xs``, constant beyond either end."""
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1]
    i = bisect_right(xs, x)
    x0, x1 = xs[i - 1], xs[i]
    return ys[i - 1] + (ys[i] - ys[i - 1]) * (x - x0) / (x1 - x0)


def normalise(placement: Iterable[int]) -> Placement:
    """The artifact's name for a placement: zeros dropped, smallest rotation."""
    counts = tuple(n for n in placement if n)
    if not counts:
        return ()
    return min(counts[i:] + counts[:i] for i in range(len(counts)))


def packed(replicas: int, per_node: int = 4) -> Placement:
    """The placement of ``replicas`` GPUs on the fewest nodes: (4, 4, ..., rest)."""
    full, rest = divmod(replicas, per_node)
    return normalise((per_node,) * full + ((rest,) if rest else ()))


@dataclass(frozen=True, slots=True)
class Curve:
    """Step and sync time by local batch, for one placement or (nodes, replicas)."""

    bsz: tuple[float, ...]
    step: tuple[float, ...]
    sync: tuple[float, ...]

    def at(self, local_bsz: float) -> tuple[float, float]:
        return _interp(self.bsz, self.step, local_bsz), _interp(self.bsz, self.sync, local_bsz)


def _curves(rows: Iterable[tuple[object, float, float, float]]) -> dict[object, Curve]:
    """Group (key, bsz, step, sync) rows into a curve per key, averaging repeated bsz."""
    grouped: dict[object, dict[float, list[tuple[float, float]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for key, bsz, step, sync in rows:
        grouped[key][bsz].append((step, sync))
    curves = {}
    for key, by_bsz in grouped.items():
        xs = sorted(by_bsz)
        steps = tuple(sum(s for s, _ in by_bsz[x]) / len(by_bsz[x]) for x in xs)
        syncs = tuple(sum(s for _, s in by_bsz[x]) / len(by_bsz[x]) for x in xs)
        curves[key] = Curve(tuple(xs), steps, syncs)
    return curves


def _read(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


@dataclass(frozen=True, slots=True)
class Validation:
    """One ``validation-<batch>.csv``: per epoch, cumulative progress and gradient stats."""

    batch: int
    progress: tuple[float, ...]
    grad_sqr: tuple[float, ...]
    grad_var: tuple[float, ...]


@dataclass(eq=False)
class Application:
    name: str
    placements: dict[Placement, Curve]
    grid: dict[tuple[int, int], Curve]  # (nodes, replicas) -> mean curve
    validations: list[Validation]  # by batch
    max_epochs: int
    max_local_bsz: float
    min_local_bsz: float
    levels: list[int] = field(init=False)  # node counts in the grid
    by_level: dict[int, list[int]] = field(init=False)  # node count -> replicas measured

    def __post_init__(self) -> None:
        self.levels = sorted({nodes for nodes, _ in self.grid})
        self.by_level = defaultdict(list)
        for nodes, replicas in sorted(self.grid):
            self.by_level[nodes].append(replicas)
        self.batches = [v.batch for v in self.validations]
        # Progress at the end of each epoch: the smallest over the validated batches.
        self.epoch_ends = [
            min(v.progress[e] for v in self.validations) for e in range(self.max_epochs)
        ]
        self._throughput = cache(self._throughput_uncached)
        self._stats = cache(self._stats_uncached)
        self.rate = cache(self._rate_uncached)  # type: ignore[method-assign]
        self.noise_scale = cache(self._noise_scale_uncached)  # type: ignore[method-assign]
        self.model = fit_model(self)

    @property
    def init_batch(self) -> int:
        return self.batches[0]

    @property
    def max_batch(self) -> int:
        return self.batches[-1]

    @classmethod
    def load(cls, directory: Path) -> Application:
        name = directory.name
        if name not in MAX_EPOCHS:
            raise ValueError(f"unknown application {name!r} in {directory}")
        placed = _read(directory / "placements.csv")
        placements = _curves(
            (normalise(int(d) for d in row["placement"]), *_floats(row)) for row in placed
        )
        rows: list[tuple[object, float, float, float]] = []
        for row in placed:
            digits = [int(d) for d in row["placement"]]
            rows.append(((len(digits), sum(digits)), *_floats(row)))
        for row in _read(directory / "scalability.csv"):
            rows.append(((int(row["num_nodes"]), int(row["num_replicas"])), *_floats(row)))
        validations = []
        for path in directory.glob("validation-*.csv"):
            table = _read(path)
            validations.append(
                Validation(
                    int(path.stem.rsplit("-", 1)[1]),
                    tuple(float(r["progress"]) for r in table),
                    tuple(float(r["grad_sqr"]) for r in table),
                    tuple(float(r["grad_var"]) for r in table),
                )
            )
        if not validations:
            raise ValueError(f"no validation-<batch>.csv in {directory}")
        validations.sort(key=lambda v: v.batch)
        local = [float(row["local_bsz"]) for row in placed]
        return cls(
            name,
            placements,  # type: ignore[arg-type]
            _curves(rows),  # type: ignore[arg-type]
            validations,
            MAX_EPOCHS[name],
            MAX_LOCAL_BSZ.get(name, max(local)),
            min(local),
        )

    # Throughput -----------------------------------------------------------------------------

    def throughput(self, placement: Placement, local_bsz: int) -> tuple[float, float]:
        """(step time, sync time) in seconds on ``placement`` (normalised) at a local batch."""
        return self._throughput(placement, local_bsz)

    def _throughput_uncached(self, placement: Placement, local_bsz: int) -> tuple[float, float]:
        measured = self.placements.get(placement)
        if measured is not None:
            return measured.at(local_bsz)
        nodes, replicas = min(len(placement), MAX_NODES), sum(placement)
        low = self.levels[max(0, bisect_right(self.levels, nodes) - 1)]
        high = self.levels[min(len(self.levels) - 1, bisect_left(self.levels, nodes))]
        density = replicas / len(placement)
        step0, sync0 = self._at_level(low, density, local_bsz)
        if high == low:
            return step0, sync0
        step1, sync1 = self._at_level(high, density, local_bsz)
        w = (nodes - low) / (high - low)
        return step0 + w * (step1 - step0), sync0 + w * (sync1 - sync0)

    def _at_level(self, nodes: int, density: float, local_bsz: int) -> tuple[float, float]:
        """Step and sync time at ``nodes`` nodes with ``density`` GPUs each, interpolated
        between the measured replica counts at that node count."""
        replicas = self.by_level[nodes]
        points = [self.grid[(nodes, r)].at(local_bsz) for r in replicas]
        xs = [r / nodes for r in replicas]
        return (
            _interp(xs, [p[0] for p in points], density),
            _interp(xs, [p[1] for p in points], density),
        )

    # Batch and statistical efficiency -------------------------------------------------------

    def split(self, batch: int, replicas: int) -> tuple[int, int]:
        """(micro-batch per replica, accumulation steps) for global ``batch`` on ``replicas``."""
        local = math.ceil(batch / replicas - 1e-8)
        accum = math.ceil(local / self.max_local_bsz - 1e-8) - 1
        if replicas == 1 and batch > self.init_batch:
            accum = max(1, accum)
        atomic = math.ceil(local / (accum + 1) - 1e-8)
        atomic = min(atomic, int(self.max_batch / (replicas * (accum + 1))))
        return atomic, accum

    def gain(self, batch: int, epoch: int) -> float:
        """Progress per step at global ``batch`` during ``epoch``."""
        return self._stats(batch, epoch)

    def _stats_uncached(self, batch: int, epoch: int) -> float:
        sqr, var = self.grad_stats(batch, epoch)
        scale = batch / self.init_batch
        return (var + sqr) / (var / scale + sqr)

    def grad_stats(self, batch: int, epoch: int) -> tuple[float, float]:
        """(grad_sqr, grad_var) at global ``batch`` in ``epoch``, interpolated linearly
        between the validated batches around it."""
        i = bisect_left(self.batches, batch)
        upper = self.validations[min(i, len(self.validations) - 1)]
        lower = upper if upper.batch == batch or i == 0 else self.validations[i - 1]
        if lower is upper:
            return upper.grad_sqr[epoch], upper.grad_var[epoch]
        w = (batch - lower.batch) / (upper.batch - lower.batch)
        sqr = lower.grad_sqr[epoch] + w * (upper.grad_sqr[epoch] - lower.grad_sqr[epoch])
        var = lower.grad_var[epoch] + w * (upper.grad_var[epoch] - lower.grad_var[epoch])
        return sqr, var

    def noise_scale(self, batch: int, epoch: int) -> float:
        """The gradient noise scale (samples) a job at ``batch`` measures in ``epoch``:
        ``init_batch · grad_var / grad_sqr``, so that the artifact's gain per step at batch
        B is B/init_batch times ``E(B) = (gns + init_batch) / (gns + B)``."""
        return self._noise_scale_uncached(batch, epoch)  # replaced by a cached one

    def _noise_scale_uncached(self, batch: int, epoch: int) -> float:
        sqr, var = self.grad_stats(batch, epoch)
        if sqr <= 0:
            return NOISE_CAP
        return min(NOISE_CAP, max(0.0, self.init_batch * var / sqr))

    def rate(self, placement: Placement, batch: int, epoch: int) -> float:
        """Progress per second of a job of global ``batch`` on ``placement`` in ``epoch``."""
        return self._rate_uncached(placement, batch, epoch)  # replaced by a cached one

    def _rate_uncached(self, placement: Placement, batch: int, epoch: int) -> float:
        atomic, accum = self.split(batch, sum(placement))
        step, sync = self.throughput(placement, atomic)
        actual = sum(placement) * atomic * (accum + 1)
        return self.gain(actual, epoch) / (step + accum * (step - sync))

    def alone(self, batch: int, replicas: int) -> float:
        """Seconds a job of ``batch`` takes on ``replicas`` packed GPUs, never paused."""
        where, seconds, done = packed(replicas), 0.0, 0.0
        for epoch, end in enumerate(self.epoch_ends):
            seconds += (end - done) / self.rate(where, batch, epoch)
            done = end
        return seconds

    def max_replicas(self, batch: int) -> int:
        """The most replicas a job of ``batch`` can use: each computes at least the smallest
        measured local batch (the artifact's Optimus bound)."""
        return max(1, int(batch // self.min_local_bsz))


def fit_model(app: Application) -> ThroughputModel:
    """The application's throughput model (:class:`ThroughputModel`), fitted by least
    squares to every measured step (``placements.csv`` and ``scalability.csv``): compute
    time ``step - sync`` on the local batch; then, for each overlap gamma of
    :data:`OVERLAPS`, the all-reduce each step implies, ``(step^gamma -
    compute^gamma)^(1/gamma)``, on ``replicas - 2``, separately for placements on one node
    (two replicas or more) and on several, keeping the gamma whose steps are predicted with
    the least relative squared error (Pollux's model, fitted by a grid over gamma and least
    squares). Negative coefficients are clipped to 0. What a job profiled on every
    placement would know (the engine fits the same model from its own steps)."""
    rows = [
        (len(placement), sum(placement), bsz, step, sync)
        for placement, curve in app.placements.items()
        for bsz, step, sync in zip(curve.bsz, curve.step, curve.sync, strict=True)
    ]
    rows += [
        (nodes, replicas, bsz, step, sync)
        for (nodes, replicas), curve in app.grid.items()
        if nodes > 4  # the grid's smaller counts are the placements' means
        for bsz, step, sync in zip(curve.bsz, curve.step, curve.sync, strict=True)
    ]
    alpha, beta = _least_squares([r[2] for r in rows], [r[3] - r[4] for r in rows])
    alpha, beta = max(alpha, 0.0), max(beta, 0.0)

    def rest(
        chosen: list[tuple[int, int, float, float, float]], gamma: float
    ) -> tuple[float, float, float]:
        """(fixed, per learner, squared error of the step) of the all-reduce fitted, for
        overlap ``gamma``, to the all-reduce each row implies:
        ``(step^gamma - compute^gamma)^(1/gamma)``."""
        xs, ys = [], []
        for _, replicas, bsz, step, _ in chosen:
            compute = alpha + beta * max(bsz, app.min_local_bsz)
            xs.append(float(replicas - 2))
            ys.append(max(step**gamma - compute**gamma, 0.0) ** (1 / gamma))
        if len(set(xs)) < 2:
            fixed, slope = max(sum(ys) / len(ys), 0.0), 0.0
        else:
            fixed, slope = _least_squares(xs, ys)
            fixed, slope = max(fixed, 0.0), max(slope, 0.0)
        error = 0.0
        for (_, _, bsz, step, _), x in zip(chosen, xs, strict=True):
            compute = alpha + beta * max(bsz, app.min_local_bsz)
            sync = fixed + slope * x
            error += ((compute**gamma + sync**gamma) ** (1 / gamma) / step - 1) ** 2
        return fixed, slope, error

    one = [r for r in rows if r[0] == 1 and r[1] >= 2]
    many = [r for r in rows if r[0] >= 2]
    fits = []
    for gamma in OVERLAPS:
        sync_s, sync_slope, e1 = rest(one, gamma)
        net_s, net_slope, e2 = rest(many, gamma)
        fits.append((e1 + e2, gamma, sync_s, sync_slope, net_s, net_slope))
    _, gamma, sync_s, sync_slope, net_s, net_slope = min(fits)
    return ThroughputModel(
        alpha,
        beta,
        sync_s,
        sync_slope,
        net_s,
        net_slope,
        max(1, int(app.min_local_bsz)),
        gamma,
    )


def trace_profiles(apps: dict[str, Application], fits: Sequence[AppFit]) -> list[GoodputProfile]:
    """A goodput profile per application of ``fits``, in their order, for trace jobs (the
    Philly trace has no batch sizes): the application's fitted throughput model, its range
    of validated batches with the learning rate given for the smallest, its micro-batch cap,
    the fit's batch as the user's (clamped into the range), and as a constant noise scale the
    median over its epochs of the one measured at that batch."""
    profiles = []
    for fit in fits:
        app = apps[fit.app]
        batch = min(max(fit.batch, app.init_batch), app.max_batch)
        gns = statistics.median(app.noise_scale(batch, e) for e in range(app.max_epochs))
        profiles.append(
            GoodputProfile(
                app.model,
                gns,
                app.init_batch,
                app.init_batch,
                app.max_batch,
                int(app.max_local_bsz),
                batch,
            )
        )
    return profiles


def _least_squares(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """(intercept, slope) of ys on xs."""
    n = len(xs)
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mean_x) ** 2 for x in xs)
    if sxx == 0:
        return mean_y, 0.0
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / sxx
    return mean_y - slope * mean_x, slope


def _floats(row: dict[str, str]) -> tuple[float, float, float]:
    return float(row["local_bsz"]), float(row["step_time"]), float(row["sync_time"])


def load_applications(traces: Path) -> dict[str, Application]:
    """Every application under ``traces`` (the artifact's ``traces/`` folder)."""
    apps = {
        path.name: Application.load(path)
        for path in sorted(traces.iterdir())
        if (path / "placements.csv").exists()
    }
    if not apps:
        raise ValueError(f"no application traces under {traces}")
    return apps


@dataclass(frozen=True, slots=True)
class WorkloadJob:
    name: str
    submitted: float
    app: str
    replicas: int  # the tuned replica count (Tiresias' gang)
    batch: int  # the user's global batch size


def read_workload(path: Path, apps: dict[str, Application] | None = None) -> list[WorkloadJob]:
    """One ``workload-N.csv``, in submission order. With ``apps``, unknown applications and
    batches outside an application's validated range are refused with the row's name."""
    jobs = []
    for line, row in enumerate(_read(path), start=2):
        try:
            job = WorkloadJob(
                row["name"],
                float(row["time"]),
                row["application"],
                int(row["num_replicas"]),
                int(row["batch_size"]),
            )
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"{path}:{line}: not a workload row ({error})") from None
        if job.replicas < 1 or job.batch < 1 or job.submitted < 0:
            raise ValueError(f"{path}:{line}: replicas, batch size and time must be positive")
        if apps is not None:
            app = apps.get(job.app)
            if app is None:
                raise ValueError(f"{path}:{line}: unknown application {job.app!r}")
            if not app.init_batch <= job.batch <= app.max_batch:
                raise ValueError(
                    f"{path}:{line}: batch {job.batch} outside {job.app}'s validated "
                    f"{app.init_batch}..{app.max_batch}"
                )
        jobs.append(job)
    return sorted(jobs, key=lambda job: (job.submitted, job.name))


def workload_paths(directory: Path) -> list[Path]:
    paths = sorted(directory.glob("workload-*.csv"), key=lambda p: _number(p.stem))
    if not paths:
        raise ValueError(f"no workload-N.csv files in {directory}")
    return paths


def _number(stem: str) -> int:
    tail = stem.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0
