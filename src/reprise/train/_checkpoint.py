"""Atomic training checkpoints: tensors in safetensors, everything else in JSON.

A checkpoint is a folder ``ckpt-<step:09d>`` holding ``tensors.safetensors``
and ``state.json``; ``state.json`` is written last and names the tensor
file's BLAKE3 hash and size. The folder is assembled under a temporary name,
every file and the folder are fsynced, then it is renamed into place — so a
process killed at any instant leaves either a whole checkpoint or a temporary
folder that is never picked (and is swept on the next save). Loading checks
the hash, so a checkpoint damaged on disk is skipped for the previous one.

Nested state (optimizer and scheduler state dicts, RNG states) is split by
:func:`flatten`: tensors go to safetensors under a path-like key, and the
JSON keeps a ``{"$t": key}`` reference in their place; tuples are tagged so
they come back as tuples. No pickle anywhere: loading a checkpoint cannot run
code.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import re
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from reprise.core._atomic import atomic_write_bytes, fsync_dir, fsync_path
from reprise.core._hashing import hash_file
from reprise.core.errors import UserError

__all__ = ["CheckpointManager", "capture_rng", "flatten", "restore_rng", "unflatten"]

log = logging.getLogger("reprise.train")

FORMAT = 1
_NAME = re.compile(r"^ckpt-(\d{9})$")
_TENSORS, _STATE = "tensors.safetensors", "state.json"


# -- nested state <-> (JSON, tensors) ---------------------------------------------------------


def flatten(obj: Any, tensors: dict[str, Any], prefix: str) -> Any:
    """``obj`` as JSON-able data; its tensors are moved into ``tensors`` under ``prefix``."""
    import torch

    if isinstance(obj, torch.Tensor):
        key = prefix
        t = obj.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        tensors[key] = t.contiguous()
        return {"$t": key}
    if isinstance(obj, Mapping):
        if all(isinstance(k, str) and not k.startswith("$") for k in obj):
            return {str(k): flatten(v, tensors, f"{prefix}/{k}") for k, v in obj.items()}
        # int keys (optimizer state is keyed by parameter index), or keys that could be
        # read back as one of the tags above: a list of pairs keeps them as they are
        return {"$map": [[k, flatten(v, tensors, f"{prefix}/{k}")] for k, v in obj.items()]}
    if isinstance(obj, tuple):
        return {"$tuple": [flatten(v, tensors, f"{prefix}/{i}") for i, v in enumerate(obj)]}
    if isinstance(obj, list):
        return [flatten(v, tensors, f"{prefix}/{i}") for i, v in enumerate(obj)]
    if obj is None or isinstance(obj, bool | int | float | str):
        return obj
    if type(obj).__module__ == "numpy" and getattr(obj, "shape", None) == ():
        return obj.item()  # numpy scalars in scheduler states; arrays fall through
    raise UserError(f"cannot checkpoint {prefix!r}: a {type(obj).__name__} is neither a "
                    "tensor nor JSON data (checkpoints never pickle)")


def unflatten(obj: Any, tensors: Mapping[str, Any]) -> Any:
    """Inverse of :func:`flatten`."""
    if isinstance(obj, dict):
        if set(obj) == {"$t"}:
            return tensors[obj["$t"]]
        if set(obj) == {"$tuple"}:
            return tuple(unflatten(v, tensors) for v in obj["$tuple"])
        if set(obj) == {"$map"}:
            return {k: unflatten(v, tensors) for k, v in obj["$map"]}
        return {k: unflatten(v, tensors) for k, v in obj.items()}
    if isinstance(obj, list):
        return [unflatten(v, tensors) for v in obj]
    return obj


# -- random number generators -----------------------------------------------------------------


def capture_rng() -> dict[str, Any]:
    """The state of every generator a training step may draw from (nested, flattenable)."""
    import numpy as np
    import torch

    version, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    state: dict[str, Any] = {
        "python": [version, list(internal), gauss],
        "numpy": [name, torch.from_numpy(np.ascontiguousarray(keys).astype(np.int64)), int(pos),
                  int(has_gauss), float(cached)],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        state["cuda"] = list(torch.cuda.get_rng_state_all())
    return state


def restore_rng(state: Mapping[str, Any]) -> None:
    """Put back what :func:`capture_rng` captured."""
    import numpy as np
    import torch

    version, internal, gauss = state["python"]
    random.setstate((int(version), tuple(int(x) for x in internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), int(pos), int(has_gauss),
                         float(cached)))
    torch.set_rng_state(state["torch"])
    cuda = state.get("cuda")
    if cuda:
        if not torch.cuda.is_available() or torch.cuda.device_count() < len(cuda):
            log.warning("checkpoint holds RNG states of %d CUDA device(s); this machine has %d: "
                        "the CUDA generators are not restored", len(cuda),
                        torch.cuda.device_count() if torch.cuda.is_available() else 0)
        else:
            torch.cuda.set_rng_state_all(cuda)


# -- checkpoint folders -----------------------------------------------------------------------


def _write_tensors(tensors: dict[str, Any], path: Path) -> None:
    from safetensors.torch import save_file

    seen: set[int] = set()
    out: dict[str, Any] = {}
    for key, t in tensors.items():
        # safetensors refuses tensors that share memory (tied weights, views into one
        # buffer, a tensor and a slice of it): every later tensor on a storage already
        # written is copied
        storage = t.untyped_storage().data_ptr() if t.numel() else None
        if storage is not None and storage in seen:
            t = t.clone()
        elif storage is not None:
            seen.add(storage)
        out[key] = t
    save_file(out, str(path))
    fsync_path(path)


class CheckpointManager:
    """Writes, lists, prunes and loads checkpoints in one directory.

    Example:
        >>> import tempfile, torch
        >>> mgr = CheckpointManager(tempfile.mkdtemp(), keep_last=2)
        >>> path = mgr.save(5, {"w": torch.ones(2)}, {"epoch": 0})
        >>> mgr.latest() == path, mgr.load(path)[1]["epoch"]
        (True, 0)
    """

    def __init__(self, directory: str | os.PathLike[str], *, keep_last: int = 3) -> None:
        if not isinstance(keep_last, int) or keep_last < 1:
            raise UserError(f"keep_last must be a positive integer; got {keep_last!r}")
        self.directory = Path(directory)
        self.keep_last = keep_last
        self.seconds = 0.0  # total time spent writing, for the training summary
        self.count = 0

    def _sweep(self) -> None:
        """Remove temporary folders left by a writer that was killed."""
        for p in self.directory.glob(".tmp-ckpt-*"):
            shutil.rmtree(p, ignore_errors=True)

    def save(self, step: int, tensors: dict[str, Any], state: dict[str, Any]) -> Path:
        """Write checkpoint ``step`` atomically and prune to the newest ``keep_last``."""
        t0 = time.perf_counter()
        self.directory.mkdir(parents=True, exist_ok=True)
        self._sweep()
        final = self.directory / f"ckpt-{step:09d}"
        tmp = self.directory / f".tmp-ckpt-{step:09d}-{os.getpid()}"
        tmp.mkdir()
        _write_tensors(tensors, tmp / _TENSORS)
        doc = {"format": FORMAT, "step": step, "created": time.time(),
               "tensors": {"file": _TENSORS, "hash": hash_file(tmp / _TENSORS),
                           "size": (tmp / _TENSORS).stat().st_size},
               "state": state}
        atomic_write_bytes(tmp / _STATE, json.dumps(doc, sort_keys=True).encode())
        fsync_dir(tmp)
        if final.exists():  # the same step written again (a resumed run): swap it atomically
            old = self.directory / f".tmp-ckpt-old-{step:09d}-{os.getpid()}"
            final.rename(old)
            tmp.rename(final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(final)
        fsync_dir(self.directory)
        self._prune(final)
        self.seconds += time.perf_counter() - t0
        self.count += 1
        return final

    def _prune(self, written: Path) -> None:
        """Keep the newest ``keep_last`` by write order; ``written`` is always kept.

        Write order, not step number: a run resumed from an older checkpoint (or
        restarted past a damaged newer one) writes lower steps after higher ones,
        and its own checkpoints are the ones to keep and to resume from.
        """
        older = [p for p in self.checkpoints() if p != written]
        for p in older[:max(0, len(older) - (self.keep_last - 1))]:
            shutil.rmtree(p, ignore_errors=True)

    def checkpoints(self) -> list[Path]:
        """Finished checkpoint folders, oldest written first (not checked for damage)."""
        if not self.directory.is_dir():
            return []
        found = [p for p in self.directory.iterdir() if _NAME.match(p.name) and p.is_dir()]
        return sorted(found, key=lambda p: (_written_at(p), p.name))

    def problem(self, path: Path) -> str | None:
        """Why checkpoint ``path`` cannot be used, or None when it is whole."""
        try:
            doc = json.loads((path / _STATE).read_bytes())
        except (OSError, ValueError) as exc:
            return f"state.json unreadable ({exc})"
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            found = doc.get("format") if isinstance(doc, dict) else None
            return f"format {found!r}, this version reads {FORMAT}"
        info = doc.get("tensors")
        if not isinstance(info, dict) or not {"file", "hash", "size"} <= set(info) \
                or not isinstance(doc.get("state"), dict):
            return "state.json lacks its tensor record or state"
        tfile = path / str(info["file"])
        try:
            if tfile.stat().st_size != info["size"]:
                return "tensor file has the wrong size"
        except OSError as exc:
            return f"tensor file missing ({exc})"
        if hash_file(tfile) != info["hash"]:
            return "tensor file does not match its recorded hash"
        return None

    def latest(self) -> Path | None:
        """The newest whole checkpoint; damaged ones are skipped with a warning."""
        for p in reversed(self.checkpoints()):
            why = self.problem(p)
            if why is None:
                return p
            log.warning("skipping checkpoint %s: %s", p, why)
        return None

    def load(self, path: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, Any]]:
        """``(tensors, state)`` of the checkpoint at ``path``; a damaged one is a UserError."""
        from safetensors.torch import load_file

        path = Path(path)
        if path.is_file() and path.name == _STATE:
            path = path.parent
        why = self.problem(path) if path.is_dir() else "no such checkpoint folder"
        if why is not None:
            raise UserError(f"cannot resume from {path}: {why}. Pass resume='auto' to pick the "
                            "newest whole checkpoint, or another checkpoint folder.")
        doc = json.loads((path / _STATE).read_bytes())
        tensors = load_file(str(path / doc["tensors"]["file"]))
        return tensors, doc["state"]


def _written_at(path: Path) -> float:
    """When checkpoint ``path`` was written: its state.json's record, else the folder's mtime."""
    try:
        created = json.loads((path / _STATE).read_bytes()).get("created")
        if isinstance(created, int | float):
            return float(created)
    except (OSError, ValueError, AttributeError):
        pass
    try:
        return path.stat().st_mtime
    except OSError:
        return -math.inf

