"""What every part of the dashboard's API shares: the workspace, its store, the catch-up
of live journals, whether actions are allowed, and the JSON cleaning of answers."""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from reprise.store._metadata_base import BaseMetadataStore
    from reprise.store._workspace import Workspace

__all__ = ["UiContext", "clean"]


def clean(value: Any) -> Any:
    """JSON cannot carry NaN or infinities: they become null (a chart's gap)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    return value


@dataclass
class UiContext:
    """The dashboard's view of one workspace. ``store`` is SQLAlchemy-backed and shared
    safely by the server's threads."""

    workspace: Workspace
    allow_actions: bool = False
    _recovering: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def store(self) -> BaseMetadataStore:
        return self.workspace.metadata

    def fresh(self) -> None:
        """Catch up the journals of live runs (and recover dead writers' ones), as every
        CLI command does, so that running runs show their latest rows. One thread at a
        time: journal locks are per process, so two threads would not exclude each other."""
        with self._recovering:
            self.workspace.recover()

    def require_actions(self, what: str) -> None:
        """Refuse an action (403) unless the server was started with --allow-actions."""
        from reprise.ui._errors import Forbidden

        if not self.allow_actions:
            raise Forbidden(f"{what} is an action: this dashboard is read-only. Restart it "
                            "with `reprise ui --allow-actions` to allow it.")
