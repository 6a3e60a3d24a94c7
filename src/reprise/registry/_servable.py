"""What a server or a batch prediction needs from the registry: loaded models and the
current version behind an alias. The registry implements these; the serving layer
(and its tests, with in-memory fakes) depends only on them."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from reprise.registry._signature import Signature

__all__ = ["ModelSource", "Servable"]


@runtime_checkable
class Servable(Protocol):
    """A loaded model version, ready to predict.

    ``predict`` takes validated input columns (``{name: numpy array}``, each of
    the same length ``n``, as :meth:`Signature.validate_columns` returns them)
    and returns output columns (``{name: numpy array or list of length n}``), row i of
    the outputs answering row i of the inputs. It must be safe to call from one
    worker thread at a time; the server never calls it concurrently for one
    model version. It raises on a bug in the model (the server answers 500).

    A servable may also have ``takes_lists = True``: its ``predict`` takes the columns
    as the checks left them (Python lists, ``None`` for a null) as well, and the server
    then skips converting each column to an array first (optional; read with
    ``getattr``).
    """

    name: str
    version: int
    signature: Signature
    example: list[dict[str, Any]]  # a few input records, for warm-up and documentation

    def predict(self, columns: dict[str, Any]) -> dict[str, Any]: ...


@runtime_checkable
class ModelSource(Protocol):
    """Resolves model references and loads versions.

    References: ``NAME@ALIAS`` (the version an alias points at now), ``NAME:VERSION``,
    or ``NAME`` (the newest version that is not archived). ``resolve`` is cheap
    enough to poll every few seconds (a server follows aliases that way); ``load``
    reads and verifies a package (slow; the server calls it off the event loop).
    Unknown names, aliases or versions raise ``reprise.core.errors.NotFoundError``.
    """

    def resolve(self, ref: str) -> tuple[str, int]: ...

    def load(self, name: str, version: int) -> Servable: ...
