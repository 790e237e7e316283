"""The event-driven simulator: the live policy code, a simulated clock.

Time jumps from event to event (a submission, a completion, a Tiresias queue demotion);
after each, the policy decides once and the jobs whose count changed are resized. Between
events every job runs at a constant speed, so a job's completion time is known the moment
its allocation changes and goes on a heap; a later change makes that entry stale (its
version no longer matches) rather than removing it.

With ``Config.teams`` the policy sees each job's team (``SimJob.team``). A job that loses
all its slots is suspended: EDT checkpoints on suspend, so nothing is lost and it pays
``restart_pause`` when it resumes. With ``Config.kill`` it is killed instead, as a
kill-preemption scheduler does: it also loses the work done since its last checkpoint (one
every ``checkpoint_every`` seconds of running, counted from each restart), counted in
``JobResult.lost``.
"""

from __future__ import annotations

import functools
import heapq
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from scheduler.policies import POLICIES, Policy, las
from scheduler.policies import fairshare as fairshare_policy
from scheduler.policies import goodput as goodput_policy
from scheduler.policies import tiresias as tiresias_policy
from scheduler.policies.model import QUEUED, RUNNING, SUSPENDED, JobView, Snapshot, Team
from scheduler.policies.throughput import ThroughputModel, goodput
from scheduler.simulate.speedup import speedup

COMPLETION, WAKE = 0, 1
AWAKE = frozenset({tiresias_policy.POLICY, las.POLICY, las.SPEEDUP_POLICY, goodput_policy.POLICY})
CURVES = frozenset({las.SPEEDUP_POLICY, goodput_policy.POLICY})  # policies shown speedup curves
# Policies that order by remaining work: their running jobs' views are renewed every
# decision (the others' only when their count changes, as before).
WORK = frozenset({fairshare_policy.POLICY, goodput_policy.POLICY})


@dataclass(frozen=True, slots=True)
class GoodputProfile:
    """A job that can train at any global batch in ``[low, high]``: its throughput model,
    its (constant) gradient noise scale, the batch its learning rate was given for, its
    micro-batch cap and the batch its user gave it (:mod:`scheduler.policies.throughput`)."""

    model: ThroughputModel
    gns: float
    base: int
    low: int
    high: int
    max_micro: int
    batch: int

    def rate(self, slots: int, batch: int, per_host: int) -> float:
        """Goodput on ``slots`` packed slots at ``batch``, over one slot's at the user's."""
        one = goodput(self.model, 1, self.batch, self.gns, self.base, self.max_micro, per_host)
        return self.goodput(slots, batch, per_host) / one

    def goodput(self, slots: int, batch: int, per_host: int) -> float:
        return goodput(self.model, slots, batch, self.gns, self.base, self.max_micro, per_host)


@dataclass(frozen=True, slots=True)
class SimJob:
    """A job to simulate: ``work`` is in seconds at one slot's speed; on n slots it
    progresses ``speedup(serial, n)`` times faster. With a goodput ``profile`` its speed
    on n slots at batch B is ``profile.rate(n, B)`` instead: under the goodput policy at the
    batch the policy picks, under the others at the user's batch."""

    id: str
    submitted: float
    max_workers: int
    work: float
    serial: float = 0.0
    team: str = ""  # its team's id (the policy sees it where Config.teams is set)
    profile: GoodputProfile | None = None

    @property
    def isolated(self) -> float:
        """Seconds it would take alone on the cluster, at its max, never paused (at the
        user's batch)."""
        return self.work / self.speed(self.max_workers, 0)

    def speed(self, slots: int, batch: int, per_host: int = 8) -> float:
        """Work per second on ``slots`` at global ``batch`` (0: the user's)."""
        if self.profile is None:
            return speedup(self.serial, slots)
        return self.profile.rate(slots, batch or self.profile.batch, per_host)


@dataclass(frozen=True, slots=True)
class Config:
    """``resize_pause``: seconds a job stalls when its slot count changes while it runs (our
    engine: about one iteration). ``restart_pause``: when it restarts from a checkpoint
    after holding no slots (a suspension or a Tiresias preemption)."""

    gpus: int
    policy: str = "fairshare"
    resize_pause: float = 1.0
    restart_pause: float = 30.0
    threshold: float = tiresias_policy.DEFAULT_THRESHOLD
    teams: tuple[Team, ...] = ()
    kill: bool = False  # a job losing its slots is killed, not suspended (see the module)
    checkpoint_every: float = 1800.0  # seconds of running between checkpoints (kill only)
    slots_per_host: int = 8  # goodput profiles: learners packed on hosts of this many slots


