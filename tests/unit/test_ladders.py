"""Ladder files, the catalog, the JSON Schema and ``ladder check``."""

from __future__ import annotations

import hashlib
import inspect
from pathlib import Path

import pytest

from escalation.adapters.ladder_files import (
    LadderCatalog,
    check_ladder_dir,
    load_ladder_file,
    render_json_schema,
)
from escalation.adapters.regulatory_fit_memo import PROCESS_FIT_MEMO, RegulatoryFitMemo
from escalation.domain import ladder_check
from escalation.domain.calendars import CalendarRegistry, SlaWindow, WindowUnit
from escalation.domain.errors import InvalidInput, LadderError, LadderNotFound
from escalation.domain.ladder import Ladder, RegulatoryDeadline, Tier
from escalation.domain.ladder_check import check_ladders, check_regulatory_fit

REPO = Path(__file__).resolve().parents[2]
LADDERS = REPO / "ladders"

V1 = """ladder = "dispute_review"
version = 1
terminal_tier = "compliance"

[[tiers]]
id = "standard"
name = "Standard"
rank = 10
window = { amount = 24, unit = "calendar_hours" }

[[tiers]]
id = "senior"
name = "Senior"
rank = 20
window = { amount = 48, unit = "calendar_hours" }

[[tiers]]
id = "compliance"
name = "Compliance"
rank = 30
window = { amount = 72, unit = "calendar_hours" }
"""

V2_HEADER = """ladder = "dispute_review"
version = 2
previous_version = 1
terminal_tier = "compliance"
"""


def _tier(tid: str, rank: int, hours: int = 24) -> str:
    return (
        f'\n[[tiers]]\nid = "{tid}"\nname = "{tid.title()}"\nrank = {rank}\n'
        f'window = {{ amount = {hours}, unit = "calendar_hours" }}\n'
    )


def _write(d: Path, name: str, text: str) -> Path:
    p = d / name
    p.write_text(text)
    return p


def test_committed_json_schema_equals_generated() -> None:
    assert (REPO / "docs" / "ladder-schema.json").read_text() == render_json_schema()


def test_dispute_review_v1_is_the_reference_ladder() -> None:
    ladder = LadderCatalog.from_dir(LADDERS).get("dispute_review", 1)
    assert ladder.tier_ids == ("standard", "senior", "compliance")
    assert [t.rank for t in ladder.tiers] == [10, 20, 30]
    assert [t.window.amount for t in ladder.tiers] == [24, 48, 72]
    assert {t.window.unit for t in ladder.tiers} == {WindowUnit.CALENDAR_HOURS}
    assert {t.window.calendar for t in ladder.tiers} == {"utc"}
    assert ladder.terminal_tier == "compliance"
    assert ladder.previous_version is None


def test_checksum_is_sha256_of_file_bytes_and_source_is_the_path(tmp_path: Path) -> None:
    p = _write(tmp_path, "dispute_review.v1.toml", V1)
    ladder = load_ladder_file(p)
    assert ladder.checksum == hashlib.sha256(p.read_bytes()).hexdigest()
    assert ladder.source == str(p)


def test_catalog_lookups(tmp_path: Path) -> None:
    _write(tmp_path, "dispute_review.v1.toml", V1)
    _write(
        tmp_path,
        "dispute_review.v2.toml",
        V2_HEADER + _tier("standard", 10) + _tier("senior", 20) + _tier("compliance", 30),
    )
    cat = LadderCatalog.from_dir(tmp_path)
    assert cat.versions("dispute_review") == [1, 2]
    assert cat.latest("dispute_review").version == 2
    assert cat.names() == ["dispute_review"]
    assert [lad.key for lad in cat.all()] == ["dispute_review@1", "dispute_review@2"]
    with pytest.raises(LadderError, match="version 3 not found"):
        cat.get("dispute_review", 3)
    with pytest.raises(LadderNotFound, match=r"unknown ladder 'nope' \(ladders: dispute_review"):
        cat.latest("nope")  # exit 3, code not_found
    with pytest.raises(LadderError, match="is not a ladder name") as malformed:
        cat.latest("No pe")
    assert not isinstance(malformed.value, LadderNotFound)  # exit 2


