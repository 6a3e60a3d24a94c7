"""``reprise verify RUN``: re-execute a run from its record and prove the outputs
identical, or say which step differs and what about the environment changed.

The re-execution happens in a fresh Python process, in a scratch directory that
holds the run's code snapshot and copies of its raw input files, with the cache
off and the recorded parameters and seed. That process shares nothing with the
current one (no already-imported module can stand in for the snapshot's code).
The outputs are then compared hash by hash, step by step.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from reprise.core.errors import UserError

__all__ = ["StepVerdict", "VerifyReport", "verify_run"]


@dataclass
class StepVerdict:
    step: str
    status: str  # identical | within_tolerance | differs | failed | missing
    outputs: list[dict[str, Any]] = field(default_factory=list)
    metric_deltas: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    determinism: list[dict[str, Any]] = field(default_factory=list)
    # what changed in the step's environment scope (its cache key's distributions and
    # the requirements its outputs declared): [{name, recorded, now}]
    scope_changes: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class VerifyReport:
    run_id: str
    verify_run_id: str | None
    steps: list[StepVerdict]
    env_changes: list[dict[str, Any]]
    tolerance: float | None = None

    @property
    def ok(self) -> bool:
        return bool(self.steps) and all(
            v.status in ("identical", "within_tolerance") for v in self.steps)

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "verify_run_id": self.verify_run_id, "ok": self.ok,
                "tolerance": self.tolerance, "steps": [asdict(v) for v in self.steps],
                "environment": self.env_changes}


def verify_run(ws: Any, run_ref: str, *, steps: Iterable[str] | None = None,
               tolerance: float | None = None, workers: int | None = None,
               keep_scratch: bool = False, stream: Any = None, executor: str | None = None,
               ray_address: str | None = None) -> VerifyReport:
    """Re-execute pipeline run ``run_ref`` with the cache off and compare its outputs;
    ``executor`` (``local``/``ray``) and ``ray_address`` say where, as for ``run``."""
    from reprise.pipeline._executors import EXECUTORS

    if executor is not None and executor not in EXECUTORS:
        raise UserError(f"--executor {executor!r} does not exist; use one of "
                        f"{', '.join(EXECUTORS)}.")
    # the address is checked here too: in the replay process its error was a traceback
    kind = executor or ws.config.executor
    if ray_address and kind != "ray":
        raise UserError("a Ray address was given with the local executor; add --executor ray "
                        "(or set kind = \"ray\" under [executor] in .reprise/config.toml).")
    address = ray_address or (ws.config.executor_address if kind == "ray" else None)
    if address and address != "auto":
        from reprise.pipeline._ray import CONNECT_TIMEOUT, check_ray_address

        check_ray_address(address, CONNECT_TIMEOUT)
    if tolerance is not None and (tolerance < 0 or tolerance != tolerance):
        raise UserError(f"--tolerance must be a non-negative number, got {tolerance}.")
    meta = ws.metadata
    rec = meta.get_run(run_ref)
    if rec.kind.value != "pipeline" or "reprise.pipeline" not in rec.tags:
        raise UserError(f"run {rec.id} is a {rec.kind.value} run, not a pipeline run; only "
                        "pipeline runs can be verified.")
    if rec.status.value == "running":
        raise UserError(f"run {rec.id} is still running; verify it once it has ended.")
    original = meta.get_step_runs(rec.id)
    recorded = {st["step_name"]: st for st in original
                if st["status"] in ("executed", "cached")}
    wanted = list(steps or [])
    unknown = sorted(set(wanted) - {st["step_name"] for st in original})
    if unknown:
        raise UserError(f"--steps: run {rec.id} has no step(s) {unknown}; its steps are "
                        f"{[st['step_name'] for st in original]}.")
    arts = meta.run_artifacts(rec.id)
    if "code" not in arts:
        raise UserError(f"run {rec.id} has no code snapshot; it cannot be re-executed.")
    scratch = Path(tempfile.mkdtemp(prefix="reprise-verify-"))
    try:
        new_id, failure = _replay_in_subprocess(ws, rec, scratch, wanted, workers, stream,
                                                executor, ray_address)
        checks = _determinism_checks(scratch / DETERMINISM_FILE)
    finally:
        if not keep_scratch:
            shutil.rmtree(scratch, ignore_errors=True)
    ws.recover()  # ingest the replay's journal (its run defers ingestion)
    fresh = {st["step_name"]: st for st in meta.get_step_runs(new_id)} if new_id else {}
    names = [st["step_name"] for st in original]
    if wanted:
        names = [n for n in names if n in _upstream_names(original, wanted)]
    verdicts = [_compare(ws, rec.id, new_id, n, recorded.get(n), fresh.get(n), tolerance)
                for n in names]
    for v in verdicts:
        v.determinism = checks.get(v.step, [])
        v.scope_changes = _scope_changes(recorded.get(v.step), fresh.get(v.step))
    if failure and not verdicts:
        verdicts.append(StepVerdict(step="<pipeline>", status="failed", error=failure))
    env_changes: list[dict[str, Any]] = []
    if new_id:
        new_rec = meta.get_run(new_id)
        if rec.env_hash and new_rec.env_hash and rec.env_hash != new_rec.env_hash:
            from reprise.env import diff_environments

            env_changes = [asdict(c) for c in diff_environments(
                meta.get_environment(rec.env_hash), meta.get_environment(new_rec.env_hash))]
    return VerifyReport(run_id=rec.id, verify_run_id=new_id, steps=verdicts,
                        env_changes=env_changes, tolerance=tolerance)


# Training steps re-executed by verify also train their first steps twice (the
# Trainer reads these variables; see reprise.train.check_determinism) and append
# one JSON line per Trainer to this file in the scratch folder.
DETERMINISM_FILE = "determinism.jsonl"
DETERMINISM_STEPS = 4


def _determinism_checks(path: Path) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    if not path.is_file():
        return out
    for line in path.read_text().splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        out.setdefault(str(doc.get("step_name")), []).append(doc)
    return out


def _upstream_names(steps: list[dict[str, Any]], wanted: list[str]) -> set[str]:
    producers = {o["hash"]: st["step_name"] for st in steps for o in st["outputs"]}
    by_name = {st["step_name"]: st for st in steps}
    out: set[str] = set()
    todo = list(wanted)
    while todo:
        n = todo.pop()
        if n in out or n not in by_name:
            continue
        out.add(n)
        todo.extend(producers[i["hash"]] for i in by_name[n]["inputs"] if i["hash"] in producers)
    return out


def _replay_in_subprocess(ws: Any, rec: Any, scratch: Path, steps: list[str],
                          workers: int | None, stream: Any, executor: str | None = None,
                          ray_address: str | None = None) -> tuple[str | None, str | None]:
    spec = {"workspace": str(ws.root), "run_id": rec.id, "scratch": str(scratch),
            "steps": steps, "workers": workers, "executor": executor,
            "ray_address": ray_address}
    env = {**os.environ, "REPRISE_WORKSPACE": str(ws.root),
           "REPRISE_CHECK_DETERMINISM": str(scratch / DETERMINISM_FILE),
           "REPRISE_CHECK_DETERMINISM_STEPS": str(DETERMINISM_STEPS)}
    proc = subprocess.run([sys.executable, "-m", "reprise.pipeline._verify", json.dumps(spec)],
                          capture_output=True, text=True, env=env, cwd=str(scratch))
    if stream is not None and proc.stderr:
        stream.write(proc.stderr)
    return replay_result(proc.stdout, proc.returncode, proc.stderr,
                         f"verify could not re-execute run {rec.id}: the replay process")


def replay_result(stdout: str, code: int | None, stderr: str, what: str,
                  ) -> tuple[str, str | None]:
    """``(run id, error)`` from a replay process's last line of output (:func:`_replay`'s
    JSON); a UserError naming ``what``, its exit code and the tail of its stderr when it
    printed none (it died before running)."""
    lines = stdout.strip().splitlines()
    try:
        doc = json.loads(lines[-1]) if lines else {}
    except ValueError:
        doc = {}
    if "run_id" not in doc:
        raise UserError(f"{what} exited with {code}:\n{stderr.strip()[-4000:]}")
    return doc["run_id"], doc.get("error")


def _replay(spec: dict[str, Any]) -> dict[str, Any]:
    """In the fresh process: unpack the snapshot and inputs, run with the cache off."""
    from reprise.pipeline._progress import LineProgress
    from reprise.pipeline._runner import StepFailedError, run_pipeline
    from reprise.tracking._api import open_workspace

    ws = open_workspace(spec["workspace"])
    rec = ws.metadata.get_run(spec["run_id"])
    pipe, params, ref = prepare_replay(ws, rec, Path(spec["scratch"]))
    tags = {"reprise.verify_of": rec.id}
    try:
        result = run_pipeline(pipe, params, seed=rec.seed or 0, workers=spec.get("workers"),
                              cache=False, workspace=ws, progress=LineProgress(sys.stderr),
                              steps=spec.get("steps") or None, tags=tags, pipeline_ref=ref,
                              executor=spec.get("executor"),
                              executor_address=spec.get("ray_address"))
        return {"run_id": result.run_id}
    except StepFailedError as exc:
        return {"run_id": exc.run_id, "error": exc.error}


def prepare_replay(ws: Any, rec: Any, scratch: Path) -> tuple[Any, dict[str, Any], str]:
    """In a fresh process about to re-run ``rec``: unpack its code snapshot and file
    inputs under ``scratch``, put the snapshot first on ``sys.path``, enter it, and load
    its pipeline: ``(pipeline, params as the run had them, pipeline ref)``. Used by
    ``verify`` and by the monitoring loop's retraining."""
    from reprise.pipeline._load import load_pipeline
    from reprise.pipeline._snapshot import snapshot_path, snapshot_sys_path
    from reprise.store._materializers import load_object

    code = scratch / "code"
    snap = ws.metadata.run_artifacts(rec.id)["code"]
    load_object(ws.artifacts, snap.hash, snap.materializer, snap.meta, dest=code)
    ref = rec.tags["reprise.pipeline"]
    file_part, _, name = ref.rpartition(":")
    params: dict[str, Any] = {}
    for k, v in rec.params.items():
        if isinstance(v, dict) and "$path" in v:
            params[k] = _materialize_input(ws, k, v, scratch / "inputs")
        elif isinstance(v, dict) and "$input" in v:  # pinned: "churn@latest" replays as "churn@3"
            params[k] = v["resolved"]
        else:
            params[k] = v
    # The snapshot's folders go first: its modules, not the ones installed now (a
    # library installed with ``pip install -e`` may have been edited since the run).
    sys.path[:0] = [str(p) for p in snapshot_sys_path(code)]
    os.chdir(code)
    if file_part.endswith(".py"):
        rel = snapshot_path(Path(file_part), ws.root) if Path(file_part).is_absolute() \
            else file_part
        return load_pipeline(f"{code / rel}:{name}", base=code), params, ref
    return load_pipeline(ref), params, ref


