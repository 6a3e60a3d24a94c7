"""``optimize``: a registered version's ONNX variant, proved equal before it is registered.

1. The package's preprocessing and model become one ONNX graph (:mod:`._onnx`), with
   a StandardScaler's scale folded into a following layer's weights where there is one;
   if that graph fails the parity check (step 2) it is converted again without the fold.
2. Parity: the example rows, a held-out set, and rows drawn from the signature's
   training ranges and categories are predicted by the native model and by ONNX
   Runtime: labels must be identical and probabilities within ``atol`` (float32
   arithmetic; regression predictions within ``atol`` + ``atol`` x |value|). A label
   may differ only on a native near-tie (top two probabilities within 2 x ``atol``),
   counted in the report. A failure registers nothing. The held-out set is found in
   the source version's lineage unless one is given (``holdout=``; the rule is in
   :mod:`._holdout`); where it came from (artifact hash, run, rows), or why there is
   none, is in the report (``holdout``).
3. ``quantize="dynamic-int8"``: ONNX Runtime's dynamic quantisation of the float
   graph's weights; the variant is evaluated with the original's metrics (accuracy
   and macro F1, or R^2) and their intervals (:mod:`reprise.evaluate`'s methods) on
   the held-out rows against their labels (else: agreement with the native labels on
   the parity rows, recorded as such). The drop (native - quantised) gets a paired
   bootstrap interval: both models scored on the same seeded resamples of the same
   rows. A gate (default: drop <= 0.5 point) decides by :data:`GATE_RULE`: pass when
   the interval's upper bound is <= ``max_drop``, fail when its lower bound is above,
   else inconclusive (too few rows to tell), which blocks promotion like a fail.
4. The variant is a new version (its own manifest hash covers the .onnx bytes), with
   ``source_version`` lineage and a ``model.optimize`` audit event.
"""

from __future__ import annotations

import dataclasses
import logging
import tempfile
import threading
from pathlib import Path
from typing import Any

from reprise.core._types import ModelVersionRecord
from reprise.core.errors import UserError
from reprise.registry._holdout import Holdout, resolve_holdout

__all__ = ["GATE_RULE", "optimize", "optimize_variant", "paired_drops", "parity_rows",
           "prove_parity", "quantization_gate"]

QUANTIZE = ("dynamic-int8",)
_DRAWN = 256


def optimize(name: str, version: int, *, onnx: bool = True, quantize: str | None = None,
             atol: float = 1e-5, max_drop: float = 0.005, holdout: Any = None,
             holdout_target: Any = None, confidence: float = 0.95, seed: int = 0,
             workspace: Any = None) -> ModelVersionRecord:
    """Register the ONNX variant of ``name:version`` (see the module docstring); the
    conversion is deterministic, so optimising a version again with the same options
    returns the variant already registered."""
    return optimize_variant(name, version, onnx=onnx, quantize=quantize, atol=atol,
                            max_drop=max_drop, holdout=holdout,
                            holdout_target=holdout_target, confidence=confidence,
                            seed=seed, workspace=workspace)[0]


