"""Pass 1 of the CSV import's bulk path in two processes (``import_csv``; ADR 0008).

Pass 1 (parse, validate, render every row) is pure CPU on one core while PostgreSQL and Redis
wait for pass 2, so on a machine with a second core it runs in two processes: this one and
one ``os.fork`` child. Both read the whole file; its non-blank records are cut into chunks of
:data:`CHUNK` and the chunks alternate (even: this process, odd: the child). Each process
parses, validates and renders its own chunks exactly as the one-process pass does
(``_row_request``, ``RowEncoder.encode``) and writes each chunk's rendered rows as one pickled
record to a temporary file of its own. The child sends back, per chunk, the line number,
dispute id and outcome of every parsed row; this process merges the chunks in file order and
runs the duplicate-id check there, so the errors are the one-process pass's errors, line for
line (a duplicate row the child already rendered is left out of pass 2). Pass 2 reads the
chunks back in order from the two files (:class:`ChunkSpill`).

Fork safety: the child touches no connection this process opened. It renders from the
ladder, calendars and templates in memory; a ladder-release refresh it may make reaches
PostgreSQL through a new connection (``db.make_engine`` discards, in a child, every pooled
connection of its parent without closing it); Redis pools reconnect in a child by themselves.
The child ends with ``os._exit`` (no exit handlers of this process run twice) and is waited
for, or killed and waited for if this process fails first.
"""

from __future__ import annotations

import contextlib
import csv
import gc
import os
import pickle
import signal
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from typing import IO, Any, TextIO

from escalation.domain.errors import InvalidInput
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
from escalation.service_layer.progress import Progress, no_progress

CHUNK = 2_000
"""Non-blank records per chunk; chunk k is this process's when k is even, else the child's."""

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


def parallel_validate_pass(open_csv: OpenCsv, mapping: ColumnMapping, default_timezone: str,
                           encoder: RowEncoder, spill: ChunkSpill,
                           progress: Progress = no_progress) -> ImportResult:
    """Pass 1 of the bulk path in this process and one forked child (module docstring).

    Returns the row count and the bad rows (file order), as the one-process pass does;
    ``spill`` receives the rendered rows.

    Raises:
        InvalidInput: the header does not fit the mapping. OSError / UnicodeDecodeError:
            reading the file (in either process). RuntimeError: the child process ended
            without its results.
    """
    receive, send = Pipe(duplex=False)
    # While the child lives, the objects that exist at the fork are left out of the garbage
    # collector's passes in both processes (gc.freeze, its documented use before a fork): a
    # full collection writes into every tracked object, which would give each process its
    # own copy of every page they share (measured: the child's private memory grew from 12
    # to 50 MiB at this process's first full collection).
    frozen_before = gc.get_freeze_count()  # a caller's own frozen objects stay frozen
    gc.freeze()
    try:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child's coverage is not collected
            receive.close()
            _child(open_csv, mapping, default_timezone, encoder, spill.files[1], send)
        send.close()
        try:
            result = _merge(open_csv, mapping, default_timezone, encoder, spill, receive,
                            progress)
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            raise
        finally:
            receive.close()
            os.waitpid(pid, 0)
    finally:
        if frozen_before == 0:
            gc.unfreeze()
    return result


def _child(open_csv: OpenCsv, mapping: ColumnMapping, default_timezone: str,
           encoder: RowEncoder, out: IO[bytes], send: Connection) -> None:
    """The child: render the odd chunks, send each chunk's outcomes as ``("chunk", index,
    ChunkResult)``, then ``("done", None, None)``; an exception is sent as ``("error", None,
    exc)``. Never returns (``os._exit``: 0, or 1 after an exception)."""
    code = 0
    try:
        with open_csv() as stream:
            for index, layout, records in _chunks(stream, mapping, default_timezone):
                if index % 2 == 1:
                    send.send(("chunk", index, _encode_chunk(layout, records, encoder, out)))
        out.flush()
        send.send(("done", None, None))
    except BaseException as exc:  # every failure goes to the parent
        code = 1
        with contextlib.suppress(BaseException):  # else the parent sees EOF
            send.send(("error", None, exc))
    finally:
        os._exit(code)


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


def _receive(receive: Connection) -> tuple[str, Any, Any]:
    """The child's next message; an error it sent is raised here.

    Raises:
        RuntimeError: the child ended without sending (EOF).
    """
    try:
        kind, index, payload = receive.recv()
    except EOFError:
        raise RuntimeError("import pass 1: the helper process ended without its "
                           "results") from None
    if kind == "error":
        raise payload
    return kind, index, payload


def _merge(open_csv: OpenCsv, mapping: ColumnMapping, default_timezone: str,
           encoder: RowEncoder, spill: ChunkSpill, receive: Connection,
           progress: Progress) -> ImportResult:
    """Render the even chunks here, take the odd ones from the child, and merge all of them
    in file order (duplicate ids, errors, counts)."""
    merger = _Merger(spill, progress)
    with open_csv() as stream:
        for index, layout, records in _chunks(stream, mapping, default_timezone):
            if index % 2 == 0:
                merger.merge(index, _encode_chunk(layout, records, encoder, spill.files[0]))
                continue
            kind, got, chunk = _receive(receive)
            if kind != "chunk" or got != index:
                raise RuntimeError(f"import pass 1: expected chunk {index} from the helper "
                                   f"process, got {kind} {got}")
            merger.merge(index, chunk)
    kind, _, _ = _receive(receive)
    if kind != "done":
        raise RuntimeError(f"import pass 1: unexpected {kind} from the helper process")
    progress("validate", merger.result.rows, merger.result.rows)
    return merger.result
