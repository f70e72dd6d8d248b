"""``escalation import --delimiter``: a tab-separated file imports as the comma one would; an
unsupported separator is refused naming it, exit 2, before anything is read or written; a
semicolon file read with the default comma is refused naming the option."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from escalation.service_layer.importer import stable_dispute_id
from tests.helpers import run_cli

ARGS = ["--id-column", "id", "--opened-column", "opened", "--tier", "standard"]


def test_a_tab_separated_file_imports_with_delimiter_tab(
    app: Any, cli_env: dict[str, str], tmp_path: Path
) -> None:
    source = f"t{uuid.uuid4().hex[:8]}"
    rows = [f"{source}-{i}\t2026-01-05\tnote, with a comma {i}" for i in range(5)]
    csv_file = tmp_path / "t.tsv"
    csv_file.write_text("id\topened\tnote\n" + "\n".join(rows) + "\n")
    res = run_cli(cli_env, "import", str(csv_file), *ARGS, "--delimiter", "tab", "--json")
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["created"] == 5 and report["errors"] == []
    did, _ = stable_dispute_id(f"{source}-3", "external")
    assert app.store.get(did) is not None


def test_an_unsupported_delimiter_is_refused_and_nothing_is_read(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    res = run_cli(cli_env, "import", str(tmp_path / "absent.csv"), *ARGS, "--delimiter", "|")
    assert res.returncode == 2
    assert "error: delimiter: '|' is not supported" in res.stderr


def test_a_semicolon_file_without_the_option_names_it(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    csv_file = tmp_path / "s.csv"
    csv_file.write_text("id;opened;note\nx-1;2026-01-05;n\n")
    res = run_cli(cli_env, "import", str(csv_file), *ARGS)
    assert res.returncode == 2
    assert "--delimiter ';'" in " ".join(res.stderr.split())
