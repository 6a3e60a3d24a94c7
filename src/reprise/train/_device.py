"""Picking the device to train on, and saying why."""

from __future__ import annotations

import logging
import os
import sys
import warnings
from typing import Any

from reprise.core.errors import UserError

__all__ = ["select_device"]

log = logging.getLogger("reprise.train")


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _warn_at_caller(message: str) -> None:
    """Warn at the first frame outside the reprise package: the user's own line.

    (Python 3.12 has ``skip_file_prefixes`` for this; 3.11 does not.)
    """
    level, frame = 2, sys._getframe(1)  # stacklevel 2 is the frame that called us
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    warnings.warn(message, RuntimeWarning, stacklevel=level)


def _mps_available(torch: Any) -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def select_device(device: Any = "auto", *, local_rank: int | None = None) -> tuple[Any, str]:
    """The ``torch.device`` to use and a one-line reason.

    ``"auto"`` picks CUDA, then MPS, then CPU. An accelerator that was asked
    for but is not there falls back to CPU with a ``RuntimeWarning`` (a job
    queued for a GPU that lands on a CPU node still runs, and says so).
    ``local_rank`` (set under DDP) picks ``cuda:<local_rank>``.

    Example:
        >>> dev, why = select_device("cpu")
        >>> dev.type, why
        ('cpu', 'cpu: asked for')
    """
    import torch

    text = str(device) if device is not None else "auto"
    if text == "auto":
        if torch.cuda.is_available():
            index = local_rank if local_rank is not None else torch.cuda.current_device()
            name = torch.cuda.get_device_name(index)
            return torch.device("cuda", index), f"cuda:{index} ({name}): auto, CUDA is available"
        if _mps_available(torch):
            return torch.device("mps"), "mps: auto, no CUDA device but Apple MPS is available"
        return torch.device("cpu"), "cpu: auto, no CUDA or MPS device is visible"
    try:
        dev = torch.device(text)
    except (RuntimeError, TypeError) as exc:
        raise UserError(f"device={text!r} is not a device; use 'auto', 'cpu', 'cuda', "
                        "'cuda:N' or 'mps'") from exc
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            _warn_at_caller(f"device={text!r} was asked for but CUDA is not available here; "
                            "training on the CPU instead")
            return torch.device("cpu"), f"cpu: {text} asked for but CUDA is not available"
        if dev.index is None:
            dev = torch.device("cuda", local_rank if local_rank is not None else 0)
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise UserError(f"device={text!r}: this machine has {torch.cuda.device_count()} "
                            "CUDA device(s)")
        return dev, f"{dev} ({torch.cuda.get_device_name(dev.index)}): asked for"
    if dev.type == "mps" and not _mps_available(torch):
        _warn_at_caller("device='mps' was asked for but MPS is not available here; training "
                        "on the CPU instead")
        return torch.device("cpu"), "cpu: mps asked for but MPS is not available"
    return dev, f"{dev}: asked for"
