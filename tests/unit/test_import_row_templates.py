"""The CSV import's row templates render, for any per-row values, exactly what the general
path writes: the staging COPY line of ``audit_store.stage_line`` (whose hash is the one
of ``audit_hash.canonical_bytes``) and the enqueue.lua arguments of
``RedisScheduler.enqueue_many``; ``RowEncoder`` raises what ``build_one`` raises."""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from escalation.adapters.audit_store import EnqueuedLineTemplate, enqueue_rows, stage_line
from escalation.adapters.ladder_files import load_ladder_file
from escalation.adapters.redis_keys import Keys, shard_of
from escalation.adapters.redis_scheduler import PayloadTemplate, escalation_to_payload
from escalation.domain.audit_hash import GENESIS, canonical_bytes
from escalation.domain.calendars import builtin_calendars
from escalation.domain.errors import InvalidInput
from escalation.domain.escalation import Escalation
from escalation.resources import shipped_ladders_dir
from escalation.service_layer.enqueue import EnqueueRequest, build_one
from escalation.service_layer.importer import ImportTarget, RowEncoder
from tests.unit.property_budget import examples
from tests.unit.test_audit_enqueue_hash import aware, escalations, extras, plain


def _row(proto: Escalation, did: uuid.UUID, ext: str | None, source_hash: str,
         trace: str) -> Escalation:
    return Escalation(
        dispute_id=did, tier=proto.tier, due_at=proto.due_at, materiality=proto.materiality,
        source_hash=source_hash, ladder=proto.ladder, ladder_version=proto.ladder_version,
        seq=proto.seq, entered_tier_at=proto.entered_tier_at, trace_id=trace,
        external_id=ext, regulatory_deadline=proto.regulatory_deadline, status=proto.status,
        deadlines=proto.deadlines, institution_tz=proto.institution_tz,
        institution_calendar=proto.institution_calendar)


per_row = st.tuples(st.uuids(), st.none() | st.text(), st.text(min_size=1),
                    st.text(min_size=1))
# source attributes are checked text (no lone surrogate) before a template sees them; control
# characters are kept here to exercise the JSON and COPY escapes
_attr_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)
source_attrs = st.none() | st.dictionaries(_attr_text, _attr_text, max_size=4)


@settings(deadline=None, max_examples=examples(25))
@given(escalations(), st.text(), aware, st.none() | st.text(), extras,
       st.lists(st.tuples(per_row, source_attrs), min_size=1, max_size=4))
def test_line_template_renders_stage_line_byte_for_byte(
    proto: Escalation, actor: str, decided_at: datetime, version: str | None,
    extra: dict[str, Any] | None,
    rows: list[tuple[tuple[uuid.UUID, str | None, str, str], dict[str, str] | None]],
) -> None:
    raw = EnqueuedLineTemplate(proto, actor, decided_at, version, extra)  # never prepared
    template = EnqueuedLineTemplate(proto, actor, decided_at, version, extra)
    template.prepare()
    for (did, ext, source_hash, trace), attrs in rows:
        esc = _row(proto, did, ext, source_hash, trace)
        # the general path's details: the shape's, plus the row's source attributes
        full = {**(extra or {}), "source_attributes": attrs} if attrs else extra
        try:
            want = stage_line(esc, actor, decided_at, version, full)[0]
        except (TypeError, ValueError, InvalidInput) as exc:  # no JSON form: the same error
            with pytest.raises(type(exc)):
                template.render(str(did), ext, source_hash, trace, attrs)
            continue
        line = template.render(str(did), ext, source_hash, trace, attrs)
        assert line == want == raw.render(str(did), ext, source_hash, trace, attrs)
        ledger = enqueue_rows(esc, actor, decided_at, version, full)["ledger"]
        digest = hashlib.sha256(GENESIS + canonical_bytes(ledger)).hexdigest()
        assert line.endswith("\\\\x" + digest + "\n")


@settings(deadline=None, max_examples=examples(25))
@given(escalations(), st.dictionaries(st.text(max_size=8), plain, max_size=3))
def test_line_template_is_used_for_plain_details(proto: Escalation,
                                                 extra: dict[str, Any]) -> None:
    """A row of the plain shape is rendered by the template, not the fallback."""
    template = EnqueuedLineTemplate(proto, "import", datetime(2026, 1, 1, tzinfo=UTC), "v",
                                    extra)
    assert not template.ok
    template.prepare()
    assert template.ok


def _enqueue_many_argv(esc: Escalation, namespace: str, shards: int,
                       ) -> tuple[int, str, list[str]]:
    """What ``RedisScheduler.enqueue_many`` sends for ``esc`` (its loop, restated)."""
    fields = escalation_to_payload(esc)
    argv = [str(esc.dispute_id), fields["due_ms"], str(len(fields))]
    for item in fields.items():
        argv += item
    shard = shard_of(str(esc.dispute_id), shards)
    return shard, Keys(namespace, shard).payload(esc.dispute_id), argv


