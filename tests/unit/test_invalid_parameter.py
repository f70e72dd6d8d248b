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


def test_api_field_words_name_query_parameters_never_cli_flags() -> None:
    assert field_of("ladder version must be 1..2147483647, got 0") == "ladder_version"
    assert field_of("grace_s must be 0-86400, got -1") == "grace_s"
