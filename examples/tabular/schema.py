"""The contract the breast-cancer table must meet (pandera), attached to the ``cancer``
dataset: ``reprise data add`` enforces it, and the pipeline's ``validate`` step re-checks
what it is given."""

import pandera.pandas as pa

MEASURES = ["radius", "texture", "perimeter", "area", "smoothness", "compactness",
            "concavity", "concave_points", "symmetry", "fractal_dimension"]
FEATURES = ([f"mean_{m}" for m in MEASURES] + [f"{m}_error" for m in MEASURES]
            + [f"worst_{m}" for m in MEASURES])

schema = pa.DataFrameSchema(
    {
        "id": pa.Column(int, unique=True, nullable=False),
        **{f: pa.Column(float, pa.Check.ge(0), nullable=False) for f in FEATURES},
        "target": pa.Column(int, pa.Check.isin([0, 1]), nullable=False),
    },
    strict=True,
    name="cancer",
)
