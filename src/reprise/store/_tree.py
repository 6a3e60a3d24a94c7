"""Folders stored as a manifest of per-file blobs (as DVC stores directories).

Every regular file of the folder becomes a blob of its own, so a file shared by
two versions (or two folders) is stored once, and adding one file to a folder
stores one new blob. The manifest lists them; its canonical JSON is a blob too,
and its hash is the folder's content hash::

    {"format": "reprise-tree/1",
     "files": [["cats/1.png", "<blake3>", 1234], ...],      # path, hash, size
     "dirs":  ["empty/folder", ...],                         # empty folders only
     "links": [["latest", "cats/1.png"], ...]}               # symlinks inside the folder

Entries are sorted by path, so equal trees have equal hashes whatever their
timestamps, owners or modes (``--link`` makes the files read-only, which must not
change the folder's hash; checked-out files are 0o644). Files are hashed in
parallel (large ones over memory-map windows, see
:func:`reprise.core._hashing.hash_file`), never read whole into memory, and
written in one durable batch (:meth:`LocalArtifactStore.put_files`); a
:class:`~reprise.store._statcache.StatCache` skips files whose stat stamp has
not changed since they were last stored.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprise.core._hashing import hash_bytes, is_hash
from reprise.core.errors import IntegrityError, UserError
from reprise.store._artifacts import BaseArtifactStore
from reprise.store._materializer import Materializer
from reprise.store._statcache import Stamp, StatCache, stamp_of

__all__ = ["TREE_FORMAT", "FolderScan", "Manifest", "TreeMaterializer", "diff_manifests",
           "materialize_tree", "read_manifest", "save_tree", "scan_folder", "tree_children"]

TREE_FORMAT = "reprise-tree/1"
_LARGE = 8 << 20  # hashed one at a time with every core; smaller files in a thread pool
_WORKERS = min(16, 4 * (os.cpu_count() or 1))  # small files wait on I/O (fsync), not CPU


@dataclass(slots=True)
class FileEntry:
    rel: str
    full: str
    stamp: Stamp
    hash: str = ""


@dataclass
class FolderScan:
    """What a walk of a folder found: regular files, empty folders and internal links."""

    root: Path
    files: list[FileEntry] = field(default_factory=list)
    dirs: list[str] = field(default_factory=list)
    links: list[tuple[str, str]] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        return sum(f.stamp[0] for f in self.files)


@dataclass
class Manifest:
    files: list[tuple[str, str, int]]
    dirs: list[str]
    links: list[tuple[str, str]]


def _unreadable(path: str, exc: OSError) -> UserError:
    return UserError(f"cannot read {path}: {exc.strerror or exc}. Make it readable (chmod) or "
                     "move it out of the folder, then add the folder again; nothing was "
                     "registered.")


def scan_folder(root: str | os.PathLike[str]) -> FolderScan:
    """Walk ``root`` without following links; raise ``UserError`` for what cannot be
    stored (an unreadable folder, a socket or device, a link that loops, dangles or
    points outside ``root``)."""
    top = Path(root)
    scan = FolderScan(top)
    real_root = top.resolve()
    stack: list[tuple[str, str]] = [(str(top), "")]
    while stack:
        path, rel = stack.pop()
        try:
            entries = list(os.scandir(path))
        except OSError as exc:
            raise _unreadable(path, exc) from None
        if not entries and rel:
            scan.dirs.append(rel[:-1])
        for entry in entries:
            name = f"{rel}{entry.name}"
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                stack.append((entry.path, name + "/"))
            elif stat.S_ISREG(st.st_mode):
                scan.files.append(FileEntry(name, entry.path, stamp_of(st)))
            elif stat.S_ISLNK(st.st_mode):
                scan.links.append((name, _link_target(Path(entry.path), real_root)))
            else:
                raise UserError(f"{entry.path} is not a regular file, folder or symlink (a "
                                "socket, FIFO or device); remove it before adding the folder.")
    scan.files.sort(key=lambda f: f.rel)
    scan.dirs.sort()
    scan.links.sort()
    return scan


def _link_target(link: Path, real_root: Path) -> str:
    try:
        target = link.resolve(strict=True)
    except (OSError, RuntimeError):
        raise UserError(f"{link} is a broken or looping symlink; fix or remove it before adding "
                        "the folder.") from None
    if not target.is_relative_to(real_root):
        raise UserError(f"{link} is a symlink to {target}, outside the folder being added "
                        f"({real_root}); copy the target in or remove the link.")
    return os.path.relpath(target, link.parent.resolve())


def save_tree(store: BaseArtifactStore, scan: FolderScan, *, cache: StatCache | None = None,
              link: bool = False) -> tuple[str, int]:
    """Store every file of ``scan`` as a blob and the manifest last; return the
    manifest's ``(hash, size)``. ``link`` hard-links files into a local store."""
    started = time.time_ns()
    base = os.path.join(str(scan.root.resolve()), "")
    known = cache.lookup(base) if cache is not None else {}
    todo, hits = [], []
    for f in scan.files:
        hit = known.get(base + f.rel)
        if hit is not None and hit[0] == f.stamp:
            f.hash = hit[1]
            hits.append(f)
        else:
            todo.append(f)
    data = _manifest_bytes(scan, todo)
    if not todo:
        h = hash_bytes(data)
        if store.exists(h):  # a stored manifest's files are kept with it (see gc)
            return h, len(data)
    # a hit's blob may be gone (gc of an older version): store those files again
    todo += [f for f in hits if not store.exists(f.hash)]
    # large files are hashed with every core, two at a time to bound mapped memory
    _put(store, [f for f in todo if f.stamp[0] >= _LARGE], link, workers=2)
    _put(store, [f for f in todo if f.stamp[0] < _LARGE], link, workers=_WORKERS)
    if cache is not None and todo:
        cache.record(((base + f.rel, f.stamp, f.hash) for f in todo),
                     hashed_at_ns=started)
    return store.put_bytes(_manifest_bytes(scan, []))


