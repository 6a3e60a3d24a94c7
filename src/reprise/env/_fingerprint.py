"""The environment fingerprint: what about this machine and process can change results.

A fingerprint is a JSON-able dict of sections (python, os, cpu, memory, gpu,
packages, env_vars, git, and cuda when torch is already loaded). It leaves out
machine paths, user names and host names so that two machines with the same
software compare equal. Nothing heavy is imported: torch is only *read* when
the caller already imported it, psutil and pynvml load inside the functions.

Sections that cannot change within a process (python, os, cpu model, memory,
gpus) are computed once; the package list is cached per state of ``sys.path``
(each entry's modification time is part of the key, so ``pip install`` in
the same process is seen); ``refresh=True`` recomputes everything.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import logging
import os
import platform
import re
import shutil
import subprocess
import sys
import threading
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reprise.core._config import WORKSPACE_DIR
from reprise.core._hashing import hash_bytes, hash_file, hash_value, new_hasher

if TYPE_CHECKING:
    from importlib.metadata import Distribution

__all__ = [
    "ENV_VARS",
    "EnvChange",
    "diff_environments",
    "distribution_for_module",
    "fingerprint",
    "fingerprint_hash",
    "git_state",
    "installed_packages",
    "normalise_name",
    "scope_fingerprint",
]

_logger = logging.getLogger(__name__)

#: Environment variables that change numerical results or the devices used.
ENV_VARS = (
    "PYTHONHASHSEED",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "CUBLAS_WORKSPACE_CONFIG",
    "CUDA_VISIBLE_DEVICES",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "MKL_CBWR",
    "NVIDIA_TF32_OVERRIDE",
    "TF_DETERMINISTIC_OPS",
)

_NAME_RUN = re.compile(r"[-_.]+")
_lock = threading.Lock()
_static: dict[str, Any] = {}
_packages: tuple[tuple[tuple[str, int], ...], dict[str, str]] | None = None
_modules: tuple[tuple[tuple[str, int], ...], dict[str, list[str]]] | None = None


def normalise_name(name: str) -> str:
    """PEP 503 normal form of a distribution name.

    Example:
        >>> normalise_name("Typing_Extensions")
        'typing-extensions'
    """
    return _NAME_RUN.sub("-", name).lower()


def fingerprint(root: Path | str | None = None, *, refresh: bool = False) -> dict[str, Any]:
    """Return this process's environment fingerprint.

    Args:
        root: a folder inside the git repository to describe (default: the
            current directory); ``git`` is None outside a repository.
        refresh: recompute the sections cached for this process.

    Example:
        >>> fp = fingerprint()
        >>> sorted(fp)[:3]
        ['cpu', 'env_vars', 'git']
    """
    with _lock:
        if refresh or not _static:
            _static.clear()
            _static.update(_static_sections())
        static = dict(_static)
    fp: dict[str, Any] = {
        "python": dict(static["python"]),
        "os": dict(static["os"]),
        "cpu": {**static["cpu"], "affinity": _affinity()},
        "memory": dict(static["memory"]),
        "gpu": [dict(g) for g in static["gpu"]],
        "packages": installed_packages(refresh=refresh),
        "env_vars": {name: os.environ.get(name) for name in ENV_VARS},
        "git": git_state(Path(root) if root is not None else Path.cwd()),
    }
    cuda = _torch_cuda()
    if cuda is not None:
        fp["cuda"] = cuda
    return fp


def fingerprint_hash(fp: Mapping[str, Any]) -> str:
    """BLAKE3 of the canonical JSON of a fingerprint (64 hex characters).

    Example:
        >>> len(fingerprint_hash({"python": {"minor": "3.11"}}))
        64
    """
    return hash_value(fp)


def scope_fingerprint(fp: Mapping[str, Any], packages: Iterable[str] | None) -> dict[str, Any]:
    """The part of ``fp`` that a cache key depends on: python minor and some packages.

    Args:
        fp: a fingerprint from :func:`fingerprint`.
        packages: distribution names to keep (any spelling); None keeps all.
            Names that are not installed are left out.

    Example:
        >>> fp = {"python": {"minor": "3.11"}, "packages": {"numpy": "2.1.0", "rich": "13"}}
        >>> scope_fingerprint(fp, ["NumPy", "absent"])
        {'python': '3.11', 'packages': {'numpy': '2.1.0'}}
    """
    installed: Mapping[str, str] = fp.get("packages") or {}
    if packages is None:
        kept = dict(installed)
    else:
        names = {normalise_name(p) for p in packages}
        kept = {n: installed[n] for n in names if n in installed}
    minor = (fp.get("python") or {}).get("minor")
    return {"python": minor, "packages": dict(sorted(kept.items()))}


# -- packages -------------------------------------------------------------------------


def _path_state() -> tuple[tuple[str, int], ...]:
    state = []
    for entry in sys.path:
        path = entry or os.getcwd()
        try:
            mtime = os.stat(path).st_mtime_ns
        except OSError:
            mtime = -1
        state.append((path, mtime))
    return tuple(state)


def installed_packages(*, refresh: bool = False) -> dict[str, str]:
    """``{normalised name: version}`` of every distribution on ``sys.path``, sorted.

    When a name is installed twice, the one found first (the one imported) wins.

    Example:
        >>> installed_packages()["reprise-ml"]
        '0.1.0'
    """
    global _packages
    from importlib import metadata

    state = _path_state()
    with _lock:
        if not refresh and _packages is not None and _packages[0] == state:
            return dict(_packages[1])
    found: dict[str, str] = {}
    for dist in metadata.distributions():
        name, version = _name_version(dist)
        if name:
            found.setdefault(normalise_name(name), version or "")
    result = dict(sorted(found.items()))
    with _lock:
        _packages = (state, result)
    return dict(result)


def _name_version(dist: Distribution) -> tuple[str | None, str | None]:
    # Reading the two headers by hand is several times faster than the email
    # parser behind ``dist.metadata``, which would dominate the fingerprint.
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO")
    name = version = None
    for line in (text or "").splitlines():
        if not line:
            break
        if line.startswith("Name:"):
            name = line[5:].strip()
        elif line.startswith("Version:"):
            version = line[8:].strip()
        if name and version:
            return name, version
    meta = dist.metadata
    return (meta["Name"] if meta else None), (meta["Version"] if meta else None)


# Import names whose distribution is named otherwise; each guess is checked
# against the distribution's files before it is trusted.
_DIST_GUESSES = {"reprise": ("reprise-ml",), "sklearn": ("scikit-learn",), "yaml": ("PyYAML",),
                 "PIL": ("Pillow",), "skimage": ("scikit-image",), "attr": ("attrs",),
                 "dateutil": ("python-dateutil",), "bs4": ("beautifulsoup4",),
                 "cv2": ("opencv-python", "opencv-python-headless")}


@functools.cache
def _guess_distribution(top: str) -> str | None:
    """The distribution of top-level package ``top`` when it is the package's own
    name or a known alias: a few file reads, instead of the tens of milliseconds
    ``packages_distributions()`` takes to read every distribution's file list."""
    from importlib import metadata

    for guess in (top, *_DIST_GUESSES.get(top, ())):
        try:
            dist = metadata.distribution(guess)
        except (metadata.PackageNotFoundError, ValueError):
            continue
        listed = dist.read_text("top_level.txt")
        if listed is not None:
            if top in listed.split():
                return normalise_name(guess)
            continue
        record = dist.read_text("RECORD") or ""
        pattern = rf"^{re.escape(top)}(/|\.py,|\.[^/,]*\.(so|pyd),)"
        if re.search(pattern, record, re.MULTILINE):
            return normalise_name(guess)
    return None


