"""The run page in a real Chromium over the demo's workspace: the pipeline run's metric
charts drawn (zoom re-fetches at full resolution, log scale, smoothing, x = time), its
steps cached and executed, its artifacts previewed (a parquet table, the HTML report in a
sandbox where its scripts are blocked), its environment, code snapshot, lineage and model
links; the gallery run's image, CSV and text previews and system metrics; a failed run's
traceback; a run named like a script shown as text."""

from __future__ import annotations

import json
import platform
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.ui import _browser

BLOCKED = "Blocked script execution in 'about:srcdoc'"


class RunBrowser(_browser.Browser):
    """The shared page fixture's checks, with the messages a test expects let through."""

    allowed: tuple[str, ...] = ()


@pytest.fixture
def page(chromium: Any, ui_url: str, request: pytest.FixtureRequest) -> Iterator[RunBrowser]:
    b = RunBrowser(chromium, ui_url, request.node.name)
    yield b
    errors = b.close(allowed=b.allowed)
    assert not errors, "the page had errors:\n" + "\n".join(errors)


@pytest.fixture(scope="module")
def built(demo_project: Path) -> dict[str, Any]:
    made: dict[str, Any] = json.loads((demo_project / "built.json").read_text())
    return made


def _steps(ui_url: str, run_id: str, key: str) -> list[int]:
    """The steps of a series as the API gives them (the demo's training stops early, at a
    step that may vary with the machine)."""
    import httpx

    xs: list[int] = httpx.get(f"{ui_url}/api/runs/{run_id}/metrics/{key}").json()["xs"]
    return xs


def _chart(p: Any, key: str) -> Any:
    return p.locator(f'.metric-chart[data-key="{key}"]')


def test_the_pipeline_run_page(page: RunBrowser, built: dict[str, Any], ui_url: str) -> None:
    run_id = built["run_id"]
    n = len(_steps(ui_url, run_id, "train_mlp/train/loss"))
    p = page.goto(f"/run?id={run_id}")
    assert p.locator("h1 .run-name").inner_text() == "tabular"
    assert p.locator("h1 .badge").inner_text() == "finished"
    assert p.locator("a.lineage").get_attribute("href") == f"/lineage?ref={run_id}"
    model = p.locator("a.model-link")
    assert model.inner_text() == "cancer:1"
    assert model.get_attribute("href").startswith("/model?name=cancer")
    # a chart per series: the MLP's loss drawn as a line, system figures apart
    loss = _chart(p, "train_mlp/train/loss")
    loss.locator("path.js-line").first.wait_for()
    assert loss.locator(".chart-info").inner_text() == f"{n} of {n} points"
    system = p.locator("section.system")
    system.locator('.metric-chart[data-key="train_mlp/train/samples_per_s"] path.js-line'
                   ).first.wait_for()
    assert "energy" in system.inner_text() and "(estimate)" in system.inner_text()
    assert p.locator(".model-metrics .metric-chart[data-key='train_mlp/train/samples_per_s']"
                     ).count() == 0
    # the final metrics, filtered
    p.get_by_placeholder("filter metrics").fill("worst_slice.f1")
    assert p.locator("table.metrics tbody tr").count() == 2
    # steps: the data steps came from the cache, training ran
    steps = p.locator("table.steps")
    statuses = steps.locator("tbody tr td:nth-child(2)").all_inner_texts()
    assert "cached" in statuses and "executed" in statuses
    train = steps.locator("tbody tr", has_text="train_mlp")
    assert "executed" in train.inner_text() and "this run" in train.inner_text()
    cached = steps.locator("tbody tr", has_text="featurize").locator("a")
    assert cached.get_attribute("href").startswith("/run?id=")
    # environment and code snapshot
    env = p.locator("section", has_text="Environment")
    assert platform.python_version() in env.locator("table.kv").inner_text()
    p.get_by_placeholder("filter packages").fill("numpy")
    assert "numpy" in p.locator("table.packages tbody").inner_text()
    code = p.locator("section", has_text="Code snapshot")
    code.locator("summary", has_text="pipeline.py").click()
    assert "def train_mlp(" in code.inner_text()
    # a table preview: a step's parquet output
    p.get_by_role("button", name="split/0", exact=True).click()
    preview = p.locator(".artifact-preview")
    preview.locator("table.artifact-table").wait_for()
    assert "mean_radius" in preview.locator("thead").inner_text()
    assert preview.locator("tbody tr").count() == 20
    assert "first 20 rows of 427" in preview.inner_text()
    # an array's first rows
    p.get_by_role("button", name="featurize/2", exact=True).click()
    p.locator(".artifact-preview h3", has_text="featurize/2").wait_for()
    assert "first 20 rows of 142" in preview.inner_text()
    assert preview.locator("thead th").count() == 30
    page.shot("run")