def optimize_variant(name: str, version: int, *, onnx: bool = True,
                     quantize: str | None = None, atol: float = 1e-5,
                     max_drop: float = 0.005, holdout: Any = None,
                     holdout_target: Any = None, confidence: float = 0.95, seed: int = 0,
                     workspace: Any = None) -> tuple[ModelVersionRecord, bool]:
    """:func:`optimize`, and whether the variant was registered now (False: it already
    was, as the registry decided in its transaction).

    ``holdout``: None (default) finds the held-out rows in the version's lineage; a
    table, or a file or dataset version ``NAME@N`` by name, gives them; False uses
    none. ``holdout_target``: their labels (an array, or a column's name); default: the
    column the card's ``target`` names, when the table has it. ``confidence`` and
    ``seed``: the quantisation gate's intervals (see :func:`quantization_gate`)."""
    from reprise.registry import _registry as reg
    from reprise.registry._api import _load, _ws
    from reprise.registry._onnx import convert, make_session

    if not onnx:
        raise UserError("optimize converts to ONNX; onnx=False leaves nothing to do")
    if quantize is not None and quantize not in QUANTIZE:
        raise UserError(f"quantize must be one of {list(QUANTIZE)} or None; got {quantize!r}")
    if not (isinstance(atol, float | int) and atol > 0):
        raise UserError(f"atol must be a positive number; got {atol!r}")
    ws = _ws(workspace)
    rec = reg.get_version(ws, name, version)
    pkg = _load(ws, rec)
    if pkg.onnx is not None:
        raise UserError(f"{rec.ref} is already an ONNX variant (of version "
                        f"{(pkg.onnx_info or {}).get('source', {}).get('version')}); "
                        "optimise the source version instead")
    graph, io = convert(pkg)
    held = resolve_holdout(ws, rec, pkg, holdout, holdout_target)
    rows, sources = parity_rows(pkg, held.rows)
    def check(graph: bytes, io: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        candidate = dataclasses.replace(pkg, onnx=graph, onnx_info=io, runtime="onnx",
                                        session=make_session(graph))
        return candidate, prove_parity(pkg, candidate, rows, atol=atol, sources=sources)

    folded = "scale-folded-into-gemm" in io["rewrites"]
    try:
        candidate, parity = check(graph, io)
    except Exception:
        if not folded:
            raise
        parity = {"passed": False}
    if not parity["passed"] and folded:
        # the fold rounds differently (by about a unit in the last place of a weight):
        # near the tolerance the graph as converted, unfolded, may still pass (and a
        # graph the fold broke, which no converted graph has shown, is never kept)
        graph, io = convert(pkg, fold=False)
        candidate, parity = check(graph, io)
    parity["holdout"] = held.info
    if not parity["passed"]:
        raise UserError(f"ONNX parity failed for {rec.ref}: {parity['problem']}; nothing "
                        "was registered (the original stays servable)")
    info: dict[str, Any] = {**io, "parity": parity, "quantization": None,
                            "source": {"name": name, "version": version,
                                       "package": rec.package_hash}}
    card = {**pkg.card, "onnx": {"source_version": version, "parity": parity}}
    if quantize is not None:
        graph = _quantize(graph)
        quantized = dataclasses.replace(candidate, onnx=graph, session=make_session(graph))
        gate = quantization_gate(pkg, quantized, rows, held, max_drop=max_drop,
                                 confidence=confidence, seed=seed)
        info["quantization"] = {"method": quantize, "gate": gate}
        card["onnx"]["quantization"] = info["quantization"]
        card["gates"] = _with_gate(pkg.card.get("gates"), gate)
    variant = dataclasses.replace(pkg, onnx=graph, onnx_info=info, card=card,
                                  runtime="native", session=None)
    return _register(ws, name, variant, rec)


def _register(ws: Any, name: str, variant: Any, source: ModelVersionRecord
              ) -> tuple[ModelVersionRecord, bool]:
    from reprise.registry import _registry as reg
    from reprise.store._materializers import save_object

    art = save_object(ws.artifacts, variant)
    ws.metadata.put_artifact(art)
    out, created = reg.register_package(ws, name, art.hash, run_id=source.run_id,
                                        package=variant, step=source.meta.get("step"),
                                        source=source)
    return out, created


# -- parity -----------------------------------------------------------------------------

def parity_rows(pkg: Any, held: list[dict[str, Any]] | None = None, *, drawn: int = _DRAWN,
                seed: int = 0) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The rows parity is proved on (the example rows, ``held`` and rows drawn from the
    signature), and how many came from where."""
    rows = list(pkg.example)
    held = list(held or [])
    synthetic = _drawn(pkg.signature, drawn, seed)
    return rows + held + synthetic, {"example": len(rows), "holdout": len(held),
                                     "drawn_from_signature": len(synthetic)}


def _drawn(sig: Any, n: int, seed: int) -> list[dict[str, Any]]:
    """Rows drawn uniformly within the signature's training ranges and categories."""
    import numpy as np

    rng = np.random.default_rng(seed)
    cols: dict[str, list[Any]] = {}
    for f in sig.inputs:
        lo, hi = (f.min, f.max) if f.min is not None and f.max is not None else (-1.0, 1.0)
        if f.dtype == "string":
            cats = list(f.categories or ["a"])
            cols[f.name] = [cats[i] for i in rng.integers(0, len(cats), n)]
        elif f.dtype == "bool":
            cols[f.name] = [bool(b) for b in rng.integers(0, 2, n)]
        elif f.dtype == "int":
            cols[f.name] = [int(v) for v in rng.integers(int(lo), int(hi) + 1, n)]
        elif f.shape:
            cols[f.name] = rng.uniform(lo, hi, (n, *f.shape)).tolist()
        else:
            cols[f.name] = [float(v) for v in rng.uniform(lo, hi, n)]
    return [{k: v[i] for k, v in cols.items()} for i in range(n)]


def prove_parity(native: Any, onnx: Any, rows: list[dict[str, Any]], *, atol: float,
                 sources: dict[str, int]) -> dict[str, Any]:
    """Both runtimes on ``rows``: labels identical, probabilities within ``atol``."""
    import numpy as np

    # out-of-range values are the serving policy's business, not a runtime's: flagged
    checked = native.signature.with_policy(out_of_range="flag").validate_records(rows)
    if not checked.ok:
        e = checked.errors[0]
        raise UserError(f"the parity rows do not match the signature ({e.field}: "
                        f"{e.problem}); is the holdout the raw training features?")
    a, b = native.predict(checked.columns), onnx.predict(checked.columns)
    out: dict[str, Any] = {"rows": len(rows), "sources": sources, "atol": float(atol),
                           "labels_identical": None, "ties_within_atol": 0,
                           "max_abs_diff": None, "problem": None}
    if native.signature.task == "regression":
        x = np.asarray(a["prediction"], dtype=np.float64)
        y = np.asarray(b["prediction"], dtype=np.float64)
        diff = np.abs(x - y)
        out["max_abs_diff"] = float(diff.max())
        if not bool(np.all(diff <= atol + atol * np.abs(x))):
            out["problem"] = f"predictions differ by up to {diff.max():.3g} (atol {atol})"
    else:
        same = np.asarray(a["prediction"]).tolist() == np.asarray(b["prediction"]).tolist()
        out["labels_identical"] = same
        if "probabilities" in a and "probabilities" in b:
            diff = np.abs(np.asarray(a["probabilities"], dtype=np.float64)
                          - np.asarray(b["probabilities"], dtype=np.float64))
            out["max_abs_diff"] = float(diff.max())
            if diff.max() > atol:
                out["problem"] = (f"probabilities differ by up to {diff.max():.3g} "
                                  f"(atol {atol})")
        if not same:
            differ = np.asarray(a["prediction"]) != np.asarray(b["prediction"])
            ties = _ties(a.get("probabilities"), atol) & differ
            out["ties_within_atol"] = int(ties.sum())
            if (differ & ~ties).any():
                out["problem"] = (f"{int((differ & ~ties).sum())} of {len(rows)} labels "
                                  "differ")
    out["passed"] = out["problem"] is None
    return out


def _ties(proba: Any, atol: float) -> Any:
    """Rows whose two most likely classes are within ``atol`` of each other in the native
    model: no float32 graph can be asked to break such a tie as float64 arithmetic
    does, so a differing label there is counted (``ties_within_atol``), not failed."""
    import numpy as np

    if proba is None:
        return np.zeros(0, dtype=bool)
    p = np.sort(np.asarray(proba, dtype=np.float64), axis=1)
    return np.asarray((p[:, -1] - p[:, -2]) <= 2 * atol)

# -- quantisation -----------------------------------------------------------------------

def _quantize(graph: bytes) -> bytes:
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from reprise.registry._onnx import tidy_opsets

    model = tidy_opsets(onnx.load_from_string(graph))
    with tempfile.TemporaryDirectory(prefix="reprise-onnx-") as tmp:
        src, dst = Path(tmp) / "float.onnx", Path(tmp) / "int8.onnx"
        src.write_bytes(model.SerializeToString())
        _advice_filter(+1)
        try:
            quantize_dynamic(src, dst, weight_type=QuantType.QInt8)
        except Exception as exc:
            raise UserError(f"dynamic int8 quantisation failed ({type(exc).__name__}: "
                            f"{exc}); optimise without --quantize") from None
        finally:
            _advice_filter(-1)
        return dst.read_bytes()


_ADVICE_LOCK = threading.Lock()
_advice_users = 0  # quantisations running now (the filter is on the process's root logger)


def _advice_filter(change: int) -> None:
    """Install the filter below on the root logger while any quantisation runs (a count:
    two threads quantising at once keep it until both are done)."""
    global _advice_users
    with _ADVICE_LOCK:
        _advice_users += change
        root = logging.getLogger()
        if _advice_users > 0:
            root.addFilter(_no_preprocessing_advice)  # once: addFilter skips a duplicate
        else:
            root.removeFilter(_no_preprocessing_advice)


def _no_preprocessing_advice(record: logging.LogRecord) -> bool:
    """Drop ONNX Runtime's advice, logged on the root logger by every dynamic
    quantisation, to run its shape-inference pre-processing first: on the graphs
    ``convert`` makes (elementwise ops, Gemm, skl2onnx's ml operators) it changes none of
    the quantised operators (checked on the demo's MLP and the scikit-learn pipeline), so
    it only told a user of ``models optimize --quantize`` to do something that is not
    theirs to do."""
    return not str(record.msg).startswith("Please consider to run pre-processing before "
                                          "quantization")


def quantization_gate(native: Any, quantized: Any, rows: list[dict[str, Any]],
                      held: Holdout, *, max_drop: float, confidence: float = 0.95,
                      resamples: int | None = None, seed: int = 0) -> dict[str, Any]:
    """The original's metrics for both models, with intervals, and the drop (native -
    quantised) with its paired-bootstrap interval, decided by :data:`GATE_RULE`: on the
    held-out rows against their labels, else (no held-out labels) on ``rows`` against
    the native model's answers."""
    import numpy as np

    from reprise.evaluate._bootstrap import DEFAULT_RESAMPLES, check_options
    from reprise.evaluate._confidence import confidence_intervals
    from reprise.evaluate._intervals import clopper_pearson

    resamples = DEFAULT_RESAMPLES if resamples is None else resamples
    check_options(resamples, confidence)
    if held.rows and held.truth is not None:
        rows, basis, truth = held.rows, "holdout", np.asarray(held.truth)
    else:
        why = ("no held-out set" if not held.rows
               else "the held-out rows have no target column")
        basis, truth = f"agreement with the native model on the parity rows ({why})", None
    cols = native.signature.with_policy(out_of_range="flag").validate_records(rows).columns
    a, b = native.predict(cols), quantized.predict(cols)
    if truth is None:
        truth = np.asarray(a["prediction"])
    task = native.signature.task
    pa, pb = _prepared(task, truth, a["prediction"], b["prediction"])
    names = ["r2"] if task == "regression" else ["accuracy", "f1_macro"]
    # rows no resample can hold: with no changed label, a label metric's drop is only
    # bounded by the share of labels n rows can hide (exact, Clopper-Pearson, 0 of n)
    unseen = None if task == "regression" else float(clopper_pearson(0, pa.n, confidence)[1])
    drops = paired_drops(pa, pb, names, confidence=confidence, resamples=resamples, seed=seed)
    ci_a = confidence_intervals(pa, names, resamples=resamples, confidence=confidence,
                                seed=seed)
    ci_b = confidence_intervals(pb, names, resamples=resamples, confidence=confidence,
                                seed=seed)
    results = [_decide(m, drops[m], ci_a[m], ci_b[m], pa.n, max_drop, unseen, confidence)
               for m in names]
    verdicts = {r["verdict"] for r in results}
    verdict = "fail" if "fail" in verdicts else (
        "inconclusive" if "inconclusive" in verdicts else "pass")
    return {"basis": basis, "rows": pa.n, "target": held.info.get("target")
            if basis == "holdout" else None, "results": results,
            "verdict": verdict, "passed": verdict == "pass", "max_drop": max_drop,
            "confidence": confidence, "method": paired_method(resamples, seed),
            "resamples": resamples, "seed": seed, "unseen_change_bound": unseen,
            "rule": GATE_RULE.format(conf=f"{confidence:.0%}", max_drop=f"{max_drop:g}")
            + ("" if unseen is None else UNSEEN_RULE.format(unseen=unseen))}


#: The quantisation gate's decision, per metric (stored, formatted, in the gate result).
GATE_RULE = ("pass when the upper bound of the drop's {conf} interval (native - quantised) "
             "is <= max_drop ({max_drop}); fail when its lower bound is > max_drop; "
             "otherwise inconclusive, which blocks promotion like a fail (the rows are too "
             "few to tell). The gate passes when every metric passes.")
#: Added to the rule for label metrics (see ``unseen_change_bound``).
UNSEEN_RULE = (" For accuracy and macro F1 the upper bound is at least the share of labels "
               "the rows could hide with none of them changed (Clopper-Pearson upper bound "
               "of 0 of n, {unseen:.4f} here): the bootstrap cannot see a change no row "
               "shows.")


def paired_method(resamples: int, seed: int) -> str:
    return (f"paired bootstrap: both models' metric on the same {resamples} resamples of the "
            f"rows (seed {seed}), BCa interval of the per-resample differences "
            "(acceleration from the paired jackknife)")


def paired_drops(pa: Any, pb: Any, names: list[str], *, confidence: float, resamples: int,
                 seed: int) -> dict[str, dict[str, Any]]:
    """The drop (``pa``'s metric - ``pb``'s) on the same rows with its BCa interval: the
    evaluation's bootstrap draws its resamples from the seed and the number of rows
    only, so both models are scored on identical resamples (and jackknife groups) and
    the differences are paired."""
    import numpy as np

    from reprise.evaluate._bootstrap import jackknife_values, point_values, resample_values
    from reprise.evaluate._intervals import bca

    if pa.n != pb.n or not np.array_equal(pa.y, pb.y):
        raise ValueError("a paired drop needs both models scored on the same rows")
    boot_a = resample_values(pa, names, resamples=resamples, seed=seed)
    boot_b = resample_values(pb, names, resamples=resamples, seed=seed)
    jack_a, jack_b = jackknife_values(pa, names, seed=seed), jackknife_values(pb, names, seed=seed)
    est_a, est_b = point_values(pa, names), point_values(pb, names)
    out = {}
    for m in names:
        est = float(est_a[m]) - float(est_b[m])
        diff = boot_a[m] - boot_b[m]
        low, high = bca(est, diff, jack_a[m] - jack_b[m], confidence)
        out[m] = {"native": float(est_a[m]), "quantized": float(est_b[m]), "drop": est,
                  "low": low, "high": high, "resamples": int(np.isfinite(diff).sum())}
    return out


def _prepared(task: str, truth: Any, a: Any, b: Any) -> tuple[Any, Any]:
    """Both models' answers as evaluations of the same rows (classification: labels as
    indices into one list, at least two classes, so one-class rows are fine too)."""
    import numpy as np

    from reprise.evaluate._inputs import prepare

    if task == "regression":
        return (prepare(truth, a, task="regression"), prepare(truth, b, task="regression"))
    t, x, y = (np.asarray(v) for v in (truth, a, b))
    try:
        _, codes = np.unique(np.concatenate([t, x, y]), return_inverse=True)
    except TypeError:
        raise UserError("the held-out labels and the predictions mix label types (numbers "
                        "and strings); give the target column as the model's labels") from None
    codes = codes.reshape(-1)
    n = len(t)
    labels = list(range(max(2, int(codes.max()) + 1)))
    return (prepare(codes[:n], codes[n:2 * n], labels=labels),
            prepare(codes[:n], codes[2 * n:], labels=labels))


def _decide(metric: str, drop: dict[str, Any], ci_a: dict[str, Any], ci_b: dict[str, Any],
            n: int, max_drop: float, unseen: float | None,
            confidence: float) -> dict[str, Any]:
    import math

    low, high = drop["low"], drop["high"]
    if unseen is not None and math.isfinite(high):
        high = max(high, unseen)
    if not (math.isfinite(low) and math.isfinite(high)):
        verdict = "fail"
        reason = f"{metric} is undefined on these rows, and an undefined value fails its gate"
    elif high <= max_drop:
        verdict, reason = "pass", (f"the drop is within {_points(max_drop)} (upper bound "
                                   f"{high:.4f})")
    elif low > max_drop:
        verdict, reason = "fail", (f"the drop exceeds {_points(max_drop)} (lower bound "
                                   f"{low:.4f})")
    else:
        verdict = "inconclusive"
        reason = f"{n} rows are too few to show the drop is within {_points(max_drop)}"
        if unseen is not None and unseen > max_drop and max_drop > 0:
            need = math.ceil(math.log((1 - confidence) / 2) / math.log1p(-max_drop))
            reason += f" ({need} would be needed even with no label changed)"
    return {"gate": f"quantization_{metric}_drop", "metric": metric,
            "native": drop["native"], "quantized": drop["quantized"], "drop": drop["drop"],
            "drop_ci_low": _finite(low), "drop_ci_high": _finite(high),
            "bootstrap_ci_high": _finite(drop["high"]), "resamples": drop["resamples"],
            "native_ci_low": ci_a["ci_low"], "native_ci_high": ci_a["ci_high"],
            "quantized_ci_low": ci_b["ci_low"], "quantized_ci_high": ci_b["ci_high"],
            "ci_method": ci_a["ci_method"], "max_drop": max_drop, "verdict": verdict,
            "passed": verdict == "pass", "reason": reason}


def _points(drop: float) -> str:
    return f"{drop * 100:g} point" + ("" if abs(drop * 100) == 1 else "s")


def _finite(value: float) -> float | None:
    import math

    return float(value) if math.isfinite(value) else None


def _with_gate(gates: Any, gate: dict[str, Any]) -> dict[str, Any]:
    """The original's gates plus the quantisation gate: promotion needs both."""
    gates = dict(gates or {"passed": None, "results": []})
    results = [*(gates.get("results") or []), *gate["results"]]
    before = gates.get("passed")
    passed = False if not gate["passed"] else before
    return {**gates, "results": results, "passed": passed}
