"""Layer 3: versioned datasets, validation (pandera), profiles, deterministic splits, loaders.

Nothing heavy is imported here: pyarrow, pandera and torch load when a function
needs them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reprise.core._lazy import lazy_attributes

_EXPORTS: dict[str, str] = {
    "Dataset": "reprise.data._dataset",
    "AddResult": "reprise.data._dataset",
    "DatasetNotFoundError": "reprise.data._dataset",
    "add_dataset": "reprise.data._dataset",
    "attach_schema": "reprise.data._dataset",
    "checkout_dataset": "reprise.data._dataset",
    "get_dataset": "reprise.data._dataset",
    "list_datasets": "reprise.data._dataset",
    "parse_ref": "reprise.data._dataset",
    "NA_VALUES": "reprise.core._nulls",
    "DataFormatError": "reprise.data._formats",
    "TabularSource": "reprise.data._formats",
    "ValidationError": "reprise.data._validate",
    "ValidationReport": "reprise.data._validate",
    "validate_frame": "reprise.data._validate",
    "profile_batches": "reprise.data._profile",
    "profile_table": "reprise.data._profile",
    "profile_parquet": "reprise.data._profile",
    "diff_profiles": "reprise.data._profile_diff",
    "profile_files": "reprise.data._profile",
    "column_type_changes": "reprise.data._profile_diff",
    "validate_name": "reprise.data._dataset",
    "split": "reprise.data._split",
    "assign_splits": "reprise.data._split",
    "SeededSampler": "reprise.data._loader",
    "make_loader": "reprise.data._loader",
    "worker_init": "reprise.data._loader",
}

__all__ = [
    "NA_VALUES",
    "AddResult",
    "DataFormatError",
    "Dataset",
    "DatasetNotFoundError",
    "SeededSampler",
    "TabularSource",
    "ValidationError",
    "ValidationReport",
    "add_dataset",
    "assign_splits",
    "attach_schema",
    "checkout_dataset",
    "column_type_changes",
    "diff_profiles",
    "get_dataset",
    "list_datasets",
    "make_loader",
    "parse_ref",
    "profile_batches",
    "profile_files",
    "profile_parquet",
    "profile_table",
    "split",
    "validate_frame",
    "validate_name",
    "worker_init",
]

if TYPE_CHECKING:
    from reprise.core._nulls import NA_VALUES
    from reprise.data._dataset import (
        AddResult,
        Dataset,
        DatasetNotFoundError,
        add_dataset,
        attach_schema,
        checkout_dataset,
        get_dataset,
        list_datasets,
        parse_ref,
        validate_name,
    )
    from reprise.data._formats import DataFormatError, TabularSource
    from reprise.data._loader import SeededSampler, make_loader, worker_init
    from reprise.data._profile import (
        profile_batches,
        profile_files,
        profile_parquet,
        profile_table,
    )
    from reprise.data._profile_diff import column_type_changes, diff_profiles
    from reprise.data._split import assign_splits, split
    from reprise.data._validate import ValidationError, ValidationReport, validate_frame


__getattr__ = lazy_attributes(__name__, _EXPORTS)


def __dir__() -> list[str]:
    return sorted(__all__)