def test_the_html_report_renders_in_a_sandbox_without_its_scripts(
        page: RunBrowser, built: dict[str, Any]) -> None:
    page.allowed = (BLOCKED,)
    p = page.goto(f"/run?id={built['run_id']}")
    p.get_by_role("button", name="evaluate/artifacts/evaluation-mlp.html").click()
    frame = p.locator("iframe.artifact-html")
    frame.wait_for()
    assert frame.get_attribute("sandbox") == ""  # no allow-scripts, no allow-same-origin
    report = p.frame_locator("iframe.artifact-html")
    assert report.locator("h1").inner_text().startswith("Evaluation report")
    assert report.locator("h2", has_text="Quality gates").count() == 1
    p.wait_for_timeout(300)
    assert any(BLOCKED in e for e in page.errors)  # its scripts were there, and blocked
    page.shot("run-report")


def test_zoom_log_scale_smoothing_and_time(page: RunBrowser, built: dict[str, Any],
                                           ui_url: str) -> None:
    steps = _steps(ui_url, built["run_id"], "train_mlp/train/loss")
    n = len(steps)
    assert n >= 6
    info = "document.querySelector(\"[data-key='train_mlp/train/loss'] .chart-info\")"
    p = page.goto(f"/run?id={built['run_id']}")
    loss = _chart(p, "train_mlp/train/loss")
    loss.locator("path.js-line").first.wait_for()
    plot = loss.locator(".chart-plot")
    a, b = steps[1], steps[3]
    with p.expect_response(lambda r: "/metrics/train_mlp/train/loss" in r.url
                           and f"start={a}" in r.url and f"end={b}" in r.url):
        plot.evaluate(f"el => Plotly.relayout(el, {{'xaxis.range[0]': {a}, "
                      f"'xaxis.range[1]': {b}}})")
    p.wait_for_function(f"() => {info}.textContent.startsWith('3 of {n}')")
    assert plot.evaluate("el => el.data[0].x") == steps[1:4]
    section = p.locator("section", has=p.locator(".model-metrics"))
    section.locator("input.log-scale").check()
    assert plot.evaluate("el => el._fullLayout.yaxis.type") == "log"
    section.locator("input.smoothing").evaluate(
        "el => { el.value = '0.6'; el.dispatchEvent(new Event('input')); }")
    p.wait_for_function("() => document.querySelector(\"[data-key='train_mlp/train/loss'] "
                        ".chart-plot\").data.length === 2")
    raw, smooth = plot.evaluate("el => [el.data[0].y, el.data[1].y]")
    assert smooth[0] == pytest.approx(raw[0]) and smooth[1] != pytest.approx(raw[1])
    with p.expect_response(lambda r: "/metrics/train_mlp/train/loss" in r.url
                           and "x=time" in r.url):
        section.locator("select.x-axis").select_option("time")
    p.wait_for_function("() => document.querySelector(\"[data-key='train_mlp/train/loss'] "
                        ".chart-plot\").layout.xaxis.title.text === 'seconds since start'")
    xs = plot.evaluate("el => el.data[0].x")
    assert len(xs) == n and 0 < xs[0] < xs[-1] < 300  # seconds since the run started
    # zoomed in on time, then back out (a double click's autorange): the whole series
    t0, t1 = (xs[1] + xs[2]) / 2, (xs[4] + xs[5]) / 2  # between points: xs[2:5]
    with p.expect_response(lambda r: "x=time" in r.url and "start=" in r.url):
        plot.evaluate(f"el => Plotly.relayout(el, {{'xaxis.range[0]': {t0}, "
                      f"'xaxis.range[1]': {t1}}})")
    p.wait_for_function(f"() => {info}.textContent.startsWith('3 of {n}')")
    with p.expect_response(lambda r: "x=time" in r.url and "start=" not in r.url):
        plot.evaluate("el => Plotly.relayout(el, {'xaxis.autorange': true})")
    p.wait_for_function(f"() => {info}.textContent.startsWith('{n} of {n}')")


