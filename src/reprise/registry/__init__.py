"""Layer 5: the model registry — safe model packages (model, fitted preprocessing,
signature, example, environment, model card), immutable versions, aliases with
rollback, a hash-chained audit log, and lineage from a model to its data.

Nothing heavy is imported here: torch, scikit-learn and pandas load when a
package is built or loaded.

Example (in a pipeline)::

    @step
    def package(model: Any, x_train: pd.DataFrame, evaluation: dict) -> ModelPackage:
        return reprise.registry.package_model(model, sample=x_train, evaluation=evaluation)

    reprise models register churn --run RUN        # then: promote, serve
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from reprise.core._lazy import lazy_attributes
from reprise.registry._infer import infer_signature
from reprise.registry._servable import ModelSource, Servable
from reprise.registry._signature import Field, FieldError, Signature, Validated

_LAZY: dict[str, str] = {
    "ModelPackage": "reprise.registry._package",
    "PackageError": "reprise.registry._package",
    "read_package": "reprise.registry._package",
    "package_model": "reprise.registry._build",
    "AuditReport": "reprise.registry._audit",
    "is_model_name": "reprise.registry._registry",
    **{name: "reprise.registry._export" for name in (
        "export_docker", "export_kubernetes", "export_mlflow")},
    "optimize": "reprise.registry._optimize",
    **{name: "reprise.registry._api" for name in (
        "RegistrySource", "archive_model", "audit_log", "delete_model", "describe_model",
        "get_model", "list_models", "load_model", "model_card", "model_lineage", "promote",
        "register", "register_model",
        "register_package", "rollback", "verify_audit")},
}

__all__ = [
    "AuditReport",
    "Field",
    "FieldError",
    "ModelPackage",
    "ModelSource",
    "PackageError",
    "RegistrySource",
    "Servable",
    "Signature",
    "Validated",
    "archive_model",
    "audit_log",
    "delete_model",
    "describe_model",
    "export_docker",
    "export_kubernetes",
    "export_mlflow",
    "get_model",
    "infer_signature",
    "is_model_name",
    "list_models",
    "load_model",
    "model_card",
    "model_lineage",
    "optimize",
    "package_model",
    "promote",
    "read_package",
    "register",
    "register_model",
    "register_package",
    "rollback",
    "verify_audit",
]
if TYPE_CHECKING:
    from reprise.registry._api import (
        RegistrySource,
        archive_model,
        audit_log,
        delete_model,
        describe_model,
        get_model,
        list_models,
        load_model,
        model_card,
        model_lineage,
        promote,
        register,
        register_model,
        register_package,
        rollback,
        verify_audit,
    )
    from reprise.registry._audit import AuditReport
    from reprise.registry._build import package_model
    from reprise.registry._export import export_docker, export_kubernetes, export_mlflow
    from reprise.registry._optimize import optimize
    from reprise.registry._package import ModelPackage, PackageError, read_package
    from reprise.registry._registry import is_model_name


__getattr__ = lazy_attributes(__name__, _LAZY)
