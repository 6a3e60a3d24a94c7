"""Watching what a step reads that its cache key does not cover.

A step may open a file by a hard-coded path or read an environment variable; the
cache key sees neither. While a step executes, Reprise records:

* the files it opens for reading, through a Python audit hook (event ``open``:
  ``open()``, ``io.open``, ``os.open``, and every library opening files through
  them: pandas, numpy, json, yaml, torch...);
* the environment variables its own code reads (``os.environ[...]``, ``.get``,
  ``in``, ``os.getenv``), through a recording wrapper on ``os._Environ``.

What is not the step's own business is left out: the interpreter's imports
(``.py``/``.pyc``/extension modules), the standard library and installed
distributions, the workspace's ``.reprise/`` folder and the artifact store, the
step's declared ``File``/``Dir`` inputs, ``/proc``, ``/dev``, ``/sys``, ``/run``, the
temporary directory (unless the project itself lives there), files the step created
or truncated before reading them, and variables read by library code (``OMP_*``
read by torch at import) or set by the step first.

The files' content hashes and the variables' value digests are recorded on the step
run and on its cache entry; an entry is only reused while each observed file still
hashes the same (or is still absent) and each variable has the same value (or is
still unset): see :func:`stale_reads`. A variable's value is never stored: only a
BLAKE3 digest keyed with a random per-workspace key (``.reprise/cache/reads.key``),
so a short secret cannot be recovered from the record by trying guesses offline.

Audit hooks cannot be removed: the hook is installed once per process, on the
first watched step, and does nothing (one global read) while no step is watched.
At most one step executes in a process at a time (executors run one task per
process), so the active recorder is process-wide: threads the step starts are
watched too, which a context variable would miss.

Not seen: files opened by native code that bypasses Python's ``open`` (pyarrow's
own filesystem layer, C libraries), directory listings, subprocesses, and
variables read by library code on the step's behalf.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import stat
import sys
import sysconfig
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import blake3

__all__ = ["CHANGED", "ReadWatch", "WatchSpec", "read_key", "stale_reads",
           "warn_undeclared_reads", "watch_reads", "watch_spec"]

_logger = logging.getLogger(__name__)

#: The hash recorded for a file that changed while the step ran: it never matches, so
#: the entry is never reused (the step's output depends on which version it read).
CHANGED = "changed-during-step"

# Code the import system loads: the code fingerprint and the environment scope cover it.
_CODE_SUFFIXES = (".py", ".pyc", ".pyo", ".pyi", ".pyd", ".so", ".pth")
# Kernel and device files, and the system's shared data (time zones, locales).
_SYSTEM_DIRS = ("/proc", "/dev", "/sys", "/run", "/usr/share", "/usr/lib")
# Installed distributions' metadata (importlib.metadata): the environment scope covers it.
_METADATA_DIRS = (".dist-info" + os.sep, ".egg-info" + os.sep)
_KEY_FILE = "reads.key"


@dataclass(frozen=True)
class WatchSpec:
    """What the watch ignores and how it hashes, built once per pipeline run by the
    runner and sent with each task (plain data: it crosses to worker processes)."""

    ignore: tuple[str, ...]  # absolute paths of files and folders never recorded
    code_dirs: tuple[str, ...]  # library code: a variable it reads is not the step's
    ignore_env: tuple[str, ...] = ()
    hash_cache: str | None = None  # FileHasher's stat-keyed cache folder
    key: str = ""  # hex key of the variable digests (never stored in a record)


def watch_spec(ws: Any, *, ignore_paths: Iterable[str] = (),
               ignore_env: Iterable[str] = ()) -> WatchSpec:
    """The spec for pipeline runs in workspace ``ws``.

    Example (a spec for a workspace folder, without opening a workspace):
        >>> import types, tempfile, pathlib
        >>> root = pathlib.Path(tempfile.mkdtemp())
        >>> cfg = types.SimpleNamespace(root=root, workspace_dir=root / ".reprise",
        ...                             artifacts_url=str(root / ".reprise" / "artifacts"))
        >>> spec = watch_spec(types.SimpleNamespace(config=cfg))
        >>> str(root / ".reprise") in spec.ignore
        True
    """
    import tempfile

    cfg = ws.config
    root = os.path.realpath(cfg.root)
    ignore = {str(cfg.workspace_dir), *_SYSTEM_DIRS, *_code_dirs()}
    arts = str(cfg.artifacts_url)
    if arts.startswith("file://"):
        arts = arts[len("file://"):]
    if "://" not in arts:
        ignore.add(arts)
    temp = tempfile.gettempdir()
    if not _under(root, _prefixes([temp, os.path.realpath(temp)])):
        ignore.add(temp)  # scratch files; but a project living in /tmp is still watched
    for p in ignore_paths:
        ignore.add(os.path.abspath(os.path.join(root, os.path.expanduser(p))))
    key_dir = Path(cfg.workspace_dir) / "cache"
    return WatchSpec(ignore=_with_real_paths(ignore), code_dirs=_with_real_paths(_code_dirs()),
                     ignore_env=tuple(sorted(ignore_env)),
                     hash_cache=str(key_dir / "files"), key=read_key(key_dir))


def read_key(folder: str | os.PathLike[str]) -> str:
    """The workspace's key for variable digests, created at random on first use.

    Created by a hard link from a finished temp file, so concurrent first runs agree
    on one key and nobody reads a half-written one.
    """
    path = Path(folder) / _KEY_FILE
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{_KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, secrets.token_hex(32).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass  # another process made it first: use theirs
    finally:
        tmp.unlink()
    return path.read_text().strip()


def env_digest(value: str | None, key: str) -> str | None:
    """Keyed BLAKE3 of a variable's value; None for an unset variable."""
    if value is None:
        return None
    data = value.encode("utf-8", "surrogateescape")
    return blake3.blake3(data, key=bytes.fromhex(key)).hexdigest()


