"""Model materializers: PyTorch modules and tensors (safetensors), scikit-learn (skops).

Nothing here imports torch, safetensors, scikit-learn or skops until an object
of theirs is saved or loaded; ``handles`` only looks at ``sys.modules``.

A ``torch.nn.Module`` is stored as one safetensors blob: the state dict, plus a
header entry holding its architecture (:func:`module_spec`: the class's import
path and constructor arguments), its train/eval modes and its tied tensors.
Loading imports the class, rebuilds it (:func:`build_module`) and loads the
state dict strictly, so a class that changed since saving is an error, not a
half-loaded model. Equal models give equal bytes.

A scikit-learn estimator is stored with ``skops.io``. Loading checks every type
in the file first: types from ``sklearn``, ``numpy``, ``scipy`` and the
builtin classes and ``collections`` are trusted, anything else must be named
in ``REPRISE_TRUSTED_TYPES`` (comma-separated names or ``package.*``) or in the
``trusted`` argument of :func:`load_estimator`. Trusting ``sklearn`` includes
the tree storage of forests and boosting models, which skops itself leaves
untrusted because a crafted file can crash ``predict``: load only stores and
files you control. Skops files embed object ids, so saving one estimator twice
gives different bytes (and two blobs).
"""

from __future__ import annotations

import builtins
import importlib
import inspect
import io
import json
import os
import sys
import tempfile
import zipfile
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reprise.core._atomic import atomic_write_bytes
from reprise.core._lazy import require
from reprise.core.errors import MaterializerError
from reprise.store import _materializers as _mat
from reprise.store._artifacts import BaseArtifactStore
from reprise.store._materializers import (
    Materializer,
    _instance_of,
    _type_named,
    _verified_file,
)

if TYPE_CHECKING:
    from torch import Tensor, nn

__all__ = [
    "SklearnMaterializer",
    "TorchModuleMaterializer",
    "TorchTensorMaterializer",
    "build_module",
    "copy_estimator",
    "load_estimator",
    "module_spec",
    "save_estimator",
]

_HEADER_KEY, _FORMAT = "reprise", 1
_TUPLE, _DICT, _MODULE = "$tuple", "$dict", "$module"  # tags in encoded constructor args
_INIT_HINT = "set model.reprise_init_args = {...} to the arguments that rebuild it"


def _torch() -> Any:
    return require("torch", "torch", "storing PyTorch models")


def _safetensors() -> Any:
    return require("safetensors.torch", "torch", "storing PyTorch models")


# -- architecture specs -----------------------------------------------------------------------


def module_spec(model: nn.Module) -> dict[str, Any]:
    """The architecture of ``model`` as JSON: class import path and constructor arguments.

    Arguments come from ``model.reprise_init_args`` when set, else from the
    attributes named like the parameters of the class's ``__init__``.
    ``Sequential``, ``ModuleList`` and ``ModuleDict`` list their children.

    Example:
        >>> import torch.nn as nn
        >>> module_spec(nn.Linear(3, 2, bias=False))["args"]
        {'in_features': 3, 'out_features': 2, 'bias': False}
    """
    tnn = _torch().nn
    cls = type(model)
    path = _class_path(cls)
    if cls in (tnn.Sequential, tnn.ModuleList, tnn.ModuleDict):
        return {"class": path, "children": [
            [name, module_spec(child)] for name, child in model._modules.items()
            if child is not None]}
    return {"class": path, "args": _init_args(model)}


def build_module(spec: Mapping[str, Any]) -> nn.Module:
    """A new module (freshly initialised weights) from a :func:`module_spec`.

    Example:
        >>> import torch.nn as nn
        >>> build_module(module_spec(nn.Linear(3, 2))).out_features
        2
    """
    cls = _import_module_class(str(spec.get("class")))
    if "children" in spec:
        children = [(str(n), build_module(s)) for n, s in spec["children"]]
        container: nn.Module
        if cls.__name__ == "ModuleList":
            container = cls([m for _, m in children])
        elif cls.__name__ == "Sequential" and [n for n, _ in children] == [
                str(i) for i in range(len(children))]:
            container = cls(*(m for _, m in children))
        else:  # named Sequential (it wants an OrderedDict), ModuleDict
            container = cls(OrderedDict(children))
        return container
    args = {k: _decode(v) for k, v in dict(spec.get("args") or {}).items()}
    try:
        module = cls(**args)
    except TypeError as exc:
        raise MaterializerError(
            f"cannot build {spec.get('class')} with the arguments {sorted(args)}: {exc} (if "
            "the model was saved earlier, its class may have changed since).") from None
    return module