def _is_regular_package(top: str) -> bool:
    """``top`` is a package with an ``__init__`` file: all its submodules come from its
    one folder, so from its distribution. (Namespace packages such as ``google`` may be
    split across distributions.)"""
    module = sys.modules.get(top)
    if module is not None:
        return getattr(module, "__file__", None) is not None
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return False
    return spec is not None and spec.origin is not None


def distribution_for_module(module_name: str) -> str | None:
    """The normalised name of the distribution that provides ``module_name``.

    Dotted names are looked up by their top-level package; when several
    distributions share it (namespace packages such as ``google``), the one
    whose files hold the dotted path wins. None for the standard library, the
    user's own modules and anything not installed.

    Example:
        >>> distribution_for_module("numpy.linalg")
        'numpy'
    """
    global _modules
    from importlib import metadata

    top = module_name.split(".", 1)[0]
    if "." not in module_name or _is_regular_package(top):
        guessed = _guess_distribution(top)
        if guessed is not None:
            return guessed
    state = _path_state()
    with _lock:
        cached = _modules
    if cached is None or cached[0] != state:
        mapping = {k: list(dict.fromkeys(v)) for k, v in metadata.packages_distributions().items()}
        cached = (state, mapping)
        with _lock:
            _modules = cached
    dists = cached[1].get(top)
    if not dists:
        return None
    if len(dists) > 1 and "." in module_name:
        prefix = module_name.replace(".", "/")
        for dist_name in dists:
            files = metadata.distribution(dist_name).files or []
            if any(str(f).startswith(prefix) for f in files):
                return normalise_name(dist_name)
    return normalise_name(sorted(dists)[0])


# -- static sections ------------------------------------------------------------------