def test_the_gallery_runs_previews_and_system_metrics(page: RunBrowser,
                                                      built: dict[str, Any]) -> None:
    p = page.goto(f"/run?id={built['gallery_run']}")
    _chart(p, "loss").locator("path.js-line").first.wait_for()
    # attached, not "visible": a series that held one value (a machine's CPU share can)
    # is a flat line, whose box has no height, and Playwright calls that hidden
    p.locator("section.system .metric-chart[data-key='system/cpu_percent'] path.js-line"
              ).first.wait_for(state="attached")
    preview = p.locator(".artifact-preview")
    p.get_by_role("button", name="reports/curve.png").click()
    image = preview.locator("img.artifact-image")
    image.wait_for()
    p.wait_for_function("() => document.querySelector('img.artifact-image').complete")
    assert image.evaluate("el => [el.naturalWidth, el.naturalHeight]") == [64, 32]
    assert image.get_attribute("src").startswith("blob:")
    p.get_by_role("button", name="reports/predictions.csv").click()
    preview.locator("table.artifact-table").wait_for()
    assert preview.locator("thead").inner_text().split() == ["id", "label", "score"]
    assert preview.locator("tbody tr").count() == 20
    p.get_by_role("button", name="reports/notes.txt").click()
    text = preview.locator("pre.artifact-text")
    text.wait_for()
    assert "<script>alert(1)</script>" in text.inner_text()  # as text, never markup
    assert preview.locator("script").count() == 0
    row = p.locator("table.artifacts tbody tr", has_text="reports/predictions.csv")
    with p.expect_download() as got:
        row.get_by_role("button", name="Download").click()
    download = got.value
    assert download.suggested_filename == "predictions.csv"
    saved = Path(download.path()).read_text()
    assert saved.startswith("id,label,score\n0,0,0.00\n") and saved.count("\n") == 31
    page.shot("run-gallery")


def test_a_failed_run_shows_its_traceback(page: RunBrowser, built: dict[str, Any]) -> None:
    p = page.goto(f"/run?id={built['failed_run']}")
    assert p.locator("h1 .badge").inner_text() == "failed"
    tb = p.locator("pre.traceback")
    assert tb.inner_text().startswith("Traceback (most recent call last):")
    assert "RuntimeError: the GPU caught fire at step 3" in tb.inner_text()
    page.shot("run-failed")


def test_a_run_named_like_a_script_shows_as_text(page: RunBrowser,
                                                 built: dict[str, Any]) -> None:
    dialogs: list[str] = []
    page.page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    p = page.goto(f"/run?id={built['xss_run']}")
    assert p.locator("h1 .run-name").inner_text() == "<script>alert(1)</script>"
    assert p.locator("main script").count() == 0 and dialogs == []
    assert p.title() == "<script>alert(1)</script> · Reprise"


