"""The CFPB sample imported with its outcomes (docs/examples/cfpb_ladder_mapping.toml,
``[outcomes]``; docs/adr/0010-obligations-and-resolution.md "Imports carry outcomes").

"Company response to consumer" records the response ("In progress") or the resolution (a
"Closed ..." value, with its outcome code), "Timely response?" says whether it was timely,
and no instant is ever invented (``occurred_at`` null). After the import exactly the
complaints the file calls late show their 15-day company_response deadline missed, per the
source; the resolved ones have left Redis, so a worker burst fires none of them, and the
"In progress" ones, whose 60-day final response passed in 2023, reach the terminal tier in
that one burst (final_response caps every tier of ladder v4); a re-import
adds nothing, and one with the outcome column adds what an import without it left out,
exactly once. Each test runs on a database of its own (the sample's ids are the same in
every test that imports it).
"""

from __future__ import annotations

import csv
import json
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from escalation.domain.escalation import Status
from escalation.domain.obligations import Basis, DeadlineState, assess
from escalation.service_layer.importer import stable_dispute_id
from escalation.service_layer.obligations import dispute_clocks, recorded_actions
from tests.conftest import SHARED_DATA
from tests.helpers import run_cli

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = SHARED_DATA / "cfpb_complaints_sample.csv"
MAPPING = ROOT / "docs" / "examples" / "cfpb_ladder_mapping.toml"
RESPONSE = "Company response to consumer"
TIMELY = "Timely response?"

pytestmark = pytest.mark.skipif(not SAMPLE.exists(), reason="CFPB sample not present")


@pytest.fixture()
def own(server_urls: tuple[str, str], cli_env: dict[str, str], redis_client: Any,
        settings: Any) -> Iterator[tuple[dict[str, str], Any]]:
    """(CLI environment, App) on a database of this test's own and its Redis namespace."""
    from escalation.bootstrap import build
    from escalation.settings import get_settings
    from tests.conftest import scratch_database

    with scratch_database(server_urls[1], "escalation_outcomes") as url:
        env = dict(cli_env, ESCALATION_DATABASE_URL=url)
        app = build(get_settings(redis_url=settings.redis_url, database_url=url,
                                 namespace=settings.namespace, shards=settings.shards,
                                 log_format="json"), actor="test-outcomes")
        try:
            yield env, app
        finally:
            app.close()


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8-sig") as fh:
        return list(csv.DictReader(fh))


