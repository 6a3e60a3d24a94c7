"""Energy used by a run: measured where a counter is readable, estimated otherwise.

Sources, best first:

* ``nvml``: NVIDIA's total-energy counter per GPU (millijoules since driver load),
  plus RAPL for the host when readable;
* ``rapl``: Intel/AMD RAPL package counters under ``/sys/class/powercap`` (often
  root-only; wraps around at ``max_energy_range_uj``);
* ``estimate``: CPU seconds consumed by this process times a per-core power
  figure. It is labelled as an estimate everywhere it is stored.

No library measures energy for a single run portably, so this is hand-written; it
is small and only reads counters.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any

__all__ = ["ESTIMATE_WATTS_PER_CORE", "EnergyMeter"]

#: Power assumed per fully busy core when no counter is readable (a typical
#: server core at load, 10-15 W; we take 12 W). Only used for labelled estimates.
ESTIMATE_WATTS_PER_CORE = 12.0
_POWERCAP = Path("/sys/class/powercap")


def _rapl_domains(root: Path = _POWERCAP) -> list[tuple[Path, int]]:
    """Top-level RAPL package domains whose counter this process can read."""
    out: list[tuple[Path, int]] = []
    if not root.is_dir():
        return out
    for d in sorted(root.glob("intel-rapl:*")) + sorted(root.glob("amd-rapl:*")):
        if d.name.count(":") != 1:  # sub-domains (core, dram) are inside the package
            continue
        energy = d / "energy_uj"
        try:
            int(energy.read_text())
            max_range = int((d / "max_energy_range_uj").read_text())
        except (OSError, ValueError):
            continue
        out.append((energy, max_range))
    return out


# Set once NVML was found missing in this process: loading the library is tried (and
# fails) in dlopen, which costs a few hundred microseconds per run otherwise.
_NVML_ABSENT = False


class EnergyMeter:
    """Joules since :meth:`start`. ``source`` is ``nvml``, ``rapl``, ``nvml+rapl`` or
    ``estimate``; :attr:`is_estimate` says whether the figure was measured."""

    def __init__(self, *, powercap_root: Path | str = _POWERCAP,
                 watts_per_core: float = ESTIMATE_WATTS_PER_CORE, use_nvml: bool = True) -> None:
        self._rapl = _rapl_domains(Path(powercap_root))
        self._nvml: Any = None
        self._gpus: list[Any] = []
        if use_nvml:
            self._init_nvml()
        self.watts_per_core = watts_per_core
        parts = (["nvml"] if self._gpus else []) + (["rapl"] if self._rapl else [])
        self.source = "+".join(parts) if parts else "estimate"
        self._start_rapl: list[int] = []
        self._start_gpu: list[int] = []
        self._start_cpu = 0.0
        self._started = False

    def _init_nvml(self) -> None:
        global _NVML_ABSENT
        if _NVML_ABSENT:  # probed in this process already: no driver, no counter
            return
        try:
            import pynvml

            pynvml.nvmlInit()
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i)
                       for i in range(pynvml.nvmlDeviceGetCount())]
            for h in handles:
                pynvml.nvmlDeviceGetTotalEnergyConsumption(h)  # raises if unsupported
            self._nvml, self._gpus = pynvml, handles
        except Exception:  # no pynvml / driver / counter: fall through to other sources
            self._nvml, self._gpus = None, []
            _NVML_ABSENT = True  # a driver does not appear while a process runs

    @property
    def is_estimate(self) -> bool:
        return self.source == "estimate"

    def _cpu_seconds(self) -> float:
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    def _read_rapl(self) -> list[int]:
        return [int(p.read_text()) for p, _ in self._rapl]

    def _read_gpu(self) -> list[int]:
        return [int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(h)) for h in self._gpus]

    def start(self) -> EnergyMeter:
        self._start_cpu = self._cpu_seconds()
        self._start_rapl = self._read_rapl() if self._rapl else []
        self._start_gpu = self._read_gpu() if self._gpus else []
        self._start_time = time.monotonic()
        self._started = True
        return self

    def read(self) -> float:
        """Joules used since :meth:`start` (by the whole package/GPU for measured
        sources, by this process's CPU time for the estimate)."""
        if not self._started:
            raise RuntimeError("EnergyMeter.read() before start()")
        if self.is_estimate:
            return (self._cpu_seconds() - self._start_cpu) * self.watts_per_core
        joules = 0.0
        for (_, max_range), a, b in zip(self._rapl, self._start_rapl, self._read_rapl(),
                                        strict=True):
            joules += ((b - a) % max_range if max_range else b - a) / 1e6  # counter wraps
        if self._gpus:
            for a, b in zip(self._start_gpu, self._read_gpu(), strict=True):
                joules += (b - a) / 1e3
        return joules

    def close(self) -> None:
        if self._nvml is not None:
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()
            self._nvml, self._gpus = None, []
