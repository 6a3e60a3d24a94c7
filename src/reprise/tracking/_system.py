"""Background sampler of system metrics: CPU %, resident memory and, when an NVIDIA
GPU is visible through NVML, its utilisation and memory.

Samples go through a sink (the run's ``log_metrics``), so they land in the run's
journal like any other metric and survive a crash the same way.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["SystemSampler", "sample_once"]

_logger = logging.getLogger(__name__)

Sink = Callable[[dict[str, float], int], None]


class _Nvml:
    """NVML handles for the visible GPUs; empty when pynvml or a driver is missing."""

    def __init__(self) -> None:
        self.handles: list[Any] = []
        self._nvml: Any = None
        try:
            import pynvml  # optional: comes with nvidia-ml-py

            pynvml.nvmlInit()
            self._nvml = pynvml
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i)
                            for i in range(pynvml.nvmlDeviceGetCount())]
        except Exception:  # no pynvml, no driver, no GPU: GPU metrics are simply absent
            self.handles = []

    def sample(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for i, h in enumerate(self.handles):
            try:
                util = self._nvml.nvmlDeviceGetUtilizationRates(h)
                mem = self._nvml.nvmlDeviceGetMemoryInfo(h)
            except Exception as exc:  # a GPU that vanished mid-run must not kill the sampler
                _logger.debug("NVML read failed for GPU %d: %s", i, exc)
                continue
            out[f"system/gpu{i}_util_percent"] = float(util.gpu)
            out[f"system/gpu{i}_memory_mb"] = mem.used / 2**20
        return out

    def close(self) -> None:
        if self._nvml is not None:
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()


def sample_once(process: Any, nvml: _Nvml | None = None) -> dict[str, float]:
    """One sample for ``process`` (a ``psutil.Process``)."""
    with process.oneshot():
        values = {
            "system/cpu_percent": float(process.cpu_percent(None)),
            "system/rss_mb": process.memory_info().rss / 2**20,
        }
    if nvml is not None:
        values.update(nvml.sample())
    return values


class SystemSampler(threading.Thread):
    """Samples every ``interval`` seconds until :meth:`stop`; step = sample number."""

    def __init__(self, sink: Sink, *, interval: float = 10.0, pid: int | None = None) -> None:
        super().__init__(name="reprise-system-sampler", daemon=True)
        if interval <= 0:
            raise ValueError("interval must be positive")
        self.interval = interval
        self._sink = sink
        self._pid = pid
        self._stop_event = threading.Event()
        self.samples = 0

    def run(self) -> None:
        import psutil

        proc = psutil.Process(self._pid)
        proc.cpu_percent(None)  # the first call only sets the reference point
        nvml = _Nvml()
        try:
            while not self._stop_event.wait(self.interval):
                try:
                    self._sink(sample_once(proc, nvml), self.samples)
                except Exception as exc:  # sampling is best effort; training goes on
                    _logger.warning("system metrics sample failed: %s", exc)
                    return
                self.samples += 1
        finally:
            nvml.close()

    def stop(self) -> None:
        self._stop_event.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout=max(5.0, self.interval))
