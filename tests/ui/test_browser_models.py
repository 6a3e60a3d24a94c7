"""The Models pages in a real Chromium over the demo's workspace: the models list, the
model "cancer" (versions 1 and 2, production -> 1, its card, the audit log "intact"), the
click from a version to its run; and on a copy served with --allow-actions, a promotion
and a rollback done through the page's buttons and confirm dialog, which the audit log
then shows with their reason (as text)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from reprise.ui._pages import PAGES
from tests.ui import _browser, _demo_workspace

XSS = "<script>alert(1)</script>"


def _built(project: Path) -> dict[str, Any]:
    return json.loads((project / "built.json").read_text())  # type: ignore[no-any-return]


def test_the_models_page_lists_cancer_and_an_intact_audit_log(browser: Any) -> None:
    page = browser.goto("/models")
    assert page.locator("#nav a.active").inner_text() == "Models"
    row = page.locator("table.models tbody tr", has_text="cancer")
    assert row.locator("td").nth(1).inner_text() == "2"  # versions
    assert "production → 1" in row.inner_text()
    assert page.locator(".audit-status .badge").inner_text() == "intact"
    assert page.locator("table.audit tbody tr").count() >= 3  # register, promote, register
    browser.shot("models")
    row.get_by_role("link", name="cancer").click()
    page.wait_for_url("**/model?name=cancer")


def test_the_model_page_shows_versions_aliases_card_and_audit(browser: Any,
                                                               demo_project: Path) -> None:
    built = _built(demo_project)
    page = browser.goto("/model?name=cancer")
    assert page.locator("h1").inner_text() == "Model cancer"
    versions = page.locator("table.versions tbody tr")
    assert [versions.nth(i).get_attribute("data-version") for i in range(versions.count())] \
        == ["1", "2"]
    assert versions.nth(0).locator(".badge").inner_text() == "passed"
    assert versions.nth(1).locator(".badge").inner_text() == "failed"
    assert versions.nth(0).locator("a.run").inner_text() == built["run_id"]
    prod = page.locator("table.aliases tr[data-alias=production]")
    assert prod.locator("td").nth(1).inner_text() == "1"
    history = page.locator("table.alias-history tbody tr")
    assert history.count() == 1 and "promote" in history.first.inner_text()
    # the card of the version production holds, by default
    assert page.get_by_role("heading", name="Version 1: model card").count() == 1
    assert page.locator("table.card-metrics").get_by_text("accuracy", exact=True).count() == 1
    assert page.locator(".audit-status .badge").inner_text() == "intact"
    audit = page.locator("table.audit tbody tr")  # the model's events: its registrations,
    assert audit.count() >= 3 and "promote" in " ".join(audit.all_inner_texts())  # promotion
    # read-only: no action buttons
    assert page.locator("button.promote, button.rollback, button.abort").count() == 0
    browser.shot("model")
    versions.nth(1).get_by_role("link", name="2", exact=True).click()
    page.wait_for_url("**/model?name=cancer&version=2")
    page.get_by_role("heading", name="Version 2: model card").wait_for()
    gates = page.locator("table.gates tbody tr")
    assert gates.count() >= 1 and gates.locator(".badge.failed").count() == gates.count()
    # the full evaluation report, in a sandboxed frame, on demand
    page.get_by_role("button", name="Show the evaluation report").click()
    frame = page.locator("iframe.report")
    assert frame.get_attribute("sandbox") == "allow-scripts"
    report = page.frame_locator("iframe.report")
    report.locator("h1").wait_for()
    assert report.locator("h1").inner_text() == "Evaluation report"
    page.wait_for_load_state("networkidle")


@pytest.fixture
def lenient(chromium: Any, ui_url: str) -> Iterator[tuple[_browser.Browser, list[str]]]:
    """A page on the demo's dashboard that fails its test on any error but those the test
    expects (it lists them: an HTTP status it asked for, and Chromium's console line
    about that response)."""
    b = _browser.Browser(chromium, ui_url, "lenient")
    expected: list[str] = []
    yield b, expected
    errors = b.close(allowed=tuple(expected))
    assert not errors, "the page had errors:\n" + "\n".join(errors)


def test_a_version_links_to_its_run_page(lenient: Any, demo_project: Path) -> None:
    browser, expected = lenient
    built = _built(demo_project)
    if "run" not in PAGES:  # the run page comes from another part of the dashboard
        expected += ["HTTP 404: ", "status of 404"]
    page = browser.goto("/model?name=cancer")
    page.locator("table.versions tr[data-version='1'] a.run").click()
    page.wait_for_url(f"**/run?id={built['run_id']}")


def test_an_unknown_model_says_so(lenient: Any) -> None:
    browser, expected = lenient
    expected += ["HTTP 404: ", "status of 404"]  # /api/models/nope
    page = browser.page
    page.goto("/model?name=nope")
    alert = page.get_by_role("alert")
    alert.wait_for()
    assert "no model 'nope'" in alert.inner_text()


@contextmanager
def _acting(chromium: Any, demo_project: Path, tmp_path: Path, rollout: bool = False,
            tamper: str | None = None) -> Iterator[_browser.Browser]:
    """A page on a server with --allow-actions over a private copy of the demo (with a
    running rollout of version 2, or the SQL ``tamper`` run on its database, if asked);
    the test fails on any error but those it lists in ``expected``."""
    copy = _demo_workspace.copy_of(demo_project, tmp_path / "tabular")
    if rollout:
        _reprise(copy, "rollout", "start", "cancer", "2", "--force", "--reason", "a trial")
    if tamper:
        import sqlite3

        with sqlite3.connect(copy / ".reprise" / "reprise.db") as db:
            db.execute(tamper)
        db.close()
    with _browser.ui_server(copy, "--allow-actions") as url:
        b = _browser.Browser(chromium, url, "acting")
        b.expected = []  # type: ignore[attr-defined]
        yield b
        errors = b.close(allowed=tuple(b.expected))  # type: ignore[attr-defined]
    assert not errors, "the page had errors:\n" + "\n".join(errors)


@pytest.fixture
def acting(chromium: Any, demo_project: Path, tmp_path: Path) -> Iterator[_browser.Browser]:
    with _acting(chromium, demo_project, tmp_path) as b:
        yield b


@pytest.fixture
def acting_on_a_rollout(chromium: Any, demo_project: Path,
                        tmp_path: Path) -> Iterator[_browser.Browser]:
    with _acting(chromium, demo_project, tmp_path, rollout=True) as b:
        yield b


def _reprise(project: Path, *args: str) -> None:
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "REPRISE_WORKSPACE"}
    subprocess.run([sys.executable, "-m", "reprise.cli", *args], cwd=project, env=env,
                   check=True, capture_output=True)


def _confirm(page: Any, reason: str) -> None:
    dialog = page.locator("dialog.action")
    dialog.wait_for()
    dialog.get_by_label("reason").fill(reason)
    dialog.locator("button.confirm").click()


def test_promote_and_rollback_through_the_page(acting: _browser.Browser) -> None:
    page = acting.goto("/model?name=cancer")
    # a reason is required: the dialog says so and nothing is sent
    page.locator("table.versions tr[data-version='2'] button.promote").click()
    dialog = page.locator("dialog.action")
    dialog.locator("button.confirm").click()
    assert "A reason is required" in dialog.inner_text()
    dialog.locator("button.cancel").click()
    assert page.locator("dialog.action").count() == 0

    page.locator("table.versions tr[data-version='2'] button.promote").click()
    page.locator("dialog.action input[name=force]").check()  # version 2's gates failed
    _confirm(page, XSS)
    notice = page.locator("#action-result .notice")
    notice.wait_for()
    assert notice.inner_text() == "cancer@production → 2 (was 1)"
    assert page.locator("table.aliases tr[data-alias=production] td").nth(1).inner_text() == "2"
    newest = page.locator("table.alias-history tbody tr").first
    assert XSS in newest.inner_text()  # the reason, as text
    assert newest.locator("script").count() == 0
    assert newest.get_by_text("ui:", exact=False).count() == 1
    event = page.locator("table.audit tbody tr").first
    assert "promote" in event.inner_text() and XSS in event.inner_text()
    assert page.locator(".audit-status .badge").inner_text() == "intact"
    acting.shot("model-promoted")

    page.locator("table.aliases tr[data-alias=production] button.rollback").click()
    _confirm(page, "back to the healthy version")
    page.get_by_text("cancer@production → 1 (rolled back from 2)").wait_for()
    assert page.locator("table.aliases tr[data-alias=production] td").nth(1).inner_text() == "1"
    event = page.locator("table.audit tbody tr").first
    assert "rollback" in event.inner_text()
    assert "back to the healthy version" in event.inner_text()
    assert page.locator(".audit-status .badge").inner_text() == "intact"


def test_a_refused_action_shows_its_message(acting: Any) -> None:
    acting.expected += ["HTTP 400: ", "status of 400"]  # the refusal's response
    page = acting.goto("/model?name=cancer")
    page.locator("table.versions tr[data-version='2'] button.promote").click()
    _confirm(page, "without --force")  # version 2's gates failed and force is not ticked
    alert = page.locator("dialog.action [role=alert]")
    alert.wait_for()
    assert "gates failed" in alert.inner_text()


def test_abort_a_running_rollout_through_the_page(acting_on_a_rollout: Any) -> None:
    page = acting_on_a_rollout.goto("/model?name=cancer")
    row = page.locator("table.rollouts tbody tr")
    assert row.count() == 1 and "1 → 2" in row.inner_text()
    row.locator("button.abort").click()
    _confirm(page, "the candidate looks wrong")
    notice = page.locator("#action-result .notice")
    notice.wait_for()
    assert "aborted; cancer@production stays at 1" in notice.inner_text()
    assert page.locator("table.rollouts").count() == 0  # no running rollout any more
    event = page.locator("table.audit tbody tr").first
    assert "rollout.abort" in event.inner_text()
    assert "the candidate looks wrong" in event.inner_text()
    assert "ui:" in event.inner_text()


@pytest.fixture
def tampered(chromium: Any, demo_project: Path, tmp_path: Path) -> Iterator[_browser.Browser]:
    with _acting(chromium, demo_project, tmp_path,
                 tamper="UPDATE audit_events SET actor = 'mallory' WHERE seq = 2") as b:
        yield b


def test_a_tampered_audit_log_shows_as_broken(tampered: Any) -> None:
    for path in ("/models", "/model?name=cancer"):
        page = tampered.goto(path)
        assert page.locator(".audit-status .badge.broken").inner_text() == "broken"
        problems = page.locator("ul.problems li")
        assert problems.count() == 1
        assert problems.first.inner_text().startswith("edited: event #2 (promote")
    tampered.shot("model-audit-broken")
