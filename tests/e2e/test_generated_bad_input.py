"""Bad input never crashes: NUL bytes, control characters, non-UTF-8 files, stray newlines.

Fixed cases run through the CLI (one line, exit 2, nothing written); generated inputs
(hypothesis) go through the enqueue and import use cases against the real servers: each either
succeeds or raises ``InvalidInput`` / is listed as a bad row -- never another exception -- and a
refused input writes nothing to PostgreSQL or Redis.
"""

from __future__ import annotations

import csv
import io
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from escalation.domain.errors import InvalidInput
from escalation.service_layer.bulk import BulkEnqueue, bulk_enqueue
from escalation.service_layer.core import CorePorts
from escalation.service_layer.enqueue import EnqueueOne, EnqueueRequest, enqueue_on_breach
from escalation.service_layer.importer import ColumnMapping, plan_import
from tests.e2e.test_cli_bad_input import GOOD_HASH, assert_nothing_written
from tests.helpers import run_cli

HEADER = "id,opened,amount,tier\n"
IMPORT = ["--id-column", "id", "--opened-column", "opened", "--materiality-column", "amount",
          "--tier-column", "tier"]
NASTY = st.sampled_from(["\x00", "\n", "\r", "\t", "\x7f", "\x85", "\u2028", "\ufeff", "\"",
                         ",", "'", "=", " ", "é", "\U0001f600", "\\", "standard"])
TEXT = st.lists(st.one_of(NASTY, st.text(max_size=4)), max_size=6).map("".join)
FAST = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])


def _ports(app: Any) -> CorePorts:
    return CorePorts(app.scheduler, app.store, app.ladders, app.calendars)


def _one_error_line(stderr: str) -> None:
    lines = [x for x in stderr.splitlines() if x.strip()]
    assert lines and "Traceback" not in stderr, stderr
    assert lines[-1].startswith("error: "), stderr


@pytest.mark.parametrize("cell", ["a\x00b", "line\x01feed"])
def test_import_with_a_control_character_in_the_id_column_is_refused(
    app: Any, cli_env: dict[str, str], tmp_path: Path, cell: str
) -> None:
    good = str(uuid.uuid4())
    f = tmp_path / "d.csv"
    f.write_text(HEADER + f"{good},2024-01-02,10.00,standard\n{cell},2024-01-02,10.00,standard\n")
    res = run_cli(cli_env, "import", str(f), *IMPORT)
    assert res.returncode == 2, res.stderr
    assert f"{f}:3: id: control character" in res.stderr
    _one_error_line(res.stderr)
    assert_nothing_written(app, good)


def test_a_tier_with_a_trailing_newline_is_not_standard(
    app: Any, cli_env: dict[str, str], tmp_path: Path
) -> None:
    did = str(uuid.uuid4())
    f = tmp_path / "d.csv"
    f.write_text(HEADER + f'{did},2024-01-02,10.00,"standard\n"\n')
    res = run_cli(cli_env, "import", str(f), *IMPORT)
    assert res.returncode == 2, res.stderr
    assert "tier: control character '\\n'" in res.stderr
    _one_error_line(res.stderr)
    assert_nothing_written(app, did)
    res = run_cli(cli_env, "enqueue", "--dispute-id", did, "--source-hash", GOOD_HASH,
                  "--tier", "standard\n", "--due-at", "2030-01-01T00:00:00+00:00")
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert_nothing_written(app, did)


def test_a_mapping_file_that_is_not_utf8_is_refused_in_one_line(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    f = tmp_path / "d.csv"
    f.write_text(HEADER)
    m = tmp_path / "map.toml"
    m.write_bytes(b'[columns]\ndispute_id = "\xe9\xff"\n')
    res = run_cli(cli_env, "import", str(f), "--mapping", str(m))
    assert res.returncode == 2
    assert "cannot read mapping file" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr


def test_an_external_id_with_a_control_character_is_refused_by_enqueue(
    app: Any, cli_env: dict[str, str]
) -> None:
    did = str(uuid.uuid4())
    res = run_cli(cli_env, "enqueue", "--dispute-id", did, "--source-hash", GOOD_HASH,
                  "--external-id", "x\x1by", "--due-at", "2030-01-01T00:00:00+00:00")
    assert res.returncode == 2 and "external id: control character" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert_nothing_written(app, did)


def test_an_external_id_that_is_not_utf8_is_refused_in_one_line_by_enqueue_and_cancel(
    app: Any, cli_env: dict[str, str]
) -> None:
    import os

    bad = os.fsdecode(b"ab\xff")  # the argument's bytes as the shell passes them
    res = run_cli(cli_env, "enqueue", "--source", "crm", "--external-id", bad,
                  "--source-hash", GOOD_HASH, "--due-at", "2030-01-01T00:00:00+00:00")
    assert res.returncode == 2, res.stderr
    assert "not valid Unicode text" in res.stderr and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    res = run_cli(cli_env, "cancel", bad, "--source", "crm", "--reason", "resolved")
    assert res.returncode == 2 and "not valid Unicode text" in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr


@FAST
@given(tier=st.one_of(st.none(), TEXT), external=st.one_of(st.none(), TEXT), trace=TEXT,
       money=st.one_of(TEXT, st.sampled_from(["10.00", "NaN", "-1", "1e400", "0x10", "١٢"])),
       source=st.one_of(TEXT, st.just(GOOD_HASH)))
def test_generated_enqueue_input_is_accepted_or_refused_cleanly(
    app: Any, tier: str | None, external: str | None, trace: str, money: str, source: str
) -> None:
    did = uuid.uuid4()
    req = EnqueueRequest(did, money, source, tier=tier, due_at=app.scheduler.time(),
                         external_id=external, trace_id=trace or None)
    try:
        enqueue_on_breach(EnqueueOne(req, "t", "dispute_review"), _ports(app))
    except InvalidInput:
        assert_nothing_written(app, str(did))
        return
    assert app.store.get(did) is not None


@FAST
@given(cells=st.lists(st.tuples(TEXT, TEXT, st.one_of(TEXT, st.just("10.00")),
                                st.one_of(TEXT, st.just("standard"))), min_size=1, max_size=4))
def test_generated_import_rows_are_all_imported_or_nothing_is(
    app: Any, cells: list[tuple[str, str, str, str]]
) -> None:
    ids = [str(uuid.uuid4()) for _ in cells]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["id", "opened", "amount", "tier"])
    for did, (junk, opened, amount, tier) in zip(ids, cells, strict=True):
        # half the rows keep a valid id so that good rows sit next to bad ones
        w.writerow([did if len(junk) % 2 == 0 else junk, opened or "2024-01-02", amount, tier])
    mapping = ColumnMapping(dispute_id="id", opened_at="opened", materiality="amount",
                            tier="tier")
    plan = plan_import(io.StringIO(buf.getvalue()), mapping)
    res = bulk_enqueue(BulkEnqueue(plan.requests, "t", "dispute_review",
                                   prior_errors=plan.errors), _ports(app))
    if res.errors:
        assert not res.results
        for did in ids:
            assert_nothing_written(app, did)
    else:
        assert all(r.escalation is not None for r in res.results)
        for line, req in plan.requests:
            assert app.store.get(req.dispute_id) is not None, line


def test_money_as_decimal_still_works(app: Any) -> None:
    did = uuid.uuid4()
    enqueue_on_breach(EnqueueOne(EnqueueRequest(did, Decimal("1.00"), GOOD_HASH,
                                                due_at=app.scheduler.time()),
                                 "t", "dispute_review"), _ports(app))
    assert app.store.get(did) is not None
