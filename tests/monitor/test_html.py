"""The HTML drift report: bounded size whatever the data, escaped, deterministic."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from reprise.monitor import Window, compare, fit_reference, render_drift_report

EVIL = "<script>alert(1)</script>"


def test_wide_table_stays_under_5_mb_and_user_strings_are_escaped() -> None:
    rng = np.random.default_rng(0)
    n = 400
    cols: dict[str, object] = {f"c{i}": rng.normal(size=n) for i in range(399)}
    cols[EVIL] = rng.choice([EVIL, "b"], size=n)
    ref = fit_reference(pa.table(cols), fine_bins=50, chunks=2)
    w = Window(ref)
    cols[EVIL] = rng.choice([EVIL, "b", "</script><b>x"], size=n)
    w.update(pa.table(cols))
    report = compare(ref, w)
    page = render_drift_report(report, ref, w, title=EVIL)
    assert len(page) <= 5_000_000
    text = page.decode()
    assert EVIL not in text and "</script><b>" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "more columns: see --json" in text
    assert render_drift_report(report, ref, w, title=EVIL) == page  # deterministic
