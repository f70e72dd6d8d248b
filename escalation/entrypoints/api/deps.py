"""Shared dependencies: the wired ``bootstrap.App`` and the dispute named by the path."""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from fastapi import Depends, Request

from escalation.bootstrap import App
from escalation.service_layer.disputes import resolve_dispute


def get_core(request: Request) -> App:
    """The process's ``bootstrap.App`` (built in the lifespan)."""
    core: App = request.app.state.core
    return core


Core = Annotated[App, Depends(get_core)]


def dispute_from_path(request: Request) -> UUID:
    """The dispute of ``/escalations/{dispute_id}`` or
    ``/sources/{source}/escalations/{external_id}``.

    Raises:
        InvalidInput (422): not a UUID, bad source name, over-long external id.
    """
    p: dict[str, Any] = request.path_params
    if "dispute_id" in p:
        return resolve_dispute(p["dispute_id"])[0]
    return resolve_dispute(source=p["source"], external_id=p["external_id"])[0]


Dispute = Annotated[UUID, Depends(dispute_from_path)]


def path_parameters(path: str) -> dict[str, Any]:
    """``openapi_extra`` declaring the dispute path parameters of ``path`` (they are read by
    :func:`dispute_from_path`, which FastAPI cannot introspect)."""
    if "{dispute_id}" in path:
        params = [{"name": "dispute_id", "in": "path", "required": True,
                   "description": "Dispute UUID.",
                   "schema": {"type": "string", "format": "uuid"},
                   "example": "6f1c2f4e-8a51-4c7e-9a53-2d1b7e0c9f10"}]
    else:
        params = [{"name": "source", "in": "path", "required": True,
                   "description": "Source system name (letters, digits, _.-; 1-64).",
                   "schema": {"type": "string"}, "example": "cfpb"},
                  {"name": "external_id", "in": "path", "required": True,
                   "description": "The source system's dispute id (1-200 characters).",
                   "schema": {"type": "string"}, "example": "2026-0417-0093"}]
    return {"parameters": params}
