"""``python tests/serve/_faults.py serve ...``: ``reprise serve`` itself, with faults injected
into chosen model versions, for the rollout tests' real server processes.

A registered package cannot carry code of its own (the registry refuses classes that are
not installed), so a model that breaks in production is made here, in the server
process only: ``REPRISE_TEST_FAULTS`` maps a version to its fault, e.g.
``{"2": {"fail": 0.2}, "3": {"sleep_ms": 100}, "4": {"constant": 1}}``:

* ``fail``: raise on that share of rows (chosen by the row's ``a`` value, so a retried
  request fails again, and about that share of single-row requests fail);
* ``sleep_ms``: sleep that long in every predict call;
* ``constant``: answer that class for every row;
* ``warm_up: "fail"``: fail the first call, the server's warm-up.

Otherwise the first call (the server's warm-up on the package's example) is left alone,
as a model that passes its checks and fails on real traffic would be. The process that
starts the rollout loads the real, healthy package.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

FAULTS_ENV = "REPRISE_TEST_FAULTS"


class Faulty:
    """A servable that wraps a registered one and misbehaves as told."""

    def __init__(self, inner: Any, fault: dict[str, Any]) -> None:
        self._inner, self._fault, self._calls = inner, fault, 0

    def __getattr__(self, name: str) -> Any:  # name, version, signature, example...
        return getattr(self._inner, name)

    def predict(self, columns: dict[str, Any]) -> dict[str, Any]:
        import numpy as np

        self._calls += 1
        if self._calls == 1:  # the warm-up
            if self._fault.get("warm_up") == "fail":
                raise RuntimeError("injected fault: this version fails its warm-up")
            return dict(self._inner.predict(columns))
        fault = self._fault
        if fault.get("sleep_ms"):
            time.sleep(fault["sleep_ms"] / 1000)
        share = fault.get("fail")
        if share and any(failing(a, share) for a in np.asarray(columns["a"]).tolist()):
            raise RuntimeError("injected fault: this version fails on some rows")
        out = dict(self._inner.predict(columns))
        if "constant" in fault:
            n = len(out["prediction"])
            out["prediction"] = np.full(n, fault["constant"])
            if "probabilities" in out:
                proba = np.zeros_like(np.asarray(out["probabilities"]))
                classes = list(self._inner.signature.classes or [])
                proba[:, classes.index(fault["constant"])] = 1.0
                out["probabilities"] = proba
        return out


def failing(a: float, share: float) -> bool:
    """Whether a row with feature ``a`` fails: its 4th-6th decimals, as a uniform draw."""
    return int(abs(a) * 1e6) % 1000 < share * 1000


def main(argv: list[str]) -> None:
    from reprise.cli import main as cli
    from reprise.registry import _api

    faults = {int(k): v for k, v in json.loads(os.environ.get(FAULTS_ENV, "{}")).items()}
    load = _api.RegistrySource.load

    def faulty_load(self: Any, name: str, version: int) -> Any:
        servable = load(self, name, version)
        return Faulty(servable, faults[version]) if version in faults else servable

    _api.RegistrySource.load = faulty_load  # type: ignore[method-assign]
    cli(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