def _materialize_input(ws: Any, name: str, rec: dict[str, Any], dest: Path) -> Any:
    from reprise.pipeline._files import Dir, File
    from reprise.store._materializers import load_object

    art = ws.metadata.get_artifact(rec["artifact"])
    target = dest / name
    target.mkdir(parents=True, exist_ok=True)
    if rec["$path"] == "dir":
        out = target / (Path(rec["path"]).name or "dir")
        load_object(ws.artifacts, art.hash, art.materializer, art.meta, dest=out)
        return Dir(out)
    out = target / (Path(rec["path"]).name or "file")
    # in verify's scratch folder, deleted after the replay: no fsync (durable=False); a
    # copy, not a link, as the replayed step may write to its input file
    ws.artifacts.copy_to(art.hash, out, verify=True, durable=False)
    return File(out)


def _compare(ws: Any, run_a: str, run_b: str | None, name: str, a: dict[str, Any] | None,
             b: dict[str, Any] | None, tolerance: float | None) -> StepVerdict:
    if a is None:
        return StepVerdict(step=name, status="missing",
                           error="the original run has no outputs for this step")
    if b is None or b["status"] == "failed":
        return StepVerdict(step=name, status="failed" if b else "missing",
                           error=(b or {}).get("error") or "not re-executed")
    outs_a = {o["name"]: o["hash"] for o in a["outputs"]}
    outs_b = {o["name"]: o["hash"] for o in b["outputs"]}
    outputs = [{"name": k, "recorded": outs_a.get(k), "now": outs_b.get(k),
                "same": outs_a.get(k) == outs_b.get(k)} for k in sorted(set(outs_a) | set(outs_b))]
    deltas = _metric_deltas(ws, run_a, run_b, name) if run_b else []
    if all(o["same"] for o in outputs):
        return StepVerdict(step=name, status="identical", outputs=outputs, metric_deltas=deltas)
    status = "differs"
    if tolerance is not None:
        close = all(o["same"] or _within(ws, o["recorded"], o["now"], tolerance, deltas,
                                         f"{name}.{o['name']}") for o in outputs)
        if close:
            status = "within_tolerance"
    else:
        for o in outputs:
            if not o["same"]:
                _within(ws, o["recorded"], o["now"], float("inf"), deltas, f"{name}.{o['name']}")
    return StepVerdict(step=name, status=status, outputs=outputs, metric_deltas=deltas)


