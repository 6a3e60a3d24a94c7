"""Rollout policies (issue 14.4): YAML with defaults, ``null`` turns a check off, and an
unknown key or bad value is an error naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from reprise.core.errors import UserError
from reprise.serve._policy import KEYS, Policy, load_policy, parse_duration


def test_defaults() -> None:
    p = load_policy(None)
    assert p == Policy()
    assert (p.min_requests, p.threshold, p.alpha) == (200, 2, 0.01)
    assert (p.error_rate_max, p.error_rate_hard, p.error_rate_relative) == (0.05, 0.5, True)
    assert (p.latency_p99_ratio_max, p.prediction_shift_max, p.shadow_agreement_min) == (
        2.0, 0.1, 0.9)
    assert p.slo_availability == 0.999 and p.hold_seconds(60) == 60


def test_yaml_file_overrides_and_turns_checks_off(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("analysis:\n  min_requests: 500\n  threshold: 3\n"
                    "latency: {p99_max_ms: 250}\n"
                    "prediction_shift: {max_distance: null}\n"
                    "blue_green: {hold: 5m}\n")
    p = load_policy(path)
    assert (p.min_requests, p.threshold, p.latency_p99_max_ms) == (500, 3, 250.0)
    assert p.prediction_shift_max is None and p.hold_s == 300.0
    assert p.error_rate_max == 0.05  # untouched defaults stay
    assert load_policy(str(path)) == p


def test_the_resolved_form_round_trips() -> None:
    p = load_policy({"error_rate": {"max": 0.01, "relative": False}, "slo": {"latency_ms": 80}})
    doc = p.to_dict()
    assert doc["error_rate"] == {"max": 0.01, "hard": 0.5, "relative": False}
    assert load_policy(doc) == p == Policy.from_dict(doc)
    assert sum(len(v) for v in doc.values()) == len(KEYS)


def test_an_empty_file_is_the_defaults(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text("# nothing\n")
    assert load_policy(tmp_path / "p.yaml") == Policy()


@pytest.mark.parametrize(("doc", "message"), [
    ({"latency": {"p95_max_ms": 100}}, r"unknown key latency.p95_max_ms \(did you mean "
                                       r"'p99_max_ms'\?\); keys of latency: p50_max_ms"),
    ({"latncy": {}}, r"unknown section 'latncy' \(did you mean 'latency'\?\)"),
    ({"analysis": {"min_requests": 0}}, r"analysis.min_requests must be a whole number >= 1; "
                                        r"got 0"),
    ({"analysis": {"threshold": 1.5}}, r"analysis.threshold must be a whole number"),
    ({"error_rate": {"max": "high"}}, r"error_rate.max must be a number in \[0, 1\] or null "
                                      r"\(off\); got 'high'"),
    ({"error_rate": {"max": 1.5}}, r"error_rate.max must be a number in \[0, 1\]"),
    ({"error_rate": {"relative": "yes"}}, r"error_rate.relative must be true or false"),
    ({"analysis": {"alpha": 0}}, r"analysis.alpha must be a number in \(0, 0.5\]"),
    ({"latency": {"p99_ratio_max": 0.5}}, r"latency.p99_ratio_max must be a number >= 1"),
    ({"slo": {"availability": 1}}, r"slo.availability must be a number in \(0, 1\)"),
    ({"blue_green": {"hold": "soon"}}, r"blue_green.hold must be a duration such as 90s"),
    ({"latency": [1, 2]}, r"latency must be a mapping of keys"),
    ([1, 2], r"expected a mapping of sections"),
])
def test_bad_policies_name_the_key(doc: object, message: str) -> None:
    with pytest.raises(UserError, match=message):
        load_policy(doc)  # type: ignore[arg-type]


def test_bad_files(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="does not exist"):
        load_policy(tmp_path / "missing.yaml")
    (tmp_path / "bad.yaml").write_text("analysis: [unclosed\n")
    with pytest.raises(UserError, match="is not valid YAML"):
        load_policy(tmp_path / "bad.yaml")
    (tmp_path / "k.yaml").write_text("error_rate:\n  maximum: 1\n")
    with pytest.raises(UserError, match=r"policy file '.*k.yaml': unknown key error_rate"):
        load_policy(tmp_path / "k.yaml")


@pytest.mark.parametrize(("text", "seconds"), [("250ms", 0.25), ("60s", 60.0), ("5m", 300.0),
                                               ("1h", 3600.0), ("90", 90.0), (2, 2.0),
                                               ("1.5s", 1.5), (" 2 m ", 120.0)])
def test_durations(text: str | int, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5 minutes", "-1s", "0s", "1d", "nan", True])
def test_bad_durations(text: object) -> None:
    with pytest.raises(UserError, match="duration"):
        parse_duration(text)  # type: ignore[arg-type]


def test_the_readme_lists_every_key_with_its_default() -> None:
    import json

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("### Policy reference", 1)[1].split("\n## ", 1)[0]
    defaults = Policy()
    for key in KEYS:
        value = getattr(defaults, key.field)
        shown = "null" if value is None else json.dumps(value)
        assert f"| `{key.path}` | {shown}" in section, key.path
