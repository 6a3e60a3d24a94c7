"""Registered models: immutable versions of packages, aliases that move, and the rules.

* A version is a package (by content hash) registered under a name; registering the
  same package again under that name returns the same version.
* ``promote`` points an alias (``production``, ``staging``...) at a version. It needs
  the version's evaluation gates to have passed (from its card); ``force=True`` with a
  ``reason`` overrides that, and the audit log keeps the reason.
* ``rollback`` returns an alias to the version it held before its latest promotion
  (repeatable, back through its history).
* Archived versions keep their record but cannot be promoted or resolved by name;
  a version an alias holds cannot be archived or deleted (move the alias first).
* Version numbers are never reused: after deleting ``NAME:3`` the next registration
  is ``NAME:4`` (or higher), so a pinned ``NAME:VERSION`` always means one package.

Every change appends an audit event in the same transaction (see the store), and the
rules that guard it are checked again inside that transaction: checks made here first
only give the friendlier message, never the guarantee.
"""

from __future__ import annotations

import getpass
import json
import os
import re
import socket
from typing import Any

from reprise.core._types import ModelVersionRecord
from reprise.core.errors import NotFoundError, UserError

__all__ = ["actor", "archive", "delete_version", "describe_model", "get_version",
           "is_model_name", "list_models", "parse_ref", "promote", "register_package", "rollback",
           "split_ref"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def actor() -> str:
    """Who is acting: ``REPRISE_ACTOR``, else ``user@host``."""
    explicit = os.environ.get("REPRISE_ACTOR")
    if explicit:
        return explicit
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def is_model_name(value: object) -> bool:
    """Whether ``value`` follows the rule for model names (and aliases): letters, digits,
    '.', '_' and '-', up to 100, starting with a letter or digit; nothing else (no path
    separator, no trailing newline)."""
    return isinstance(value, str) and _NAME.fullmatch(value) is not None


def _check_name(kind: str, value: str) -> str:
    if not is_model_name(value):
        raise UserError(f"{kind} {value!r} is not valid: use letters, digits, '.', '_' and "
                        "'-' (up to 100), starting with a letter or digit")
    return value


def split_ref(ref: str) -> tuple[str, str | None, int | None]:
    """``NAME@ALIAS`` -> (name, alias, None); ``NAME:3`` -> (name, None, 3); ``NAME``."""
    if "@" in ref:
        name, _, alias = ref.partition("@")
        return _check_name("model name", name), _check_name("alias", alias), None
    if ":" in ref:
        name, _, version = ref.partition(":")
        if not (version.isascii() and version.isdigit()):
            raise UserError(f"{ref!r}: after ':' comes a version number, e.g. {name}:3")
        return _check_name("model name", name), None, int(version)
    return _check_name("model name", ref), None, None


def _versions(ws: Any, name: str) -> list[ModelVersionRecord]:
    found = ws.metadata.list_model_versions(name)
    if not found:
        known = sorted({v.name for v in ws.metadata.list_model_versions()})
        raise NotFoundError(f"no model {name!r}; models: {known or 'none yet'}. Register one "
                            "with `reprise models register NAME --run RUN`.")
    return list(found)


def get_version(ws: Any, name: str, version: int) -> ModelVersionRecord:
    rec = ws.metadata.get_model_version(name, version)
    if rec is None:
        have = [v.version for v in _versions(ws, name)]
        raise NotFoundError(f"model {name!r} has no version {version}; versions: {have}")
    return rec  # type: ignore[no-any-return]


def parse_ref(ws: Any, ref: str) -> ModelVersionRecord:
    """The version ``ref`` names now (see :func:`split_ref`)."""
    name, alias, version = split_ref(ref)
    if version is not None:
        return get_version(ws, name, version)
    versions = _versions(ws, name)
    if alias is not None:
        aliases = ws.metadata.get_aliases(name)
        if alias not in aliases:
            raise NotFoundError(f"model {name!r} has no alias {alias!r}; aliases: "
                                f"{sorted(aliases) or 'none'}. Promote a version with "
                                f"`reprise models promote {name} VERSION --alias {alias}`.")
        return get_version(ws, name, aliases[alias])
    ready = [v for v in versions if v.status == "ready"]
    if not ready:
        raise NotFoundError(f"every version of {name!r} is archived")
    return ready[-1]


def register_package(ws: Any, name: str, package_hash: str, *, run_id: str | None,
                     package: Any, step: str | None = None,
                     source: ModelVersionRecord | None = None
                     ) -> tuple[ModelVersionRecord, bool]:
    """Register a stored package under ``name``; ``(version, created)``. With ``source``
    (an optimised variant of that version): lineage to it, and the audit event is
    ``model.optimize``."""
    _check_name("model name", name)
    card = package.card
    gates = card.get("gates") or {}
    metrics = {"metrics": card.get("metrics") or {}, "gates_passed": gates.get("passed"),
               "task": card.get("task")}
    meta = {"flavor": package.flavor, "step": step, "input_format": package.input_format,
            "lineage": _lineage_summary(ws, run_id) if run_id else None}
    record = ModelVersionRecord(name=name, version=0, package_hash=package_hash,
                                run_id=run_id, status="ready",
                                signature=package.signature.to_dict(), metrics=metrics,
                                meta=meta)
    payload = {"package": package_hash, "run": run_id, "step": step,
               "gates_passed": gates.get("passed")}
    action = "register"
    if source is not None:
        info = package.onnx_info or {}
        meta.update(source_version=source.version, source_package=source.package_hash,
                    lineage=source.meta.get("lineage"),
                    onnx={"parity": (info.get("parity") or {}).get("passed"),
                          "quantize": (info.get("quantization") or {}).get("method"),
                          "report": info.get("parity"),
                          "gate": (info.get("quantization") or {}).get("gate"),
                          "rewrites": list(info.get("rewrites") or [])})
        payload.update(source=source.ref, onnx={k: meta["onnx"][k]
                                                for k in ("parity", "quantize")})
        action = "model.optimize"
    return ws.metadata.add_model_version(  # type: ignore[no-any-return]
        record, (actor(), action, name, payload))


def _lineage_summary(ws: Any, run_id: str) -> dict[str, Any]:
    """The datasets and the code snapshot a run used (shown on the model, kept with it)."""
    rec = ws.metadata.get_run(run_id)
    datasets = sorted({str(v["resolved"]) for v in rec.params.values()
                       if isinstance(v, dict) and "$input" in v and v.get("resolved")})
    files = sorted({str(v["path"]) for v in rec.params.values()
                    if isinstance(v, dict) and "$path" in v})
    out = {"run": rec.id, "pipeline": rec.tags.get("reprise.pipeline"),
           "code_snapshot": rec.tags.get("reprise.code_snapshot"), "datasets": datasets,
           "files": files, "git_commit": rec.git_commit, "git_dirty": rec.git_dirty}
    if "reprise.alarm" in rec.tags:  # a retraining run the monitor's loop started
        out["trigger"] = _trigger(rec.tags)
    return out


def _trigger(tags: dict[str, str]) -> dict[str, Any]:
    """The alarm that started a retraining run, from its tags (see monitor._retrain)."""
    def doc(key: str) -> Any:
        try:
            return json.loads(tags.get(key) or "null")
        except ValueError:
            return tags.get(key)

    return {"alarm": doc("reprise.alarm"), "window": doc("reprise.monitor_window"),
            "retrain_of": tags.get("reprise.retrain_of")}


def promote(ws: Any, name: str, version: int, alias: str, *, force: bool = False,
            reason: str | None = None, by: str | None = None) -> int | None:
    """Point ``alias`` at ``name:version``; the version it held before (or None).
    ``reason`` (needed with ``force``) is recorded in the audit event, and ``by`` is its
    actor (default :func:`actor`)."""
    _check_name("alias", alias)
    rec = get_version(ws, name, version)
    if rec.status != "ready":
        raise UserError(f"{rec.ref} is {rec.status}; only ready versions can be promoted")
    passed = rec.metrics.get("gates_passed")
    if force and not (reason and reason.strip()):
        raise UserError("--force needs --reason \"...\": the override is recorded in the "
                        "audit log")
    if passed is not True and not force:
        why = ("its evaluation gates failed" if passed is False
               else "it has no evaluation with gates (package_model(evaluation=...))")
        gate = (rec.meta.get("onnx") or {}).get("gate") or {}
        if passed is False and gate.get("verdict") == "inconclusive":
            reasons = "; ".join(sorted({r["reason"] for r in gate.get("results") or []
                                        if r.get("verdict") == "inconclusive"}))
            why = (f"its quantisation gate is inconclusive: {reasons}; that blocks "
                   "promotion like failed gates (optimise with more held-out rows, "
                   "--holdout)")
        raise UserError(f"cannot promote {rec.ref} to {alias!r}: {why}. Override with "
                        f"--force --reason \"...\"")
    payload = {"alias": alias, "version": version, "gates_passed": passed}
    if force:
        payload["force"] = True
    if reason and reason.strip():
        payload["reason"] = reason
    return ws.metadata.set_alias(  # type: ignore[no-any-return]
        name, alias, version, (by or actor(), "promote", f"{name}@{alias}", payload),
        package_hash=rec.package_hash)


def rollback(ws: Any, name: str, alias: str, *, reason: str | None = None,
             by: str | None = None) -> tuple[int, int]:
    """Return ``alias`` to the version it held before; ``(from, to)``. ``reason`` is
    recorded in the audit event, ``by`` is its actor (default :func:`actor`)."""
    _versions(ws, name)
    if alias not in ws.metadata.get_aliases(name):
        raise NotFoundError(f"model {name!r} has no alias {alias!r}")
    payload: dict[str, Any] = {"alias": alias}
    if reason and reason.strip():
        payload["reason"] = reason
    done = ws.metadata.rollback_alias(name, alias, (by or actor(), "rollback",
                                                    f"{name}@{alias}", payload))
    if done is None:
        raise UserError(f"{name}@{alias} has no earlier version to roll back to (it was "
                        "promoted once); promote another version instead")
    return done  # type: ignore[no-any-return]


def archive(ws: Any, name: str, version: int) -> None:
    """Archive ``name:version``; refused while an alias holds it (checked atomically)."""
    rec = get_version(ws, name, version)
    ws.metadata.set_model_version_status(name, version, "archived",
                                         (actor(), "archive", rec.ref, {}))


def delete_version(ws: Any, name: str, version: int) -> None:
    """Delete ``name:version``; refused while an alias holds it (checked atomically)."""
    rec = get_version(ws, name, version)
    ws.metadata.delete_model_version(name, version, (actor(), "delete", rec.ref,
                                                     {"package": rec.package_hash}))


def list_models(ws: Any) -> list[dict[str, Any]]:
    """One row per model: versions, newest, aliases."""
    by_name: dict[str, list[ModelVersionRecord]] = {}
    reader = ws.reader
    for v in reader.list_model_versions():
        by_name.setdefault(v.name, []).append(v)
    return [{"name": name, "versions": len(vs), "latest": vs[-1].version,
             "aliases": reader.get_aliases(name), "updated": vs[-1].created_at}
            for name, vs in sorted(by_name.items())]


def describe_model(ws: Any, ref: str) -> dict[str, Any]:
    """A model (``NAME``: every version) or one version (``NAME@ALIAS``, ``NAME:V``)."""
    name, alias, version = split_ref(ref)
    aliases = ws.metadata.get_aliases(name) if ws.metadata.list_model_versions(name) else {}
    if alias is None and version is None:
        versions = _versions(ws, name)
        return {"name": name, "aliases": aliases, "versions": [_row(v, aliases)
                                                              for v in versions]}
    rec = parse_ref(ws, ref)
    return {**_row(rec, aliases), "signature": rec.signature, "meta": rec.meta,
            "history": {a: ws.metadata.alias_history(name, a) for a in aliases}}


def _row(v: ModelVersionRecord, aliases: dict[str, int]) -> dict[str, Any]:
    return {"name": v.name, "version": v.version, "status": v.status, "run_id": v.run_id,
            "package": v.package_hash, "created": v.created_at,
            "aliases": sorted(a for a, n in aliases.items() if n == v.version),
            "gates_passed": v.metrics.get("gates_passed"), "task": v.metrics.get("task"),
            "metrics": {k: (m.get("value") if isinstance(m, dict) else m)
                        for k, m in (v.metrics.get("metrics") or {}).items()}}
