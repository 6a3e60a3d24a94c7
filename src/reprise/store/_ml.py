"""scikit-learn materializer and estimator files (skops), never pickle.

PyTorch modules and tensors are in :mod:`reprise.store._torch`.

Nothing here imports scikit-learn or skops until an object
of theirs is saved or loaded; ``handles`` only looks at ``sys.modules``.


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
import io
import json
import os
import sys
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from reprise.core._atomic import atomic_write_bytes
from reprise.core.errors import MaterializerError
from reprise.store._artifacts import BaseArtifactStore
from reprise.store._materializer import (
    Materializer,
    _instance_of,
    _type_named,
)

__all__ = [
    "SklearnMaterializer",
    "copy_estimator",
    "load_estimator",
    "save_estimator",
]


# -- architecture specs -----------------------------------------------------------------------


# -- torch: state dicts -----------------------------------------------------------------------


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
