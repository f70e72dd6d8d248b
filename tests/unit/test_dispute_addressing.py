"""Naming a dispute (service_layer.disputes): by UUID, or by (source, external id) mapped to
the import's stable UUID5; every malformed combination refused naming what is wrong."""

from __future__ import annotations

import uuid

import pytest

from escalation.domain.errors import InvalidInput, NotFound
from escalation.service_layer.disputes import (
    check_source,
    dispute_arg,
    dispute_named,
    resolve_dispute,
)
from escalation.service_layer.importer import stable_dispute_id


def test_a_uuid_names_itself() -> None:
    did = uuid.uuid4()
    assert resolve_dispute(str(did)) == (did, None)
    assert dispute_arg(str(did), None) == did


def test_source_and_external_id_name_the_dispute_an_import_creates() -> None:
    did, ext = resolve_dispute(source="crm", external_id="CASE-1042")
    assert (did, ext) == stable_dispute_id("CASE-1042", "crm")
    assert ext == "CASE-1042"
    assert did != resolve_dispute(source="cfpb", external_id="CASE-1042")[0]  # per source
    assert dispute_arg("CASE-1042", "crm") == did


def test_an_external_id_that_is_a_uuid_is_used_as_is() -> None:
    did = uuid.uuid4()
    assert resolve_dispute(source="crm", external_id=str(did))[0] == did


@pytest.mark.parametrize(("kw", "needle"), [
    ({}, "give dispute_id, or source and external_id"),
    ({"dispute_id": uuid.uuid4(), "source": "crm", "external_id": "x"}, "not both"),
    ({"source": "crm"}, "go together"),
    ({"external_id": "x"}, "go together"),
    ({"source": "crm", "external_id": "   "}, "external id must not be empty"),
    ({"source": "crm", "external_id": "x" * 201}, "external id longer than 200"),
    ({"source": "-crm", "external_id": "x"}, "source must be"),
    ({"dispute_id": "CASE-1042"}, "the source"),
])
def test_malformed_names_are_refused_saying_what_is_wrong(kw: dict[str, object],
                                                          needle: str) -> None:
    with pytest.raises(InvalidInput, match=needle):
        resolve_dispute(**kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("source", ["", "a" * 65, "crm system", "ä"])
def test_check_source_refuses_names_outside_the_pattern(source: str) -> None:
    with pytest.raises(InvalidInput, match="source"):
        check_source(source)
    assert check_source("crm.v2_eu-1") == "crm.v2_eu-1"


def test_dispute_named_takes_a_uuid_or_the_one_dispute_carrying_the_external_id() -> None:
    one, two = uuid.uuid4(), uuid.uuid4()
    carried = {"OLD-1": [one], "DUP": [one, two]}
    asked: list[str] = []

    def find(ext: str) -> list[uuid.UUID]:
        asked.append(ext)
        return carried.get(ext, [])

    assert dispute_named(str(two), find) == two and asked == []  # a UUID is not looked up
    assert dispute_named(" OLD-1 ", find) == one
    with pytest.raises(NotFound, match="no dispute with id or external id 'NOPE'"):
        dispute_named("NOPE", find)
    with pytest.raises(InvalidInput, match="names 2 disputes") as caught:
        dispute_named("DUP", find)
    assert caught.value.field == "dispute_id"
