"""Search spaces: what is accepted, how it becomes Optuna distributions and a grid,
and every malformed entry refused with the parameter's name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reprise.core.errors import UserError
from reprise.tune import SearchSpace, load_space


def test_forms_normalise_to_one_spec() -> None:
    space = load_space({"lr": {"low": 1e-4, "high": 0.1, "log": True},
                        "layers": {"low": 1, "high": 4},
                        "units": {"type": "int", "low": 16, "high": 64, "step": 16},
                        "act": ["relu", "tanh"],
                        "p": {"type": "float", "low": 0.0, "high": 0.5, "step": 0.1}})
    assert space.spec["lr"] == {"type": "float", "low": 1e-4, "high": 0.1, "log": True}
    assert space.spec["layers"]["type"] == "int"
    assert space.spec["act"] == {"type": "categorical", "choices": ["relu", "tanh"]}
    d = space.distributions()
    assert d["lr"].log and d["units"].step == 16 and d["act"].choices == ("relu", "tanh")
    with pytest.raises(UserError, match="'lr' is a continuous float range"):
        space.grid()
    grid = SearchSpace({k: v for k, v in space.spec.items() if k != "lr"}).grid()
    assert grid["units"] == [16, 32, 48, 64] and grid["act"] == ["relu", "tanh"]
    assert grid["layers"] == [1, 2, 3, 4]
    assert [round(v, 10) for v in grid["p"]] == [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]


def test_a_yaml_file_is_read(tmp_path: Path) -> None:
    f = tmp_path / "space.yaml"
    f.write_text("lr: {low: 0.001, high: 0.1, log: true}\nopt: [adam, sgd]\n")
    assert load_space(f) == load_space({"lr": {"low": 0.001, "high": 0.1, "log": True},
                                        "opt": ["adam", "sgd"]})
    f.write_text("lr: [unclosed\n")
    with pytest.raises(UserError, match="not valid YAML"):
        load_space(f)
    with pytest.raises(UserError, match="does not exist"):
        load_space(tmp_path / "missing.yaml")


@pytest.mark.parametrize(("spec", "needle"), [
    ({}, "non-empty mapping"),
    ({"1x": [1, 2]}, "must be an identifier"),
    ({"x": 3}, "must be a list of choices"),
    ({"x": {"low": 1, "high": 2, "scale": "log"}}, "unknown key"),
    ({"x": {"type": "complex", "low": 0, "high": 1}}, "has type 'complex'"),
    ({"x": {"low": 2.0, "high": 1.0}}, "low < high"),
    ({"x": {"low": 0.0, "high": 1.0, "log": True}}, "low must be > 0"),
    ({"x": {"low": "a", "high": 1.0}}, "finite number for low"),
    ({"x": {"low": 0.0, "high": float("inf")}}, "finite number for high"),
    ({"x": {"type": "int", "low": 0.5, "high": 3}}, "integer bounds"),
    ({"x": {"low": 0.1, "high": 1.0, "log": True, "step": 0.1}}, "both log and step"),
    ({"x": {"low": 0, "high": 10, "step": -1}}, "positive number"),
    ({"x": {"type": "int", "low": 0, "high": 10, "step": 1.5}}, "integer step"),
    ({"x": {"low": 0, "high": 1, "log": "yes"}}, "true or false"),
    ({"x": []}, "non-empty list of choices"),
    ({"x": [1, [2]]}, "must be None, booleans"),
    ({"x": ["a", "a"]}, "lists a choice twice"),
    ({"x": {"choices": ["a"], "low": 1}}, "takes only choices"),
    ({"x": {"low": 0.0, "high": 1.0, "grid": [0.5, 2.0]}}, "grid of 'x'"),
])
def test_malformed_entries_are_refused_naming_the_parameter(spec: Any, needle: str) -> None:
    with pytest.raises(UserError, match=needle):
        SearchSpace(spec)


def test_a_continuous_range_has_no_grid_without_values() -> None:
    with pytest.raises(UserError, match="needs its values"):
        SearchSpace({"lr": {"low": 0.001, "high": 0.1}}).grid()
    assert SearchSpace({"lr": {"low": 0.001, "high": 0.1, "grid": [0.01, 0.05]}}).grid() == \
        {"lr": [0.01, 0.05]}
    with pytest.raises(UserError, match="grid points"):
        SearchSpace({"n": {"low": 0, "high": 10**6}}).grid()


BOUNDS = st.tuples(st.integers(-1000, 1000), st.integers(1, 999))


@settings(max_examples=60, deadline=None)
@given(BOUNDS, st.integers(1, 50))
def test_every_grid_point_of_an_int_range_is_inside_it_and_on_the_step(b: Any, step: int) -> None:
    low, width = b
    space = SearchSpace({"n": {"type": "int", "low": low, "high": low + width * step,
                               "step": step}})
    grid = space.grid()["n"]
    assert grid[0] == low and grid[-1] == low + width * step
    assert all((g - low) % step == 0 for g in grid) and len(grid) == width + 1
    assert all(space.distributions()["n"]._contains(space.distributions()["n"].to_internal_repr(g))
               for g in grid)


def test_integer_bounds_give_an_int_range_also_log_scaled() -> None:
    space = SearchSpace({"units": {"low": 8, "high": 128, "log": True}})
    assert space.spec["units"] == {"type": "int", "low": 8, "high": 128, "log": True}
    dist = space.distributions()["units"]
    assert type(dist).__name__ == "IntDistribution" and dist.log
