"""The written specification matches what PostgreSQL holds: rows stored by the product (the
single-row and the batch enqueue paths, promotion and terminal decisions, fencing tokens
above 2^53, non-ASCII and control characters in ids and details) are exported as JSON Lines
and every ``row_hash`` is recomputed by the independent verifier built from docs/audit.md
alone."""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict

from escalation.adapters.audit_search import PostgresLedgerSearch
from escalation.adapters.audit_store import PostgresAuditStore
from escalation.service_layer.audit_export import AuditFilter, export
from tests.integration.audit_support import T0, claimed, make_escalation, promote, terminal
from tests.unit import spec_verifier


def test_every_stored_hash_recomputes_from_the_spec(scratch, tmp_path) -> None:
    store = PostgresAuditStore(scratch)
    for i, ext in enumerate(["CASE-1042", "Zo\u00eb \"q\" \\ / \u2028 \U0001f600", None]):
        esc = dataclasses.replace(make_escalation(), external_id=ext,
                                  trace_id=f"t-{i}\u00e9\t")
        esc = store.record_enqueue(esc, "jane.doe \u00e9", T0)[1]
        res = store.record_decisions([(claimed(esc, token=2**53 + 1 + i), promote(esc))],
                                     "worker-7")
        after = res[0].state
        assert after is not None
        store.record_decisions([(claimed(after, token=2**60), terminal(after))], "worker-8")
    # the batch path writes through the staging COPY and its row templates (audit_store)
    batch = [dataclasses.replace(make_escalation(), external_id=f"B-{i}\u00e9\x07")
             for i in range(2)]
    store.record_enqueue_many(
        batch, "importer", T0, calendar_versions={e.dispute_id: "utc@UTC:1" for e in batch},
        details={e.dispute_id: {"\ufb01": [1, None, True], "\U0001f600": {"k": "\u2029"}}
                 for e in batch})
    out = tmp_path / "ledger.jsonl"
    export(PostgresLedgerSearch(scratch), "jsonl", out, AuditFilter())
    chains: dict[str, list[dict]] = defaultdict(list)
    for line in out.read_text("utf-8").split("\n")[:-1]:  # not splitlines: U+2028
        row = json.loads(line)
        chains[row["dispute_id"]].append(row)
    assert len(chains) == 5 and sum(len(c) for c in chains.values()) == 11
    for rows in chains.values():
        rows.sort(key=lambda r: r["seq"])
        assert spec_verifier.check_chain(rows) == []
    # and a single changed character anywhere in the hashed values is caught
    rows = next(c for c in chains.values() if len(c) == 3)
    assert spec_verifier.check_chain([rows[0], {**rows[1], "trace_id": rows[1]["trace_id"] + " "},
                                      rows[2]])
