"""Source attributes: the complaint's own facts a reviewer reads the dispute with.

A dispute service or a CSV export describes a dispute with facts of its own system (a CFPB
complaint's product, sub-product, issue, company, state): text the escalation does not act
on, kept as evidence of what the dispute was when it was enqueued. They are recorded in the
ENQUEUED ledger row's ``details.source_attributes`` (covered by the row hash) and shown on the
console's dispute page and in the API's dispute JSON.

They are not the *dispute attributes* of ``domain.deadline_rules`` (``EnqueueRequest.attributes``:
typed values a ladder's deadlines need, refused when the ladder does not declare them).

Bounds (the API and the import enforce the same ones, so a row the import keeps is one the
API would accept): at most :data:`MAX_SOURCE_ATTRIBUTES` names, each 1 to
:data:`MAX_NAME_CHARS` characters, each value at most :data:`MAX_VALUE_CHARS` characters;
names and values are single-line text (``escalation.check_text``: no control character, no
lone surrogate).
"""

from __future__ import annotations

from collections.abc import Mapping

from escalation.domain.errors import InvalidInput
from escalation.domain.escalation import check_text

FIELD = "source_attributes"
"""The input field's name (the API body's, ``errors[].field``; the ENQUEUED details key)."""

MAX_SOURCE_ATTRIBUTES = 32
"""Most names one dispute carries (a CFPB export has 18 columns)."""
MAX_NAME_CHARS = 64
"""Longest name (a CSV column header such as ``Company response to consumer``)."""
MAX_VALUE_CHARS = 500
"""Longest value (the longest CFPB issue or company name is well under 300 characters; a free
text narrative is not what these are for)."""


def check_source_attributes(value: Mapping[str, object], field: str = FIELD) -> dict[str, str]:
    """``value`` as a plain ``dict[str, str]`` once every bound holds (module docstring).

    ``field``: the name errors carry (the API's ``source_attributes``; the import passes the
    same). The first breach is reported, names in the given order.

    Raises:
        InvalidInput: more than :data:`MAX_SOURCE_ATTRIBUTES` names, an empty or too long
            name, a value that is not text or is too long, a control character; the error's
            ``field`` is ``field`` (a name's bound) or ``field.<name>`` (its value's).
    """
    if len(value) > MAX_SOURCE_ATTRIBUTES:
        raise InvalidInput(f"{field}: at most {MAX_SOURCE_ATTRIBUTES} names, got "
                           f"{len(value)}", field=field)
    out: dict[str, str] = {}
    for name, item in value.items():
        if not isinstance(name, str) or not name.strip():
            raise InvalidInput(f"{field}: a name must be non-empty text, got {name!r}",
                               field=field)
        if len(name) > MAX_NAME_CHARS:
            raise InvalidInput(f"{field}: name {name[:40]!r}... is {len(name)} characters; "
                               f"at most {MAX_NAME_CHARS}", field=field)
        check_text(name, f"{field} name", field)
        where = f"{field}.{name}"
        if not isinstance(item, str):
            raise InvalidInput(f"{where}: must be text, got {type(item).__name__}",
                               field=where)
        if len(item) > MAX_VALUE_CHARS:
            raise InvalidInput(f"{where}: {len(item)} characters; at most "
                               f"{MAX_VALUE_CHARS}", field=where)
        out[name] = check_text(item, where)
    return out


def recorded_source_attributes(details: object) -> dict[str, str] | None:
    """The source attributes an ENQUEUED row's ``details`` recorded, or None when it holds
    none (a dispute enqueued without them, or before they were kept)."""
    if not isinstance(details, Mapping):
        return None
    got = details.get(FIELD)
    if not isinstance(got, Mapping) or not got:
        return None
    return {str(k): str(v) for k, v in got.items()}
