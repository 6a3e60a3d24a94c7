"""The model and the plain FastAPI peer of ``bench_serve.py``.

``make_model()`` fits the benchmark's LogisticRegression (20 numeric features, seeded, so
every process that calls it gets the same model). ``create_plain_app()`` is the floor: a
FastAPI endpoint as one would write it by hand — a pydantic body, ``model.predict`` on a
numpy row, no validation against training ranges, no metrics — run by uvicorn with the
same settings as Reprise's server.

(No ``from __future__ import annotations`` here: FastAPI must see the body model's class
in the endpoint's signature, not a string naming a function-local class.)
"""

from pathlib import Path
from typing import Any

FEATURES = [f"f{i}" for i in range(20)]


def make_model() -> tuple[Any, Any]:
    """(training features as a DataFrame, fitted LogisticRegression)."""
    import numpy as np
    import pandas as pd
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.normal(size=(2000, len(FEATURES))), columns=FEATURES)
    target = (frame["f0"] + 0.5 * frame["f1"] - frame["f2"] > 0).astype(int)
    return frame, LogisticRegression(max_iter=500).fit(frame.to_numpy(), target)


def production_lr(work: Path) -> tuple[dict[str, float], int, Path]:
    """A fresh workspace in ``work / "ws"`` serving ``make_model()``'s model as
    ``lr@production``: (one input row, the class the model gives it, the workspace dir)."""
    import reprise
    from reprise.registry import package_model, promote, register_package

    frame, model = make_model()
    row = {k: float(v) for k, v in frame.iloc[7].to_dict().items()}
    expected = int(model.predict(frame.iloc[[7]].to_numpy())[0])
    ws_dir = work / "ws"
    ws_dir.mkdir(parents=True)
    ws = reprise.init(ws_dir)
    version = register_package("lr", package_model(model, sample=frame), workspace=ws).version
    promote("lr", version, "production", workspace=ws, force=True, reason="benchmark")
    ws.close()
    return row, expected, ws_dir


def create_plain_app() -> Any:
    import numpy as np
    from fastapi import FastAPI
    from pydantic import BaseModel

    _, model = make_model()
    app = FastAPI()

    class Records(BaseModel):
        records: list[dict[str, float]]

    @app.post("/predict")
    async def predict(body: Records) -> dict[str, Any]:
        x = np.array([[r[f] for f in FEATURES] for r in body.records])
        return {"predictions": model.predict(x).tolist()}

    return app


def create_skops_app() -> Any:
    """The cold-start peer of ``bench_coldstart.py``: the same endpoint, its model read
    from the ``.skops`` file named by ``REPRISE_BENCH_SKOPS`` the way skops documents it
    (every type in the file listed, then trusted), and a ``/ready`` probe."""
    import os

    import numpy as np
    import skops.io as sio
    from fastapi import FastAPI
    from pydantic import BaseModel

    path = os.environ["REPRISE_BENCH_SKOPS"]
    model = sio.load(path, trusted=sio.get_untrusted_types(file=path))
    app = FastAPI()

    class Records(BaseModel):
        records: list[dict[str, float]]

    @app.get("/ready")
    async def ready() -> dict[str, bool]:
        return {"ready": True}

    @app.post("/predict")
    async def predict(body: Records) -> dict[str, Any]:
        x = np.array([[r[f] for f in FEATURES] for r in body.records])
        return {"predictions": model.predict(x).tolist()}

    return app


def create_hello_app() -> Any:
    """The floor: FastAPI + uvicorn with one route and no model."""
    from fastapi import FastAPI

    app = FastAPI()

    @app.get("/ready")
    async def ready() -> dict[str, bool]:
        return {"ready": True}

    return app
