"""``ReleasedLadders`` when its directory and the releases disagree: only the unreadable
version is refused, each change of state is logged once, and the directory is read again
without a new object (docs/operations.md, "Ladder directory out of step with the
releases")."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from escalation.adapters.ladder_files import ReleasedLadders
from escalation.domain.errors import LadderReleaseError, ReleaseFault
from escalation.resources import shipped_ladders_dir

NAME = "dispute_review"


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def make(tmp_path: Path) -> tuple[ReleasedLadders, dict[tuple[str, int], str], Path]:
    """A directory holding dispute_review v1 and reg_z v1, both released, plus a v2 of
    dispute_review released elsewhere (its file is not in this directory)."""
    src = shipped_ladders_dir()
    shutil.copy(src / f"{NAME}.v1.toml", tmp_path)
    shutil.copy(src / "reg_z_billing_error.v1.toml", tmp_path)
    released = {(NAME, 1): sha(tmp_path / f"{NAME}.v1.toml"),
                ("reg_z_billing_error", 1): sha(tmp_path / "reg_z_billing_error.v1.toml")}
    return ReleasedLadders(tmp_path, lambda: dict(released), refresh_s=0), released, tmp_path


def test_a_version_released_elsewhere_is_refused_alone_logged_once_and_recovers(
        tmp_path: Path) -> None:
    ladders, released, d = make(tmp_path)
    assert ladders.unreadable() == []
    v2 = d / "elsewhere" / f"{NAME}.v2.toml"
    v2.parent.mkdir()
    v2.write_text((d / f"{NAME}.v1.toml").read_text().replace("version = 1",
                                                              "version = 2\nprevious_version = 1"))
    released[(NAME, 2)] = sha(v2)
    with capture_logs() as logs:
        for _ in range(5):
            with pytest.raises(LadderReleaseError) as err:
                ladders.latest(NAME)
            assert ladders.latest("reg_z_billing_error").version == 1  # served
            assert ladders.get(NAME, 1).version == 1  # pinned v1 escalations too
    fault = err.value.release
    assert fault is not None and (fault.ladder, fault.version) == (NAME, 2)
    assert fault.fault is ReleaseFault.MISSING and fault.found_checksum is None
    assert fault.expected_checksum == sha(v2)
    (only,) = ladders.unreadable()
    assert only == fault
    degraded = [e for e in logs if e["event"] == "ladders.directory_degraded"]
    assert len(degraded) == 1
    assert degraded[0]["log_level"] == "warning"
    assert degraded[0]["expected_checksum"] == sha(v2)
    assert degraded[0]["found_checksum"] is None

    shutil.copy(v2, d)
    with capture_logs() as logs:
        assert ladders.latest(NAME).version == 2
        assert ladders.unreadable() == []
    assert [e["event"] for e in logs] == ["ladders.directory_restored"]


def test_an_edited_file_names_both_checksums(tmp_path: Path) -> None:
    ladders, _, d = make(tmp_path)
    f = d / f"{NAME}.v1.toml"
    expected = sha(f)
    f.write_text(f.read_text().replace("24h standard", "25h standard"))
    with capture_logs() as logs:
        (fault,) = ladders.unreadable()
    assert fault.fault is ReleaseFault.EDITED
    assert fault.expected_checksum == expected and fault.found_checksum == sha(f)
    assert "new version" in fault.advice()
    (line,) = logs
    assert line["found_checksum"] == sha(f) and line["fault"] == "edited"
    assert ladders.latest("reg_z_billing_error").version == 1
