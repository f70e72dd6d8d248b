"""``escalation import`` and ``escalation demo``."""

from __future__ import annotations

import json
import signal
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from escalation.domain.errors import InvalidInput
from escalation.entrypoints.cli_common import _app, err, out

if TYPE_CHECKING:  # the importer pulls SQLAlchemy: imported when a command runs, not at --help
    from escalation.service_layer.importer import ColumnMapping

app = typer.Typer()  # top-level commands, merged into the root by cli.py


def _mapping(mapping: Path | None, **flags: str | None) -> ColumnMapping:
    """The column mapping from a TOML file and/or flags (flags win)."""
    from escalation.service_layer.importer import ColumnMapping

    if mapping is not None:
        return ColumnMapping.from_file(mapping, **flags)
    clean: dict[str, Any] = {k: v for k, v in flags.items() if v is not None}
    return ColumnMapping(**clean)


def _delimiter(flag: str | None) -> str | None:
    """``--delimiter``'s value as the character itself: ``tab`` (or ``\\t``) is a tab;
    anything else is passed on as given (the mapping refuses what it does not read)."""
    if flag is None:
        return None
    return "\t" if flag.lower() in ("tab", "\\t") else flag


@app.command("import")
def import_csv(  # noqa: PLR0913 - a typer command: one parameter per option (ADR 0036)
    csv_path: Annotated[Path, typer.Argument(help="CSV file with a header row.")],
    mapping: Annotated[Path | None, typer.Option(help="TOML mapping file.")] = None,
    id_column: Annotated[str | None, typer.Option(help="Dispute id column.")] = None,
    opened_column: Annotated[str | None, typer.Option(help="Tier entry time column.")] = None,
    due_column: Annotated[str | None, typer.Option(help="Breach time column.")] = None,
    tier_column: Annotated[str | None, typer.Option(help="Tier column.")] = None,
    materiality_column: Annotated[str | None, typer.Option(help="Amount column.")] = None,
    tier: Annotated[str | None, typer.Option(help="Default tier.")] = None,
    default_materiality: Annotated[str | None, typer.Option(
        help="Amount of every row when no amount column is mapped (default: 0.00), or of "
             "the blank cells of the mapped amount column (default: a blank cell is a bad "
             "row); [defaults] materiality in a mapping file.")] = None,
    timezone: Annotated[str | None, typer.Option(
        help="Institution zone of every row (date-only and naive values are read in it; "
             "default: the ladder version's, else ESCALATION_INSTITUTION_TIMEZONE).")] = None,
    external_source: Annotated[str | None, typer.Option(help="Namespace of ids.")] = None,
    ladder: Annotated[str | None, typer.Option(help="Ladder name.")] = None,
    skip_invalid: Annotated[bool, typer.Option(help="Import good rows, list bad.")] = False,
    delimiter: Annotated[str | None, typer.Option(
        help="Field separator: ',' (the default), ';' or 'tab' ([defaults] delimiter in a "
             "mapping file).")] = None,
    keep_column: Annotated[list[str] | None, typer.Option(
        help="A column whose cells each escalation keeps as a source attribute (shown with "
             "the dispute, recorded in its ENQUEUED ledger row); repeat for more; added to "
             "[columns] keep in a mapping file. None is kept unless named.")] = None,
    processes: Annotated[int | None, typer.Option(
        min=1, max=2,
        help="Processes for pass 1 (parse and validate) of a large file: 2 is faster on a "
             "machine with two or more CPUs and holds about 55 MB more memory; default: 2 "
             "there, else 1.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Load disputes from a CSV (e.g. the CFPB complaint database) and schedule them.

    Every row is validated first; a file with any bad row imports nothing unless
    --skip-invalid.

    Source attributes: each --keep-column (or [columns] keep = ["Product", "Company"] in a
    mapping file) names a column whose non-blank cells each escalation keeps under that
    header, recorded in its ENQUEUED ledger row and shown on the console's dispute page and
    in the API's dispute JSON; no other column is kept. A kept column the header lacks
    stops the import before anything is written; a cell over 500 characters is a bad row.
    """
    from escalation.bootstrap import (
        outcome_fanout,
        pass1_helper,
        schedule_for,
        warnings_for,
        write_pipeline,
    )
    from escalation.entrypoints.progress_bars import cli_progress
    from escalation.service_layer.importer import ImportCsv, ImportTarget, import_csv

    cmap = _mapping(
        mapping, dispute_id=id_column, opened_at=opened_column, due_at=due_column,
        tier=tier_column, materiality=materiality_column, default_tier=tier,
        default_materiality=default_materiality, timezone=timezone,
        external_source=external_source, ladder=ladder, delimiter=_delimiter(delimiter),
    )
    if keep_column:  # the file's kept columns, then the flags' (each once)
        cmap = replace(cmap, keep_columns=tuple(dict.fromkeys((*cmap.keep_columns,
                                                                *keep_column))))
    if not csv_path.is_file():
        why = ("no such file" if not csv_path.exists()
               else "a directory" if csv_path.is_dir()
               else "not a regular file (the import reads the file twice: save it first)")
        raise InvalidInput(f"{csv_path}: cannot read: {why}")
    a = _app(actor="import", strict_ladders=True, durable_redis=True)
    target = ImportTarget(scheduler=a.scheduler, store=a.store, ladders=a.ladders,
                          calendars=a.calendars, default_ladder=a.settings.default_ladder,
                          actor=a.actor, warnings=warnings_for(a),  # pre-breach warnings
                          events=a.store,  # outcomes: record_action / resolve
                          on_replanned=schedule_for(a, only_ahead=True),
                          pipeline=write_pipeline(), helper=pass1_helper(processes),
                          fanout=outcome_fanout())
    seen = _WriteProgress()
    previous = {s: signal.signal(s, seen.on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        with cli_progress("import") as progress:
            # surrogateescape: a byte that is not UTF-8 fails its own row, with its line
            res = import_csv(ImportCsv(
                lambda: csv_path.open(newline="", encoding="utf-8-sig",
                                      errors="surrogateescape"),
                cmap, skip_invalid=skip_invalid, processes=processes),
                target, seen.wrap(progress))
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"{csv_path}: cannot read: {exc}") from None
    except _Interrupted as stop:
        err.print(seen.aftermath(csv_path, stop), markup=False, highlight=False)
        raise typer.Exit(128 + stop.signum) from None
    except BaseException as exc:  # a server lost while writing, a second Ctrl-C
        if seen.writing:
            err.print(seen.aftermath(csv_path, exc), markup=False, highlight=False)
        raise
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        a.close()
    _report_import(csv_path, res, skip_invalid=skip_invalid, as_json=as_json)


class _Interrupted(BaseException):
    """SIGINT/SIGTERM during an import, raised at the next progress call: between two batches
    of pass 2 (the batch in flight finishes first), or between two chunks of pass 1."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class _WriteProgress:
    """Remembers how far pass 2 got (rows recorded in PostgreSQL), stops the import at its
    next progress call after SIGINT/SIGTERM (a second signal interrupts at once), and words
    what an interrupted or failed import left."""

    def __init__(self) -> None:
        self.written = 0
        self.total: int | None = None
        self.writing = False
        self.outcomes: tuple[int, int | None] | None = None
        """(rows done, rows) of pass 3 (outcomes), once it began."""
        self.signum: int | None = None

    def on_signal(self, signum: int, frame: Any) -> None:
        """Signal handler: note the stop; the second one raises KeyboardInterrupt here."""
        if self.signum is not None:
            raise KeyboardInterrupt
        self.signum = signum

    def wrap(self, inner: Any) -> Any:
        """A progress callback that notes pass 2's counts, calls ``inner``, and raises
        :class:`_Interrupted` once a stop signal came."""
        def progress(phase: str, done: int, total: int | None) -> None:
            if phase == "write":
                self.writing, self.written, self.total = True, done, total
            elif phase == "outcomes":
                self.outcomes = (done, total)
            inner(phase, done, total)
            finished = (phase in ("write", "outcomes") and total is not None
                        and done >= total)
            if self.signum is not None and not finished:
                raise _Interrupted(self.signum)
        return progress

    def aftermath(self, csv_path: Path, exc: BaseException) -> str:
        """One line: what the interruption (or failure) left, and what to run."""
        of = f" of {self.total}" if self.total is not None else ""
        if self.outcomes is not None:
            done, rows = self.outcomes
            what = "interrupted" if isinstance(exc, (_Interrupted, KeyboardInterrupt)) \
                else "failed"
            return (f"{csv_path}: import {what} while recording outcomes: every row recorded "
                    f"and scheduled, the outcomes of {done}"
                    + (f" of {rows}" if rows is not None else "")
                    + " rows recorded, perhaps a few more; run the same import again: it "
                    "adds the outcomes not yet on record")
        if isinstance(exc, _Interrupted):
            if not self.writing:
                return f"{csv_path}: import interrupted before anything was written"
            return (f"{csv_path}: import interrupted between two batches: {self.written}{of} "
                    f"rows recorded and scheduled; run the same import again to write the "
                    f"rest")
        what = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
        return (f"{csv_path}: import {what} while writing: {self.written}{of} rows recorded "
                f"and confirmed, perhaps a batch more; run the same import again: it "
                f"schedules what was recorded but not yet scheduled, and writes the rest")


def _report_import(csv_path: Path, res: Any, *, skip_invalid: bool, as_json: bool) -> None:
    """Bad rows (first 50) on stderr, then the summary line (exit 2 when nothing written).

    ``--json``: one JSON object on stdout, written or not, with every bad row as
    ``{"line", "message"}`` in ``errors`` (``imported`` false when nothing was written) and
    the ids of re-imported rows that differ from their recorded escalation in
    ``changed_since_recorded`` (a warning on stderr either way). With an ``[outcomes]``
    mapping, ``outcomes`` holds ``added``, ``already_on_record`` and ``not_applied`` (each
    ``{"line", "id", "message"}``; a warning on stderr either way), else null."""
    for line, msg in res.errors[:50]:
        err.print(f"{csv_path}:{line}: {msg}", markup=False, highlight=False)
    if len(res.errors) > 50:
        err.print(f"... and {len(res.errors) - 50} more bad rows"
                  + ("" if as_json else " (--json lists them all)"))
    summary = {"imported": res.written, "rows": res.rows, "created": res.created,
               "already_enqueued": res.existing, "skipped_invalid":
               len(res.errors) if res.written else 0,
               "errors": [{"line": line, "message": msg} for line, msg in res.errors],
               "changed_since_recorded": res.changed, "rescheduled": res.rescheduled,
               "outcomes": None if res.outcomes is None else {
                   "added": res.outcomes.added, "already_on_record": res.outcomes.on_record,
                   "not_applied": [{"line": line, "id": shown, "message": msg}
                                   for line, shown, msg in res.outcomes.not_applied]}}
    if as_json:
        sys.stdout.write(json.dumps(summary) + "\n")
    if not res.written:
        err.print(f"error: {len(res.errors)} bad row(s); nothing imported"
                  + ("" if skip_invalid else " (fix them or pass --skip-invalid)"))
        raise typer.Exit(2)
    if res.changed:
        # the ledger is append-only: a recorded escalation is never rewritten by a re-import
        shown = ", ".join(res.changed[:10]) + (
            f" and {len(res.changed) - 10} more" if len(res.changed) > 10 else "")
        err.print(f"warning: {len(res.changed)} row(s) differ from the escalation recorded "
                  f"for their dispute (their source hash, of the row's text: changed data, or "
                  f"only quoting or spacing, since the first import); the recorded escalation "
                  f"stands and these rows were not applied: {shown}"
                  + ("" if as_json else " (--json lists them all)"),
                  markup=False, highlight=False)
    if res.outcomes is not None and res.outcomes.not_applied:
        for line, shown, msg in res.outcomes.not_applied[:50]:
            err.print(f"{csv_path}:{line}: outcome of {shown} not applied: {msg}",
                      markup=False, highlight=False)
        err.print(f"warning: {len(res.outcomes.not_applied)} outcome(s) not applied; what "
                  "the ledger holds for those disputes stands"
                  + ("" if as_json else " (--json lists them all)"),
                  markup=False, highlight=False)
    if not as_json:
        notes = ([f"{res.rescheduled} of them re-scheduled: their Redis entry was missing"]
                 if res.rescheduled else [])
        notes += [f"{len(res.changed)} of them changed, not applied"] if res.changed else []
        changed = f" ({'; '.join(notes)})" if notes else ""
        out.print(f"imported {csv_path}: {res.created} enqueued, {res.existing} already "
                  f"enqueued{changed}, {len(res.errors)} skipped as invalid ({res.rows} rows)"
                  + _outcome_note(res.outcomes), markup=False, highlight=False)


def _outcome_note(report: Any) -> str:
    """``"; outcomes: N added, M already on record[, K not applied]"`` ("" without any)."""
    if report is None:
        return ""
    refused = f", {len(report.not_applied)} not applied" if report.not_applied else ""
    return (f"; outcomes: {report.added} added, {report.on_record} already on record"
            f"{refused}")


@app.command()
def demo(
    count: Annotated[int, typer.Option(help="Generated disputes.", min=1, max=20000)] = 300,
    workers: Annotated[int, typer.Option(help="Worker processes.", min=1, max=16)] = 3,
    csv_path: Annotated[Path | None, typer.Option("--csv", help="Import this CSV.")] = None,
    mapping: Annotated[Path | None, typer.Option(help="Mapping file for --csv.")] = None,
    timeout_s: Annotated[
        float, typer.Option(help="Give up after this many seconds.", min=1.0)
    ] = 120.0,
) -> None:
    """Run the main job end to end on the embedded servers (or the configured ones). Worker
    logs go to ESCALATION_HOME/demo-logs; on configured servers with no ESCALATION_HOME
    set, to a new temporary directory (named on stderr and in the summary)."""
    from escalation.entrypoints.demo import run_demo

    code = run_demo(count=count, workers=workers, csv_path=csv_path, mapping=mapping,
                    timeout_s=timeout_s)
    raise typer.Exit(code)