def _static_sections() -> dict[str, Any]:
    return {
        "python": {
            "version": platform.python_version(),
            "implementation": platform.python_implementation(),
            "minor": "{}.{}".format(*sys.version_info[:2]),
        },
        "os": _os_section(),
        "cpu": {"model": _cpu_model(), "count": os.cpu_count()},
        "memory": {"total_bytes": _memory_total()},
        "gpu": _gpus(),
    }


def _os_section() -> dict[str, Any]:
    uname = platform.uname()
    libc: str | None = None
    try:
        # platform.libc_ver() may scan the interpreter binary; confstr is instant.
        libc = os.confstr("CS_GNU_LIBC_VERSION")
    except (AttributeError, ValueError, OSError):
        pass
    return {"system": uname.system, "release": uname.release, "machine": uname.machine,
            "libc": libc}


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _affinity() -> int | None:
    getaffinity = getattr(os, "sched_getaffinity", None)
    return len(getaffinity(0)) if getaffinity is not None else None


def _memory_total() -> int | None:
    try:
        import psutil
    except ImportError:
        return None
    return int(psutil.virtual_memory().total)


# -- gpus -----------------------------------------------------------------------------


def _gpus() -> list[dict[str, Any]]:
    gpus = _gpus_nvml()
    if gpus is None:
        gpus = _gpus_smi()
    return gpus


def _gpus_nvml() -> list[dict[str, Any]] | None:
    try:
        with warnings.catch_warnings():
            # The old "pynvml" wrapper warns on import that it is deprecated.
            warnings.simplefilter("ignore")
            import pynvml
    except Exception:  # noqa: BLE001 - a missing or broken binding means "ask nvidia-smi"
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no driver
        return None
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        cuda = _cuda_version(int(pynvml.nvmlSystemGetCudaDriverVersion()))
        out = []
        for i in range(int(pynvml.nvmlDeviceGetCount())):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            out.append({"name": _text(pynvml.nvmlDeviceGetName(handle)), "driver": driver,
                        "memory_total_bytes": int(pynvml.nvmlDeviceGetMemoryInfo(handle).total),
                        "cuda": cuda})
        return out
    except Exception as exc:  # noqa: BLE001 - fall back to nvidia-smi
        _logger.debug("NVML query failed: %s", exc)
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - shutting down is best effort
            pass


