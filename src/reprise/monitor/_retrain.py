"""The retrain action: re-run the pipeline that produced the production model, on newer
data, gate the result against the production model, register it, start a canary.

1. From the production version's lineage: its pipeline run, that run's code snapshot
   (unpacked and run in a fresh process, as ``reprise verify`` replays a run, so the
   code is the code that made production, not what the working tree holds now) and its
   parameters, with the dataset parameter moved to the newest version of that dataset
   (or the ref the policy names).
2. The run carries the alarm as tags (``reprise.alarm``: id, kind, message;
   ``reprise.monitor_window``: the window; ``reprise.retrain_of``: the production
   version), so the lineage of the new version names the alarm.
3. Gates: the package's own evaluation gates must have passed, and the policy's gates
   are checked on the evaluation rows with the production model, scored on the same
   rows, as the baseline of ``no worse than baseline`` rules.
4. Only a candidate that passed every gate is registered, and then a rollout (the
   injected ``start_rollout``) moves traffic to it by the policy's strategy; the rollout
   itself refuses a candidate whose gates failed. A failed gate leaves the run (and its
   package) in the workspace for inspection, and the outcome, with each gate, in the
   audit log.
5. The retraining process runs in a process group of its own, bounded by
   ``retrain.timeout``: past it, or when the
   caller's ``cancelled`` says so (the watcher lost its lease), the whole group gets
   SIGTERM, then SIGKILL after a grace period, and :class:`RetrainStopped` (its
   ``reason``: ``timeout`` or ``lease_lost``) is raised before anything is registered.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reprise.core.errors import NotFoundError, UserError
from reprise.monitor._alarm import Alarm
from reprise.monitor._triggers import RetrainSettings
from reprise.pipeline._verify import prepare_replay, replay_result

__all__ = ["RetrainStopped", "alarm_tags", "retrain", "run_bounded"]

_MAX_TAG = 4000
KILL_GRACE_S = 5.0  # between SIGTERM and SIGKILL of a retraining process group
_POLL_S = 0.1


class RetrainStopped(UserError):
    """The retraining process was stopped: ``reason`` is ``timeout`` (``retrain.timeout``
    passed) or ``lease_lost`` (the watcher no longer holds the model's lease); ``pid``
    is the process (group) that was ended."""

    def __init__(self, message: str, *, reason: str, pid: int | None) -> None:
        super().__init__(message)
        self.reason = reason
        self.pid = pid


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - a member we may not signal: still there
        return True
    return True


def _kill_group(proc: subprocess.Popen[Any], grace_s: float) -> None:
    """SIGTERM to ``proc``'s process group, SIGKILL to what is left after ``grace_s``;
    returns once ``proc`` is reaped."""
    if os.name != "posix":  # pragma: no cover - no process groups: the process alone
        proc.kill()
        proc.wait()
        return
    pgid = proc.pid  # start_new_session: the child leads a group of its own
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    end = time.monotonic() + grace_s
    while time.monotonic() < end:
        proc.poll()  # reap the leader, so a dead group reads as gone
        if not _group_alive(pgid):
            break
        time.sleep(0.05)
    else:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


def run_bounded(argv: list[str], *, timeout_s: float, env: dict[str, str] | None = None,
                cwd: str | Path | None = None, cancelled: Callable[[], bool] | None = None,
                grace_s: float = KILL_GRACE_S) -> tuple[int, str, str]:
    """Run ``argv`` in a new process group; ``(returncode, stdout, stderr)``. Past
    ``timeout_s``, or once ``cancelled()`` is true, the group is ended (SIGTERM, SIGKILL
    after ``grace_s``) and :class:`RetrainStopped` raised. The output goes to files, so
    a chatty child never blocks on a full pipe."""
    deadline = time.monotonic() + timeout_s
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as out, \
            tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env, cwd=cwd, text=True,
                                start_new_session=os.name == "posix")
        try:
            while True:
                try:
                    code = proc.wait(timeout=min(_POLL_S, max(deadline - time.monotonic(),
                                                              0.001)))
                    break
                except subprocess.TimeoutExpired:
                    pass
                reason = ("lease_lost" if cancelled is not None and cancelled()
                          else "timeout" if time.monotonic() >= deadline else None)
                if reason is not None:
                    _kill_group(proc, grace_s)
                    why = (f"it ran past retrain.timeout ({timeout_s:g}s)"
                           if reason == "timeout" else "this watcher lost its lease on the "
                           "model (another watcher decides now)")
                    raise RetrainStopped(f"the retraining process {proc.pid} was stopped: "
                                         f"{why}; nothing was registered", reason=reason,
                                         pid=proc.pid)
        except BaseException:
            if proc.returncode is None:  # interrupted: leave no process behind
                _kill_group(proc, grace_s)
            raise
        if os.name == "posix" and _group_alive(proc.pid):
            _kill_group(proc, grace_s)  # what the child left running in its group
        out.seek(0)
        err.seek(0)
        return code, out.read(), err.read()


def alarm_tags(alarm: Alarm, production_ref: str) -> dict[str, str]:
    """The tags of a retraining run: the alarm, its window and what it retrains."""
    summary = {"id": alarm.id, "kind": alarm.kind, "model": f"{alarm.model}:{alarm.version}",
               "message": alarm.message[:500]}
    return {"reprise.alarm": json.dumps(summary, sort_keys=True),
            "reprise.alarm_id": alarm.id,
            "reprise.monitor_window": json.dumps(alarm.window.to_dict(), sort_keys=True),
            "reprise.alarm_evidence": json.dumps(alarm.evidence, sort_keys=True,
                                                 default=str)[:_MAX_TAG],
            "reprise.retrain_of": production_ref}


def retrain(ws: Any, name: str, alias: str, alarm: Alarm, settings: RetrainSettings | None,
            *, start_rollout: Callable[[str, int, str, dict[str, Any]], Any] | None = None,
            cancelled: Callable[[], bool] | None = None) -> dict[str, Any]:
    """See the module docstring; ``{"ok": bool, "run", "dataset", "gates", "version",
    "rollout"}``."""
    settings = settings or RetrainSettings()
    prod = _production(ws, name, alias)
    run = ws.metadata.get_run(prod.run_id)
    param, dataset = _dataset_param(ws, run, settings)
    run_id, error = _rerun(ws, run, {param: dataset}, alarm_tags(alarm, prod.ref),
                           timeout_s=settings.timeout_s, cancelled=cancelled)
    out: dict[str, Any] = {"run": run_id, "dataset": dataset, "production": prod.ref,
                           "code_snapshot": run.tags.get("reprise.code_snapshot")}
    if error is not None or run_id is None:
        return {**out, "ok": False, "error": f"the retraining run failed: {(error or '')[-2000:]}"}
    step, art, package = _package_of(ws, run_id)
    gates = _gates(ws, prod, package, settings, dataset)
    out["gates"] = gates
    failed = [g for g in gates if not g["passed"]]
    if failed:
        return {**out, "ok": False, "error": "gates failed: " + "; ".join(
            f"{g['metric']} {g['rule']} (actual {g['actual']}, threshold {g['threshold']})"
            for g in failed)}
    if cancelled is not None and cancelled():
        raise RetrainStopped(f"the retrain of {prod.ref} was stopped before registering "
                             f"its candidate (run {run_id}): this watcher lost its lease on "
                             "the model", reason="lease_lost", pid=None)
    from reprise.registry._registry import register_package

    rec, _ = register_package(ws, name, art.hash, run_id=run_id, package=package, step=step)
    out["version"] = rec.version
    if start_rollout is None:
        out["rollout"] = None
        out["note"] = ("registered; no rollout was started (this watcher has no server "
                       "layer: run it with `reprise monitor watch`)")
        return out
    started = start_rollout(name, rec.version, alias, dict(settings.rollout))
    out["rollout"] = getattr(started, "id", started)
    return out


def _production(ws: Any, name: str, alias: str) -> Any:
    from reprise.registry._registry import parse_ref

    prod = parse_ref(ws, f"{name}@{alias}")
    if not prod.run_id:
        raise UserError(f"{prod.ref} was not registered from a pipeline run, so there is no "
                        "pipeline to retrain it with; register models with `reprise models "
                        "register NAME --run RUN`")
    return prod


def _dataset_param(ws: Any, run: Any, settings: RetrainSettings) -> tuple[str, str]:
    """The pipeline parameter that reads a dataset, and the version to retrain on."""
    from reprise.data._dataset import parse_ref

    inputs = {k: v for k, v in run.params.items() if isinstance(v, dict) and "$input" in v
              and v.get("resolved")}
    if settings.param is not None:
        if settings.param not in inputs:
            raise UserError(f"retrain.param {settings.param!r} is not a dataset parameter of "
                            f"run {run.id} (those are {sorted(inputs) or 'none'})")
        inputs = {settings.param: inputs[settings.param]}
    if len(inputs) != 1:
        raise UserError(f"run {run.id} reads {len(inputs)} dataset parameters "
                        f"({sorted(inputs)}); name the one to move with retrain.param")
    (param, rec), = inputs.items()
    ds_name, _ = parse_ref(str(rec["resolved"]))
    if settings.dataset != "latest":
        return param, settings.dataset
    newest = ws.metadata.get_dataset_version(ds_name)
    if newest is None:
        raise NotFoundError(f"dataset {ds_name!r} (what {run.id} trained on) is gone")
    return param, f"{ds_name}@{newest.version}"


def _rerun(ws: Any, run: Any, overrides: dict[str, Any], tags: dict[str, str], *,
           timeout_s: float, cancelled: Callable[[], bool] | None = None
           ) -> tuple[str | None, str | None]:
    """Run ``run``'s pipeline from its code snapshot in a fresh process; ``(run, error)``."""
    if "code" not in ws.metadata.run_artifacts(run.id):
        raise UserError(f"run {run.id} has no code snapshot to retrain from")
    with tempfile.TemporaryDirectory(prefix="reprise-retrain-") as scratch:
        spec = {"workspace": str(ws.root), "run_id": run.id, "scratch": scratch,
                "overrides": overrides, "tags": tags}
        env = {**os.environ, "REPRISE_WORKSPACE": str(ws.root)}
        code, stdout, stderr = run_bounded(
            [sys.executable, "-m", "reprise.monitor._retrain", json.dumps(spec)],
            timeout_s=timeout_s, env=env, cwd=scratch, cancelled=cancelled)
    return replay_result(stdout, code, stderr, "the retraining process")


def _replay(spec: dict[str, Any]) -> dict[str, Any]:
    """In the fresh process: unpack the snapshot, run with the overrides and tags."""
    from reprise.pipeline._runner import StepFailedError, run_pipeline
    from reprise.tracking._api import open_workspace

    ws = open_workspace(spec["workspace"])
    rec = ws.metadata.get_run(spec["run_id"])
    pipe, params, ref = prepare_replay(ws, rec, Path(spec["scratch"]))
    params.update(spec["overrides"])
    try:
        result = run_pipeline(pipe, params, seed=rec.seed or 0, workspace=ws,
                              tags=spec["tags"], pipeline_ref=ref)
        ws.recover()
        return {"run_id": result.run_id}
    except StepFailedError as exc:
        return {"run_id": exc.run_id, "error": exc.error}


def _package_of(ws: Any, run_id: str) -> tuple[str, Any, Any]:
    """``(step, artifact, package)`` of the one model package the run produced."""
    from reprise.registry._package import MATERIALIZER
    from reprise.store._materializers import load_object

    ws.recover()
    found = []
    for st in ws.metadata.get_step_runs(run_id):
        for o in st["outputs"]:
            art = ws.metadata.get_artifact(o["hash"])
            if art is not None and art.materializer == MATERIALIZER:
                found.append((st["step_name"], art))
    if len({a.hash for _, a in found}) != 1:
        raise UserError(f"the retraining run {run_id} produced {len(found)} model packages; "
                        "the loop retrains pipelines that produce exactly one")
    step, art = found[0]
    return step, art, load_object(ws.artifacts, art.hash, art.materializer, art.meta)


def _gates(ws: Any, prod: Any, package: Any, settings: RetrainSettings,
           dataset: str) -> list[dict[str, Any]]:
    """The package's own gates (as its evaluation recorded them), then the policy's,
    with the production model scored on the same rows as the baseline."""
    card = (package.card or {}).get("gates") or {}
    out = [{**r, "source": "package"} for r in card.get("results") or []]
    if card.get("passed") is False and not out:
        out.append({"metric": "package", "rule": "its evaluation's gates", "threshold": None,
                    "baseline": None, "actual": None, "passed": False, "by": None,
                    "source": "package"})
    if not settings.gates:
        return out
    from reprise.evaluate._gates import check_gates, parse_gates
    from reprise.registry._api import _load

    rows = _rows(ws, settings.eval_dataset or dataset)
    target = str(settings.target)
    if target not in rows.columns:
        raise UserError(f"retrain.target {target!r} is not a column of the evaluation rows "
                        f"({settings.eval_dataset or dataset}: {list(rows.columns)})")
    parsed = parse_gates(settings.gates)
    wanted = sorted({g.metric for g in parsed})
    cand = _score(package, rows, target, wanted)
    base = _score(_load(ws, prod), rows, target, wanted)
    undefined = sorted(k for k, v in base.items() if v is None)
    if undefined:
        raise UserError(f"the baseline {prod.ref}'s {', '.join(undefined)} is undefined on the "
                        "evaluation rows; gate on other metrics or evaluate on other rows")
    checked = check_gates(parsed, cand, baseline={k: float(v) for k, v in base.items()
                                                  if v is not None})
    return out + [{**r, "source": "policy", "baseline_model": prod.ref,
                   "eval_rows": len(rows)} for r in checked]


def _rows(ws: Any, ref: str) -> Any:
    from reprise.data._dataset import Dataset

    return Dataset(ref, workspace=ws).to_pandas()


def _score(package: Any, rows: Any, target: str, wanted: list[str]) -> dict[str, float | None]:
    """The metrics ``wanted`` of ``package`` on ``rows`` (inputs: its signature's)."""
    import numpy as np

    from reprise.evaluate._evaluate import evaluate

    names = [f.name for f in package.signature.inputs]
    missing = [n for n in names if n not in rows.columns]
    if missing:
        raise UserError(f"the evaluation rows lack the model's inputs {missing}")
    records = rows[names].to_dict(orient="records")
    outputs = package.predict_records(records)
    y = rows[target].to_numpy()
    kwargs: dict[str, Any] = {"y_pred": np.asarray(outputs["prediction"])}
    classes = getattr(package.signature, "classes", None)
    if "probabilities" in outputs and classes:
        kwargs["y_proba"] = np.asarray(outputs["probabilities"], dtype=float)
        kwargs["labels"] = [_label(str(c), y) for c in classes]
    ev = evaluate(y=y, report=False, log=False, bootstrap=False, **kwargs)
    metrics = dict(ev).get("metrics") or {}
    out: dict[str, float | None] = {}
    for m in wanted:
        val = metrics.get(m)
        out[m] = val.get("value") if isinstance(val, dict) else val
    return out


def _label(text: str, y: Any) -> Any:
    for v in set(y.tolist()):
        if str(v) == text:
            return v
    return text


if __name__ == "__main__":  # the retraining process (see _rerun)
    print(json.dumps(_replay(json.loads(sys.argv[1]))), flush=True)