@dataclass(frozen=True, slots=True)
class JobResult:
    job: SimJob
    finished: float
    reallocations: int
    attained: float  # slot-seconds held, pauses included
    preemptions: int = 0  # times it lost all its slots while running
    lost: float = 0.0  # slot-seconds of work done and lost to kills (Config.kill)

    @property
    def jct(self) -> float:
        return self.finished - self.job.submitted


@dataclass(slots=True)
class _State:
    job: SimJob
    remaining: float
    since: float
    slots: int = 0
    resume_at: float = 0.0
    attained: float = 0.0
    started: bool = False
    reallocations: int = 0
    version: int = 0
    run_from: float = 0.0  # when the current run began to compute (after its pause)
    preemptions: int = 0
    lost: float = 0.0
    batch: int = 0  # the batch the goodput policy picked (0: the user's)


def _policy(config: Config) -> Policy:
    if config.policy == tiresias_policy.POLICY:
        return functools.partial(tiresias_policy.decide, threshold=config.threshold)
    if config.policy not in POLICIES:
        raise ValueError(f"unknown policy {config.policy!r}; one of {sorted(POLICIES)}")
    return POLICIES[config.policy]


# Called after every decision with the time and each active job with the slots it holds.
Observer = Callable[[float, Sequence[tuple[SimJob, int]]], None]


