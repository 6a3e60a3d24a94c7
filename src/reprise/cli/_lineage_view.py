"""``reprise lineage``'s default view: one row per step, in topological order, each
input named by the step it came from, each artifact's hash printed once (as the
output of the step that made it). Presentation only; the order comes from
``reprise.pipeline._lineage_dag``."""

from __future__ import annotations

from typing import Any

__all__ = ["lineage_title", "print_lineage_steps"]

_HASH = 12


def lineage_title(tree: dict[str, Any]) -> str:
    """The first line of either view: what the lineage is of."""
    if tree["kind"] == "model":
        summary = tree.get("summary") or {}
        return (f"model {tree['ref']} = {tree['model']}  (run {tree.get('run') or '-'}; data "
                f"{', '.join(summary.get('datasets') or []) or '-'}; code snapshot "
                f"{(summary.get('code_snapshot') or '-')[:16]})" + _trigger_line(summary))
    if tree["kind"] == "run":
        return f"run {tree['root']}  ({tree.get('pipeline') or ''})"
    return f"artifact {tree['root']}"


def _trigger_line(summary: dict[str, Any]) -> str:
    """alarm -> monitoring window -> retraining run -> data -> code, for a version the
    monitor's loop retrained."""
    trig = summary.get("trigger")
    if not trig:
        return ""
    alarm, window = trig.get("alarm") or {}, trig.get("window") or {}
    return (f"\n  retrained by the monitor: alarm {alarm.get('id', '?')} ({alarm.get('kind', '?')}"
            f" on {alarm.get('model', '?')}: {alarm.get('message', '')})"
            f" -> window {window.get('rows', '?')} rows {_when(window.get('start'))}.."
            f"{_when(window.get('end'))} -> run {summary.get('run') or '-'} -> data "
            f"{', '.join(summary.get('datasets') or []) or '-'} -> code "
            f"{(summary.get('code_snapshot') or '-')[:16]}")


def _when(t: Any) -> str:
    import time

    if not isinstance(t, int | float):
        return "?"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))


def _input(i: dict[str, Any], outputs_of: dict[str, int]) -> str:
    name = i.get("name") or "?"
    if "source" in i:  # a raw file, or a dataset version ("users@2")
        kind = "dataset" if "@" in str(i["source"]) else "file"
        return f"{name} <- {kind} {i['source']} {i['hash'][:_HASH]}"
    if i.get("from_step") is None:
        return f"{name} <- {i['hash'][:_HASH]} (no recorded producer)"
    several = outputs_of.get(i["from_step_run"], 1) > 1 and i.get("from_output") is not None
    return f"{name} <- {i['from_step']}" + (f"[{i['from_output']}]" if several else "")


def _output(o: dict[str, Any], several: bool) -> str:
    label = f"[{o['name']}] " if several else ""
    return f"{label}{o['hash'][:_HASH]}" + (" *" if o["final"] else "")


def print_lineage_steps(tree: dict[str, Any], steps: list[dict[str, Any]]) -> None:
    """Print ``steps`` (from ``lineage_steps``) as a table under the tree's title."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    con = Console()
    con.print(Text(lineage_title(tree)), highlight=False)
    if not steps:
        con.print("no recorded steps (an artifact logged outside a pipeline)")
        return
    outputs_of = {st["step_run"]: len(st["outputs"]) for st in steps}
    runs = {st["run"] for st in steps}
    table = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("#", "step", "status", "inputs", "outputs"):
        table.add_column(col, justify="right" if col == "#" else "left",
                         no_wrap=col in ("#", "status"))
    for n, st in enumerate(steps, 1):
        status = "reused" if st["status"] == "cached" else st["status"]
        if len(runs) > 1:
            status += f" (run {st['run'][:10]})"
        several = len(st["outputs"]) > 1
        table.add_row(str(n), Text(st["step"]), Text(status),
                      Text("\n".join(_input(i, outputs_of) for i in st["inputs"]) or "-"),
                      Text("\n".join(_output(o, several) for o in st["outputs"]) or "-"))
    con.print(table)
    if any(o["final"] for st in steps for o in st["outputs"]):
        con.print("* final output.  --tree: as a tree; --format mermaid|dot|json: as a graph",
                  highlight=False)
