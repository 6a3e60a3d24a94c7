"""Fixtures of the dashboard's browser tests: the demo's workspace (built once per
session, shared by the xdist workers), a ``reprise ui`` process over it, a headless
Chromium, and a page that fails its test on any JavaScript error."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.ui import _browser, _demo_workspace


@pytest.fixture(scope="session")
def demo_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the folder the workers share
    return _demo_workspace.shared(base)


@pytest.fixture(scope="session")
def ui_url(demo_project: Path) -> Iterator[str]:
    """``reprise ui`` over the demo's workspace (read-only, no token)."""
    with _browser.ui_server(demo_project, log=demo_project.parent /
                            f"ui-{os.getpid()}.log") as url:
        yield url


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """Chromium for one test file. Not for the session: Playwright's sync API keeps an
    asyncio loop running in this thread until it stops, and every later test of this
    process that calls asyncio.run (servers' tests, make test's workers run many files)
    would fail while it runs."""
    pw, browser = _browser.launch()
    yield browser
    browser.close()
    pw.stop()


@pytest.fixture
def browser(chromium: Any, ui_url: str, request: pytest.FixtureRequest) -> Iterator[_browser.Browser]:
    """A page on the demo's dashboard; the test fails if the page logged a JavaScript error
    or a request failed."""
    b = _browser.Browser(chromium, ui_url, request.node.name)
    yield b
    errors = b.close()
    assert not errors, "the page had errors:\n" + "\n".join(errors)
