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
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reprise.core.errors import NotFoundError, UserError
from reprise.monitor._alarm import Alarm
from reprise.monitor._triggers import RetrainSettings

__all__ = ["alarm_tags", "retrain"]

_MAX_TAG = 4000


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
            *, start_rollout: Callable[[str, int, str, dict[str, Any]], Any] | None = None
            ) -> dict[str, Any]:
    """See the module docstring; ``{"ok": bool, "run", "dataset", "gates", "version",
    "rollout"}``."""
    settings = settings or RetrainSettings()
    prod = _production(ws, name, alias)
    run = ws.metadata.get_run(prod.run_id)
    param, dataset = _dataset_param(ws, run, settings)
    run_id, error = _rerun(ws, run, {param: dataset}, alarm_tags(alarm, prod.ref))
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


def _rerun(ws: Any, run: Any, overrides: dict[str, Any],
           tags: dict[str, str]) -> tuple[str | None, str | None]:
    """Run ``run``'s pipeline from its code snapshot in a fresh process; ``(run, error)``."""
    if "code" not in ws.metadata.run_artifacts(run.id):
        raise UserError(f"run {run.id} has no code snapshot to retrain from")
    with tempfile.TemporaryDirectory(prefix="reprise-retrain-") as scratch:
        spec = {"workspace": str(ws.root), "run_id": run.id, "scratch": scratch,
                "overrides": overrides, "tags": tags}
        env = {**os.environ, "REPRISE_WORKSPACE": str(ws.root)}
        proc = subprocess.run([sys.executable, "-m", "reprise.monitor._retrain",
                               json.dumps(spec)], capture_output=True, text=True, env=env,
                              cwd=scratch, check=False)
    lines = proc.stdout.strip().splitlines()
    try:
        doc = json.loads(lines[-1]) if lines else {}
    except ValueError:
        doc = {}
    if "run_id" not in doc:
        raise UserError(f"the retraining process exited with {proc.returncode}:\n"
                        f"{proc.stderr.strip()[-3000:]}")
    return doc["run_id"], doc.get("error")


def _replay(spec: dict[str, Any]) -> dict[str, Any]:
    """In the fresh process: unpack the snapshot, run with the overrides and tags."""
    from reprise.pipeline._load import load_pipeline
    from reprise.pipeline._runner import StepFailedError, run_pipeline
    from reprise.pipeline._snapshot import snapshot_path, snapshot_sys_path
    from reprise.pipeline._verify import _materialize_input
    from reprise.store._materializers import load_object
    from reprise.tracking._api import open_workspace

    ws = open_workspace(spec["workspace"])
    rec = ws.metadata.get_run(spec["run_id"])
    snap = ws.metadata.run_artifacts(rec.id)["code"]
    scratch = Path(spec["scratch"])
    code = scratch / "code"
    load_object(ws.artifacts, snap.hash, snap.materializer, snap.meta, dest=code)
    ref = rec.tags["reprise.pipeline"]
    file_part, _, fn = ref.rpartition(":")
    params: dict[str, Any] = {}
    for k, v in rec.params.items():
        if isinstance(v, dict) and "$path" in v:
            params[k] = _materialize_input(ws, k, v, scratch / "inputs")
        elif isinstance(v, dict) and "$input" in v:
            params[k] = v["resolved"]
        else:
            params[k] = v
    params.update(spec["overrides"])
    sys.path[:0] = [str(p) for p in snapshot_sys_path(code)]
    os.chdir(code)
    if file_part.endswith(".py"):
        rel = snapshot_path(Path(file_part), ws.root) if Path(file_part).is_absolute() \
            else file_part
        pipe = load_pipeline(f"{code / rel}:{fn}", base=code)
    else:
        pipe = load_pipeline(ref)
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