def _class_path(cls: type) -> str:
    name = f"{cls.__module__}.{cls.__qualname__}"
    if cls.__module__ == "__main__":
        raise MaterializerError(
            f"{cls.__qualname__} is defined in __main__ (the script being run), so another "
            "process cannot import it to rebuild the model; move the class into a module "
            "(e.g. models.py) and import it from there.")
    if "<locals>" in cls.__qualname__:
        raise MaterializerError(
            f"{name} is defined inside a function, so it cannot be imported to rebuild the "
            "model; define it at the top level of a module.")
    path = f"{cls.__module__}:{cls.__qualname__}"
    if _import_module_class(path) is not cls:
        raise MaterializerError(
            f"importing {path} does not give the class of this model; define the class once, "
            "at the top level of an importable module.")
    return path


def _import_module_class(path: str) -> type[nn.Module]:
    """The ``nn.Module`` subclass at ``module:QualName``; anything else is refused."""
    module, _, qualname = path.partition(":")
    try:
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError, ValueError) as exc:
        raise MaterializerError(
            f"cannot import the model class {path}: {exc}. Install or put on sys.path the "
            "code that defines it.") from None
    if not (isinstance(obj, type) and issubclass(obj, _torch().nn.Module)):
        raise MaterializerError(f"{path} is not a torch.nn.Module subclass; refusing to call it.")
    return obj


def _init_args(model: nn.Module) -> dict[str, Any]:
    cls = type(model)
    given = getattr(model, "reprise_init_args", None)
    if given is not None:
        if not isinstance(given, Mapping) or not all(isinstance(k, str) for k in given):
            raise MaterializerError(
                f"{cls.__qualname__}.reprise_init_args must be a dict of argument names to "
                f"values, got {type(given).__name__}.")
        args = {}
        for key, value in given.items():
            encoded = _encode(value)
            if encoded is _MISSING:
                raise MaterializerError(
                    f"{cls.__qualname__}.reprise_init_args[{key!r}] is a "
                    f"{type(value).__name__}; use JSON-able values, tuples or nn.Modules.")
            args[key] = encoded
        return args
    args = {}
    for param in _init_params(cls, model):
        value = _recover(model, param)
        if value is not _MISSING:
            args[param.name] = value
        elif param.default is inspect.Parameter.empty:
            raise MaterializerError(
                f"cannot recover the required argument {param.name!r} of "
                f"{cls.__module__}.{cls.__qualname__}: the model has no JSON-able attribute of "
                f"that name; {_INIT_HINT}.")
    return args


def _init_params(cls: type, model: nn.Module) -> list[inspect.Parameter]:
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]  # type: ignore[misc]
    named = [p for p in params if p.kind in kinds]
    rnn = _torch().nn.RNNBase
    if not named and issubclass(cls, rnn) and cls is not rnn:
        # LSTM/GRU/RNN take (*args, **kwargs) and pass them on after `mode`
        named = [p for p in list(inspect.signature(rnn.__init__).parameters.values())[2:]
                 if p.name != "proj_size" or issubclass(cls, _torch().nn.LSTM)]
        if hasattr(model, "nonlinearity"):
            named.append(inspect.Parameter("nonlinearity", inspect.Parameter.KEYWORD_ONLY,
                                           default="tanh"))
    for p in params:
        if p.kind is inspect.Parameter.POSITIONAL_ONLY and p.default is p.empty:
            raise MaterializerError(
                f"{cls.__qualname__}.__init__ has a positional-only parameter {p.name!r}, which "
                "cannot be passed by name; accept it as a keyword argument.")
    return named


class _Missing:
    pass


_MISSING: Any = _Missing()


