"""Progress views of a pipeline run: a live rich table on a terminal, plain lines
otherwise (logs, CI), and the final summary."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

__all__ = ["LiveProgress", "LineProgress", "make_progress", "summary_lines"]

_STYLE = {"pending": "dim", "running": "yellow", "cached": "cyan", "done": "green",
          "failed": "bold red", "skipped": "dim", "killed": "red"}
_LABEL = {"done": "done", "cached": "cached", "running": "running", "pending": "pending",
          "failed": "FAILED", "skipped": "skipped", "killed": "killed"}


class _Base:
    def __init__(self) -> None:
        self.states: dict[str, dict[str, Any]] = {}
        self.run_id = ""
        self.pipeline = ""

    def start(self, run_id: str, pipeline: str, nodes: list[str]) -> None:
        self.run_id, self.pipeline = run_id, pipeline
        self.states = {n: {"status": "pending", "duration": None, "note": "", "t0": None}
                       for n in nodes}

    def update(self, node: str, status: str, *, duration: float | None = None,
               note: str = "") -> None:
        s = self.states.setdefault(node, {"status": "pending", "duration": None, "note": "",
                                          "t0": None})
        s["status"], s["note"] = status, note
        if status == "running":
            s["t0"] = time.perf_counter()
        if duration is not None:
            s["duration"] = duration

    def finish(self, result: Any) -> None:
        raise NotImplementedError


class LineProgress(_Base):
    """One line per state change; for pipes, files and CI logs."""

    def __init__(self, stream: TextIO | None = None) -> None:
        super().__init__()
        self.stream = stream or sys.stderr

    def start(self, run_id: str, pipeline: str, nodes: list[str]) -> None:
        super().start(run_id, pipeline, nodes)
        print(f"run {run_id}  pipeline {pipeline}  ({len(nodes)} steps)", file=self.stream)

    def update(self, node: str, status: str, *, duration: float | None = None,
               note: str = "") -> None:
        super().update(node, status, duration=duration, note=note)
        if status == "running" and not note:
            return
        dur = f" {duration:.2f}s" if duration is not None else ""
        extra = f" ({note})" if note else ""
        print(f"  {_LABEL.get(status, status):8s} {node}{dur}{extra}", file=self.stream)

    def finish(self, result: Any) -> None:
        for line in summary_lines(result):
            print(line, file=self.stream)


class LiveProgress(_Base):
    """A live table of the steps (rich), redrawn as states change."""

    def __init__(self) -> None:
        super().__init__()
        from rich.console import Console
        from rich.live import Live

        self.console = Console(stderr=True)
        self.live = Live(console=self.console, refresh_per_second=8, transient=False,
                         get_renderable=self._table)

    def _table(self) -> Any:
        from rich.table import Table

        t = Table(title=f"{self.pipeline}  run {self.run_id}", title_justify="left",
                  show_edge=False, pad_edge=False)
        t.add_column("step")
        t.add_column("status")
        t.add_column("time", justify="right")
        t.add_column("")
        now = time.perf_counter()
        for n, s in self.states.items():
            st = s["status"]
            dur = s["duration"]
            if st == "running" and s["t0"] is not None:
                dur = now - s["t0"]
            t.add_row(n, f"[{_STYLE.get(st, '')}]{_LABEL.get(st, st)}[/]",
                      f"{dur:.2f}s" if dur is not None else "", s["note"])
        return t

    def start(self, run_id: str, pipeline: str, nodes: list[str]) -> None:
        super().start(run_id, pipeline, nodes)
        self.live.start()

    def update(self, node: str, status: str, *, duration: float | None = None,
               note: str = "") -> None:
        super().update(node, status, duration=duration, note=note)
        self.live.refresh()

    def finish(self, result: Any) -> None:
        self.live.refresh()
        self.live.stop()
        for line in summary_lines(result):
            self.console.print(line, highlight=False)


def make_progress(kind: str = "auto") -> Any:
    """``auto``: live table on a terminal, lines otherwise; ``lines``; ``none``."""
    if kind == "none":
        return None
    if kind == "live" or (kind == "auto" and sys.stderr.isatty()):
        return LiveProgress()
    return LineProgress()


def summary_lines(result: Any) -> list[str]:
    executed, reused = result.executed, result.reused
    failed = [n for n, s in result.nodes.items() if s.status == "failed"]
    lines = [f"{result.status}: {len(executed)} step(s) executed, {len(reused)} reused from "
             f"cache (saved {result.time_saved:.2f}s) in {result.duration:.2f}s"]
    if failed:
        lines.append(f"failed step: {failed[0]}; fix it and run again to resume from there.")
    lines.append(f"run id: {result.run_id}   verify with: reprise verify {result.run_id[:10]}")
    return lines
