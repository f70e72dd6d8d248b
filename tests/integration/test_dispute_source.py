"""The source system's name of a dispute named by (source, external id): kept on the ENQUEUED
row (``details.source``, under its hash), on the projection (``escalation_state.source``) and
the Redis payload (``s``), and sent in the webhook event beside the external id, through
every write path (the service layer as the API and CLI call it, the CLI itself, the CSV
import: the mapping's ``external_source`` on every row); null for a dispute named by its
UUID over the API or CLI."""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TextIO

import pytest
import sqlalchemy as sa

from escalation.adapters.projection_scan import projection_differences, scan_of
from escalation.adapters.redis_keys import Keys, shard_of
from escalation.adapters.webhook import post_notification, secret_key
from escalation.domain.retry import RetryPolicy
from escalation.service_layer.core import CorePorts
from escalation.service_layer.disputes import resolve_dispute
from escalation.service_layer.fire import FireDue, fire_due, notification_of_row
from escalation.service_layer.importer import (
    ColumnMapping,
    ImportCsv,
    ImportTarget,
    import_csv,
)
from escalation.service_layer.notify import ConsumeReviews, Notifier, NotifyPorts
from tests.e2e.helpers import due_requests, enqueue
from tests.integration.reliability_support import reliability_redis

SECRET = "whsec_" + base64.b64encode(b"0123456789abcdef0123456789abcdef").decode()


class Receiver:
    """A real HTTP receiver on 127.0.0.1 keeping every (headers, body) it is sent."""

    def __init__(self) -> None:
        self.got: list[tuple[dict[str, str], bytes]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.got.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture()
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.server.shutdown()
    r.server.server_close()


def _state(app: Any, did: uuid.UUID) -> dict[str, Any]:
    with app.engine.connect() as conn:
        return dict(conn.execute(sa.text(
            "SELECT s.source, s.external_id, a.details ->> 'source' AS ledger_source "
            "FROM escalation_state s JOIN escalation_audit a ON a.dispute_id = s.dispute_id "
            "AND a.seq = 1 WHERE s.dispute_id = :d"), {"d": did}).mappings().one())


def _deliver_all(app: Any, receiver: Receiver) -> list[dict[str, Any]]:
    """Fire what is due, deliver the notifications signed with :data:`SECRET`, and return
    each body as the reference Standard Webhooks library verifies it."""
    from standardwebhooks.webhooks import Webhook

    fire_due(FireDue(batch_size=50, lease_ms=30_000, worker_id="w"),
             CorePorts(app.scheduler, app.store, app.ladders, app.calendars))
    key = secret_key(SECRET)
    n = Notifier(
        ConsumeReviews("c", "notifier", RetryPolicy((0.01,))),
        NotifyPorts(reliability_redis(app), app.scheduler, app.store,
                    lambda f: post_notification(receiver.url, f, 5.0, key)))
    n.run_once()
    verifier = Webhook(SECRET)
    return [verifier.verify(body, headers) for headers, body in receiver.got]


def test_a_dispute_named_by_source_and_external_id_carries_its_source_to_the_webhook(
    app: Any, receiver: Receiver,
) -> None:
    now = app.scheduler.time()
    named, by_uuid = due_requests(2, now)
    did, ext = resolve_dispute(source="crm", external_id="CASE-1042")
    named = type(named)(**{**{f: getattr(named, f) for f in named.__slots__},
                           "dispute_id": did, "external_id": ext, "source": "crm"})
    enqueue(app, [named, by_uuid])

    assert _state(app, did) == {"source": "crm", "external_id": "CASE-1042",
                                "ledger_source": "crm"}
    assert _state(app, by_uuid.dispute_id) == {"source": None, "external_id": None,
                                               "ledger_source": None}
    keys = Keys(app.settings.namespace, shard_of(str(did), app.settings.shards))
    assert app.redis.hget(keys.payload(did), "s") in (b"crm", "crm")

    events = {e["dispute_id"]: e for e in _deliver_all(app, receiver)}
    assert events[str(did)]["source"] == "crm"
    assert events[str(did)]["external_id"] == "CASE-1042"
    assert events[str(did)]["type"] == "escalation.promoted"
    assert events[str(by_uuid.dispute_id)]["source"] is None
    assert events[str(by_uuid.dispute_id)]["external_id"] is None

    # the repair paths' entry (a decision recorded but never applied) names it too
    row = app.store.unapplied_decisions([(did, 1, 2)])[did]
    assert row.source == "crm" and notification_of_row(row)["source"] == "crm"
    # the projection agrees with the ledger, source included (this test's disputes: the
    # database is shared with tests that corrupt projections on purpose)
    with app.engine.connect() as conn:
        for own in (did, by_uuid.dispute_id):
            assert not list(projection_differences(conn, own))


def test_enqueue_from_the_cli_stores_the_source(app: Any, cli_env: dict[str, str]) -> None:
    res = subprocess.run(
        [sys.executable, "-m", "escalation", "enqueue", "--source", "crm",
         "--external-id", "CASE-77", "--due-in", "1h", "--materiality", "10.00",
         "--source-hash", "ab", "--json"],
        env=cli_env, capture_output=True, text=True, timeout=180, check=False)
    assert res.returncode == 0, res.stderr[-1500:]
    did = uuid.UUID(json.loads(res.stdout)["dispute_id"])
    assert _state(app, did) == {"source": "crm", "external_id": "CASE-77",
                                "ledger_source": "crm"}


@pytest.mark.parametrize("bulk", [True, False])
def test_an_import_stores_the_mappings_source_on_every_row(
    app: Any, tmp_path: Path, bulk: bool,
) -> None:
    uid = uuid.uuid4()
    lines = ["id,opened,amount", f"{uid},2026-12-01,10.00"]
    prefix = f"C{int(bulk)}-"  # each run its own disputes (the database is the file's)
    lines += [f"{prefix}{i},2026-12-0{1 + i % 3},10.00" for i in range(12)]
    path = tmp_path / "in.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")

    def open_() -> TextIO:
        return io.open(path, newline="", encoding="utf-8")  # noqa: UP020

    mapping = ColumnMapping(dispute_id="id", opened_at="opened", materiality="amount",
                            external_source="cfpb")
    target = ImportTarget(scheduler=app.scheduler, store=app.store, ladders=app.ladders,
                          calendars=app.calendars, default_ladder=app.settings.default_ladder,
                          actor="import")
    res = import_csv(ImportCsv(open_, mapping, bulk=bulk), target)
    assert res.created == 13, res
    with app.engine.connect() as conn:
        rows = conn.execute(sa.text(
            "SELECT s.external_id, s.source, a.details ->> 'source' AS ledger_source "
            "FROM escalation_state s JOIN escalation_audit a ON a.dispute_id = s.dispute_id "
            "AND a.seq = 1 WHERE s.dispute_id = :u OR s.external_id LIKE :p"),
            {"u": uid, "p": prefix + "%"}).all()
    by_ext = {r.external_id: (r.source, r.ledger_source) for r in rows}
    assert by_ext.pop(None) == ("cfpb", "cfpb")  # the UUID row: from that source all the same
    assert by_ext == {f"{prefix}{i}": ("cfpb", "cfpb") for i in range(12)}
    own = scan_of("SELECT dispute_id FROM escalation_state "
                  "WHERE dispute_id = :u OR external_id LIKE :p")
    with app.engine.connect() as conn:  # this test's disputes only (see above)
        assert not list(projection_differences(conn, scan=own,
                                               params={"u": uid, "p": prefix + "%"}))
