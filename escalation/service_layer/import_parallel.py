"""Pass 1 of the CSV import's bulk path in two processes (``import_csv``; ADR 0008).

Pass 1 (parse, validate, render every row) is pure CPU on one core while PostgreSQL and Redis
wait for pass 2, so on a machine with a second core it runs in two processes: this one and
the import target's helper process (``core.HelperProcess``: the composition root gives a
forked child, ``adapters.helper_process.ForkedHelper``; the unit tests an in-process one).
Both read the whole file; its non-blank records are cut into chunks of :data:`CHUNK` and the
chunks alternate (even: this process, odd: the helper). Each process parses, validates and
renders its own chunks exactly as the one-process pass does (``_row_request``,
``RowEncoder.encode``) and writes each chunk's rendered rows as one pickled record to a
temporary file of its own. The helper sends back, per chunk, the line number, dispute id and
outcome of every parsed row; this process merges the chunks in file order and runs the
duplicate-id check there, so the errors are the one-process pass's errors, line for line (a
duplicate row the helper already rendered is left out of pass 2). Pass 2 reads the chunks
back in order from the two files (:class:`ChunkSpill`).

The helper renders from the ladder, calendars and templates in memory (its copy of this
process's); how it is started, and kept safe across a fork, is the edge's.
"""

from __future__ import annotations

import csv
import pickle
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any, TextIO

from escalation.domain.errors import InvalidInput
from escalation.service_layer.core import HelperProcess, Send
from escalation.service_layer.importer import (
    PROGRESS_EVERY,
    ColumnMapping,
    CsvLayout,
    DuplicateIds,
    EncodedRow,
    ImportResult,
    OpenCsv,
    RowEncoder,
    _layout,
    _lines,
    _parsed,
    _row_request,
    rebatch,
    row_error,
)
from escalation.service_layer.progress_report import Progress, no_progress

CHUNK = 2_000
"""Non-blank records per chunk; chunk k is this process's when k is even, else the
helper's."""

RowOutcome = tuple[int, bytes | None, str, str | None, int]
"""One parsed record of a chunk: (line, dispute id bytes or None when the row did not parse,
the id as an error message shows it, the row's error message or None, its position in the
chunk's rendered rows or -1)."""


@dataclass
class ChunkResult:
    """What one chunk gave: its records' outcomes (file order) and how many records."""

    outcomes: list[RowOutcome] = field(default_factory=list)
    records: int = 0


def _chunks(stream: TextIO, mapping: ColumnMapping, default_timezone: str
            ) -> Iterator[tuple[int, CsvLayout, list[tuple[int, str, int]]]]:
    """The file's non-blank records as (chunk index, layout, records) in chunks of
    :data:`CHUNK`. Raises InvalidInput for a header that does not fit the mapping."""
    records = _lines(stream, mapping.delimiter)
    layout = _layout(records, mapping, default_timezone)
    chunk: list[tuple[int, str, int]] = []
    index = 0
    for lineno, raw, count in records:
        if not raw.strip():
            continue
        chunk.append((lineno, raw, count))
        if len(chunk) >= CHUNK:
            yield index, layout, chunk
            index, chunk = index + 1, []
    if chunk:
        yield index, layout, chunk


def _encode_chunk(layout: CsvLayout, records: list[tuple[int, str, int]],
                  encoder: RowEncoder, out: IO[bytes]) -> ChunkResult:
    """Parse (one ``csv.reader`` over the chunk) and render one chunk; its rendered rows go
    to ``out`` as one pickled list."""
    result = ChunkResult(records=len(records))
    rendered: list[EncodedRow] = []
    for lineno, raw, count, cells in _parsed(records, layout.mapping.delimiter):
        try:
            req = _row_request(layout, raw, cells)
        except (InvalidInput, csv.Error) as exc:
            result.outcomes.append((lineno, None, "", row_error(exc, lineno, count), -1))
            continue
        did = req.dispute_id
        assert isinstance(did, uuid.UUID)  # noqa: S101 - built by _row_request
        shown = req.external_id if req.external_id is not None else str(did)
        try:
            row = encoder.encode(req)
        except InvalidInput as exc:
            result.outcomes.append((lineno, did.bytes, shown, str(exc), -1))
            continue
        result.outcomes.append((lineno, did.bytes, shown, None, len(rendered)))
        rendered.append(row)
    pickle.dump(rendered, out, protocol=pickle.HIGHEST_PROTOCOL)
    return result


