"""docs/audit.md "Canonical bytes" is precise enough to re-implement: the independent
verifier (``tests/unit/spec_verifier.py``, written from the text, no product import) recomputes
the document's worked examples, and agrees with the product's ``canonical_bytes`` on rows
whose values stress every rule (escapes, code-point order, integers beyond 2^53)."""

from __future__ import annotations

import json
import random
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from uuid import UUID, uuid4

import pytest

from escalation.domain import audit_hash
from escalation.service_layer.audit_export import export_value
from tests.unit import spec_verifier

DOC = Path(__file__).resolve().parents[2] / "docs" / "audit.md"


def _example(n: int) -> tuple[dict, str]:
    """(the example row, the canonical text block after it) of spec example ``n``."""
    text = DOC.read_text("utf-8")
    m = re.search(rf"<!-- spec-example-{n} -->\n```json\n(.*?)\n```.*?```text\n(.*?)\n```",
                  text, re.S)
    assert m, f"docs/audit.md lost spec example {n}"
    return json.loads(m.group(1)), m.group(2)


def test_worked_examples_recompute_from_the_spec_alone() -> None:
    row1, canon1 = _example(1)
    row2, literal2 = _example(2)
    assert spec_verifier.canonical(row1) == canon1.encode("utf-8")
    assert spec_verifier.canonical(row2) == json.loads(literal2).encode("utf-8")
    assert spec_verifier.row_hash(row1["prev_hash"], row1) == row1["row_hash"]
    assert spec_verifier.row_hash(row2["prev_hash"], row2) == row2["row_hash"]
    assert spec_verifier.check_chain([row1, row2]) == []
    # the example shows what sets the definition apart from JCS: code-point order and
    # an exact integer above 2^53
    raw = spec_verifier.canonical(row2).decode("utf-8")
    assert raw.index("\ufb01") < raw.index("\U0001f600")
    assert '"fence_token":9007199254740993' in raw
    # one changed value, one reordered link: the spec verifier notices
    assert spec_verifier.check_chain([row1, {**row2, "actor": "worker-8"}])
    assert spec_verifier.check_chain([row2, row1])


def test_the_product_and_the_spec_agree_on_hard_values() -> None:
    rnd = random.Random(29)
    alphabet = ["a", "Z", "\"", "\\", "/", "\x00", "\x07", "\x1f", "\x7f", "\b", "\f", "\n",
                "\r", "\t", "\u00e9", "\u2028", "\u2029", "\ue000", "\ufb01", "\uffff",
                "\U0001f600", "\U00010000", " "]

    def text() -> str:
        return "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 6)))

    def value(depth: int = 0) -> object:
        kind = rnd.randrange(7 if depth < 3 else 5)
        makers = [lambda: None, lambda: True, lambda: rnd.randint(-2**70, 2**70), text,
                  lambda: rnd.randint(-5, 5),
                  lambda: [value(depth + 1) for _ in range(rnd.randint(0, 3))],
                  lambda: {text(): value(depth + 1) for _ in range(rnd.randint(0, 4))}]
        return makers[kind]()

    t0 = datetime(2026, 12, 6, 23, 0, tzinfo=UTC)
    for _ in range(400):
        fields = {
            "dispute_id": uuid4(), "seq": rnd.randint(1, 10**6), "event": text(),
            "match_decision": text(), "from_tier": rnd.choice([None, text()]),
            "to_tier": text(), "ladder": text(), "ladder_version": rnd.randint(1, 99),
            "calendar_version": rnd.choice([None, text()]),
            "materiality": Decimal(rnd.randint(0, 10**12)) / 100,
            "due_at": t0 + timedelta(microseconds=rnd.randint(0, 10**12)),
            "next_due_at": rnd.choice([None, t0 - timedelta(microseconds=rnd.randint(0, 10**9))]),
            "regulatory_deadline": None, "decided_at": t0, "actor": text(),
            "trace_id": text(), "source_hash": "ab" * 32, "external_id": text(),
            "fence_token": rnd.choice([None, rnd.randint(0, 2**63 - 1)]),
            "details": {text(): value() for _ in range(rnd.randint(0, 5))},
        }
        fields["materiality"] = fields["materiality"].quantize(Decimal("0.01"))
        exported = {k: export_value(k, v) for k, v in fields.items()}
        assert spec_verifier.canonical(exported) == audit_hash.canonical_bytes(fields)


def test_the_spec_verifier_refuses_values_outside_the_rules() -> None:
    row, _ = _example(1)
    for name, bad in (("decided_at", "2026-12-02T09:00:00Z"), ("materiality", "1250"),
                      ("dispute_id", str(UUID(row["dispute_id"])).upper())):
        with pytest.raises(ValueError, match=name):
            spec_verifier.canonical({**row, name: bad})
    with pytest.raises(ValueError):
        spec_verifier.canonical({**row, "details": {"x": 1.5}})
