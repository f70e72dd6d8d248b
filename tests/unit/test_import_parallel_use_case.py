"""Pass 1 of the CSV import in two processes (service_layer.import_parallel) on an in-process
helper (tests/fakes.py ``InlineHelper``): the helper renders the odd chunks, this process the
even ones, and the merge gives what the one-process pass gives, line for line (row count,
bad rows, duplicate ids across the two shares, the rows pass 2 writes, in file order). A
helper that fails, dies or sends the wrong chunk stops the pass with its error; an import
that asks for two processes of a target without a helper is refused, naming the field."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from escalation.adapters.audit_store import EnqueuedLineTemplate
from escalation.adapters.ladder_files import load_ladder_file
from escalation.adapters.redis_scheduler import PayloadTemplate
from escalation.domain.calendars import builtin_calendars
from escalation.domain.errors import InvalidInput
from escalation.domain.escalation import Escalation
from escalation.resources import shipped_ladders_dir
from escalation.service_layer import import_parallel
from escalation.service_layer.core import HelperProcess
from escalation.service_layer.import_parallel import (
    ChunkResult,
    ChunkSpill,
    ParallelPass,
    parallel_validate_pass,
)
from escalation.service_layer.importer import (
    ColumnMapping,
    ImportCsv,
    ImportResult,
    ImportRun,
    ImportTarget,
    RowEncoder,
    SpillFile,
    import_csv,
    validate_pass,
)
from tests.fakes import FakeAuditLog, FakeLadders, FakeScheduler, InlineHelper

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)
LADDER = load_ladder_file(shipped_ladders_dir() / "dispute_review.v1.toml")
MAPPING = ColumnMapping(dispute_id="id", opened_at="opened", materiality="amount",
                        default_tier="standard", external_source="t")
CHUNK = 4


class _Store:
    """The bulk store's renderer (pure: no server)."""

    def enqueued_line_template(self, proto: Escalation, actor: str, decided_at: datetime,
                               calendar_version: str | None,
                               details: Any) -> EnqueuedLineTemplate:
        return EnqueuedLineTemplate(proto, actor, decided_at, calendar_version, details)


class _Scheduler:
    def payload_template(self, proto: Escalation) -> PayloadTemplate:
        return PayloadTemplate(proto, "ns", 1, None)


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(import_parallel, "CHUNK", CHUNK)


def _csv(n: int = 26, bad: tuple[int, ...] = (), dup: dict[int, int] | None = None) -> str:
    """``n`` rows in two repeating shapes; row ``i`` in ``bad`` has no date; ``dup``: row
    -> the earlier row whose id it repeats."""
    lines = ["id,opened,amount"]
    for i in range(n):
        rid = (dup or {}).get(i, i)
        day = "" if i in bad else f"2026-11-{1 + i % 2:02d}"
        lines.append(f"c{rid},{day},{10 + i % 2}.00")
        if i == 7:
            lines.append("")  # a blank line: not a record, not a chunk's
    return "\n".join(lines) + "\n"


def _target() -> ImportTarget:
    return ImportTarget(scheduler=_Scheduler(), store=_Store(),  # type: ignore[arg-type]
                        ladders=FakeLadders([LADDER]), calendars=builtin_calendars(),
                        default_ladder="dispute_review", actor="import")


def _encoder(target: ImportTarget) -> RowEncoder:
    return RowEncoder((target.store, target.scheduler), target, LADDER,  # type: ignore[arg-type]
                      NOW)


def _rows(batches: Any) -> list[tuple[str, str, str | None]]:
    """The rendered rows pass 2 would write: (dispute id, source hash, external id)."""
    return [(r[0], r[5], r[6]) for batch in batches for r in batch]


def _one_process(text: str) -> tuple[ImportResult, list[tuple[str, str, str | None]]]:
    target = _target()
    spill = SpillFile()
    cmd = ImportCsv(lambda: io.StringIO(text), MAPPING, processes=1)
    try:
        result = validate_pass(cmd, ImportRun(target, NOW), spill, _encoder(target))
        assert result is not None and spill.rendered
        return result, _rows(spill.raw_batches(1000))
    finally:
        spill.close()


