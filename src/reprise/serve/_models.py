"""The model versions a server answers with, and the table that routes names to them.

The table is changed only on the event loop and only by plain assignments, so a swap
(an alias moved) is atomic for requests: a request looks its version up and queues on
it with no ``await`` in between, and a retired version keeps running until its queue
is empty.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from reprise.registry import Servable, Signature, is_model_name
from reprise.serve._batcher import Batcher
from reprise.serve._http import HTTPError
from reprise.serve._metrics import Metrics
from reprise.serve._settings import ResolvedSettings

if TYPE_CHECKING:
    from reprise.serve._router import Split

__all__ = ["ModelTable", "ServedModel", "is_pinned", "name_of"]


def name_of(ref: str) -> str:
    """The model name in ``NAME@ALIAS``, ``NAME:VERSION`` or ``NAME``."""
    return ref.split("@", 1)[0].split(":", 1)[0]


def is_pinned(ref: str) -> bool:
    """``NAME:VERSION`` never moves; ``NAME@ALIAS`` and ``NAME`` (newest) are followed."""
    return "@" not in ref and ":" in ref


@dataclass(eq=False)
class ServedModel:
    """One loaded, warmed-up model version with its batcher."""

    servable: Servable
    signature: Signature  # the model's, with the server's policy overrides
    batcher: Batcher
    metrics: Metrics
    refs: set[str] = field(default_factory=set)
    loaded_at: float = field(default_factory=time.time)
    last_used: float = field(default_factory=time.monotonic)  # the last request or warm-up

    @property
    def name(self) -> str:
        return self.servable.name

    @cached_property
    def input_dtypes(self) -> dict[str, str]:
        """Each scalar input's dtype: how the response cache makes its keys canonical."""
        from reprise.serve._cache import input_dtypes

        return input_dtypes(self.signature)

    @property
    def version(self) -> int:
        return self.servable.version

    @classmethod
    def create(cls, servable: Servable, settings: ResolvedSettings,
               metrics: Metrics) -> ServedModel:
        """Wrap a loaded servable; call on the event loop (the batcher binds to it)."""
        sig = servable.signature.with_policy(extra_columns=settings.extra_columns,
                                             out_of_range=settings.out_of_range)
        name, version = servable.name, str(servable.version)
        # a servable that takes the checked lists builds its own matrix from them
        convert = dict if getattr(servable, "takes_lists", False) else sig.to_arrays
        batcher = Batcher(
            servable.predict, convert, label=f"{name}-v{version}",
            max_batch_size=settings.max_batch_size, max_wait_s=settings.max_wait_ms / 1000,
            budget_s=settings.latency_budget_ms / 1000,
            on_batch=lambda rows, s: metrics.batch(name, version, rows, s),
            on_depth=lambda depth: metrics.queue_depth(name, version, depth))
        return cls(servable, sig, batcher, metrics)

    async def warm_up(self) -> None:
        """One prediction on the package's example input (loads lazy state, starts the
        worker thread, seeds the moving average of call times)."""
        from reprise.core.errors import ServingError

        example = list(self.servable.example or [])
        if not example:
            return
        checked = self.signature.check_records(example)
        if not checked.ok:
            raise ServingError(
                f"the example input of {self.name} v{self.version} does not match its "
                f"signature ({checked.errors[0].field}: {checked.errors[0].problem}); "
                "re-package the model with an example of its training features")
        try:
            await self.batcher.submit(checked.columns, checked.rows)
        except Exception as exc:
            raise ServingError(f"{self.name} v{self.version} failed on its example input "
                               f"({exc}); see the log above for the traceback") from None


