"""A new user's journey without its frictions: the Train form offers the group's slots and
folds what a first job does not need, the ETA holds still at a steady size, the log opens
on rank 0's learner, a sweep draws a seed of its own and shows it, and on a phone every
page is in reach and the priority moves in useful steps."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from edtweb.sweeps import services as sweeps
from edtweb.tenancy import services as tenancy
from edtweb.training import history
from edtweb.training.models import Job
from edtweb.training.status import PACE_RECORDS, eta_from
from scheduler.store import Store
from tests.browser import browser_page, log_in_as
from tests.harness.sweeps import own_storage, sweep_inputs

pytestmark = pytest.mark.django_db


@pytest.fixture
def six_slots(store: Store) -> Any:
    """Six alive slots (group default) on the test's Redis, forgotten after."""
    ids = [store.register_slot("fr", i, "cpu", pid=1, host_slots=6) for i in range(6)]
    for slot in ids:
        store.heartbeat(slot, {"kind": "cpu"}, ttl=60)
    yield ids
    for slot in ids:
        store.forget_slot(slot)


def train_form(user: Any) -> Any:
    client = Client()
    client.force_login(user)
    return client.get("/train/")


@pytest.mark.redis("private_redis")
def test_max_workers_defaults_to_the_groups_slots_capped_by_the_teams_limit(
    six_slots: list[str], alice: Any, bob: Any
) -> None:
    assert train_form(alice).context["form"]["max_workers"].value() == 6
    team = tenancy.save_team(None, {"name": "small", "limit": 4})
    tenancy.set_member(team, bob)  # his default team
    assert train_form(bob).context["form"]["max_workers"].value() == 4


def test_the_train_form_folds_the_advanced_fields_and_opens_them_on_an_error(
    redis_server: Any, alice: Any
) -> None:
    page = train_form(alice).content.decode()
    folded = page[page.index('<details class="advanced" id="advanced">') :].split("</details>")[0]
    for name in ("batch_size", "lr", "priority", "min_workers", "checkpoint_every"):
        assert f'id="id_{name}"' in folded, name
    for name in ("model", "dataset", "epochs", "max_workers"):
        assert f'id="id_{name}"' not in folded and f'id="id_{name}"' in page, name
    client = Client()
    client.force_login(alice)
    wrong = client.post("/train/", {"lr": "-1"}).content.decode()
    assert '<details class="advanced" id="advanced" open>' in wrong


def test_the_eta_holds_still_at_a_steady_size_across_an_evaluation() -> None:
    """Four workers, 0.2 s an iteration, a 20 s evaluation every 500 iterations: looked at
    every 45 iterations (9 s), an evaluation's pause coming into or out of the window
    included, the ETA moves by less than a tenth (the last 50 iterations' pace swung it
    fourfold)."""
    times, at = [], 0.0
    for step in range(6000):
        at += 0.2 + (20.0 if step and step % 500 == 0 else 0.0)
        times.append((step, at, 4))
    etas = []
    for now in range(2500, 6000, 45):
        recent = list(reversed(times[max(0, now - PACE_RECORDS) : now]))
        etas.append(eta_from(recent, 20_000))
    moves = [abs(b - a) / a for a, b in itertools.pairwise(etas) if a and b]
    assert max(moves) < 0.1, max(moves)


def test_a_new_size_gets_its_own_pace_once_it_has_ten_iterations() -> None:
    slow = [(s, s * 1.0, 1) for s in range(100)]
    fast = [(100 + s, 100 + s * 0.25, 4) for s in range(1, 21)]
    recent = list(reversed(slow + fast))
    assert eta_from(recent, 1120) == pytest.approx((1120 - 120) * 0.25, rel=0.01)


def test_the_log_opens_on_rank_0s_learner(alice: Any) -> None:
    job = Job.objects.create(owner=alice, name="logs")
    job.events.create(kind="generation", message="", data={"workers": 1, "members": ["a.0"]})
    job.events.create(kind="generation", message="", data={"workers": 2,
                                                           "members": ["b.1", "a.0"]})  # fmt: skip
    assert history.lead_log(job, ["a.0", "b.1"]) == "b.1"
    assert history.lead_log(job, ["a.0"]) == "a.0"  # its log not there yet: the first
    assert history.lead_log(job, []) == ""


def test_a_sweep_without_a_seed_draws_its_own_and_shows_it(
    tmp_path: Path, settings: Any, store: Store, alice: Any
) -> None:
    inputs = sweep_inputs(alice)
    values = {"objective": "loss", "direction": "minimize", "algorithm": "random",
              "max_trials": 2, "epochs": 1, "batch_size": 32,
              "space": {"lr": {"type": "loguniform", "low": 1e-4, "high": 1e-1}}}  # fmt: skip
    with own_storage(tmp_path, settings):
        made = [sweeps.create_sweep(alice, inputs["model"], inputs["dataset"], values)
                for _ in range(2)]  # fmt: skip
        given = sweeps.create_sweep(alice, inputs["model"], inputs["dataset"], values, seed=7)
    assert made[0].seed != made[1].seed and given.seed == 7  # 1 in 2^31 to be equal
    client = Client()
    client.force_login(alice)
    page = client.get(f"/sweeps/{made[0].pk}/").content.decode()
    assert re.search(rf'id="sweep-seed"[^>]*>{made[0].seed}<', page)


@pytest.mark.browser
def test_on_a_phone_every_page_is_in_reach_and_the_priority_steps_by_a_hundred(
    live_server: Any, redis_server: Any, django_user_model: Any
) -> None:
    root = django_user_model.objects.create_user("root", password="root-pass-1", is_staff=True)
    job = Job.objects.create(owner=root, name="steps", max_workers=2)
    with browser_page() as page:
        page.set_viewport_size({"width": 390, "height": 844})
        log_in_as(page, live_server.url, "root", "root-pass-1")
        links = page.locator("nav[aria-label=main] a")
        names = links.all_inner_texts()
        assert {"Usage", "Teams", "Groups"} <= set(names), names
        for index in range(links.count()):
            box = links.nth(index).bounding_box()
            assert box and box["x"] >= 0 and box["x"] + box["width"] <= 390, (names[index], box)
        page.goto(f"{live_server.url}/jobs/{job.pk}/")
        page.focus("#priority")
        page.keyboard.press("ArrowRight")
        assert page.input_value("#priority") == "5100"
        assert page.input_value("#priority-number") == "5100"
        page.keyboard.press("Shift+ArrowLeft")
        assert page.input_value("#priority") == "4000"
        page.fill("#priority-number", "4321")
        assert page.input_value("#priority") == "4321"