def _recover(model: nn.Module, param: inspect.Parameter) -> Any:
    if not hasattr(model, param.name):
        return _MISSING
    value = getattr(model, param.name)
    if isinstance(param.default, bool) and (value is None or _is_tensor(value)):
        return value is not None  # e.g. Linear(bias=...) keeps the bias Parameter or None
    encoded = _encode(value)
    if encoded is _MISSING and param.default is not param.empty and value is not param.default:
        raise MaterializerError(
            f"cannot store argument {param.name!r} of {type(model).__qualname__}: its value, a "
            f"{type(value).__name__}, is not JSON-able and differs from the default; "
            f"{_INIT_HINT}.")
    return encoded


def _is_tensor(value: Any) -> bool:
    return isinstance(value, _torch().Tensor)


def _encode(value: Any) -> Any:
    """JSON for a constructor argument, with tuples, dicts and modules tagged; else _MISSING."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        items = [_encode(v) for v in value]
        if any(i is _MISSING for i in items):
            return _MISSING
        return {_TUPLE: items} if isinstance(value, tuple) else items
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        enc = {k: _encode(v) for k, v in value.items()}
        return _MISSING if any(v is _MISSING for v in enc.values()) else {_DICT: enc}
    if isinstance(value, _torch().nn.Module):
        return {_MODULE: module_spec(value)}
    return _MISSING


def _decode(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    if _TUPLE in value:
        return tuple(_decode(v) for v in value[_TUPLE])
    if _DICT in value:
        return {k: _decode(v) for k, v in value[_DICT].items()}
    return build_module(value[_MODULE])


def _check_rebuild(model: nn.Module, spec: dict[str, Any]) -> None:
    """Rebuild on the meta device (no memory) and compare tensor names and shapes."""
    torch = _torch()
    try:
        with torch.device("meta"):
            twin = build_module(spec)
    except MaterializerError as exc:
        raise MaterializerError(f"{exc} Otherwise {_INIT_HINT}.") from None
    except ValueError as exc:
        raise MaterializerError(
            f"building {spec.get('class')} from the recovered arguments {spec.get('args')} "
            f"fails: {exc}; {_INIT_HINT}.") from None
    except Exception:  # noqa: BLE001 - some constructors need real tensors; load checks them
        return
    want = {k: tuple(v.shape) for k, v in model.state_dict().items() if _is_tensor(v)}
    got = {k: tuple(v.shape) for k, v in twin.state_dict().items() if _is_tensor(v)}
    if want != got:
        diff = sorted(set(want.items()) ^ set(got.items()))[:4]
        raise MaterializerError(
            f"rebuilding {type(model).__qualname__} from the recovered arguments "
            f"{spec.get('args')} gives other tensors (differences: {diff}); {_INIT_HINT}.")


# -- torch: state dicts -----------------------------------------------------------------------


def _tied_groups(model: nn.Module, names: Iterable[str]) -> list[list[str]]:
    """Names that refer to one Parameter or buffer object (weight tying)."""
    keep, by_id = set(names), dict[int, list[str]]()
    pairs = [*model.named_parameters(remove_duplicate=False),
             *model.named_buffers(remove_duplicate=False)]
    for name, tensor in pairs:
        if name in keep:
            by_id.setdefault(id(tensor), []).append(name)
    return sorted(g for g in by_id.values() if len(g) > 1)


def _plain_tensors(state: Mapping[str, Any], what: str) -> dict[str, Tensor]:
    """CPU, contiguous tensors that share no storage (safetensors refuses shared memory)."""
    out, seen = {}, set()
    for key, value in state.items():
        if not _is_tensor(value):
            raise MaterializerError(
                f"{what} entry {key!r} is a {type(value).__name__}, not a tensor; safetensors "
                "stores tensors only (override get_extra_state to return tensors).")
        t = value.detach()
        if t.device.type == "meta" or t.layout != _torch().strided:
            raise MaterializerError(
                f"{what} entry {key!r} is a {t.layout} tensor on {t.device}; only dense tensors "
                "with data can be stored (use .to_dense() or materialise it first).")
        t = t.cpu().resolve_conj().resolve_neg()
        ptr = t.untyped_storage().data_ptr() if t.numel() else 0
        if (ptr and ptr in seen) or not t.is_contiguous():
            t = t.clone(memory_format=_torch().contiguous_format)
        seen.add(ptr)
        out[key] = t
    return out


def _put_tensors(store: BaseArtifactStore, tensors: dict[str, Tensor],
                 header: dict[str, Any]) -> tuple[str, int]:
    st = _safetensors()
    meta = {_HEADER_KEY: json.dumps(header, sort_keys=True, separators=(",", ":"))}
    nbytes = sum(t.numel() * t.element_size() for t in tensors.values())
    try:
        if nbytes <= _mat._SPILL_BYTES:
            return store.put_bytes(st.save(tensors, metadata=meta))
        with tempfile.TemporaryDirectory(prefix="reprise-") as tmp:
            path = Path(tmp) / "blob"
            st.save_file(tensors, path, metadata=meta)
            return store.put_file(path)
    except (KeyError, ValueError, RuntimeError, TypeError) as exc:
        raise MaterializerError(
            f"safetensors cannot store these tensors ({type(exc).__name__}: {exc}); convert "
            "unsupported dtypes (e.g. complex128) first.") from None


def _read_tensors(store: BaseArtifactStore, h: str) -> tuple[dict[str, Any], dict[str, Tensor]]:
    from safetensors import safe_open

    _safetensors()
    with _verified_file(store, h) as path, safe_open(str(path), framework="pt") as f:
        header = json.loads((f.metadata() or {}).get(_HEADER_KEY, "null"))
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    if not isinstance(header, dict) or header.get("format") != _FORMAT:
        raise MaterializerError(
            f"blob {h} has no Reprise header of format {_FORMAT}; it was not written by this "
            "version of Reprise's torch materializers.")
    return header, tensors


class TorchModuleMaterializer(Materializer):
    """``torch.nn.Module``: state dict in safetensors plus its architecture spec.

    Loading returns the module on the CPU, in the train/eval modes it was saved in.
    """

    name, kind = "torch-module", "model"

    def handles(self, obj: Any) -> bool:
        return _instance_of(obj, "torch.nn", "Module")

    def handles_type(self, tp: type) -> bool:
        return _type_named(tp, "torch.nn.modules.module.Module")

    def save(self, obj: Any, store: BaseArtifactStore) -> tuple[str, int, dict[str, Any]]:
        spec = module_spec(obj)
        _check_rebuild(obj, spec)
        state = obj.state_dict()
        tensors = _plain_tensors(state, "state dict")
        modes = {n: m.training for n, m in obj.named_modules() if m.training != obj.training}
        header = {"format": _FORMAT, "spec": spec, "training": obj.training, "modes": modes,
                  "tied": _tied_groups(obj, state)}
        h, size = _put_tensors(store, tensors, header)
        numel = sum(p.numel() for p in obj.parameters())
        return h, size, {"class": spec["class"], "training": obj.training,
                         "parameters": int(numel), "tensors": len(tensors)}

    def load(self, store: BaseArtifactStore, h: str, meta: dict[str, Any],
             dest: Path | None = None) -> Any:
        header, state = _read_tensors(store, h)
        model = build_module(header["spec"])
        named = [*model.named_parameters(), *model.named_buffers()]
        for key, tensor in named:  # constructors pick a dtype; the saved one wins
            saved = state.get(key)
            if saved is not None and saved.dtype != tensor.dtype:
                tensor.data = tensor.data.to(saved.dtype)
        try:
            model.load_state_dict(state, strict=True)
        except RuntimeError as exc:
            raise MaterializerError(
                f"the saved weights do not fit {header['spec'].get('class')}: {exc}. The class "
                "changed since the model was saved; load it with the code that saved it.") from None
        for group in header.get("tied", []):
            _retie(model, group)
        model.train(bool(header.get("training")))
        for name, training in header.get("modes", {}).items():
            model.get_submodule(name).training = bool(training)
        return model


def _retie(model: nn.Module, names: list[str]) -> None:
    """Make every name in ``names`` refer to the first one's tensor again."""

    def owner_of(name: str) -> tuple[nn.Module, str]:
        prefix, _, attr = name.rpartition(".")
        return model.get_submodule(prefix), attr

    first = getattr(*owner_of(names[0]))
    for name in names[1:]:
        owner, attr = owner_of(name)
        if getattr(owner, attr) is not first:
            setattr(owner, attr, first)


