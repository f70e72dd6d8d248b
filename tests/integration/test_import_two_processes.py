"""``import_csv`` with pass 1 in two processes (``import_parallel``: this process renders the
even chunks, a forked child the odd ones) writes what the one-process pass writes and reports
the same bad rows, line for line, duplicate ids across the two processes' chunks included; a
child that dies leaves nothing written. Trace ids are random per row, so the two runs are
compared without them, and each run's hash chains are verified by the store itself."""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from escalation.bootstrap import pass1_helper, warnings_for
from escalation.service_layer import import_parallel
from escalation.service_layer.importer import (
    ColumnMapping,
    ImportCsv,
    ImportResult,
    ImportTarget,
    import_csv,
    stable_dispute_id,
)

HEADER = "id,opened,amount,tier,tz"
MAPPING = ColumnMapping(dispute_id="id", opened_at="opened", materiality="amount",
                        tier="tier", timezone_column="tz", ladder="reg_z_billing_error",
                        default_attributes={"cycle_closing_day": "12"})


def _rows(source: str, n: int = 1_200) -> list[str]:
    """``n`` good rows in about 30 repeating shapes (dates, amounts, tiers, zones)."""
    rows = []
    for i in range(n):
        k = i // 40
        day = f"2026-{9 + k % 3:02d}-{1 + k % 27:02d}"
        rows.append(f"{source}-{i},{day},{['0.00', '15.50', '250000'][k % 3]},"
                    f"{['', 'standard'][k % 2]},{['', 'America/Chicago'][k % 2]}")
    return rows


def _write(tmp_path: Path, name: str, rows: list[str]) -> Path:
    path = tmp_path / name
    path.write_text("\n".join([HEADER, *rows]) + "\n", encoding="utf-8")
    return path


@pytest.fixture()
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """250-record chunks: a 1,200-row file is chunks 0-4, three here and two in the child."""
    monkeypatch.setattr(import_parallel, "CHUNK", 250)


NOW = datetime(2026, 11, 30, 15, 0, 0, 123000, tzinfo=UTC)


def _import(app: Any, path: Path, processes: int, **kw: Any) -> ImportResult:
    """Import at the fixed instant ``NOW`` (so the two runs' ledger rows compare)."""
    app.scheduler.time = lambda: NOW
    target = ImportTarget(scheduler=app.scheduler, store=app.store, ladders=app.ladders,
                          calendars=app.calendars, default_ladder=app.settings.default_ladder,
                          actor="test-import", warnings=warnings_for(app),
                          helper=pass1_helper(processes))
    return import_csv(ImportCsv(lambda: path.open(newline="", encoding="utf-8"), MAPPING,
                                processes=processes, batch_size=300, **kw), target)


LEDGER = sa.text(
    "SELECT dispute_id, seq, event, from_tier, to_tier, ladder, ladder_version, "
    "calendar_version, materiality, due_at, next_due_at, regulatory_deadline, decided_at, "
    "actor, source_hash, external_id, details FROM escalation_audit "
    "WHERE dispute_id = ANY(:ids) ORDER BY dispute_id, seq")
STATE = sa.text(
    "SELECT dispute_id, external_id, status, tier, due_at, entered_tier_at, materiality, "
    "source_hash, regulatory_deadline, last_seq, deadlines, institution_tz "
    "FROM escalation_state WHERE dispute_id = ANY(:ids) ORDER BY dispute_id")


def _written(app: Any, ids: list[uuid.UUID]) -> dict[str, Any]:
    """What the import wrote for ``ids``, without the (random) trace ids and the hashes
    that cover them."""
    with app.engine.connect() as conn:
        ledger = [tuple(r) for r in conn.execute(LEDGER, {"ids": ids})]
        state = [tuple(r) for r in conn.execute(STATE, {"ids": ids})]
    payloads, scores = {}, {}
    for did in ids:
        keys = app.scheduler.keys_for(did)
        payload = app.redis.hgetall(keys.payload(did))
        payload.pop("r", None)  # the trace id
        payloads[did] = payload
        scores[did] = app.redis.zscore(keys.pending, str(did))
    warned = {did: sorted(warnings_for(app).pending(did)) for did in ids}
    return {"ledger": ledger, "state": state, "payloads": payloads, "scores": scores,
            "warnings": warned}


def _ids(rows: list[str]) -> list[uuid.UUID]:
    return [stable_dispute_id(r.split(",")[0], MAPPING.external_source)[0] for r in rows]


