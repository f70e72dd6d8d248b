"""Use case: ``escalation ladder release`` -- a ladder version goes live only once released.

A version file on disk changes nothing that enqueue or workers do until it is released
(docs/adr/0004-ladder-release.md). Release validates the ladder's files up to that version
(``ladder check`` rules, including the checksums of the versions released before it), and
records the file's SHA-256 in ``ladder_release`` with who released it and why. From then on
enqueue pins the newest released version; existing escalations stay on their pinned version
until ``ladder apply`` migrates them.

First use: a ladder with no release at all (a fresh database, e.g. the shipped ladders on
``escalation demo`` or the first ``enqueue``) has every version that passes ``ladder check``
released as a *baseline* (actor ``baseline``), Flyway's baseline idea. Later files of that
ladder need an explicit release.
"""

from __future__ import annotations

import getpass
import socket
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from escalation.domain.calendars import CalendarRegistry
from escalation.domain.errors import LadderError, LadderVersionNotFound
from escalation.domain.ladder import Ladder
from escalation.domain.ladder_check import RegulatoryFitCheck, check_ladders
from escalation.logs import get_logger
from escalation.ports import LadderFiles, LadderHistory, NewRelease, ReleaseRow

BASELINE_ACTOR = "baseline"
BASELINE_REASON = "first use: every version that passes `ladder check` released as baseline"

log = get_logger("escalation.ladders")


def default_actor() -> str:
    """``user@host`` of this process (the default ``--actor`` of release and apply)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (containers)
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


@dataclass(frozen=True, slots=True)
class ReleaseResult:
    """``row``: the release record; ``new``: False when that version already was released
    with the same checksum (a repeated release is a no-op)."""

    row: ReleaseRow
    new: bool


@dataclass(frozen=True, slots=True)
class ReleaseVersion:
    """Release one ladder version (the command of :func:`release_version`): ``ladder`` and
    ``version``, who releases and why (``actor``, ``reason``, e.g. a change ticket; both on
    record, the actor must not be blank) and ``now`` (aware UTC, Redis TIME)."""

    ladder: str
    version: int
    actor: str
    reason: str
    now: datetime


def release_version(
    cmd: ReleaseVersion, *, history: LadderHistory, files: LadderFiles,
) -> ReleaseResult:
    """Release ``cmd.ladder@cmd.version``: validate it and record its checksum.

    Args:
        files: the ladder directory as read now (``LadderCatalog.from_dir(dir,
            strict=False)``: invalid files are listed in its errors).

    Raises:
        LadderVersionNotFound: no file for ``ladder@version`` (exit 3).
        LadderError: the file is invalid, the ladder's files up to ``version``
            fail ``ladder check`` (maps, demotions, regulatory fit, an edited released
            file), or ``version - 1`` is not released yet.
        ConflictError: already released with a different checksum (the file was edited).
    """
    ladder, version, actor, reason, now = cmd.ladder, cmd.version, cmd.actor, cmd.reason, cmd.now
    if not actor.strip():
        raise LadderError("--actor: must not be empty")
    target = _target_file(files, ladder, version)
    released = history.released_checksums()
    if version > 1 and (ladder, version - 1) not in released:
        raise LadderError(
            f"{ladder}@{version}: version {version - 1} is not released; release the versions "
            f"in order (nothing released)")
    chain = [ld for ld in files.all() if ld.name == ladder and ld.version <= version]
    errors = check_ladders(chain, {k: v for k, v in released.items() if k[0] == ladder},
                           files.calendars, fit_check=files.fit_check)
    if errors:
        raise LadderError(f"{ladder}@{version} fails `ladder check`, nothing released:\n"
                          + "\n".join(errors))
    row, new = history.release(NewRelease(ladder=ladder, version=version, checksum=target.checksum,
                                          released_by=actor, reason=reason, released_at=now))
    if new:
        log.info("ladder.released", ladder=ladder, version=version, checksum=target.checksum,
                 actor=actor, reason=reason, trace_id="", source_hash=target.checksum,
                 match_decision="LADDER_RELEASED")
    return ReleaseResult(row, new)


def _target_file(files: LadderFiles, ladder: str, version: int) -> Ladder:
    """The parsed file of ``ladder@version``.

    Raises:
        LadderError: the file exists but fails validation (the message names it).
        LadderVersionNotFound: no such file (exit 3).
    """
    target = files.find(ladder, version)
    if target is not None:
        return target
    bad = [e for e in files.errors if f"{ladder}.v{version}.toml" in e]
    if bad:
        raise LadderError(bad[0])
    raise LadderVersionNotFound(
        f"{files.path / f'{ladder}.v{version}.toml'}: (file): no such ladder file; "
        "nothing released")


def baseline_prefix(versions: list[Ladder],
                    applied: Mapping[tuple[str, int], str] | None = None,
                    calendars: CalendarRegistry | None = None, *,
                    fit_check: RegulatoryFitCheck | None = None) -> list[Ladder]:
    """The longest run ``v1..vk`` of one ladder's versions that passes ``ladder check``
    (including the checksums of versions an earlier apply recorded: ``applied``) against
    ``calendars`` (the deployment's; None = the built-in ones), the regulatory fit checked by
    ``fit_check`` (None = ``check_ladders``' own check)."""
    ordered = sorted(versions, key=lambda ld: ld.version)
    for k in range(len(ordered), 0, -1):
        prefix = ordered[:k]
        contiguous = [ld.version for ld in prefix] == list(range(1, k + 1))
        if contiguous and not check_ladders(prefix, applied or {}, calendars,
                                            fit_check=fit_check):
            return prefix
    return []


def baseline_releases(history: LadderHistory, files: LadderFiles,
                      now: datetime) -> list[ReleaseRow]:
    """Release, as baseline, the valid versions of every ladder that has no release yet.

    Returns the rows inserted (empty when every ladder on disk already has a release).
    """
    released = {name for name, _ in history.released_checksums()}
    by_name: dict[str, list[Ladder]] = defaultdict(list)
    for ladder in files.all():
        if ladder.name not in released:
            by_name[ladder.name].append(ladder)
    applied = history.applied_checksums()
    todo = {name: [(ld.version, ld.checksum) for ld in baseline_prefix(
        vs, {k: c for k, c in applied.items() if k[0] == name}, files.calendars,
        fit_check=files.fit_check)]
        for name, vs in by_name.items()}
    rows = history.baseline({n: v for n, v in todo.items() if v}, released_by=BASELINE_ACTOR,
                            reason=BASELINE_REASON, released_at=now)
    _log_baseline(rows)
    return rows


def _log_baseline(rows: list[ReleaseRow]) -> None:
    """One INFO line for a baseline release; each version (on record in ``ladder_release``)
    on a DEBUG line of its own."""
    for row in rows:
        log.debug("ladder.released", ladder=row.ladder, version=row.version,
                  checksum=row.checksum, actor=row.released_by, reason=row.reason, trace_id="",
                  source_hash=row.checksum, match_decision="LADDER_BASELINE")
    if rows:
        log.info("ladder.baseline_released", count=len(rows),
                 versions=[f"{r.ladder}@{r.version}" for r in rows], actor=BASELINE_ACTOR,
                 reason=BASELINE_REASON, trace_id="", source_hash="",
                 match_decision="LADDER_BASELINE")
