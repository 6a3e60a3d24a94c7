"""Layer 0: hashing, ids, errors, configuration, atomic writes, persisted records."""

from __future__ import annotations

from reprise.core import errors
from reprise.core._atomic import TMP_PREFIX, atomic_write, atomic_write_bytes, fsync_dir
from reprise.core._config import (
    WORKSPACE_DIR,
    Config,
    create_workspace,
    find_workspace,
    load_config,
)
from reprise.core._hashing import (
    canonical_json,
    hash_bytes,
    hash_file,
    hash_value,
    is_hash,
    new_hasher,
)
from reprise.core._ids import new_id, shortest_unique_prefixes
from reprise.core._lazy import require
from reprise.core._rollout_types import (
    LATENCY_BOUNDS_MS,
    ROLLOUT_STATES,
    STRATEGIES,
    BucketRow,
    RolloutRecord,
)
from reprise.core._types import (
    ArtifactRecord,
    DatasetRecord,
    MetricPoint,
    RunKind,
    RunRecord,
    RunStatus,
)

__all__ = [
    "LATENCY_BOUNDS_MS",
    "ROLLOUT_STATES",
    "STRATEGIES",
    "TMP_PREFIX",
    "WORKSPACE_DIR",
    "ArtifactRecord",
    "BucketRow",
    "DatasetRecord",
    "Config",
    "MetricPoint",
    "RolloutRecord",
    "RunKind",
    "RunRecord",
    "RunStatus",
    "atomic_write",
    "atomic_write_bytes",
    "canonical_json",
    "create_workspace",
    "errors",
    "find_workspace",
    "fsync_dir",
    "hash_bytes",
    "hash_file",
    "hash_value",
    "is_hash",
    "load_config",
    "new_hasher",
    "new_id",
    "require",
    "shortest_unique_prefixes",
]
