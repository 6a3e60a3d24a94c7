"""A rollout's policy: what its analysis checks, with what limits (YAML, sane defaults).

Every key is optional; ``null`` turns a check off. The table :data:`KEYS` is the one
description of the keys: loading, validation, the resolved form stored with a rollout
and the README's reference all come from it.

Example policy file::

    analysis: {min_requests: 500, threshold: 3}
    error_rate: {max: 0.02}
    latency: {p99_max_ms: 250}
    prediction_shift: {max_distance: null}     # off

Example:
    >>> load_policy({"latency": {"p99_max_ms": 250}}).latency_p99_max_ms
    250.0
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from reprise.core._durations import duration_seconds
from reprise.core.errors import UserError

__all__ = ["KEYS", "Key", "Policy", "load_policy", "parse_duration"]


@dataclass(frozen=True)
class Policy:
    """The resolved policy of a rollout (see :data:`KEYS` for each field's meaning)."""

    min_requests: int = 200
    threshold: int = 2
    alpha: float = 0.01
    error_rate_max: float | None = 0.05
    error_rate_hard: float | None = 0.5
    error_rate_relative: bool = True
    latency_p50_max_ms: float | None = None
    latency_p99_max_ms: float | None = None
    latency_p99_ratio_max: float | None = 2.0
    latency_ratio_floor_ms: float = 5.0
    prediction_shift_max: float | None = 0.1
    shadow_agreement_min: float | None = 0.9
    input_drift: bool = False
    slo_availability: float = 0.999
    slo_latency_ms: float | None = None
    slo_latency_target: float = 0.99
    hold_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The nested form of a policy file, every key present (what a rollout stores)."""
        out: dict[str, dict[str, Any]] = {}
        for key in KEYS:
            out.setdefault(key.section, {})[key.name] = getattr(self, key.field)
        return out

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any] | None, *, source: str = "policy") -> Policy:
        return load_policy(doc, source=source)

    def hold_seconds(self, interval_s: float) -> float:
        """How long blue-green keeps the old version warm behind a live candidate."""
        return self.hold_s if self.hold_s is not None else interval_s


@dataclass(frozen=True)
class Key:
    """One policy key: where it sits in the file, its field, how it is checked, what it means."""

    section: str
    name: str
    field: str
    check: Callable[[Any], Any]  # the value as stored, or raises ValueError(expected)
    doc: str

    @property
    def path(self) -> str:
        return f"{self.section}.{self.name}"


# -- value checks: each returns the clean value or raises ValueError("what is expected") --

def _int_at_least(low: int) -> Callable[[Any], int]:
    def check(v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise ValueError(f"a whole number >= {low}")
        return v
    return check


def _number(low: float, high: float, *, optional: bool, low_open: bool = False,
            high_open: bool = False) -> Callable[[Any], float | None]:
    lo, hi = ("(" if low_open else "["), (")" if high_open else "]")
    what = f"a number in {lo}{low:g}, {high:g}{hi}" if math.isfinite(high) else \
        f"a number {'>' if low_open else '>='} {low:g}"

    def check(v: Any) -> float | None:
        if v is None and optional:
            return None
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise ValueError(what + (" or null (off)" if optional else ""))
        if v < low or v > high or (low_open and v == low) or (high_open and v == high):
            raise ValueError(what + (" or null (off)" if optional else ""))
        return float(v)
    return check


def _bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise ValueError("true or false")
    return v


def _duration_or_null(v: Any) -> float | None:
    if v is None:
        return None
    try:
        return parse_duration(v)
    except UserError:
        raise ValueError("a duration such as 90s, 5m or 1h, or null (the interval)") from None


_INF = math.inf
KEYS: tuple[Key, ...] = (
    Key("analysis", "min_requests", "min_requests", _int_at_least(1),
        "Requests each version needs in a window before a check may pass or fail; below it "
        "the check says `insufficient data: N of M requests` and the rollout holds."),
    Key("analysis", "threshold", "threshold", _int_at_least(1),
        "Failed analyses in a row that roll the candidate back (Flagger's `threshold`)."),
    Key("analysis", "alpha", "alpha", _number(0, 0.5, optional=False, low_open=True),
        "Significance level of the statistical tests (error rate against stable, hard "
        "failure)."),
    Key("error_rate", "max", "error_rate_max", _number(0, 1, optional=True),
        "Highest error rate (5xx answers and model exceptions) the candidate may have."),
    Key("error_rate", "hard", "error_rate_hard", _number(0, 1, optional=True,
                                                         low_open=True),
        "Roll back at once, without waiting for the interval or the threshold, when the "
        "candidate's error rate is significantly above this (one-sided exact binomial test "
        "at `alpha`: a handful of requests can be enough when every one fails)."),
    Key("error_rate", "relative", "error_rate_relative", _bool,
        "Fail when the candidate's error rate is significantly higher than the stable "
        "version's (one-sided Fisher exact test at `alpha`)."),
    Key("latency", "p50_max_ms", "latency_p50_max_ms", _number(0, _INF, optional=True,
                                                                low_open=True),
        "Highest median latency of the candidate, in milliseconds."),
    Key("latency", "p99_max_ms", "latency_p99_max_ms", _number(0, _INF, optional=True,
                                                                low_open=True),
        "Highest 99th-percentile latency of the candidate, in milliseconds."),
    Key("latency", "p99_ratio_max", "latency_p99_ratio_max", _number(1, _INF, optional=True),
        "Highest ratio of the candidate's p99 latency to the stable version's."),
    Key("latency", "ratio_floor_ms", "latency_ratio_floor_ms", _number(0, _INF,
                                                                       optional=False),
        "A candidate p99 at or below this passes the ratio check whatever the ratio (at a "
        "few milliseconds, histogram buckets and timer noise make ratios meaningless)."),
    Key("prediction_shift", "max_distance", "prediction_shift_max",
        _number(0, 1, optional=True, low_open=True),
        "Highest Jensen-Shannon distance (base 2: 0 same, 1 disjoint) between the "
        "candidate's and the stable version's output distributions (class shares, or "
        "score bins)."),
    Key("shadow", "agreement_min", "shadow_agreement_min", _number(0, 1, optional=True),
        "Least share of shadowed requests on which the candidate's answer equals the stable "
        "version's (shadow and blue-green)."),
    Key("input_drift", "enabled", "input_drift", _bool,
        "Fail when the candidate's logged traffic in the window drifts from the "
        "candidate's reference (its training dataset; per-column tests, Holm-corrected, "
        "`reprise monitor`'s defaults). Needs the request log on; installed by the CLI "
        "(`reprise serve`, `reprise rollout`)."),
    Key("slo", "availability", "slo_availability", _number(0, 1, optional=False,
                                                           low_open=True, high_open=True),
        "Availability objective: the share of requests answered without a server error. "
        "Burn rates are the error rate over the error budget (1 - objective)."),
    Key("slo", "latency_ms", "slo_latency_ms", _number(0, _INF, optional=True,
                                                       low_open=True),
        "Latency objective: a request slower than this counts against the latency budget."),
    Key("slo", "latency_target", "slo_latency_target", _number(0, 1, optional=False,
                                                               low_open=True,
                                                               high_open=True),
        "The share of requests that must be faster than `latency_ms`."),
    Key("blue_green", "hold", "hold_s", _duration_or_null,
        "After its live analysis passes, how long a blue-green candidate keeps serving 100 % "
        "with the old version still warm (a rollback is instant meanwhile) before the alias "
        "moves; null: the interval."),
)
_BY_SECTION: dict[str, dict[str, Key]] = {}
for _k in KEYS:
    _BY_SECTION.setdefault(_k.section, {})[_k.name] = _k
assert {k.field for k in KEYS} == {f.name for f in fields(Policy)}


def load_policy(policy: str | os.PathLike[str] | Mapping[str, Any] | Policy | None = None,
                *, source: str | None = None) -> Policy:
    """A :class:`Policy` from a YAML (or JSON) file, a mapping of the same form, or None
    (every default). An unknown key or a bad value is a ``UserError`` naming it."""
    if isinstance(policy, Policy):
        return policy
    if policy is None:
        return Policy()
    if isinstance(policy, str | os.PathLike):
        return _from_file(Path(policy))
    return _resolve(policy, source or "policy")


def _from_file(path: Path) -> Policy:
    import yaml

    if not path.is_file():
        raise UserError(f"policy file {str(path)!r} does not exist")
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise UserError(f"policy file {str(path)!r} is not valid YAML: {exc}") from None
    except UnicodeDecodeError:
        raise UserError(f"policy file {str(path)!r} is not UTF-8 text") from None
    return _resolve({} if doc is None else doc, f"policy file {str(path)!r}")


def _resolve(doc: Any, source: str) -> Policy:
    if not isinstance(doc, Mapping):
        raise UserError(f"{source}: expected a mapping of sections ({', '.join(_BY_SECTION)}); "
                        f"got {type(doc).__name__}")
    values: dict[str, Any] = {}
    for section, body in doc.items():
        keys = _BY_SECTION.get(str(section))
        if keys is None:
            raise UserError(f"{source}: unknown section {section!r}"
                            f"{_hint(str(section), _BY_SECTION)}; sections: "
                            f"{', '.join(_BY_SECTION)}")
        if body is None:
            continue
        if not isinstance(body, Mapping):
            raise UserError(f"{source}: {section} must be a mapping of keys "
                            f"({', '.join(keys)}); got {type(body).__name__}")
        for name, value in body.items():
            key = keys.get(str(name))
            if key is None:
                raise UserError(f"{source}: unknown key {section}.{name}"
                                f"{_hint(str(name), keys)}; keys of {section}: "
                                f"{', '.join(keys)}")
            try:
                values[key.field] = key.check(value)
            except ValueError as exc:
                raise UserError(f"{source}: {key.path} must be {exc}; got {value!r}") from None
    return Policy(**values)


def _hint(word: str, known: Mapping[str, Any]) -> str:
    close = difflib.get_close_matches(word, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""




def parse_duration(value: str | float | int) -> float:
    """Seconds in ``value``: ``250ms``, ``60s``, ``5m``, ``1h`` or a number of seconds.

    Example:
        >>> parse_duration("5m"), parse_duration("250ms"), parse_duration(2)
        (300.0, 0.25, 2.0)
    """
    seconds = duration_seconds(value, units=("ms", "s", "m", "h"))
    if seconds is None:
        raise UserError(f"{value!r} is not a duration; write e.g. 250ms, 60s, 5m or 1h")
    if not (math.isfinite(seconds) and seconds > 0):
        raise UserError(f"a duration must be more than 0; got {value!r}")
    return seconds