class Simulator:
    def __init__(
        self, jobs: Iterable[SimJob], config: Config, observer: Observer | None = None
    ) -> None:
        self.config = config
        self.observer = observer
        self.policy = _policy(config)
        # Policies that read attained service: a job's change of queue or class wakes them.
        self.wakes = config.policy in AWAKE
        self.curves = config.policy in CURVES  # speedup curves for the policy
        self.work = config.policy in WORK
        self.goodput = config.policy == goodput_policy.POLICY
        self.pending = deque(sorted(jobs, key=lambda job: (job.submitted, job.id)))
        self.active: dict[str, _State] = {}
        self.views: dict[str, JobView] = {}  # what the policy sees, kept up to date
        self.running: set[str] = set()
        self.events: list[tuple[float, int, str, int]] = []  # (time, version, job, kind)
        self.results: list[JobResult] = []
        self.decisions = 0

    def run(self) -> list[JobResult]:
        """Simulate until every job has completed; results in completion order."""
        while self.pending or self.active:
            now = self._next_time()
            self._arrive(now)
            self._pop_events(now)
            self._reschedule(now)
        return self.results

    def _next_time(self) -> float:
        self._drop_stale()
        times = [self.pending[0].submitted] if self.pending else []
        times += [self.events[0][0]] if self.events else []
        if not times:
            raise RuntimeError(f"{len(self.active)} jobs wait and nothing will ever free a slot")
        return min(times)

    def _drop_stale(self) -> None:
        while self.events and not self._valid(self.events[0]):
            heapq.heappop(self.events)

    def _valid(self, event: tuple[float, int, str, int]) -> bool:
        state = self.active.get(event[2])
        return state is not None and state.version == event[1]

    def _arrive(self, now: float) -> None:
        while self.pending and self.pending[0].submitted <= now:
            job = self.pending.popleft()
            self.active[job.id] = _State(job, job.work, now)
            self.views[job.id] = self._view(self.active[job.id], now)

    def _pop_events(self, now: float) -> None:
        """Complete the jobs due now (a due WAKE needs nothing: the decision follows)."""
        while self.events and self.events[0][0] <= now:
            event = heapq.heappop(self.events)
            if self._valid(event) and event[3] == COMPLETION:
                self._finish(self.active.pop(event[2]), now)

    def _finish(self, state: _State, now: float) -> None:
        self._advance(state, now)
        del self.views[state.job.id]
        self.running.discard(state.job.id)
        self.results.append(
            JobResult(
                state.job, now, state.reallocations, state.attained, state.preemptions, state.lost
            )
        )

    def _reschedule(self, now: float) -> None:
        if self.wakes or self.work:  # attained service grows, remaining work shrinks
            for job_id in self.running:
                self.views[job_id] = self._view(self.active[job_id], now)
        snapshot = Snapshot(self.config.gpus, list(self.views.values()), self.config.teams,
                            slots_per_host=self.config.slots_per_host)  # fmt: skip
        decision = self.policy(snapshot)
        self.decisions += 1
        for job_id in decision.reasons:
            self._resize(
                self.active[job_id], decision.targets[job_id], now, decision.batches.get(job_id)
            )
        for job_id, batch in decision.batches.items():  # a new batch alone: no pause
            state = self.active[job_id]
            if job_id not in decision.reasons and batch != state.batch:
                self._advance(state, now)
                state.batch = batch
                state.version += 1
                self.views[job_id] = self._view(state, now)
                self._schedule_events(state, now)
        if self.observer is not None:
            self.observer(now, [(state.job, state.slots) for state in self.active.values()])

    def _view(self, state: _State, now: float) -> JobView:
        """The job as the policy sees it at ``now`` (with its speedup curve where the policy
        reads one; in goodput mode under the goodput policy)."""
        job = state.job
        phase = RUNNING if state.slots else SUSPENDED if state.started else QUEUED
        attained = state.attained + state.slots * (now - state.since)
        remaining = max(state.remaining, 1e-9)
        if state.slots:
            remaining -= self._speed(state) * max(0.0, now - max(state.since, state.resume_at))
            remaining = max(remaining, 1e-9)
        profile = job.profile
        if profile is not None and self.goodput:
            return JobView(
                job.id,
                job.max_workers,
                job.submitted,
                current=state.slots,
                state=phase,
                attained=attained,
                batch_range=(profile.low, profile.high),
                max_micro_batch=profile.max_micro,
                gns=profile.gns,
                base_batch=profile.base,
                throughput=profile.model,
                batch=state.batch,
                team=job.team if self.config.teams else "",
                remaining=remaining,
            )
        if not self.curves:
            curve: tuple[float, ...] = ()
        elif profile is not None:
            curve = profile_curve(profile, job.max_workers, self.config.slots_per_host)
        else:
            curve = amdahl_curve(job.serial, job.max_workers)
        return JobView(
            job.id,
            job.max_workers,
            job.submitted,
            current=state.slots,
            state=phase,
            attained=attained,
            speedup=curve,
            team=job.team if self.config.teams else "",
            remaining=remaining,
        )

    def _speed(self, state: _State) -> float:
        return state.job.speed(state.slots, state.batch, self.config.slots_per_host)

    def _advance(self, state: _State, now: float) -> None:
        """Account the progress and service since ``state.since``."""
        if state.slots:
            ran = now - max(state.since, state.resume_at)
            if ran > 0:
                state.remaining -= self._speed(state) * ran
            state.attained += state.slots * (now - state.since)
        state.since = now

    def _resize(self, state: _State, slots: int, now: float, batch: int | None = None) -> None:
        self._advance(state, now)
        if batch is not None:
            state.batch = batch
        if state.started:
            state.reallocations += 1
            if slots:
                pause = self.config.resize_pause if state.slots else self.config.restart_pause
                state.resume_at = now + pause
            elif state.slots:
                state.preemptions += 1
                if self.config.kill:
                    self._lose(state, now)
        if slots and not state.slots:  # a run begins (after its restart pause, if any)
            state.run_from = max(now, state.resume_at)
        state.started = state.started or slots > 0
        state.slots = slots
        state.version += 1
        self.views[state.job.id] = self._view(state, now)
        if slots:
            self.running.add(state.job.id)
            self._schedule_events(state, now)
        else:
            self.running.discard(state.job.id)

    def _lose(self, state: _State, now: float) -> None:
        """A kill: the work since the last checkpoint of this run is done again."""
        ran = max(0.0, now - state.run_from)
        every = self.config.checkpoint_every
        since = ran % every if every > 0 else ran
        state.remaining += since * speedup(state.job.serial, state.slots)
        state.lost += since * state.slots

    def _schedule_events(self, state: _State, now: float) -> None:
        rate = self._speed(state)
        done = max(now, state.resume_at) + max(state.remaining, 0.0) / rate
        heapq.heappush(self.events, (done, state.version, state.job.id, COMPLETION))
        if not self.wakes:
            return
        if self.config.policy == tiresias_policy.POLICY:
            boundary = self.config.threshold if state.attained < self.config.threshold else None
        else:
            boundary = las.next_boundary(state.attained)
        if boundary is not None:
            demoted = now + (boundary - state.attained) / state.slots
            heapq.heappush(self.events, (demoted, state.version, state.job.id, WAKE))


@functools.lru_cache(maxsize=1024)
def profile_curve(profile: GoodputProfile, top: int, per_host: int) -> tuple[float, ...]:
    """The profile's speedup curve at the user's batch, n = 1..top."""
    return tuple(profile.rate(n, profile.batch, per_host) for n in range(1, top + 1))


@functools.lru_cache(maxsize=1024)
def amdahl_curve(serial: float, top: int) -> tuple[float, ...]:
    return tuple(speedup(serial, n) for n in range(1, top + 1))


def simulate(jobs: Iterable[SimJob], config: Config) -> list[JobResult]:
    """Run ``jobs`` on ``config.gpus`` slots under ``config.policy``; see the module."""
    return Simulator(jobs, config).run()
