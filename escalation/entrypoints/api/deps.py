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
