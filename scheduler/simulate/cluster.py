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
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from scheduler.placement import Slot, place
from scheduler.policies import POLICIES, Policy
from scheduler.policies import tiresias as tiresias_policy
from scheduler.policies.model import QUEUED, RUNNING, SUSPENDED, JobView, Snapshot
from scheduler.simulate.pollux import Application, Placement, WorkloadJob, normalise, packed

INTERVAL = 60.0
RESTART_PAUSE = 30.0
RESIZE_PAUSE = 0.1  # bench/results/engine.md: grow 0.106 s, shrink 0.037 s (medians)
GANG_POLICIES = frozenset({tiresias_policy.POLICY, "fifo-gang", "fifo-backfill"})


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    policy: str = "fairshare"
    gpus: int = 64
    per_node: int = 4
    interval: float = INTERVAL
    restart_pause: float = RESTART_PAUSE
    resize_pause: float = RESIZE_PAUSE
    threshold: float = tiresias_policy.DEFAULT_THRESHOLD

    @property
    def gang(self) -> bool:
        return self.policy in GANG_POLICIES


@dataclass(frozen=True, slots=True)
class Outcome:
    name: str
    submitted: float
    finished: float
    restarts: int
    resizes: int

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
    view: JobView | None = field(default=None)

    def run(self, start: float, seconds: float) -> None:
        """Progress over ``[start, start + seconds)`` on the current placement."""
        if not self.placement:
            return
        self.attained += seconds * len(self.members)
        delay = min(self.pause, seconds)
        self.pause -= delay
        now, seconds = start + delay, seconds - delay
        app, batch = self.app, self.spec.batch
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
        self.pending = deque(sorted(workload, key=lambda j: (j.submitted, j.name)))
        self.apps = apps
        self.active: dict[str, _Job] = {}
        self.outcomes: list[Outcome] = []
        self.now = 0.0

    def _admit(self, spec: WorkloadJob) -> _Job:
        app = self.apps[spec.app]
        if self.config.gang:
            return _Job(spec, app, min(spec.replicas, self.config.gpus), ())
        curve = speedups(app, spec.batch, self.config.gpus)
        size = best_size(app, spec.batch, self.config.gpus)
        return _Job(spec, app, size, curve[:size])

    def run(self) -> list[Outcome]:
        interval = self.config.interval
        while self.pending or self.active:
            if not self.active:  # idle: jump to the interval where the next job is seen
                due = self.pending[0].submitted
                self.now = max(self.now, interval * -(-due // interval) - interval)
            for job in self.active.values():
                job.run(self.now, interval)
            self.now += interval
            for name in [n for n, j in self.active.items() if j.finished is not None]:
                job = self.active.pop(name)
                assert job.finished is not None
                restarts = max(job.restarts, 0)
                self.outcomes.append(
                    Outcome(name, job.spec.submitted, job.finished, restarts, job.resizes)
                )
            while self.pending and self.pending[0].submitted <= self.now:
                spec = self.pending.popleft()
                self.active[spec.name] = self._admit(spec)
            if self.active:
                self._decide()
        return self.outcomes

    def _decide(self) -> None:
        views = [self._view(job) for job in self.active.values()]
        decision = self.policy(Snapshot(self.config.gpus, views))
        if not decision.reasons:
            return
        current = {name: job.members for name, job in self.active.items() if job.members}
        placed = place(self.slots, current, decision.targets)
        for name in decision.reasons:
            job = self.active[name]
            before = len(job.members)
            job.members = placed.members.get(name, ())
            by_host: dict[int, int] = {}
            for slot in job.members:
                host = self.host_index[slot]
                by_host[host] = by_host.get(host, 0) + 1
            job.placement = normalise(by_host[h] for h in sorted(by_host))
            if not job.members:
                job.pause = 0.0
            elif before:
                job.pause = self.config.resize_pause
                job.resizes += 1
            else:
                job.pause = self.config.restart_pause
                job.restarts += 1

    def _view(self, job: _Job) -> JobView:
        held = len(job.members)
        state = RUNNING if held else SUSPENDED if job.restarts >= 0 else QUEUED
        view = job.view
        if (
            view is not None
            and view.current == held
            and view.state == state
            and view.attained == job.attained
        ):
            return view
        job.view = JobView(
            job.spec.name,
            job.max_workers,
            job.spec.submitted,
            current=held,
            state=state,
            attained=job.attained,
            speedup=job.curve,
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
