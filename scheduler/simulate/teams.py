"""Teams in the simulator: a trace's virtual clusters as teams, hierarchical fair share
against three baselines, and what they are judged by.

**Teams.** One team per virtual cluster (the trace's ``cluster`` column) of the simulated
jobs (:func:`vc_teams`): its guarantee is in proportion to the VC's GPU demand over those
jobs (Σ duration x num_gpus), every VC at least 1 slot, the guarantees adding up to the
cluster (1 each, the rest by largest remainder, ties by id); its weight the default 1, so
what a team lends goes equally to the teams that ask for more (or, with ``weights=
"guarantee"``, in proportion to their guarantees). No limits. One user per team (the trace
has no users).

**Variants** (the same jobs, the same pauses; :data:`VARIANTS`):

- ``hierarchical``: EDT's fairshare with the teams (guarantees up to demand, the rest by
  weight, reclaimed at once by shrinking in place or suspending, which checkpoints first:
  nothing lost);
- ``quota-preempt``: quotas with borrowing and kill-preemption as Kueue does it
  (:mod:`scheduler.policies.quota`): rigid gangs, nominal quota = guarantee, a team under
  its quota preempts borrowing gangs, and a preempted gang is killed: it restarts from its
  last checkpoint (one every ``checkpoint_every`` seconds of running) after the restart
  pause, the work since then lost;
- ``static``: a static partition: fairshare with every team's limit at its guarantee (no
  borrowing; elastic within the team's slots);
- ``fairshare-flat``: today's per-job fair share, teams ignored.

**Judged by** (:class:`Ledger`, an observer of every decision): per team and overall, the
average and p99 JCT; utilisation (slot-time held over slots x makespan); the *share
deficit*, slot-hours a team with demand spent below the whole slots of its entitlement,
``⌊min(demand, entitlement)⌋`` (its entitlement: hierarchical fair share of the cluster
for what the team's active jobs ask, :func:`scheduler.policies.entitlements`, with the
teams above whatever the variant runs); Jain's index of (slots held / entitlement) over
the teams with demand, averaged over the time the cluster is saturated (the active jobs
ask for at least every slot).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from scheduler.policies import JobView, Snapshot, Team, entitlements
from scheduler.simulate import run
from scheduler.simulate.engine import Config, JobResult, SimJob
from scheduler.simulate.metrics import Summary, jain, percentile, summarise
from scheduler.simulate.trace import TraceJob, gpu_time

VARIANTS = ("hierarchical", "quota-preempt", "static", "fairshare-flat")
BASELINE = "quota-preempt"  # the kill-preemption baseline the goals are relative to
CHECKPOINT_EVERY = 1800.0


WEIGHTS = ("one", "guarantee")


def vc_teams(trace: Sequence[TraceJob], gpus: int, weights: str = "one") -> tuple[Team, ...]:
    """One team per VC of ``trace``, guarantees in proportion to GPU demand, weights 1 or
    the guarantee (see the module)."""
    if weights not in WEIGHTS:
        raise ValueError(f"weights: one of {list(WEIGHTS)}")
    demand: dict[str, float] = {}
    for job in trace:
        demand[job.vc] = demand.get(job.vc, 0.0) + gpu_time(job)
    if "" in demand:
        raise ValueError("some jobs have no virtual cluster: the trace needs a cluster column")
    if len(demand) > gpus:
        raise ValueError(f"{len(demand)} virtual clusters do not each get a slot of {gpus}")
    total, rest = sum(demand.values()), gpus - len(demand)
    exact = {vc: rest * value / total if total else 0.0 for vc, value in demand.items()}
    share = {vc: 1 + math.floor(value) for vc, value in exact.items()}
    left = gpus - sum(share.values())
    for vc in sorted(exact, key=lambda vc: (-(exact[vc] % 1), vc))[:left]:
        share[vc] += 1
    return tuple(
        Team(vc, weight=share[vc] if weights == "guarantee" else 1, guarantee=share[vc],
             name=f"vc {vc}")
        for vc in sorted(share)
    )  # fmt: skip


def config_of(variant: str, teams: tuple[Team, ...], base: Config) -> Config:
    """The simulator's configuration of one of :data:`VARIANTS`."""
    if variant == "hierarchical":
        return replace(base, policy="fairshare", teams=teams, kill=False)
    if variant == "quota-preempt":
        return replace(base, policy="quota-preempt", teams=teams, kill=True)
    if variant == "static":
        walls = tuple(replace(team, limit=team.guarantee) for team in teams)
        return replace(base, policy="fairshare", teams=walls, kill=False)
    if variant == "fairshare-flat":
        return replace(base, policy="fairshare", teams=(), kill=False)
    raise ValueError(f"unknown variant {variant!r}; one of {list(VARIANTS)}")