def test_an_unknown_run_says_so(page: RunBrowser) -> None:
    page.allowed = ("404",)
    p = page.goto("/run?id=0123456789abcdef")
    assert "no run with id" in p.locator("#main .error").inner_text()


def test_with_a_token_previews_and_downloads_carry_it(chromium: Any, demo_project: Path,
                                                      built: dict[str, Any]) -> None:
    """An image and a download are fetched with the bearer token (an <img src> or a plain
    link could not send it): the page works on a dashboard that needs one."""
    with _browser.ui_server(demo_project, env={"REPRISE_UI_TOKEN": "t0ken"},
                            log=demo_project.parent / "ui-token-run.log") as url:
        b = RunBrowser(chromium, url, "token")
        try:
            p = b.goto(f"/run?id={built['gallery_run']}#token=t0ken")
            p.get_by_role("button", name="reports/curve.png").click()
            p.wait_for_function("() => { const i = document.querySelector('img.artifact-image');"
                                " return i && i.complete && i.naturalWidth === 64; }")
            row = p.locator("table.artifacts tbody tr", has_text="config.json")
            with p.expect_download() as got:
                row.get_by_role("button", name="Download").click()
            assert "<script>alert(1)</script>" in Path(got.value.path()).read_text()
        finally:
            errors = b.close()
        assert not errors, "the page had errors:\n" + "\n".join(errors)


def test_click_through_a_cached_step_to_its_run_and_parent(page: RunBrowser,
                                                           built: dict[str, Any]) -> None:
    p = page.goto(f"/run?id={built['run_id']}")
    origin = p.locator("table.steps tbody tr", has_text="featurize").locator("a")
    first_id = origin.inner_text()
    origin.click()
    p.wait_for_url(f"**/run?id={first_id}")
    p.locator("table.steps").wait_for()
    # the run whose featurize step executed: a tuning trial's pipeline run
    assert p.locator(".run-id").inner_text() == first_id
    featurize = p.locator("table.steps tbody tr", has_text="featurize")
    assert "executed" in featurize.inner_text()
    parent = p.locator(".run-head a.parent")
    trial_id = parent.inner_text()
    parent.click()
    p.wait_for_url(f"**/run?id={trial_id}")
    p.locator("h1 .run-name").wait_for()
    assert p.locator("h1 .run-name").inner_text().startswith("trial-")
    children = p.locator("section", has_text="Summary").locator("a", has_text=first_id)
    assert children.count() == 1


def test_a_running_runs_charts_follow_it(chromium: Any, tmp_path: Path) -> None:
    """A live run: its chart grows while it logs, a new series appears, and the page shows
    it finished once it ends (a workspace of its own: the demo's is only read)."""
    import reprise

    ws = reprise.init(tmp_path / "live")
    run = reprise.start_run("live", workspace=ws)
    try:
        for i in range(3):
            run.log_metric("loss", 1.0 / (i + 1), step=i)
        with _browser.ui_server(tmp_path / "live", log=tmp_path / "ui-live.log") as url:
            b = RunBrowser(chromium, url, "live")
            try:
                p = b.goto(f"/run?id={run.id}")
                assert p.locator("h1 .badge").inner_text() == "running"
                info = _chart(p, "loss").locator(".chart-info")
                assert info.inner_text() == "3 of 3 points"
                for i in range(3, 10):
                    run.log_metric("loss", 1.0 / (i + 1), step=i)
                info.filter(has_text="10 of 10 points").wait_for()
                for i in range(2):
                    run.log_metric("acc", 0.5 + i / 10, step=i)
                _chart(p, "acc").locator("path.js-line").first.wait_for()
                run.end()
                p.locator("h1 .badge", has_text="finished").wait_for()
                assert p.locator(".live").count() == 0
            finally:
                errors = b.close()
            assert not errors, "the page had errors:\n" + "\n".join(errors)
    finally:
        if not run.status.is_terminal:
            run.end()
        ws.close()