def _import(env: dict[str, str], csv_path: Path, mapping: Path) -> dict[str, Any]:
    res = run_cli(env, "import", str(csv_path), "--mapping", str(mapping), "--json",
                  timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    summary: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
    return summary


def _states(app: Any, did: UUID, now: datetime) -> dict[str, Any]:
    """Deadline name -> Assessment of one dispute, from its ledger trail (the rule)."""
    esc, _ = app.store.get(did)
    ladder = app.ladders.get(esc.ladder, esc.ladder_version)
    rows = app.store.trail(did)
    actions = recorded_actions(rows)
    placed = dispute_clocks(ladder, rows, actions, esc.calendars(app.calendars),
                            esc.deadlines)
    return {s.name: s for s in assess(ladder, placed, actions, now)}


def _without_outcomes(tmp_path: Path) -> Path:
    """The same mapping without its [outcomes] tables (an import of the disputes only)."""
    text = MAPPING.read_text()
    path = tmp_path / "no_outcomes.toml"
    path.write_text(text[:text.index("[outcomes]")])
    return path


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_sample_outcomes_one_late_complaint_resolved_leave_redis_and_reimport_adds_nothing(
    own: tuple[dict[str, str], Any],
) -> None:
    env, app = own
    rows = _rows(SAMPLE)
    timely = Counter(r[TIMELY] for r in rows)
    late_ids = {r["Complaint ID"] for r in rows if r[TIMELY] == "No"}
    in_progress = {r["Complaint ID"] for r in rows if r[RESPONSE] == "In progress"}
    assert timely["Yes"] + timely["No"] == len(rows)  # every row states its timeliness
    assert len(late_ids) == timely["No"] >= 1  # the sample: 2,066 on time, 1 late

    started = time.monotonic()
    first = _import(env, SAMPLE, MAPPING)
    elapsed = time.monotonic() - started
    assert first["created"] == len(rows) and first["errors"] == []
    assert first["outcomes"] == {"added": len(rows), "already_on_record": 0,
                                 "not_applied": []}
    assert elapsed < 300, f"import with outcomes took {elapsed:.0f} s"

    now = app.scheduler.time()
    ids = {r["Complaint ID"]: stable_dispute_id(r["Complaint ID"], "cfpb")[0] for r in rows}
    missed_per_source: list[tuple[str, str]] = []
    missed_open: Counter[str] = Counter()
    for ext, did in ids.items():
        states = _states(app, did, now)
        for name, s in states.items():
            if s.state is DeadlineState.MISSED and s.basis is Basis.SOURCE:
                missed_per_source.append((ext, name))
                assert s.late_s is None and s.by is not None and s.by.occurred_at is None
            elif s.state is DeadlineState.MISSED:
                missed_open[name] += 1
                assert ext in in_progress and name == "final_response"  # still open
        esc, status = app.store.get(did)
        if ext in in_progress:
            assert status is Status.PENDING
            assert states["company_response"].state is DeadlineState.MET
            assert states["company_response"].basis is Basis.SOURCE
        else:
            assert status is Status.RESOLVED
            assert app.scheduler.payload(did) is None  # out of Redis
            if ext not in late_ids:
                assert {s.state for s in states.values()} == {DeadlineState.MET}
    assert missed_per_source == [(ext, "company_response") for ext in late_ids]
    late = _states(app, ids[next(iter(late_ids))], now)
    assert late["final_response"].state is DeadlineState.UNDETERMINED  # instant unknown
    # the In-progress complaints' 60-day deadlines passed in 2023 with no final response
    assert missed_open == {"final_response": len(in_progress)}
    trail = app.store.trail(ids[next(iter(late_ids))])
    assert trail[-1].event == "RESOLVED"
    assert trail[-1].details["occurred_at"] is None  # never invented
    assert trail[-1].details["asserted"]["timely"] is False
    assert trail[-1].details["late"] == ["company_response"]

    burst = run_cli(env, "worker", "--burst", "--batch-size", "500", timeout=600)
    assert burst.returncode == 0, burst.stderr[-2000:]
    fired = {ext for ext, did in ids.items()
             if any(r.event in ("PROMOTED", "TERMINAL") for r in app.store.trail(did))}
    assert fired == in_progress  # no resolved complaint fired; the open ones did
    # final_response caps every tier (v4): the 60-day deadline passed in 2023, so an "In
    # progress" complaint walks to the terminal tier in this one burst (not parked in senior
    # with a due time 5 days out)
    for ext in in_progress:
        trail = app.store.trail(ids[ext])
        assert [r.match_decision for r in trail if r.event in ("PROMOTED", "TERMINAL")] == [
            "PROMOTED_TO_SENIOR", "PROMOTED_TO_COMPLIANCE", "TERMINAL_ESCALATION"], ext
        assert app.store.get(ids[ext])[1] is Status.TERMINAL
        capped = [r for r in trail if r.event == "PROMOTED"]
        assert all(r.next_due_at == r.decided_at for r in capped), ext  # due at once

    again = _import(env, SAMPLE, MAPPING)
    assert (again["created"], again["already_enqueued"]) == (0, len(rows))
    assert again["outcomes"] == {"added": 0, "already_on_record": len(rows),
                                 "not_applied": []}


def test_outcome_column_added_later_is_recorded_once_blank_timeliness_undetermined(
    own: tuple[dict[str, str], Any], tmp_path: Path,
) -> None:
    env, app = own
    rows = _rows(SAMPLE)
    late = next(r for r in rows if r[TIMELY] == "No")
    closed = [r for r in rows if r[RESPONSE].startswith("Closed") and r[TIMELY] == "Yes"]
    some = [late, *closed[:40], *[r for r in rows if r[RESPONSE] == "In progress"][:20]]
    some[1] = {**some[1], TIMELY: ""}  # the source does not say: nothing asserted
    part = tmp_path / "part.csv"
    with part.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(some)

    first = _import(env, part, _without_outcomes(tmp_path))
    assert first["created"] == len(some) and first["outcomes"] is None
    second = _import(env, part, MAPPING)
    assert (second["created"], second["already_enqueued"]) == (0, len(some))
    assert second["outcomes"] == {"added": len(some), "already_on_record": 0,
                                  "not_applied": []}
    third = _import(env, part, MAPPING)
    assert third["outcomes"] == {"added": 0, "already_on_record": len(some),
                                 "not_applied": []}

    now = app.scheduler.time()
    for r in some:
        did = stable_dispute_id(r["Complaint ID"], "cfpb")[0]
        trail = app.store.trail(did)
        recorded = [t for t in trail if t.event in ("ACTION_RECORDED", "RESOLVED")]
        assert len(recorded) == 1  # exactly once over three imports
        assert recorded[0].details["idempotency_key"] in ("import:response",
                                                          "import:resolution")
    blank = _states(app, stable_dispute_id(some[1]["Complaint ID"], "cfpb")[0], now)
    assert {s.state for s in blank.values()} == {DeadlineState.UNDETERMINED}
    _, status = app.store.get(stable_dispute_id(some[1]["Complaint ID"], "cfpb")[0])
    assert status is Status.RESOLVED

    # A later export: an "In progress" complaint is now closed (its resolution is added),
    # and a closed one names another outcome (the ledger stands: reported, not applied).
    opened, changed = len(some) - 1, 2
    later = list(some)
    later[opened] = {**later[opened], RESPONSE: "Closed with explanation"}
    later[changed] = {**later[changed], RESPONSE: "Closed with monetary relief"
                      if later[changed][RESPONSE] != "Closed with monetary relief"
                      else "Closed with explanation"}
    with part.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(later)
    fourth = _import(env, part, MAPPING)
    assert fourth["outcomes"]["added"] == 1
    assert fourth["outcomes"]["already_on_record"] == len(some) - 2
    [refused] = fourth["outcomes"]["not_applied"]
    assert refused["line"] == changed + 2 and refused["id"] == later[changed]["Complaint ID"]
    assert "idempotency_key 'import:resolution' was used for different content" \
        in refused["message"]
    did = stable_dispute_id(later[opened]["Complaint ID"], "cfpb")[0]
    _, status = app.store.get(did)
    assert status is Status.RESOLVED and app.scheduler.payload(did) is None


def test_unknown_outcome_value_is_a_bad_row_naming_column_value_and_line(
    own: tuple[dict[str, str], Any], tmp_path: Path,
) -> None:
    env, app = own
    rows = _rows(SAMPLE)[:5]
    rows[3] = {**rows[3], RESPONSE: "Closed with a shrug"}
    bad = tmp_path / "bad.csv"
    with bad.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    res = run_cli(env, "import", str(bad), "--mapping", str(MAPPING))
    assert res.returncode == 2
    assert (f"{bad}:5: {RESPONSE}: value 'Closed with a shrug' is not in the mapping's "
            "[outcomes.values]") in res.stderr
    assert "nothing imported" in res.stderr
    assert app.store.get(stable_dispute_id(rows[0]["Complaint ID"], "cfpb")[0]) is None
    skipped = run_cli(env, "import", str(bad), "--mapping", str(MAPPING), "--skip-invalid")
    assert skipped.returncode == 0, skipped.stderr
    assert "4 enqueued" in skipped.stdout and "outcomes: 4 added" in skipped.stdout
    assert app.store.get(stable_dispute_id(rows[3]["Complaint ID"], "cfpb")[0]) is None


def test_mapping_refuses_unknown_outcome_codes_and_undeclared_actions(
    own: tuple[dict[str, str], Any], tmp_path: Path,
) -> None:
    env, _ = own
    text = MAPPING.read_text()
    code = tmp_path / "code.toml"
    code.write_text(text.replace('"closed_with_explanation"', '"explained"'))
    res = run_cli(env, "import", str(SAMPLE), "--mapping", str(code))
    assert res.returncode == 2
    assert "resolution 'explained' is not an outcome code" in res.stderr
    action = tmp_path / "action.toml"
    action.write_text(text.replace('{ action = "response" }', '{ action = "reply" }'))
    res = run_cli(env, "import", str(SAMPLE), "--mapping", str(action))
    assert res.returncode == 2
    assert ("'In progress': action 'reply' is not declared by cfpb_complaint_response v4"
            in res.stderr)


def test_a_late_answer_imported_before_its_deadline_is_missed_per_source(
    own: tuple[dict[str, str], Any], tmp_path: Path,
) -> None:
    """"Timely response? No" on complaints sent 10 days ago (the 15-day deadline not yet
    passed, the import written before it): company_response is missed per the source, never
    met on record; a closed one's final_response is undetermined, an in-progress one's stays
    pending (docs/sla.md "Imported outcomes")."""
    env, _ = own
    sent = (datetime.now(UTC) - timedelta(days=10)).date().isoformat()
    path = tmp_path / "late.csv"
    path.write_text(f"Complaint ID,Date sent to company,{RESPONSE},{TIMELY}\n"
                    f"9300001,{sent},Closed with explanation,No\n"
                    f"9300003,{sent},In progress,No\n", encoding="utf-8")
    summary = _import(env, path, MAPPING)
    assert summary["created"] == 2 and summary["outcomes"]["added"] == 2
    want = {"9300001": {"company_response": ("missed", "source"),
                        "final_response": ("undetermined", "source")},
            "9300003": {"company_response": ("missed", "source"),
                        "final_response": ("pending", "")}}
    for ext, expected in want.items():
        res = run_cli(env, "audit", "search", "--dispute", ext, "--source", "cfpb",
                      "--deadlines", "--json")
        assert res.returncode == 0, res.stderr
        got = {r["deadline"]: (r["status"], r["basis"] or "")
               for r in map(json.loads, res.stdout.strip().splitlines())}
        assert got == expected, (ext, res.stdout)
