"""``import_csv``'s bulk path (rows rendered in pass 1 from a template per request shape)
writes exactly what the general path (``build_one`` + ``record_batches``) writes: the same
projection rows, byte-identical hash-chained ENQUEUED ledger rows, the same Redis payloads
and scores, the same warnings; the same bad rows with the same line numbers."""

from __future__ import annotations

import csv
import io
import itertools
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import pytest
import sqlalchemy as sa

from escalation.adapters.redis_keys import Keys
from escalation.bootstrap import pass1_helper, schedule_for, warnings_for
from escalation.service_layer import import_parallel, importer, trace_id_source
from escalation.service_layer.importer import (
    ColumnMapping,
    ImportCsv,
    ImportResult,
    ImportTarget,
    bulk_ports,
    import_csv,
    stable_dispute_id,
)

NOW = datetime(2026, 11, 30, 15, 0, 0, 123000, tzinfo=UTC)
HEADER = "id,opened,amount,tier,cycle,tz"


def _rows(source: str, repeat: int = 3) -> list[str]:
    """Many shapes (dates, times, amounts, tiers, zones, attributes), each on ``repeat``
    rows in a row (its first row, its second, later ones: the three ways the bulk path
    renders), UUID and external ids (with quotes, a backslash, non-ASCII)."""
    rows = []
    for i in range(120):
        k = i // repeat
        day = f"2026-{9 + k % 3:02d}-{1 + k % 27:02d}"
        opened = day if k % 4 else f"{day}T{k % 24:02d}:15:00"  # date-only or naive time
        amount = ["0.00", "15.50", "250000", ""][k % 4]
        tier = ["", "standard"][k % 2]
        tz = ["", "America/Chicago", "Europe/Berlin"][k % 3]
        ident = (str(uuid.uuid5(uuid.NAMESPACE_URL, f"{source}{i}")) if i % 5 == 0
                 else f"{source}-{i}")
        if i % 7 == 3:
            ident = f'"{source} ""q"" \\ é {i}"'
        rows.append(f"{ident},{opened},{amount},{tier},{1 + k % 28},{tz}")
    return rows


MAPPING = ColumnMapping(dispute_id="id", opened_at="opened", materiality="amount",
                        tier="tier", timezone_column="tz", ladder="reg_z_billing_error",
                        attribute_columns={"cycle_closing_day": "cycle"},
                        default_materiality="0.00")  # the blank amounts of _rows


def _write(tmp_path: Path, name: str, rows: list[str]) -> Path:
    path = tmp_path / name
    path.write_text("\n".join([HEADER, *rows]) + "\n", encoding="utf-8")
    return path


def _opener(path: Path) -> Any:
    def open_() -> TextIO:
        return io.open(path, newline="", encoding="utf-8")  # noqa: UP020
    return open_


def _import(app: Any, path: Path, monkeypatch: pytest.MonkeyPatch, *, bulk: bool,
            warn: str = "queue", batch_size: int = 7, expect: str | None = None,
            **kw: Any) -> ImportResult:
    """Import at a fixed instant with deterministic trace ids (so hashes are comparable).
    ``warn``: the warnings through the queue (as the CLI passes them), the ``schedule_for``
    hook (as the CLI passed them before), or ``"none"``."""
    counter = itertools.count(1)
    monkeypatch.setattr(trace_id_source, "new_trace_id",
                        lambda: uuid.UUID(int=next(counter), version=4).hex)
    monkeypatch.setattr(app.scheduler, "time", lambda: NOW)
    target = ImportTarget(scheduler=app.scheduler, store=app.store, ladders=app.ladders,
                          calendars=app.calendars, default_ladder=app.settings.default_ladder,
                          actor="test-import",
                          on_scheduled=schedule_for(app) if warn == "hook" else None,
                          warnings=warnings_for(app) if warn == "queue" else None,
                          helper=pass1_helper(kw.get("processes")))
    paths: list[str] = []
    for name in ("write_pass", "write_encoded_pass"):
        real = getattr(importer, name)
        monkeypatch.setattr(importer, name,
                            lambda *a, _real=real, _name=name, **k: (paths.append(_name),
                                                                     _real(*a, **k))[1])
    try:
        res = import_csv(ImportCsv(_opener(path), MAPPING, bulk=bulk, batch_size=batch_size,
                                   **kw), target)
    finally:
        monkeypatch.undo()
    if paths:  # the path the rows took, for the tests to check
        assert paths == [expect or ("write_encoded_pass" if bulk else "write_pass")]
    return res


LEDGER = sa.text(
    "SELECT dispute_id, seq, event, match_decision, from_tier, to_tier, ladder, "
    "ladder_version, calendar_version, materiality, due_at, next_due_at, "
    "regulatory_deadline, decided_at, actor, trace_id, source_hash, external_id, "
    "fence_token, details, prev_hash, row_hash FROM escalation_audit "
    "WHERE dispute_id = ANY(:ids) ORDER BY dispute_id, seq")
