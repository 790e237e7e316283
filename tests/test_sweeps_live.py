"""Sweeps through the ``edt`` CLI against the run's live EDT (``manage.py edt_run``: web,
scheduler, metrics consumer, sweep driver, 2 CPU slots; tests/harness/stack.py), with a
native model whose width is a hyperparameter (tests/models/sweep_mlp.py):

- random search: the budget's trials, each a job of the owner's with its values reaching
  the model (its log says its width), a width the model refuses failing that trial with
  the model's own error while the sweep goes on, the best trial reported;
- ASHA: trials behind at a rung stopped at once ("pruned by ASHA at step N") before their
  last step, and trials asked after a prune training on the slots it freed.

The sampler's seed is chosen here (the sampler's own draws, asked in advance) so that the
trials hold what each test needs.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import optuna
import pytest

from edtweb.sweeps import study
from edtweb.sweeps.models import Sweep
from tests.harness.processes import PROJECT_DIR
from tests.harness.stack import LiveEdt, dataset_archive
from tests.harness.waiting import wait_for

pytestmark = pytest.mark.timeout(900)
USER = "gina"  # a user of this module's own: the live EDT is shared with other modules
MODEL = PROJECT_DIR / "tests" / "models" / "sweep_mlp.py"


def seed_where(space: dict[str, Any], trials: int, wanted: Callable[[list[dict[str, Any]]], bool],
               algorithm: str = "random") -> int:  # fmt: skip
    """A sweep seed whose first ``trials`` draws (the driver's sampler, asked in order) are
    ``wanted``."""
    for seed in range(500):
        sweep = Sweep(space=space, objective="loss", direction="minimize", algorithm=algorithm,
                      max_trials=trials, max_parallel=1, max_time=0, reduction_factor=3,
                      min_resource=0, seed=seed)  # fmt: skip
        asked = optuna.create_study(sampler=study.sampler(sweep, 0))
        if wanted([asked.ask(study.distributions(sweep)).params for _ in range(trials)]):
            return seed
    raise AssertionError("no seed draws what the test needs")


@pytest.fixture(scope="module")
def ready(live: LiveEdt) -> LiveEdt:
    """Carol, logged in, with a small dataset and the sweep's model."""
    live.login(USER)
    archive = dataset_archive(live.tmp / "sweeps", train=256, test=64)
    done = live.edt(USER, "datasets", "upload", str(archive), "--name", "sweepdata", timeout=300)
    assert done.returncode == 0, done.stderr
    model = live.json(USER, "models", "upload", str(MODEL), "--name", "sweepmlp", timeout=300)
    assert model["status"] == "VALID", model
    return live


def create(live: LiveEdt, yaml: str, space: dict[str, Any], *options: str) -> dict[str, Any]:
    """A sweep of the space written in ``yaml`` (which reads as ``space``), created through
    the CLI."""
    path = live.tmp / "space.yaml"
    path.write_text(yaml)
    made: dict[str, Any] = live.json(USER, "sweep", "create", "--space", str(path), "--model",
                                     "sweepmlp", "--dataset", "sweepdata", *options)  # fmt: skip
    assert made["state"] == "QUEUED" and made["space"] == space
    return made


def ended(live: LiveEdt, pk: int, timeout: float = 400) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        sweep: dict[str, Any] = live.json(USER, "sweep", "show", str(pk))
        return sweep if sweep["state"] not in ("QUEUED", "RUNNING") else None

    def seen() -> str:
        return f"sweep {pk} to end; it is {live.edt(USER, 'sweep', 'show', str(pk)).stdout}"

    found: dict[str, Any] = wait_for(done, timeout, seen, step=1.0)
    return found


def at(text: str | None) -> datetime:
    assert text is not None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_a_random_search_runs_its_budget_and_reports_its_best(ready: LiveEdt) -> None:
    live = ready
    space = {"lr": {"type": "loguniform", "low": 0.005, "high": 0.1},
             "width": {"type": "choice", "choices": [-1, 8, 16]}}  # fmt: skip
    seed = seed_where(space, 4, lambda drawn: [d["width"] for d in drawn].count(-1) == 1)
    yaml = "lr: {type: loguniform, low: 0.005, high: 0.1}\nwidth:\n  type: choice\n" \
           "  choices: [-1, 8, 16]\n"  # fmt: skip
    made = create(live, yaml, space, "--objective", "loss", "--algorithm", "random",
                  "--trials", "4", "--parallel", "2", "--epochs", "1", "--batch-size", "32",
                  "--max-workers", "2", "--seed", str(seed), "--name", "random widths")  # fmt: skip
    sweep = ended(live, made["id"])
    assert sweep["state"] == "COMPLETED", sweep
    trials = sweep["trials"]
    assert [t["number"] for t in trials] == [0, 1, 2, 3]
    assert sweep["progress"] == {"done": 4, "total": 4, "running": 0, "completed": 3,
                                 "pruned": 0, "failed": 1, "fraction": 1.0}  # fmt: skip
    [refused] = [t for t in trials if t["hparams"]["width"] == -1]
    assert (refused["state"], refused["trial_state"]) == ("FAILED", "FAIL")
    assert "width must be at least 1, not -1" in refused["note"], refused
    done = [t for t in trials if t["trial_state"] == "COMPLETE"]
    for trial in done:
        job = live.json(USER, "jobs", "show", str(trial["job"]))
        assert (job["state"], job["owner"], job["epochs"]) == ("COMPLETED", USER, 1)
        assert job["lr"] == pytest.approx(trial["hparams"]["lr"])
        logs = live.edt(USER, "logs", str(trial["job"])).stdout
        assert f"building an MLP of width {trial['hparams']['width']}" in logs
    best = min(done, key=lambda t: t["objective"])
    assert sweep["best"]["job"] == best["job"] and sweep["best"]["objective"] == best["objective"]
    shown = live.edt(USER, "sweep", "show", str(made["id"]))
    assert shown.returncode == 0 and f"trial {best['number']} (job {best['job']})" in shown.stdout
    listed = live.edt(USER, "sweep", "list")
    assert "random widths" in listed.stdout and "4/4" in listed.stdout
    compared = live.edt(USER, "compare", *(str(t["job"]) for t in done))
    assert compared.returncode == 0 and "* lr" in compared.stdout, compared.stdout
    assert "= loss" in compared.stdout


def test_asha_stops_the_trials_behind_and_hands_their_slots_on(ready: LiveEdt) -> None:
    live = ready
    space = {"lr": {"type": "choice", "choices": [0.00001, 0.1]},
             "width": {"type": "choice", "choices": [16, 32]}}  # fmt: skip

    def mixed(drawn: list[dict[str, Any]]) -> bool:  # a good trial first, then some bad
        lrs = [d["lr"] for d in drawn]
        return lrs[0] == 0.1 and lrs[1:].count(0.00001) >= 3

    seed = seed_where(space, 6, mixed)
    yaml = "lr: {type: choice, choices: [0.00001, 0.1]}\nwidth: {type: choice, choices: " \
           "[16, 32]}\n"  # fmt: skip
    made = create(live, yaml, space, "--objective", "test_loss", "--algorithm", "asha", "--trials",
                  "6", "--parallel", "2", "--epochs", "3", "--batch-size", "16",
                  "--max-workers", "2", "--seed", str(seed), "--name", "asha")  # fmt: skip
    sweep = ended(live, made["id"], timeout=600)
    assert sweep["state"] == "COMPLETED", sweep
    trials = sweep["trials"]
    assert len(trials) == 6 and sweep["progress"]["done"] == 6
    pruned = [t for t in trials if t["trial_state"] == "PRUNED"]
    assert pruned, f"no trial was pruned: {trials}"
    for trial in pruned:
        assert trial["state"] == "STOPPED"
        assert trial["steps_done"] < trial["total_steps"], trial  # ended early
        assert trial["note"].startswith("pruned by ASHA at step "), trial
        events = live.json(USER, "jobs", "events", str(trial["job"]))
        assert [e["message"] for e in events if e["kind"] == "stopped"] == [trial["note"]]
    # The slots a prune freed went to trials asked after it (in the same round of the
    # driver: a moment before the pruned job's stop), which trained to their end or to their
    # own prune.
    first_prune = min(at(t["finished_at"]) for t in pruned)
    later = [t for t in trials if (first_prune - at(t["created_at"])).total_seconds() < 1.0]
    assert later and all(t["steps_done"] > 0 for t in later), trials
    done = [t for t in trials if t["trial_state"] == "COMPLETE"]
    best = min(done, key=lambda t: t["objective"])
    assert sweep["best"]["job"] == best["job"] and best["hparams"]["lr"] == 0.1
