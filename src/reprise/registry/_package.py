"""The model package: one folder that holds everything needed to serve a model.

::

    manifest.json           format, flavor, input format, every file with its BLAKE3 hash
    model/model.skops       a scikit-learn estimator or Pipeline (skops, type allow-list)
    model/model.safetensors or a torch module: weights + architecture (class path, args)
    preprocessing.skops     the *fitted* preprocessing of the training pipeline (optional)
    signature.json          inputs (types, shapes, training ranges/categories), outputs
    example.json            a few input records (warm-up, documentation)
    card.json               task, classes, metrics with intervals, gates, notes
    evaluation.json         the full evaluation the card summarises (optional)
    environment.json        the Python minor version it was built with
    requirements.txt        name==version of the distributions the model's code paths
                            import (see :mod:`._requirements`); no machine facts
    model/model.onnx        (an optimised version) one ONNX graph of the preprocessing
                            and the model (see :mod:`._onnx`), covered by the manifest
    onnx.json               its inputs/outputs, parity report, quantisation, source

Reading verifies every file against the manifest (a tampered, missing or extra
file is an error naming it) and loads the model without unpickling: skops with
its type allow-list, safetensors, and architectures only from installed
distributions (never code shipped inside the package or from a project folder).
Equal contents give equal bytes, so a package stored by a pipeline step is
cached and verified like any other output.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprise.core._hashing import hash_file
from reprise.core.errors import MaterializerError
from reprise.registry._signature import Signature
from reprise.store._materializer import Materializer
from reprise.store._path_materializers import DirMaterializer

__all__ = ["FORMAT", "ModelPackage", "PackageError", "PackageMaterializer", "read_package"]

FORMAT = "reprise-model-package"
FORMAT_VERSION = 1
MATERIALIZER = "reprise.registry._package:PackageMaterializer"


class PackageError(MaterializerError):
    """A model package that cannot be trusted or read: say which file and why."""


@dataclass
class ModelPackage:
    """A model with its fitted preprocessing, signature, example, card and environment.

    Build one with :func:`reprise.registry.package_model`; return it from a step (it is
    stored as one content-addressed artifact) and register it.
    """

    flavor: str  # sklearn | torch
    model: Any
    signature: Signature
    input_format: str  # frame | array | tensor
    preprocessing: Any = None
    example: list[dict[str, Any]] = field(default_factory=list)
    card: dict[str, Any] = field(default_factory=dict)
    evaluation: dict[str, Any] | None = None
    environment: dict[str, Any] = field(default_factory=dict)
    requirements: list[str] = field(default_factory=list)
    onnx: bytes | None = None  # the ONNX graph of an optimised version
    onnx_info: dict[str, Any] | None = None  # its io, parity, quantisation, source
    runtime: str = "native"  # what predict() runs: native | onnx (as loaded)
    session: Any = field(default=None, repr=False)  # the ONNX Runtime session (onnx)

    def predict(self, columns: dict[str, Any]) -> dict[str, Any]:
        """Output columns for validated input columns (see :mod:`._predict`)."""
        if self.runtime == "onnx":
            from reprise.registry._onnx import predict_onnx

            return predict_onnx(self, columns)
        from reprise.registry._predict import predict_columns

        return predict_columns(self, columns)

    def predict_records(self, records: list[dict[str, Any]]) -> dict[str, list[Any]]:
        """Validate ``records`` against the signature, then predict (outputs as lists);
        a ``UserError`` lists every field problem."""
        from reprise.core.errors import UserError

        checked = self.signature.validate_records(records)
        if not checked.ok:
            problems = "; ".join(f"{e.field}: expected {e.expected}, got {e.got}"
                                 for e in checked.errors)
            raise UserError(f"the input does not match the model's signature: {problems}")
        return {k: v.tolist() if hasattr(v, "tolist") else list(v)
                for k, v in self.predict(checked.columns).items()}

    # -- files ------------------------------------------------------------------------

    def write(self, folder: Path) -> Path:
        """Write the package into ``folder`` (created, must be empty); return it."""
        from reprise.store._ml import _dumps_estimator

        folder.mkdir(parents=True, exist_ok=True)
        if any(folder.iterdir()):
            raise PackageError(f"{folder} is not empty; a package is written to a new folder")
        files: dict[str, bytes] = {}
        if self.flavor == "sklearn":
            files["model/model.skops"] = _dumps_estimator(self.model)
        else:
            files["model/model.safetensors"] = _torch_bytes(self.model)
        if self.preprocessing is not None:
            files["preprocessing.skops"] = _dumps_estimator(self.preprocessing)
        docs: dict[str, Any] = {"signature.json": self.signature.to_dict(),
                                "example.json": self.example, "card.json": self.card,
                                "environment.json": self.environment}
        if self.evaluation is not None:
            docs["evaluation.json"] = self.evaluation
        if self.onnx is not None:
            files["model/model.onnx"] = self.onnx
            docs["onnx.json"] = self.onnx_info or {}
        for name, doc in docs.items():
            files[name] = _json_bytes(doc)
        files["requirements.txt"] = ("\n".join(self.requirements) + "\n").encode()
        for rel, data in files.items():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_bytes(data)
        manifest = {"format": FORMAT, "version": FORMAT_VERSION, "flavor": self.flavor,
                    "input_format": self.input_format, **({"onnx": "model/model.onnx"}
                                                          if self.onnx is not None else {}),
                    "files": {rel: {"hash": hash_file(folder / rel), "size": len(data)}
                              for rel, data in sorted(files.items())}}
        (folder / "manifest.json").write_bytes(_json_bytes(manifest))
        return folder


def _json_bytes(doc: Any) -> bytes:
    return json.dumps(doc, sort_keys=True, indent=1, allow_nan=False).encode()


def _torch_bytes(model: Any) -> bytes:
    """The torch-module materializer's bytes (safetensors weights, architecture in the
    header), taken from an in-memory store so the package holds them as a file."""
    from reprise.store._artifacts import open_artifact_store
    from reprise.store._torch import TorchModuleMaterializer

    with tempfile.TemporaryDirectory(prefix="reprise-pkg-") as tmp:
        store = open_artifact_store(tmp)
        h, _, _ = TorchModuleMaterializer().save(model, store)
        return store.get_bytes(h)


RUNTIMES = ("native", "onnx", "auto")


def read_package(folder: str | Path, *, runtime: str = "native") -> ModelPackage:
    """Read and verify the package in ``folder``; see the module docstring.

    ``runtime``: ``native`` loads the scikit-learn or torch model; ``onnx`` loads only
    the package's ONNX graph into ONNX Runtime (every file is still verified against
    the manifest, but neither torch nor scikit-learn is imported); ``auto`` is ``onnx``
    when the package has a graph whose parity was proved, else ``native``.
    """
    if runtime not in RUNTIMES:
        from reprise.core.errors import UserError

        raise UserError(f"runtime must be one of {list(RUNTIMES)}; got {runtime!r}")
    folder = Path(folder)
    manifest = _manifest(folder)
    listed = manifest["files"]
    present = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    extra = sorted(present - set(listed) - {"manifest.json"})
    if extra:
        raise PackageError(f"model package {folder} holds files its manifest does not list: "
                           f"{extra}; it was altered after it was built. Rebuild or "
                           "re-register the model.")
    for rel, info in sorted(listed.items()):
        path = folder / rel
        if not path.is_file():
            raise PackageError(f"model package {folder} lacks {rel}, listed in its manifest; "
                               "it is incomplete. Rebuild or re-register the model.")
        if path.stat().st_size != info["size"] or hash_file(path) != info["hash"]:
            raise PackageError(f"model package {folder}: {rel} does not match the hash in its "
                               "manifest; it was altered after it was built. Do not serve it; "
                               "rebuild or re-register the model.")
    has_graph = "onnx" in manifest and "onnx.json" in listed
    if runtime == "onnx" and not has_graph:
        from reprise.core.errors import UserError

        raise UserError(f"model package {folder} has no ONNX graph; create an optimised "
                        "version with `reprise models optimize NAME:VERSION`, or serve it "
                        "with --runtime native")
    if runtime == "auto":
        proved = has_graph and bool((json.loads((folder / "onnx.json").read_bytes())
                                      .get("parity") or {}).get("passed"))
        runtime = "onnx" if proved else "native"
    return _load(folder, manifest, runtime)


def _manifest(folder: Path) -> dict[str, Any]:
    try:
        manifest = json.loads((folder / "manifest.json").read_bytes())
    except FileNotFoundError:
        raise PackageError(f"{folder} is not a model package (no manifest.json)") from None
    except ValueError as exc:
        raise PackageError(f"{folder}/manifest.json is not valid JSON ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise PackageError(f"{folder} is not a Reprise model package (manifest format "
                           f"{manifest.get('format') if isinstance(manifest, dict) else None!r})")
    if manifest.get("version") != FORMAT_VERSION:
        raise PackageError(f"model package {folder} has format version "
                           f"{manifest.get('version')!r}; this Reprise reads "
                           f"{FORMAT_VERSION}. Upgrade Reprise.")
    if manifest.get("flavor") not in ("sklearn", "torch"):
        raise PackageError(f"model package {folder}: unknown flavor {manifest.get('flavor')!r}")
    return manifest


def _load(folder: Path, manifest: dict[str, Any], runtime: str = "native") -> ModelPackage:
    def doc(name: str, default: Any = None) -> Any:
        path = folder / name
        return json.loads(path.read_bytes()) if path.is_file() else default

    flavor = manifest["flavor"]
    graph = (folder / manifest["onnx"]).read_bytes() if "onnx" in manifest else None
    common = {"signature": Signature.from_dict(doc("signature.json")),
              "input_format": manifest["input_format"], "example": doc("example.json", []),
              "card": doc("card.json", {}), "evaluation": doc("evaluation.json"),
              "environment": doc("environment.json", {}),
              "requirements": (folder / "requirements.txt").read_text().split(),
              "onnx": graph, "onnx_info": doc("onnx.json")}
    if runtime == "onnx":  # the graph only: no torch, no scikit-learn in this process
        from reprise.registry._onnx import make_session

        return ModelPackage(flavor=flavor, model=None, runtime="onnx",
                            session=make_session(graph or b""), **common)
    from reprise.store._ml import _loads_estimator

    if flavor == "sklearn":
        model = _loads_estimator((folder / "model/model.skops").read_bytes(),
                                 f"{folder}/model/model.skops", None)
    else:
        model = _load_torch(folder / "model/model.safetensors")
    prep_path = folder / "preprocessing.skops"
    prep = _loads_estimator(prep_path.read_bytes(), str(prep_path), None) \
        if prep_path.is_file() else None
    return ModelPackage(flavor=flavor, model=model, preprocessing=prep, **common)


def _load_torch(path: Path) -> Any:
    """A torch module from the package; its classes must come from installed packages."""
    from reprise.registry._build import check_installed_classes
    from reprise.store._artifacts import open_artifact_store
    from reprise.store._torch import TorchModuleMaterializer, _read_tensors

    with tempfile.TemporaryDirectory(prefix="reprise-pkg-") as tmp:
        store = open_artifact_store(tmp)
        h, _ = store.put_file(path)
        header, _ = _read_tensors(store, h)
        check_installed_classes(header["spec"], str(path))
        return TorchModuleMaterializer().load(store, h, {})


class PackageMaterializer(Materializer):
    """Stores a :class:`ModelPackage` as its folder (a deterministic tar, kind
    ``model-package``); loading verifies every file (see :func:`read_package`)."""

    name, kind = MATERIALIZER, "model-package"

    def handles(self, obj: Any) -> bool:
        return isinstance(obj, ModelPackage)

    def handles_type(self, tp: type) -> bool:
        return isinstance(tp, type) and issubclass(tp, ModelPackage)

    def save(self, obj: Any, store: Any) -> tuple[str, int, dict[str, Any]]:
        with tempfile.TemporaryDirectory(prefix="reprise-pkg-") as tmp:
            folder = obj.write(Path(tmp) / "package")
            h, size, meta = DirMaterializer().save(folder, store)
        return h, size, {**meta, "flavor": obj.flavor, "task": obj.card.get("task")}

    def load(self, store: Any, h: str, meta: dict[str, Any],
             dest: Path | None = None) -> Any:
        folder = Path(dest) if dest is not None else Path(tempfile.mkdtemp(prefix="reprise-"))
        DirMaterializer().load(store, h, meta, dest=folder / "package")
        return read_package(folder / "package")


def _register() -> None:
    from reprise.store._materializers import register_materializer

    register_materializer(PackageMaterializer())


_register()  # steps returning a ModelPackage store it; loading finds it by its import path
