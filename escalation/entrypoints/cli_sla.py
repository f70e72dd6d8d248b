"""CLI commands for SLA timing (issue 4): ``escalation pause ID --reason ...`` and
``escalation resume ID``. Errors (not paused, already paused, unknown dispute) become
``error: ...`` with exit codes via ``cli.main``."""

from __future__ import annotations

from typing import Annotated

import typer

from escalation.entrypoints.cli import _app, _print_json, app, out


def _fmt_ms(ms: int) -> str:
    hours, rest = divmod(ms, 3_600_000)
    return f"{hours}h{rest // 60_000:02d}m"


@app.command("pause")
def pause_cmd(
    dispute_id: Annotated[str, typer.Argument(help="Dispute id (UUID).")],
    reason: Annotated[str, typer.Option(help="Why (recorded in the ledger).")] = "paused",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Stop a pending escalation's SLA clock (e.g. waiting for the cardholder)."""
    from escalation.service_layer.pause import pause

    a = _app(actor="cli")
    try:
        res = pause(dispute_id, scheduler=a.scheduler, store=a.store, ladders=a.ladders,
                    calendars=a.calendars, actor=a.actor, reason=reason)
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
    dispute_id: Annotated[str, typer.Argument(help="Dispute id (UUID).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Restart a paused escalation's SLA clock: due = now + the remaining window."""
    from escalation.service_layer.pause import resume
    from escalation.service_layer.warnings import schedule_resumed

    a = _app(actor="cli")
    try:
        res = resume(dispute_id, scheduler=a.scheduler, store=a.store, ladders=a.ladders,
                     calendars=a.calendars, actor=a.actor)
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
