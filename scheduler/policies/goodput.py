"""goodput: slots and batch sizes together, for the most training progress, shared fairly.

A job in goodput mode (``JobView.batch_range`` set) may train at any global batch in its
range; the others keep theirs (docs/architecture.md, "Scheduling contract"). This policy
decides, for every job, its slots, and for every goodput-mode job given slots, its batch.

**One job's value.** A goodput-mode job's rate on n slots, ``G(n)``, is the best goodput
(throughput x statistical efficiency, :mod:`scheduler.policies.throughput`) over the
batches in its range, its micro-batch cap and its throughput model, taken packed on hosts
of ``Snapshot.slots_per_host``; the batch that reaches it is the batch it gets, though
never more than :data:`EXPLORE` times the largest batch its fit was timed at
(``JobView.timed_batch``): there the best batch within that bound (``G`` and the slots stay
the whole fit's). Its *useful size* is the smallest n of the highest G (more slots would
lower its goodput). A job without a throughput model yet is taken as linear in slots, at
its base batch. A fixed-batch job's rate is its speedup curve (linear when unknown), as
fairshare-speedup sees it.

**Fair shares.** Each job's fair share ``f`` is what fair share gives it with every goodput
job's max lowered to its useful size: with no teams and one owner, fairshare-las' (priority,
then least attained service decides who is admitted when minimums do not all fit; weighted
max-min by priority); otherwise hierarchical fair share's (:mod:`scheduler.policies.teams`:
team guarantees, weights and limits, then users, then priority).

**Across jobs** (Pollux's cluster objective): the slots of a pool go to its admitted jobs
to maximise ``Σ f · S^p / p`` with ``S(n) = G(n) / G(f)`` the job's speedup over its fair
share and ``p = FAIRNESS = -1`` (Pollux's exponent; ``p -> 0`` is the log, p = 1 the plain
sum): a weighted power mean of the speedups, each job weighed by its fair share, so
priorities, users and teams count as in fair share, and jobs that all scale linearly get
their fair shares (up to whole slots). Every admitted job starts at its minimum; then,
greedily, the next step along the upper concave envelope of a job's ``S^p / p`` that adds
the most per slot, while it adds anything (ties to the earlier job in fairshare-las'
order). For concave
goodput that greedy is the optimum; the envelope bridges the dip where a job starts to
span hosts. Slots no step wants go, up to their max, to the fixed-batch jobs (work
conserving), then back to goodput jobs up to the slots they hold now (hysteresis: no job
shrinks only to leave slots idle, as an unsettled fit of its throughput would make it, to
grow again once the fit settles; never onto more hosts than its useful size fills: spanning
another host is the placement's cost, not the fit's noise); a goodput job is never given
more than its useful size beyond those.

**Teams are hard constraints.** With teams, every team's subtree gets exactly the whole
slots hierarchical fair share gives it over its jobs (useful sizes as their max), so never
less than its entitlement floor: its guarantee, its weight's part of the rest, its limit,
as fairshare applies them. The objective then divides each team's own slots (one pool per
team, and one for the jobs of no team) among its own users' jobs, owners not bounding it.

**With no goodput-mode job** the answer is today's: fairshare-speedup's with no teams and at
most one owner, fairshare's otherwise, relabelled.

Every order is total (the fairshare-las order, ids last) and every table a pure function of
the job's inputs (the noise scale rounded to 2 %, so a slowly drifting estimate keeps its
cached table): the answer never depends on the order of the input.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import cast

from scheduler.policies import fairshare, las, reasons, speedup, teams
from scheduler.policies.model import (
    Decision,
    JobView,
    ReasonFn,
    Snapshot,
    make_decision,
    zeros,
)
from scheduler.policies.throughput import ThroughputModel, best_batch, goodput

POLICY = "goodput"
FAIRNESS = -1.0  # Pollux's exponent p of the power mean over speedups
# A job's weight in the objective is its fair share times its *urgency* where its remaining
# work is known (JobView.remaining, slot-seconds): (remaining / REMAINING_UNIT) ^ -URGENCY,
# the remaining work taken within REMAINING_BOUNDS, times ((attained + remaining) /
# remaining) ^ PROGRESS. Of two jobs, the one with less work left, and above all the one
# nearer its end, gains more from a slot: it leaves the queue sooner (shortest remaining
# work first); a long job's weight grows as it nears its end, so it is not starved.
URGENCY = 0.1
REMAINING_UNIT = 3600.0
REMAINING_BOUNDS = (60.0, 36000.0)
PROGRESS = 1.0
GNS_STEP = 1.02  # noise scales are rounded to this ratio before a table is built
# A job is sent to a batch at most this many times the largest global batch its fitted
# throughput model was timed at (``JobView.timed_batch``): two timings at one batch on 1 and
# 4 learners put all of the 4 learners' extra time in the all-reduce, which a larger batch
# would amortise, where the cost per sample grew too (learners sharing cores, memory
# bandwidth). The job's slots are decided on the whole fit, as before, so it goes on
# growing; timed at its new batch, its next fit goes on from what it saw.
EXPLORE = 2


@dataclass(frozen=True, slots=True, eq=False)
class Profile:
    """A job's rate ``rate[n]`` on n = 0..top slots (rate[0] = 0), the batch it runs at
    there (goodput mode; 0 for a fixed batch), and its useful size. Compared by identity:
    profiles come from caches, so equal inputs give the same object."""

    rate: tuple[float, ...]
    batch: tuple[int, ...]
    useful: int
    top: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "top", len(self.rate) - 1)

    def at(self, share: float) -> float:
        """G at a fractional slot count: linear between whole counts, from 0 below 1."""
        if share <= 0:
            return 0.0
        whole = min(int(share), self.top)
        if whole >= self.top:
            return self.rate[self.top]
        low = self.rate[whole]
        return low + (self.rate[whole + 1] - low) * (share - whole)


@lru_cache(maxsize=8192)
def _linear(top: int) -> Profile:
    return Profile(tuple(float(n) for n in range(top + 1)), (0,) * (top + 1), top)


@lru_cache(maxsize=8192)
def _curve(curve: tuple[float, ...], top: int) -> Profile:
    rate = (0.0, *(speedup.value(curve, n) for n in range(1, top + 1)))
    return Profile(rate, (0,) * (top + 1), top)


@lru_cache(maxsize=65536)
def _goodput(
    model: ThroughputModel,
    gns: float,
    base: int,
    low: int,
    high: int,
    micro: int,
    per_host: int,
    top: int,
) -> Profile:
    rates, batches = [0.0], [0]
    for n in range(1, top + 1):
        batch, rate = best_batch(model, n, low, high, gns, base, micro, per_host)
        rates.append(rate)
        batches.append(batch)
    best = max(rates)
    useful = next(n for n, rate in enumerate(rates) if rate >= best * (1 - 1e-12))
    return Profile(tuple(rates), tuple(batches), max(1, useful))


@lru_cache(maxsize=8192)
def _untimed(base: int, low: int, high: int, top: int) -> Profile:
    """A goodput job not measured yet: linear in slots, at its base batch."""
    batch = min(high, max(low, base))
    return Profile(
        tuple(float(n) for n in range(top + 1)),
        (0, *(max(batch, n) for n in range(1, top + 1))),
        top,
    )


@lru_cache(maxsize=65536)
def rounded_gns(gns: float) -> float:
    """The noise scale a table is built for: ``gns`` to the nearest power of GNS_STEP."""
    if gns <= 0:
        return 0.0
    return float(GNS_STEP ** round(math.log(gns) / math.log(GNS_STEP)))


def profile(job: JobView, capacity: int, per_host: int = 0) -> Profile:
    """The job's rate and batch by slot count, up to ``min(max_workers, capacity)`` (and, in
    goodput mode, its largest batch: every learner computes a sample at least)."""
    top = max(min(job.max_workers, capacity), 0)
    if job.batch_range is None:
        return _curve(job.speedup, top) if job.speedup else _linear(top)
    low, high = job.batch_range
    top = min(top, high)
    base = job.base_batch or low
    if job.throughput is None:
        return _untimed(base, low, high, top)
    gns, micro = rounded_gns(job.gns), job.max_micro_batch
    full = _goodput(job.throughput, gns, base, low, high, micro, per_host, top)
    # a sample for each learner at least, as ``top`` allows
    bound = max(low, top, EXPLORE * job.timed_batch)
    if not job.timed_batch or bound >= high:
        return full
    return _bounded(full, _goodput(job.throughput, gns, base, low, bound, micro, per_host, top))


@lru_cache(maxsize=65536)
def _bounded(full: Profile, within: Profile) -> Profile:
    """``full``'s rates and useful size (the slots the job is worth, as its fit says) with
    ``within``'s batches (those the fit is trusted at): the bound moves the batch, never the
    slots, so no job shrinks, or is held small, for it."""
    return Profile(full.rate, within.batch, full.useful)


# A batch change without a change of slots costs a generation (the learners stop between
# two iterations and form their group again): the live scheduler makes one only where the
# new batch's goodput is at least this much above the present one's.
BATCH_CHANGE_GAIN = 1.05


def batch_change_pays(job: JobView, learners: int, batch: int, per_host: int = 0,
                      gain: float = BATCH_CHANGE_GAIN) -> bool:  # fmt: skip
    """Whether a goodput-mode job that keeps its ``learners`` should move from the batch it
    runs at (``job.batch``) to ``batch``: always where its batch is not one it may run at
    there (outside its range, or fewer samples than learners); else only with a throughput
    model, and where ``batch``'s goodput is at least ``gain`` times the present one's (the
    noise scale rounded as the tables round it)."""
    if job.batch_range is None or batch <= 0 or batch == job.batch or learners <= 0:
        return False
    low, high = job.batch_range
    if not max(low, learners) <= job.batch <= high:
        return True
    if job.throughput is None:
        return False
    now = job_goodput(job, learners, job.batch, per_host)
    return job_goodput(job, learners, batch, per_host) >= now * gain


def job_goodput(job: JobView, learners: int, batch: int, per_host: int = 0) -> float:
    """A goodput-mode job's goodput on ``learners`` at global ``batch``, by its throughput
    model (which it must have), at its noise scale rounded as the tables round it."""
    assert job.throughput is not None and job.batch_range is not None
    base = job.base_batch or job.batch_range[0]
    return goodput(job.throughput, learners, batch, rounded_gns(job.gns), base,
                   job.max_micro_batch, per_host)  # fmt: skip


# The objective --------------------------------------------------------------------------


def utility(rate: float, fairness: float) -> float:
    """``rate^p / p`` (``log rate`` at p = 0): what the power mean adds up."""
    if fairness == 0:
        return math.log(rate)
    return float(rate**fairness) / fairness


@lru_cache(maxsize=65536)
def envelope(prof: Profile, low: int, high: int, fairness: float) -> tuple[int, ...]:
    """The slot counts on the upper concave envelope of ``utility(rate[n])`` for n from
    ``low`` to ``high`` (both kept): the steps the greedy takes."""
    points: list[tuple[int, float]] = []
    for n in range(low, high + 1):
        value = utility(prof.rate[n], fairness)
        while len(points) >= 2:
            (n1, v1), (n2, v2) = points[-2], points[-1]
            # Drop the middle point where it lies on or below the chord to (n, value).
            if (v2 - v1) * (n - n1) <= (value - v1) * (n2 - n1):
                points.pop()
            else:
                break
        points.append((n, value))
    return tuple(n for n, _ in points)


@dataclass(slots=True)
class _Entry:
    job: JobView
    prof: Profile
    cap: int  # the most slots the greedy gives it
    scale: float  # f · G(f)^-p (p = 0: f): its weight in the objective
    steps: tuple[int, ...]


def _step(entry: _Entry, n: int, budget: int, fairness: float) -> tuple[int, float] | None:
    """The job's next step from n (to the next envelope count, or the best count within
    ``budget`` more slots when that is too far) and its gain per slot; None if none adds."""
    steps = entry.steps
    index = bisect_right(steps, n)
    if index >= len(steps):
        return None
    rate = entry.prof.rate
    here = utility(rate[n], fairness)
    target = steps[index]
    if target - n <= budget:
        gain = (utility(rate[target], fairness) - here) / (target - n)
        return (target, gain * entry.scale) if gain > 0 else None
    best: tuple[int, float] | None = None
    for m in range(n + 1, min(n + budget, entry.cap) + 1):
        gain = (utility(rate[m], fairness) - here) / (m - n) * entry.scale
        if gain > 0 and (best is None or gain > best[1]):
            best = (m, gain)
    return best


def spread(entries: Sequence[_Entry], targets: dict[str, int], budget: int,
           fairness: float) -> int:  # fmt: skip
    """Hand ``budget`` slots to ``entries`` (at their minimums in ``targets``, in order of
    precedence) by the greedy of the module; returns the slots left over."""
    heap: list[tuple[float, int, int]] = []
    for index, entry in enumerate(entries):
        step = _step(entry, targets[entry.job.id], budget, fairness)
        if step is not None:
            heap.append((-step[1], index, step[0]))
    heapq.heapify(heap)
    while budget > 0 and heap:
        _, index, target = heapq.heappop(heap)
        entry = entries[index]
        now = targets[entry.job.id]
        if target - now > budget:  # the budget shrank since: the best step that still fits
            step = _step(entry, now, budget, fairness)
            if step is not None:
                heapq.heappush(heap, (-step[1], index, step[0]))
            continue
        targets[entry.job.id] = target
        budget -= target - now
        step = _step(entry, target, budget, fairness)
        if step is not None:
            heapq.heappush(heap, (-step[1], index, step[0]))
    return budget


def urgency(job: JobView) -> float:
    """The factor on a job's weight from its remaining work and its attained service (see
    URGENCY); 1 where its remaining work is unknown."""
    left = job.remaining
    if left <= 0:
        return 1.0
    low, high = REMAINING_BOUNDS
    size = (min(max(left, low), high) / REMAINING_UNIT) ** -URGENCY
    return float(size * ((job.attained + left) / left) ** PROGRESS)


# The decision ---------------------------------------------------------------------------


def decide(snapshot: Snapshot, fairness: float = FAIRNESS) -> Decision:
    """Slots and batches for ``snapshot`` (see the module); ``fairness`` is the exponent p
    of the power mean (at most 1)."""
    if fairness > 1:
        raise ValueError("the fairness exponent must be at most 1")
    jobs = las.by_service(list(snapshot.jobs))
    flat = not snapshot.teams and len({job.owner for job in jobs}) <= 1
    if not any(job.goodput_mode for job in jobs):
        today = las.decide_speedup(snapshot) if flat else fairshare.decide(snapshot)
        return replace(today, policy=POLICY)
    capacity, per_host = snapshot.capacity, snapshot.slots_per_host
    profiles, capped = _profiles(jobs, capacity, per_host)
    shares: dict[str, float] = {}
    pools: list[tuple[list[JobView], int]] = []
    by_team: dict[str, float] = {}
    by_user: dict[str, dict[str, float]] = {}
    tree: teams.Hierarchy | None = None
    if flat:
        admitted = fairshare.admit(capped, capacity)
        shares = _shares(admitted, capacity)
        pools.append((admitted, capacity))
    else:
        tree = teams.Hierarchy(Snapshot(capacity, capped, snapshot.teams))
        tree.admit()
        tree.divide()
        rank = {job.id: index for index, job in enumerate(capped)}
        grouped: dict[str, tuple[list[JobView], list[int]]] = {}
        for (team, _), user in sorted(tree.users.items()):
            if not user.amount:
                continue
            shares.update(_shares(user.admitted, user.amount))
            pool = grouped.setdefault(team, ([], [0]))
            pool[0].extend(user.admitted)
            pool[1][0] += user.amount
        for team in sorted(grouped):
            members, amount = grouped[team]
            pools.append((sorted(members, key=lambda job: rank[job.id]), amount[0]))
        by_team, by_user = tree.entitlements()
    targets = zeros(jobs)
    original = {job.id: job for job in jobs}
    for members, budget in pools:
        entries = []
        left = budget
        for view in members:
            low = view.min_workers
            targets[view.id] = low
            left -= low
            if view.max_workers <= low:  # at its min, goodput or not: nothing to decide
                continue
            job = original[view.id]
            prof = profiles[job.id]
            cap = view.max_workers if job.goodput_mode else prof.top
            if cap <= low:
                continue
            share = shares[job.id]
            scale = share if fairness == 0 else share * prof.at(share) ** -fairness
            scale *= urgency(job)
            steps = envelope(prof, job.min_workers, cap, fairness)
            entries.append(_Entry(job, prof, cap, scale, steps))
        left = spread(entries, targets, left, fairness)
        for entry in entries:  # work conserving: what no step wanted, to fixed-batch jobs
            if not left:
                break
            if not entry.job.goodput_mode and targets[entry.job.id] < entry.job.max_workers:
                more = min(left, entry.job.max_workers - targets[entry.job.id])
                targets[entry.job.id] += more
                left -= more
        left = _keep(members, original, profiles, targets, left, per_host)
    batches = {
        job.id: profiles[job.id].batch[targets[job.id]]
        for job in jobs
        if job.goodput_mode and targets[job.id]
    }
    base: ReasonFn
    if tree is None:
        base = reasons.FairshareExplainer(
            capacity, jobs, pools[0][0], shares, ahead=reasons.LAS_AHEAD
        )
    else:
        base = reasons.TeamsExplainer(tree, shares)
    explain = GoodputExplainer(base, profiles, batches, shares, per_host, fairness, tree is None)
    return make_decision(
        POLICY, snapshot, jobs, targets, explain, shares, by_team, by_user, batches
    )


def _keep(members: Sequence[JobView], original: dict[str, JobView],
          profiles: dict[str, Profile], targets: dict[str, int], left: int,
          per_host: int) -> int:  # fmt: skip
    """Hysteresis: what no step wanted goes back, in the pool's order, to goodput jobs
    below the count they hold now (never above their max), so that no job shrinks only to
    leave slots idle (a fit that is not settled yet would otherwise shrink a job and grow
    it back). Never onto more hosts than its useful size needs (:func:`kept`): spanning one
    more host is a cost of the placement, not of an unsettled fit. Returns the slots left."""
    for view in members:
        if not left:
            break
        job = original[view.id]
        keep = kept(job, profiles[job.id], per_host)
        if job.goodput_mode and targets[job.id] < keep:
            more = min(left, keep - targets[job.id])
            targets[job.id] += more
            left -= more
    return left


def kept(job: JobView, prof: Profile, per_host: int) -> int:
    """The most slots hysteresis keeps a job on: those it holds now, up to its max, and,
    beyond its useful size, no more than the hosts of ``per_host`` slots that its useful
    size fills (``per_host`` 0: hosts unknown, no such bound)."""
    keep = min(job.current, job.max_workers, prof.top)
    if per_host > 0 and keep > prof.useful:
        keep = min(keep, -(-prof.useful // per_host) * per_host)  # whole hosts: >= useful
    return keep


def _profiles(
    jobs: list[JobView], capacity: int, per_host: int
) -> tuple[dict[str, Profile], list[JobView]]:
    """Each job's profile and the view fair share sees (``_capped``), for ``capacity`` and
    ``per_host``. Both are kept on the job's view (``JobView.derived``: a view never
    changes), so a scheduler that keeps a job's view while nothing about it changes works
    them out once; 10,000 of them took most of a decision."""
    profiles: dict[str, Profile] = {}
    capped: list[JobView] = []
    key = (POLICY, capacity, per_host)
    for job in jobs:
        known = cast("tuple[Profile, JobView] | None", job.derived.get(key))
        if known is None:
            prof = profile(job, capacity, per_host)
            known = (prof, _capped(job, prof))
            job.derived[key] = known
        profiles[job.id] = known[0]
        capped.append(known[1])
    return profiles, capped


def _capped(job: JobView, prof: Profile) -> JobView:
    """The job as fair share sees it: a goodput job's max lowered to its useful size."""
    if not job.goodput_mode:
        return job
    top = max(job.min_workers, min(prof.useful, job.max_workers))
    return job if top == job.max_workers else replace(job, max_workers=top)


