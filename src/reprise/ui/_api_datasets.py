"""The datasets part of the dashboard's API: the datasets with their versions, one
version (source, schema, validation, the profile ``reprise data add`` computed, with its
histograms) and the diff of two versions (``reprise data diff``'s)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from reprise.core.errors import NotFoundError
from reprise.ui._context import UiContext, clean

if TYPE_CHECKING:
    from fastapi import APIRouter

    from reprise.core._types import DatasetRecord

__all__ = ["router"]


def _version_row(r: DatasetRecord) -> dict[str, Any]:
    validation = r.meta.get("validation") or {}
    return {"version": r.version, "ref": r.ref, "hash": r.artifact_hash, "format": r.format,
            "rows": r.rows, "columns": len(r.schema) if r.schema else None,
            "size": r.meta.get("size"), "source": r.meta.get("source"),
            "failing_rows": validation.get("failing_rows"), "created_at": r.created_at}


def router(ctx: UiContext) -> APIRouter:
    from fastapi import APIRouter, Path, Query

    router = APIRouter(tags=["datasets"])
    dataset_name = Path(description="The dataset's name (reprise data add NAME ...).")

    def _get(ref: str) -> DatasetRecord:
        from reprise.data._dataset import DatasetNotFoundError, get_dataset

        try:
            return get_dataset(ref, workspace=ctx.workspace)
        except DatasetNotFoundError as exc:  # a missing dataset or version: 404
            raise NotFoundError(str(exc)) from None

    @router.get("/api/datasets", summary="Every dataset with its versions, newest first")
    def datasets() -> dict[str, Any]:
        from reprise.data._dataset import list_datasets, summarise_datasets

        ctx.fresh()
        records = list_datasets(workspace=ctx.workspace)
        rows = summarise_datasets(workspace=ctx.workspace)
        for row in rows:
            row["versions_list"] = [_version_row(r) for r in reversed(records)
                                    if r.name == row["name"]]
        return {"datasets": clean(rows)}

    @router.get("/api/datasets/{name}", summary="One version of a dataset: source, schema, "
                "validation, profile (with histograms), and the dataset's other versions")
    def dataset(name: str = dataset_name, version: str = Query(
            "latest", description="A version number, or 'latest'.")) -> dict[str, Any]:
        from reprise.data._dataset import validate_name

        validate_name(name)
        ctx.fresh()
        rec = _get(f"{name}@{version}")
        versions = ctx.store.list_dataset_versions(name)
        out: dict[str, Any] = {**_version_row(rec), "name": rec.name, "schema": rec.schema,
                               "profile": rec.profile, "meta": rec.meta,
                               "versions": [_version_row(v) for v in reversed(versions)]}
        answer: dict[str, Any] = clean(out)
        return answer

    @router.get("/api/datasets/{name}/diff", summary="What changed between two versions: "
                "rows, columns added or removed, type changes, per-column statistics")
    def diff(name: str = dataset_name,
             old: str = Query(..., description="The older version (a number or 'latest')."),
             new: str = Query(..., description="The newer version (a number or 'latest').")
             ) -> dict[str, Any]:
        from reprise.data._dataset import diff_datasets, validate_name

        validate_name(name)
        ctx.fresh()
        a, b = _get(f"{name}@{old}"), _get(f"{name}@{new}")
        answer: dict[str, Any] = clean(diff_datasets(a.ref, b.ref, workspace=ctx.workspace))
        return answer

    return router
