"""A corrupt payload in Redis (out-of-band writes) never crashes workers, reconcile or a
ladder restore: it is repaired from PostgreSQL or dead-lettered."""

from __future__ import annotations

from typing import Any

from tests.e2e.helpers import due_requests, enqueue
from tests.helpers import run_cli


def test_non_utf8_bytes_in_a_payload_do_not_crash_the_worker(
    app: Any, cli_env: dict[str, str], redis_url: str
) -> None:
    import redis

    now = app.scheduler.time()
    bad, *good = enqueue(app, due_requests(5, now))
    raw = redis.Redis.from_url(redis_url)  # bytes client: write an invalid UTF-8 byte
    raw.hset(app.scheduler.keys_for(bad).payload(bad), "t", b"\xffsenior")
    res = run_cli(cli_env, "worker", "--burst")
    # one could not be decided: the drain is not complete, and a cron job must see that
    assert res.returncode == 1, res.stderr[-1500:]
    assert "Traceback" not in res.stderr
    # the summary (on stdout, logs stay on stderr) says one could not be decided, and where
    assert res.stdout.rstrip().splitlines()[-1] == (
        "burst done: 5 claimed, 4 recorded, 0 already decided, 0 stuck repaired, 0 warnings "
        "recorded, 1 could not be decided (retried later or dead-lettered: `escalation dead "
        "list`)")
    for did in good:
        assert [r.match_decision for r in app.store.trail(did)][-1] == "PROMOTED_TO_SENIOR"


def test_reconcile_rewrites_a_payload_with_a_corrupt_seq(
    app: Any, cli_env: dict[str, str]
) -> None:
    now = app.scheduler.time()
    [did] = enqueue(app, due_requests(1, now, past_s=-3600))
    key = app.scheduler.keys_for(did).payload(did)
    app.redis.hset(key, mapping={"seq": "notanumber", "due_ms": "garbage"})
    dry = run_cli(cli_env, "reconcile", "--dry-run")
    assert dry.returncode in (0, 1) and "Traceback" not in dry.stderr, dry.stderr[-1500:]
    res = run_cli(cli_env, "reconcile")
    assert "Traceback" not in res.stderr, res.stderr[-1500:]
    payload = app.scheduler.payload(did)
    assert payload is not None and payload["seq"] == "1" and payload["due_ms"].isdigit()


def test_mapping_file_with_a_scalar_table_is_a_clear_error(
    cli_env: dict[str, str], tmp_path: Any
) -> None:
    mapping = tmp_path / "m.toml"
    mapping.write_text("columns = 5\n")
    csv_file = tmp_path / "x.csv"
    csv_file.write_text("dispute_id,opened\n")
    res = run_cli(cli_env, "import", str(csv_file), "--mapping", str(mapping))
    assert res.returncode == 2 and "[columns] must be a table" in res.stderr
    assert "Traceback" not in res.stderr