STATE = sa.text(
    "SELECT dispute_id, external_id, status, tier, ladder, ladder_version, due_at, "
    "entered_tier_at, materiality, source_hash, trace_id, regulatory_deadline, remaining_ms, "
    "last_seq, last_hash, deadlines, institution_tz, institution_calendar "
    "FROM escalation_state WHERE dispute_id = ANY(:ids) ORDER BY dispute_id")


def _written(app: Any, ids: list[uuid.UUID]) -> dict[str, Any]:
    """Everything the import wrote for ``ids``: ledger, projection, Redis, warnings."""
    with app.engine.connect() as conn:
        ledger = [tuple(r) for r in conn.execute(LEDGER, {"ids": ids})]
        state = [tuple(r) for r in conn.execute(STATE, {"ids": ids})]
    client = app.redis
    sched = app.scheduler
    payloads, scores = {}, {}
    for did in ids:
        keys: Keys = sched.keys_for(did)
        payloads[did] = client.hgetall(keys.payload(did))
        scores[did] = client.zscore(keys.pending, str(did))
    warned = {did: sorted(warnings_for(app).pending(did)) for did in ids}
    return {"ledger": ledger, "state": state, "payloads": payloads, "scores": scores,
            "warnings": warned}


def _ids(path: Path) -> list[uuid.UUID]:
    """The dispute ids of the file's rows (as the import derives them)."""
    with path.open(newline="", encoding="utf-8") as fh:
        return [stable_dispute_id(row["id"], MAPPING.external_source)[0]
                for row in csv.DictReader(fh)]


@pytest.mark.parametrize("warn", ["queue", "hook"])
def test_bulk_path_writes_what_the_general_path_writes(
    app: Any, second_app: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, warn: str
) -> None:
    source = f"s{uuid.uuid4().hex[:8]}"
    path = _write(tmp_path, "many.csv", _rows(source))
    assert bulk_ports(ImportTarget(app.scheduler, app.store, app.ladders, app.calendars,
                                   "dispute_review", "t")) is not None
    general = _import(second_app, path, monkeypatch, bulk=False, warn="hook")
    fast = _import(app, path, monkeypatch, bulk=True, warn=warn)
    assert general.errors == [] and fast.errors == []
    assert (fast.rows, fast.created, fast.existing) == (general.rows, general.created, 0)
    assert fast.created == 120
    ids = _ids(path)
    assert len(set(ids)) == 120
    want, got = _written(second_app, ids), _written(app, ids)
    assert got["ledger"] == want["ledger"] and len(got["ledger"]) == 120
    assert got["state"] == want["state"]
    assert got["payloads"] == want["payloads"] and all(got["payloads"].values())
    assert got["scores"] == want["scores"]
    assert got["warnings"] == want["warnings"] and any(got["warnings"].values())

    # A re-import: nothing created, every dispute counted as existing, nothing changed.
    again = _import(app, path, monkeypatch, bulk=True, warn=warn)
    assert (again.created, again.existing) == (0, 120)
    assert _written(app, ids) == got


