"""Addressing a dispute: by its UUID, or by (source, external id).

A source system's own id (e.g. a CFPB Complaint ID) maps to a stable UUID5 in the import
namespace, ``uuid5(ID_NAMESPACE, "<source>:<external id>")`` (``importer.stable_dispute_id``):
the same mapping ``escalation import`` uses, so a dispute imported from a file and one
created over the HTTP API with the same (source, external id) are the same dispute. An
external id that is itself a UUID is used as is, as the importer does.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from uuid import UUID

from escalation.domain.errors import InvalidInput, NotFound, about
from escalation.domain.escalation import MAX_EXTERNAL_ID_LEN, parse_dispute_id

SOURCE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def check_source(source: str) -> str:
    """A source name: 1-64 letters, digits, ``_.-``, starting alphanumeric.

    Raises:
        InvalidInput: anything else.
    """
    if not SOURCE_RE.match(source):
        raise InvalidInput(
            f"source must be 1-64 letters, digits or _.- starting with a letter or digit, "
            f"got {source[:80]!r}", field="source")
    return source


def resolve_dispute(
    dispute_id: object | None = None, *, source: str | None = None,
    external_id: str | None = None,
) -> tuple[UUID, str | None]:
    """(dispute UUID, external id or None) from exactly one way of naming a dispute.

    Args:
        dispute_id: a UUID (or its text).
        source, external_id: the source system's name and its id for the dispute (both).

    Raises:
        InvalidInput: both or neither ways given, half of (source, external id), a bad UUID,
            a bad source name, an empty or over-long (> 200 characters) external id.
    """
    if source is None and external_id is None:
        if dispute_id is None:
            raise InvalidInput("give dispute_id, or source and external_id")
        try:
            return parse_dispute_id(dispute_id), None
        except InvalidInput as exc:
            raise InvalidInput(f"{exc} (a dispute named by its source system's id needs "
                               "that system's name too: the source)",
                               field="dispute_id") from None
    if dispute_id is not None:
        raise InvalidInput("give dispute_id or (source, external_id), not both")
    if source is None or external_id is None:
        raise InvalidInput("source and external_id go together: give both", field="source")
    check_source(source)
    if not external_id.strip():
        raise InvalidInput("external id must not be empty (or only spaces)", field="external_id")
    if len(external_id) > MAX_EXTERNAL_ID_LEN:
        raise InvalidInput(f"external id longer than {MAX_EXTERNAL_ID_LEN} characters",
                           field="external_id")
    # local: the bulk importer's module (csv, difflib, pickle, ...) is loaded only by the
    # commands that name a dispute by its external id, not by every `enqueue`
    from escalation.service_layer.importer import stable_dispute_id

    with about("external_id"):
        did, text = stable_dispute_id(external_id, source)
    return did, text if text is not None else None


def dispute_arg(value: str, source: str | None) -> UUID:
    """The dispute of a CLI argument: a UUID, or with ``source`` the external id.

    Raises:
        InvalidInput: not a UUID (without ``source``), or a bad source / external id.
    """
    if source is None:
        return resolve_dispute(value)[0]
    return resolve_dispute(source=source, external_id=value)[0]


def dispute_named(name: str, find: Callable[[str], Sequence[UUID]]) -> UUID:
    """The dispute a CLI argument names: its UUID, else the one dispute whose escalation
    carries ``name`` as its external id, from any source (``find``: external id -> the
    dispute ids carrying it; ``audit show``, ``audit case-file``).

    Raises:
        NotFound: no dispute has that id or external id.
        InvalidInput: (field ``dispute_id``) the external id names several disputes (the
            message lists up to five, to give one by its UUID).
    """
    try:
        return parse_dispute_id(name)
    except InvalidInput:
        pass
    found = list(find(name.strip())) if name.strip() else []
    if not found:
        raise NotFound(f"no dispute with id or external id {name!r}")
    if len(found) > 1:
        raise InvalidInput(f"external id {name!r} names {len(found)} disputes: "
                           + ", ".join(str(f) for f in found[:5]) + "; give the dispute UUID",
                           field="dispute_id")
    return found[0]
