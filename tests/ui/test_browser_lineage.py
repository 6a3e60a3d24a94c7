"""The lineage, datasets and studies pages in a real Chromium over the demo's workspace:
the lineage graph of the demo's run and of ``cancer@production`` down to ``cancer@1``,
a click on a node showing its details; a dataset's schema, histogram and the diff of its
two versions; a study's history, parallel coordinates, importances and trials; markup in
names shown as text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from tests.ui import _browser


def _built(demo_project: Path) -> dict[str, Any]:
    return dict(json.loads((demo_project / "built.json").read_text()))


def _graph(ui_url: str, ref: str) -> dict[str, Any]:
    return dict(httpx.get(f"{ui_url}/api/lineage", params={"ref": ref}, timeout=60).json())


def _click_node(page: Any, graph: dict[str, Any], index: int) -> None:
    """Click the graph's node number ``index`` where it is drawn: Plotly finds the point
    under the mouse, so the mouse hovers until Plotly's label names that node (the chart
    may still be settling its size), then clicks."""
    node = graph["nodes"][index]
    want = f"{node['kind']}: {node['label']}"
    point = page.locator("#lineage-graph .scatterlayer .trace .points path.point").nth(index)
    hover = page.locator("#lineage-graph .hoverlayer .hovertext")
    for _ in range(30):
        box = point.bounding_box()
        assert box is not None
        x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
        page.mouse.move(x, y - 60)
        page.mouse.move(x, y, steps=3)
        for _ in range(5):  # Plotly draws its hover label on the next frame
            if hover.count() and want in (hover.first.text_content() or ""):
                page.mouse.click(x, y)
                return
            page.wait_for_timeout(100)
    raise AssertionError(f"could not hover the node {want!r} at {box}: "
                         f"{hover.all_text_contents()}")


def test_the_lineage_of_the_demo_run_reaches_the_dataset_and_a_click_shows_a_node(
        browser: Any, demo_project: Path, ui_url: str) -> None:
    run_id = _built(demo_project)["run_id"]
    graph = _graph(ui_url, run_id)
    page = browser.goto(f"/lineage?ref={run_id}")
    assert page.locator("#nav a.active").inner_text() == "Lineage"
    assert page.locator("input[name=ref]").input_value() == run_id
    points = page.locator("#lineage-graph .scatterlayer .trace .points path.point")
    assert points.count() == len(graph["nodes"])
    labels = page.locator("#lineage-graph .scatterlayer text")
    assert "cancer@1" in labels.all_text_contents()
    assert {"load", "train_mlp", "package"} <= set(labels.all_text_contents())
    # edges are drawn as arrows
    assert page.locator("#lineage-graph .annotation").count() == len(graph["edges"])

    dataset = next(i for i, n in enumerate(graph["nodes"]) if n["kind"] == "dataset")
    _click_node(page, graph, dataset)
    details = page.locator("#lineage-details")
    details.locator("h2", has_text="cancer@1").wait_for()
    assert "dataset" in details.locator(".badge").first.inner_text()
    assert graph["nodes"][dataset]["hash"] in details.inner_text()
    open_it = details.get_by_role("link", name="Open the dataset")
    assert open_it.get_attribute("href") == "/dataset?name=cancer&version=1"

    step = next(i for i, n in enumerate(graph["nodes"]) if n["label"] == "train_mlp")
    _click_node(page, graph, step)
    details.locator("h2", has_text="train_mlp").wait_for()
    run_link = details.get_by_role("link", name=graph["nodes"][step]["run"])
    assert run_link.get_attribute("href") == f"/run?id={graph['nodes'][step]['run']}"
    browser.shot("lineage")

    open_it = page.locator("#lineage-details")
    _click_node(page, graph, dataset)
    open_it.get_by_role("link", name="Open the dataset").click()
    page.wait_for_url("**/dataset?name=cancer&version=1")
    page.locator("h1", has_text="cancer@1").wait_for()


def test_the_lineage_of_the_production_model_reaches_cancer_1(browser: Any,
                                                              ui_url: str) -> None:
    graph = _graph(ui_url, "cancer@production")
    page = browser.goto("/lineage?ref=cancer@production")
    labels = page.locator("#lineage-graph .scatterlayer text").all_text_contents()
    assert "cancer@1" in labels and "cancer:1" in labels
    model = next(i for i, n in enumerate(graph["nodes"]) if n["kind"] == "model")
    _click_node(page, graph, model)
    details = page.locator("#lineage-details")
    details.locator("h2", has_text="cancer:1").wait_for()
    assert details.get_by_role("link", name="Open the model").get_attribute(
        "href") == "/model?name=cancer&version=1"
    # the list of nodes selects too (keyboard users)
    page.locator("table.lineage-nodes a.node-link", has_text="cancer@1").click()
    details.locator("h2", has_text="cancer@1").wait_for()
    assert "Open the dataset" in details.inner_text()
    # an artifact's own lineage, from its node
    package = next(n for n in graph["nodes"] if n["kind"] == "step" and n["label"] == "package")
    out = next(e["to"] for e in graph["edges"] if e["from"] == package["id"])
    label = next(n["label"] for n in graph["nodes"] if n["id"] == out)
    page.locator("table.lineage-nodes a.node-link", has_text=label).first.click()
    details.get_by_role("link", name="Lineage of this").click()
    page.wait_for_url("**/lineage?ref=*")
    page.locator("#lineage-graph .scatterlayer text", has_text="cancer@1").wait_for()
    assert "Upstream of artifact" in page.locator("main").inner_text()


def test_from_the_runs_to_a_run_lineage_by_the_nav_and_the_ref_box(browser: Any,
                                                                    demo_project: Path) -> None:
    run_id = _built(demo_project)["run_id"]
    page = browser.goto("/runs")
    page.locator("#nav a", has_text="Lineage").click()
    page.wait_for_url("**/lineage")
    page.locator("table.lineage-runs").get_by_role("link", name=run_id).click()
    page.wait_for_url(f"**/lineage?ref={run_id}")
    page.locator("#lineage-graph .scatterlayer text", has_text="cancer@1").wait_for()
    box = page.locator("input[name=ref]")
    box.fill("cancer:1")
    box.press("Enter")
    page.wait_for_url("**/lineage?ref=cancer%3A1")
    page.locator("#lineage-graph .scatterlayer text", has_text="cancer:1").wait_for()


def test_an_unknown_ref_is_a_message_on_the_page(chromium: Any, ui_url: str) -> None:
    b = _browser.Browser(chromium, ui_url, "unknown-ref")
    try:
        page = b.goto("/lineage?ref=nosuchrun")
        alert = page.get_by_role("alert")
        assert "no run or artifact 'nosuchrun'" in alert.inner_text()
        assert page.locator("input[name=ref]").is_visible()  # the box stays, to try again
        page = b.goto("/lineage?ref=cancer@nowhere")
        assert "no alias 'nowhere'" in page.get_by_role("alert").inner_text()
    finally:
        # the API's 404 is the expected answer; Chromium logs it as a failed resource
        errors = b.close(allowed=("HTTP 404", "status of 404"))
    assert not errors, errors


def test_the_datasets_page_lists_both_versions(browser: Any) -> None:
    page = browser.goto("/datasets")
    versions = page.locator("section.dataset table.versions")
    assert versions.get_by_role("link", name="cancer@2").count() == 1
    assert versions.get_by_role("link", name="cancer@1").count() == 1
    assert "569" in versions.inner_text() and "529" in versions.inner_text()
    browser.shot("datasets")
    versions.get_by_role("link", name="cancer@1").click()
    page.wait_for_url("**/dataset?name=cancer&version=1")
    page.locator("#histogram .barlayer .point").first.wait_for()


def test_a_dataset_shows_its_schema_a_histogram_and_a_diff(browser: Any) -> None:
    page = browser.goto("/dataset?name=cancer&version=1")
    assert page.locator("h1").inner_text() == "Dataset cancer@1"
    schema = page.locator("table.schema")
    row = schema.locator("tr", has_text="mean_radius")
    assert "double" in row.inner_text() and "numeric" in row.inner_text()
    assert schema.locator("tbody tr").count() == 32
    # the first numeric column's histogram: 20 bins of the profile
    bars = page.locator("#histogram .barlayer .point")
    assert bars.count() == 20
    assert page.locator("#histogram .xtitle").text_content() == "mean_radius"
    schema.get_by_role("link", name="worst_area").click()
    page.locator("#histogram .xtitle", has_text="worst_area").wait_for()
    assert page.locator("#histogram-column").input_value() == "worst_area"

    # the diff against the other version, drawn on load
    diff = page.locator("#diff")
    diff.locator("table.diff-columns").wait_for()
    assert "cancer@1 → cancer@2" in diff.inner_text()
    assert "569 → 529" in diff.inner_text()
    head = diff.locator("table.diff-columns th").all_inner_texts()
    assert head[0] == "Column" and "max" in head
    texture = diff.locator("table.diff-columns tr", has_text="mean_texture").first
    cells = texture.locator("td").all_inner_texts()
    assert cells[head.index("max")] == "39.28 → 58.92"
    browser.shot("dataset")
    # the same version on both sides: identical
    page.locator("#diff-old").select_option("2")
    page.locator("#diff-new").select_option("2")
    page.locator("#diff-go").click()
    diff.locator("strong", has_text="identical bytes").wait_for()
    assert "No column statistic changed." in diff.inner_text()


def test_the_study_page_draws_history_parallel_coordinates_and_trials(
        browser: Any, ui_url: str) -> None:
    study = httpx.get(f"{ui_url}/api/studies/tabular", timeout=60).json()
    page = browser.goto("/studies")
    page.locator("table.studies").get_by_role("link", name="tabular", exact=True).click()
    page.wait_for_url("**/study?name=tabular")
    page.locator("h1", has_text="Study tabular").wait_for()
    # history: each trial's value and the best so far
    history = page.locator("#history")
    assert history.locator(".scatterlayer .trace").count() == 2
    assert history.locator(".scatterlayer .trace").first.locator("path.point").count() == 3
    assert "best so far" in history.locator(".legend").text_content()
    # parallel coordinates: one axis per param and the value, a line per trial
    parallel = page.locator("#parcoords")
    titles = parallel.locator(".annotation-text").all_text_contents()
    assert {"hidden", "lr (log)", "value"} <= set(titles)
    assert "32" in titles and "64" in titles  # the categorical axis's ticks
    assert parallel.locator(".scatterlayer path.point").count() == 3 * 3
    assert page.locator("#importances .barlayer .point").count() == 2
    trials = page.locator("table.trials tbody tr")
    assert trials.count() == 3
    for t in study["trials"]:
        row = page.locator(f"table.trials tr[data-trial='{t['number']}']")
        assert "complete" in row.locator(".badge").inner_text()
        assert row.get_by_role("link", name=t["run_id"]).get_attribute(
            "href") == f"/run?id={t['run_id']}"
    best = study["best"]
    assert f"#{best['number']}" in page.locator("section.card").first.inner_text()
    browser.shot("study")


def test_markup_in_a_study_name_and_params_shows_as_text(browser: Any,
                                                         demo_project: Path) -> None:
    markup = _built(demo_project)["markup_study"]
    dialogs: list[str] = []
    browser.page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page = browser.goto("/studies")
    link = page.locator("table.studies").get_by_role("link", name=markup)
    assert link.inner_text() == markup
    link.click()
    page.wait_for_url("**/study?name=*")
    page.locator("h1 .mono", has_text=markup).wait_for()
    assert page.locator("h1 .mono").inner_text() == markup
    ticks = page.locator("#parcoords .annotation-text").all_text_contents()
    assert "<b>bold</b>" in ticks  # as typed: not bold, no image
    assert "<img src=x onerror=alert(2)>" in ticks
    assert page.locator("img").count() == 0 and page.locator("main script").count() == 0
    assert "<img src=x onerror=alert(2)>" in page.locator("table.trials").inner_text()
    assert dialogs == []


def test_a_run_named_like_markup_shows_as_text_in_its_lineage(browser: Any, ui_url: str,
                                                             demo_project: Path) -> None:
    """The markup study's own run (a tuning run outside any pipeline: nothing upstream)."""
    name = "tune:" + _built(demo_project)["markup_study"]
    runs = httpx.get(f"{ui_url}/api/runs", params={"q": f"name = '{name}'"}, timeout=60).json()
    (run,) = runs["runs"]
    dialogs: list[str] = []
    browser.page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page = browser.goto(f"/lineage?ref={run['id']}")
    assert page.locator("#lineage-empty").is_visible()
    label = page.locator("#lineage-graph .scatterlayer text").first.text_content()
    assert label == name[:17] + "…"  # as typed (shortened), not markup
    page.locator("table.lineage-nodes a.node-link").first.click()
    assert page.locator("#lineage-details h2").inner_text() == name
    assert page.locator("main script").count() == 0 and dialogs == []
