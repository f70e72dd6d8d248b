"""Outcomes carried by an import: a CSV column that says how the dispute was answered.

A mapping file's ``[outcomes]`` table (docs/sla.md "Imported outcomes";
docs/adr/0010-obligations-and-resolution.md, "Imports carry outcomes") names the column that
holds the answer (CFPB "Company response to consumer"), what each of its values records (an
action of the ladder, a resolution with its outcome code, both, or nothing), the column that
says whether the answer was timely (CFPB "Timely response?") with its yes/no values, and the
source name written into each row's ``asserted.source``.

The source gives no instant for the answer, so none is invented: every action and resolution
is recorded with ``occurred_at`` None and ``asserted_timely`` True/False from the timeliness
cell, or None when that cell is blank or no timeliness column is mapped (the deadline it
would speak of is then ``undetermined`` per ``domain.obligations.assess``). Rows go through
the use cases ``record_action`` and ``resolve`` (a resolution leaves Redis) with the
idempotency keys ``import:<action>`` and ``import:resolution``, so a re-import adds only the
outcomes missing from the ledger and reports the ones already on record.

A non-blank value the mapping does not list makes the row bad (column, value and line named),
like any other bad cell: nothing is imported unless ``--skip-invalid``. A blank cell records
nothing (no answer stated).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from uuid import UUID

from escalation.domain.calendars import CalendarRegistry
from escalation.domain.errors import ConflictError, InvalidInput, NotFound
from escalation.domain.ladder import Ladder
from escalation.domain.obligations import Outcome
from escalation.ports import LadderSource, Scheduler
from escalation.service_layer.core import ONE_BY_ONE, Fanout
from escalation.service_layer.enqueue import OnScheduled
from escalation.service_layer.obligations import (
    ObligationPorts,
    ObligationStore,
    RecordAction,
    Resolve,
    record_action,
    resolve,
)
from escalation.service_layer.progress_report import Progress, no_progress

KEY_PREFIX = "import:"
"""Idempotency keys of imported outcomes: ``import:<action id>`` and ``import:resolution``."""
RESOLUTION_KEY = f"{KEY_PREFIX}resolution"
WINDOW = 500
"""Rows recorded between two progress calls."""

_TABLE_KEYS = frozenset({"column", "timely_column", "timely_yes", "timely_no", "source",
                         "values"})
_STEP_KEYS = frozenset({"action", "resolution"})


@dataclass(frozen=True, slots=True)
class OutcomeStep:
    """What one value of the outcome column records, in this order: ``action`` (an action
    id the dispute's ladder declares) then ``resolution`` (an
    :class:`~escalation.domain.obligations.Outcome` code). Both None: a known value that
    records nothing (e.g. CFPB "Untimely response": no answer yet)."""

    action: str | None = None
    resolution: str | None = None


@dataclass(frozen=True, slots=True)
class OutcomeMapping:
    """The ``[outcomes]`` table of a mapping file.

    Attributes:
        column: the CSV column holding the answer (its cell is matched exactly, after
            stripping surrounding spaces).
        values: cell text -> :class:`OutcomeStep`.
        timely_column: the column saying whether the answer was timely ("" = not mapped:
            nothing is asserted about timeliness).
        timely_yes / timely_no: its cell texts meaning timely / late (exact, stripped).
        source: written into every row's ``asserted.source`` (default: the column names).
    """

    column: str
    values: dict[str, OutcomeStep] = field(default_factory=dict)
    timely_column: str = ""
    timely_yes: tuple[str, ...] = ("Yes",)
    timely_no: tuple[str, ...] = ("No",)
    source: str = ""

    @classmethod
    def from_table(cls, path: Path, table: object) -> OutcomeMapping:
        """Read ``[outcomes]`` (and ``[outcomes.values]``) of the mapping file ``path``.

        Raises:
            InvalidInput: an unknown key, a missing ``column`` or ``values``, a value that is
                not ``{action = "..."}`` / ``{resolution = "<Outcome code>"}`` / both / ``{}``,
                an unknown outcome code (``unstated`` included), or a timeliness text listed
                as both yes and no.
        """
        where = f"{path}: [outcomes]"
        if not isinstance(table, dict):
            raise InvalidInput(f"{where} must be a table")
        unknown = sorted(set(table) - _TABLE_KEYS)
        if unknown:
            raise InvalidInput(f"{where} {unknown[0]}: unknown key (known: "
                               f"{', '.join(sorted(_TABLE_KEYS))})")
        column = table.get("column")
        if not isinstance(column, str) or not column:
            raise InvalidInput(f"{where} column: the CSV column holding the outcome is "
                               "required")
        raw = table.get("values")
        if not isinstance(raw, dict) or not raw:
            raise InvalidInput(f"{where} values: a table of \"<cell text>\" = {{action = ...}}"
                               " or {resolution = ...} is required")
        values = {str(k).strip(): _step(f"{where} values {k!r}", v) for k, v in raw.items()}
        yes = _texts(f"{where} timely_yes", table.get("timely_yes", ["Yes"]))
        no = _texts(f"{where} timely_no", table.get("timely_no", ["No"]))
        both = sorted(set(yes) & set(no))
        if both:
            raise InvalidInput(f"{where}: {both[0]!r} is in both timely_yes and timely_no")
        timely_column = str(table.get("timely_column", ""))
        source = str(table.get("source", "")) or ", ".join(
            c for c in (column, timely_column) if c)
        return cls(column, values, timely_column, yes, no, source)

    def columns(self) -> list[str]:
        """The CSV columns this table reads."""
        return [c for c in (self.column, self.timely_column) if c]

    def step(self, cell: str) -> OutcomeStep | None:
        """The step of one outcome cell; None for a blank cell.

        Raises:
            InvalidInput: a value the mapping does not list (names the column and value).
        """
        text = cell.strip()
        if not text:
            return None
        got = self.values.get(text)
        if got is None:
            known = ", ".join(repr(v) for v in self.values)
            raise InvalidInput(f"{self.column}: value {text!r} is not in the mapping's "
                               f"[outcomes.values] ({known})")
        return got

    def timely(self, cell: str) -> bool | None:
        """True / False for a timeliness cell; None when blank or no column is mapped.

        Raises:
            InvalidInput: a value that is neither yes nor no (names the column and value).
        """
        text = cell.strip()
        if not text:
            return None
        if text in self.timely_yes:
            return True
        if text in self.timely_no:
            return False
        raise InvalidInput(f"{self.timely_column}: value {text!r} is neither "
                           f"{'/'.join(self.timely_yes)} nor {'/'.join(self.timely_no)}")

    def check(self, ladder: Ladder) -> None:
        """Every action the values name is declared by ``ladder`` (the import's version).

        Raises:
            InvalidInput: names the value and the undeclared action.
        """
        declared = {a.id for a in ladder.actions}
        for text, step in self.values.items():
            if step.action is not None and step.action not in declared:
                raise InvalidInput(
                    f"[outcomes.values] {text!r}: action {step.action!r} is not declared by "
                    f"{ladder.name} v{ladder.version} (its actions: "
                    f"{', '.join(sorted(declared)) or 'none'})")


def _step(where: str, value: object) -> OutcomeStep:
    """One ``[outcomes.values]`` entry. Raises InvalidInput."""
    if not isinstance(value, dict) or set(value) - _STEP_KEYS:
        raise InvalidInput(f"{where}: write {{action = \"<id>\"}}, {{resolution = "
                           "\"<outcome code>\"}}, both, or {} (records nothing)")
    action = value.get("action")
    resolution = value.get("resolution")
    if action is not None and (not isinstance(action, str) or not action):
        raise InvalidInput(f"{where}: action must be an action id")
    if resolution is not None:
        codes = [o.value for o in Outcome if o is not Outcome.UNSTATED]
        if resolution not in codes:
            raise InvalidInput(f"{where}: resolution {resolution!r} is not an outcome code "
                               f"(one of {', '.join(codes)})")
    return OutcomeStep(action, resolution)


def _texts(where: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(
            isinstance(v, str) and v.strip() for v in value):
        raise InvalidInput(f"{where}: a list of non-empty cell texts")
    return tuple(v.strip() for v in value)


OutcomeRow = tuple[int, UUID, str, OutcomeStep, "bool | None"]
"""(1-based line, dispute id, the id as the file gives it, what to record, timely)."""


@dataclass
class OutcomeReport:
    """What :func:`record_outcomes` did.

    Attributes:
        added: actions and resolutions recorded now.
        on_record: already on the ledger under their ``import:`` key (a re-import).
        not_applied: (line, id as the file gives it, why) for each one refused: a dispute
            already resolved or cancelled otherwise, its key used for other content (the
            file changed since it was recorded), or an action its pinned ladder version
            does not declare. The ledger is append-only: what is recorded stands.
    """

    added: int = 0
    on_record: int = 0
    not_applied: list[tuple[int, str, str]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class OutcomePorts:
    """The ports the outcome use cases need (the import target's), the hook that
    schedules the pre-breach warnings of a due time an action re-planned (``record_action``'s
    ``on_replanned``; None: none scheduled), and how rows are recorded at once
    (``fanout``: the edge's choice, e.g. four helper threads; :data:`ONE_BY_ONE` here)."""

    scheduler: Scheduler
    store: ObligationStore
    ladders: LadderSource
    calendars: CalendarRegistry
    on_replanned: OnScheduled | None = None
    fanout: Fanout = ONE_BY_ONE


@dataclass(frozen=True, slots=True)
class RecordOutcomes:
    """The command of :func:`record_outcomes`.

    Attributes:
        rows: the good rows that carry an outcome, in line order.
        mapping: the ``[outcomes]`` table that read them.
        actor: who records them (the import's actor).
        total: rows for the progress bar (the good rows of the file; those without an
            outcome are not in ``rows``).
    """

    rows: Iterable[OutcomeRow]
    mapping: OutcomeMapping
    actor: str
    total: int


def record_outcomes(cmd: RecordOutcomes, ports: OutcomePorts,
                    progress: Progress = no_progress) -> OutcomeReport:
    """Record each row's action, then its resolution, through ``record_action`` /
    ``resolve`` (one transaction each; module doc).

    ``ports.fanout`` decides how many rows are recorded at once: each row is one dispute
    (pass 1 refused a dispute id seen twice, so no two calls write the same dispute; each
    write keeps its own seq compare-and-set), and the time is the round trips to PostgreSQL
    and Redis, which the edge's helper threads overlap. Nothing raises for one dispute: its
    refusal is listed in ``not_applied`` (in line order).
    """
    mapping, actor, total = cmd.mapping, cmd.actor, cmd.total
    report = OutcomeReport()
    done = 0
    obligations = ObligationPorts(ports.scheduler, ports.store, ports.ladders, ports.calendars)
    progress("outcomes", 0, total)
    for added, on_record, refused in ports.fanout.map(
            lambda row: _record_row(row, mapping, ports, obligations, actor), cmd.rows):
        report.added += added
        report.on_record += on_record
        if refused is not None:
            report.not_applied.append(refused)
        done += 1
        if done % WINDOW == 0:
            progress("outcomes", done, total)
    progress("outcomes", max(done, total), total)  # rows without an outcome were skipped
    report.not_applied.sort()
    return report


def _record_row(
    row: OutcomeRow, mapping: OutcomeMapping, ports: OutcomePorts, obligations: ObligationPorts,
    actor: str,
) -> tuple[int, int, tuple[int, str, str] | None]:
    """One row's action then resolution: (added, already on record, refusal or None);
    ``obligations``: ``ports`` as :func:`record_action` takes them."""
    lineno, did, shown, step, timely = row
    added = on_record = 0
    try:
        if step.action is not None:
            res = record_action(RecordAction(
                did, step.action, None, actor, f"{KEY_PREFIX}{step.action}",
                asserted_timely=timely, asserted_by=mapping.source), obligations,
                ports.on_replanned)
            added, on_record = (added, on_record + 1) if res.replayed else (added + 1, on_record)
        if step.resolution is not None:
            res = resolve(Resolve(
                did, step.resolution, actor, RESOLUTION_KEY, None,
                asserted_timely=timely, asserted_by=mapping.source), scheduler=ports.scheduler,
                store=ports.store, ladders=ports.ladders, calendars=ports.calendars)
            added, on_record = (added, on_record + 1) if res.replayed else (added + 1, on_record)
    except (InvalidInput, ConflictError, NotFound) as exc:
        return added, on_record, (lineno, shown, str(exc))
    return added, on_record, None
