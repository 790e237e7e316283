"""What the browser tests check on every page: axe-core's serious and critical findings, the
sizes pages are looked at, where screenshots go, and when a page has drawn."""

from __future__ import annotations

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
