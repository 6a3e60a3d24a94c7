"""``optimize``: a registered version's ONNX variant, proved equal before it is registered.

1. The package's preprocessing and model become one ONNX graph (:mod:`._onnx`).
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
   and macro F1, or R^2) on the held-out rows against their labels (else: agreement
   with the native labels on the parity rows, recorded as such) and a gate (default:
   drop <= 0.5 point) decides, like other gates, whether it can be promoted.
4. The variant is a new version (its own manifest hash covers the .onnx bytes), with
   ``source_version`` lineage and a ``model.optimize`` audit event.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import Any

from reprise.core._types import ModelVersionRecord
from reprise.core.errors import UserError
from reprise.registry._holdout import Holdout, resolve_holdout

__all__ = ["optimize", "parity_rows", "prove_parity", "quantization_gate"]

QUANTIZE = ("dynamic-int8",)
_DRAWN = 256


def optimize(name: str, version: int, *, onnx: bool = True, quantize: str | None = None,
             atol: float = 1e-5, max_drop: float = 0.005, holdout: Any = None,
             holdout_target: Any = None, workspace: Any = None) -> ModelVersionRecord:
    """Register the ONNX variant of ``name:version`` (see the module docstring).

    ``holdout``: None (default) finds the held-out rows in the version's lineage; a
    table, or a file or dataset version ``NAME@N`` by name, gives them; False uses
    none. ``holdout_target``: their labels (an array, or a column's name); default: the
    column the card's ``target`` names, when the table has it."""
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
    candidate = dataclasses.replace(pkg, onnx=graph, onnx_info=io, runtime="onnx",
                                    session=make_session(graph))
    held = resolve_holdout(ws, rec, pkg, holdout, holdout_target)
    rows, sources = parity_rows(pkg, held.rows)
    parity = prove_parity(pkg, candidate, rows, atol=atol, sources=sources)
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
        gate = quantization_gate(pkg, quantized, rows, held, max_drop=max_drop)
        info["quantization"] = {"method": quantize, "gate": gate}
        card["onnx"]["quantization"] = info["quantization"]
        card["gates"] = _with_gate(pkg.card.get("gates"), gate)
    variant = dataclasses.replace(pkg, onnx=graph, onnx_info=info, card=card,
                                  runtime="native", session=None)
    return _register(ws, name, variant, rec)


def _register(ws: Any, name: str, variant: Any, source: ModelVersionRecord
              ) -> ModelVersionRecord:
    from reprise.registry import _registry as reg
    from reprise.store._materializers import save_object

    art = save_object(ws.artifacts, variant)
    ws.metadata.put_artifact(art)
    out, _ = reg.register_package(ws, name, art.hash, run_id=source.run_id, package=variant,
                                  step=source.meta.get("step"), source=source)
    return out  # type: ignore[no-any-return]


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
        try:
            quantize_dynamic(src, dst, weight_type=QuantType.QInt8)
        except Exception as exc:
            raise UserError(f"dynamic int8 quantisation failed ({type(exc).__name__}: "
                            f"{exc}); optimise without --quantize") from None
        return dst.read_bytes()


def quantization_gate(native: Any, quantized: Any, rows: list[dict[str, Any]],
                      held: Holdout, *, max_drop: float) -> dict[str, Any]:
    """The original's metrics for both models and whether the drop is within bounds:
    on the held-out rows against their labels, else (no held-out labels) on ``rows``
    against the native model's answers."""
    import numpy as np

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
    metrics = _metrics(native.signature.task)
    results = []
    for metric, fn in metrics.items():
        before, after = fn(truth, a["prediction"]), fn(truth, b["prediction"])
        results.append({"gate": f"quantization_{metric}_drop", "metric": metric,
                        "native": before, "quantized": after, "drop": before - after,
                        "max_drop": max_drop, "passed": before - after <= max_drop})
    return {"basis": basis, "rows": len(rows), "target": held.info.get("target")
            if basis == "holdout" else None, "results": results,
            "passed": all(r["passed"] for r in results)}


def _metrics(task: str) -> dict[str, Any]:
    from sklearn.metrics import accuracy_score, f1_score, r2_score

    if task == "regression":
        return {"r2": lambda t, p: float(r2_score(t, p))}
    return {"accuracy": lambda t, p: float(accuracy_score(t, p)),
            "f1_macro": lambda t, p: float(f1_score(t, p, average="macro"))}


def _with_gate(gates: Any, gate: dict[str, Any]) -> dict[str, Any]:
    """The original's gates plus the quantisation gate: promotion needs both."""
    gates = dict(gates or {"passed": None, "results": []})
    results = [*(gates.get("results") or []), *gate["results"]]
    before = gates.get("passed")
    passed = False if not gate["passed"] else before
    return {**gates, "results": results, "passed": passed}
