"""The registry's public functions (the current workspace unless one is given), the
``register`` pipeline step, and :class:`RegistrySource` for servers."""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path
from typing import Any

from reprise.core._types import ModelVersionRecord
from reprise.core.errors import NotFoundError, UserError
from reprise.pipeline._step import step
from reprise.registry import _registry as reg
from reprise.registry._audit import AuditReport, verify_events
from reprise.registry._package import MATERIALIZER, ModelPackage, read_package

__all__ = ["RegistrySource", "archive_model", "audit_log", "delete_model", "describe_model",
           "get_model", "list_models", "load_model", "model_card", "model_lineage", "promote",
           "register", "register_model",
           "register_package", "rollback", "verify_audit"]


def _ws(workspace: Any) -> Any:
    from reprise.tracking._api import resolve_workspace

    ws = resolve_workspace(workspace)
    ws.recover()  # runs journaled lazily (pipelines) are in the database before we look
    return ws


def register_package(name: str, package: ModelPackage, *, run_id: str | None = None,
                     step_name: str | None = None, workspace: Any = None
                     ) -> ModelVersionRecord:
    """Store ``package`` and register it as the next version of ``name`` (the same
    package again: the same version)."""
    from reprise.store._materializers import save_object

    if not isinstance(package, ModelPackage):
        raise UserError(f"register_package takes a ModelPackage (from package_model); got a "
                        f"{type(package).__name__}")
    ws = _ws(workspace)
    art = save_object(ws.artifacts, package)
    ws.metadata.put_artifact(art)
    rec, _ = reg.register_package(ws, name, art.hash, run_id=run_id, package=package,
                                  step=step_name)
    return rec


def register_model(name: str, run: str, *, step: str | None = None,
                   workspace: Any = None) -> tuple[ModelVersionRecord, bool]:
    """Register the model package a pipeline run produced (``step`` picks one when the
    run has several); ``(version, created)``."""
    from reprise.store._materializers import load_object

    ws = _ws(workspace)
    rec = ws.metadata.get_run(run)
    steps = ws.metadata.get_step_runs(rec.id)
    arts = {o["hash"]: ws.metadata.get_artifact(o["hash"]) for st in steps for o in st["outputs"]}
    found = [(st["step_name"], o) for st in steps for o in st["outputs"]
             if arts[o["hash"]].materializer == MATERIALIZER]
    if step is not None:
        found = [f for f in found if f[0] == step]
    if not found:
        where = f"step {step!r} of run {rec.id}" if step else f"run {rec.id}"
        raise NotFoundError(f"{where} produced no model package; return "
                            "reprise.registry.package_model(...) from a step, run the "
                            "pipeline, then register that run")
    if len({o["hash"] for _, o in found}) > 1:
        raise UserError(f"run {rec.id} produced several model packages (steps "
                        f"{sorted({s for s, _ in found})}); choose one with --step")
    step_name, out = found[0]
    art = ws.metadata.get_artifact(out["hash"])
    package = load_object(ws.artifacts, art.hash, art.materializer, art.meta)
    return reg.register_package(ws, name, art.hash, run_id=rec.id, package=package,  # type: ignore[no-any-return]
                                step=step_name)


@step
def register(package: ModelPackage, name: str) -> dict[str, Any]:
    """A pipeline step: register ``package`` (from an upstream step) as a version of
    ``name``, with the run's lineage. Registering the same package again returns the
    same version, so a re-run or ``reprise verify`` adds nothing."""
    from reprise.store._materializers import save_object
    from reprise.tracking._api import active_run, open_workspace

    ctx = active_run()
    run_id = getattr(ctx, "run_id", None)
    ws = open_workspace()
    if run_id is not None:  # catch the (still running) pipeline run up into the database
        ws.ingest_journal(ws.journal_path(run_id))
    art = save_object(ws.artifacts, package)  # same bytes: the upstream output's hash
    ws.metadata.put_artifact(art)
    rec, created = reg.register_package(ws, name, art.hash, run_id=run_id, package=package,
                                        step=getattr(ctx, "node", None))
    return {"name": rec.name, "version": rec.version, "created": created,
            "package": rec.package_hash}


