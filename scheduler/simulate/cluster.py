"""The Pollux artifact's cluster, stepped as the artifact steps it, with our policy code.

16 nodes x 4 GPUs (``gpus`` / ``per_node``), a decision every 60 s: every job runs the
interval on the placement it holds (after its pause), then the jobs submitted by then and
not completed are handed to the policy (the same ``decide`` the live scheduler calls) and
to our sticky placement; a job whose slot count changes pauses:

- ``restart_pause`` when it starts or resumes from nothing (a checkpoint-restart; the
  artifact charges 30 s on every reallocation),
- ``resize_pause`` when it grows or shrinks while running (EDT resizes between iterations:
  ``bench/results/engine.md`` measures about 0.1 s).

Under ``tiresias`` (and the fifo baselines) a job runs as a gang of its ``num_replicas`` at its
batch size, as the artifact's Tiresias runs it. Under the elastic policies a job keeps its
workload batch size (the user's; EDT never changes it) on any number of GPUs from 1 to its
best size: the replica count, packed, at which the measured throughput at that batch is
highest (:func:`best_size`), and the policies see its speedup curve at that batch.

Under ``goodput`` every job but ncf's is in goodput mode, as the artifact's Pollux runs them:
any global batch from the application's smallest validated batch to its largest, on 1 GPU up
to as many as that largest batch allows at the smallest measured local batch; its learning
rate given for the smallest batch; the policy sees the application's throughput model fitted
to all its measured placements (:func:`scheduler.simulate.pollux.fit_model`) and the noise
scale the job would measure now (at its batch, in its epoch). The batch the decision picks
applies at once and costs nothing (the engine changes it between iterations). ncf keeps the
workload's batch (the artifact pins it too).

**Learner moves** (``moves``): sticky placement never moves a learner whose job keeps its
count, so a job that started on slots scattered over nodes stays scattered. With moves, after
each decision every job of two GPUs or more spread over more nodes than it needs is offered
the packed placement on the fewest nodes that its own slots, free slots and the slots of
one-GPU jobs (swapped onto the slots it leaves: for a one-GPU job every slot is alike) make
possible. A move costs each learner's job EDT's resize pause (nothing more where its count
changed in this decision: the same regroup carries it) and is made only when it pays back
within one interval: ``(I - c)·r_new - I·r_old > p·r_old·k``, with ``I`` the interval,
``c`` the job's pause (0 where its count changed), ``p`` the resize pause, ``r`` the job's
progress rate on its placement (measured, per placement) and ``k`` the one-GPU jobs it
displaces (``scheduler/moves.py``: the live loop's rules).
"""

from __future__ import annotations

import functools
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from scheduler import moves
from scheduler.placement import Slot, place
from scheduler.policies import POLICIES, Policy
from scheduler.policies import goodput as goodput_policy
from scheduler.policies import tiresias as tiresias_policy
from scheduler.policies.model import QUEUED, RUNNING, SUSPENDED, JobView, Snapshot
from scheduler.simulate.pollux import Application, Placement, WorkloadJob, normalise, packed

INTERVAL = 60.0
RESTART_PAUSE = 30.0
RESIZE_PAUSE = 0.1  # bench/results/engine.md: grow 0.106 s, shrink 0.037 s (medians)
GANG_POLICIES = frozenset({tiresias_policy.POLICY, "fifo-gang", "fifo-backfill"})
FIXED_BATCH = frozenset({"ncf"})  # kept at the workload's batch under goodput, as the artifact


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    policy: str = "fairshare"
    gpus: int = 64
    per_node: int = 4
    interval: float = INTERVAL
    restart_pause: float = RESTART_PAUSE
    resize_pause: float = RESIZE_PAUSE
    threshold: float = tiresias_policy.DEFAULT_THRESHOLD
    moves: bool = False  # move learners onto fewer nodes where it pays back
    events: bool = False  # decide also at each arrival and completion (EDT), not only each tick

    @property
    def gang(self) -> bool:
        return self.policy in GANG_POLICIES

    @property
    def goodput(self) -> bool:
        return self.policy == goodput_policy.POLICY


