"""The API's relative due time (``due_in``) and the flag on a past ``due_at`` (HTTP against a
real server, real Redis and PostgreSQL)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.api.conftest import body


def test_due_in_counts_from_now_and_a_past_due_at_is_flagged(service) -> None:
    made = service.post("/v1/escalations", json=body(due_at=None, due_in="PT36H"))
    assert made.status_code == 201, made.text
    due = datetime.fromisoformat(made.json()["due_at"].replace("Z", "+00:00"))
    left = due - datetime.now(UTC)
    assert timedelta(hours=36) - timedelta(minutes=2) < left <= timedelta(hours=36)
    assert made.json()["past_due_ms"] is None

    late = (datetime.now(UTC) - timedelta(hours=3)).isoformat()
    flagged = service.post("/v1/escalations", json=body(due_at=late))
    assert flagged.status_code == 201, flagged.text
    assert flagged.json()["past_due_ms"] >= 3 * 3_600_000

    batch = service.post("/v1/escalations/batch", json={"items": [body(due_at=late)]})
    assert batch.status_code in (200, 201), batch.text
    assert batch.json()["results"][0]["past_due_ms"] >= 3 * 3_600_000


def test_a_past_due_time_from_opened_at_is_flagged_like_a_past_due_at(service) -> None:
    """The README's create: opened 2026-04-17 on the default ladder (24-hour first tier), so
    due 2026-04-18 09:00Z, months before now: flagged, alone and in a batch."""
    opened = "2026-04-17T09:00:00+00:00"
    made = service.post("/v1/escalations", json=body(due_at=None, opened_at=opened))
    assert made.status_code == 201, made.text
    due = datetime.fromisoformat(made.json()["due_at"].replace("Z", "+00:00"))
    assert due == datetime(2026, 4, 18, 9, tzinfo=UTC)
    behind = (datetime.now(UTC) - due) // timedelta(milliseconds=1)
    assert 0 <= behind - made.json()["past_due_ms"] < 120_000
    batch = service.post("/v1/escalations/batch",
                         json={"items": [body(due_at=None, opened_at=opened)]})
    assert batch.status_code in (200, 201), batch.text
    assert batch.json()["results"][0]["past_due_ms"] >= behind


def test_bad_due_in_is_a_422_naming_the_field(service) -> None:
    bad = service.post("/v1/escalations", json=body(due_at=None, due_in="1.5h"))
    assert bad.status_code == 422, bad.text
    assert "due_in must be a duration" in bad.text
    both = service.post("/v1/escalations", json=body(due_in="2h"))  # and due_at
    assert both.status_code == 422 and "due_in" in both.text, both.text


def test_out_of_range_and_negative_due_in_name_the_field(service) -> None:
    for text in ("99999999d", "-5h", "1.5h"):
        bad = service.post("/v1/escalations", json=body(due_at=None, due_in=text))
        assert bad.status_code == 422, bad.text
        assert bad.json()["errors"][0]["field"] == "due_in", (text, bad.text)
        assert bad.json()["errors"][0]["message"].startswith("due_in "), bad.text


def test_a_bad_due_in_in_a_batch_names_the_item_and_the_field(service) -> None:
    for text in ("99999999d", "-5h"):
        items = [body(due_at=None, due_in="2h"), body(due_at=None, due_in=text)]
        bad = service.post("/v1/escalations/batch", json={"items": items})
        assert bad.status_code == 422, bad.text
        assert bad.json()["errors"][0]["field"] == "items[1].due_in", (text, bad.text)
        for item in items:  # nothing written
            assert service.get(f"/v1/escalations/{item['dispute_id']}").status_code == 404


def test_due_in_with_due_at_names_the_field_in_the_apis_terms(service) -> None:
    both = service.post("/v1/escalations", json=body(due_in="1h"))  # and due_at
    assert both.status_code == 422, both.text
    [err] = both.json()["errors"]
    assert err["field"] == "due_in", both.text
    assert err["message"].startswith("give exactly one of due_at (breach time), due_in")
    assert "--" not in err["message"]


def test_every_bad_item_of_a_batch_is_listed_and_counted_past_the_limit(service) -> None:
    items = [body(materiality="NaN"), body(materiality="-1"), body()]
    bad = service.post("/v1/escalations/batch", json={"items": items})
    assert bad.status_code == 422, bad.text
    doc = bad.json()
    assert [e["field"] for e in doc["errors"]] == ["items[0].materiality",
                                                   "items[1].materiality"], doc
    assert "error_count" not in doc  # all of them are listed
    for item in items:  # nothing written
        assert service.get(f"/v1/escalations/{item['dispute_id']}").status_code == 404
    many = [body(materiality="-1") for _ in range(25)]  # api_max_errors: 20
    doc = service.post("/v1/escalations/batch", json={"items": many}).json()
    assert len(doc["errors"]) == 20 and doc["errors"][19]["field"] == "items[19].materiality"
    assert doc["error_count"] == 25 and doc["errors_truncated"] is True


def test_a_batch_lists_the_items_that_do_not_parse_and_those_that_do_not_validate(
        service) -> None:
    items = [body(), body(due_at="2026-11-30"), body(materiality="NaN")]
    bad = service.post("/v1/escalations/batch", json={"items": items})
    assert bad.status_code == 422, bad.text
    assert [e["field"] for e in bad.json()["errors"]] == ["items[1].due_at",
                                                          "items[2].materiality"], bad.text
    for item in items:  # nothing written
        assert service.get(f"/v1/escalations/{item['dispute_id']}").status_code == 404


def test_one_bound_and_one_parser_for_every_due_instant(service) -> None:
    """A due time more than 3650 days ahead, a week date and a fraction past microseconds are
    422s naming the field; lower-case ``t`` and ``z`` (RFC 3339 section 5.6) are accepted."""
    far = (datetime.now(UTC) + timedelta(days=3651)).isoformat()
    for due, says in ((far, "more than 3650 days"), ("2126-12-08T09:00:00Z", "3650 days"),
                      ("2026-W49-1T09:00:00Z", "week date"),
                      ("2030-12-08T10:00:00.1234567Z", "at most 6 fractional")):
        bad = service.post("/v1/escalations", json=body(due_at=due))
        assert bad.status_code == 422, (due, bad.text)
        assert bad.json()["errors"][0]["field"] == "due_at", bad.text
        assert says in bad.json()["errors"][0]["message"], bad.text
    for due in ("2030-12-08t09:00:00z", "2030-12-08T09:00:00z"):
        made = service.post("/v1/escalations", json=body(due_at=due))
        assert made.status_code == 201, made.text
        assert made.json()["due_at"].startswith("2030-12-08T09:00:00"), made.text


def test_a_ladder_that_does_not_exist_is_a_422_naming_the_field(service, compliance) -> None:
    """Over HTTP a ladder named in a body or query is a field of the request (LadderNotFound
    is an InvalidInput): 422 naming it, in a create and in an audit search."""
    r = service.post("/v1/escalations", json=body(ladder="no_such_ladder"))
    assert r.status_code == 422, r.text
    assert r.json()["errors"][0]["field"] == "ladder", r.text
    s = compliance.get("/v1/audit", params={"ladder": "no_such_ladder"})
    assert s.status_code == 422 and s.json()["errors"][0]["field"] == "ladder", s.text
