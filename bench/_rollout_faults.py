"""``python bench/_rollout_faults.py serve ...``: ``reprise serve`` with one model version made
to fail, for ``bench_rollout.py``'s reaction-time measurement.

A registered package cannot carry code of its own, so the broken version is made here, in
the server process only (as ``tests/serve/_faults.py`` does for the tests):
``REPRISE_BENCH_FAIL`` is ``VERSION:SHARE``, e.g. ``2:0.2``: that version raises on a
predict call holding a row whose ``f0`` falls in that share (its 4th-6th decimals as a
uniform draw, so a retried request fails again). The first call, the server's warm-up, is
left alone, as a model that passes its checks and fails on real traffic would be.
"""

from __future__ import annotations

import os
import sys
from typing import Any

FAIL_ENV = "REPRISE_BENCH_FAIL"


def failing(f0: float, share: float) -> bool:
    return int(abs(f0) * 1e6) % 1000 < share * 1000


class Failing:
    def __init__(self, inner: Any, share: float) -> None:
        self._inner, self._share, self._calls = inner, share, 0

    def __getattr__(self, name: str) -> Any:  # name, version, signature, example...
        return getattr(self._inner, name)

    def predict(self, columns: dict[str, Any]) -> Any:
        import numpy as np

        self._calls += 1
        if self._calls > 1 and any(failing(v, self._share)
                                   for v in np.asarray(columns["f0"]).tolist()):
            raise RuntimeError("injected fault: this version fails on some rows")
        return self._inner.predict(columns)


def main(argv: list[str]) -> None:
    from reprise.cli import main as cli
    from reprise.registry import _api

    version, share = os.environ[FAIL_ENV].split(":")
    load = _api.RegistrySource.load

    def faulty_load(self: Any, name: str, v: int) -> Any:
        servable = load(self, name, v)
        return Failing(servable, float(share)) if v == int(version) else servable

    _api.RegistrySource.load = faulty_load  # type: ignore[method-assign]
    cli(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