def get_model(ref: str, *, workspace: Any = None) -> ModelVersionRecord:
    """The version ``ref`` names: ``NAME@ALIAS``, ``NAME:VERSION`` or ``NAME``."""
    return reg.parse_ref(_ws(workspace), ref)


def load_model(ref: str, *, workspace: Any = None) -> ModelPackage:
    """Load (and verify) the package of the version ``ref`` names."""
    ws = _ws(workspace)
    return _load(ws, reg.parse_ref(ws, ref))


def _load(ws: Any, rec: ModelVersionRecord, runtime: str = "native",
          folder: Path | None = None) -> ModelPackage:
    """Unpack the version's package (into ``folder``, else a new temporary folder) and
    read it once, as ``runtime`` says (the package materializer's own load would read it
    natively first: torch and scikit-learn)."""
    from reprise.store._path_materializers import DirMaterializer

    art = ws.metadata.get_artifact(rec.package_hash)
    if art.materializer != MATERIALIZER:
        raise UserError(f"{rec.ref}: artifact {art.hash[:12]} is not a model package")
    folder = folder or Path(tempfile.mkdtemp(prefix="reprise-model-"))
    DirMaterializer().load(ws.artifacts, art.hash, art.meta, dest=folder / "package")
    return read_package(folder / "package", runtime=runtime)


def model_card(ref: str, *, workspace: Any = None) -> dict[str, Any]:
    """The model card and the evaluation (None when packaged without one) of the version
    ``ref`` names, read from its verified package (nothing is left on disk).

    Example:
        >>> model_card("churn@production")["card"]["gates"]["passed"]  # doctest: +SKIP
        True
    """
    ws = _ws(workspace)
    rec = reg.parse_ref(ws, ref)
    with tempfile.TemporaryDirectory(prefix="reprise-model-") as tmp:
        pkg = _load(ws, rec, folder=Path(tmp))
    return {"ref": rec.ref, "package": rec.package_hash, "card": pkg.card,
            "evaluation": pkg.evaluation}


def promote(name: str, version: int, alias: str, *, force: bool = False,
            reason: str | None = None, by: str | None = None,
            workspace: Any = None) -> int | None:
    """Point ``alias`` at ``name:version`` (its gates must have passed, unless ``force``
    with a ``reason``); the version it held before. The audit event records ``reason``
    and ``by`` (default: ``REPRISE_ACTOR``, else user@host)."""
    return reg.promote(_ws(workspace), name, version, alias, force=force, reason=reason,
                       by=by)


def rollback(name: str, alias: str, *, reason: str | None = None, by: str | None = None,
             workspace: Any = None) -> tuple[int, int]:
    """Return ``alias`` to the version it held before; ``(from, to)``. The audit event
    records ``reason`` and ``by`` (default: ``REPRISE_ACTOR``, else user@host)."""
    return reg.rollback(_ws(workspace), name, alias, reason=reason, by=by)


def archive_model(name: str, version: int, *, workspace: Any = None) -> None:
    reg.archive(_ws(workspace), name, version)


def delete_model(name: str, version: int, *, workspace: Any = None) -> None:
    reg.delete_version(_ws(workspace), name, version)


def list_models(*, workspace: Any = None) -> list[dict[str, Any]]:
    return reg.list_models(_ws(workspace))


def describe_model(ref: str, *, workspace: Any = None) -> dict[str, Any]:
    return reg.describe_model(_ws(workspace), ref)