def _put(store: BaseArtifactStore, files: list[FileEntry], link: bool, workers: int) -> None:
    if not files:
        return
    try:
        stored = store.put_files([f.full for f in files], link=link, workers=workers)
    except OSError as exc:
        raise _unreadable(exc.filename or "a file of the folder", exc) from None
    for f, (h, size) in zip(files, stored, strict=True):
        if size != f.stamp[0]:
            raise UserError(f"{f.full} changed while its folder was being added; add it again "
                            "once nothing writes to it.")
        f.hash = h
        if link:  # linking made the file read-only, which changed its ctime
            after = stamp_of(os.lstat(f.full))
            if after[:3] == f.stamp[:3]:
                f.stamp = after


def _manifest_bytes(scan: FolderScan, pending: list[FileEntry]) -> bytes:
    """The canonical manifest (``pending`` files are not hashed yet: no valid manifest)."""
    if pending:
        return b""
    doc = {"format": TREE_FORMAT,
           "files": [[f.rel, f.hash, f.stamp[0]] for f in scan.files],
           "dirs": scan.dirs, "links": [list(x) for x in scan.links]}
    # only str and int inside: json's output is canonical (sorted keys, no spaces)
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def read_manifest(store: BaseArtifactStore, h: str) -> Manifest:
    """Load and check a manifest: every path must stay inside the folder."""
    raw = store.get_bytes(h, verify=True)
    try:
        doc = json.loads(raw)
        if doc.get("format") != TREE_FORMAT:
            raise ValueError(f"format {doc.get('format')!r}")
        files = [(str(p), str(fh), int(size)) for p, fh, size in doc["files"]]
        dirs = [str(d) for d in doc["dirs"]]
        links = [(str(p), str(t)) for p, t in doc["links"]]
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise IntegrityError(f"blob {h} is not a folder manifest ({exc}); run `reprise fsck`."
                             ) from None
    for path in [f[0] for f in files] + dirs + [lk[0] for lk in links]:
        _check_rel(h, path)
    for _, fh, _ in files:
        if not is_hash(fh) or len(fh) != 64:
            raise IntegrityError(f"manifest {h} names {fh!r}, not a content hash.")
    for path, target in links:
        _check_rel(h, os.path.normpath(os.path.join(os.path.dirname(path), target)))
    return Manifest(files, dirs, links)


def _check_rel(h: str, path: str) -> None:
    parts = path.split("/")
    if (not path or path.startswith("/") or "\\" in path or "\x00" in path
            or any(p in ("", ".", "..") for p in parts)):
        raise IntegrityError(f"manifest {h} holds the path {path!r}, which would leave the "
                             "folder; it was not written by Reprise. Run `reprise fsck`.")


def tree_children(store: BaseArtifactStore, h: str) -> list[str]:
    """The blob hashes a manifest references."""
    return [f[1] for f in read_manifest(store, h).files]


def materialize_tree(store: BaseArtifactStore, h: str, dest: str | os.PathLike[str]) -> Path:
    """Write the folder of manifest ``h`` into ``dest`` (created; must be empty if it
    exists), every file verified against its hash; return ``dest``."""
    man = read_manifest(store, h)
    out = Path(dest)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"{out} already exists and is not an empty folder; choose a new "
                        "destination or empty it first.")
    out.mkdir(parents=True, exist_ok=True)
    for d in man.dirs:
        (out / d).mkdir(parents=True, exist_ok=True)
    for parent in sorted({os.path.dirname(f[0]) for f in man.files} - {""}):
        (out / parent).mkdir(parents=True, exist_ok=True)

    def write(item: tuple[str, str, int]) -> None:
        # durable: a checkout, or a dataset folder's cache that later reads trust as is
        store.copy_to(item[1], out / item[0], verify=True)
        os.chmod(out / item[0], 0o644)

    with ThreadPoolExecutor(max_workers=_WORKERS) as pool:
        for _ in pool.map(write, man.files):
            pass
    for path, target in man.links:
        (out / path).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, out / path)
    return out


def diff_manifests(old: Manifest, new: Manifest) -> dict[str, Any]:
    """Files added, removed and changed (by content) between two manifests."""
    a = {p: fh for p, fh, _ in old.files}
    b = {p: fh for p, fh, _ in new.files}
    return {"files_added": sorted(b.keys() - a.keys()),
            "files_removed": sorted(a.keys() - b.keys()),
            "files_changed": sorted(p for p in a.keys() & b.keys() if a[p] != b[p])}



class TreeMaterializer(Materializer):
    """A folder stored as a manifest of per-file blobs (``reprise data add`` of a folder).

    Never chosen automatically (a step returning a folder is still stored as one tar
    by ``dir``); loading writes the folder into ``dest`` (or a fresh temporary one).
    """

    name, kind = "tree", "dir"

    def handles(self, obj: Any) -> bool:
        return False

    def save(self, obj: Any, store: BaseArtifactStore) -> tuple[str, int, dict[str, Any]]:
        scan = scan_folder(os.fspath(obj))
        h, size = save_tree(store, scan)
        return h, size, {"files": len(scan.files), "bytes": scan.bytes}

    def load(self, store: BaseArtifactStore, h: str, meta: dict[str, Any],
             dest: Path | None = None) -> Any:
        return materialize_tree(store, h, dest or tempfile.mkdtemp(prefix="reprise-"))