@dataclass
class ReadWatch:
    """What one step execution read. ``files``: absolute path -> stat stamp when first
    opened (None: it did not exist); ``env``: name -> value digest (None: unset)."""

    spec: WatchSpec
    declared: tuple[str, ...] = ()  # the step's File/Dir inputs (absolute)
    files: dict[str, tuple[int, ...] | None] = field(default_factory=dict)
    written: set[str] = field(default_factory=set)
    env: dict[str, str | None] = field(default_factory=dict)
    env_written: set[str] = field(default_factory=set)
    env_enumerated: bool = False
    # names an enumeration of the environment yielded and whose value was not read
    # yet: the next read of each is the enumeration's (dict(os.environ), .copy(),
    # .items() read every value), not a read of that variable by name
    env_yielded: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._skip = _prefixes(self.spec.ignore) + _prefixes(self.declared)
        # sys.path entries: the import system tries each (a missing python311.zip...)
        self._exact = (frozenset(self.declared) | frozenset(self.spec.ignore)
                       | {os.path.abspath(p) for p in sys.path if p})
        self._code = _prefixes(self.spec.code_dirs)
        self._library: dict[str, bool] = {}

    # -- files --------------------------------------------------------------------
    def on_open(self, path: Any, flags: int) -> None:
        if isinstance(path, int):
            return  # an already open descriptor
        name = os.fsdecode(path) if isinstance(path, bytes) else os.fspath(path)
        if name.endswith(_CODE_SUFFIXES):
            return
        full = os.path.abspath(name)
        writes = (flags & os.O_ACCMODE == os.O_WRONLY or flags & os.O_TRUNC
                  or (flags & os.O_CREAT and flags & os.O_EXCL))
        if full in self.files:
            if writes and self.files[full] is None:
                self.written.add(full)  # looked for, absent, then made by the step
            return
        if full in self.written or full in self._exact:
            return
        if full.startswith(self._skip) or any(m in full for m in _METADATA_DIRS):
            return
        if writes:
            self.written.add(full)  # its content is the step's own doing, not an input
            return
        try:
            st = os.stat(full)
        except OSError:
            self.files[full] = None  # absent: the step's result may depend on that
            return
        if stat.S_ISREG(st.st_mode):
            self.files[full] = _stamp(st)

    # -- environment --------------------------------------------------------------
    def on_env_read(self, key: Any, value: str | None) -> None:
        if key in self.env_yielded:
            self.env_yielded.discard(key)
            return
        if key in self.env or key in self.env_written:
            return
        name = os.fsdecode(key) if isinstance(key, bytes) else str(key)
        if name in self.spec.ignore_env or self._library_caller():
            return
        self.env[name] = env_digest(value, self.spec.key)

    def on_env_write(self, key: Any) -> None:
        name = os.fsdecode(key) if isinstance(key, bytes) else str(key)
        if name not in self.env:
            self.env_written.add(name)

    def on_env_enumerate(self) -> None:
        if not self.env_enumerated and not self._library_caller():
            self.env_enumerated = True

    def _library_caller(self) -> bool:
        """Whether the code that asked (the first frame outside ``os``, the mapping
        mixins and this module) is the standard library's or a distribution's."""
        try:
            frame = sys._getframe(2)
        except ValueError:  # pragma: no cover - called from the wrappers, never this shallow
            return True
        while frame is not None and frame.f_code.co_filename in _PLUMBING:
            frame = frame.f_back  # type: ignore[assignment]
        if frame is None:
            return True
        filename = frame.f_code.co_filename
        found = self._library.get(filename)
        if found is None:
            found = self._library[filename] = filename.startswith("<frozen ") or (
                os.path.abspath(filename).startswith(self._code))
        return found

    # -- the record -----------------------------------------------------------------
    def record(self, hasher: Any) -> dict[str, Any]:
        """``{"files": {path: hash | None | CHANGED}, "env": {name: digest | None}}``
        (and ``"env_enumerated": True`` when the step's code iterated the environment);
        empty when the step read nothing undeclared."""
        files: dict[str, str | None] = {}
        for path, stamp in sorted(self.files.items()):
            if path in self.written and stamp is None:
                files[path] = None  # read while absent, then created by the step
                continue
            files[path] = _file_hash(Path(path), stamp, hasher)
        out: dict[str, Any] = {}
        if files:
            out["files"] = files
        if self.env:
            out["env"] = dict(sorted(self.env.items()))
        if self.env_enumerated:
            out["env_enumerated"] = True
        return out


