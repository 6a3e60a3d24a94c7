"""The dashboard in a real browser: ``reprise ui`` as a process over the demo's workspace,
and Debian's headless Chromium driven by Playwright (its own browser download cannot be
used offline, so ``executable_path`` points at /usr/bin/chromium; ``make test`` installs
it with apt when missing). Every page a test opens is checked for JavaScript errors and
failed requests when the test ends, and :meth:`Browser.shot` saves a screenshot as a test
artifact (in ``REPRISE_UI_SHOTS``, default ``build/ui-screenshots``)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("REPRISE_CHROMIUM", "/usr/bin/chromium")
SHOTS = Path(os.environ.get("REPRISE_UI_SHOTS", ROOT / "build" / "ui-screenshots"))
ARGS = ["--disable-background-networking", "--disable-component-update", "--no-first-run",
        "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def ui_server(project: Path, *args: str, env: dict[str, str] | None = None,
              log: Path | None = None) -> Iterator[str]:
    """``reprise ui`` in ``project`` on a free loopback port; its URL until the block ends,
    then its process group is stopped (SIGINT, SIGKILL after 10 s)."""
    import httpx

    port = free_port()
    log = log or project / f"ui-{port}.log"
    full_env = {k: v for k, v in os.environ.items() if k != "REPRISE_WORKSPACE"}
    full_env.update(env or {})
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "reprise.cli", "ui", "--port",
                                 str(port), *args], cwd=project, env=full_env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"{url}/runs", timeout=2)
                break
            except httpx.TransportError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"reprise ui did not start:\n{log.read_text()}") from None
                time.sleep(0.2)
        yield url
    finally:
        try:
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait(timeout=10)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def launch() -> tuple[Any, Any]:
    """(playwright, browser): Debian's chromium, headless. Skipped when it is missing,
    except under CI, where a missing browser is a failure."""
    if not os.access(CHROMIUM, os.X_OK):
        message = (f"{CHROMIUM} is missing: install Debian's chromium package (make test "
                   "does it as root) for the dashboard's browser tests")
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    sync_api = pytest.importorskip("playwright.sync_api")
    pw = sync_api.sync_playwright().start()
    try:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
    except Exception:
        pw.stop()
        raise
    return pw, browser


class Browser:
    """One page in a fresh browser context, recording what went wrong in it."""

    def __init__(self, browser: Any, base_url: str, name: str) -> None:
        self.context = browser.new_context(base_url=base_url,
                                           viewport={"width": 1400, "height": 900})
        self.page = self.context.new_page()
        self.page.set_default_timeout(15_000)
        self.errors: list[str] = []
        self.name = name
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(
            f"console: {m.text}"))
        self.page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))
        self.page.on("response", lambda r: r.status >= 400 and self.errors.append(
            f"HTTP {r.status}: {r.url}"))
        self.page.on("requestfailed", self._request_failed)

    def _request_failed(self, request: Any) -> None:
        failure = request.failure or ""
        # net::ERR_ABORTED is Chromium cancelling a request itself: the page navigated away
        # while it was in flight (a click to another page before its charts' data came),
        # or its script aborted it. A server that fails shows as an HTTP status (above) or
        # as a connection error (ERR_CONNECTION_RESET, ERR_EMPTY_RESPONSE...), still errors.
        if "ERR_ABORTED" not in failure:
            self.errors.append(f"request failed: {request.url} ({failure})")

    def goto(self, path: str) -> Any:
        """Open ``path`` and wait until the page has drawn (its main area holds more than
        the loading line) and the network is idle."""
        self.page.goto(path)
        self.page.wait_for_load_state("networkidle")
        self.page.wait_for_function(
            "() => !document.querySelector('#main > p.muted:only-child')")
        return self.page

    def shot(self, name: str) -> Path:
        SHOTS.mkdir(parents=True, exist_ok=True)
        out = SHOTS / f"{name}.png"
        self.page.screenshot(path=str(out), full_page=True)
        return out

    def close(self, allowed: tuple[str, ...] = ()) -> list[str]:
        self.context.close()
        return [e for e in self.errors if not any(a in e for a in allowed)]