def test_warn_at_and_bands_are_decimals(tmp_path: Path) -> None:
    text = V1.replace(
        'unit = "calendar_hours" }\n', 'unit = "calendar_hours" }\nwarn_at = ["0.50", 0.75]\n', 1
    )
    text += '\n[[bands]]\nname = "high"\nmin_amount = "2500.00"\nstart_tier = "senior"\n'
    ladder = load_ladder_file(_write(tmp_path, "dispute_review.v1.toml", text))
    assert [str(f) for f in ladder.tiers[0].warn_at] == ["0.50", "0.75"]
    band = ladder.band_for(__import__("decimal").Decimal("2500.00"))
    assert band is not None
    assert band.start_tier == "senior"
    assert ladder.band_for(__import__("decimal").Decimal("2499.99")) is None


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda t: t.replace("rank = 20", "rank = 5"), "tiers[1].rank: ranks must be strictly"),
        (lambda t: t.replace("amount = 48", "amount = 0"), "tiers[1].window.amount"),
        (lambda t: t.replace("amount = 48", "amount = 4.5"), "tiers[1].window.amount"),
        (lambda t: t.replace('"calendar_hours" }', '"fortnights" }', 1), "tiers[0].window.unit"),
        (
            lambda t: t.replace('terminal_tier = "compliance"', 'terminal_tier = "senior"'),
            "terminal_tier: must be the last tier",
        ),
        (lambda t: t.replace('id = "senior"', 'id = "standard"'), "tiers[1].id: duplicate"),
        (
            lambda t: t.replace("version = 1", "version = 1\nprevious_version = 1"),
            "previous_version",
        ),
        (lambda t: t + "colour = 1\n", "colour"),
        (lambda t: t + '\n[[bands]]\nname = "b"\nmin_amount = "1e3"\n', "bands[0].min_amount"),
        (
            lambda t: t + '\n[[bands]]\nname = "b"\nmin_amount = "1"\nstart_tier = "x"\n',
            "bands[0].start_tier",
        ),
        (lambda t: t + '\n[tier_map]\nold = "senior"\n', "tier_map"),
        (lambda t: t.replace("ladder = ", "ladder == "), "(file): not valid TOML"),
        (
            lambda t: t.replace("ladder = ", "ladder = 1 #"),
            "ladder: Input should be a valid string",
        ),
    ],
)
def test_invalid_file_error_names_file_and_field(tmp_path: Path, mutate, expected: str) -> None:
    p = _write(tmp_path, "dispute_review.v1.toml", mutate(V1))
    with pytest.raises(LadderError) as exc:
        load_ladder_file(p)
    assert str(exc.value).startswith(f"{p}: ")
    assert expected in str(exc.value)


def test_file_name_must_match_ladder_and_version(tmp_path: Path) -> None:
    with pytest.raises(LadderError, match="version: 1 differs from the file name"):
        load_ladder_file(_write(tmp_path, "dispute_review.v2.toml", V1))
    with pytest.raises(LadderError, match="file name"):
        load_ladder_file(_write(tmp_path, "dispute_review.toml", V1))


# -- ladder check across versions -----------------------------------------------------------


def _check(tmp_path: Path, v2: str, applied: dict[tuple[str, int], str] | None = None) -> str:
    _write(tmp_path, "dispute_review.v1.toml", V1)
    _write(tmp_path, "dispute_review.v2.toml", v2)
    return "\n".join(check_ladder_dir(tmp_path, applied))


def test_inserted_and_renamed_tiers_need_no_map(tmp_path: Path) -> None:
    v2 = V2_HEADER + _tier("standard", 10) + _tier("senior", 20) + _tier("lead", 25)
    v2 += _tier("compliance", 30).replace('name = "Compliance"', 'name = "Compliance desk"')
    assert _check(tmp_path, v2) == ""


