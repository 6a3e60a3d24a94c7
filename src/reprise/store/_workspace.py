"""A workspace: configuration plus the two stores, opened lazily.

Opening the metadata store costs the SQLAlchemy import (~0.3 s), so nothing
here touches it until a caller asks for ``metadata``. The first access also
recovers journals left by dead processes (see ``_journal``). Listing commands
ask for ``reader`` instead, which skips both when there is nothing to recover.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reprise.core._config import Config, load_config
from reprise.core._hashing import is_hash
from reprise.core.errors import ArtifactNotFoundError
from reprise.store._journal import SUFFIX, read_journal, try_lock
from reprise.store._recovery import report_dropped

if TYPE_CHECKING:
    from reprise.store._artifacts import BaseArtifactStore
    from reprise.store._metadata_base import BaseMetadataStore, MetadataReader
    from reprise.store._sqlite_read import SqliteReader

__all__ = ["FsckReport", "GcReport", "Workspace"]

_logger = logging.getLogger(__name__)


@dataclass
class FsckReport:
    checked: int = 0
    missing: list[str] = field(default_factory=list)
    """Recorded in the database, absent from the artifact store."""
    corrupted: list[str] = field(default_factory=list)
    """Present, but the bytes do not hash to the name (or the size differs)."""
    unrecorded: list[str] = field(default_factory=list)
    """In the artifact store but not in the database (gc candidates)."""

    @property
    def ok(self) -> bool:
        return not self.missing and not self.corrupted


@dataclass
class GcReport:
    removed: list[str] = field(default_factory=list)
    bytes_freed: int = 0
    kept_recent: int = 0
    temp_files_removed: int = 0
    dry_run: bool = False


class Workspace:
    """One workspace's configuration, metadata store and artifact store.

    Example:
        >>> import tempfile
        >>> from reprise.core import create_workspace
        >>> ws = Workspace.open(create_workspace(tempfile.mkdtemp()))
        >>> ws.metadata.list_runs()
        []
    """

    def __init__(self, config: Config) -> None:
        self.config = config
        self._metadata: BaseMetadataStore | None = None
        self._artifacts: BaseArtifactStore | None = None
        self._reader: SqliteReader | None = None
        self._identity = _identity(config.workspace_dir)

    def is_current(self) -> bool:
        """False when the ``.reprise`` folder this object opened was removed or replaced
        (a new workspace at the same path): its open database would be the old one."""
        return self._identity is not None and _identity(self.config.workspace_dir) == \
            self._identity

    @classmethod
    def open(cls, root: str | os.PathLike[str] | None = None) -> Workspace:
        return cls(load_config(root))

    @property
    def root(self) -> Path:
        return self.config.root

    @property
    def journals_dir(self) -> Path:
        return self.config.journals_dir

    @property
    def artifacts(self) -> BaseArtifactStore:
        if self._artifacts is None:
            from reprise.store._artifacts import open_artifact_store

            self._artifacts = open_artifact_store(self.config.artifacts_url,
                                                  **self.config.artifacts_options)
        return self._artifacts

    @property
    def metadata(self) -> BaseMetadataStore:
        if self._metadata is None:
            from reprise.store._sql import SqlMetadataStore

            self._metadata = SqlMetadataStore(self.config.store_url)
            self.recover()
        return self._metadata

    @property
    def reader(self) -> MetadataReader:
        """Read-only queries for listing commands. On the embedded SQLite database, when
        no journal waits to be ingested, these run on the standard library's sqlite3
        without loading SQLAlchemy; otherwise (PostgreSQL, a schema to migrate, a
        journal to recover or catch up) this is :attr:`metadata`."""
        if self._metadata is None:
            if self._reader is None:
                from reprise.store._sqlite_read import open_reader

                self._reader = open_reader(self.config.store_url, self.journals_dir)
            elif self._reader.journals_pending(self.journals_dir):  # a run wrote since
                self._reader.close()
                self._reader = None
            if self._reader is not None:
                return self._reader
        return self.metadata

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if self._metadata is not None:
            self._metadata.close()
            self._metadata = None

    # -- journals --------------------------------------------------------------------
    def journal_path(self, run_id: str) -> Path:
        return self.journals_dir / f"{run_id}{SUFFIX}"

    def ingest_journal(self, path: Path, *, start: int | None = None) -> int:
        """Ingest the complete lines of a journal into the database; return the new offset.

        Idempotent: each batch applies only if the stored offset is where it starts, so
        a journal ingested by two processes adds every line once. A journal archived
        meanwhile (by its writer or a recovery, once fully ingested) is read in ``done/``.
        """
        store = self.metadata
        run_id = path.name[: -len(SUFFIX)]
        offset = store.journal_offset(run_id) if start is None else start
        while True:
            try:
                batch = read_journal(path, offset)
            except FileNotFoundError:
                moved = self.journals_dir / "done" / path.name
                if path == moved or not moved.exists():
                    raise
                path = moved
                continue
            parent = (batch.header or {}).get("parent_id")
            if parent and offset == 0:
                self._ingest_parent(str(parent))
            if batch.empty and batch.end_offset == offset:
                return offset
            if not store.ingest(run_id, offset, batch):
                offset = store.journal_offset(run_id)  # someone else ingested; catch up
                continue
            if batch.dropped:
                report_dropped(run_id, path, batch.dropped)
            offset = batch.end_offset

    def ingest_finished(self, run_ids: Iterable[str]) -> None:
        """Ingest the journals of ended runs (written with ``defer_ingest``) in one
        transaction and archive them: one commit for many small runs, such as the
        trials of a study. A journal another process ingested meanwhile is caught up
        on its own; one already archived is skipped."""
        items: list[tuple[str, int, Any]] = []
        parents: set[str] = set()
        for run_id in run_ids:
            path = self.journal_path(run_id)
            try:
                batch = read_journal(path, 0)
            except FileNotFoundError:
                continue
            parent = (batch.header or {}).get("parent_id")
            if parent:
                parents.add(str(parent))
            items.append((run_id, 0, batch))
        for parent in sorted(parents - {i[0] for i in items}):
            self._ingest_parent(parent)
        done = self.metadata.ingest_many(items)
        for (run_id, _, batch), ok in zip(items, done, strict=True):
            path = self.journal_path(run_id)
            if ok and batch.dropped:
                report_dropped(run_id, path, batch.dropped)
            with try_lock(path) as fd:
                if fd is None:  # a recovery holds it (and archives it) or has moved it
                    continue
                if not ok:
                    self.ingest_journal(path)
                self._archive(path)

    def _ingest_parent(self, parent_id: str) -> None:
        """A child's row references its parent's: make sure the parent is in first."""
        for candidate in (self.journals_dir / f"{parent_id}{SUFFIX}",
                          self.journals_dir / "done" / f"{parent_id}{SUFFIX}"):
            if candidate.exists():
                self.ingest_journal(candidate)
                return

    def recover(self) -> list[str]:
        """Ingest journals whose writer has died; mark their runs killed. Return run ids.

        Never fails the command that called it: a journal that cannot be recovered
        now is reported (a warning) and left for the next command (see ``_recovery``).
        """
        from reprise.store._recovery import recover

        return recover(self)

    def _archive(self, path: Path) -> None:
        """Move a journal to ``done/``; the caller holds its lock (or is its writer)."""
        done = self.journals_dir / "done"
        done.mkdir(exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            os.replace(path, done / path.name)

    def archive_journal(self, path: Path) -> None:
        """Move a fully ingested journal out of the active folder; call it while holding
        the journal's lock (a writer before closing), so no recovery reads it meanwhile."""
        self._archive(path)

    # -- maintenance -----------------------------------------------------------------
    def fsck(self, *, verify_hashes: bool = True) -> FsckReport:
        """Check that every recorded blob exists and (optionally) hashes to its name."""
        report = FsckReport()
        arts = self.artifacts
        recorded = {a.hash: a for a in self.metadata.list_artifacts()}
        children = self._tree_children(list(recorded.values()), set(recorded), strict=False)
        for h, rec in recorded.items():
            report.checked += 1
            if not arts.exists(h):
                report.missing.append(h)
            elif arts.size(h) != rec.size or (verify_hashes and not arts.verify(h)):
                report.corrupted.append(h)
        for h in arts.iter_hashes():
            if h not in recorded and h not in children:
                report.unrecorded.append(h)
                if verify_hashes and not arts.verify(h):
                    report.corrupted.append(h)
        return report

    def gc(self, *, dry_run: bool = False, grace_seconds: float = 3600.0) -> GcReport:
        """Remove blobs nothing references; blobs younger than the grace period stay.

        Blobs that live processes have pinned (their runs' step outputs, a file being
        added) stay whatever the grace period; remote stores that cannot tell live
        processes rely on the grace period alone. The order of the reads below is what
        makes this safe against processes racing with gc: blobs are listed first, then
        the pins of live processes, then active journals, then the database (a journal
        is ingested before it is archived). Rows go before blobs, so a gc killed midway
        leaves unrecorded blobs for the next gc, never rows whose blobs are missing.
        """
        report = GcReport(dry_run=dry_run)
        store, arts = self.metadata, self.artifacts
        on_disk = set(arts.iter_hashes())
        unreferenced = (on_disk | {a.hash for a in store.list_artifacts()}) - self._referenced()
        now = time.time()
        doomed: list[str] = []
        for h in sorted(unreferenced):
            if h in on_disk and _age(arts, h, now) < grace_seconds:
                report.kept_recent += 1
                continue
            doomed.append(h)
        if dry_run:
            report.removed = doomed
            report.bytes_freed = sum(_size(arts, h) for h in doomed)
            return report
        with arts.gc_lock():  # writers pin under the shared lock: none is half-way now
            # again: a writer that pinned a doomed blob since the first pass is either
            # alive (pinned) or wrote its reference before it died
            keep = self._referenced()
            # and each blob's age again, just before deleting it: on a store that cannot
            # track live processes (S3) a put or reuse since the first pass made it young
            now = time.time()
            keep |= {h for h in doomed if h in on_disk and _age(arts, h, now) < grace_seconds}
            report.kept_recent += sum(h in keep for h in doomed)
            doomed = [h for h in doomed if h not in keep]
            store.delete_artifacts(doomed)
            for h in doomed:
                report.removed.append(h)
                report.bytes_freed += _size(arts, h)
                arts.delete(h)
        report.temp_files_removed = arts.sweep_temp(grace_seconds)
        return report

    def _tree_children(self, records: list[Any], among: set[str], *, strict: bool = True
                       ) -> set[str]:
        """The file blobs of the folder manifests in ``among`` (they live as long as the
        manifest does). gc is ``strict``: a manifest it cannot read stops it, since
        deleting what that manifest names would lose data; fsck skips it (and reports
        the manifest itself as corrupt)."""
        from reprise.core.errors import RepriseError
        from reprise.store._tree import tree_children

        out: set[str] = set()
        for rec in records:
            if rec.materializer == "tree" and rec.hash in among:
                try:
                    out.update(tree_children(self.artifacts, rec.hash))
                except RepriseError:
                    if strict:
                        raise
        return out

    def _referenced(self) -> set[str]:
        """Pins of live processes, then active journals, then the database (then the files of
        the folder manifests among them): in this order,
        a reference moving from one to the next (a journal ingested, then archived) is
        never missed."""
        referenced = self.artifacts.live_pins()
        referenced |= self._pending_journal_hashes()
        referenced |= self.metadata.referenced_artifact_hashes()
        # the file blobs of the folder manifests among them live as long as the manifest
        return referenced | self._tree_children(self.metadata.list_artifacts(), referenced)

    def _pending_journal_hashes(self) -> set[str]:
        """Blobs named by active journals: logged artifacts and steps' inputs and outputs."""
        out: set[str] = set()
        if not self.journals_dir.is_dir():
            return out
        for path in self.journals_dir.glob(f"*{SUFFIX}"):
            offset = 0
            with contextlib.suppress(FileNotFoundError):  # archived: ingested already
                while True:
                    batch = read_journal(path, offset)
                    out.update(a["hash"] for a in batch.artifacts)
                    for step in batch.steps:
                        out.update(_step_hashes(step))
                    if batch.end_offset == offset:
                        break
                    offset = batch.end_offset
        return out


def _step_hashes(step: dict[str, Any]) -> Iterator[str]:
    for o in step.get("outputs") or ():
        if isinstance(o, dict) and isinstance(o.get("hash"), str):
            yield o["hash"]
    for value in (step.get("inputs") or {}).values():
        for h in value if isinstance(value, list) else [value]:
            if isinstance(h, str) and is_hash(h):
                yield h


def _age(arts: BaseArtifactStore, h: str, now: float) -> float:
    try:
        return now - arts.mtime(h)
    except ArtifactNotFoundError:
        return float("inf")


def _size(arts: BaseArtifactStore, h: str) -> int:
    try:
        return arts.size(h)
    except ArtifactNotFoundError:
        return 0


def _identity(folder: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(folder)
    except OSError:
        return None
    return st.st_dev, st.st_ino
