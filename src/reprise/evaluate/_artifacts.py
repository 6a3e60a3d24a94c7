"""Finding the stored HTML report of a run (what ``reprise report RUN`` shows).

:func:`evaluate` stores its report as ``evaluation.html`` (``evaluation-<name>.html``
with ``name=``) in the active run: a plain run keeps it as a run artifact, a
pipeline step as its extra output ``artifacts/evaluation.html``.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from reprise.core.errors import UserError

__all__ = ["REPORT_ARTIFACT", "ReportRef", "find_reports", "load_report"]

REPORT_ARTIFACT = "evaluation.html"
_REPORT = re.compile(r"^(?:artifacts/)?evaluation(?:-(?P<name>[A-Za-z0-9_.-]+))?\.html$")
_HOW = ("call reprise.evaluate.evaluate(...) inside `with reprise.start_run(...)` or inside a "
        "pipeline step (report=True, the default), then run `reprise report RUN`.")


class ReportRef(NamedTuple):
    """One stored report: the step that logged it (None in a plain run), its ``name=``."""

    step: str | None
    name: str | None
    hash: str

    @property
    def label(self) -> str:
        parts = ([f"--step {self.step}"] if self.step else []) + (
            [f"--name {self.name}"] if self.name else [])
        return " ".join(parts) or "(the run's own)"


def find_reports(store: Any, run_id: str) -> list[ReportRef]:
    """Every evaluation report run ``run_id`` holds, as a run artifact or a step output."""
    out = []
    for key, art in sorted(store.run_artifacts(run_id).items()):
        match = _REPORT.match(key)
        if match and not key.startswith("artifacts/"):
            out.append(ReportRef(None, match.group("name"), art.hash))
    for st in store.get_step_runs(run_id):
        for o in st.get("outputs") or []:
            match = _REPORT.match(o["name"])
            if match and o["name"].startswith("artifacts/"):
                out.append(ReportRef(str(st["step_name"]), match.group("name"), str(o["hash"])))
    return out


def load_report(workspace: Any, run: str, step: str | None = None,
                name: str | None = None) -> tuple[str, ReportRef, bytes]:
    """``(run id, which report, HTML bytes)`` of the one evaluation report of ``run``
    matching ``step`` and ``name`` (needed only when the run holds several).

    Example:
        >>> import reprise, tempfile
        >>> from reprise.evaluate import evaluate
        >>> ws = reprise.init(tempfile.mkdtemp())
        >>> with reprise.start_run("eval", workspace=ws) as r:
        ...     _ = evaluate(y=[0, 1, 1, 0], y_pred=[0, 1, 0, 0], bootstrap=0)
        >>> load_report(ws, r.id)[2][:15]
        b'<!DOCTYPE html>'
    """
    from reprise.tracking._api import resolve_workspace

    workspace = resolve_workspace(workspace)
    store = workspace.metadata
    workspace.recover()  # a run that just ended may not be ingested yet
    rec = store.get_run(run)
    found = find_reports(store, rec.id)
    if not found:
        raise UserError(f"run {rec.id} has no evaluation report; {_HOW}")
    picked = [r for r in found if (step is None or r.step == step)
              and (name is None or r.name == name)]
    listing = "; ".join(r.label for r in found)
    if not picked:
        raise UserError(f"run {rec.id} has no evaluation report for "
                        f"{ReportRef(step, name, '').label}; it has: {listing}.")
    if len(picked) > 1:
        raise UserError(f"run {rec.id} has several evaluation reports; pick one with "
                        f"--step/--name: {'; '.join(r.label for r in picked)}.")
    return rec.id, picked[0], workspace.artifacts.get_bytes(picked[0].hash, verify=True)