def _gpus_smi() -> list[dict[str, Any]]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        proc = subprocess.run(
            [exe, "--query-gpu=name,driver_version,memory.total",
             "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=5, check=True,
            env={**os.environ, "LC_ALL": "C"})
    except (OSError, subprocess.SubprocessError) as exc:
        _logger.debug("nvidia-smi failed: %s", exc)
        return []
    cuda = _cuda_driver_version()
    out = []
    for line in proc.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3:
            continue
        name, driver, mib = parts
        memory = int(float(mib) * 1024 * 1024) if _is_number(mib) else None
        out.append({"name": name, "driver": driver, "memory_total_bytes": memory,
                    "cuda": cuda})
    return out


def _cuda_driver_version() -> str | None:
    """The CUDA version the driver supports, from libcuda without creating a context."""
    import ctypes

    try:
        lib = ctypes.CDLL("libcuda.so.1")
        value = ctypes.c_int()
        if lib.cuDriverGetVersion(ctypes.byref(value)) != 0:
            return None
    except (OSError, AttributeError):
        return None
    return _cuda_version(value.value)


def _cuda_version(code: int) -> str | None:
    return f"{code // 1000}.{code % 1000 // 10}" if code > 0 else None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _torch_cuda() -> dict[str, Any] | None:
    """torch's CUDA and cuDNN versions, only when the caller already imported torch."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        cuda = getattr(getattr(torch, "version", None), "cuda", None)
        cudnn_mod = importlib.import_module("torch.backends.cudnn")
        cudnn = cudnn_mod.version() if cudnn_mod.is_available() else None
    except Exception as exc:  # noqa: BLE001 - a broken torch must not break tracking
        _logger.debug("reading torch's CUDA versions failed: %s", exc)
        return None
    return {"torch_cuda": cuda, "cudnn": cudnn}


# -- git ------------------------------------------------------------------------------

_GIT_TIMEOUT = 10.0
# The workspace's own files (database, artifacts) change with every run; they
# must not make the repository look dirty.
_GIT_PATHSPEC = [":(top)", f":(top,exclude,glob)**/{WORKSPACE_DIR}/**"]


def git_state(root: Path) -> dict[str, Any] | None:
    """Commit, branch and uncommitted changes of the repository holding ``root``.

    None when git is missing, ``root`` is not in a repository, the repository
    has no commit yet, or git does not answer in time. ``diff_hash`` covers
    ``git diff HEAD`` and the names and bytes of untracked files (those that
    ``.gitignore`` does not hide); it is None when the tree is clean.

    Example:
        >>> import tempfile
        >>> git_state(Path(tempfile.mkdtemp())) is None
        True
    """
    exe = shutil.which("git")
    if exe is None:
        return None
    status = _git(exe, root, "status", "--porcelain=v2", "-z", "--branch",
                  "--untracked-files=all", "--ignore-submodules=none", "--", *_GIT_PATHSPEC)
    if status is None:
        return None
    commit = branch = None
    changed, untracked = False, []
    entries = iter(status.split(b"\0"))
    for entry in entries:
        if entry.startswith(b"2 "):  # a rename: the original path follows
            next(entries, None)
        if entry.startswith(b"# branch.oid "):
            commit = entry[13:].decode()
        elif entry.startswith(b"# branch.head "):
            branch = entry[14:].decode(errors="replace")
        elif entry.startswith(b"? "):
            untracked.append(entry[2:])
        elif entry[:2] in (b"1 ", b"2 ", b"u "):
            changed = True
    if commit is None or commit == "(initial)":
        return None
    dirty = changed or bool(untracked)
    diff_hash = _diff_hash(exe, root, untracked) if dirty else None
    return {"commit": commit, "branch": None if branch == "(detached)" else branch,
            "dirty": dirty, "diff_hash": diff_hash}


def _diff_hash(exe: str, root: Path, untracked: list[bytes]) -> str | None:
    # Explicit options so that user configuration (colour, external diff
    # drivers, prefixes, algorithm) cannot change the bytes being hashed.
    diff = _git(exe, root, "diff", "--binary", "--no-color", "--no-ext-diff", "--no-textconv",
                "--no-renames", "--diff-algorithm=myers", "--src-prefix=a/", "--dst-prefix=b/",
                "HEAD", "--", *_GIT_PATHSPEC)
    if diff is None:
        return None
    hasher = new_hasher()
    hasher.update(hash_bytes(diff).encode())
    if untracked:
        top = _git(exe, root, "rev-parse", "--show-toplevel")
        if top is None:
            return None
        base = Path(os.fsdecode(top.strip()))
        for name in sorted(untracked):
            hasher.update(b"\0" + name + b"\0" + _content_hash(base / os.fsdecode(name)).encode())
    return str(hasher.hexdigest())


def _content_hash(path: Path) -> str:
    try:
        if path.is_symlink():
            return "link:" + hash_bytes(os.fsencode(os.readlink(path)))
        if path.is_dir():  # a nested repository shows up as one untracked folder
            return "dir"
        return hash_file(path)
    except OSError:
        return "unreadable"


def _git(exe: str, root: Path, *args: str) -> bytes | None:
    # LC_ALL=C keeps messages stable; GIT_OPTIONAL_LOCKS=0 stops `git status`
    # from rewriting the index while the user's own git command holds it.
    env = {**os.environ, "LC_ALL": "C", "GIT_OPTIONAL_LOCKS": "0"}
    try:
        proc = subprocess.run([exe, "-C", str(root), *args], capture_output=True, env=env,
                              timeout=_GIT_TIMEOUT, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        _logger.debug("git %s failed: %s", args[0], exc)
        return None
    return proc.stdout if proc.returncode == 0 else None


# -- diff -----------------------------------------------------------------------------


@dataclass(frozen=True)
class EnvChange:
    """One difference between two fingerprints (None stands for "absent")."""

    section: str
    key: str
    old: Any
    new: Any


def diff_environments(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[EnvChange]:
    """What changed from fingerprint ``a`` to fingerprint ``b``, sorted by (section, key).

    Nested dicts are flattened with dotted keys and lists by index (``gpu``
    ``0.name``); a key present on one side only appears with None on the other.

    Example:
        >>> diff_environments({"packages": {"numpy": "2.0"}}, {"packages": {"numpy": "2.1"}})
        [EnvChange(section='packages', key='numpy', old='2.0', new='2.1')]
    """
    changes = []
    for section in sorted(set(a) | set(b)):
        fa, fb = _flatten(a.get(section)), _flatten(b.get(section))
        for key in sorted(set(fa) | set(fb)):
            old, new = fa.get(key), fb.get(key)
            if old != new or type(old) is not type(new):
                changes.append(EnvChange(section, key, old, new))
    return changes


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, Mapping):
        items: Iterable[tuple[Any, Any]] = value.items()
    elif isinstance(value, (list, tuple)):
        items = enumerate(value)
    else:
        return {} if value is None and not prefix else {prefix: value}
    out: dict[str, Any] = {}
    for k, v in items:
        out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    return out
