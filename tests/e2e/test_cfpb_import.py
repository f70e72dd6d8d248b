"""The real CFPB sample: import 2,067 complaints, one burst worker promotes each exactly once."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from escalation.service_layer.importer import stable_dispute_id
from tests.conftest import SHARED_DATA
from tests.helpers import run_cli

DATA = SHARED_DATA / "cfpb_complaints_sample.csv"
SOURCE = "cfpb-import-test"
MAPPING = Path(__file__).resolve().parents[2] / "docs" / "examples" / "cfpb_mapping.toml"


@pytest.mark.slow
@pytest.mark.timeout(1800)  # three CLI runs (import, worker, re-import) of up to 600 s each
@pytest.mark.skipif(not DATA.exists(), reason="the CFPB sample is not in ESCALATION_TEST_DATA_DIR")
def test_cfpb_sample_is_imported_and_promoted_exactly_once(
    app: Any, cli_env: dict[str, str]
) -> None:
    run = lambda *a: run_cli(cli_env, *a, timeout=600)  # noqa: E731
    # a source namespace of this test's own: other tests import the same sample into the
    # session database, and the UUID5 ids derive from (source, Complaint ID)
    res = run("import", str(DATA), "--mapping", str(MAPPING), "--external-source", SOURCE,
              "--json")
    assert res.returncode == 0, res.stderr[-2000:]
    assert '"created": 2067' in res.stdout
    res = run("worker", "--burst", "--batch-size", "200")
    assert res.returncode == 0, res.stdout[-2000:]
    with DATA.open(newline="") as fh:
        ids = [stable_dispute_id(r["Complaint ID"], SOURCE)[0] for r in csv.DictReader(fh)]
    assert len(set(ids)) == 2067
    with app.engine.connect() as conn:
        rows = conn.execute(sa.text(
            "SELECT count(*), count(DISTINCT dispute_id) FROM escalation_audit "
            "WHERE match_decision = 'PROMOTED_TO_SENIOR' AND dispute_id = ANY(:ids)"),
            {"ids": ids}).one()
    assert rows[0] == rows[1] == 2067
    # a second import changes nothing
    res = run("import", str(DATA), "--mapping", str(MAPPING), "--external-source", SOURCE,
              "--json")
    assert '"created": 0' in res.stdout and '"already_enqueued": 2067' in res.stdout
