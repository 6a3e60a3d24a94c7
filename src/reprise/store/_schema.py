"""The metadata schema (SQLAlchemy Core), as of the newest migration.

The Alembic scripts in ``migrations/versions`` are frozen copies of each step;
this module is the live description the queries use. A test checks that a
database upgraded through every migration matches these tables.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    text,
)

from reprise.store._rows import HEAD_REVISION

__all__ = ["HEAD_REVISION", "metadata"]

# HEAD_REVISION (the newest revision in migrations/versions) lives in _rows, which
# needs no SQLAlchemy, so the read-only SQLite reader can check it too.

metadata = MetaData()

ID = String(32)
HASH = String(64)
NAME = String(250)

environments = Table(
    "environments",
    metadata,
    Column("hash", HASH, primary_key=True),
    Column("fingerprint", Text, nullable=False),
    Column("created_at", Float, nullable=False),
)

runs = Table(
    "runs",
    metadata,
    Column("id", ID, primary_key=True),
    Column("parent_id", ID, ForeignKey("runs.id"), index=True),
    Column("kind", String(16), nullable=False),
    Column("name", NAME, nullable=False),
    Column("status", String(16), nullable=False),
    Column("started_at", Float, nullable=False),
    Column("ended_at", Float),
    Column("seed", BigInteger),
    Column("env_hash", HASH, ForeignKey("environments.hash")),
    Column("code_hash", HASH),
    Column("git_commit", String(64)),
    Column("git_dirty", Boolean),
    Column("host", String(255)),
    Column("user", String(255)),
    Column("pid", Integer),
    Column("error", Text),
    Column("energy_joules", Float),
    Column("energy_source", String(32)),
    Column("journal_offset", BigInteger, nullable=False, default=0),
    # revision 0010: the newest runs of a name or a status, read from one index range
    Index("ix_runs_name_id", "name", "id"),
    Index("ix_runs_status_id", "status", "id"),
    # revision 0010 also adds ix_runs_id_pattern (id varchar_pattern_ops) on PostgreSQL only,
    # for id-prefix lookups; it is not declared here since SQLite has no such operator class
)

params = Table(
    "params",
    metadata,
    Column("run_id", ID, ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    Column("key", NAME, primary_key=True),
    Column("value", Text, nullable=False),  # canonical JSON
)

tags = Table(
    "tags",
    metadata,
    Column("run_id", ID, ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    Column("key", NAME, primary_key=True),
    Column("value", Text, nullable=False),
)

metrics = Table(
    "metrics",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", ID, ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    Column("key", NAME, nullable=False),
    Column("step", BigInteger, nullable=False),
    Column("value", Float),  # NULL stands for NaN (SQLite cannot store NaN)
    Column("timestamp", Float, nullable=False),
    Index("ix_metrics_run_key_step", "run_id", "key", "step"),
)

artifacts = Table(
    "artifacts",
    metadata,
    Column("hash", HASH, primary_key=True),
    Column("size", BigInteger, nullable=False),
    Column("kind", String(32), nullable=False),
    Column("materializer", String(64), nullable=False),
    Column("meta", Text, nullable=False, default="{}"),
    Column("created_at", Float, nullable=False),
)

run_artifacts = Table(
    "run_artifacts",
    metadata,
    Column("run_id", ID, ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    Column("name", String(255), primary_key=True),
    Column("artifact_hash", HASH, ForeignKey("artifacts.hash"), nullable=False, index=True),
)

# --- revision 0002: pipelines and lineage, datasets, registry, audit -------------------

step_runs = Table(
    "step_runs",
    metadata,
    Column("id", ID, primary_key=True),
    Column("run_id", ID, ForeignKey("runs.id", ondelete="CASCADE"), nullable=False, index=True),
    Column("step_name", NAME, nullable=False),
    Column("cache_key", HASH, index=True),
    Column("status", String(16), nullable=False),
    Column("reused_from", ID),
    Column("started_at", Float),
    Column("ended_at", Float),
    Column("duration", Float),
    Column("energy_joules", Float),
    Column("error", Text),
    Column("seed", BigInteger),
    Column("code_hash", HASH),
    Column("details", Text, nullable=False, default="{}"),
)

step_inputs = Table(
    "step_inputs",
    metadata,
    Column("step_run_id", ID, ForeignKey("step_runs.id", ondelete="CASCADE"), primary_key=True),
    Column("name", String(255), primary_key=True),
    Column("artifact_hash", HASH, ForeignKey("artifacts.hash"), nullable=False, index=True),
    Column("source", Text),
)

step_outputs = Table(
    "step_outputs",
    metadata,
    Column("step_run_id", ID, ForeignKey("step_runs.id", ondelete="CASCADE"), primary_key=True),
    Column("name", String(255), primary_key=True),
    Column("artifact_hash", HASH, ForeignKey("artifacts.hash"), nullable=False, index=True),
)

datasets = Table(
    "datasets",
    metadata,
    Column("name", NAME, primary_key=True),
    Column("version", Integer, primary_key=True),
    Column("artifact_hash", HASH, ForeignKey("artifacts.hash"), nullable=False),
    Column("schema", Text),
    Column("profile", Text),
    Column("created_at", Float, nullable=False),
    # revision 0003
    Column("format", String(16)),
    Column("rows", BigInteger),
    Column("meta", Text, nullable=False, server_default="{}"),
)

# --- revision 0003: dataset schemas --------------------------------------------------

dataset_schemas = Table(
    "dataset_schemas",
    metadata,
    Column("name", NAME, primary_key=True),
    Column("spec", Text),  # pandera's JSON form, when the schema has one
    Column("source", Text),  # where it came from (FILE.py:NAME or a YAML/JSON path)
    Column("updated_at", Float, nullable=False),
)

models = Table(
    "models",
    metadata,
    Column("name", NAME, primary_key=True),
    Column("description", Text),
    Column("created_at", Float, nullable=False),
    # revision 0005: the highest version number ever given (deleting never lowers it)
    Column("last_version", Integer, nullable=False, server_default="0"),
)

model_versions = Table(
    "model_versions",
    metadata,
    Column("name", NAME, ForeignKey("models.name"), primary_key=True),
    Column("version", Integer, primary_key=True),
    Column("run_id", ID, ForeignKey("runs.id")),
    Column("package_hash", HASH, ForeignKey("artifacts.hash"), nullable=False),
    Column("signature", Text),
    Column("metrics", Text),
    Column("status", String(16), nullable=False),
    Column("created_at", Float, nullable=False),
    # revision 0004
    Column("meta", Text, nullable=False, server_default="{}"),
)

aliases = Table(
    "aliases",
    metadata,
    Column("name", NAME, primary_key=True),
    Column("alias", NAME, primary_key=True),
    Column("version", Integer, nullable=False),
    Column("updated_at", Float, nullable=False),
    # revision 0005: an alias always names a version that exists
    ForeignKeyConstraint(["name", "version"], ["model_versions.name", "model_versions.version"],
                         name="fk_aliases_model_versions"),
)

audit_events = Table(
    "audit_events",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("time", Float, nullable=False),
    Column("actor", String(255), nullable=False),
    Column("action", String(64), nullable=False),
    Column("subject", String(255), nullable=False),
    Column("payload", Text, nullable=False),
    Column("prev_hash", HASH, nullable=False),
    Column("hash", HASH, nullable=False, unique=True),
    Index("ix_audit_events_subject_time", "subject", "time"),  # revision 0009
)

# --- revision 0004: alias history (promotions, popped by rollbacks) -------------------

alias_history = Table(
    "alias_history",
    metadata,
    Column("seq", Integer, primary_key=True, autoincrement=True),
    Column("name", NAME, nullable=False),
    Column("alias", NAME, nullable=False),
    Column("version", Integer, nullable=False),
    Column("time", Float, nullable=False),
    Index("ix_alias_history_name_alias", "name", "alias"),
)

# --- revision 0006: rollouts (deployments), their outcome buckets, leases ---------------

rollouts = Table(
    "rollouts",
    metadata,
    Column("id", ID, primary_key=True),
    Column("name", NAME, nullable=False),
    Column("alias", NAME, nullable=False),
    Column("stable", Integer, nullable=False),
    Column("candidate", Integer, nullable=False),
    Column("strategy", String(16), nullable=False),
    Column("steps", Text, nullable=False),  # JSON list of weights
    Column("interval_s", Float, nullable=False),
    Column("policy", Text, nullable=False),  # JSON: the resolved policy
    Column("key", Text, nullable=False),  # JSON: {"header": ...} | {"column": ...} | {}
    Column("state", String(16), nullable=False),
    Column("step", Integer, nullable=False),
    Column("weight", Float, nullable=False),
    Column("phase", String(16), nullable=False),
    Column("step_started_at", Float, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("ended_at", Float),
    Column("failures", Integer, nullable=False),
    Column("decisions", Integer, nullable=False),
    Column("reason", Text),
    Column("actor", String(255), nullable=False),
    Column("analyzed_at", Float),
    Index("ix_rollouts_name_alias", "name", "alias"),
    # at most one running rollout per alias, whatever the callers checked first
    Index("ux_rollouts_running", "name", "alias", unique=True,
          sqlite_where=text("state = 'running'"), postgresql_where=text("state = 'running'")),
)

rollout_buckets = Table(
    "rollout_buckets",
    metadata,
    Column("rollout_id", ID, ForeignKey("rollouts.id", ondelete="CASCADE"), primary_key=True),
    Column("version", Integer, primary_key=True),
    Column("bucket", BigInteger, primary_key=True),
    Column("server", String(255), primary_key=True),
    Column("requests", BigInteger, nullable=False),
    Column("errors", BigInteger, nullable=False),
    Column("latency", Text, nullable=False),  # JSON list of counts per LATENCY_BOUNDS_MS
    Column("outputs", Text, nullable=False),  # JSON {label: count}
    Column("shadow_compared", BigInteger, nullable=False),
    Column("shadow_agreed", BigInteger, nullable=False),
    Column("shadow_dropped", BigInteger, nullable=False),
)

leases = Table(
    "leases",
    metadata,
    Column("key", String(255), primary_key=True),
    Column("holder", String(255), nullable=False),
    Column("expires_at", Float, nullable=False),
)

# --- revision 0007: the request log (chunks of logged requests) and feedback ------------

request_log = Table(
    "request_log",
    metadata,
    Column("id", ID, primary_key=True),
    Column("name", NAME, nullable=False),
    Column("version", Integer, nullable=False),
    Column("server", String(255), nullable=False),
    Column("first_at", Float, nullable=False),
    Column("last_at", Float, nullable=False),
    Column("requests", BigInteger, nullable=False),
    Column("rows", BigInteger, nullable=False),
    Column("artifact_hash", HASH, ForeignKey("artifacts.hash"), nullable=False),
    Column("size", BigInteger, nullable=False),
    Column("created_at", Float, nullable=False),
    Index("ix_request_log_name_time", "name", "first_at"),
    Index("ix_request_log_created", "created_at"),
)

feedback = Table(
    "feedback",
    metadata,
    Column("name", NAME, primary_key=True),
    Column("request_id", String(128), primary_key=True),
    Column("label", Text, nullable=False),  # JSON: a string, number or boolean
    Column("received_at", Float, nullable=False),
)

# --- revision 0008: monitoring (drift references of model versions, live windows) -------

monitor_references = Table(
    "monitor_references",
    metadata,
    Column("name", NAME, primary_key=True),
    Column("version", Integer, primary_key=True),
    Column("dataset", String(300), primary_key=True),  # the reference rows: NAME@N
    Column("artifact_hash", HASH, ForeignKey("artifacts.hash"), nullable=False),
    Column("sample_rows", BigInteger, nullable=False),
    Column("predictions", String(32), nullable=False),  # validation | reference_sample
    Column("created_at", Float, nullable=False),
)

monitor_windows = Table(
    "monitor_windows",
    metadata,
    Column("id", ID, primary_key=True),
    Column("name", NAME, nullable=False),
    Column("version", Integer, nullable=False),
    Column("start", Float, nullable=False),
    Column("end", Float, nullable=False),
    Column("rows", BigInteger, nullable=False),
    Column("labelled", BigInteger, nullable=False),
    Column("input_verdict", String(16), nullable=False),
    Column("prediction_verdict", String(16), nullable=False),
    Column("performance_verdict", String(16), nullable=False),
    Column("reference_hash", HASH, nullable=False),
    Column("summary", Text, nullable=False),  # JSON: per-column statistics, alarms
    Column("computed_at", Float, nullable=False),
    Index("ix_monitor_windows_name_end", "name", "end"),
)