@dataclass
class Ledger:
    """Observes every decision (``Simulator``'s observer): per team the slot-seconds held,
    the share deficit, and Jain's index while saturated (see the module); and work
    conservation: slot-seconds free while a job that fits them waits (``idle_waiting``;
    those a team's limit keeps from it, in ``limited`` by team), and slot-seconds a team
    holds beyond its running jobs' minimums while another team's job waits for its minimum
    (``beyond_min``). ``rules``: the teams whose limits the variant runs under (default
    ``teams``). A simulated job's minimum is 1 slot."""

    teams: tuple[Team, ...]
    gpus: int
    rules: tuple[Team, ...] | None = None
    held: dict[str, float] = field(default_factory=dict)  # team -> slot-seconds
    deficit: dict[str, float] = field(default_factory=dict)  # team -> slot-seconds
    saturated: float = 0.0  # seconds
    jain_time: float = 0.0  # ∫ Jain dt while saturated
    idle_waiting: float = 0.0  # slot-seconds
    limited: dict[str, float] = field(default_factory=dict)  # limiting team -> slot-seconds
    beyond_min: float = 0.0  # slot-seconds
    _last: float | None = None
    _now: tuple[dict[str, int], dict[str, float], bool] = ({}, {}, False)
    _slack: tuple[int, dict[str, int], int] = (0, {}, 0)  # idle, limited, beyond
    _cache: dict[tuple[tuple[str, int], ...], dict[str, float]] = field(default_factory=dict)

    def __call__(self, now: float, active: Sequence[tuple[SimJob, int]]) -> None:
        if self._last is not None and now > self._last:
            self._close(now - self._last)
        self._last = now
        slots: dict[str, int] = {}
        demand: dict[str, int] = {}
        running: dict[str, int] = {}
        waiting: dict[str, int] = {}  # team -> Σ max_workers of its waiting jobs
        for job, held in active:
            demand[job.team] = demand.get(job.team, 0) + job.max_workers
            if held:
                slots[job.team] = slots.get(job.team, 0) + held
                running[job.team] = running.get(job.team, 0) + 1
            else:
                waiting[job.team] = waiting.get(job.team, 0) + job.max_workers
        self._now = (slots, self._entitled(demand), sum(demand.values()) >= self.gpus)
        self._slack = self._conservation(slots, running, waiting)

    def _conservation(self, slots: dict[str, int], running: dict[str, int],
                      waiting: dict[str, int]) -> tuple[int, dict[str, int], int]:  # fmt: skip
        """(slots free beside a waiting job that fits them, slots free that only a limit
        keeps from a waiting job, by the limiting team; slots held beyond minimums by teams
        while another team's job waits)."""
        rules = {team.id: team for team in (self.rules if self.rules is not None else self.teams)}
        subtree: dict[str, int] = {}
        for team, held in slots.items():
            at = team
            while at in rules:
                subtree[at] = subtree.get(at, 0) + held
                at = rules[at].parent
        free = self.gpus - sum(slots.values())
        fits, limited = 0, dict[str, int]()
        for team, asked in sorted(waiting.items()):
            room, by = asked, ""
            at = team
            while at in rules:
                limit = rules[at].limit
                if limit is not None and limit - subtree.get(at, 0) < room:
                    room, by = max(0, limit - subtree.get(at, 0)), at
                at = rules[at].parent
            fits += room
            if by and asked > room:
                limited[by] = limited.get(by, 0) + asked - room
        idle = min(free, fits)
        held_out: dict[str, int] = {}
        left = free - idle
        for team, count in sorted(limited.items()):
            if left > 0:
                held_out[team] = min(left, count)
                left -= held_out[team]
        beyond = sum(
            held - running.get(team, 0)
            for team, held in slots.items()
            if any(other != team for other in waiting)
        )
        return idle, held_out, beyond

    def _entitled(self, demand: dict[str, int]) -> dict[str, float]:
        key = tuple(sorted(demand.items()))
        known = self._cache.get(key)
        if known is None:
            views = [JobView(f"demand:{team}", top, team=team) for team, top in key]
            by_team, _ = entitlements(Snapshot(self.gpus, views, self.teams))
            known = self._cache[key] = {team: by_team[team] for team, _ in key}
        return known

    def _close(self, seconds: float) -> None:
        slots, entitled, saturated = self._now
        idle, limited, beyond = self._slack
        self.idle_waiting += idle * seconds
        for team, count in limited.items():
            self.limited[team] = self.limited.get(team, 0.0) + count * seconds
        self.beyond_min += beyond * seconds
        for team, value in entitled.items():
            held = slots.get(team, 0)
            self.held[team] = self.held.get(team, 0.0) + held * seconds
            below = math.floor(value + 1e-9) - held
            if below > 0:
                self.deficit[team] = self.deficit.get(team, 0.0) + below * seconds
        if saturated and entitled:
            ratios = [slots.get(team, 0) / value for team, value in entitled.items() if value]
            self.saturated += seconds
            self.jain_time += jain(ratios) * seconds

    @property
    def jain(self) -> float:
        """Jain's index of held / entitled over teams with demand, time-averaged while
        saturated (1.0 if never saturated)."""
        return self.jain_time / self.saturated if self.saturated else 1.0


