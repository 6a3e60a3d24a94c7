"""The drift reference of a registered model version, computed once and recorded.

For ``NAME:V`` the reference is:

- **inputs**: :func:`fit_reference` over the training dataset version (from the
  version's lineage: the dataset versions its run read), restricted to the model's input
  columns, read a batch at a time;
- **predictions**: the model's own outputs on a seeded sample of at most
  ``sample_rows`` rows of that dataset (the rows with the smallest random priorities, so
  memory is bounded by the sample whatever the dataset's size). Packages do not store
  their validation predictions, so ``predictions`` is recorded as ``reference_sample``;
- **performance**: the headline metrics on the version's card (from its evaluation at
  training), the baseline a window's metric interval is compared with.

The fitted reference is stored as canonical JSON in the artifact store (content
addressed, no pickle) and recorded on the version in the metadata store (table
``monitor_references``: dataset, sample size, prediction source, artifact hash), so it is
computed once per version and dataset.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from reprise.core._monitor_types import MonitorReferenceRecord
from reprise.core.errors import UserError
from reprise.monitor._reference import Reference, fit_reference

__all__ = ["DOC_FORMAT", "ModelReference", "model_reference", "prediction_table"]

DOC_FORMAT = 1
SAMPLE_ROWS = 10_000


@dataclass
class ModelReference:
    name: str
    version: int
    dataset: str
    inputs: Reference
    predictions: Reference
    sample_rows: int
    predictions_source: str  # validation | reference_sample
    task: str | None
    classes: list[Any] | None
    metrics: dict[str, float] = field(default_factory=dict)  # reference performance
    artifact_hash: str = ""

    def describe(self) -> dict[str, Any]:
        """What the reference is, in a few fields (for reports and ``--json``)."""
        return {"dataset": self.dataset, "sample_rows": self.sample_rows,
                "predictions": self.predictions_source, "artifact": self.artifact_hash,
                "reference_rows": self.inputs.rows, "metrics": self.metrics}

    def to_doc(self) -> dict[str, Any]:
        return {"format": DOC_FORMAT, "name": self.name, "version": self.version,
                "dataset": self.dataset, "inputs": self.inputs.to_dict(),
                "predictions": self.predictions.to_dict(), "sample_rows": self.sample_rows,
                "predictions_source": self.predictions_source, "task": self.task,
                "classes": self.classes, "metrics": self.metrics}

    @classmethod
    def from_doc(cls, d: dict[str, Any], artifact_hash: str) -> ModelReference:
        if d.get("format") != DOC_FORMAT:
            raise UserError(f"the stored monitoring reference {artifact_hash[:12]} has format "
                            f"{d.get('format')!r}; this Reprise reads {DOC_FORMAT}.")
        return cls(d["name"], int(d["version"]), d["dataset"],
                   Reference.from_dict(d["inputs"]), Reference.from_dict(d["predictions"]),
                   int(d["sample_rows"]), d["predictions_source"], d.get("task"),
                   d.get("classes"), dict(d.get("metrics") or {}), artifact_hash)


def model_reference(ref: str, *, dataset: str | None = None, workspace: Any = None,
                    sample_rows: int = SAMPLE_ROWS, seed: int = 0) -> ModelReference:
    """The reference of the model version ``ref`` names (``NAME``, ``NAME@alias``,
    ``NAME:V``), computed and recorded on first use, read back after (without
    ``dataset``: the training dataset's from the lineage; for a version without one, the
    newest reference recorded on it).

    Args:
        dataset: ``DATASET@N`` whose rows are the reference (default: the training
            dataset version from the model's lineage).
        sample_rows: Rows (at most) the reference predictions are computed on.
        seed: Chooses those rows.

    Example:
        >>> model_reference("churn@production").dataset  # doctest: +SKIP
        'churn@3'
    """
    from reprise.registry._api import _ws
    from reprise.registry._registry import parse_ref

    ws = _ws(workspace)
    rec = parse_ref(ws, ref)
    trained_on = _lineage_datasets(rec)
    if dataset is None and len(trained_on) == 1:
        # the training dataset of the lineage: a one-off --reference does not replace it
        dataset = trained_on[0]
    # a reference recorded on the version (given once with --reference) is reused
    stored = ws.metadata.get_monitor_reference(rec.name, rec.version, dataset)
    if stored is not None and ws.artifacts.exists(stored.artifact_hash):
        return _load(ws, stored.artifact_hash)
    chosen = dataset or _training_dataset(rec, ref)
    if chosen != dataset:
        stored = ws.metadata.get_monitor_reference(rec.name, rec.version, chosen)
        if stored is not None and ws.artifacts.exists(stored.artifact_hash):
            return _load(ws, stored.artifact_hash)
    built = _build(ws, rec, chosen, sample_rows, seed)
    _save(ws, built)
    return built


def _lineage_datasets(rec: Any) -> list[str]:
    lineage = (rec.meta or {}).get("lineage") or {}
    return [str(d) for d in lineage.get("datasets") or [] if "@" in str(d)]


def _training_dataset(rec: Any, ref: str) -> str:
    datasets = _lineage_datasets(rec)
    if len(datasets) == 1:
        return str(datasets[0])
    if not datasets:
        raise UserError(f"{rec.ref} has no known training dataset (it was not registered "
                        "from a pipeline run that read a dataset version); pass the "
                        "reference rows, the dataset version it was trained on, with "
                        f"--reference DATASET@N (e.g. `reprise monitor {ref} --reference "
                        "DATASET@3`).")
    raise UserError(f"{rec.ref} was trained on several dataset versions "
                    f"({', '.join(map(str, datasets))}); choose the reference with "
                    "--reference DATASET@N.")


def _load(ws: Any, artifact_hash: str) -> ModelReference:
    from reprise.store._materializers import load_object

    art = ws.metadata.get_artifact(artifact_hash)
    doc = load_object(ws.artifacts, art.hash, art.materializer, art.meta)
    return ModelReference.from_doc(doc, artifact_hash)


def _save(ws: Any, built: ModelReference) -> None:
    from reprise.store._materializers import save_object

    art = save_object(ws.artifacts, built.to_doc())
    built.artifact_hash = art.hash
    ws.metadata.put_monitor_reference(
        MonitorReferenceRecord(name=built.name, version=built.version,
                               dataset=built.dataset, artifact_hash=art.hash,
                               sample_rows=built.sample_rows,
                               predictions=built.predictions_source,
                               created_at=time.time()), art)


def _build(ws: Any, rec: Any, dataset: str, sample_rows: int, seed: int) -> ModelReference:
    from reprise.data._dataset import Dataset
    from reprise.registry._api import _load as load_package

    data = Dataset(dataset, workspace=ws)
    if data.record.format not in ("csv", "parquet", "jsonl"):
        raise UserError(f"{data.record.ref} is {data.record.format} data; a monitoring "
                        "reference is fitted on a table (CSV, Parquet, JSON Lines).")
    package = load_package(ws, rec)
    names = list(package.signature.names)
    have = set(data.record.schema or {})
    missing = [n for n in names if n not in have]
    if missing:
        raise UserError(f"{data.record.ref} lacks the model's input column(s) "
                        f"{', '.join(missing)}; pass the dataset the model was trained on "
                        "with --reference DATASET@N.")

    def batches() -> Any:
        for b in data.batches():
            yield b.select(names)

    inputs = fit_reference(batches, na_values=data.na_values)
    sample = _sample(batches(), sample_rows, seed)
    outputs = _predict(package, sample, names)
    task, classes = package.signature.task, package.signature.classes
    predictions = fit_reference(prediction_table(outputs, task, classes))
    metrics = _card_metrics(rec)
    return ModelReference(rec.name, rec.version, data.record.ref, inputs, predictions,
                          sample.num_rows, "reference_sample", task,
                          list(classes) if classes is not None else None, metrics)


def _sample(batches: Any, k: int, seed: int) -> pa.Table:
    """A uniform sample of at most ``k`` rows (smallest seeded priorities), streaming."""
    rng = np.random.default_rng(seed)
    kept: pa.Table | None = None
    pri = np.empty(0)
    for batch in batches:
        table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
        table = table.drop_null()  # a model cannot predict rows with missing inputs
        p = rng.random(table.num_rows)
        kept = table if kept is None else pa.concat_tables([kept, table])
        pri = np.concatenate([pri, p])
        if kept.num_rows > k:
            keep = np.sort(np.argpartition(pri, k)[:k])
            kept, pri = kept.take(pa.array(keep)), pri[keep]
    if kept is None or kept.num_rows == 0:
        raise UserError("the reference dataset has no complete row (every row misses an "
                        "input); the model's reference predictions need complete rows.")
    return kept.combine_chunks()


def _predict(package: Any, sample: pa.Table, names: list[str]) -> dict[str, Any]:
    checked = package.signature.validate_columns(
        {n: sample.column(n).to_numpy(zero_copy_only=False) for n in names})
    if not checked.ok:
        problems = "; ".join(f"{e.field}: expected {e.expected}, got {e.got}"
                             for e in checked.errors[:5])
        raise UserError(f"the reference rows do not match the model's signature: {problems}")
    return dict(package.predict(checked.columns))


def prediction_table(outputs: dict[str, Any], task: str | None,
                     classes: Any) -> pa.Table:
    """The outputs drift is measured on: ``prediction`` (class labels as text, so their
    shares are compared; numbers for regression) and, for a binary classifier,
    ``score`` (the probability of the second class)."""
    pred = outputs.get("prediction")
    cols: dict[str, Any] = {}
    if pred is not None:
        values = pred.to_pylist() if isinstance(pred, pa.Array | pa.ChunkedArray) \
            else list(np.asarray(pred).tolist())
        if task == "regression":
            cols["prediction"] = pa.array([None if v is None else float(v) for v in values],
                                          pa.float64())
        else:
            cols["prediction"] = pa.array([None if v is None else str(v) for v in values],
                                          pa.string())
    proba = outputs.get("probabilities")
    if proba is not None and task != "regression" and classes is not None \
            and len(classes) == 2:
        cols["score"] = pa.array(_second_column(proba), pa.float64())
    if not cols:
        raise UserError("the model's outputs have neither 'prediction' nor "
                        "'probabilities'; prediction drift needs one.")
    return pa.table(cols)


def _second_column(proba: Any) -> list[float | None]:
    if isinstance(proba, pa.ChunkedArray | pa.Array):
        proba = proba.to_pylist()
    out: list[float | None] = []
    for row in proba:
        if row is None or len(row) < 2 or row[1] is None:
            out.append(None)
        else:
            out.append(float(row[1]))
    return out


def _card_metrics(rec: Any) -> dict[str, float]:
    found = (rec.metrics or {}).get("metrics") or {}
    out: dict[str, float] = {}
    for name, entry in found.items():
        value = entry.get("value") if isinstance(entry, dict) else entry
        if isinstance(value, int | float) and np.isfinite(value):
            out[str(name)] = float(value)
    return out