def _file_hash(path: Path, stamp: tuple[int, ...] | None, hasher: Any) -> str | None:
    if stamp is None:
        return CHANGED if path.exists() else None
    try:
        if _stamp(path.stat()) != stamp:
            return CHANGED
        return str(hasher.hash_file(path))
    except OSError:
        return CHANGED


def _stamp(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)


# -- the process-wide hooks ---------------------------------------------------------
_active: ReadWatch | None = None
_hook_installed = False
_install_lock = threading.Lock()


def _audit(event: str, args: tuple[Any, ...]) -> None:
    watch = _active
    if watch is None or event != "open":
        return
    try:
        watch.on_open(args[0], args[2] if len(args) > 2 and args[2] is not None else 0)
    except Exception:  # noqa: BLE001 - a hook that raises would fail the step's open()
        pass


def _install_hook() -> None:
    global _hook_installed
    with _install_lock:
        if not _hook_installed:
            sys.addaudithook(_audit)
            _hook_installed = True


_Environ = type(os.environ)
_ORIGINAL = {name: getattr(_Environ, name)
             for name in ("__getitem__", "__setitem__", "__delitem__", "__iter__")}


def _getitem(self: Any, key: Any) -> Any:
    try:
        value = _ORIGINAL["__getitem__"](self, key)
    except KeyError:
        watch = _active
        if watch is not None:
            watch.on_env_read(key, None)
        raise
    watch = _active
    if watch is not None:
        watch.on_env_read(key, os.fsdecode(value) if isinstance(value, bytes) else value)
    return value


def _setitem(self: Any, key: Any, value: Any) -> None:
    watch = _active
    if watch is not None:
        watch.on_env_write(key)
    _ORIGINAL["__setitem__"](self, key, value)


def _delitem(self: Any, key: Any) -> None:
    watch = _active
    if watch is not None:
        watch.on_env_write(key)
    _ORIGINAL["__delitem__"](self, key)


def _iter(self: Any) -> Iterator[Any]:
    watch = _active
    if watch is not None:
        watch.on_env_enumerate()
    for key in _ORIGINAL["__iter__"](self):
        if watch is not None:
            watch.env_yielded.add(key)
        yield key


_PATCHED = {"__getitem__": _getitem, "__setitem__": _setitem, "__delitem__": _delitem,
            "__iter__": _iter}
_PLUMBING = frozenset({
    os.getenv.__code__.co_filename,
    Mapping.get.__code__.co_filename,  # type: ignore[attr-defined]
    _getitem.__code__.co_filename,
})


