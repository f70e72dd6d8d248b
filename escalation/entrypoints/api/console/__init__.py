"""The compliance console: server-rendered pages under ``/console`` in the API app
(docs/console.md). ``install(app)`` adds its routes and static assets (a rotated
session id is sent by the API's edge middleware, ``edge.Edge``)."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

HERE = Path(__file__).parent


def install(app: FastAPI) -> None:
    """Add the console routes and serve its assets from ``/console/static``."""
    from escalation.entrypoints.api.console import ops_pages, routes

    app.include_router(ops_pages.router)
    app.include_router(routes.router)
    app.add_exception_handler(routes.LoginRequired, routes.on_login_required)
    app.mount("/console/static", StaticFiles(directory=HERE / "static"), name="console-static")
