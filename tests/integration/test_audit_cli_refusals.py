"""`audit search/export/verify` refuse bad input clearly instead of silently returning nothing
or raising a traceback (newcomer report, point 5)."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from escalation.adapters.audit_search import PostgresLedgerSearch
from escalation.adapters.audit_store import PostgresAuditStore
from escalation.domain.errors import InvalidInput
from escalation.service_layer.audit_export import (
    AuditFilter,
    check_decision,
    export,
    known_decisions,
)
from tests.helpers import run_cli
from tests.integration.audit_support import T0, claimed, make_escalation, promote


def _cli(env: dict[str, str], url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli({**env, "ESCALATION_DATABASE_URL": url}, *args)


def _promoted_chain(engine: sa.Engine) -> None:
    store = PostgresAuditStore(engine)
    esc = store.record_enqueue(make_escalation(), "svc", T0)[1]
    store.record_decisions([(claimed(esc), promote(esc))], "w")


def test_unknown_decision_is_refused_and_the_known_names_are_listed(scratch) -> None:
    engine = scratch
    _promoted_chain(engine)
    known = known_decisions(PostgresLedgerSearch(engine))
    assert "PROMOTED" in known and "CANCELLED" in known
    recorded = [k for k in known if k.startswith("PROMOTED_TO_")]
    assert recorded  # a recorded match_decision is known too
    check_decision(PostgresLedgerSearch(engine), recorded[0])
    check_decision(PostgresLedgerSearch(engine), "CANCELLED")  # an event, even with no row yet
    with pytest.raises(InvalidInput, match=r"unknown decision/event 'BOGUS'; known: .*PROMOTED"):
        check_decision(PostgresLedgerSearch(engine), "BOGUS")


def test_a_reversed_window_is_refused_naming_each_interfaces_parameters() -> None:
    from escalation.domain.errors import InvalidParameter
    from escalation.entrypoints.cli_common import option_name

    with pytest.raises(InvalidParameter) as info:
        AuditFilter(since=datetime(2026, 2, 1, tzinfo=UTC), until=datetime(2026, 1, 1, tzinfo=UTC))
    # the service layer does not know the interface: plain names, rendered by each
    assert str(info.value) == ("from (2026-02-01T00:00:00+00:00) is after "
                               "to (2026-01-01T00:00:00+00:00)")
    assert info.value.render(option_name).startswith("--from (2026-02-01")
    assert "is after --to (" in info.value.render(option_name)
    assert info.value.params == ("from", "to")


def test_export_to_a_missing_directory_is_refused_before_writing(scratch, tmp_path: Path) -> None:
    engine = scratch
    target = tmp_path / "nonexistent" / "a.csv"
    with pytest.raises(InvalidInput, match=r"output directory .*nonexistent.* does not exist"):
        export(PostgresLedgerSearch(engine), "csv", target, AuditFilter())
    assert not target.parent.exists()


def test_cli_refusals_exit_2_with_one_line_and_no_traceback(scratch, cli_env, tmp_path) -> None:
    engine = scratch
    url = scratch.url.render_as_string(hide_password=False)
    _promoted_chain(engine)
    bogus = _cli(cli_env, url, "audit", "search", "--decision", "BOGUS")
    assert bogus.returncode == 2 and "unknown decision/event 'BOGUS'" in bogus.stderr
    assert "PROMOTED" in bogus.stderr
    typo = _cli(cli_env, url, "audit", "search", "--tier", "senoir")
    assert typo.returncode == 2 and "unknown tier 'senoir'" in typo.stderr, typo.stderr
    assert "senior" in typo.stderr
    assert _cli(cli_env, url, "audit", "search", "--tier", "senior").returncode == 0
    rev = _cli(cli_env, url, "audit", "search", "--from", "2026-02-01T00:00:00Z",
               "--to", "2026-01-01T00:00:00Z")
    assert rev.returncode == 2 and "is after --to" in rev.stderr
    assert "--from (2026-02-01" in rev.stderr
    sla = _cli(cli_env, url, "report", "sla", "--from", "2026-02-01T00:00:00Z",
               "--to", "2026-02-01T00:00:00Z")
    assert sla.returncode == 2, sla.stderr
    assert "error: --from (2026-02-01T00:00:00+00:00) must be before --to" in sla.stderr
    grace = _cli(cli_env, url, "report", "sla", "--from", "2026-01-01T00:00:00Z",
                 "--to", "2026-02-01T00:00:00Z", "--grace-s", "-1")
    assert grace.returncode == 2 and "--grace-s must be >= 0 seconds" in grace.stderr
    limit = _cli(cli_env, url, "audit", "search", "--limit", "0")
    assert limit.returncode == 2 and "--limit must be 1-10000, got 0" in limit.stderr
    missing = tmp_path / "nonexistent" / "dir" / "a.csv"
    exp = _cli(cli_env, url, "audit", "export", "--out", str(missing))
    assert exp.returncode == 2 and "does not exist" in exp.stderr
    assert "nonexistent" in exp.stderr and not missing.parent.exists()
    for res in (bogus, rev, exp, sla, grace, limit):
        assert "Traceback" not in res.stderr


def test_cli_verify_without_a_checkpoint_says_there_is_none_yet(scratch, cli_env) -> None:
    engine = scratch
    url = scratch.url.render_as_string(hide_password=False)
    _promoted_chain(engine)
    res = _cli(cli_env, url, "audit", "verify")
    assert res.returncode == 0, res.stderr
    assert "no checkpoint yet (run `escalation audit checkpoint`)" in res.stdout
    assert "none matches" not in res.stdout
    assert _cli(cli_env, url, "audit", "checkpoint").returncode == 0
    # the checkpoint is signed with the configured key: it is the one trusted
    assert "last signed checkpoint 1 matches" in _cli(cli_env, url, "audit", "verify").stdout


def test_cli_verify_of_a_dispute_with_no_rows_is_not_a_pass(scratch, cli_env) -> None:
    import uuid

    from escalation.adapters.audit_store import PostgresAuditStore as Store

    url = scratch.url.render_as_string(hide_password=False)
    esc = Store(scratch).record_enqueue(make_escalation(), "svc", T0)[1]
    known = _cli(cli_env, url, "audit", "verify", "--dispute", str(esc.dispute_id))
    assert known.returncode == 0 and "ok: chains intact" in known.stdout, known.stderr
    stranger = uuid.uuid4()
    res = _cli(cli_env, url, "audit", "verify", "--dispute", str(stranger))
    assert res.returncode != 0 and "ok:" not in res.stdout
    assert f"no audit rows for dispute {stranger}" in res.stderr
    assert "Traceback" not in res.stderr


def test_api_maps_a_broken_released_ladder_file_to_503_not_422() -> None:
    from escalation.domain.errors import LadderError, LadderReleaseError
    from escalation.entrypoints.api.problems import status_of

    # the class's code decides, whatever the message says
    assert status_of(LadderReleaseError("reg_e@3 is missing")) == 503
    assert status_of(LadderError("ladder file x: bad field")) == 422
    assert status_of(InvalidInput("due_at must be timezone-aware")) == 422


def test_a_decision_the_ladders_can_record_is_searchable_before_any_dispute_reached_it(
    scratch, cli_env
) -> None:
    from escalation.adapters.ladder_files import LadderCatalog
    from escalation.resources import shipped_ladders_dir
    from escalation.service_layer.audit_export import ladder_decisions

    url = scratch.url.render_as_string(hide_password=False)
    _promoted_chain(scratch)  # one PROMOTED_TO_SENIOR in the ledger, nothing further
    producible = ladder_decisions(LadderCatalog.from_dir(shipped_ladders_dir()).all())
    assert {"PROMOTED_TO_COMPLIANCE", "TERMINAL_ESCALATION"} <= producible
    assert "PROMOTED_TO_COMPLIANCE" not in known_decisions(PostgresLedgerSearch(scratch))
    check_decision(PostgresLedgerSearch(scratch), "PROMOTED_TO_COMPLIANCE", producible)
    res = _cli(cli_env, url, "audit", "search", "--decision", "PROMOTED_TO_COMPLIANCE",
               "--json")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == ""  # no rows: nobody reached compliance yet
    typo = _cli(cli_env, url, "audit", "search", "--decision", "PROMOTED_TO_COMPLIANSE")
    assert typo.returncode == 2 and "PROMOTED_TO_COMPLIANCE" in typo.stderr  # listed as known


@pytest.mark.parametrize(("args", "message"), [
    (["--missed", "--out", "F"], "--out needs --format csv"),
    (["--missed", "--format", "html"], "--missed supports --format table or csv"),
    (["--out", "F"], "--out needs --format csv or html"),
    (["--json", "--format", "csv"], "--json prints JSON on stdout"),
    (["--grace-s", "-1"], "--grace-s must be >= 0 seconds"),
    (["--bom"], "--bom is for CSV output"),
    (["--bom", "--format", "html", "--out", "F"], "--bom is for CSV output"),
    (["--bom", "--json"], "--bom is for CSV output"),
])
def test_report_sla_refuses_its_options_before_any_query(
    cli_env: dict[str, str], tmp_path: Path, args: list[str], message: str,
) -> None:
    """Every option of `report sla` is checked before the database is reached: with a
    database that cannot be reached (nothing listens on port 1), a bad combination is
    refused at once (exit 2, the options named), never a connection error, and --out's
    file is not written."""
    out = tmp_path / "F"
    argv = [a if a != "F" else str(out) for a in args]
    res = _cli(cli_env, "postgresql://postgres@127.0.0.1:1/none", "report", "sla",
               "--from", "2026-01-01T00:00:00Z", "--to", "2026-02-01T00:00:00Z", *argv)
    assert res.returncode == 2, res.stderr[-1500:]
    assert message in res.stderr and "Traceback" not in res.stderr
    assert "connect" not in res.stderr.lower() and not out.exists()


def test_doctor_refuses_a_negative_skew_before_connecting(cli_env: dict[str, str]) -> None:
    """A usage error (exit 2, the option named), with no server reachable: never a run."""
    res = run_cli({**cli_env, "ESCALATION_DATABASE_URL": "postgresql://postgres@127.0.0.1:1/none",
                   "ESCALATION_REDIS_URL": "redis://127.0.0.1:1/0"},
                  "doctor", "--max-skew-ms", "-5")
    assert res.returncode == 2, res.stderr[-1500:]
    assert "--max-skew-ms" in res.stderr and "Traceback" not in res.stderr


def test_drop_expired_names_its_own_retention_option(cli_env: dict[str, str]) -> None:
    """The bound is refused naming --retention-days, the option given (no such option as
    --audit-retention-days), before any server is reached."""
    res = run_cli({**cli_env, "ESCALATION_DATABASE_URL": "postgresql://postgres@127.0.0.1:1/none",
                   "ESCALATION_REDIS_URL": "redis://127.0.0.1:1/0"},
                  "audit", "partitions", "drop-expired", "--retention-days", "10")
    assert res.returncode == 2, res.stderr[-1500:]
    assert "--retention-days:" in res.stderr and "--audit-retention-days" not in res.stderr


def test_dead_purge_without_yes_is_a_usage_error_before_connecting(
        cli_env: dict[str, str]) -> None:
    res = run_cli({**cli_env, "ESCALATION_DATABASE_URL": "postgresql://postgres@127.0.0.1:1/none",
                   "ESCALATION_REDIS_URL": "redis://127.0.0.1:1/0"},
                  "dead", "purge", "decision:x", "--reason", "bad ladder")
    assert res.returncode == 2, res.stderr[-1500:]
    assert "confirm with --yes" in res.stderr and "connect" not in res.stderr.lower()


def test_audit_export_bom_with_jsonl_is_a_usage_error(cli_env: dict[str, str],
                                                      tmp_path: Path) -> None:
    out = tmp_path / "a.jsonl"
    res = _cli(cli_env, "postgresql://postgres@127.0.0.1:1/none", "audit", "export",
               "--format", "jsonl", "--bom", "--out", str(out))
    assert res.returncode == 2, res.stderr[-1500:]
    assert "--bom is for CSV output" in res.stderr and not out.exists()