class TorchTensorMaterializer(Materializer):
    """A ``torch.Tensor`` (or ``nn.Parameter``) in safetensors; loads on the CPU."""

    name, kind = "torch-tensor", "array"

    def handles(self, obj: Any) -> bool:
        torch = sys.modules.get("torch")
        return torch is not None and type(obj) in (torch.Tensor, torch.nn.Parameter)

    def handles_type(self, tp: type) -> bool:
        return _type_named(tp, "torch.Tensor", "torch.nn.parameter.Parameter", subclasses=False)

    def save(self, obj: Any, store: BaseArtifactStore) -> tuple[str, int, dict[str, Any]]:
        tensors = _plain_tensors({"tensor": obj}, "tensor")
        h, size = _put_tensors(store, tensors, {"format": _FORMAT})
        return h, size, {"dtype": str(obj.dtype).removeprefix("torch."),
                         "shape": [int(n) for n in obj.shape],
                         "parameter": isinstance(obj, _torch().nn.Parameter),
                         "requires_grad": bool(obj.requires_grad)}

    def load(self, store: BaseArtifactStore, h: str, meta: dict[str, Any],
             dest: Path | None = None) -> Any:
        tensor = _read_tensors(store, h)[1]["tensor"]
        if meta.get("parameter"):
            return _torch().nn.Parameter(tensor, requires_grad=bool(meta.get("requires_grad")))
        return tensor.requires_grad_() if meta.get("requires_grad") else tensor


