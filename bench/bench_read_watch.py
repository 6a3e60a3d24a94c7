"""Overhead of watching what steps read (issue 22.8): the demo pipeline with the read
watch on and off.

The demo's tabular pipeline (``examples/tabular``: load the registered dataset,
validate, split, featurize, a scikit-learn model and a PyTorch MLP trained in parallel
worker processes, evaluate, package) runs from the command line with every step
executed (``--no-cache``), with ``REPRISE_WATCH_READS=1`` and ``=0`` in alternation
(the order swapped every repetition); medians of the pipeline's duration (``--json``),
of the command's wall time and of its CPU time (the process and its workers, from
``getrusage``). No peer tool watches reads: the peer is the same run unwatched.

Also, in this process: the cost per call of the audit hook on ``open()`` and of the
recording ``os.environ`` on a read (none installed, installed but idle, watching), and
what the demo's steps were recorded reading (expected: nothing, so no warning).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
import timeit
from pathlib import Path
from typing import Any

from _common import WORK, finish, python

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "examples" / "tabular"


def setup(project: Path) -> None:
    """A copy of the demo project with its data registered as ``cancer@1``."""
    from sklearn.datasets import load_breast_cancer

    if project.exists():
        shutil.rmtree(project)
    project.mkdir(parents=True)
    for f in [*DEMO.glob("*.py"), DEMO / "space.yaml"]:
        shutil.copy(f, project / f.name)
    frame = load_breast_cancer(as_frame=True).frame  # as examples/demo.py exports it
    frame.columns = [c.replace(" ", "_") for c in frame.columns]
    frame.insert(0, "id", range(100_001, 100_001 + len(frame)))
    (project / "data").mkdir()
    frame.to_csv(project / "data" / "cancer.csv", index=False)
    reprise(project, "init", ".")
    reprise(project, "data", "add", "cancer", "data/cancer.csv", "--schema", "schema.py:schema")


def reprise(project: Path, *args: str, env: dict[str, str] | None = None) -> str:
    run_env = {k: v for k, v in os.environ.items() if k != "REPRISE_WORKSPACE"}
    run_env.pop("PYTHONDONTWRITEBYTECODE", None)
    res = subprocess.run([python(), "-m", "reprise.cli", *args], cwd=project, text=True,
                         env={**run_env, **(env or {})}, capture_output=True)
    if res.returncode != 0:
        sys.exit(f"reprise {' '.join(args)} exited {res.returncode}:\n{res.stderr}")
    return res.stdout


def run_once(project: Path, watch: bool) -> dict[str, Any]:
    """One executed run of the demo pipeline: its duration, wall and CPU seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = json.loads(reprise(project, "run", "pipeline.py:tabular", "--no-cache", "--json",
                             env={"REPRISE_WATCH_READS": "1" if watch else "0"}))
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert len(out["executed"]) == 8, out  # every step executed
    return {"run_id": out["run_id"], "pipeline_s": out["duration"], "wall_s": wall,
            "cpu_s": cpu, "outputs": out["outputs"]}


def per_call_costs(folder: Path, number: int) -> dict[str, float]:
    """Microseconds per ``open()+close()`` and per ``os.environ.get``: before any hook is
    installed in this process, with the hook installed but no step watched, and while
    watching (a file outside every ignored folder, a variable read by this code)."""
    from reprise.pipeline._reads import WatchSpec, _code_dirs, _with_real_paths, watch_reads

    target = folder / "probe.txt"
    target.write_text("x")
    os.environ["REPRISE_BENCH_PROBE"] = "1"

    def per_call(fn: Any) -> float:
        return 1e6 * min(timeit.repeat(fn, number=number, repeat=5)) / number

    def opens() -> None:
        open(target).close()

    def reads() -> None:
        os.environ.get("REPRISE_BENCH_PROBE")

    def event() -> None:
        id(target)  # the commonest audit event (builtins.id): what every other event costs

    out = {"open_no_hook_us": per_call(opens), "env_get_no_hook_us": per_call(reads),
           "event_no_hook_us": per_call(event)}
    code = _with_real_paths(_code_dirs())
    spec = WatchSpec(ignore=code, code_dirs=code, key="00" * 32)
    with watch_reads(spec):
        pass  # installs the hook for good
    out["open_hook_idle_us"] = per_call(opens)
    out["env_get_idle_us"] = per_call(reads)
    out["event_hook_idle_us"] = per_call(event)
    with watch_reads(spec) as seen:
        out["open_watched_us"] = per_call(opens)
        out["env_get_watched_us"] = per_call(reads)
        out["event_watched_us"] = per_call(event)
    assert str(target) in seen.files and "REPRISE_BENCH_PROBE" in seen.env
    return out