def test_bulk_path_reports_the_same_bad_rows_and_writes_nothing(
    app: Any, second_app: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = f"s{uuid.uuid4().hex[:8]}"
    rows = _rows(source)
    rows[10] = rows[10].replace(",2026-", ",2027-")           # same shape as others, but
    rows[11] = f"{'x' * 201},2026-11-02,0.00,standard,3,"      # external id too long
    rows[12] = f"{source}-a,2026-11-02,0.00,nosuchtier,3,"     # unknown tier (same shape x2)
    rows[13] = f"{source}-b,2026-11-02,0.00,nosuchtier,3,"
    rows[14] = f"{source}-c,2026-11-02,0.00,standard,,"        # attribute missing
    rows.append(f"{source}-last,2026-11-02,1.234,standard,3,")  # the last row: sub-cent
    path = _write(tmp_path, "bad.csv", rows)
    general = _import(second_app, path, monkeypatch, bulk=False)
    fast = _import(app, path, monkeypatch, bulk=True)
    assert fast.errors == general.errors
    assert [line for line, _ in fast.errors] == [12, 13, 14, 15, 16, 122]
    assert "future" in fast.errors[0][1] and "external id longer" in fast.errors[1][1]
    assert not fast.written and fast.created == 0
    with app.engine.connect() as conn:
        n = conn.execute(sa.text("SELECT count(*) FROM escalation_state WHERE dispute_id = "
                                 "ANY(:ids)"), {"ids": _ids(path)}).scalar_one()
    assert n == 0
    assert not any(app.redis.scan_iter(match=f"*{{{app.settings.namespace}:*payload*"))

    # --skip-invalid: the good rows only, the same on both paths.
    general = _import(second_app, path, monkeypatch, bulk=False, skip_invalid=True)
    fast = _import(app, path, monkeypatch, bulk=True, skip_invalid=True)
    assert fast.errors == general.errors
    assert (fast.created, fast.existing) == (general.created, general.existing) == (115, 0)


def test_a_file_of_distinct_shapes_takes_the_general_path_and_writes_the_same(
    app: Any, second_app: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = f"s{uuid.uuid4().hex[:8]}"
    path = _write(tmp_path, "distinct.csv", _rows(source, repeat=1))
    general = _import(second_app, path, monkeypatch, bulk=False)
    fast = _import(app, path, monkeypatch, bulk=True, expect="write_pass")
    assert (fast.created, general.created) == (120, 120)
    ids = _ids(path)
    assert _written(app, ids) == _written(second_app, ids)


@pytest.mark.parametrize(("bulk", "repeat", "copies", "processes"), [
    (True, 3, 1, 1),      # the bulk path, one process
    (True, 3, 10, 2),     # the bulk path, pass 1 in two processes (1,200 rows)
    (False, 3, 1, 1),     # the general path
    (True, 1, 1, 1),      # distinct shapes: the bulk path hands over to the general one
], ids=["bulk", "bulk-2-processes", "general", "distinct-shapes"])
def test_a_reimported_row_that_changed_is_reported_and_not_applied(
    app: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bulk: bool, repeat: int,
    copies: int, processes: int
) -> None:
    rows: list[str] = []
    for _ in range(copies):
        rows += _rows(f"s{uuid.uuid4().hex[:8]}", repeat=repeat)
    path = _write(tmp_path, "first.csv", rows)
    first = _import(app, path, monkeypatch, bulk=bulk, processes=processes,
                    expect=None if repeat > 1 or not bulk else "write_pass")
    assert (first.created, first.changed) == (len(rows), [])
    ids = _ids(path)
    before = _written(app, ids)

    # Three rows change, in file order: row 5 (a UUID id) an earlier date, row 10 (a quoted
    # external id) its billing cycle, the last row its amount.
    def edit(row: str, column: int, value: str) -> str:
        cells = next(csv.reader([row]))
        assert cells[column] != value
        cells[column] = value
        out = io.StringIO()
        csv.writer(out, lineterminator="").writerow(cells)
        return out.getvalue()

    changed = list(rows)
    changed[5] = edit(rows[5], 1, "2025-12-01")
    changed[10] = edit(rows[10], 4, "28" if next(csv.reader([rows[10]]))[4] != "28" else "27")
    changed[-1] = edit(rows[-1], 2, "99.99")
    path2 = _write(tmp_path, "second.csv", changed)
    passes: list[int] = []
    real_pass = import_parallel.parallel_validate_pass
    monkeypatch.setattr(import_parallel, "parallel_validate_pass",
                        lambda *a, **k: (passes.append(1), real_pass(*a, **k))[1])
    again = _import(app, path2, monkeypatch, bulk=bulk, processes=processes,
                    expect=None if repeat > 1 or not bulk else "write_pass")
    assert passes == ([1] if processes == 2 else [])
    assert (again.created, again.existing) == (0, len(rows))

    def shown(row: str) -> str:
        cell = next(csv.reader([row]))[0]
        return str(uuid.UUID(cell)) if cell.count("-") == 4 and len(cell) == 36 else cell

    assert again.changed == [shown(changed[5]), shown(changed[10]), shown(changed[-1])]
    assert _written(app, ids) == before  # the recorded escalations stand, untouched


@pytest.mark.parametrize(("bulk", "repeat"), [(True, 3), (False, 3), (True, 1)],
                         ids=["bulk", "general", "distinct-shapes"])
def test_a_reimport_reschedules_what_redis_lost_and_counts_it(
    app: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bulk: bool, repeat: int
) -> None:
    # As an import interrupted between its PostgreSQL and Redis steps leaves it: recorded,
    # not scheduled. The re-run schedules them again and says how many.
    path = _write(tmp_path, "lost.csv", _rows(f"s{uuid.uuid4().hex[:8]}", repeat=repeat))
    expect = None if repeat > 1 or not bulk else "write_pass"
    first = _import(app, path, monkeypatch, bulk=bulk, expect=expect)
    assert (first.created, first.rescheduled) == (120, 0)
    ids = _ids(path)
    before = _written(app, ids)
    lost = ids[7:12] + ids[100:103]
    for did in lost:
        keys: Keys = app.scheduler.keys_for(did)
        app.redis.delete(keys.payload(did))
        app.redis.zrem(keys.pending, str(did))
    assert all(app.redis.zscore(app.scheduler.keys_for(d).pending, str(d)) is None for d in lost)

    again = _import(app, path, monkeypatch, bulk=bulk, expect=expect)
    assert (again.created, again.existing, again.rescheduled) == (0, 120, len(lost))
    assert again.changed == []
    after = _written(app, ids)
    assert after["payloads"] == before["payloads"] and after["scores"] == before["scores"]
    assert after["ledger"] == before["ledger"]  # nothing new recorded

    third = _import(app, path, monkeypatch, bulk=bulk, expect=expect)
    assert (third.existing, third.rescheduled) == (120, 0)
