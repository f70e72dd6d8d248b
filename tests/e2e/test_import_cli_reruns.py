"""Running an import again: a row that changed since it was recorded is named and not
applied (a missing Redis entry is re-scheduled), and an import stopped while writing says
how many rows it recorded, and the rerun writes the rest."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from escalation.service_layer.importer import stable_dispute_id
from tests.helpers import run_cli


def _args(csv_file: Path) -> list[str]:
    return ["import", str(csv_file), "--id-column", "id", "--opened-column", "opened",
            "--tier", "standard"]


def _rows(n: int, source: str) -> list[str]:
    return [f"{source}-{i},2026-01-05,note {i}" for i in range(n)]


def test_a_reimported_row_that_changed_is_named_and_not_applied(
    app: Any, cli_env: dict[str, str], tmp_path: Path
) -> None:
    source = f"c{uuid.uuid4().hex[:8]}"
    rows = _rows(30, source)
    csv_file = tmp_path / "c.csv"
    csv_file.write_text("id,opened,note\n" + "\n".join(rows) + "\n")
    assert run_cli(cli_env, *_args(csv_file)).returncode == 0
    rows[7] = rows[7].replace("2026-01-05", "2026-01-02")  # the date was wrong: fixed
    csv_file.write_text("id,opened,note\n" + "\n".join(rows) + "\n")
    lost = stable_dispute_id(f"{source}-3", "external")[0]  # as an interrupted import leaves it
    keys = app.scheduler.keys_for(lost)
    assert app.redis.delete(keys.payload(lost)) == 1
    assert app.redis.zrem(keys.pending, str(lost)) == 1

    res = run_cli(cli_env, *_args(csv_file))
    assert res.returncode == 0, res.stderr
    assert ("0 enqueued, 30 already enqueued (1 of them re-scheduled: their Redis entry was "
            "missing; 1 of them changed, not applied)") in res.stdout
    assert app.redis.zscore(keys.pending, str(lost)) is not None
    assert "warning: 1 row(s) differ from the escalation recorded for their dispute (their " \
           "source hash, of the row's text" in res.stderr
    assert res.stderr.rstrip().endswith(f"{source}-7 (--json lists them all)"), res.stderr

    res = run_cli(cli_env, *_args(csv_file), "--json")
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["changed_since_recorded"] == [f"{source}-7"]
    assert report["rescheduled"] == 0  # scheduled again by the run before
    # the recorded escalation stands: its due time is still the first import's
    res = run_cli(cli_env, "audit", "show", f"{source}-7", "--json")
    assert res.returncode == 0, res.stderr
    ledger = [json.loads(line) for line in res.stdout.splitlines() if line.strip()]
    assert [row["event"] for row in ledger] == ["ENQUEUED"]
    assert "2026-01-06" in ledger[0]["due_at"]  # 2026-01-05 + the standard tier's 24 h


def test_an_import_stopped_while_writing_says_what_it_left_and_the_rerun_finishes(
    cli_env: dict[str, str], server_urls: tuple[str, str], redis_client: Any, tmp_path: Path
) -> None:
    import sqlalchemy as sa

    from tests.conftest import scratch_database

    # A database of its own: 120,000 pending escalations left in the session's shared
    # database would be taken up by another test's worker (its maintenance reconciles the
    # whole database into its own namespace) and keep it busy for minutes.
    with scratch_database(server_urls[1], "escalation_stop") as url:
        engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
        try:
            _stop_and_rerun(dict(cli_env, ESCALATION_DATABASE_URL=url), engine, tmp_path)
        finally:
            engine.dispose()


def _stop_and_rerun(cli_env: dict[str, str], engine: Any, tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    import time

    import sqlalchemy as sa

    source = f"t{uuid.uuid4().hex[:8]}"
    n = 120_000
    csv_file = tmp_path / "big.csv"
    csv_file.write_text("id,opened,note\n" + "\n".join(_rows(n, source)) + "\n")
    count = sa.text("SELECT count(*) FROM escalation_state WHERE external_id LIKE :p")
    proc = subprocess.Popen([sys.executable, "-m", "escalation", *_args(csv_file)],
                            env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            with engine.connect() as conn:
                if conn.execute(count, {"p": f"{source}-%"}).scalar_one() > 0:
                    break
            time.sleep(0.05)
        assert proc.poll() is None, "the import ended before it could be stopped"
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    line = next(ln for ln in stderr.splitlines() if "import interrupted" in ln)
    assert line.startswith(f"{csv_file}: import interrupted between two batches: "), stderr
    assert line.endswith(f" of {n} rows recorded and scheduled; run the same import again to "
                         "write the rest"), stderr
    confirmed = int(line.split("batches: ")[1].split(" of ")[0])
    assert "Traceback" not in stderr
    with engine.connect() as conn:
        recorded = conn.execute(count, {"p": f"{source}-%"}).scalar_one()
    assert 0 < recorded < n and recorded == confirmed  # stopped at a batch boundary

    res = run_cli(cli_env, *_args(csv_file), "--json")
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["created"] + report["already_enqueued"] == n
    assert report["already_enqueued"] == recorded
    assert report["rescheduled"] == 0  # the stopped run had scheduled all it recorded
