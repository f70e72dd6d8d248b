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
