"""In Chromium: an admin makes a team on the Teams page, adds a member, sets the team a
guarantee while the preview shows the shares it would give (the scheduler's own policy),
saves it; the member's job then shows in the team's chart on the Cluster page, read from
the scheduler's shares stream, and the chart follows the stream as it grows.

The test's server speaks HTTP only (pytest-django's live server): the Cluster page polls
the shares. The scheduler is not run: the test writes the allocation record and the
stream's entries in their documented format (``protocol.keys.SHARES_KEY``), as the
scheduler would after the change.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import pytest
from playwright.sync_api import Page, expect

from edtweb.tenancy import services as tenancy
from edtweb.tenancy.models import ResourceGroup, Team
from edtweb.training.models import Job
from protocol.keys import SHARES_KEPT, SHARES_KEY
from scheduler.store import Allocation, AllocationRecord, Store
from tests.browser import browser_page, log_in_as
from tests.harness.pages import looked_over

pytestmark = pytest.mark.django_db(transaction=True)

HOST = "tb-h"
T = TypeVar("T")


def off_loop(call: Callable[[], T]) -> T:
    """Run a database call off this thread: Playwright's event loop runs here, and Django
    refuses synchronous queries from a thread with a running loop."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(call).result()


@pytest.fixture
def cluster(store: Store) -> Iterator[list[str]]:
    """Four alive slots (group default); the allocation record and the shares stream are
    the test's to write, and are cleared."""
    ids = [store.register_slot(HOST, i, "cpu", pid=1, host_slots=4) for i in range(4)]
    for slot in ids:
        store.heartbeat(slot, {"kind": "cpu", "cpu_percent": 1.0}, ttl=300)
    yield ids
    for slot in ids:
        store.forget_slot(slot)
    store.save_allocations(AllocationRecord(), ttl=0.001)
    store.r.delete(SHARES_KEY)


def share(store: Store, teams: dict[str, tuple[int, float]], queue: dict[str, list[int]]) -> None:
    """One entry of the shares stream, as the scheduler writes it: team id -> (held,
    entitled) in group default, which has 4 slots."""
    body = {"capacity": 4, "queue": queue, "teams": {
        team: {"held": held, "entitled": entitled, "demand": 4}
        for team, (held, entitled) in teams.items()}}  # fmt: skip
    data = json.dumps({"t": time.time(), "groups": {"default": body}})
    store.r.xadd(SHARES_KEY, {"data": data}, maxlen=SHARES_KEPT, approximate=True)


def trace(page: Page, name: str) -> list[float]:
    """The y values of the trace ``name`` in group default's chart."""
    found: list[float] = page.evaluate(
        """name => {
          const chart = document.querySelector(".share-chart[data-group='default']");
          const t = chart && chart.data && chart.data.find((d) => d.name === name);
          return t ? t.y : [];
        }""",
        name,
    )
    return found


