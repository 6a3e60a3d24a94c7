"""Rendering for the CLI: rich tables and JSON. Presentation only."""

from __future__ import annotations

import datetime as dt
import json
import sys
from typing import Any

from reprise.core.errors import UserError

__all__ = [
    "comparison",
    "env_changes",
    "environment",
    "fsck_report",
    "human_bytes",
    "parse_pairs",
    "print_json",
    "run_detail",
    "runs_table",
]

_STATUS_STYLE = {"running": "cyan", "finished": "green", "failed": "red", "killed": "yellow"}


def _console() -> Any:
    from rich.console import Console

    return Console()


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, sort_keys=True, default=str) + "\n")


def parse_pairs(items: list[str], option: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UserError(f"{option} takes KEY=VALUE, got {item!r}.")
        out[key] = value
    return out


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _time(ts: float | None) -> str:
    return "-" if ts is None else dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def _dur(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    return f"{int(seconds // 60)}m{seconds % 60:02.0f}s"


def _fmt(value: Any) -> str:
    if isinstance(value, dict) and "$input" in value:  # a dataset (or other workspace) input
        asked = str(value["$input"]).partition(":")[2]
        resolved = value.get("resolved")
        return f"{resolved} (as {asked})" if resolved and resolved != asked else str(resolved)
    if isinstance(value, float):
        return f"{value:.6g}"
    if value is None:
        return "-"
    return value if isinstance(value, str) else json.dumps(value)


def runs_table(rows: list[dict[str, Any]], short: dict[str, str], sort_metric: str | None,
               columns: str | None = None) -> None:
    """Runs as a table that fits the terminal (see ``reprise.cli._runs_table``)."""
    if not rows:
        _console().print("No runs yet. Start one with reprise.start_run() or `reprise run`.")
        return
    from reprise.cli._runs_table import print_runs

    print_runs(rows, short, sort_metric=sort_metric, columns=columns)


def run_detail(info: dict[str, Any]) -> None:
    from rich.table import Table

    con = _console()
    style = _STATUS_STYLE.get(info["status"], "")
    con.print(f"[bold]Run {info['id']}[/]  {info['name']}  [{style}]{info['status']}[/]")
    fields = [("kind", info["kind"]), ("parent", info["parent_id"]),
              ("started", _time(info["started_at"])), ("ended", _time(info["ended_at"])),
              ("duration", _dur(info["duration"])), ("seed", info["seed"]),
              ("environment", (info["env_hash"] or "-")[:16]),
              ("git", _git(info)), ("host", info["host"]), ("user", info["user"]),
              ("energy", _energy(info))]
    for key, value in fields:
        con.print(f"  {key:<12} {_fmt(value)}")
    if info["error"]:
        con.print("[red]error:[/]")
        con.print(info["error"].rstrip(), markup=False, highlight=False)
    for title, mapping in (("params", info["params"]), ("tags", info["tags"])):
        if mapping:
            table = Table(title=title, title_justify="left", box=None, show_header=False)
            for k, v in sorted(mapping.items()):
                table.add_row(f"  {k}", _fmt(v))
            con.print(table)
    if info["metrics"]:
        table = Table(title="metrics (final)", title_justify="left", box=None)
        table.add_column("key")
        table.add_column("value", justify="right")
        table.add_column("step", justify="right")
        for k, v in info["metrics"].items():
            table.add_row(k, _fmt(v), str(info["metric_steps"][k]))
        con.print(table)
    if info["artifacts"]:
        table = Table(title="artifacts", title_justify="left", box=None)
        for col in ("name", "kind", "size", "hash"):
            table.add_column(col)
        for name, a in info["artifacts"].items():
            table.add_row(name, a["kind"], human_bytes(a["size"]), a["hash"][:16])
        con.print(table)
    if info.get("reads"):
        _reads_table(con, info["reads"])
    if info["children"]:
        con.print(f"  children     {len(info['children'])}: {', '.join(info['children'][:5])}")


def _reads_table(con: Any, rows: list[dict[str, Any]]) -> None:
    """What steps read beyond their declared inputs (checked before a cached result is
    reused): content hashes of files, keyed digests of variables (never their values)."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="reads not declared as inputs (checked before reuse)",
                  title_justify="left", box=None)
    for col in ("step", "", "read", "digest"):
        table.add_column(col, overflow="fold")
    for r in rows:
        if r["kind"] == "rerun":
            what, digest = f"[yellow]re-executed:[/] {escape(r['name'])}", ""
        elif r["kind"] == "env":
            what = "environment iterated" if r["name"] == "*" else escape(f"${r['name']}")
            digest = "" if r["name"] == "*" else _digest(r["digest"], "unset")
        else:
            what, digest = escape(r["name"]), _digest(r["digest"], "absent")
        table.add_row(escape(r["step"]), r["status"], what, digest)
    con.print(table)


def _digest(value: str | None, missing: str) -> str:
    if value is None:
        return missing
    return value[:16] if len(value) == 64 else value


def _git(info: dict[str, Any]) -> str:
    if not info["git_commit"]:
        return "-"
    return str(info["git_commit"])[:12] + (" (dirty)" if info["git_dirty"] else "")


def _energy(info: dict[str, Any]) -> str:
    if info["energy_joules"] is None:
        return "-"
    label = " (estimate)" if info["energy_source"] == "estimate" else ""
    return f"{info['energy_joules']:.1f} J via {info['energy_source']}{label}"


def comparison(cmp: dict[str, Any]) -> None:
    from rich.table import Table

    con = _console()
    a, b = cmp["a"], cmp["b"]
    con.print(f"[bold]A[/] {a['id']} {a['name']} ({a['status']})")
    con.print(f"[bold]B[/] {b['id']} {b['name']} ({b['status']})")
    if cmp["params"]:
        table = Table(title="params", title_justify="left", box=None)
        for col in ("key", "A", "B", ""):
            table.add_column(col)
        for p in cmp["params"]:
            table.add_row(p["key"], _fmt(p["a"]), _fmt(p["b"]),
                          "[yellow]changed[/]" if p["changed"] else "")
        con.print(table)
    if cmp["metrics"]:
        table = Table(title="metrics (final)", title_justify="left", box=None)
        for col in ("key", "A", "B", "B - A"):
            table.add_column(col, justify="left" if col == "key" else "right")
        for m in cmp["metrics"]:
            table.add_row(m["key"], _fmt(m["a"]), _fmt(m["b"]), _fmt(m["delta"]))
        con.print(table)
    env_changes(cmp["environment"])


def env_changes(changes: list[dict[str, Any]]) -> None:
    from rich.table import Table

    con = _console()
    if not changes:
        con.print("environment: identical")
        return
    table = Table(title=f"environment: {len(changes)} change(s)", title_justify="left", box=None)
    for col in ("section", "key", "A", "B"):
        table.add_column(col)
    for c in changes:
        table.add_row(c["section"], c["key"], _fmt(c["old"]), _fmt(c["new"]))
    con.print(table)


def environment(env_hash: str, fp: dict[str, Any]) -> None:
    con = _console()
    con.print(f"[bold]Environment[/] {env_hash[:16]}")
    for section, value in fp.items():
        if section == "packages" and isinstance(value, dict):
            con.print(f"  packages     {len(value)} installed "
                      "(see --json for the full list)")
        elif isinstance(value, dict):
            inner = ", ".join(f"{k}={_fmt(v)}" for k, v in value.items())
            con.print(f"  {section:<12} {inner}", markup=False, highlight=False)
        else:
            con.print(f"  {section:<12} {_fmt(value)}", markup=False, highlight=False)


def fsck_report(report: Any) -> None:
    con = _console()
    con.print(f"checked {report.checked} recorded blob(s)")
    for h in report.missing:
        con.print(f"[red]missing[/]    {h}")
    for h in report.corrupted:
        con.print(f"[red]corrupted[/]  {h}")
    if report.unrecorded:
        con.print(f"{len(report.unrecorded)} blob(s) not recorded in the database "
                  "(`reprise gc` removes them)")
    con.print("[green]ok[/]" if report.ok else "[red]problems found[/]")


_VERDICT_STYLE = {"identical": "green", "within_tolerance": "yellow", "differs": "bold red",
                  "failed": "bold red", "missing": "red"}


def verify_report(report: Any) -> None:
    from rich.table import Table

    con = _console()
    table = Table(title=f"verify {report.run_id}  (re-executed as {report.verify_run_id})",
                  title_justify="left", box=None)
    for col in ("step", "result", "outputs", "metric deltas"):
        table.add_column(col)
    for v in report.steps:
        label = "equal within tolerance" if v.status == "within_tolerance" else v.status
        outs = ", ".join(f"{o['name']}: {'same' if o['same'] else 'DIFFERS'}" for o in v.outputs)
        shown = v.metric_deltas[:4]
        deltas = "; ".join(
            f"{d['key']}: {_fmt(d['recorded'])} -> {_fmt(d['now'])} (Δ {_fmt(d['delta'])})"
            if not d.get("max_abs_diff") else f"{d['key']}: max |Δ| {_fmt(d['delta'])}"
            for d in shown)
        if len(v.metric_deltas) > len(shown):
            deltas += f"; ... {len(v.metric_deltas) - len(shown)} more (--json)"
        if v.error and v.status in ("failed", "missing"):
            deltas = v.error.strip().splitlines()[-1] if v.error.strip() else v.error
        table.add_row(v.step, f"[{_VERDICT_STYLE.get(v.status, '')}]{label}[/]", outs, deltas)
    con.print(table)
    for v in report.steps:
        for d in v.determinism:
            if d.get("deterministic"):
                con.print(f"[green]training in {v.step}:[/] deterministic over {d['steps']} "
                          "optimizer step(s) run twice")
            else:
                more = len(d.get("parameters") or []) - 1
                con.print(f"[bold red]training in {v.step} is not deterministic:[/] the first "
                          f"{d['steps']} steps run twice diverge at optimizer step "
                          f"{d.get('first_divergent_step')}, parameter "
                          f"{(d.get('parameters') or ['?'])[0]}"
                          + (f" (+{more} more)" if more > 0 else "")
                          + ". Set Trainer(deterministic=True) and seed the data loader.")
    for v in report.steps:
        if v.scope_changes:
            changed = ", ".join(f"{c['name']} {c['recorded'] or '(absent)'} -> "
                                f"{c['now'] or '(absent)'}" for c in v.scope_changes)
            con.print(f"[bold]step {v.step}[/]: its environment scope changed: {changed}",
                      highlight=False)
    env_changes(report.env_changes)
    if report.ok:
        con.print("[green]verified:[/] every output is "
                  + ("identical." if all(v.status == "identical" for v in report.steps)
                     else f"identical or equal within tolerance {report.tolerance}."))
    else:
        bad = [v.step for v in report.steps if v.status not in ("identical", "within_tolerance")]
        con.print(f"[bold red]not reproduced:[/] step(s) {', '.join(bad)} differ.")


def lineage_tree(tree: dict[str, Any]) -> None:
    from rich.tree import Tree

    from reprise.cli._lineage_view import lineage_title

    title = lineage_title(tree)
    root = Tree(title)

    def add(parent: Any, node: dict[str, Any]) -> None:
        if node.get("kind") == "input":
            parent.add(f"[cyan]file[/] {node['source']}  {node['hash'][:16]}")
            return
        label = f"{node.get('name') or 'artifact'}  {node['hash'][:16]}"
        prod = node.get("produced_by")
        if not prod:
            parent.add(label + "  (no recorded producer)")
            return
        status = "reused" if prod["status"] == "cached" else prod["status"]
        branch = parent.add(f"{label}  <- step [bold]{prod['step']}[/] ({status}, run "
                            f"{prod['run'][:10]})" + ("  [dim](see above)[/]"
                                                      if node.get("repeated") else ""))
        for i in prod.get("inputs", ()):
            add(branch, i)

    for n in tree["nodes"]:
        add(root, n)
    _console().print(root)


def timestamp(ts: float | None) -> str:
    return _time(ts)


def ago(ts: float | None) -> str:
    """``"3m ago"``: how long ago ``ts`` was (a date beyond two months)."""
    import time

    from reprise.cli._runs_table import age

    return age(ts, time.time())


def table(columns: list[str], rows: list[list[Any]], title: str | None = None,
          keep: tuple[str, ...] = ()) -> None:
    """A plain table; the columns named in ``keep`` (what a user copies: names, ids)
    are never cut or wrapped when the terminal is narrow, the others give way."""
    from rich.table import Table
    from rich.text import Text

    cells = [[_fmt(v) for v in row] for row in rows]
    t = Table(box=None, header_style="bold", title=title, title_justify="left")
    for i, col in enumerate(columns):
        if col in keep:
            t.add_column(col, no_wrap=True, min_width=max(
                [len(col), *(len(str(r[i])) for r in cells)]))
        else:
            t.add_column(col)
    for row in cells:
        t.add_row(*(Text(str(v)) for v in row))
    _console().print(t)


def dataset_detail(rec: Any) -> None:
    con = _console()
    con.print(f"[bold]{rec.ref}[/]  {rec.format}  "
              f"{'' if rec.rows is None else str(rec.rows) + ' rows  '}"
              f"{human_bytes(rec.meta.get('size') or 0)}  added {_time(rec.created_at)}")
    con.print(f"hash    {rec.artifact_hash}")
    con.print(f"source  {rec.meta.get('source', '-')}")
    if rec.meta.get("schema"):
        con.print(f"schema  {rec.meta['schema']}")
    if "validation" in rec.meta:
        v = rec.meta["validation"]
        con.print(f"validated  {v['rows']} rows, {v['failing_rows']} failing")
    if "quarantine" in rec.meta:
        q = rec.meta["quarantine"]
        con.print(f"quarantine {q['rows']} rows in artifact {q['hash'][:12]}")
    profile = rec.profile or {}
    columns = profile.get("columns") or {}
    if columns:
        profile_columns(con, columns)
    elif profile:
        con.print("profile " + json.dumps({k: v for k, v in profile.items()
                                           if k != "format_version"}, default=str))


_PROFILE = ("column", "type", "nulls", "distinct", "min", "max", "mean", "std", "top")
_WHOLE = _PROFILE[:8]  # names, type names, numbers and dates: never cut, never wrapped


def _stat(value: Any) -> str:
    """A statistic, short: floats to 4 significant digits (``-0.0039``, ``9.993e+08``),
    integers whole (an id's digits are its value), dates as stored."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def profile_columns(con: Any, columns: dict[str, Any]) -> None:
    """A profile as a table when its numbers fit the terminal whole; otherwise one
    block per column (name and type, then ``stat value`` pairs wrapped between pairs),
    so that no number or date is ever cut (``-0.003…``)."""
    rows, top_width = [], 0
    for name, c in columns.items():
        tops = [f"{v}({n})" for v, n in (c.get("top") or [])[:3]]
        top_width = max([top_width, *map(len, tops)])  # the top column wraps between values
        rows.append([str(name), *(_stat(c.get(k)) for k in _PROFILE[1:8]), ", ".join(tops)])
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(_PROFILE)]
    need = sum(w for h, w in zip(_PROFILE, widths, strict=True) if h in _WHOLE) \
        + max(top_width + 1, len("top")) + 2 * (len(_PROFILE) - 1)
    if need <= con.width:
        from rich.table import Table
        from rich.text import Text

        t = Table(box=None, header_style="bold", title="profile", title_justify="left",
                  padding=(0, 1), pad_edge=False)
        for h, w in zip(_PROFILE, widths, strict=True):
            whole = h in _WHOLE
            t.add_column(h, no_wrap=whole, min_width=w if whole else top_width + 1,
                         overflow="fold")
        for row in rows:
            t.add_row(*(Text(v) for v in row))
        con.print(t)
        return
    from rich.markup import escape

    con.print("[bold]profile[/]")
    for row in rows:
        con.print(f"[bold]{escape(row[0])}[/]  {escape(row[1])}", overflow="fold")
        pairs = [f"{h} {v}" for h, v in zip(_PROFILE[2:8], row[2:8], strict=True) if v != "-"]
        for line in _pack(pairs, con.width - 2):
            con.print("  " + line, markup=False, highlight=False, overflow="fold")
        if row[-1]:
            con.print("  top " + row[-1], markup=False, highlight=False, overflow="fold")


def _pack(pairs: list[str], width: int) -> list[str]:
    """``pairs`` on lines of at most ``width`` characters, two spaces apart, breaking
    only between pairs (a pair wider than a line gets a line of its own)."""
    lines: list[str] = []
    for pair in pairs:
        if lines and len(lines[-1]) + 2 + len(pair) <= width:
            lines[-1] += "  " + pair
        else:
            lines.append(pair)
    return lines


def dataset_diff(d: dict[str, Any]) -> None:
    con = _console()
    if d.get("identical"):
        con.print(f"{d['old']} and {d['new']} hold identical bytes")
        return
    con.print(f"[bold]{d['old']} -> {d['new']}[/]")
    for key in ("rows", "files", "bytes"):  # tables have rows; folders of files the others
        change = d.get(key)
        if isinstance(change, dict) and "old" in change:
            con.print(f"{key}  {change.get('old')} -> {change.get('new')}")
    if isinstance(d.get("extensions"), dict):
        con.print("extensions  " + json.dumps(d["extensions"], default=str))
    for key, mark in (("files_added", "+"), ("files_removed", "-"), ("files_changed", "~")):
        for path in d.get(key) or []:
            con.print(f"{mark} {path}", markup=False, highlight=False)
    for key, label in (("columns_added", "added"), ("columns_removed", "removed")):
        if d.get(key):
            con.print(f"columns {label}: {', '.join(map(str, d[key]))}")
    for change in d.get("type_changes") or []:
        col, old, new = (change if isinstance(change, (list, tuple))
                         else (change.get("column"), change.get("old"), change.get("new")))
        con.print(f"[yellow]type changed[/] {col}: {old} -> {new}")
    changes = d.get("columns") or {}
    if changes:
        out = []
        for col, stats in changes.items():
            for stat, delta in stats.items():
                if isinstance(delta, dict) and "old" in delta and "new" in delta:
                    out.append([col, stat, delta["old"], delta["new"]])
                elif delta not in (None, [], {}):
                    out.append([col, stat, "", delta])
        if out:
            table(["column", "statistic", "old", "new"], out)
