"""Laws of the summaries: merge is associative and commutative, a window does not depend
on how its rows were cut into batches, and everything round-trips through JSON."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from reprise.core.errors import UserError
from reprise.monitor import Reference, Window, compare, fit_reference


def _table(rng: np.random.Generator, n: int) -> pa.Table:
    x = rng.normal(size=n)
    x[rng.random(n) < 0.1] = np.nan
    return pa.table({"x": x, "k": rng.integers(0, 5, size=n),
                     "s": rng.choice(["u", "v", "w", "NA"], size=n)})


@pytest.fixture(scope="module")
def ref() -> Reference:
    return fit_reference(_table(np.random.default_rng(0), 5000), chunks=5)


def _window(ref: Reference, *tables: pa.Table) -> Window:
    w = Window(ref)
    for t in tables:
        w.update(t)
    return w


def _state(w: Window) -> str:
    d = w.to_dict()
    for col in d["columns"].values():  # moments are merged in floating point
        for key in ("mean", "m2", "low_sum", "high_sum"):
            if key in col:
                col[key] = round(col[key], 6)
        col.pop("unseen_counts", None)  # which unseen labels are kept is bounded, not exact
    return json.dumps(d, sort_keys=True)


def test_merge_is_associative_and_commutative(ref: Reference) -> None:
    rng = np.random.default_rng(1)
    a, b, c = (_window(ref, _table(rng, n)) for n in (300, 700, 50))
    left, right = a.merge(b).merge(c), a.merge(b.merge(c))
    assert _state(left) == _state(right) == _state(c.merge(a).merge(b))


def test_window_does_not_depend_on_how_rows_are_cut(ref: Reference) -> None:
    t = _table(np.random.default_rng(2), 2000)
    whole = _window(ref, t)
    pieces = _window(ref, *t.to_batches(max_chunksize=333))
    merged = _window(ref, t.slice(0, 1500)).merge(_window(ref, t.slice(1500)))
    assert _state(whole) == _state(pieces) == _state(merged)
    x = t.column("x").to_numpy(zero_copy_only=False)
    assert whole.columns["x"].mean == pytest.approx(np.nanmean(x))  # type: ignore[union-attr]


def test_reference_does_not_depend_on_batch_size() -> None:
    t = _table(np.random.default_rng(3), 4000)
    a = fit_reference(lambda: t.to_batches(max_chunksize=4000), chunks=4)
    b = fit_reference(lambda: t.to_batches(max_chunksize=97), chunks=4)
    assert a.id == b.id
    assert _rounded(a.to_dict()) == _rounded(b.to_dict())


def _rounded(value: object) -> object:
    """Floats to 9 significant digits: sums and moments merge in floating point."""
    if isinstance(value, float):
        return float(f"{value:.9g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def test_json_round_trip_gives_the_same_report(ref: Reference) -> None:
    w = _window(ref, _table(np.random.default_rng(4), 1000))
    ref2 = Reference.from_dict(json.loads(json.dumps(ref.to_dict(), allow_nan=False)))
    w2 = Window.from_dict(ref2, json.loads(json.dumps(w.to_dict(), allow_nan=False)))
    assert ref2.id == ref.id
    assert compare(ref2, w2).to_dict() == compare(ref, w).to_dict()


def test_windows_of_two_references_do_not_merge(ref: Reference) -> None:
    other = fit_reference(_table(np.random.default_rng(5), 3000), chunks=3)
    with pytest.raises(UserError, match="different references"):
        Window(ref).merge(Window(other))
    with pytest.raises(UserError, match="summarise it again"):
        Window.from_dict(other, Window(ref).to_dict())


def test_summary_size_does_not_grow_with_rows(ref: Reference) -> None:
    rng = np.random.default_rng(6)
    small = len(json.dumps(_window(ref, _table(rng, 200)).to_dict()))
    big = len(json.dumps(_window(ref, _table(rng, 50_000)).to_dict()))
    assert big < small * 1.5
