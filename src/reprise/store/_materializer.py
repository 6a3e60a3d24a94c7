"""The materializer contract and the helpers every materializer shares.

A :class:`Materializer` has a stable ``name`` (stored with the artifact so the right one
reads it back), an artifact ``kind``, ``handles(obj)`` and ``save``/``load``. Saving goes
through the content-addressed store; loading verifies the blob's hash first.
"""

from __future__ import annotations

import abc
import contextlib
import io
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from reprise.core.errors import IntegrityError
from reprise.store._artifacts import BaseArtifactStore

# Imported here, not at the top: _ml subclasses Materializer and uses the helpers above.

# Above this many bytes an object is serialised to a temp file and stored with
# put_file, instead of being held in memory a second (and third) time.
_SPILL_BYTES = 32 << 20


class Materializer(abc.ABC):
    """How one family of objects is stored; subclass and :func:`register_materializer` it.

    Contract:

    * ``name`` is stored with every artifact and picks the materializer that
      loads it, so it must never change once data was written. A registered
      class without a name gets ``"module:QualName"``, which lets a fresh
      process import it when loading.
    * ``handles(obj)`` is cheap and never imports a library: test
      ``sys.modules`` (an object of a library that is not imported cannot exist).
    * ``save`` writes through the store's ``put_*`` methods and returns
      ``(hash, size, meta)``; ``meta`` must be JSON-able (it goes to the
      metadata store) and is handed back to ``load``.
    * ``load`` rebuilds the object; ``dest`` is a folder for materializers that
      produce files. The built-ins check the blob's hash before decoding and
      raise ``IntegrityError`` for corrupt bytes.

    Example:
        >>> class SetMaterializer(Materializer):
        ...     name, kind, types = "example-set", "json", (frozenset,)
        ...     def save(self, obj, store):
        ...         h, size = store.put_bytes(repr(sorted(obj)).encode())
        ...         return h, size, {}
        ...     def load(self, store, h, meta, dest=None):
        ...         import ast
        ...         return frozenset(ast.literal_eval(store.get_bytes(h).decode()))
        >>> SetMaterializer().handles(frozenset({1}))
        True
    """

    name: str = ""
    kind: str = "object"
    types: tuple[type, ...] = ()
    """Classes this materializer stores; the default ``handles`` checks against them."""

    def handles(self, obj: Any) -> bool:
        """True when this materializer can store ``obj``."""
        return bool(self.types) and isinstance(obj, self.types)

    def handles_type(self, tp: type) -> bool:
        """True when objects of class ``tp`` can be stored (for checking annotations)."""
        return bool(self.types) and issubclass(tp, self.types)

    @abc.abstractmethod
    def save(self, obj: Any, store: BaseArtifactStore) -> tuple[str, int, dict[str, Any]]:
        """Write ``obj`` to ``store``; return ``(hash, size, meta)``."""

    @abc.abstractmethod
    def load(
        self, store: BaseArtifactStore, h: str, meta: dict[str, Any], dest: Path | None = None
    ) -> Any:
        """Rebuild the object stored as blob ``h``."""


def _instance_of(obj: Any, module: str, *attrs: str) -> bool:
    mod = sys.modules.get(module)
    if mod is None:  # the library was never imported, so obj cannot be one of its objects
        return False
    classes = tuple(c for a in attrs if isinstance(c := getattr(mod, a, None), type))
    return bool(classes) and isinstance(obj, classes)


def _type_named(tp: type, *names: str, subclasses: bool = True) -> bool:
    mro = tp.__mro__ if subclasses else (tp,)
    return any(f"{c.__module__}.{c.__qualname__}" in names for c in mro)


def _put_written(store: BaseArtifactStore, write: Callable[[BinaryIO], None],
                 *, spill: bool) -> tuple[str, int]:
    """Serialise with ``write`` into memory, or into a temp file when ``spill``."""
    if not spill:
        buf = io.BytesIO()
        write(buf)
        return store.put_bytes(buf.getvalue())
    with tempfile.TemporaryDirectory(prefix="reprise-") as tmp:
        path = Path(tmp) / "blob"
        with open(path, "wb") as f:
            write(f)
        return store.put_file(path)


def _corrupt(store: BaseArtifactStore, h: str) -> IntegrityError:
    return IntegrityError(
        f"Blob {h} in artifact store {store.url} is corrupt: its bytes do not hash to its "
        "name. Run `reprise fsck` to remove corrupt blobs, then re-run what produced it."
    )


@contextlib.contextmanager
def _verified_file(store: BaseArtifactStore, h: str) -> Iterator[Path]:
    """A local file holding blob ``h``, hash-checked: the blob itself or a temp copy."""
    local = store.local_path(h)
    if local is not None:
        if not store.verify(h):
            raise _corrupt(store, h)
        yield local
        return
    with tempfile.TemporaryDirectory(prefix="reprise-") as tmp:
        # deleted once loaded: an fsync would protect nothing (durable=False); the loaders
        # only read it, so it may be a hard link to the S3 cache's read-only copy (link)
        yield store.copy_to(h, Path(tmp) / "blob", verify=True, durable=False, link=True)


def _as_path(obj: Any) -> Path | None:
    if not isinstance(obj, os.PathLike):
        return None
    raw = os.fspath(obj)
    return Path(raw) if isinstance(raw, str) else None


def _dest_folder(dest: Path | None) -> Path:
    folder = Path(dest) if dest is not None else Path(tempfile.mkdtemp(prefix="reprise-"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder
