"""How drift is judged: significance, correction, minimum sample, thresholds.

Defaults, and why:

- ``alpha = 0.05`` and ``correction = "holm"``: the dataset-level verdict controls the
  family-wise error rate over every test of every column (Holm never does worse than
  Bonferroni and needs no independence); ``"bh"`` (Benjamini-Hochberg) bounds the false
  discovery rate instead, for wide tables where some false alarms are acceptable.
- ``min_rows = 100``: a column judged on fewer values gets "insufficient data" — a KS or
  χ² test on 30 rows can only see shifts of about a standard deviation, and calling that
  "no drift" would be a claim the data cannot support.
- ``ks_max_rows = 10_000``: windows up to this many values per column are judged by a
  test with a p-value (KS, χ²); above, by a distance against a threshold, because a
  p-value on a very large sample flags shifts too small to matter (Evidently's issue
  #50). The distance is the Wasserstein distance over the reference's std for numbers
  (Jensen-Shannon when the reference is constant) and Jensen-Shannon for categories.
- ``k = 3``: a distance alarms beyond the reference chunks' ``mean + 3 std`` (NannyML's
  default), unless the column has a fixed ``threshold`` in the policy.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reprise.core._durations import duration_seconds
from reprise.core.errors import ConfigError, UserError

__all__ = ["CORRECTIONS", "DEFAULT_WINDOW", "DriftPolicy", "load_drift_policy", "parse_window"]

DEFAULT_WINDOW = 1000  # rows of logged traffic in a live window

CORRECTIONS = ("holm", "bh")
_KEYS = {"alpha", "correction", "min_rows", "ks_max_rows", "k", "columns"}
_COLUMN_KEYS = {"threshold", "ignore"}


@dataclass(frozen=True)
class DriftPolicy:
    alpha: float = 0.05
    correction: str = "holm"
    min_rows: int = 100
    ks_max_rows: int = 10_000
    k: float = 3.0
    columns: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not (isinstance(self.alpha, int | float) and 0 < self.alpha < 1):
            raise ConfigError(f"alpha must be between 0 and 1 (exclusive), not {self.alpha!r}.")
        if self.correction not in CORRECTIONS:
            raise ConfigError(f"correction must be 'holm' or 'bh', not {self.correction!r}.")
        for name in ("min_rows", "ks_max_rows"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name} must be a positive integer, not {value!r}.")
        if not (isinstance(self.k, int | float) and math.isfinite(self.k) and self.k >= 0):
            raise ConfigError(f"k must be a non-negative number, not {self.k!r}.")
        if not isinstance(self.columns, dict):
            raise ConfigError("columns must be a mapping of column name to {threshold: X, "
                              f"ignore: true}}, not {self.columns!r}.")
        for col, spec in self.columns.items():
            if not isinstance(spec, dict) or set(spec) - _COLUMN_KEYS:
                raise ConfigError(f"policy for column {col!r} must be a mapping with keys "
                                  f"among {sorted(_COLUMN_KEYS)}, not {spec!r}.")
            t = spec.get("threshold")
            if t is not None and not (isinstance(t, int | float) and t >= 0):
                raise ConfigError(f"threshold of column {col!r} must be a non-negative "
                                  f"number, not {t!r}.")

    def check_columns(self, known: Iterable[str], what: str) -> None:
        """Refuse a policy naming a column ``what`` does not have (a typo would silently
        leave the column under the default rule)."""
        names = sorted(set(known))
        unknown = [c for c in self.columns if c not in names]
        if unknown:
            import difflib

            hint = difflib.get_close_matches(unknown[0], names, n=1)
            raise ConfigError(
                f"the drift policy names column(s) {unknown} that {what} does not have"
                + (f" (did you mean {hint[0]!r}?)" if hint else "")
                + f"; its columns are {names}.")

    def fixed_threshold(self, column: str) -> float | None:
        t = self.columns.get(column, {}).get("threshold")
        return None if t is None else float(t)

    def ignored(self, column: str) -> bool:
        return bool(self.columns.get(column, {}).get("ignore", False))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DriftPolicy:
        unknown = set(d) - _KEYS
        if unknown:
            raise ConfigError(f"unknown drift policy key(s) {sorted(unknown)}; the keys are "
                              f"{sorted(_KEYS)}.")
        return cls(**d)

    def to_dict(self) -> dict[str, Any]:
        return {"alpha": self.alpha, "correction": self.correction, "min_rows": self.min_rows,
                "ks_max_rows": self.ks_max_rows, "k": self.k, "columns": self.columns}


def load_drift_policy(path: str | Path) -> DriftPolicy:
    """A policy from a YAML (or JSON) file of the keys of :class:`DriftPolicy`."""
    import yaml

    p = Path(path)
    try:
        doc = yaml.safe_load(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read the drift policy {p}: {exc.strerror}.") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p} is not valid YAML: {exc}") from None
    if doc is None:
        return DriftPolicy()
    if not isinstance(doc, dict):
        raise ConfigError(f"{p} must hold a mapping of policy keys, not {type(doc).__name__}.")
    return DriftPolicy.from_dict(doc)


def parse_window(window: int | str | None) -> tuple[str, float]:
    """``("rows", n)`` for a row count, ``("time", seconds)`` for ``"30s"``/``"15m"``/
    ``"1h"``/``"2d"``."""
    if window is None:
        return "rows", float(DEFAULT_WINDOW)
    if isinstance(window, int) and not isinstance(window, bool):
        if window < 1:
            raise UserError(f"a window is at least 1 row, not {window}.")
        return "rows", float(window)
    if isinstance(window, str):
        text = window.strip().lower()
        if text.isdigit() and int(text) >= 1:
            return "rows", float(int(text))
        seconds = duration_seconds(text, units=("s", "m", "h", "d"), bare=False)
        if seconds is not None and seconds > 0:
            return "time", seconds
        if re.fullmatch(r"[-+]?\d+(\.\d+)?", text):
            raise UserError(f"window {window!r}: a window of rows is a whole number of at "
                            "least 1 (e.g. 1000).")
        if seconds is not None:
            raise UserError(f"window {window!r}: a duration must be longer than 0 "
                            "(e.g. 30s, 15m, 1h, 2d).")
    raise UserError(f"window {window!r} is neither a row count (e.g. 1000) nor a duration "
                    "(e.g. 30s, 15m, 1h, 2d).")
