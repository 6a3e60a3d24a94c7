"""The Rollouts, Monitoring and Trade-offs pages in a real Chromium over the demo's
workspace: the demo's canary of the broken cancer:2 (rolled back on prediction shift),
the monitored windows of cancer@production (the newest drifted, its alarm notified), and
the versions' trade-offs, clicked through to their runs."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.ui import _browser, _demo_workspace

XSS = "<script>alert(1)</script>"


def _built(demo_project: Path) -> dict[str, Any]:
    return dict(json.loads((demo_project / "built.json").read_text()))


def test_rollouts_list_and_a_rollouts_page(browser: Any, demo_project: Path) -> None:
    rid = _built(demo_project)["rollout"]
    page = browser.goto("/rollouts")
    assert page.locator("#nav a.active").inner_text() == "Rollouts"
    row = page.locator("table.rollouts tbody tr", has=page.get_by_text(rid, exact=True))
    assert row.count() == 1
    cells = row.locator("td").all_inner_texts()
    assert cells[1:6] == ["cancer@production", "v2", "v1", "canary", "rolled_back"]
    assert "step 2/3" in cells[6] and "prediction_shift" in cells[8]
    browser.shot("rollouts")
    page.get_by_label("state").select_option("promoted")
    page.wait_for_url(re.compile(r"state=promoted"))
    assert page.locator(".empty").inner_text() == "No rollout matches."
    page = browser.goto("/rollouts?state=rolled_back")
    row = page.locator("table.rollouts tbody tr", has=page.get_by_text(rid, exact=True))

    row.get_by_role("link", name=rid).click()
    page.wait_for_url(re.compile(r"/rollout\?id="))
    page.wait_for_selector("#weights .scatterlayer .trace")
    # the weight chart: one point per weight-setting event (start, step, hold, rollback)
    assert page.evaluate("() => document.getElementById('weights').data[0].y") == [
        10, 50, 50, 0]
    texts = page.locator("#weights .scatterlayer .textpoint").evaluate_all(
        "els => els.map(e => e.textContent)")
    assert texts == ["start", "step", "hold", "rollback"]
    links = page.locator("a.version-run")
    assert links.all_inner_texts() == ["v1 (stable)", "v2 (candidate)"]
    assert links.first.get_attribute("href") == f"/run?id={_built(demo_project)['run_id']}"
    decisions = page.locator(".decision")
    assert decisions.count() == 4
    assert decisions.nth(0).locator("h3").inner_text().endswith("start → 10%")
    assert "forced" in decisions.nth(0).inner_text()
    step, rollback = decisions.nth(1), decisions.nth(3)
    assert step.locator("h3").inner_text().endswith("step → 50%")
    verdicts = dict(zip(step.locator("table.checks tbody td:nth-child(1)").all_inner_texts(),
                        step.locator("table.checks tbody td:nth-child(2)").all_inner_texts(),
                        strict=True))
    assert verdicts["prediction_shift"] == "pass" and verdicts["error_rate"] == "pass"
    assert rollback.locator("h3").inner_text().endswith("rollback → 0%")
    failed = rollback.locator("table.checks tbody tr", has=page.locator(".badge.fail"))
    assert failed.locator("td").first.inner_text() == "prediction_shift"
    versions = page.locator("table.versions tbody tr")
    assert versions.nth(0).locator("td").nth(1).inner_text() == "stable"
    shift = versions.nth(1).locator("td").last.inner_text()
    assert float(shift) > 0.1  # the candidate answers one class: far from the stable one
    browser.shot("rollout")


def test_monitoring_draws_drift_per_column(browser: Any) -> None:
    page = browser.goto("/monitoring")
    assert page.locator("#nav a.active").inner_text() == "Monitoring"
    page.wait_for_selector("#drift .scatterlayer .trace")
    traces = page.evaluate("() => document.getElementById('drift').data.map(t => t.name)")
    assert "mean_radius" in traces and len(traces) > 5
    radius = page.evaluate("() => document.getElementById('drift').data.find("
                           "t => t.name === 'mean_radius').y")
    assert len(radius) == 4 and radius[-1] > max(radius[:-1])  # the newest window drifted
    windows = page.locator("table.windows tbody tr")
    assert windows.count() == 4
    assert windows.first.locator(".badge").first.inner_text() == "drift"
    assert "mean_radius" in windows.first.inner_text()
    alarms = page.locator("table.alarms tbody tr")
    assert alarms.count() >= 1 and "mean_radius" in alarms.first.inner_text()
    events = page.locator("table.events tbody").inner_text()
    assert "succeeded" in events and "notify" in events
    page.get_by_label("measure").select_option("p_adjusted")
    assert page.evaluate("() => document.getElementById('drift').layout.yaxis.type") == "log"
    browser.shot("monitoring")


def test_tradeoffs_scatter_and_a_click_opens_the_run(browser: Any, demo_project: Path,
                                                     ui_url: str) -> None:
    import httpx

    built = _built(demo_project)
    page = browser.goto("/tradeoffs")
    assert page.locator("#nav a.active").inner_text() == "Trade-offs"
    page.wait_for_selector("#tradeoffs .scatterlayer .trace .point")
    points = page.evaluate("() => document.getElementById('tradeoffs').data.flatMap("
                           "t => t.text.map((label, i) => [label, t.x[i], t.y[i], "
                           "t.customdata[i]]))")
    by_label = {p[0]: p for p in points}
    assert sorted(by_label) == ["cancer:1", "cancer:2"]
    assert by_label["cancer:1"][2] > by_label["cancer:2"][2]  # accuracy: the broken one lower
    assert by_label["cancer:1"][3] == built["run_id"]
    rows = page.locator("table.points tbody tr")
    assert rows.count() == 2
    first = rows.first.locator("td").all_inner_texts()
    assert first[5].startswith("rollout ")  # where the latency was measured
    assert re.fullmatch(r"\$[0-9.e-]+", first[6])  # cost per 1,000, computed from it
    assert re.fullmatch(r"[0-9.]+ J \(\w+\)", first[7])  # the run's energy, its meter
    browser.shot("tradeoffs")

    page.get_by_label("Against").select_option("energy_joules")
    page.wait_for_url(re.compile(r"x=energy_joules"))
    page.wait_for_selector("#tradeoffs .scatterlayer .trace .point")
    assert "energy of the training" in page.locator("#tradeoffs .xtitle").text_content()

    # a study's trials: never served (latency not measured), their training's energy is
    page = browser.goto("/tradeoffs?study=tabular&metric=val_loss&x=energy_joules")
    page.wait_for_selector("#tradeoffs .scatterlayer .trace .point")
    trials = page.evaluate("() => document.getElementById('tradeoffs').data.map("
                           "t => [t.name, t.text.length])")
    assert trials == [["trials", 3]]
    rows = page.locator("table.points tbody tr")
    assert rows.count() == 3 and rows.first.inner_text().startswith("tabular #0")
    assert rows.first.locator("td").nth(4).inner_text() == "not measured"  # p99
    trial_runs = page.evaluate("() => document.getElementById('tradeoffs').data[0].customdata")
    assert len(set(trial_runs)) == 3 and built["run_id"] not in trial_runs

    if httpx.get(f"{ui_url}/run").status_code == 404:
        # the run page is another part of the dashboard: until it is there, its address
        # answers a stand-in here, so that the click is checked, not the missing page
        page.route(re.compile(r".*/run\?id=.*"), lambda route: route.fulfill(
            status=200, content_type="text/html", body="<title>run</title>run page"))
    point = page.locator("#tradeoffs .scatterlayer .trace .point").first
    box = point.bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.wait_for_url(re.compile(r"/run\?id="))
    assert page.url.split("id=")[1] in trial_runs


def test_user_strings_on_the_rollout_page_are_text(chromium: Any, demo_project: Path,
                                                   tmp_path: Path) -> None:
    """A rollout's reason is free text (``--force --reason``): it shows as text. The
    rollout runs, so its page polls."""
    import reprise
    from reprise.serve import start_rollout

    project = _demo_workspace.copy_of(demo_project, tmp_path / "tabular")
    ws = reprise.open_workspace(project)
    try:
        rec = start_rollout("cancer", 2, force=True, reason=XSS, workspace=ws)
    finally:
        ws.close()
    with _browser.ui_server(project) as url:
        b = _browser.Browser(chromium, url, "xss")
        try:
            page = b.goto(f"/rollout?id={rec.id}")
            dialogs: list[str] = []
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.wait_for_selector(".decision")
            assert page.get_by_text(XSS, exact=True).count() >= 2  # the record, its start
            assert not dialogs
            assert page.locator("#weights .scatterlayer .trace").count() == 1
            # a running rollout is polled: its page asks again within a few seconds
            with page.expect_response(lambda r: f"/api/rollouts/{rec.id}" in r.url,
                                      timeout=10_000):
                pass
            assert "Next decision" in page.locator("#main .kv").inner_text()
            page.goto("/rollouts")
            page.wait_for_selector("table.rollouts")
            assert page.locator("table.rollouts td.reason", has_text=XSS).count() == 1
            assert not dialogs
        finally:
            errors = b.close()
    assert not errors, errors


@pytest.mark.parametrize("path", ["/rollout", "/rollout?id=nope"])
def test_a_missing_rollout_says_so(chromium: Any, ui_url: str, path: str) -> None:
    b = _browser.Browser(chromium, ui_url, "missing")
    try:
        page = b.goto(path)
        message = page.locator("#main .error").inner_text()
        assert ("no rollout with id 'nope'" in message if "nope" in path
                else "no rollout given" in message)
    finally:
        errors = b.close()
    # the API's 404 for an unknown id (and the browser's console line about it) is what
    # the page shows as its message, not a failure of the page
    expected = ("HTTP 404: ", "console: Failed to load resource: the server responded "
                "with a status of 404")
    assert all(e.startswith(expected) for e in errors), errors
    assert all("/api/rollouts/nope" in e for e in errors if e.startswith("HTTP"))


def test_an_empty_workspace_says_there_is_nothing_yet(chromium: Any, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import reprise

    for name in _demo_workspace._SETTINGS:
        monkeypatch.delenv(name, raising=False)
    reprise.init(tmp_path).close()
    with _browser.ui_server(tmp_path) as url:
        b = _browser.Browser(chromium, url, "empty")
        try:
            page = b.goto("/monitoring")
            assert page.locator(".empty").inner_text().startswith(
                "No monitoring data for this workspace")
            page = b.goto("/rollouts")
            assert page.locator(".empty").inner_text().startswith("No rollouts yet")
            page = b.goto("/tradeoffs")
            assert page.locator("table.points tbody tr").count() == 0
            assert "nothing to plot" in page.locator("#tradeoffs").text_content()
        finally:
            errors = b.close()
    assert not errors, errors