def test_removed_tier_without_map_is_refused(tmp_path: Path) -> None:
    v2 = V2_HEADER + _tier("standard", 10) + _tier("compliance", 30)
    out = _check(tmp_path, v2)
    assert "dispute_review.v2.toml: tier_map: tier 'senior' of v1 is removed" in out


def test_removed_tier_mapped_upward_is_accepted(tmp_path: Path) -> None:
    v2 = V2_HEADER + '\n[tier_map]\nsenior = "compliance"\n'
    v2 += _tier("standard", 10) + _tier("compliance", 30)
    assert _check(tmp_path, v2) == ""


def test_map_that_lowers_authority_is_refused(tmp_path: Path) -> None:
    v2 = V2_HEADER + '\n[tier_map]\nsenior = "standard"\n'
    v2 += _tier("standard", 10) + _tier("compliance", 30)
    assert "tier_map.senior: maps to 'standard' (rank 10) below 'senior' (rank 20)" in _check(
        tmp_path, v2
    )


def test_map_from_unknown_old_tier_is_refused(tmp_path: Path) -> None:
    v2 = V2_HEADER + '\n[tier_map]\nghost = "compliance"\n'
    v2 += _tier("standard", 10) + _tier("senior", 20) + _tier("compliance", 30)
    assert "tier_map.ghost: not a tier of v1" in _check(tmp_path, v2)


def test_gap_in_versions_is_refused(tmp_path: Path) -> None:
    _write(tmp_path, "dispute_review.v1.toml", V1)
    v3 = V2_HEADER.replace("version = 2\nprevious_version = 1", "version = 3\nprevious_version = 2")
    _write(tmp_path, "dispute_review.v3.toml", v3 + _tier("standard", 10) + _tier("compliance", 30))
    out = "\n".join(check_ladder_dir(tmp_path))
    assert "dispute_review: version: versions must be contiguous from 1; missing v2" in out


def test_edited_applied_file_is_refused(tmp_path: Path) -> None:
    v2 = V2_HEADER + _tier("standard", 10) + _tier("senior", 20) + _tier("compliance", 30)
    assert _check(tmp_path, v2, {("dispute_review", 1): "0" * 64}).endswith(
        "a released ladder file is never edited, add a new version"
    )
    good = hashlib.sha256(V1.encode()).hexdigest()
    assert _check(tmp_path, v2, {("dispute_review", 1): good}) == ""


def test_applied_version_without_file_is_reported(tmp_path: Path) -> None:
    _write(tmp_path, "dispute_review.v1.toml", V1)
    out = check_ladder_dir(tmp_path, {("dispute_review", 2): "ab" * 32})
    assert out == ["dispute_review@2: (file): released version has no ladder file (restore it: "
                   "escalations may be pinned to it)"]


def test_tier_windows_must_fit_inside_the_regulatory_deadline() -> None:
    def ladder(senior_days: int) -> Ladder:
        fed = "us_federal_reserve"
        return Ladder(
            name="reg_e",
            version=1,
            tiers=(
                Tier("standard", "S", 10, SlaWindow(4, WindowUnit.BUSINESS_DAYS, fed)),
                Tier("senior", "Sr", 20, SlaWindow(senior_days, WindowUnit.BUSINESS_DAYS, fed)),
                Tier("compliance", "C", 30, SlaWindow(2, WindowUnit.BUSINESS_DAYS, fed)),
            ),
            terminal_tier="compliance",
            regulatory=RegulatoryDeadline(
                "determine", "notice", SlaWindow(10, WindowUnit.BUSINESS_DAYS, fed), buffer=1
            ),
            source="ladders/reg_e.v1.toml",
        )

    assert check_ladders([ladder(3)]) == []  # 4 + 3 + 2 = 9 = 10 - 1
    errors = check_ladders([ladder(4)])
    assert len(errors) == 1
    assert errors[0].startswith("ladders/reg_e.v1.toml: regulatory: tier windows do not fit")


