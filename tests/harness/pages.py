"""What the browser tests check on every page: axe-core's serious and critical findings, the
sizes pages are looked at, where screenshots go, and when a page has drawn."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from playwright.sync_api import Page

from tests.harness.processes import PROJECT_DIR

ARTIFACTS = PROJECT_DIR / "tests" / "artifacts"
AXE = PROJECT_DIR / "tests" / "vendor" / "axe-core" / "axe.min.js"  # axe-core 4.14.1, MPL-2.0
SIZES = {"desktop": (1440, 900), "phone": (390, 844)}
BAD = ("serious", "critical")


# Swagger UI's operation headers are buttons holding buttons (swagger-api/swagger-ui#9576):
# its markup, not ours. Everything else axe checks there too (its colours are restyled).
NOT_OURS = {"api": ["nested-interactive"]}


def violations(page: Page, skip: list[str] | None = None) -> list[dict[str, Any]]:
    """axe-core's serious and critical findings on the page as it is now, less the rules
    in ``skip``."""
    page.add_script_tag(path=str(AXE))
    rules = {rule: {"enabled": False} for rule in skip or []}
    options = {"resultTypes": ["violations"], "rules": rules}
    found = page.evaluate("options => axe.run(document, options)", options)["violations"]
    return [
        {"id": v["id"], "impact": v["impact"], "nodes": [n["target"] for n in v["nodes"][:3]]}
        for v in found
        if v["impact"] in BAD
    ]


def settled(page: Page) -> None:
    """Wait until every chart on the page has drawn (or says it has nothing to draw), and
    the API explorer has drawn its operations."""
    page.wait_for_load_state("load")
    if "/api/v1/docs/" in page.url:
        page.wait_for_selector(".swagger-ui .opblock", timeout=30_000)
    page.wait_for_function(
        "[...document.querySelectorAll('.chart')].every(c => c.data || c.dataset.empty)"
    )


def looked_over(
    page: Page, url: str, pages: Mapping[str, str], ready: Mapping[str, Callable[[Page], Any]] = {}
) -> dict[str, Any]:
    """Each of ``pages`` (name -> path under ``url``) at every size in ``SIZES``, drawn
    (``settled``, then its ``ready`` wait where it has one), screenshot to ``ARTIFACTS``:
    what is wrong with each, as "name at size" -> what (sideways scrolling, axe findings
    other than ``NOT_OURS``'). Empty when all is well."""
    ARTIFACTS.mkdir(exist_ok=True)
    found: dict[str, Any] = {}
    for size, (width, height) in SIZES.items():
        page.set_viewport_size({"width": width, "height": height})
        for name, path in pages.items():
            page.goto(url + path)
            settled(page)
            if wait := ready.get(name):
                wait(page)
            page.screenshot(path=str(ARTIFACTS / f"{name}-{size}.png"), full_page=True)
            wide = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
            if wide > 0:
                found[f"{name} at {size}: scrolls sideways by {wide} px"] = wide
            if bad := violations(page, NOT_OURS.get(name)):
                found[f"{name} at {size}"] = bad
    return found
