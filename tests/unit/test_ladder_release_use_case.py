"""``ladder release`` and the first-use baseline (service_layer.ladder_release) on an
in-memory release history and a ladder directory in a temporary folder: versions are
released in order, once, with who and why; an invalid, missing or edited file releases
nothing; the baseline releases the valid prefix of each ladder with no release yet."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from escalation.adapters.ladder_files import LadderCatalog
from escalation.domain.errors import ErrorCode, LadderError, LadderVersionNotFound, code_of
from escalation.service_layer.ladder_release import (
    BASELINE_ACTOR,
    ReleaseVersion,
    baseline_releases,
    release_version,
)
from tests.fakes import FakeReleaseHistory

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
ROOT = Path(__file__).resolve().parents[2]
V1 = (ROOT / "ladders" / "dispute_review.v1.toml").read_text().replace(
    '"dispute_review"', '"toy"')
V2 = V1.replace("version = 1\n", "version = 2\nprevious_version = 1\n").replace(
    "amount = 48", "amount = 36")


def _dir(tmp_path: Path, **files: str) -> LadderCatalog:
    for name, text in files.items():
        (tmp_path / f"{name}.toml").write_text(text)
    return LadderCatalog.from_dir(tmp_path, strict=False)


def _release(history: FakeReleaseHistory, files: LadderCatalog, version: int,
             actor: str = "jane") -> object:
    return release_version(ReleaseVersion("toy", version, actor, "CHG-7", T0),
                           history=history, files=files)


def test_a_release_records_the_checksum_who_and_why_and_a_repeat_is_a_no_op(
    tmp_path: Path,
) -> None:
    files, history = _dir(tmp_path, **{"toy.v1": V1}), FakeReleaseHistory()
    first = release_version(ReleaseVersion("toy", 1, "jane", "CHG-7", T0),
                            history=history, files=files)
    assert first.new
    row = history.rows[("toy", 1)]
    assert (row.released_by, row.reason, row.released_at) == ("jane", "CHG-7", T0)
    assert row.checksum == files.find("toy", 1).checksum  # type: ignore[union-attr]
    again = release_version(ReleaseVersion("toy", 1, "bob", "again", T0),
                            history=history, files=files)
    assert not again.new and again.row == row


def test_versions_are_released_in_order(tmp_path: Path) -> None:
    files, history = _dir(tmp_path, **{"toy.v1": V1, "toy.v2": V2}), FakeReleaseHistory()
    with pytest.raises(LadderError, match="version 1 is not released"):
        _release(history, files, 2)
    assert history.rows == {}
    _release(history, files, 1)
    _release(history, files, 2)
    assert sorted(history.rows) == [("toy", 1), ("toy", 2)]


def test_a_file_edited_after_its_release_is_refused(tmp_path: Path) -> None:
    history = FakeReleaseHistory()
    _release(history, _dir(tmp_path, **{"toy.v1": V1}), 1)
    edited = _dir(tmp_path, **{"toy.v1": V1.replace("amount = 24", "amount = 12")})
    with pytest.raises(LadderError, match="a released ladder file is never edited"):
        _release(history, edited, 1)
    assert history.rows[("toy", 1)].checksum != edited.find("toy", 1).checksum  # type: ignore[union-attr]


def test_a_missing_or_invalid_file_or_a_blank_actor_releases_nothing(tmp_path: Path) -> None:
    files, history = _dir(tmp_path, **{"toy.v1": V1,
                                       "toy.v2": "ladder = 'toy'\nversion = 2\n"}), \
        FakeReleaseHistory()
    with pytest.raises(LadderVersionNotFound, match="no such ladder file") as missing:
        _release(history, files, 3)
    assert code_of(missing.value) is ErrorCode.NOT_FOUND and missing.value.exit_code == 3
    with pytest.raises(LadderError, match="--actor"):
        _release(history, files, 1, actor="  ")
    _release(history, files, 1)
    with pytest.raises(LadderError, match=r"toy\.v2\.toml"):
        _release(history, files, 2)
    assert list(history.rows) == [("toy", 1)]


def test_the_baseline_releases_the_valid_prefix_of_ladders_with_no_release(
    tmp_path: Path,
) -> None:
    broken_v2 = V2.replace('terminal_tier = "compliance"', 'terminal_tier = "nowhere"')
    files = _dir(tmp_path, **{"toy.v1": V1, "toy.v2": broken_v2,
                              "other.v1": V1.replace('"toy"', '"other"')})
    history = FakeReleaseHistory()
    rows = baseline_releases(history, files, T0)
    assert sorted((r.ladder, r.version) for r in rows) == [("other", 1), ("toy", 1)]
    assert {r.released_by for r in rows} == {BASELINE_ACTOR}
    assert baseline_releases(history, files, T0) == []  # every ladder has a release now