class _CountedFit:
    """The domain's regulatory-fit sweep, counting the ladder versions it swept."""

    def __init__(self) -> None:
        self.swept: list[str] = []

    def __call__(self, ladder: Ladder, reg: RegulatoryDeadline,
                 calendars: CalendarRegistry) -> list[str]:
        self.swept.append(ladder.label)
        return check_regulatory_fit(ladder, reg, calendars)


def test_a_rewritten_file_is_checked_again_and_a_repeated_check_gives_the_same_answer(
    tmp_path: Path,
) -> None:
    """The regulatory fit is remembered per file checksum in a process by the ladder-file
    adapter's memo (the baseline release and a later release check the same files): a repeated
    check of an unchanged file runs no sweep, a file rewritten under the same name has a new
    checksum and is swept again, and the old bytes get the old answer back."""
    sweep = _CountedFit()
    memo = RegulatoryFitMemo(sweep)
    fits = V1 + REG  # 24 + 72 + ... calendar hours end long before 60 days minus 1
    path = _write(tmp_path, "dispute_review.v1.toml", fits)
    assert check_ladder_dir(tmp_path, fit_check=memo) == []
    assert check_ladder_dir(tmp_path, fit_check=memo) == []
    assert sweep.swept == [str(path)]  # the second check cost no sweep
    _write(tmp_path, "dispute_review.v1.toml", fits.replace("amount = 60", "amount = 1"))
    tight = check_ladder_dir(tmp_path, fit_check=memo)
    assert len(tight) == 1
    assert tight[0].startswith(f"{path}: regulatory: tier windows do not fit inside respond")
    assert check_ladder_dir(tmp_path, fit_check=memo) == tight
    _write(tmp_path, "dispute_review.v1.toml", fits)
    assert check_ladder_dir(tmp_path, fit_check=memo) == []
    assert sweep.swept == [str(path)] * 2  # the rewrite once; the old bytes from memory
    assert len(memo) == 2


def test_the_ladder_file_adapter_checks_with_the_process_memo(tmp_path: Path) -> None:
    """Every catalog and ``ladder check`` of the adapter share this process's memo (what the
    baseline release, ``ladder release``, ``ladder plan``/``apply`` and ``doctor`` check with)
    unless given another; None is the domain's sweep every time."""
    _write(tmp_path, "dispute_review.v1.toml", V1 + REG)
    assert LadderCatalog.from_dir(tmp_path).fit_check is PROCESS_FIT_MEMO
    assert LadderCatalog([]).fit_check is PROCESS_FIT_MEMO
    assert inspect.signature(check_ladder_dir).parameters["fit_check"].default \
        is PROCESS_FIT_MEMO
    assert LadderCatalog.from_dir(tmp_path, fit_check=None).fit_check is None
    assert check_ladder_dir(tmp_path, fit_check=None) == check_ladder_dir(tmp_path) == []


def test_the_memo_checks_a_ladder_built_in_code_every_time() -> None:
    """A ladder with no file checksum has nothing to be remembered by: swept on every check,
    with the same answer."""
    lad = Ladder("x", 1, (Tier("a", "A", 1, SlaWindow(30, WindowUnit.CALENDAR_DAYS)),), "a",
                 regulatory=RegulatoryDeadline(
                     "respond", "notice", SlaWindow(10, WindowUnit.CALENDAR_DAYS)))
    sweep = _CountedFit()
    memo = RegulatoryFitMemo(sweep)
    first = check_ladders([lad], fit_check=memo)
    assert first and "do not fit inside respond" in first[0]
    assert check_ladders([lad], fit_check=memo) == first
    assert sweep.swept == ["x@1", "x@1"]
    assert len(memo) == 0