@pytest.mark.usefixtures("small_chunks")
def test_two_processes_write_what_one_process_writes(
    app: Any, second_app: Any, tmp_path: Path
) -> None:
    rows = _rows(f"s{uuid.uuid4().hex[:8]}")
    path = _write(tmp_path, "many.csv", rows)
    one = _import(second_app, path, processes=1)
    two = _import(app, path, processes=2)
    assert one.errors == [] and two.errors == []
    assert (two.rows, two.created, two.existing) == (one.rows, one.created, 0) == (1200, 1200, 0)
    ids = _ids(rows)
    want, got = _written(second_app, ids), _written(app, ids)
    assert len(got["ledger"]) == 1200 and got["ledger"] == want["ledger"]
    assert got["state"] == want["state"]
    assert got["payloads"] == want["payloads"] and all(got["payloads"].values())
    assert got["scores"] == want["scores"] and all(got["scores"].values())
    assert got["warnings"] == want["warnings"] and any(got["warnings"].values())
    assert app.store.verify() == []  # every chain's hashes, trace ids included
    with app.engine.connect() as conn:
        traces = conn.execute(sa.text(
            "SELECT count(DISTINCT trace_id) FROM escalation_state WHERE dispute_id = ANY(:i)"),
            {"i": ids}).scalar_one()
    assert traces == 1200  # the child drew trace ids of its own


@pytest.mark.usefixtures("small_chunks")
def test_two_processes_report_the_same_bad_rows(
    app: Any, second_app: Any, tmp_path: Path
) -> None:
    source = f"b{uuid.uuid4().hex[:8]}"
    rows = _rows(source)
    # data line i + 2 of the file is rows[i]; chunk k holds rows[250k : 250(k+1)]
    rows[10] = rows[10].replace(",2026-", ",yesterday-")   # chunk 0 (here): bad time
    rows[300] = f"{source}-5,2026-09-01,1.00,,"            # chunk 1 (child): duplicate of chunk 0
    rows[320] = rows[320].replace(",2026-", ",2026-13-")    # chunk 1: bad date
    rows[600] = f"{source}-301,2026-09-01,1.00,,"          # chunk 2 (here): duplicate of chunk 1
    rows[760] = f"{source}-7,2026-09-01,1.00,nosuchtier,"  # chunk 3 (child): duplicate and bad tier
    rows[770] = f"{source}-x,2026-09-01,1.00,nosuchtier,"  # chunk 3: bad tier
    rows[1199] = f"{source}-x,2026-09-01,1.00,,"           # chunk 4 (here): duplicate of a bad row
    path = _write(tmp_path, "bad.csv", rows)
    one = _import(second_app, path, processes=1)
    two = _import(app, path, processes=2)
    assert two.errors == one.errors
    assert [line for line, _ in two.errors] == [12, 302, 322, 602, 762, 772, 1201]
    assert "already on line 7" in two.errors[1][1]
    assert "already on line 303" in two.errors[3][1]
    assert "already on line 9" in two.errors[4][1]  # the duplicate wins over the bad tier
    assert "already on line 772" in two.errors[6][1]  # a bad row's id still counts
    assert not two.written and two.rows == one.rows == 1200
    ids = _ids(rows)
    assert all(app.store.get(i) is None for i in ids)

    one = _import(second_app, path, processes=1, skip_invalid=True)
    two = _import(app, path, processes=2, skip_invalid=True)
    assert two.errors == one.errors and two.written
    assert (two.created, two.existing) == (one.created, one.existing) == (1193, 0)
    assert _written(app, ids) == _written(second_app, ids)
    assert app.store.verify() == []


@pytest.mark.usefixtures("small_chunks")
def test_a_child_that_dies_leaves_nothing_written(
    app: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = _rows(f"d{uuid.uuid4().hex[:8]}")
    path = _write(tmp_path, "die.csv", rows)
    parent, real = os.getpid(), import_parallel._encode_chunk

    def dying(*args: Any) -> Any:
        if os.getpid() != parent:
            os._exit(3)  # the child, killed mid-pass
        return real(*args)

    monkeypatch.setattr(import_parallel, "_encode_chunk", dying)
    with pytest.raises(RuntimeError, match="helper process ended"):
        _import(app, path, processes=2)
    assert all(app.store.get(i) is None for i in _ids(rows))