@settings(deadline=None, max_examples=examples(25))
@given(escalations(), st.sampled_from([1, 4]), st.none() | st.just("7"),
       st.lists(per_row, min_size=1, max_size=4))
def test_payload_template_renders_enqueue_many_arguments(
    proto: Escalation, shards: int, weight: str | None,
    rows: list[tuple[uuid.UUID, str | None, str, str]],
) -> None:
    recorded = _row(proto, proto.dispute_id, proto.external_id, proto.source_hash,
                    proto.trace_id)
    raw = PayloadTemplate(recorded, "ns", shards, weight)  # never prepared
    template = PayloadTemplate(recorded, "ns", shards, weight)
    template.prepare()
    assert template.ok and not raw.ok
    for did, ext, source_hash, trace in rows:
        esc = _row(recorded, did, ext, source_hash, trace)
        shard, key, argv = _enqueue_many_argv(esc, "ns", shards)
        want = (shard, key, argv, weight)
        assert template.render(str(did), ext, source_hash, trace) == want
        assert raw.render(str(did), ext, source_hash, trace) == want


class _Store:
    def enqueued_line_template(self, proto: Escalation, actor: str, decided_at: datetime,
                               calendar_version: str | None,
                               details: Any) -> EnqueuedLineTemplate:
        return EnqueuedLineTemplate(proto, actor, decided_at, calendar_version, details)


class _Scheduler:
    def payload_template(self, proto: Escalation) -> PayloadTemplate:
        return PayloadTemplate(proto, "ns", 1, None)


NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)


def _encoder(ladder: Any, calendars: Any) -> RowEncoder:
    store, scheduler = _Store(), _Scheduler()
    target = ImportTarget(scheduler=scheduler, store=store, ladders=None,  # type: ignore[arg-type]
                          calendars=calendars, default_ladder=ladder.name, actor="import")
    return RowEncoder((store, scheduler), target, ladder, NOW)  # type: ignore[arg-type]


def test_row_encoder_writes_each_rows_source_attributes_as_build_one_does() -> None:
    """Rows of one shape that differ in their source attributes share one template; each
    line is the general path's line for that row (its attributes under the row hash)."""
    ladder = load_ladder_file(shipped_ladders_dir() / "dispute_review.v1.toml")
    calendars = builtin_calendars()
    encoder = _encoder(ladder, calendars)
    rows = [_request(source_attributes={"Product": "Mortgage", "State": "FL"}, trace_id="t1"),
            _request(source_attributes={"Product": "Credit card", "Company": "<b>X</b>"},
                     trace_id="t2", external_id="c-2"),
            _request(source_attributes={"Product": "Mortgage", "State": "FL"}, trace_id="t3"),
            _request(trace_id="t4")]
    lines = [encoder.encode(req)[1] for req in rows]
    assert len(encoder._shapes) == 2  # with and without source attributes
    for req, line in zip(rows, lines, strict=True):
        built = build_one(req, ladder, calendars, NOW)
        want = stage_line(built.escalation, "import", NOW, built.calendar_version,
                          built.details)[0]
        assert line == want
    assert '"source_attributes":{"Company":"<b>X</b>","Product":"Credit card"}' in lines[1]
    assert lines[0].split("\t")[-1] != lines[2].split("\t")[-1]  # other ids: other hashes
    assert "source_attributes" not in lines[3]


def _request(**kw: Any) -> EnqueueRequest:
    base: dict[str, Any] = {"dispute_id": uuid.uuid4(), "materiality": "10.00",
                            "source_hash": "ab12", "tier": "standard",
                            "opened_at": datetime(2026, 11, 2, tzinfo=UTC)}
    return EnqueueRequest(**{**base, **kw})


def test_row_encoder_raises_what_build_one_raises_per_row() -> None:
    ladder = load_ladder_file(shipped_ladders_dir() / "dispute_review.v1.toml")
    calendars = builtin_calendars()
    encoder = _encoder(ladder, calendars)
    requests = [
        _request(external_id="x" * 201),                 # per-row: external id too long
        _request(external_id="ok-1"),                    # the same shape, fine
        _request(tier="nosuch", external_id="a"),        # the shape's error ...
        _request(tier="nosuch", external_id="x" * 201),  # ... comes first, as in build_one
        _request(opened_at=datetime(2027, 1, 1, tzinfo=UTC)),  # in the future
    ]
    for req in requests:
        try:
            want: str | None = None
            build_one(req, ladder, calendars, NOW)
        except InvalidInput as exc:
            want = str(exc)
        if want is None:
            did, line, payload, values, warned, source_hash, ext = encoder.encode(req)
            assert did == str(req.dispute_id) and line.startswith(did)
            assert values is None and warned is None
            assert (source_hash, ext) == (req.source_hash, req.external_id)
            assert payload[2][0] == did
        else:
            with pytest.raises(InvalidInput) as got:
                encoder.encode(req)
            assert str(got.value) == want