def test_the_domain_check_keeps_nothing_between_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``check_ladders`` without a ``fit_check`` sweeps every time, even a file it saw (the
    memo is the adapter's); with one, each regulatory deadline is asked of it."""
    sweep = _CountedFit()
    monkeypatch.setattr(ladder_check, "check_regulatory_fit", sweep)
    reg_e = load_ladder_file(_write(tmp_path, "dispute_review.v1.toml", V1 + REG))
    assert reg_e.checksum and reg_e.deadlines
    assert check_ladders([reg_e]) == check_ladders([reg_e]) == []
    assert sweep.swept == [reg_e.label] * (2 * len(reg_e.deadlines))
    asked: list[str] = []

    def fake(ladder: Ladder, reg: RegulatoryDeadline, calendars: CalendarRegistry) -> list[str]:
        asked.append(reg.name)
        return [f"{ladder.label}: regulatory: {reg.name} asked"]

    assert check_ladders([reg_e], fit_check=fake) == [
        f"{reg_e.label}: regulatory: {r.name} asked" for r in reg_e.deadlines]
    assert asked == [r.name for r in reg_e.deadlines]
    assert len(sweep.swept) == 2 * len(reg_e.deadlines)  # the given check, not the sweep


def test_unknown_window_calendar_is_reported() -> None:
    lad = Ladder(
        name="x",
        version=1,
        tiers=(Tier("a", "A", 1, SlaWindow(1, WindowUnit.CALENDAR_DAYS, "mars")),),
        terminal_tier="a",
    )
    assert check_ladders([lad]) == ["x@1: tiers[0].window.calendar: unknown calendar 'mars'"]


def test_domain_ladder_refuses_non_increasing_ranks() -> None:
    w = SlaWindow(1, WindowUnit.CALENDAR_HOURS)
    with pytest.raises(LadderError, match="ranks must be strictly increasing"):
        Ladder("x", 1, (Tier("a", "A", 2, w), Tier("b", "B", 2, w)), "b")


# -- domain refusals while building a ladder from a file --------------------------------------

REG = """
[regulatory]
name = "respond"
anchor = "notice_received"
amount = 60
unit = "calendar_days"
buffer = 1
variants = [{ when_any = ["new_account"], amount = 90 }]
"""
HUGE = "99999999999999999999"
CENTURY = "is longer than about 100 years"


@pytest.mark.parametrize(
    ("mutate", "field", "problem"),
    [
        (lambda t: t.replace("amount = 48", f"amount = {HUGE}"), "tiers[1].window.amount",
         f"SLA window amount {HUGE} calendar_hours {CENTURY} (at most 878400)"),
        (lambda t: t.replace("amount = 72", "amount = 878401"), "tiers[2].window.amount",
         f"SLA window amount 878401 calendar_hours {CENTURY} (at most 878400)"),
        (lambda t: t + REG.replace("amount = 60", "amount = 36601"), "regulatory.amount",
         f"SLA window amount 36601 calendar_days {CENTURY} (at most 36600)"),
        (lambda t: t + REG.replace("amount = 90", f"amount = {HUGE}"),
         "regulatory.variants[0].amount",
         f"SLA window amount {HUGE} calendar_days {CENTURY} (at most 36600)"),
        (lambda t: t + REG.replace("buffer = 1", f"buffer = {HUGE}"), "regulatory.buffer",
         f"buffer {HUGE} calendar_days {CENTURY} (at most 36600)"),
        (lambda t: t + "\n[migration]\ngrace = { amount = 36601, unit = \"calendar_days\" }\n",
         "migration.grace.amount",
         f"SLA window amount 36601 calendar_days {CENTURY} (at most 36600)"),
    ],
)
def test_a_window_longer_than_a_century_is_a_file_error_naming_the_field(
    tmp_path: Path, mutate, field: str, problem: str
) -> None:
    p = _write(tmp_path, "dispute_review.v1.toml", mutate(V1))
    with pytest.raises(LadderError) as exc:
        load_ladder_file(p)
    assert str(exc.value) == f"{p}: {field}: {problem}"
    # `ladder check` lists it with the others instead of stopping at it
    assert check_ladder_dir(tmp_path) == [str(exc.value)]


def test_ladder_check_lists_every_problem_with_the_too_long_windows(tmp_path: Path) -> None:
    bad = _write(tmp_path, "dispute_review.v1.toml",
                 V1.replace("amount = 24", f"amount = {HUGE}")
                 .replace("amount = 72", "amount = 36601000")
                 .replace("rank = 20", "rank = 5"))
    other = _write(tmp_path, "dispute_review.v2.toml",
                   V2_HEADER + _tier("standard", 10) + _tier("compliance", 5))
    assert check_ladder_dir(tmp_path) == [
        f"{bad}: tiers[1].rank: ranks must be strictly increasing",
        f"{bad}: tiers[0].window.amount: SLA window amount {HUGE} calendar_hours {CENTURY} "
        "(at most 878400)",
        f"{bad}: tiers[2].window.amount: SLA window amount 36601000 calendar_hours {CENTURY} "
        "(at most 878400)",
        f"{other}: tiers[1].rank: ranks must be strictly increasing",  # still checked
    ]


def test_lenient_loading_keeps_a_too_long_window_as_an_invalid_file(tmp_path: Path) -> None:
    bad = _write(tmp_path, "dispute_review.v1.toml",
                 V1.replace("amount = 24", f"amount = {HUGE}"))
    _write(tmp_path, "other.v1.toml", V1.replace('"dispute_review"', '"other"'))
    files = LadderCatalog.from_dir(tmp_path, strict=False)  # status, doctor, workers
    assert files.names() == ["other"]
    assert files.errors == [f"{bad}: tiers[0].window.amount: SLA window amount {HUGE} "
                            f"calendar_hours {CENTURY} (at most 878400)"]
    with pytest.raises(LadderError, match=r"tiers\[0\]\.window\.amount"):
        LadderCatalog.from_dir(tmp_path)


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ('\n[institution]\ntimezone = "Mars/Base"\n',
         "institution.timezone: unknown time zone 'Mars/Base'"),
        ('\n[institution]\ncalendar = "nyse"\n',
         "institution.calendar: unknown calendar 'nyse' (a base calendar: "
         "us_federal_reserve, utc)"),
        ('\n[institution]\ncalendar = "institution"\n',
         "institution.calendar: unknown calendar 'institution'"),
        ('\n[migration]\ngrace = { amount = 1, unit = "calendar_hours", calendar = "nyse" }\n',
         "migration.grace.calendar: unknown calendar 'nyse'"),
    ],
)
@pytest.mark.parametrize("with_deadline", [False, True])
def test_institution_and_grace_calendars_are_checked_with_their_field(
    tmp_path: Path, extra: str, expected: str, with_deadline: bool
) -> None:
    # with a deadline the fit check counts in the institution calendar: it used to stop the
    # whole check with a message naming no file; without one nothing checked it at all
    text = V1 + (REG if with_deadline else "") + extra
    p = _write(tmp_path, "dispute_review.v1.toml", text)
    errors = check_ladder_dir(tmp_path)
    assert len(errors) == 1 and errors[0].startswith(f"{p}: {expected}"), errors


def test_tier_windows_chained_past_the_year_9999_are_reported_not_raised() -> None:
    century = SlaWindow(36600, WindowUnit.CALENDAR_DAYS)
    tiers = tuple(Tier(f"t{i}", f"T{i}", i, century) for i in range(80))  # 8,000 years
    lad = Ladder("x", 1, tiers, "t79", source="ladders/x.v1.toml",
                 regulatory=RegulatoryDeadline("respond", "notice", century))
    assert check_ladders([lad]) == [
        "ladders/x.v1.toml: regulatory: the tier windows and buffer chained from the respond "
        "anchor run past the year 9999"]


def test_domain_deadline_refuses_a_negative_or_too_long_buffer() -> None:
    days = SlaWindow(10, WindowUnit.BUSINESS_DAYS)
    assert RegulatoryDeadline("d", "a", days, buffer=26100).buffer == 26100
    with pytest.raises(InvalidInput, match=f"buffer 26101 business_days {CENTURY}"):
        RegulatoryDeadline("d", "a", days, buffer=26101)
    with pytest.raises(InvalidInput, match="non-negative integer"):
        RegulatoryDeadline("d", "a", days, buffer=-1)