@dataclass(frozen=True, slots=True)
class Outcome:
    name: str
    submitted: float
    finished: float
    restarts: int
    resizes: int
    moves: int = 0

    @property
    def jct(self) -> float:
        return self.finished - self.submitted


@functools.cache
def speedups(app: Application, batch: int, gpus: int) -> tuple[float, ...]:
    """s(n) for n = 1..N, packed, at a fixed global ``batch``: throughput on n GPUs over
    throughput on one (N: the most replicas the batch allows, at most ``gpus``)."""
    top = min(gpus, app.max_replicas(batch))
    one = app.rate(packed(1), batch, 0)
    return tuple(app.rate(packed(n), batch, 0) / one for n in range(1, top + 1))


def best_size(app: Application, batch: int, gpus: int) -> int:
    """The replica count at which a job of ``batch`` runs fastest (the smallest such)."""
    curve = speedups(app, batch, gpus)
    return curve.index(max(curve)) + 1


@dataclass(slots=True)
class _Job:
    spec: WorkloadJob
    app: Application
    max_workers: int
    curve: tuple[float, ...]
    members: tuple[str, ...] = ()
    placement: Placement = ()
    pause: float = 0.0
    epoch: int = 0
    progress: float = 0.0
    attained: float = 0.0
    finished: float | None = None
    restarts: int = -1  # the first start is not a restart
    resizes: int = 0
    moves: int = 0
    goodput: bool = False  # the policy picks its batch
    batch: int = 0  # the global batch it trains at (the workload's unless in goodput mode)
    view: JobView | None = field(default=None)

    def run(self, start: float, seconds: float) -> None:
        """Progress over ``[start, start + seconds)`` on the current placement."""
        if not self.placement:
            return
        self.attained += seconds * len(self.members)
        delay = min(self.pause, seconds)
        self.pause -= delay
        now, seconds = start + delay, seconds - delay
        app, batch = self.app, self.batch
        while seconds > 0 and self.finished is None:
            rate = app.rate(self.placement, batch, self.epoch)
            end = app.epoch_ends[self.epoch]
            if self.progress + rate * seconds < end:
                self.progress += rate * seconds
                return
            delta = min(float(round((end - self.progress) / rate)), seconds)
            self.epoch += 1
            self.progress = end
            now += delta
            seconds -= delta
            if self.epoch >= app.max_epochs:
                self.finished = now

    def finishes_in(self, seconds: float) -> float | None:
        """The seconds from now at which :meth:`run` would complete the job within the next
        ``seconds`` (None: it would not), without running it."""
        if not self.placement or self.finished is not None:
            return None
        delay = min(self.pause, seconds)
        spent, seconds = delay, seconds - delay
        app, batch, epoch, progress = self.app, self.batch, self.epoch, self.progress
        while seconds > 0:
            rate = app.rate(self.placement, batch, epoch)
            end = app.epoch_ends[epoch]
            if progress + rate * seconds < end:
                return None
            if epoch + 1 >= app.max_epochs:  # by then run() has completed it, rounding
                return spent + math.ceil((end - progress) / rate)
            delta = min(float(round((end - progress) / rate)), seconds)
            epoch, progress = epoch + 1, end
            spent, seconds = spent + delta, seconds - delta
        return None

    def remaining(self) -> float:
        """Slot-seconds of work left: the progress to go at one GPU's rate in its epoch (at
        the application's smallest batch in goodput mode, else at its own)."""
        app = self.app
        epoch = min(self.epoch, app.max_epochs - 1)
        one = app.rate(packed(1), app.init_batch if self.goodput else self.spec.batch, epoch)
        left = app.epoch_ends[-1] - self.progress
        return max(left / one, 1e-9) if one > 0 else 0.0


