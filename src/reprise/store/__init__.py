"""Layer 1: the metadata store (SQLAlchemy + Alembic), the artifact store
(content-addressed, fsspec) and materializers, the run journal, the workspace.

SQLAlchemy loads only when the metadata store is first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reprise.core._lazy import lazy_attributes
from reprise.store._journal import JournalBatch, JournalWriter, check_key, read_journal
from reprise.store._metadata_base import BaseMetadataStore, RunFilter
from reprise.store._workspace import FsckReport, GcReport, Workspace

if TYPE_CHECKING:
    from reprise.store._artifacts import (
        BaseArtifactStore,
        FsspecArtifactStore,
        LocalArtifactStore,
        open_artifact_store,
        validate_artifact_name,
    )
    from reprise.store._materializers import (
        Materializer,
        load_object,
        materializer_by_name,
        materializer_for,
        register_materializer,
        save_object,
    )
    from reprise.store._s3 import S3ArtifactStore
    from reprise.store._sql import SqlMetadataStore, upgrade_database

__all__ = [
    "BaseArtifactStore",
    "BaseMetadataStore",
    "FsckReport",
    "FsspecArtifactStore",
    "GcReport",
    "JournalBatch",
    "JournalWriter",
    "LocalArtifactStore",
    "Materializer",
    "RunFilter",
    "S3ArtifactStore",
    "SqlMetadataStore",
    "Workspace",
    "check_key",
    "load_object",
    "materializer_by_name",
    "materializer_for",
    "open_artifact_store",
    "read_journal",
    "register_materializer",
    "save_object",
    "upgrade_database",
    "validate_artifact_name",
]

# Loaded on first use: the listing commands need the workspace and its reader only.
_LAZY = {
    **{name: "reprise.store._artifacts" for name in (
        "BaseArtifactStore", "FsspecArtifactStore", "LocalArtifactStore",
        "open_artifact_store", "validate_artifact_name")},
    **{name: "reprise.store._materializers" for name in (
        "Materializer", "load_object", "materializer_by_name", "materializer_for",
        "register_materializer", "save_object")},
    "S3ArtifactStore": "reprise.store._s3",  # s3fs and its botocore load with it
    "SqlMetadataStore": "reprise.store._sql",
    "upgrade_database": "reprise.store._sql",
}

__getattr__ = lazy_attributes(__name__, _LAZY)