COUNT_EVENTS = """
import collections, json, sys
counts = collections.Counter()
sys.addaudithook(lambda event, args: counts.update((event,)))
sys.path.insert(0, ".")
from reprise.pipeline import load_pipeline
pipe = load_pipeline("pipeline.py:tabular")
counts.clear()
pipe.run(workers=1, cache=False, progress=None)
print(json.dumps(dict(counts)))
"""


def audit_events(project: Path) -> dict[str, int]:
    """How many audit events one executed run of the demo raises (in one process): the
    hook, once installed, runs on each of them."""
    env = {k: v for k, v in os.environ.items() if k != "REPRISE_WORKSPACE"}
    res = subprocess.run([python(), "-c", COUNT_EVENTS], cwd=project, capture_output=True,
                         text=True, env={**env, "REPRISE_WATCH_READS": "0"}, check=True)
    return dict(json.loads(res.stdout.strip().splitlines()[-1]))


def accounted_overhead(figures: dict[str, float], events: dict[str, int]) -> dict[str, float]:
    """The watch's cost that the machine's noise cannot hide, as an upper bound: every
    audit event of a run through the hook (at the dearer of its idle and watching
    costs), every ``open()`` at the cost of one the watch records."""
    per_event = max(figures["event_hook_idle_us"], figures["event_watched_us"])
    per_open = max(figures["open_hook_idle_us"], figures["open_watched_us"])
    total = float(sum(events.values()))
    seconds = 1e-6 * (total * max(0.0, per_event - figures["event_no_hook_us"])
                      + events.get("open", 0) * max(0.0, per_open - figures["open_no_hook_us"]))
    return {"audit_events_per_run": total, "accounted_overhead_s": seconds,
            "accounted_overhead_pct": 100 * seconds / figures["pipeline_s_off"]}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=7, help="runs with the watch on (and off)")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    if args.quick:
        args.repeats = 1
    try:
        import torch  # noqa: F401 - the demo trains an MLP
    except ImportError:
        print("  torch is not installed (pip install -e '.[torch]'); skipping")
        return {}
    work = WORK / "read_watch"
    project = work / "project"
    setup(project)
    costs = per_call_costs(work, 2_000 if args.quick else 20_000)  # before any hook here
    events = audit_events(project)
    run_once(project, True)  # warm-up: bytecode, page cache
    run_once(project, False)
    samples: dict[str, list[float]] = {f"{m}_{w}": [] for m in ("pipeline_s", "wall_s", "cpu_s")
                                       for w in ("on", "off")}
    watched_runs, outputs = [], set()
    for i in range(args.repeats):
        for watch in ((True, False) if i % 2 == 0 else (False, True)):
            r = run_once(project, watch)
            label = "on" if watch else "off"
            for m in ("pipeline_s", "wall_s", "cpu_s"):
                samples[f"{m}_{label}"].append(r[m])
            outputs.add(json.dumps(r["outputs"], sort_keys=True))
            if watch:
                watched_runs.append(r["run_id"])
    shown = json.loads(reprise(project, "runs", "show", watched_runs[-1], "--json"))
    figures = {k: statistics.median(v) for k, v in samples.items()}
    figures["reads_recorded_in_demo"] = float(len(shown["reads"]))
    figures.update(costs)
    figures.update(accounted_overhead(figures, events))
    ratios = {f"{m.removesuffix('_s')}_on_vs_off": figures[f"{m}_on"] / figures[f"{m}_off"]
              for m in ("pipeline_s", "wall_s", "cpu_s")}
    for m in ("pipeline", "wall", "cpu"):
        figures[f"{m}_overhead_pct"] = 100 * (ratios[f"{m}_on_vs_off"] - 1)
    result = {"figures": figures, "ratios": ratios, "samples": samples,
              "repeats": args.repeats, "peer": "the same demo run with the watch off",
              "demo_reads": shown["reads"], "outputs_identical_on_and_off": len(outputs) == 1,
              "audit_events": dict(sorted(events.items(), key=lambda kv: -kv[1])),
              "goal": "watch overhead <= 2 % of the demo pipeline's run time"}
    shutil.rmtree(work, ignore_errors=True)
    return finish("read_watch", result, quick=args.quick,
                  fmt=lambda k, v: f"{v:>13.2f}%" if k.endswith("_pct") else f"{v:>14,.3f}")


if __name__ == "__main__":
    sys.exit(0 if main() is not None else 1)
