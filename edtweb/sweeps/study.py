"""A sweep's Optuna study: its storage, sampler, pruner and distributions.

The study lives in Optuna's own RDB storage (``EDT_SWEEP_STORAGE``; SQLite at
``EDT_DATA_DIR/sweeps.sqlite3`` by default), written by the active sweep driver alone:
every trial asked, each intermediate value reported, the pruners' rungs, each trial told. A
driver that restarts, or a standby that takes over, loads the study and goes on from there:
nothing lives only in its memory but the samplers' random state, reseeded from the trials
already asked so that no draw repeats (docs/architecture.md, "Sweeps").

Algorithms: ``random`` (RandomSampler), ``grid`` (GridSampler over every discrete value),
``tpe`` (TPESampler with a constant liar, for trials that run in parallel); ``asha`` and
``hyperband`` sample at random, as their papers do, and stop trials early with
SuccessiveHalvingPruner (asynchronous successive halving) or HyperbandPruner.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import optuna
from django.conf import settings

from edtweb.sweeps.models import Sweep
from edtweb.sweeps.space import Param, judged

log = logging.getLogger("edt.sweeps")
optuna.logging.set_verbosity(optuna.logging.WARNING)


@functools.cache
def storage(url: str | None = None) -> optuna.storages.BaseStorage:
    """The process's one Optuna storage (``EDT_SWEEP_STORAGE`` unless given)."""
    url = url or settings.EDT_SWEEP_STORAGE
    kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        kwargs["connect_args"] = {"timeout": 30}
    return optuna.storages.RDBStorage(url, engine_kwargs=kwargs)


def params(sweep: Sweep) -> tuple[Param, ...]:
    """The sweep's judged space, in its order."""
    return judged(plan_values(sweep), script=bool(sweep.wmla)).space


def plan_values(sweep: Sweep) -> dict[str, Any]:
    names = ("space", "objective", "direction", "algorithm", "max_trials", "max_parallel",
             "max_time", "reduction_factor", "min_resource")  # fmt: skip
    return {name: getattr(sweep, name) for name in names}


def distributions(sweep: Sweep) -> dict[str, optuna.distributions.BaseDistribution]:
    """name -> Optuna's distribution, for ``study.ask``."""
    found: dict[str, optuna.distributions.BaseDistribution] = {}
    for p in params(sweep):
        if p.type == "choice":
            found[p.name] = optuna.distributions.CategoricalDistribution(p.choices)
        elif p.type == "int":
            assert p.low is not None and p.high is not None
            found[p.name] = optuna.distributions.IntDistribution(
                int(p.low), int(p.high), step=int(p.step or 1)
            )
        else:
            assert p.low is not None and p.high is not None
            found[p.name] = optuna.distributions.FloatDistribution(
                p.low, p.high, log=p.type == "loguniform", step=p.step
            )
    return found


def min_resource(sweep: Sweep) -> int | None:
    """Steps a trial trains before its first rung: the sweep's, else one epoch, else (a
    trial shorter than ``reduction_factor`` epochs) a ninth of it; None when the trial's
    length is unknown (Optuna then estimates it from the first trial that completes)."""
    if sweep.min_resource:
        return int(sweep.min_resource)
    if not sweep.trial_steps:
        return None
    per_epoch = max(1, sweep.trial_steps // max(sweep.epochs, 1))
    if sweep.epochs >= sweep.reduction_factor:
        return per_epoch
    return max(1, sweep.trial_steps // sweep.reduction_factor**2)


def pruner(sweep: Sweep) -> optuna.pruners.BasePruner:
    first = min_resource(sweep)
    if sweep.algorithm == "asha":
        return optuna.pruners.SuccessiveHalvingPruner(
            min_resource=first if first is not None else "auto",
            reduction_factor=sweep.reduction_factor,
        )
    if sweep.algorithm == "hyperband":
        top = sweep.trial_steps or "auto"
        return optuna.pruners.HyperbandPruner(
            min_resource=first or 1, max_resource=top, reduction_factor=sweep.reduction_factor
        )
    return optuna.pruners.NopPruner()


class AskedGridSampler(optuna.samplers.GridSampler):
    """Optuna's grid sampler, asked and told rather than optimised: its ``after_trial``
    would stop an ``optimize`` loop once the grid is covered (``Study.stop``, which raises
    outside one); a grid sweep's budget is at most the grid's size, so nothing needs it."""

    def after_trial(self, study: optuna.Study, trial: optuna.trial.FrozenTrial,
                    state: optuna.trial.TrialState, values: Any) -> None:  # fmt: skip
        return None


def sampler(sweep: Sweep, asked: int) -> optuna.samplers.BaseSampler:
    """The sweep's sampler, seeded by the sweep's seed and the trials ``asked`` already (a
    driver that takes over draws on, never the same values again), folded into the 32 bits
    Optuna's samplers take."""
    seed = (sweep.seed * 100_003 + asked) % 2**32
    if sweep.algorithm == "grid":
        grid = {p.name: p.grid() or [] for p in params(sweep)}
        return AskedGridSampler(grid, seed=seed)
    if sweep.algorithm == "tpe":
        startup = min(10, max(2, sweep.max_trials // 3))
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup,
                                          constant_liar=True)  # fmt: skip
    return optuna.samplers.RandomSampler(seed=seed)


def load(sweep: Sweep) -> optuna.Study:
    """The sweep's study, created on first use, with its sampler and pruner."""
    study = optuna.create_study(storage=storage(), study_name=sweep.study_name,
                                direction=sweep.direction, load_if_exists=True,
                                sampler=optuna.samplers.RandomSampler(),
                                pruner=optuna.pruners.NopPruner())  # fmt: skip
    study.sampler = sampler(sweep, len(study.get_trials(deepcopy=False)))
    study.pruner = pruner(sweep)
    return study