@dataclass(frozen=True, slots=True)
class TeamStats:
    team: str
    jobs: int
    avg_jct: float
    p99_jct: float
    held_hours: float  # slot-hours held
    deficit_hours: float  # slot-hours below ⌊entitlement⌋ with demand


@dataclass(frozen=True, slots=True)
class Outcome:
    variant: str
    summary: Summary
    teams: list[TeamStats]
    deficit_hours: float
    jain: float
    saturated_hours: float
    preemptions: int
    lost_hours: float  # slot-hours of work done and lost to kills
    seconds: float  # wall-clock time of the simulation
    decisions: int
    idle_hours: float = 0.0  # slot-hours free while a job that fits them waits
    limited_hours: dict[str, float] = field(default_factory=dict)  # free, held out by a limit
    beyond_hours: float = 0.0  # slot-hours beyond minimums while another team's job waits


def outcome(variant: str, results: Sequence[JobResult], ledger: Ledger, gpus: int,
            seconds: float, decisions: int) -> Outcome:  # fmt: skip
    by_team: dict[str, list[JobResult]] = {}
    for result in results:
        by_team.setdefault(result.job.team, []).append(result)
    stats = [
        TeamStats(
            team,
            len(mine),
            statistics.fmean(r.jct for r in mine),
            percentile([r.jct for r in mine], 0.99),
            ledger.held.get(team, 0.0) / 3600,
            ledger.deficit.get(team, 0.0) / 3600,
        )
        for team, mine in sorted(by_team.items())
    ]
    return Outcome(
        variant,
        summarise(results, gpus),
        stats,
        sum(ledger.deficit.values()) / 3600,
        ledger.jain,
        ledger.saturated / 3600,
        sum(r.preemptions for r in results),
        sum(r.lost for r in results) / 3600,
        seconds,
        decisions,
        ledger.idle_waiting / 3600,
        {team: value / 3600 for team, value in sorted(ledger.limited.items())},
        ledger.beyond_min / 3600,
    )


def simulate_teams(jobs: Sequence[SimJob], teams: tuple[Team, ...], base: Config,
                   variants: Iterable[str] = VARIANTS) -> dict[str, Outcome]:  # fmt: skip
    """Each variant on ``jobs`` (their ``team`` a team of ``teams``); see the module."""
    outcomes = {}
    for variant in variants:
        config = config_of(variant, teams, base)
        ledger = Ledger(teams, base.gpus, config.teams)
        result = run(jobs, config, ledger)
        outcomes[variant] = outcome(
            variant, result.results, ledger, base.gpus, result.seconds, result.decisions
        )
    return outcomes