def model_lineage(ref: str, *, workspace: Any = None) -> dict[str, Any]:
    """The lineage of the version ``ref`` names: its package, the steps and inputs
    upstream of it down to the dataset versions and raw files, and the code snapshot."""
    from reprise.pipeline._lineage import lineage

    ws = _ws(workspace)
    rec = reg.parse_ref(ws, ref)
    tree = lineage(ws, rec.package_hash)
    return {**tree, "kind": "model", "ref": ref, "model": rec.ref, "run": rec.run_id,
            "summary": rec.meta.get("lineage") or {}}


def audit_log(*, workspace: Any = None) -> list[dict[str, Any]]:
    return [e.to_dict() for e in _ws(workspace).metadata.list_audit_events()]


def verify_audit(*, expect_head: str | None = None, workspace: Any = None) -> AuditReport:
    return verify_events(_ws(workspace).metadata.list_audit_events(), expect_head=expect_head)


_FLOAT32_MODULES = ("sklearn.tree", "sklearn.ensemble._forest", "sklearn.ensemble._gb",
                    "sklearn.ensemble._iforest")


def float_dtype(package: Any) -> str:
    """What float inputs become inside the model: float32 for torch and for
    scikit-learn's trees and tree ensembles (which cast their input), else float64; a
    server refuses inputs that would become infinite."""
    if package.flavor == "torch" or getattr(package, "runtime", "native") == "onnx":
        return "float32"
    model = package.model
    steps = getattr(model, "steps", None)
    if isinstance(steps, list) and steps:  # a Pipeline: its final estimator decides
        model = steps[-1][1]
    return ("float32" if type(model).__module__.startswith(_FLOAT32_MODULES)
            else "float64")


class _Loaded:
    """A :class:`~reprise.registry.Servable` over a verified package."""

    def __init__(self, name: str, version: int, package: ModelPackage) -> None:
        self.name, self.version, self.package = name, version, package
        self.signature = package.signature
        self.example = package.example
        self.float_dtype = float_dtype(package)
        # the Open Inference Protocol's model metadata names the runtime (KServe's name)
        self.platform = "onnxruntime_onnx" if package.runtime == "onnx" else None
        # scikit-learn on a float matrix: predict builds the matrix from the checked
        # lists in one conversion (registry._predict._inputs), the per-column arrays the
        # server would make first are not needed (the same matrix, but for an int field
        # sent as -0.0, which stays -0.0 rather than becoming 0: equal to it)
        self.takes_lists = (package.flavor == "sklearn" and package.runtime != "onnx"
                            and package.input_format == "array"
                            and all(f.dtype in ("float", "int", "bool") and not f.shape
                                    for f in package.signature.inputs))

    def predict(self, columns: dict[str, Any]) -> dict[str, Any]:
        return self.package.predict(columns)


class RegistrySource:
    """The registry as a :class:`~reprise.registry.ModelSource` for a server: resolving
    reads the database (cheap enough to poll); loading verifies the package once and
    keeps it for later calls. ``runtime``: native, onnx or auto (see
    :func:`~reprise.registry.read_package`)."""

    def __init__(self, workspace: Any = None, *, runtime: str = "native") -> None:
        from reprise.registry._package import RUNTIMES
        from reprise.tracking._api import resolve_workspace

        if runtime not in RUNTIMES:
            raise UserError(f"--runtime must be one of {list(RUNTIMES)}; got {runtime!r}")
        self.workspace = resolve_workspace(workspace)
        self.runtime = runtime
        self._loaded: dict[tuple[str, int], _Loaded] = {}
        self._lock = threading.Lock()

    def resolve(self, ref: str) -> tuple[str, int]:
        rec = reg.parse_ref(self.workspace, ref)
        return rec.name, rec.version

    def load(self, name: str, version: int) -> _Loaded:
        with self._lock:
            hit = self._loaded.get((name, version))
        if hit is not None:
            return hit
        rec = reg.get_version(self.workspace, name, version)
        loaded = _Loaded(name, version, _load(self.workspace, rec, self.runtime))
        with self._lock:
            self._loaded[(name, version)] = loaded
        return loaded
