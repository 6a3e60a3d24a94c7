"""The dashboard's shell in a real Chromium: the navigation bar, a page that needs its
token asks for it, and an unknown page is a 404 page, not an error."""

from __future__ import annotations

from typing import Any


def test_the_runs_page_lists_the_demo_runs_with_their_ids(browser: Any, demo_project: Any) -> None:
    import json

    built = json.loads((demo_project / "built.json").read_text())
    page = browser.goto("/")
    assert page.url.endswith("/runs")
    assert page.locator("#nav a.brand").inner_text() == "Reprise"
    assert page.locator("#nav a.active").inner_text() == "Runs"
    assert page.get_by_text(built["run_id"], exact=True).count() >= 1