# -- scikit-learn -----------------------------------------------------------------------------

_SAFE_MODULES = frozenset({"sklearn", "numpy", "scipy", "builtins", "collections"})
TRUSTED_TYPES_ENV = "REPRISE_TRUSTED_TYPES"


def _skops() -> Any:
    from reprise.store._skops import skops_io

    return skops_io()


def _safe_by_default(type_name: str) -> bool:
    top, _, rest = type_name.partition(".")
    if top == "builtins":  # classes only: never eval, exec, open, getattr...
        return isinstance(getattr(builtins, rest, None), type)
    return top in _SAFE_MODULES


def _trusted_by(type_name: str, patterns: Iterable[str]) -> bool:
    for p in patterns:
        if type_name == p or (p.endswith(".*") and type_name.startswith(p[:-1])):
            return True
    return False


def _patterns(trusted: Iterable[str] | str | None) -> list[str]:
    env = os.environ.get(TRUSTED_TYPES_ENV, "").replace(",", " ").split()
    given = [trusted] if isinstance(trusted, str) else list(trusted or [])
    return [*env, *(str(t).strip() for t in given)]


def _dumps_estimator(est: Any) -> bytes:
    try:
        data: bytes = _skops().dumps(est)
    except (TypeError, ValueError, AttributeError) as exc:
        raise MaterializerError(
            f"skops cannot store this {type(est).__qualname__} ({exc}); store the parts it "
            "cannot handle separately, or register a materializer for it.") from None
    return _canonical_skops(data)


def _canonical_skops(data: bytes) -> bytes:
    """skops' zip with its object ids renumbered in order of appearance and fixed file
    times: the same estimator then gives the same bytes in every process, which
    content-addressed caching and ``reprise verify`` rely on. (skops names nodes
    and array files by ``id(obj)`` and stamps the current time into the zip.)"""
    src = zipfile.ZipFile(io.BytesIO(data))
    schema = json.loads(src.read("schema.json"))
    ids: dict[int, int] = {}
    files: dict[str, str] = {}

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            out: dict[str, Any] = {}
            for k, v in node.items():
                if k == "__id__" and isinstance(v, int) and not isinstance(v, bool):
                    out[k] = ids.setdefault(v, len(ids) + 1)
                elif k == "file" and isinstance(v, str) and v in src.namelist():
                    stem, _, ext = v.partition(".")
                    if stem.isdigit():
                        files[v] = f"{ids.setdefault(int(stem), len(ids) + 1)}.{ext}"
                    out[k] = files.get(v, v)
                else:
                    out[k] = walk(v)
            return out
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    schema = walk(schema)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as dst:
        names = sorted(n for n in src.namelist() if n != "schema.json")
        for name in sorted(names, key=lambda n: files.get(n, n)):
            info = src.getinfo(name)
            new = zipfile.ZipInfo(files.get(name, name), date_time=(1980, 1, 1, 0, 0, 0))
            new.compress_type, new.external_attr = info.compress_type, 0o644 << 16
            dst.writestr(new, src.read(name))
        info = zipfile.ZipInfo("schema.json", date_time=(1980, 1, 1, 0, 0, 0))
        info.compress_type = src.getinfo("schema.json").compress_type
        info.external_attr = 0o644 << 16
        dst.writestr(info, json.dumps(schema, indent=2).encode())
    return buf.getvalue()


