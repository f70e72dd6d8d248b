"""``escalation action record``, ``escalation resolve`` and the actor of ``escalation
cancel``, through the real CLI (subprocesses) on the test Redis and PostgreSQL (ADR 0010)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from escalation.service_layer.core import CorePorts
from escalation.service_layer.disputes import resolve_dispute
from escalation.service_layer.enqueue import EnqueueMany, EnqueueRequest, enqueue_many
from tests.helpers import run_cli

REG_E = {"new_account": "false", "point_of_sale": "false", "foreign_initiated": "false"}


def _enqueue(app: Any, notice: datetime, *, source: str | None = None,
             external_id: str | None = None) -> uuid.UUID:
    did: Any = uuid.uuid4()
    if source is not None:
        did = resolve_dispute(source=source, external_id=external_id)[0]
    req = EnqueueRequest(dispute_id=did, materiality="100.00", source_hash="ab" * 8,
                         ladder="reg_e_error_resolution", opened_at=notice, anchor_at=notice,
                         external_id=external_id, attributes=dict(REG_E))
    res = enqueue_many(
        EnqueueMany(requests=[req], actor="svc", default_ladder="reg_e_error_resolution"),
        CorePorts(scheduler=app.scheduler, store=app.store, ladders=app.ladders,
                  calendars=app.calendars),
    )
    assert res[0].escalation.ladder_version == 3
    return res[0].escalation.dispute_id


def _trail(app: Any, did: uuid.UUID) -> list[Any]:
    return list(app.store.trail(did))


def test_action_record_needs_a_named_actor_and_replays(app: Any, cli_env: dict[str, str]
                                                       ) -> None:
    notice = datetime.now(UTC).replace(microsecond=0) - timedelta(days=2)
    ext = f"C-{uuid.uuid4().hex[:8]}"
    did = _enqueue(app, notice, source="bank", external_id=ext)
    at = (notice + timedelta(days=1)).isoformat()
    args = ["action", "record", ext, "--source", "bank", "--action", "provisional_credit",
            "--at", at, "--amount", "100.00", "--currency", "USD",
            "--idempotency-key", "cli-pc-1", "--evidence-ref", "doc-7", "--json"]
    env = {k: v for k, v in cli_env.items() if k != "ESCALATION_OPERATOR"}
    nobody = run_cli(env, *args)
    assert nobody.returncode == 2, nobody.stderr
    lines = nobody.stderr.strip().splitlines()
    assert len(lines) == 1 and "--actor" in lines[0] and "ESCALATION_OPERATOR" in lines[0]
    cli_only = run_cli(env, *args, "--actor", "cli")
    assert cli_only.returncode == 2 and "actor" in cli_only.stderr
    naive = run_cli({**env, "ESCALATION_OPERATOR": "alice"},
                    *[a if a != at else "2026-03-01T10:00:00" for a in args])
    assert naive.returncode == 2 and "--at" in naive.stderr, naive.stderr
    i = args.index("--currency")
    no_currency = run_cli({**env, "ESCALATION_OPERATOR": "alice"}, *args[:i], *args[i + 2:])
    assert no_currency.returncode == 2, no_currency.stderr
    assert "--currency is required with --amount" in no_currency.stderr, no_currency.stderr
    assert "None" not in no_currency.stderr
    assert [r.event for r in _trail(app, did)] == ["ENQUEUED"]  # nothing written
    done = run_cli({**env, "ESCALATION_OPERATOR": "alice"}, *args)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["replayed"] is False and out["dispute_id"] == str(did)
    d = {x["name"]: x for x in out["deadlines"]}
    met = d["determine_or_provisionally_credit"]
    assert met["state"] == "met" and met["met_by"]["action"] == "provisional_credit"
    assert met["met_by"]["actor"] == "alice"
    assert datetime.fromisoformat(met["met_by"]["occurred_at"]) == datetime.fromisoformat(at)
    assert "provisional_credit_notice" in d
    row = _trail(app, did)[-1]
    assert row.event == "ACTION_RECORDED" and row.actor == "alice"
    assert row.details["amount"] == "100.00" and row.details["evidence"] == {"ref": "doc-7"}
    # a replay by the same actor writes nothing and says so
    again = run_cli({**env, "ESCALATION_OPERATOR": "alice"}, *args[:-1])  # text, not --json
    assert again.returncode == 0, again.stderr
    assert "nothing written" in again.stdout and f"seq {row.seq}" in again.stdout
    # --actor wins over the setting, and a key is one actor's: carol may not reuse alice's
    carol = run_cli({**env, "ESCALATION_OPERATOR": "alice"}, *args[:-1], "--actor", "carol")
    assert carol.returncode == 2 and "another actor" in carol.stderr, carol.stderr
    other = run_cli({**env, "ESCALATION_OPERATOR": "alice"},
                    *[a if a != "100.00" else "90.00" for a in args])
    assert other.returncode == 2 and "idempotency_key" in other.stderr
    assert len(_trail(app, did)) == 2


def test_resolve_derives_its_key_and_cancel_records_a_real_actor(
        app: Any, cli_env: dict[str, str]) -> None:
    notice = datetime.now(UTC).replace(microsecond=0) - timedelta(days=2)
    did = _enqueue(app, notice)
    env = {k: v for k, v in cli_env.items() if k != "ESCALATION_OPERATOR"}
    refused = run_cli(env, "resolve", str(did), "--outcome", "error_corrected")
    assert refused.returncode == 2 and "ESCALATION_OPERATOR" in refused.stderr
    args = ["resolve", str(did), "--outcome", "error_corrected", "--actor", "bob",
            "--reason", "corrected"]
    first = run_cli(env, *args)
    assert first.returncode == 0, first.stderr
    assert "resolved (error_corrected)" in first.stdout
    assert "investigation: met by resolution (bob)" in first.stdout
    second = run_cli(env, *args)  # a retried command: the derived key makes it a replay
    assert second.returncode == 0 and "nothing written" in second.stdout, second.stdout
    trail = _trail(app, did)
    assert [r.event for r in trail] == ["ENQUEUED", "RESOLVED"]
    assert trail[-1].actor == "bob" and trail[-1].details["outcome"] == "error_corrected"
    assert app.scheduler.payload(did) is None
    other = run_cli(env, "resolve", str(did), "--outcome", "no_error_found", "--actor", "bob")
    assert other.returncode == 2 and "already resolved" in other.stderr
    cancelled = run_cli(env, "cancel", str(did))
    assert cancelled.returncode == 2 and "resolved" in cancelled.stderr
    assert len(_trail(app, did)) == 2
    # cancel as the README uses it: the actor is the operator, else the OS user@host
    named = _enqueue(app, notice)
    r = run_cli({**env, "ESCALATION_OPERATOR": "dana"}, "cancel", str(named),
                "--reason", "resolved for cardholder")
    assert r.returncode == 0, r.stderr
    assert _trail(app, named)[-1].actor == "dana"
    anon = _enqueue(app, notice)
    r = run_cli(env, "cancel", str(anon), "--reason", "resolved for cardholder")
    assert r.returncode == 0, r.stderr
    actor = _trail(app, anon)[-1].actor
    assert "@" in actor and actor != "cli"


def test_resolve_before_the_dispute_was_opened_is_refused_naming_at(
        cli_env: dict[str, str]) -> None:
    """The default ladder has no anchor: --at before --opened-at is exit 2 naming --at,
    nothing written; the dispute stays pending."""
    ext = f"EARLYRES-{uuid.uuid4().hex[:8]}"
    opened = (datetime.now(UTC) - timedelta(days=1)).replace(microsecond=0)
    made = run_cli(cli_env, "enqueue", "--source", "cli-t", "--external-id", ext,
                   "--source-hash", "ab", "--opened-at", opened.isoformat(), "--json")
    assert made.returncode == 0, made.stderr
    did = json.loads(made.stdout)["dispute_id"]
    early = run_cli(cli_env, "resolve", did, "--outcome", "no_error_found", "--at",
                    "2020-01-01T00:00:00Z", "--actor", "ops.alice")
    assert early.returncode == 2, early.stdout
    assert "--at:" in early.stderr and "before the dispute was opened" in early.stderr, \
        early.stderr
    shown = run_cli(cli_env, "audit", "show", did, "--json")
    assert shown.returncode == 0, shown.stderr
    assert "RESOLVED" not in shown.stdout