class Cluster:
    def __init__(
        self,
        workload: Sequence[WorkloadJob],
        apps: dict[str, Application],
        config: ClusterConfig,
    ) -> None:
        self.config = config
        self.policy = _policy(config)
        hosts = config.gpus // config.per_node
        if hosts < 1 or hosts * config.per_node != config.gpus:
            raise ValueError(f"{config.gpus} GPUs are not whole nodes of {config.per_node}")
        self.slots = [
            Slot(f"n{h:03d}.{i}", f"n{h:03d}", i)
            for h in range(hosts)
            for i in range(config.per_node)
        ]
        self.host_index = {slot.id: int(slot.host[1:]) for slot in self.slots}
        self.by_host = [
            [s.id for s in self.slots if self.host_index[s.id] == h] for h in range(hosts)
        ]
        self.pending = deque(sorted(workload, key=lambda j: (j.submitted, j.name)))
        self.apps = apps
        self.active: dict[str, _Job] = {}
        self.outcomes: list[Outcome] = []
        self.now = 0.0

    def _admit(self, spec: WorkloadJob) -> _Job:
        app = self.apps[spec.app]
        if self.config.gang:
            return _Job(spec, app, min(spec.replicas, self.config.gpus), (), batch=spec.batch)
        if self.config.goodput and app.name not in FIXED_BATCH:
            top = min(self.config.gpus, app.max_replicas(app.max_batch))
            return _Job(spec, app, top, (), goodput=True, batch=app.init_batch)
        curve = speedups(app, spec.batch, self.config.gpus)
        size = best_size(app, spec.batch, self.config.gpus)
        return _Job(spec, app, size, curve[:size], batch=spec.batch)

    def run(self) -> list[Outcome]:
        interval = self.config.interval
        while self.pending or self.active:
            if not self.active:  # idle: jump to the interval where the next job is seen
                due = self.pending[0].submitted
                if self.config.events:
                    self.now = max(self.now, due)
                else:
                    self.now = max(self.now, interval * -(-due // interval) - interval)
            step = self._step(interval)
            for job in self.active.values():
                job.run(self.now, step)
            self.now += step
            for name in [n for n, j in self.active.items() if j.finished is not None]:
                job = self.active.pop(name)
                assert job.finished is not None
                restarts = max(job.restarts, 0)
                self.outcomes.append(
                    Outcome(
                        name, job.spec.submitted, job.finished, restarts, job.resizes, job.moves
                    )
                )
            while self.pending and self.pending[0].submitted <= self.now:
                spec = self.pending.popleft()
                self.active[spec.name] = self._admit(spec)
            if self.active:
                self._decide()
        return self.outcomes

    def _step(self, interval: float) -> float:
        """The time to the next decision: the interval, or with ``events`` the next
        arrival or completion where sooner (a completion at least a second on)."""
        if not self.config.events:
            return interval
        step = interval
        if self.pending:
            step = min(step, max(0.0, self.pending[0].submitted - self.now))
        for job in self.active.values():
            done = job.finishes_in(step)
            if done is not None:
                step = min(step, max(done, 1.0))
        return step

    def _decide(self) -> None:
        views = [self._view(job) for job in self.active.values()]
        snapshot = Snapshot(self.config.gpus, views, slots_per_host=self.config.per_node)
        decision = self.policy(snapshot)
        for name, batch in decision.batches.items():
            self.active[name].batch = batch
        changed = set(decision.reasons)
        if changed:
            current = {name: job.members for name, job in self.active.items() if job.members}
            placed = place(self.slots, current, decision.targets)
            for name in decision.reasons:
                job = self.active[name]
                before = len(job.members)
                self._seat(job, placed.members.get(name, ()))
                if not job.members:
                    job.pause = 0.0
                elif before:
                    job.pause = self.config.resize_pause
                    job.resizes += 1
                else:
                    job.pause = self.config.restart_pause
                    job.restarts += 1
        if self.config.moves:
            self._move(changed)

    def _seat(self, job: _Job, members: tuple[str, ...]) -> None:
        job.members = members
        by_host: dict[int, int] = {}
        for slot in members:
            host = self.host_index[slot]
            by_host[host] = by_host.get(host, 0) + 1
        job.placement = normalise(by_host[h] for h in sorted(by_host))

    def _move(self, changed: set[str]) -> None:
        """Learner moves (see the module): jobs spread over more nodes than they need, the
        largest first, onto the fewest nodes their slots, free slots and one-GPU jobs'
        slots allow, where that pays back within one interval (``scheduler/moves.py``,
        the live loop's rules)."""
        pause, interval = self.config.resize_pause, self.config.interval
        owner = {slot: name for name, job in self.active.items() for slot in job.members}
        hosts = [(f"n{h:03d}", slots) for h, slots in enumerate(self.by_host)]

        def swappable(other: str) -> bool:
            return len(self.active[other].members) == 1

        spread = [job for job in self.active.values() if len(job.members) > 1]
        for job in sorted(spread, key=lambda j: (-len(j.members), j.spec.name)):
            name = job.spec.name
            move = moves.plan(name, job.members, hosts, owner, swappable)
            if move is None:
                continue
            counts: dict[int, int] = {}
            for slot in move.members:
                counts[self.host_index[slot]] = counts.get(self.host_index[slot], 0) + 1
            target = normalise(counts[h] for h in sorted(counts))
            old = job.app.rate(job.placement, job.batch, job.epoch)
            new = job.app.rate(target, job.batch, job.epoch)
            cost = 0.0 if name in changed else pause
            displaced = [owner[s] for s in move.taken if s in owner]
            if not moves.pays_back(old, new, cost, interval, len(displaced), pause):
                continue
            taken, members = list(move.taken), move.members
            leaving = list(move.left)
            for slot, other in zip([s for s in taken if s in owner], leaving, strict=False):
                mover = self.active[owner[slot]]
                self._seat(mover, (other,))
                owner[other] = mover.spec.name
                if mover.spec.name not in changed:
                    mover.pause = max(mover.pause, pause)
                mover.moves += 1
                changed.add(mover.spec.name)
            for slot in leaving:
                if owner.get(slot) == name:
                    del owner[slot]
            for slot in taken:
                owner[slot] = name
            self._seat(job, members)
            job.pause = max(job.pause, cost)
            job.moves += 1
            changed.add(name)

    def _view(self, job: _Job) -> JobView:
        held = len(job.members)
        state = RUNNING if held else SUSPENDED if job.restarts >= 0 else QUEUED
        view = job.view
        gns = job.app.noise_scale(job.batch, job.epoch) if job.goodput else 0.0
        if (
            view is not None
            and view.current == held
            and view.state == state
            and view.attained == job.attained
            and view.batch == (job.batch if job.goodput else 0)
            and view.gns == gns
        ):
            return view
        if job.goodput:
            app = job.app
            job.view = JobView(
                job.spec.name,
                job.max_workers,
                job.spec.submitted,
                current=held,
                state=state,
                attained=job.attained,
                batch_range=(app.init_batch, app.max_batch),
                max_micro_batch=int(app.max_local_bsz),
                gns=gns,
                base_batch=app.init_batch,
                throughput=app.model,
                batch=job.batch,
                remaining=job.remaining(),
            )
            return job.view
        job.view = JobView(
            job.spec.name,
            job.max_workers,
            job.spec.submitted,
            current=held,
            state=state,
            attained=job.attained,
            speedup=job.curve,
            remaining=job.remaining(),
        )
        return job.view


def _policy(config: ClusterConfig) -> Policy:
    if config.policy == tiresias_policy.POLICY:
        return functools.partial(tiresias_policy.decide, threshold=config.threshold)
    if config.policy not in POLICIES:
        raise ValueError(f"unknown policy {config.policy!r}; one of {sorted(POLICIES)}")
    return POLICIES[config.policy]


def simulate_workload(
    workload: Sequence[WorkloadJob], apps: dict[str, Application], config: ClusterConfig
) -> list[Outcome]:
    return Cluster(workload, apps, config).run()


def alone_bound(workload: Sequence[WorkloadJob], apps: dict[str, Application], gpus: int) -> float:
    """Average JCT (s) if every job ran alone, at once, at its best size, never paused: a
    lower bound for any policy that keeps each job's batch size."""
    times = [apps[j.app].alone(j.batch, best_size(apps[j.app], j.batch, gpus)) for j in workload]
    return sum(times) / len(times)