@contextlib.contextmanager
def watch_reads(spec: WatchSpec, declared: Iterable[str] = ()) -> Iterator[ReadWatch | None]:
    """Record what the code run inside reads (see the module docstring).

    Example:
        >>> import os
        >>> os.environ["REPRISE_DOC_VAR"] = "1"
        >>> with watch_reads(WatchSpec(ignore=(), code_dirs=(), key="00" * 32)) as seen:
        ...     _ = os.environ.get("REPRISE_DOC_VAR")
        >>> list(seen.env) if seen is not None else None
        ['REPRISE_DOC_VAR']
    """
    global _active
    if _active is not None:
        # a pipeline run inside a step: the outer step's watch goes on recording (what
        # the inner steps read, the outer one depends on); the inner steps record
        # nothing, so their cache entries hold no reads and are recomputed
        yield None
        return
    watch = ReadWatch(spec, tuple(os.path.abspath(p) for p in declared))
    _install_hook()
    for name, func in _PATCHED.items():
        setattr(_Environ, name, func)
    _active = watch
    try:
        yield watch
    finally:
        _active = None
        for name, func in _ORIGINAL.items():
            setattr(_Environ, name, func)


def stale_reads(reads: Mapping[str, Any], hasher: Any, key: str) -> list[str]:
    """What changed among a cache entry's recorded reads, as readable lines (empty: the
    entry still holds): ``file /p/config.yaml changed``, ``$DATA_ROOT changed``..."""
    out = []
    for path, recorded in sorted((reads.get("files") or {}).items()):
        now = _current_file_hash(Path(path), hasher)
        if recorded == CHANGED:
            out.append(f"file {path} changed while the step read it")
        elif now != recorded:
            what = "appeared" if recorded is None else "is gone" if now is None else "changed"
            out.append(f"file {path} {what}")
    for name, recorded in sorted((reads.get("env") or {}).items()):
        now = env_digest(os.environ.get(name), key)
        if now != recorded:
            what = "is set" if recorded is None else "is unset" if now is None else "changed"
            out.append(f"${name} {what}")
    return out


def _current_file_hash(path: Path, hasher: Any) -> str | None:
    try:
        if not path.is_file():
            return None if not path.exists() else "not-a-file"
        return str(hasher.hash_file(path))
    except OSError:
        return "unreadable"


def _code_dirs() -> set[str]:
    import site

    paths = sysconfig.get_paths()
    dirs = {paths["stdlib"], paths["platstdlib"], paths["purelib"], paths["platlib"],
            site.getusersitepackages(), str(Path(__file__).resolve().parents[1])}
    try:
        dirs.update(site.getsitepackages())
    except AttributeError:  # old virtualenv's site module
        pass
    return {d for d in dirs if d}


def _with_real_paths(dirs: Iterable[str]) -> tuple[str, ...]:
    out = set()
    for d in dirs:
        out.add(os.path.abspath(d))
        out.add(os.path.realpath(d))
    return tuple(sorted(d for d in out if d != os.sep))


def _prefixes(dirs: Iterable[str]) -> tuple[str, ...]:
    return tuple(d.rstrip(os.sep) + os.sep for d in dirs)


def _under(path: str, prefixes: tuple[str, ...]) -> bool:
    return (path + os.sep).startswith(prefixes)


_warned: set[tuple[str, str, str]] = set()


def warn_undeclared_reads(step: str, reads: Mapping[str, Any]) -> None:
    """Log, once per process for each step and file or variable, what the step read
    beyond its declared inputs and how to declare it."""
    lines = []
    for path, digest in (reads.get("files") or {}).items():
        if ("file", step, path) in _warned:
            continue
        _warned.add(("file", step, path))
        if digest == CHANGED:
            lines.append(f"  file {path} changed while the step ran: the result is never "
                         "reused")
        else:
            lines.append(f"  file {path}{' (absent)' if digest is None else ''}: declare it as "
                         f"an input, a `reprise.File` parameter given File({path!r})")
    for name, digest in (reads.get("env") or {}).items():
        if ("env", step, name) in _warned:
            continue
        _warned.add(("env", step, name))
        lines.append(f"  environment variable ${name}{' (unset)' if digest is None else ''}: "
                     f"declare it as a parameter, passed os.environ.get({name!r}) from the "
                     "pipeline")
    if reads.get("env_enumerated") and ("enum", step, "") not in _warned:
        _warned.add(("enum", step, ""))
        lines.append("  the whole environment (it iterated over os.environ): variables picked "
                     "that way are not checked; pass the ones that matter as parameters")
    if lines:
        _logger.warning(
            "step %r read what its inputs do not declare; its cached result is reused only "
            "while these are unchanged (`reprise runs show` lists them; [pipeline] "
            "ignore_reads / ignore_env in .reprise/config.toml silence one):\n%s",
            step, "\n".join(lines))