def _loads_estimator(data: bytes, source: str, trusted: Iterable[str] | str | None) -> Any:
    from reprise.store._skops import own_policy

    sio = _skops()
    try:
        with own_policy():  # every type in the file is reported; this module's policy decides
            found: list[str] = sio.get_untrusted_types(data=data)
    except (zipfile.BadZipFile, KeyError, ValueError) as exc:
        raise MaterializerError(f"{source} is not a readable skops file ({exc}).") from None
    patterns = _patterns(trusted)
    refused = [t for t in found if not (_safe_by_default(t) or _trusted_by(t, patterns))]
    if refused:
        raise MaterializerError(
            f"{source} holds types Reprise does not trust: {', '.join(refused)}. Loading them "
            "could run code chosen by whoever wrote the file. If you trust its source, set "
            f"{TRUSTED_TYPES_ENV}=\"{','.join(refused)}\" (names, or 'package.*'), or call "
            "reprise.store._ml.load_estimator(path, trusted=[...]) on a .skops file.")
    try:
        with own_policy():
            return sio.loads(data, trusted=found)
    except (ImportError, AttributeError, TypeError, ValueError) as exc:
        raise MaterializerError(
            f"cannot rebuild the estimator in {source} ({type(exc).__name__}: {exc}); install "
            "the libraries, at the versions, that saved it.") from None


class SklearnMaterializer(Materializer):
    """Any scikit-learn estimator (pipelines included) through ``skops.io``; never pickle."""

    name, kind = "sklearn", "model"

    def handles(self, obj: Any) -> bool:
        return _instance_of(obj, "sklearn.base", "BaseEstimator")

    def handles_type(self, tp: type) -> bool:
        return _type_named(tp, "sklearn.base.BaseEstimator")

    def save(self, obj: Any, store: BaseArtifactStore) -> tuple[str, int, dict[str, Any]]:
        h, size = store.put_bytes(_dumps_estimator(obj))
        cls = type(obj)
        version = getattr(sys.modules.get("sklearn"), "__version__", None)
        return h, size, {"class": f"{cls.__module__}.{cls.__qualname__}", "sklearn": version}

    def load(self, store: BaseArtifactStore, h: str, meta: dict[str, Any],
             dest: Path | None = None) -> Any:
        return _loads_estimator(store.get_bytes(h, verify=True), f"artifact {h}", None)


def save_estimator(estimator: Any, path: str | os.PathLike[str]) -> Path:
    """Write ``estimator`` to a ``.skops`` file atomically; return its path.

    Example:
        >>> import tempfile, pathlib
        >>> from sklearn.linear_model import LinearRegression
        >>> p = save_estimator(LinearRegression().fit([[0], [1]], [0, 1]),
        ...                    pathlib.Path(tempfile.mkdtemp()) / "m.skops")
        >>> load_estimator(p).predict([[2]]).round(6).tolist()
        [2.0]
    """
    atomic_write_bytes(path, _dumps_estimator(estimator))
    return Path(path)


def load_estimator(path: str | os.PathLike[str],
                   trusted: Iterable[str] | str | None = None) -> Any:
    """Load a ``.skops`` file, refusing types outside the allow-list and ``trusted``.

    ``trusted`` adds type names (as listed in the refusal message) or
    ``"package.*"`` prefixes to the built-in allow-list and ``REPRISE_TRUSTED_TYPES``.
    See :func:`save_estimator` for an example.
    """
    return _loads_estimator(Path(path).read_bytes(), str(path), trusted)


def copy_estimator(estimator: Any) -> Any:
    """An independent copy of ``estimator`` (fitted state included) via a skops round trip.

    Every type is trusted: the bytes were written by this process a moment ago.
    """
    data = _dumps_estimator(estimator)
    from reprise.store._skops import own_policy

    sio = _skops()
    with own_policy():
        return sio.loads(data, trusted=sio.get_untrusted_types(data=data))
