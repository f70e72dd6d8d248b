"""Addressing a dispute on the command line: `audit show` takes an external id as well as a
dispute id (an unknown one is NOT_FOUND), and cancelling twice says it was already
cancelled."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from tests.helpers import run_cli


def test_audit_show_accepts_an_external_id_and_cancel_twice_says_so(
    app: Any, cli_env: dict[str, str], tmp_path: Path
) -> None:
    ext = f"C-{uuid.uuid4().hex[:8]}"
    csv_file = tmp_path / "c.csv"
    csv_file.write_text(f"id,opened\n{ext},2026-01-02\n")
    res = run_cli(cli_env, "import", str(csv_file), "--id-column", "id", "--opened-column",
                  "opened", "--external-source", "newcomer")
    assert res.returncode == 0, res.stderr
    shown = run_cli(cli_env, "audit", "show", ext, "--json")
    assert shown.returncode == 0, shown.stderr
    assert f'"external_id": "{ext}"' in shown.stdout
    missing = run_cli(cli_env, "audit", "show", "no-such-complaint")
    assert missing.returncode == 3 and "no dispute with id or external id" in missing.stderr
    from escalation.service_layer.importer import stable_dispute_id

    did = str(stable_dispute_id(ext, "newcomer")[0])
    first = run_cli(cli_env, "cancel", did)
    assert first.returncode == 0 and "cancelled" in first.stdout
    second = run_cli(cli_env, "cancel", did)
    assert second.returncode == 0 and "already cancelled" in second.stdout
    unknown = run_cli(cli_env, "cancel", str(uuid.uuid4()))
    assert unknown.returncode == 3 and "Traceback" not in unknown.stderr  # not found