class ChunkSpill:
    """The rendered rows of a two-process pass 1: two temporary files of pickled chunks (even
    chunks in the first, odd in the second) and the rows the merge left out. Deleted on
    close."""

    def __init__(self) -> None:
        self.files = (tempfile.TemporaryFile(), tempfile.TemporaryFile())  # noqa: SIM115
        self.chunks = 0
        self.rows = 0
        """Rendered rows that pass 2 writes (left-out rows not counted)."""
        self.dropped: dict[int, set[int]] = {}
        """Chunk index -> positions of rendered rows left out (duplicate ids)."""

    def raw_batches(self, size: int) -> Iterator[list[Any]]:
        """Every row pass 2 writes, in file order, in lists of at most ``size``."""
        for f in self.files:
            f.flush()
            f.seek(0)
        return rebatch(self._chunks(), size)

    def _chunks(self) -> Iterator[list[Any]]:
        """Each chunk's rendered rows, in file order, without the left-out ones."""
        for index in range(self.chunks):
            rows = pickle.load(self.files[index % 2])  # noqa: S301 - our own file
            drop = self.dropped.get(index)
            yield [r for i, r in enumerate(rows) if i not in drop] if drop else rows

    def close(self) -> None:
        """Delete both files."""
        for f in self.files:
            f.close()


@dataclass(frozen=True, slots=True)
class ParallelPass:
    """What both processes of pass 1 read and render with: the file, its mapping, the
    institution zone of rows that name none, and the row encoder."""

    open_csv: OpenCsv
    mapping: ColumnMapping
    default_timezone: str
    encoder: RowEncoder


def parallel_validate_pass(job: ParallelPass, spill: ChunkSpill, helper: HelperProcess,
                           progress: Progress = no_progress) -> ImportResult:
    """Pass 1 of the bulk path in this process and ``helper`` (module docstring).

    Returns the row count and the bad rows (file order), as the one-process pass does;
    ``spill`` receives the rendered rows.

    Raises:
        InvalidInput: the header does not fit the mapping. OSError / UnicodeDecodeError:
            reading the file (in either process). RuntimeError: the helper ended without
            its results, or sent something other than the next chunk.
    """
    out = spill.files[1]

    def render_odd_chunks(send: Send) -> None:
        """The helper's share: render the odd chunks, send each one's ``(index,
        ChunkResult)``."""
        with job.open_csv() as stream:
            for index, layout, records in _chunks(stream, job.mapping, job.default_timezone):
                if index % 2 == 1:
                    send((index, _encode_chunk(layout, records, job.encoder, out)))
        out.flush()

    with helper.start(render_odd_chunks) as received:
        return _merge(job, spill, received, progress)


class _Merger:
    """Merges the chunks' outcomes in file order: counts, errors, duplicate ids (the first
    line of an id wins, as in the one-process pass), rows left out of pass 2."""

    def __init__(self, spill: ChunkSpill, progress: Progress) -> None:
        self.result = ImportResult()
        self._seen = DuplicateIds()
        self._spill = spill
        self._progress = progress

    def merge(self, index: int, chunk: ChunkResult) -> None:
        """Merge chunk ``index`` (the chunks arrive in order)."""
        result, spill = self.result, self._spill
        before = result.rows
        result.rows += chunk.records
        for lineno, did, shown, error, position in chunk.outcomes:
            message = error
            if did is not None:
                first = self._seen.first_line(did, lineno)
                if first != lineno:
                    message = f"dispute id {shown!r} already on line {first}"
                    if position >= 0:
                        spill.dropped.setdefault(index, set()).add(position)
            if message is not None:
                result.errors.append((lineno, message))
            elif position >= 0:
                spill.rows += 1
        spill.chunks = index + 1
        if result.rows // PROGRESS_EVERY > before // PROGRESS_EVERY:
            self._progress("validate", result.rows, None)


_END = object()


def _merge(job: ParallelPass, spill: ChunkSpill, received: Iterator[object],
           progress: Progress) -> ImportResult:
    """Render the even chunks here, take the odd ones from the helper (``received``), and
    merge all of them in file order (duplicate ids, errors, counts)."""
    merger = _Merger(spill, progress)
    with job.open_csv() as stream:
        for index, layout, records in _chunks(stream, job.mapping, job.default_timezone):
            if index % 2 == 0:
                merger.merge(index, _encode_chunk(layout, records, job.encoder,
                                                  spill.files[0]))
                continue
            got = next(received, _END)
            if got is _END:
                raise RuntimeError(f"import pass 1: the helper process ended before chunk "
                                   f"{index}")
            if not (isinstance(got, tuple) and len(got) == 2 and got[0] == index
                    and isinstance(got[1], ChunkResult)):
                raise RuntimeError(f"import pass 1: expected chunk {index} from the helper "
                                   f"process, got {_shown(got)}")
            merger.merge(index, got[1])
    extra = next(received, _END)
    if extra is not _END:
        raise RuntimeError(f"import pass 1: unexpected {_shown(extra)} from the helper "
                           "process")
    progress("validate", merger.result.rows, merger.result.rows)
    return merger.result


def _shown(message: object) -> str:
    """A helper's message as an error names it: the chunk index it carries, or its type."""
    if isinstance(message, tuple) and message:
        return f"chunk {message[0]!r}"
    return type(message).__name__