@pytest.mark.browser
def test_an_admin_sets_a_guarantee_with_the_preview_and_the_teams_chart_shows_its_job(
    live_server: Any, store: Store, cluster: list[str], django_user_model: Any
) -> None:
    make = django_user_model.objects.create_user
    make("root", password="root-pass-1", is_staff=True)
    alice, olga = make("alice", password="alice-pass-1"), make("olga", password="olga-pass-1")
    nlp = tenancy.save_team(None, {"name": "nlp"})
    tenancy.set_member(nlp, olga)
    theirs = Job.objects.create(owner=olga, name="nlp-job", state=Job.State.RUNNING,
                                max_workers=4, team=nlp)  # fmt: skip
    store.save_allocations(AllocationRecord({theirs.pk: Allocation(tuple(cluster))}, 4), ttl=300)
    base = live_server.url

    with browser_page() as page:
        log_in_as(page, base, "root", "root-pass-1")

        # A new team, from the page's form; then its member.
        page.click("nav >> text=Teams")
        page.fill("#new-name", "robotics")
        page.click("#new-team-create")
        page.wait_for_url(base + "/teams/?team=robotics")
        assert "Team robotics created" in page.inner_text("#team-status")
        page.select_option("#member-user", "alice")
        page.click("#member-add")
        page.wait_for_selector("#members tr[data-member='alice']")
        assert "alice added to robotics" in page.inner_text("#team-status")

        # Alice submits a job into it (asking for 4 slots, as nlp's job holds).
        robotics = off_loop(lambda: Team.objects.get(name="robotics"))
        mine = off_loop(lambda: Job.objects.create(owner=alice, name="robot-arm",
                                                   max_workers=4, team=robotics))  # fmt: skip
        page.reload()
        row = "#shares-preview tr[data-team='robotics']"
        page.wait_for_selector(row)
        # As the teams are: equal weights, 2 and 2 of the 4 slots.
        assert page.inner_text(row + " td.after") == "2"
        assert page.inner_text("#shares-preview tr[data-team='nlp'] td.after") == "2"

        # A guarantee of 3: the preview says robotics 2 → 3, nlp 2 → 1, before saving.
        page.fill("#team-guarantee", "3")
        page.wait_for_function(
            "row => document.querySelector(row + ' td.after').textContent === '2 → 3 (+1)'", arg=row
        )
        assert page.inner_text("#shares-preview tr[data-team='nlp'] td.after") == "2 → 1 (-1)"
        # Entitled: its 3, then half the one slot left (equal weights); nlp the other half.
        assert page.inner_text(row + " td.entitled") == "2 → 3.5"
        assert page.inner_text("#shares-preview tr[data-team='nlp'] td.entitled") == "2 → 0.5"
        assert off_loop(lambda: Team.objects.get(name="robotics").guarantee) == 0  # not saved
        page.click("#team-save")
        page.wait_for_function(
            "document.getElementById('team-status').textContent.includes('saved')"
        )
        assert off_loop(lambda: Team.objects.get(name="robotics").guarantee) == 3
        assert page.inner_text("#teams-tree tr[data-team='robotics'] td:nth-child(3)") == "3"

        # The scheduler gives robotics its 3 (its job runs) and says so in the stream; a
        # second job of Alice's waits in the team's queue.
        waiting = off_loop(lambda: Job.objects.create(owner=alice, name="robot-leg",
                                                      max_workers=2, team=robotics))  # fmt: skip
        off_loop(lambda: Job.objects.filter(pk=mine.pk).update(state=Job.State.RUNNING))
        ids = {"robotics": str(robotics.pk), "nlp": str(nlp.pk)}
        robots, nlps = ids["robotics"], ids["nlp"]
        share(store, {nlps: (4, 2.0), robots: (0, 2.0)}, {robots: [mine.pk]})
        share(store, {ids["nlp"]: (1, 0.5), ids["robotics"]: (3, 3.5)},
              {ids["robotics"]: [waiting.pk]})  # fmt: skip

        page.click("nav >> text=Cluster")
        page.wait_for_function(
            """() => {
              const c = document.querySelector(".share-chart[data-group='default']");
              return c && c.data && c.data.some((d) => d.name === "robotics holds");
            }"""
        )
        assert 3 in trace(page, "robotics holds") and 3.5 in trace(page, "robotics entitled")
        assert 0 in trace(page, "robotics holds")  # before its job got its slots
        assert trace(page, "nlp holds")[-1] == 1
        queue = page.inner_text(".team-queue[data-team='robotics']")
        assert "robot-leg" in queue and "robot-arm" not in queue

        # Live: the next entry reaches the chart without a reload.
        share(store, {ids["nlp"]: (0, 0.0), ids["robotics"]: (4, 4.0)}, {})
        page.wait_for_function(
            """() => {
              const c = document.querySelector(".share-chart[data-group='default']");
              const t = c.data.find((d) => d.name === "robotics holds");
              return t.y[t.y.length - 1] === 4;
            }""",
            timeout=20_000,
        )


