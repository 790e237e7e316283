"""In Chromium and through `edt`: a member opens the Shares page from the menu and reads
why their team has its share (guarantee, fair share, held, borrowed, their own part, who
waits for what) and nothing of another team; `edt share` and `edt why` print the same
numbers from the API. The page fits a phone and passes axe.

The scheduler is not run: its own code decides over the jobs in the database and
publishes the shares entry and the allocation record, as the live scheduler does.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from edtweb.tenancy import services as tenancy
from edtweb.training.models import Job
from protocol.keys import SHARES_KEY
from scheduler.store import AllocationRecord, Store
from tests.browser import browser_page, log_in_as
from tests.harness.pages import looked_over
from tests.harness.processes import PROJECT_DIR
from tests.harness.shares import publish
from tests.harness.stack import edt_command

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def published(store: Store, django_user_model: Any) -> Iterator[dict[str, int]]:
    """Alice's job holds 6 of 8 slots in team vision (guarantee 2) while Lena's, asking 8
    at least, waits; Olga's nlp job holds 2. Root is staff."""
    make = django_user_model.objects.create_user
    make("root", password="root-pass-1", is_staff=True)
    alice, lena = make("alice", password="alice-pass-1"), make("lena", password="lena-pass-1")
    olga = make("olga", password="olga-pass-1")
    vision = tenancy.save_team(None, {"name": "vision", "guarantee": 2})
    nlp = tenancy.save_team(None, {"name": "nlp", "guarantee": 4, "weight": 2})
    for user in (alice, lena):
        tenancy.set_member(vision, user)
    tenancy.set_member(nlp, olga)
    new = Job.objects.create
    a = new(owner=alice, name="alice-run", team=vision, state=Job.State.RUNNING, max_workers=8)
    w = new(owner=lena, name="lena-wide", team=vision, min_workers=8, max_workers=8)
    o = new(owner=olga, name="olga-run", team=nlp, state=Job.State.RUNNING, max_workers=2)
    publish(store, 8, {a.pk: 6, o.pk: 2})
    yield {"waiting": w.pk}
    store.save_allocations(AllocationRecord(), ttl=0.001)
    store.r.delete(SHARES_KEY)


def edt(home: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDT_")}
    env["XDG_CONFIG_HOME"] = str(home)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_DIR), env.get("PYTHONPATH")]))
    return subprocess.run([*edt_command(), *args], input=stdin, env=env, cwd=home,
                          capture_output=True, text=True, timeout=60)  # fmt: skip


@pytest.mark.browser
def test_a_member_reads_why_their_team_has_its_share_on_the_page_and_in_edt(
    live_server: Any, published: dict[str, int], tmp_path: Path
) -> None:
    with browser_page() as page:
        log_in_as(page, live_server.url, "alice", "alice-pass-1")
        page.click("nav >> text=Shares")
        expect(page.locator("nav a.active")).to_have_text("Shares")
        team = page.locator(".team-share[data-team='vision']")
        row = team.locator(".share-lines tr[data-group='default']")
        expect(row.locator(".held")).to_have_text("6")
        expect(row.locator(".borrowed")).to_have_text("4")
        expect(row.locator(".lent")).to_have_text("0")
        expect(team.locator(".share-users tr.chosen")).to_contain_text("alice (you)")
        waiting = team.locator(f".share-waiting tr[data-job='{published['waiting']}']")
        expect(waiting.locator(".reason")).to_contain_text("does not fit")
        expect(page.locator(".team-share")).to_have_count(1)  # vision alone: not nlp
        assert "olga-run" not in page.content()

    home = tmp_path / "alice"
    home.mkdir()
    login = ["login", "--url", live_server.url, "--user", "alice", "--password-stdin"]
    assert edt(home, *login, stdin="alice-pass-1\n").returncode == 0
    shown = edt(home, "share")
    assert shown.returncode == 0, shown.stderr
    assert "team vision:" in shown.stdout and "nlp" not in shown.stdout, shown.stdout
    assert "lena-wide" in shown.stdout and "does not fit" in shown.stdout, shown.stdout
    why = json.loads(edt(home, "--json", "why", str(published["waiting"])).stdout)
    assert (why["share"]["held"], why["share"]["borrowed"], why["share"]["guarantee"]) == (6, 4, 2)
    refused = edt(home, "share", "nlp")
    assert refused.returncode != 0 and "no team nlp" in refused.stderr, refused


@pytest.mark.browser
def test_the_shares_page_fits_a_phone_and_passes_axe(
    live_server: Any, published: dict[str, int]
) -> None:
    with browser_page() as page:
        log_in_as(page, live_server.url, "root", "root-pass-1")
        found = looked_over(page, live_server.url, {"shares": "/shares/"})
    assert not found, "\n".join(f"{where}: {what}" for where, what in found.items())
