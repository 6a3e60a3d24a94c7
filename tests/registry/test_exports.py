"""The registry's public surface: every name in __all__ resolves, lazily."""

from __future__ import annotations

import reprise.registry as registry
from reprise.registry import _LAZY  # type: ignore[attr-defined]


def test_every_public_name_resolves() -> None:
    eager = {"Field", "FieldError", "ModelSource", "Servable", "Signature", "Validated",
             "infer_signature"}
    assert sorted(set(registry.__all__) - eager) == sorted(_LAZY)
    for name in registry.__all__:
        assert getattr(registry, name) is not None