class ModelTable:
    """Routes ``(name, version or None)`` to a served model.

    Each name answers at ``/v1/models/NAME/predict`` with its first ref (in the order
    given), and at ``.../versions/V/...`` with any version currently served. While a
    rollout of that ref runs, ``splits[ref]`` shares its traffic with the candidate
    (which is served, so ``.../versions/V/...`` reaches it too).
    """

    def __init__(self, refs: list[str]) -> None:
        self.refs = list(dict.fromkeys(refs))
        self.default_ref: dict[str, str] = {}
        for ref in self.refs:
            self.default_ref.setdefault(name_of(ref), ref)
        self.by_ref: dict[str, ServedModel] = {}
        self.versions: dict[str, dict[int, ServedModel]] = {n: {} for n in self.default_ref}
        self.splits: dict[str, Split] = {}

    @property
    def complete(self) -> bool:
        """Every ref has a served model."""
        return len(self.by_ref) == len(self.refs)

    def models(self) -> list[ServedModel]:
        return [m for by_v in self.versions.values() for m in by_v.values()]

    def loaded(self, name: str, version: int) -> ServedModel | None:
        return self.versions.get(name, {}).get(version)

    def install(self, ref: str, model: ServedModel) -> ServedModel | None:
        """Point ``ref`` at ``model``; return the model it replaced if nothing else uses it
        any more (the caller drains and closes it)."""
        old = self.by_ref.get(ref)
        self.by_ref[ref] = model
        model.refs.add(ref)
        self.versions.setdefault(model.name, {})[model.version] = model
        if old is None or old is model:
            return None
        old.refs.discard(ref)
        if old.refs:
            return None
        del self.versions[old.name][old.version]
        return old

    def attach(self, holder: str, model: ServedModel) -> None:
        """Serve ``model`` on behalf of ``holder`` (a rollout), not for any ref."""
        model.refs.add(holder)
        self.versions.setdefault(model.name, {})[model.version] = model

    def detach(self, holder: str, model: ServedModel) -> ServedModel | None:
        """``holder`` no longer needs ``model``: return it if nothing else does (the caller
        drains and closes it)."""
        model.refs.discard(holder)
        if model.refs or self.versions.get(model.name, {}).get(model.version) is not model:
            return None
        del self.versions[model.name][model.version]
        return model

    def split_of(self, name: str) -> Split | None:
        """The split of ``name``'s default ref, if a rollout of it runs here and still
        starts from the version the ref serves."""
        ref = self.default_ref.get(name)
        split = self.splits.get(ref) if ref is not None else None
        if split is None or split.stable is not self.by_ref.get(ref or ""):
            return None
        return split

    def lookup(self, name: str, version: str | None) -> ServedModel:
        """The model answering for ``name`` (and ``version``), or an :class:`HTTPError`:
        400 for a name against the registry's rule (not echoed), 404 for a name or version
        not served (a version is ASCII digits only: ``²`` or ``１`` is no version), 503
        while it is still loading."""
        if not is_model_name(name):
            raise HTTPError(400, "the model name in the URL is not valid: use letters, "
                            "digits, '.', '_' and '-' (up to 100), starting with a letter or "
                            "digit", kind="bad_request")
        ref = self.default_ref.get(name)
        if ref is None:
            served = ", ".join(sorted(self.default_ref)) or "none"
            raise HTTPError(404, f"model {name!r} is not served here (served: {served})",
                            kind="not_found")
        if version is None:
            model = self.by_ref.get(ref)
            if model is None:
                raise _loading(name)
            return model
        found = self._version(name, version)
        if found is None:
            if not self.complete:
                raise _loading(name)
            served = ", ".join(str(v) for v in sorted(self.versions[name])) or "none"
            what = f"version {version}" if _is_number(version) else "the version in the URL"
            raise HTTPError(404, f"{what} of model {name!r} is not served here; versions are "
                            f"whole numbers in ASCII digits (served versions: {served})",
                            kind="not_found")
        return found

    def _version(self, name: str, version: str) -> ServedModel | None:
        if not _is_number(version):
            return None
        return self.versions[name].get(int(version))

    def describe(self) -> list[dict[str, Any]]:
        """What is served, for ``GET /v1/models``."""
        out = []
        for ref in self.refs:
            model = self.by_ref.get(ref)
            entry: dict[str, Any] = {"ref": ref, "name": name_of(ref),
                                     "follows": not is_pinned(ref),
                                     "version": model.version if model else None,
                                     "ready": model is not None}
            split = self.splits.get(ref)
            if split is not None:
                r = split.rollout
                entry["rollout"] = {"id": r.id, "strategy": r.strategy, "phase": r.phase,
                                    "stable": r.stable, "candidate": r.candidate,
                                    "weight": r.weight, "step": r.step}
            out.append(entry)
        return out


def _is_number(version: str) -> bool:
    """ASCII digits only: ``str.isdigit`` also takes ``²`` (which ``int`` refuses) and
    ``١`` or ``１`` (which ``int`` reads as 1)."""
    return version.isascii() and version.isdigit() and len(version) <= 18


def _loading(name: str) -> HTTPError:
    return HTTPError(503, f"model {name!r} is still loading; retry shortly", kind="loading",
                     headers=[(b"retry-after", b"1")])