def _scope_changes(a: dict[str, Any] | None,
                   b: dict[str, Any] | None) -> list[dict[str, Any]]:
    if a is None or b is None:
        return []

    def scope(st: dict[str, Any]) -> dict[str, Any]:
        details = st.get("details") or {}
        env = (details.get("key_parts") or {}).get("env") or {}
        return {"python": env.get("python"), **(env.get("distributions") or {}),
                **(details.get("requires") or {})}

    sa, sb = scope(a), scope(b)
    return [{"name": k, "recorded": sa.get(k), "now": sb.get(k)}
            for k in sorted(set(sa) | set(sb)) if sa.get(k) != sb.get(k)]


def _metric_deltas(ws: Any, run_a: str, run_b: str, step: str) -> list[dict[str, Any]]:
    meta = ws.metadata
    prefix = f"{step}/"

    def last(run: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for p in meta.get_metrics(run):
            if p.key.startswith(prefix):
                out[p.key] = p.value
        return out

    ma, mb = last(run_a), last(run_b)
    return [{"key": k, "recorded": ma.get(k), "now": mb.get(k),
             "delta": (mb[k] - ma[k]) if k in ma and k in mb else None}
            for k in sorted(set(ma) | set(mb)) if ma.get(k) != mb.get(k)]


def _within(ws: Any, ha: str | None, hb: str | None, tol: float,
            deltas: list[dict[str, Any]], label: str) -> bool:
    """Whether two JSON-able or array outputs agree within ``tol`` (numeric leaves);
    numeric differences are appended to ``deltas``."""
    if ha is None or hb is None:
        return False
    from reprise.store._materializers import load_object

    meta = ws.metadata
    try:
        ra, rb = meta.get_artifact(ha), meta.get_artifact(hb)
    except Exception:  # not ingested: cannot compare values, only hashes
        return False
    if ra.materializer != rb.materializer or ra.materializer not in ("json", "numpy"):
        return False
    va = load_object(ws.artifacts, ha, ra.materializer, ra.meta)
    vb = load_object(ws.artifacts, hb, rb.materializer, rb.meta)
    if ra.materializer == "numpy":
        import numpy as np

        if va.shape != vb.shape or va.dtype != vb.dtype:
            return False
        if va.dtype.kind not in "fc":
            return bool(np.array_equal(va, vb))
        diff = float(np.max(np.abs(va - vb))) if va.size else 0.0
        deltas.append({"key": label, "recorded": None, "now": None, "delta": diff,
                       "max_abs_diff": True})
        return diff <= tol
    ok = True
    for key, x, y in _leaves(va, vb, label):
        if isinstance(x, (int, float)) and isinstance(y, (int, float)) \
                and not isinstance(x, bool) and not isinstance(y, bool):
            if x != y:
                deltas.append({"key": key, "recorded": x, "now": y, "delta": y - x})
                ok = ok and abs(y - x) <= tol
        elif x != y:
            ok = False
    return ok


def _leaves(a: Any, b: Any, path: str) -> list[tuple[str, Any, Any]]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            out += _leaves(a.get(k), b.get(k), f"{path}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        out = []
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            out += _leaves(x, y, f"{path}[{i}]")
        return out
    return [(path, a, b)]


if __name__ == "__main__":
    result = _replay(json.loads(sys.argv[1]))
    sys.stdout.write(json.dumps(result) + "\n")