def goals(outcomes: dict[str, Outcome]) -> list[tuple[str, float, str, bool]]:
    """(what, measured, goal, met) for the hierarchical variant against the baselines."""
    ours, kill = outcomes["hierarchical"], outcomes[BASELINE]
    ratio = ours.summary.avg_jct / kill.summary.avg_jct
    rows = [
        ("avg JCT / quota-preempt's", ratio, "≤ 1", ratio <= 1.0),  # issue 41
        ("avg JCT / quota-preempt's (issue 27)", ratio, "≤ 0.7", ratio <= 0.7),
        (
            "share deficit / quota-preempt's",
            ours.deficit_hours / kill.deficit_hours if kill.deficit_hours else 0.0,
            "≤ 0.1",
            ours.deficit_hours <= 0.1 * kill.deficit_hours,
        ),
        ("Jain's index while saturated", ours.jain, "≥ 0.95", ours.jain >= 0.95),
        (
            "idle while a fitting job waits, slot-h",
            ours.idle_hours,
            "≤ 0",
            ours.idle_hours <= 0.0,
        ),
    ]
    if "fairshare-flat" in outcomes:
        flat = outcomes["fairshare-flat"].summary.utilisation
        ratio = ours.summary.utilisation / flat if flat else 1.0
        rows.append(("utilisation / per-job fair share's", ratio, "≥ 0.98", ratio >= 0.98))
    return rows


def idle(outcome: Outcome) -> str:
    """Idle-while-waiting slot-hours, and those each limit held out: "0.0 (+2.5 limit x)"."""
    limits = ", ".join(f"{v:,.1f} limit {t}" for t, v in outcome.limited_hours.items() if v)
    return f"{outcome.idle_hours:,.1f}" + (f" (+{limits})" if limits else "")


def hours(seconds: float) -> str:
    return f"{seconds / 3600:,.2f}"


def tables(outcomes: dict[str, Outcome], teams: tuple[Team, ...]) -> list[str]:
    """Markdown: overall per variant, the goals, and per team per variant."""
    lines = [
        "| variant | jobs | avg JCT h | p99 JCT h | util | share deficit slot-h | "
        "Jain (saturated) | saturated h | runs stopped | work lost slot-h | idle while waiting "
        "slot-h | beyond min while another team waits slot-h | decisions | sim s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for o in outcomes.values():
        s = o.summary
        lines.append(
            f"| {o.variant} | {s.jobs:,} | {hours(s.avg_jct)} | {hours(s.p99_jct)} | "
            f"{s.utilisation:.1%} | {o.deficit_hours:,.1f} | {o.jain:.3f} | "
            f"{o.saturated_hours:,.1f} | {o.preemptions:,} | {o.lost_hours:,.1f} | "
            f"{idle(o)} | {o.beyond_hours:,.1f} | {o.decisions:,} | {o.seconds:.1f} |"
        )
    if "hierarchical" in outcomes and BASELINE in outcomes:
        lines += ["", "| goal (hierarchical) | measured | goal | met |", "|---|---:|---|---|"]
        for what, value, goal, met in goals(outcomes):
            lines.append(f"| {what} | {value:.3f} | {goal} | {'✓' if met else '✗'} |")
    guarantee = {team.id: team.guarantee for team in teams}
    head = " | ".join(f"{v}" for v in outcomes)
    lines += [
        "",
        "Per team: avg / p99 JCT h; slot-h held (its utilisation: held / (guarantee x "
        "makespan)); share deficit slot-h.",
        "",
        f"| team | guarantee | jobs | {head} |",
        "|---|---:|---:|" + "---|" * len(outcomes),
    ]
    per = {v: {t.team: t for t in o.teams} for v, o in outcomes.items()}
    first = next(iter(outcomes.values()))
    for stats in first.teams:
        cells = []
        for variant in outcomes:
            t = per[variant][stats.team]
            span = outcomes[variant].summary.makespan / 3600 * guarantee.get(stats.team, 0)
            use = f"{t.held_hours / span:.0%}" if span else "-"
            cells.append(
                f"{hours(t.avg_jct)} / {hours(t.p99_jct)}; {t.held_hours:,.0f} ({use}); "
                f"{t.deficit_hours:,.1f}"
            )
        lines.append(
            f"| {stats.team} | {guarantee.get(stats.team, 0)} | {stats.jobs:,} | "
            f"{' | '.join(cells)} |"
        )
    return lines
