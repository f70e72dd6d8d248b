"""``escalation import`` and its bad rows: line numbers are printed as digits (rich no
longer turns ``:100:`` into an emoji), ``--json`` lists every bad row whether or not
anything was written, a byte that is not UTF-8 fails its own row (with its line) instead of
the whole file, an input that is not a regular file is named for what it is, and a stray
quote costs the row it opens, not the rest of the file; duplicate ids, an unknown mapping
table or an unknown ladder are refused once, before anything is written."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from tests.helpers import run_cli


def _args(csv_file: Path) -> list[str]:
    return ["import", str(csv_file), "--id-column", "id", "--opened-column", "opened",
            "--tier", "standard"]


def _rows(n: int, source: str) -> list[str]:
    return [f"{source}-{i},2026-01-05,note {i}" for i in range(n)]


def test_line_numbers_and_cells_are_printed_as_they_are(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    rows = _rows(120, f"e{uuid.uuid4().hex[:8]}")
    rows[98] = ":fire:,bad,x"  # line 100
    csv_file = tmp_path / "e.csv"
    csv_file.write_text("id,opened,note\n" + "\n".join(rows) + "\n")
    res = run_cli(cli_env, *_args(csv_file))
    assert res.returncode == 2
    assert f"{csv_file}:100: " in res.stderr, res.stderr
    assert "\U0001f4af" not in res.stderr  # the "100" emoji


def test_json_lists_every_bad_row_written_or_not(
    app: Any, cli_env: dict[str, str], tmp_path: Path
) -> None:
    rows = _rows(80, f"j{uuid.uuid4().hex[:8]}")
    for i in range(0, 80, 2):
        rows[i] = rows[i].replace("2026-01-05", "someday")
    csv_file = tmp_path / "j.csv"
    csv_file.write_text("id,opened,note\n" + "\n".join(rows) + "\n")
    res = run_cli(cli_env, *_args(csv_file), "--json")
    assert res.returncode == 2
    report = json.loads(res.stdout)
    assert report["imported"] is False and report["created"] == 0
    assert [e["line"] for e in report["errors"]] == list(range(2, 82, 2))
    res = run_cli(cli_env, *_args(csv_file), "--json", "--skip-invalid")
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["imported"] is True and report["created"] == 40
    assert report["skipped_invalid"] == 40 and len(report["errors"]) == 40
    assert "someday" in report["errors"][-1]["message"]


def test_a_byte_that_is_not_utf8_fails_its_row_with_its_line(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    rows = _rows(30, f"u{uuid.uuid4().hex[:8]}")
    data = ("id,opened,note\n" + "\n".join(rows) + "\n").encode()
    cut = data.index(rows[20].encode())  # line 22
    data = data[:cut + 20] + b"\xe9" + data[cut + 20:]
    csv_file = tmp_path / "u.csv"
    csv_file.write_bytes(data)
    res = run_cli(cli_env, *_args(csv_file))
    assert res.returncode == 2
    assert f"{csv_file}:22: not valid UTF-8: byte 0xe9" in res.stderr, res.stderr
    res = run_cli(cli_env, *_args(csv_file), "--skip-invalid")
    assert res.returncode == 0 and "29 enqueued" in res.stdout, res.stderr


def test_inputs_that_are_not_regular_files_are_named(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    res = run_cli(cli_env, *_args(tmp_path))
    assert res.returncode == 2 and "a directory" in res.stderr
    res = run_cli(cli_env, *_args(tmp_path / "absent.csv"))
    assert res.returncode == 2 and "no such file" in res.stderr
    res = run_cli(cli_env, *_args(Path("/dev/null")))
    assert res.returncode == 2 and "not a regular file" in res.stderr


def test_a_stray_quote_costs_its_row_not_the_rest_of_the_file(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    source = f"q{uuid.uuid4().hex[:8]}"
    rows = _rows(50, source)
    rows[9] = f'{source}-9,2026-01-05,"oops'              # line 11 opens a quote...
    rows[10] = f'{source}-10,2026-01-05,"fine, really"'   # ...which line 12 closes
    csv_file = tmp_path / "q.csv"
    csv_file.write_text("id,opened,note\n" + "\n".join(rows) + "\n")
    res = run_cli(cli_env, *_args(csv_file), "--skip-invalid")
    assert res.returncode == 0, res.stderr
    assert f"{csv_file}:11: " in res.stderr and "spans lines 11-12" in res.stderr
    assert "48 enqueued" in res.stdout and "1 skipped as invalid" in res.stdout, res.stdout


def test_import_refuses_duplicate_ids_unknown_tables_and_unknown_ladders_once(
    app: Any, cli_env: dict[str, str], tmp_path: Path
) -> None:
    a, b = uuid.uuid4(), uuid.uuid4()
    csv_file = tmp_path / "d.csv"
    csv_file.write_text(f"id,opened,tier\n{a},2026-01-02,standard\n{b},2026-01-02,standard\n"
                        f"{a},2026-01-03,senior\n")
    base = ["import", str(csv_file), "--id-column", "id", "--opened-column", "opened"]
    res = run_cli(cli_env, *base)
    assert res.returncode == 2 and "already on line 2" in res.stderr
    assert app.store.get(a) is None and app.store.get(b) is None
    mapping = tmp_path / "m.toml"
    mapping.write_text('[colums]\ndispute_id = "id"\n')
    res = run_cli(cli_env, "import", str(csv_file), "--mapping", str(mapping))
    assert res.returncode == 2 and "unknown table" in res.stderr and "[colums]" in res.stderr
    res = run_cli(cli_env, *base, "--ladder", "no_such_ladder", "--skip-invalid")
    assert res.returncode == 3, res.stderr  # a ladder that does not exist (docs/cli.md)
    assert res.stderr.count("no_such_ladder") == 1, res.stderr
    res = run_cli(cli_env, *base, "--tier-column", "tier", "--tier", "standard",
                  "--skip-invalid")
    assert res.returncode == 0 and "2 enqueued" in res.stdout, res.stderr