def _shares(jobs: list[JobView], capacity: int) -> dict[str, float]:
    """Each job's exact weighted max-min share of ``capacity`` (fairshare's water level)."""
    level = fairshare.water_level(jobs, capacity)
    if level is None:
        return {job.id: float(job.max_workers) for job in jobs}
    num, den = level
    out = {}
    for job in jobs:  # fairshare.split, inlined: this runs for every job of every decision
        raw = num * job.priority
        if raw <= job.min_workers * den:
            out[job.id] = float(job.min_workers)
        elif raw >= job.max_workers * den:
            out[job.id] = float(job.max_workers)
        else:
            out[job.id] = raw / den
    return out


class GoodputExplainer:
    """The reason for a goodput-mode job: the batch and slots it gets and its goodput
    against what it runs at now ("batch 512 on 4 slots: goodput 1.90x of 256 on 2"), then
    the fair-share line (``base``) its share came from; a fixed-batch job's and a waiting
    job's line is ``base``'s alone."""

    def __init__(self, base: ReasonFn, profiles: dict[str, Profile],
                 batches: dict[str, int], shares: dict[str, float], per_host: int,
                 fairness: float, flat: bool) -> None:  # fmt: skip
        self.base = base
        self.profiles = profiles
        self.batches = batches
        self.shares = shares
        self.per_host = per_host
        self.flat = flat
        self.tail = f" (power mean p = {fairness:g} over {len(shares)} jobs' speedups)"

    def __call__(self, job: JobView, target: int) -> str:
        if not target or job.id not in self.batches:
            return self.base(job, target)
        # Flat: the fair share alone (the peers phrase adds nothing the batch does not say).
        line = (
            f"weighed by its fair share {self.shares[job.id]:.2f}{self.tail}"
            if self.flat
            else self.base(job, target)
        )
        prof = self.profiles[job.id]
        here = f"batch {self.batches[job.id]} on {target} slot{'s' if target != 1 else ''}"
        now = min(job.current, prof.top)
        if now and job.batch >= now and job.throughput is not None and job.batch_range:
            was, ref = self._at(job, now, job.batch), f"{job.batch} on {now}"
        elif now:
            was, ref = self._at(job, now, prof.batch[now]), f"{prof.batch[now]} on {now}"
        else:
            was, ref = self._at(job, 1, prof.batch[1]), f"{prof.batch[1]} on 1 slot"
        gets = self._at(job, target, self.batches[job.id])
        ratio = gets / was if was > 0 else math.inf
        return f"{here}: goodput {ratio:.2f}x of {ref}; {line}"

    def _at(self, job: JobView, learners: int, batch: int) -> float:
        """The job's goodput on ``learners`` at ``batch`` (its profile's where it has no
        model: linear, at its base batch)."""
        if job.throughput is None or job.batch_range is None:
            return self.profiles[job.id].rate[learners]
        return job_goodput(job, learners, batch, self.per_host)
