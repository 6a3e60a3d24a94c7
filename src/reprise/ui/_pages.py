"""The dashboard's pages: one HTML shell per page (``static/shell.html``) that loads the
shared script (``static/js/reprise.js``) and the page's own (``static/js/PAGE.js``), which
draws the page from the JSON API. Everything the browser needs is served from the
package (plotly.js from the plotly package): nothing is fetched from elsewhere.

A page is served only by a name out of the fixed set found in ``static/js`` when the
server starts, and static files only from ``static/`` (Starlette's StaticFiles refuses
paths that leave it): no request reads a file by a client-given path."""

from __future__ import annotations

import re
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fastapi import APIRouter

__all__ = ["PAGES", "STATIC", "router"]

STATIC = Path(str(files("reprise.ui") / "static"))
# pages in the navigation bar, in order; a page not listed (run, compare...) is reached by
# a link
NAV = ("runs", "lineage", "datasets", "studies", "models", "rollouts", "monitoring",
       "tradeoffs")
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_SHARED = {"reprise"}
PAGES = frozenset(p.stem for p in (STATIC / "js").glob("*.js")
                  if _NAME.match(p.stem) and p.stem not in _SHARED)
# what a page may load and where its scripts may connect: this server only (plotly puts
# style attributes on the elements it draws, hence 'unsafe-inline' for styles alone)
CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
       "img-src 'self' data: blob:; connect-src 'self'; frame-src 'self'; "
       "frame-ancestors 'self'; base-uri 'none'; form-action 'self'")


def _plotly_js() -> Path:
    import plotly

    return Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


def router() -> APIRouter:
    from fastapi import APIRouter
    from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response
    from starlette.staticfiles import StaticFiles

    shell = (STATIC / "shell.html").read_text(encoding="utf-8")
    nav = ",".join(p for p in NAV if p in PAGES)
    headers = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
               "Referrer-Policy": "no-referrer", "Cache-Control": "no-cache"}
    router = APIRouter(include_in_schema=False)

    @router.get("/")
    def home() -> Response:
        return RedirectResponse("/runs")

    @router.get("/static/plotly.min.js")
    def plotly_js() -> Response:
        return FileResponse(_plotly_js(), media_type="text/javascript",
                            headers={"Cache-Control": "max-age=86400",
                                     "X-Content-Type-Options": "nosniff"})

    static = StaticFiles(directory=STATIC)

    @router.get("/static/{path:path}")
    async def static_file(path: str) -> Response:
        from starlette.exceptions import HTTPException

        try:
            found = await static.get_response(path, {"type": "http", "method": "GET",
                                                     "headers": []})
        except HTTPException as exc:
            return Response(status_code=exc.status_code)
        found.headers["X-Content-Type-Options"] = "nosniff"
        found.headers["Cache-Control"] = "no-cache"
        return found

    @router.get("/{page}")
    def page(page: str) -> Response:
        if page not in PAGES:
            return HTMLResponse("<!doctype html><title>Not found</title><p>No page here. "
                                '<a href="/runs">Runs</a></p>', status_code=404,
                                headers=headers)
        html = shell.replace("{{page}}", page).replace("{{nav}}", nav)
        return HTMLResponse(html, headers=headers)

    return router
