"""Whether a candidate version may enter a rollout: its signature takes the requests the
stable version takes and answers in the same shape, it loads, and it warms up (answers
its package's example). Checked before anything is written, so a refused candidate
never receives traffic.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

from reprise.core.errors import UserError

__all__ = ["load_and_warm_up", "signature_problems"]


def signature_problems(stable: Mapping[str, Any] | None,
                       candidate: Mapping[str, Any] | None) -> list[str]:
    """Why requests for the stable version would not suit the candidate (empty: they do).

    A rollout sends the stable version's traffic to the candidate, so the candidate must
    take the same inputs (names, types, shapes; nulls wherever the stable takes them;
    the stable's inputs only, unless the candidate ignores extra columns) and give at
    least the stable's outputs with the same types and shapes, for the same task.
    """
    if not stable or not candidate:
        return [] if stable == candidate else ["one version has no signature"]
    problems: list[str] = []
    s_in = {f["name"]: f for f in stable.get("inputs") or []}
    c_in = {f["name"]: f for f in candidate.get("inputs") or []}
    for name in c_in.keys() - s_in.keys():
        problems.append(f"the candidate needs input {name!r}, which the stable version's "
                        "requests do not carry")
    if candidate.get("extra_columns", "reject") != "ignore":
        for name in s_in.keys() - c_in.keys():
            problems.append(f"the candidate does not take input {name!r} (and refuses "
                            "columns it does not know)")
    for name in sorted(s_in.keys() & c_in.keys()):
        problems.extend(_field_problems("input", s_in[name], c_in[name]))
        if s_in[name].get("nullable") and not c_in[name].get("nullable"):
            problems.append(f"input {name!r} may be null for the stable version, not for the "
                            "candidate")
    c_out = {f["name"]: f for f in candidate.get("outputs") or []}
    for f in stable.get("outputs") or []:
        other = c_out.get(f["name"])
        if other is None:
            problems.append(f"the candidate does not answer output {f['name']!r}")
        else:
            problems.extend(_field_problems("output", f, other))
    s_task, c_task = stable.get("task"), candidate.get("task")
    if s_task and c_task and s_task != c_task:
        problems.append(f"the task differs: {s_task} (stable), {c_task} (candidate)")
    return sorted(problems)


def _field_problems(kind: str, s: Mapping[str, Any], c: Mapping[str, Any]) -> list[str]:
    out = []
    if s.get("dtype") != c.get("dtype"):
        out.append(f"{kind} {s['name']!r} is {s.get('dtype')} for the stable version, "
                   f"{c.get('dtype')} for the candidate")
    if list(s.get("shape") or []) != list(c.get("shape") or []):
        out.append(f"{kind} {s['name']!r} has shape {list(s.get('shape') or [])} for the "
                   f"stable version, {list(c.get('shape') or [])} for the candidate")
    return out


def load_and_warm_up(source: Any, name: str, version: int) -> dict[str, Any]:
    """Load ``name:version`` from ``source`` (a :class:`~reprise.registry.ModelSource`)
    and predict its package's example as a server's warm-up would; what it took.
    UserError naming the step that failed."""
    ref = f"{name}:{version}"
    t0 = time.perf_counter()
    try:
        servable = source.load(name, version)
    except Exception as exc:  # a model that cannot load: refuse it, whatever the reason
        raise UserError(f"candidate {ref} failed to load ({type(exc).__name__}: {exc}); no "
                        "rollout was started") from None
    loaded = time.perf_counter() - t0
    example = list(servable.example or [])
    if not example:
        raise UserError(f"candidate {ref} has no example input to warm up on; package it "
                        "with sample=... (a few training rows) and register it again")
    checked = servable.signature.check_records(example)
    if not checked.ok:
        e = checked.errors[0]
        raise UserError(f"candidate {ref}'s example input does not match its signature "
                        f"({e.field}: expected {e.expected}, got {e.got}); re-package it")
    t1 = time.perf_counter()
    try:
        outputs = servable.predict(servable.signature.to_arrays(checked.columns))
    except Exception as exc:  # the model's own failure on its example
        raise UserError(f"candidate {ref} failed its warm-up: predicting its example input "
                        f"raised {type(exc).__name__}: {exc}; no rollout was started") from None
    _check_outputs(ref, servable, outputs, checked.rows)
    return {"load_s": round(loaded, 4), "warm_up_s": round(time.perf_counter() - t1, 4),
            "rows": checked.rows}


def _check_outputs(ref: str, servable: Any, outputs: Any, rows: int) -> None:
    import numpy as np

    if not isinstance(outputs, Mapping):
        raise UserError(f"candidate {ref} failed its warm-up: it answered a "
                        f"{type(outputs).__name__}, not output columns")
    for f in servable.signature.outputs:
        values = outputs.get(f.name)
        if values is None or len(values) != rows:
            got = "nothing" if values is None else f"{len(values)} rows"
            raise UserError(f"candidate {ref} failed its warm-up: output {f.name!r} should "
                            f"have {rows} rows for its example; got {got}")
        arr = np.asarray(values)
        if arr.dtype.kind in "fc" and not np.isfinite(arr).all():
            raise UserError(f"candidate {ref} failed its warm-up: output {f.name!r} is not "
                            "finite (NaN or infinity) on its example input")
        if arr.dtype.kind == "O" and any(isinstance(v, float) and not math.isfinite(v)
                                         for v in arr.ravel()):
            raise UserError(f"candidate {ref} failed its warm-up: output {f.name!r} is not "
                            "finite on its example input")
