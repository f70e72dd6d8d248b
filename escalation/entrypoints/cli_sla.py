"""CLI commands for SLA timing (docs/sla.md "Pause / resume"): ``escalation pause ID --reason
...`` and ``escalation resume ID``. Errors (not paused, already paused, unknown dispute) become
``error: ...`` with exit codes via ``cli.main``."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

import typer

from escalation.entrypoints.cli_common import _app, _operator, _print_json, out

app = typer.Typer()  # top-level commands, merged into the root by cli.py


def _already(a: object, dispute_id: UUID, status: str, verb: str, as_json: bool) -> bool:
    """Print "already <verb> ..." and return True when the dispute is already ``status``.

    Pausing a paused or resuming a pending escalation changes nothing and exits 0, like
    cancelling a cancelled one.
    """
    got = a.store.get(dispute_id)  # type: ignore[attr-defined]
    if got is None or got[1].value != status:
        return False
    if as_json:
        _print_json({"dispute_id": str(got[0].dispute_id), "status": status,
                     "seq": got[0].seq, "changed": False})
        return True
    out.print(f"already {verb} {got[0].dispute_id} (seq {got[0].seq}): nothing changed",
              markup=False, highlight=False)
    return True


def _fmt_ms(ms: int) -> str:
    hours, rest = divmod(ms, 3_600_000)
    return f"{hours}h{rest // 60_000:02d}m"


@app.command("pause")
def pause_cmd(
    dispute_id: Annotated[str, typer.Argument(
        help="Dispute id (UUID), or the external id with --source.")],
    source: Annotated[str | None, typer.Option(
        help="Source system: DISPUTE_ID is its external id.")] = None,
    reason: Annotated[str, typer.Option(help="Why (recorded in the ledger).")] = "paused",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Stop a pending escalation's SLA clock (e.g. waiting for the cardholder). The actor on
    record is ESCALATION_OPERATOR when set, else `cli`."""
    from escalation.bootstrap import pause_ports_for
    from escalation.service_layer.disputes import dispute_arg
    from escalation.service_layer.pause import PauseClock, pause

    did = dispute_arg(dispute_id, source)
    a = _app(actor=_operator(None, "cli"))  # ESCALATION_OPERATOR, else cli
    try:
        if _already(a, did, "paused", "paused", as_json):
            return
        res = pause(PauseClock(did, a.actor, reason), pause_ports_for(a))
    finally:
        a.close()
    e = res.escalation
    if as_json:
        _print_json({"dispute_id": str(e.dispute_id), "status": e.status.value, "seq": e.seq,
                     "remaining_ms": res.remaining_ms, "basis": res.basis})
        return
    out.print(f"paused {e.dispute_id} in tier {e.tier}: {_fmt_ms(res.remaining_ms)} of "
              f"{res.basis} time left (seq {e.seq})")


@app.command("resume")
def resume_cmd(
    dispute_id: Annotated[str, typer.Argument(
        help="Dispute id (UUID), or the external id with --source.")],
    source: Annotated[str | None, typer.Option(
        help="Source system: DISPUTE_ID is its external id.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Restart a paused escalation's SLA clock: due = now + the remaining window. The actor
    on record is ESCALATION_OPERATOR when set, else `cli`."""
    from escalation.bootstrap import pause_ports_for, schedule_resumed
    from escalation.service_layer.disputes import dispute_arg
    from escalation.service_layer.pause import ResumeClock, resume

    did = dispute_arg(dispute_id, source)
    a = _app(actor=_operator(None, "cli"))  # ESCALATION_OPERATOR, else cli
    try:
        if _already(a, did, "pending", "running (resumed or never paused)", as_json):
            return
        res = resume(ResumeClock(did, a.actor), pause_ports_for(a))
        schedule_resumed(a, res)  # warnings as fractions of active (unpaused) time
    finally:
        a.close()
    e = res.escalation
    if as_json:
        _print_json({"dispute_id": str(e.dispute_id), "status": e.status.value, "seq": e.seq,
                     "due_at": e.due_at.isoformat(), "remaining_ms": res.remaining_ms})
        return
    out.print(f"resumed {e.dispute_id} in tier {e.tier}: due {e.due_at.isoformat()} "
              f"(seq {e.seq})")
