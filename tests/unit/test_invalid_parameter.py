"""``InvalidParameter``: one message, each interface's spelling of the parameters."""

from __future__ import annotations

import copy
import pickle

from escalation.domain.errors import InvalidInput, InvalidParameter
from escalation.entrypoints.api.problems import field_of
from escalation.entrypoints.cli_common import option_name


def test_plain_names_by_default_and_the_cli_spelling_on_request() -> None:
    exc = InvalidParameter("{grace_s} must be 0-86400, got {got}", "grace_s", got=-1)
    assert isinstance(exc, InvalidInput)
    assert str(exc) == "grace_s must be 0-86400, got -1"
    assert exc.render(option_name) == "--grace-s must be 0-86400, got -1"
    assert exc.params == ("grace_s",)


def test_values_are_not_read_as_templates() -> None:
    exc = InvalidParameter("{from} ({since}) is after {to}", "from", "to", since="{to}")
    assert str(exc) == "from ({to}) is after to"


def test_a_copy_keeps_the_message() -> None:
    exc = InvalidParameter("{limit} must be 1-{top}", "limit", top=1000)
    for again in (copy.copy(exc), pickle.loads(pickle.dumps(exc))):  # noqa: S301 - our own
        assert str(again) == "limit must be 1-1000"


def test_option_names_are_typers() -> None:
    assert [option_name(p) for p in ("from", "ladder_version")] == ["--from",
                                                                   "--ladder-version"]


def test_api_fields_are_the_parameters_never_cli_flags_nor_message_words() -> None:
    version = InvalidParameter("{ladder_version} must be 1..{top}", "ladder_version", top=9)
    assert field_of(version) == "ladder_version"
    # the field is data: a message reworded (or naming other words) names the same field
    assert field_of(InvalidInput("the amount's currency is unknown", field="currency")) == (
        "currency")
    assert field_of(InvalidInput("grace_s must be 0-86400, got -1")) is None  # named nowhere
    assert field_of(InvalidInput("x", field="due_at").in_item(2)) == "items[2].due_at"
    assert field_of(InvalidInput("x").in_item(2)) == "items[2]"
    assert field_of(InvalidInput("x", field="due_at"), fields=("from", "to")) is None
