"""``skops.io`` imported without building its estimator list (reprise.store._skops).

Each test runs in a fresh interpreter: what matters is what the first import of
``skops.io`` in a process costs and leaves behind.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

_SAVE = """
import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline
from reprise.store._ml import save_estimator
from tests.store._ml_models import Shifter
X = np.arange(40.0).reshape(20, 2); y = (X[:, 0] > 19).astype(int)
save_estimator(LogisticRegression().fit(X, y), {lr!r})
save_estimator(Pipeline([("s", Shifter()), ("c", LogisticRegression())]).fit(X, y), {shift!r})
"""


# imported by sklearn.utils.all_estimators() (torch through scikit-learn's array-API
# shims), by neither a LogisticRegression nor skops' own modules
_ALL_ESTIMATORS_ONLY = ("torch", "sklearn.semi_supervised", "sklearn.gaussian_process",
                        "sklearn.cross_decomposition", "sklearn.naive_bayes",
                        "sklearn.neural_network", "sklearn.kernel_ridge")


def _run(code: str) -> Any:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A LogisticRegression, and a Pipeline with a type Reprise does not trust."""
    folder = tmp_path_factory.mktemp("skops")
    lr, shift = str(folder / "lr.skops"), str(folder / "shift.skops")
    subprocess.run([sys.executable, "-c", _SAVE.format(lr=lr, shift=shift)], check=True,
                   timeout=120, cwd=ROOT)
    return lr, shift


def test_loading_imports_only_the_modules_the_file_names(files: tuple[str, str]) -> None:
    lr, _ = files
    got = _run(f"""
import json, sys
from reprise.store._ml import load_estimator
_ALL_ESTIMATORS_ONLY = {_ALL_ESTIMATORS_ONLY!r}
m = load_estimator({lr!r})
print(json.dumps({{"pred": m.predict([[0.0, 1.0], [39.0, 40.0]]).tolist(),
                  "loaded": sorted(x for x in _ALL_ESTIMATORS_ONLY if x in sys.modules)}}))
""")
    assert got == {"pred": [0, 1], "loaded": []}


def test_untrusted_types_are_still_refused_and_trusted_on_request(files: tuple[str, str]) -> None:
    _, shift = files
    got = _run(f"""
import json
from reprise.core.errors import MaterializerError
from reprise.store._ml import load_estimator
try:
    load_estimator({shift!r}); refused = None
except MaterializerError as exc:
    refused = str(exc)
back = load_estimator({shift!r}, trusted=["tests.store._ml_models.Shifter"])
print(json.dumps({{"refused": refused, "steps": [type(s).__name__ for s in back]}}))
""")
    assert "tests.store._ml_models.Shifter" in got["refused"]
    assert "LogisticRegression" not in got["refused"]
    assert got["steps"] == ["Shifter", "LogisticRegression"]


_DEFAULTS = """
import json, skops.io._general as g, skops.io._trusted_types as t
names = ("SKLEARN_ESTIMATOR_TYPE_NAMES", "SKLEARN_INTERNAL_TYPE_NAMES",
         "SCIPY_UFUNC_TYPE_NAMES", "NUMPY_UFUNC_TYPE_NAMES")
print(json.dumps({n: [sorted(getattr(g, n)), sorted(getattr(t, n))] for n in names}))
"""


def test_skops_keeps_its_own_defaults_for_other_callers(files: tuple[str, str]) -> None:
    lr, shift = files
    got = _run(f"""
import json
from reprise.store._ml import load_estimator
load_estimator({lr!r})
import skops.io as sio
from skops.io.exceptions import UntrustedTypesFoundException
plain = type(sio.load({lr!r})).__name__
try:
    sio.load({shift!r}); shifted = "loaded"
except UntrustedTypesFoundException:
    shifted = "refused"
print(json.dumps({{"untrusted": sio.get_untrusted_types(file={lr!r}),
                  "shift_untrusted": sio.get_untrusted_types(file={shift!r}),
                  "plain": plain, "shifted": shifted}}))
""")
    assert got == {"untrusted": [], "shift_untrusted": ["tests.store._ml_models.Shifter"],
                   "plain": "LogisticRegression", "shifted": "refused"}
    after_reprise = _run("from reprise.store._skops import skops_io; skops_io()\n" + _DEFAULTS)
    plain_skops = _run("import skops.io\n" + _DEFAULTS)
    assert after_reprise == plain_skops
    assert all(len(lists[0]) > 0 for lists in plain_skops.values())


def test_a_process_that_imported_skops_first_is_left_as_it_is(files: tuple[str, str]) -> None:
    lr, _ = files
    got = _run(f"""
import json
import skops.io, skops.io._general as g
before = type(g.SKLEARN_ESTIMATOR_TYPE_NAMES).__name__
from reprise.store._ml import load_estimator
m = load_estimator({lr!r})
print(json.dumps({{"before": before, "after": type(g.SKLEARN_ESTIMATOR_TYPE_NAMES).__name__,
                  "pred": m.predict([[39.0, 40.0]]).tolist()}}))
""")
    assert got == {"before": "list", "after": "list", "pred": [1]}