def _two_processes(text: str, helper: HelperProcess,
                   opener: Any = None) -> tuple[ImportResult, list[tuple[str, str, str | None]]]:
    target = _target()
    job = ParallelPass(opener or (lambda: io.StringIO(text)), MAPPING, "UTC",
                       _encoder(target))
    spill = ChunkSpill()
    try:
        result = parallel_validate_pass(job, spill, helper)
        return result, _rows(spill.raw_batches(1000))
    finally:
        spill.close()


def test_the_helper_renders_the_odd_chunks_and_the_merge_is_the_one_process_pass() -> None:
    text = _csv()
    helper = InlineHelper()
    two, rows = _two_processes(text, helper)
    one, want = _one_process(text)
    assert (two.rows, two.errors) == (one.rows, one.errors) == (26, [])
    assert rows == want and len(rows) == 26
    assert rows[0][2] == "c0" and rows[-1][2] == "c25"  # file order
    sent = [m for m in helper.sent if isinstance(m, tuple)]
    assert [m[0] for m in sent] == [1, 3, 5] and helper.read_all  # chunks 0-6: 3 odd
    assert all(isinstance(m[1], ChunkResult) for m in sent)


def test_bad_rows_and_duplicates_across_the_two_shares_are_the_one_process_errors() -> None:
    # chunk 0: rows 0-3, chunk 1 (the helper's): rows 4-7, ...; row 5 repeats row 1 (a
    # duplicate the helper rendered), row 9 repeats row 6 (the helper's row, found here)
    text = _csv(bad=(2, 6 + 7), dup={5: 1, 9: 6, 20: 6})
    two, rows = _two_processes(text, InlineHelper())
    one, want = _one_process(text)
    assert two.rows == one.rows == 26
    assert two.errors == one.errors
    assert [line for line, _ in two.errors] == [4, 7, 12, 16, 23]
    assert "already on line 3" in dict(two.errors)[7]
    assert rows == want and len(rows) == 26 - 5  # the duplicates are left out of pass 2


def test_the_helpers_error_stops_the_pass() -> None:
    calls: list[int] = []

    def opener() -> io.StringIO:
        calls.append(1)
        if len(calls) == 1:  # the in-process helper opens the file first
            raise OSError("disk gone")
        return io.StringIO(_csv())

    with pytest.raises(OSError, match="disk gone"):
        _two_processes("", InlineHelper(), opener)


def test_a_helper_that_dies_stops_the_pass() -> None:
    with pytest.raises(RuntimeError, match="helper process ended"):
        _two_processes(_csv(), InlineHelper(ends_after=1))


class _WrongChunk(InlineHelper):
    """Sends chunk 3 where chunk 1 is due."""

    def start(self, job: Any) -> Any:
        return super().start(lambda send: job(
            lambda m: send((m[0] + 2, m[1]) if isinstance(m, tuple) else m)))


def test_a_helper_that_sends_the_wrong_chunk_stops_the_pass() -> None:
    with pytest.raises(RuntimeError, match="expected chunk 1 from the helper process, got "
                                           "chunk 3"):
        _two_processes(_csv(), _WrongChunk())


def test_a_header_without_the_mapped_columns_is_refused() -> None:
    with pytest.raises(InvalidInput, match="opened"):
        _two_processes("id,amount\nc1,1.00\n", InlineHelper())


def test_two_processes_without_a_helper_is_refused_naming_the_field() -> None:
    store, scheduler = FakeAuditLog(), FakeScheduler(now=NOW)
    target = ImportTarget(scheduler=scheduler, store=store,  # type: ignore[arg-type]
                          ladders=FakeLadders([LADDER]), calendars=builtin_calendars(),
                          default_ladder="dispute_review", actor="import")
    cmd = ImportCsv(lambda: io.StringIO(_csv()), MAPPING, processes=2)
    with pytest.raises(InvalidInput, match=r"^processes: 2 needs a helper process"):
        import_csv(cmd, target)
    assert store.states == {}
    # the same file in one process is written
    assert import_csv(ImportCsv(cmd.open_csv, MAPPING, processes=1), target).created == 26


def test_the_module_runs_no_process_machinery_itself() -> None:
    source = Path(import_parallel.__file__).read_text("utf-8")
    for name in ("os.fork", "multiprocessing", "gc.freeze", "signal", "os._exit"):
        assert name not in source
