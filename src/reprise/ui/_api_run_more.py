"""More of one run for its page: its metric keys (how many points each, and which are
system metrics: the sampler's ``system/*``, the Trainer's throughput, data wait, memory and
energy), its full environment fingerprint (packages included) and the registered model
versions it produced."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from reprise.core.errors import NotFoundError
from reprise.ui._context import UiContext, clean

if TYPE_CHECKING:
    from fastapi import APIRouter

__all__ = ["is_system_metric", "router"]

# the last part of a key the Trainer logs about the machine rather than the model
_SYSTEM_LEAVES = {"data_wait_frac", "data_wait_fraction", "data_wait_seconds",
                  "energy_j", "energy_j_per_step", "peak_mem_mb", "samples_per_s", "step_ms",
                  "compute_seconds", "seconds"}
_HIDDEN_ENV = ("env_vars",)  # variables' values may be secrets: not shown


def is_system_metric(key: str) -> bool:
    """A metric about the machine: ``system/*`` (the run's sampler), or one of the
    Trainer's throughput, data-wait, memory and energy figures."""
    parts = key.split("/")
    return "system" in parts[:-1] or parts[-1] in _SYSTEM_LEAVES


def router(ctx: UiContext) -> APIRouter:
    from fastapi import APIRouter

    router = APIRouter(tags=["runs"])

    @router.get("/api/runs/{run_id}/metric-keys",
                summary="A run's metric keys: points, first and last step, last value, "
                "and whether each is a system metric")
    def metric_keys(run_id: str) -> dict[str, Any]:
        ctx.fresh()
        rec = ctx.store.get_run(run_id)
        keys = {key: {"key": key, "points": n, "first_step": lo, "last_step": hi,
                      "system": is_system_metric(key)}
                for key, (n, lo, hi) in ctx.store.metric_key_stats(rec.id).items()}
        for key, p in ctx.store.latest_metrics([rec.id])[rec.id].items():
            if key in keys:
                keys[key]["last"] = p.value
        answer: dict[str, Any] = clean({"run_id": rec.id,
                                        "keys": [keys[k] for k in sorted(keys)]})
        return answer

    @router.get("/api/runs/{run_id}/environment",
                summary="The run's environment fingerprint in full: python, os, cpu, gpu, "
                "cuda, git and every package with its version")
    def environment(run_id: str) -> dict[str, Any]:
        ctx.fresh()
        rec = ctx.store.get_run(run_id)
        if rec.env_hash is None:
            raise NotFoundError(f"run {rec.id} recorded no environment.")
        fp = ctx.store.get_environment(rec.env_hash)
        out = {k: v for k, v in fp.items() if k not in _HIDDEN_ENV}
        out["hash"] = rec.env_hash
        packages = fp.get("packages") or {}
        out["packages"] = [{"name": n, "version": v} for n, v in sorted(
            packages.items(), key=lambda kv: str(kv[0]).lower())] if isinstance(
            packages, dict) else packages
        answer: dict[str, Any] = clean(out)
        return answer

    @router.get("/api/runs/{run_id}/models",
                summary="The registered model versions the run produced")
    def models(run_id: str) -> dict[str, Any]:
        ctx.fresh()
        rec = ctx.store.get_run(run_id)
        found = [m for m in ctx.store.list_model_versions() if m.run_id == rec.id]
        aliases: dict[str, dict[str, int]] = {}
        out = []
        for m in found:
            if m.name not in aliases:
                aliases[m.name] = ctx.store.get_aliases(m.name)
            out.append({"name": m.name, "version": m.version, "status": m.status,
                        "aliases": sorted(a for a, v in aliases[m.name].items()
                                          if v == m.version)})
        return {"run_id": rec.id, "models": out}

    return router
