"""The studies part of the dashboard's API: the workspace's tuning studies, and one
study's trials (state, value, params, the run of each), its best trial and its parameter
importances, as ``reprise tune show`` gives them (``reprise.tune``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from reprise.ui._context import UiContext, clean

if TYPE_CHECKING:
    from fastapi import APIRouter

__all__ = ["router"]


def router(ctx: UiContext) -> APIRouter:
    from fastapi import APIRouter, Path

    router = APIRouter(tags=["studies"])

    @router.get("/api/studies", summary="The tuning studies: direction, trials, best value")
    def studies() -> dict[str, Any]:
        from reprise.tune import list_studies

        return {"studies": clean(list_studies(ctx.workspace))}

    @router.get("/api/studies/{name:path}", summary="One study: its trials (state, value, "
                "params, run), counts by state, best trial, settings, parameter importances "
                "(fANOVA)")
    def study(name: str = Path(description="The study's name (reprise tune list).")
              ) -> dict[str, Any]:
        from reprise.tune import show_study

        answer: dict[str, Any] = clean(show_study(ctx.workspace, name))
        return answer

    return router