@pytest.mark.browser
def test_the_teams_groups_usage_and_cluster_pages_fit_a_phone_and_pass_axe(
    live_server: Any, store: Store, cluster: list[str], django_user_model: Any
) -> None:
    """Each page with something on it, at 1440x900 and 390x844: nothing scrolls sideways,
    axe-core finds no serious or critical violation; a screenshot of each lands in
    tests/artifacts/."""
    make = django_user_model.objects.create_user
    make("root", password="root-pass-1", is_staff=True)
    alice = make("alice", password="alice-pass-1")
    tenancy.save_group(None, {"name": "h100", "position": 10,
                              "rules": ["host=dgx*,device=gpu,model=*H100*,slots=8"]})  # fmt: skip
    vision = tenancy.save_team(None, {"name": "vision", "weight": 2, "guarantee": 2,
                                      "allowed_groups": ["h100"]})  # fmt: skip
    tenancy.save_team(None, {"name": "vision-3d", "parent": "vision", "limit": 2})
    tenancy.set_member(vision, alice, lead=True)
    running = Job.objects.create(owner=alice, name="segment", state=Job.State.RUNNING,
                                 max_workers=4, team=vision)  # fmt: skip
    Job.objects.create(owner=alice, name="detect", max_workers=2, team=vision)
    store.save_allocations(AllocationRecord({running.pk: Allocation(tuple(cluster))}, 4), ttl=300)
    running.events.create(kind="generation", message="4 learners", data={"workers": 4})
    share(store, {str(vision.pk): (4, 4.0)}, {})
    pages = {"teams": "/teams/?team=vision", "groups": "/groups/", "usage": "/usage/",
             "cluster-teams": "/"}  # fmt: skip
    with browser_page() as page:
        log_in_as(page, live_server.url, "root", "root-pass-1")
        ready = {
            "teams": lambda p: p.wait_for_selector("#shares-preview table"),
            "cluster-teams": lambda p: p.wait_for_function(
                "document.querySelector('.share-chart')?.data"
            ),
        }
        found = looked_over(page, live_server.url, pages, ready)
    assert not found, "\n".join(f"{where}: {what}" for where, what in found.items())


@pytest.mark.browser
def test_an_admin_makes_a_resource_group_on_its_page_and_sees_a_refusal_in_words(
    live_server: Any, django_user_model: Any
) -> None:
    """The Groups page's form goes through the REST API (static/edt/js/api.js, the pages'
    one client): a new group lands and is said; a second one of the same name is refused
    with the API's message under the form, and nothing else changes."""
    django_user_model.objects.create_user("root", password="root-pass-1", is_staff=True)
    with browser_page() as page:
        log_in_as(page, live_server.url, "root", "root-pass-1")
        page.goto(live_server.url + "/groups/")
        for attempt in ("made", "refused"):
            page.fill("#group-name", "a100")
            page.fill("#group-rules", "host=dgx*,device=gpu,model=*A100*,slots=8")
            page.click("#new-group-create")
            if attempt == "made":
                expect(page.locator("#group-status")).to_have_text("Group a100 created.")
        expect(page.locator("#new-group-error")).to_be_visible()
        expect(page.locator("#new-group-error")).to_contain_text("already exists")
    names = off_loop(lambda: sorted(g.name for g in ResourceGroup.objects.all()))
    assert names == ["a100", "default"]


@pytest.mark.browser
def test_the_teams_forms_send_nothing_until_their_script_handles_them(
    live_server: Any, django_user_model: Any
) -> None:
    """The Teams page's forms are the script's (they go through the REST API): before it
    has run (a slow load, or a failed one) their buttons are disabled, so a click or Enter
    in a field sends nothing (a native submit put the new user's password in the URL, and
    a quick click made no team). Once the script runs they work."""
    django_user_model.objects.create_user("root", password="root-pass-1", is_staff=True)
    ResourceGroup.objects.default()  # its migration's, emptied by an earlier test's flush
    base = live_server.url
    with browser_page() as page:
        log_in_as(page, base, "root", "root-pass-1")
        page.route("**/edt/js/teams.js*", lambda route: route.abort())
        page.goto(base + "/teams/")
        for button in ("#new-team-create", "#new-user-create"):
            expect(page.locator(button)).to_be_disabled()
        page.fill("#user-name", "mallory")
        page.fill("#user-password", "a-secret-pass-1")
        page.press("#user-password", "Enter")
        page.fill("#new-name", "robotics")
        page.press("#new-name", "Enter")
        # Nothing went anywhere: not into a URL, not into the database.
        page.wait_for_load_state("load")
        assert page.url == base + "/teams/"
        page.unroute("**/edt/js/teams.js*")
        page.reload()
        expect(page.locator("#new-team-create")).to_be_enabled()
        page.fill("#new-name", "robotics")
        page.click("#new-team-create")
        page.wait_for_url(base + "/teams/?team=robotics")
    assert not off_loop(lambda: django_user_model.objects.filter(username="mallory").exists())
    assert off_loop(lambda: list(Team.objects.values_list("name", flat=True))) == ["robotics"]
