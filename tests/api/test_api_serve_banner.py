"""`escalation serve` says once, on start, where it listens (uvicorn itself runs at WARNING)."""

from __future__ import annotations

from typing import Any

from tests.api.conftest import start_server, stop_server


def test_serve_prints_where_it_listens(api_server: Any) -> None:
    url, proc = start_server(api_server.env)  # a second server, same settings
    try:
        log = proc.log_file  # type: ignore[attr-defined]
        log.seek(0)
        text = log.read().decode()
    finally:
        stop_server(proc)
    [line] = [ln for ln in text.splitlines() if ln.startswith("escalation serve: ")]
    assert line.startswith(f"escalation serve: {url} (API under /v1, console at /console")
    assert "1 worker process(es)" in line


def test_serve_on_a_taken_port_says_so_in_one_line_and_exits_2(api_server: Any) -> None:
    # it printed the listen banner, then uvicorn's error, and exited 3 (no documented code)
    from urllib.parse import urlsplit

    from tests.helpers import run_cli

    port = urlsplit(api_server.url).port
    res = run_cli(api_server.env, "serve", "--port", str(port))
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    assert f"cannot listen on 127.0.0.1:{port}" in res.stderr
    assert "escalation serve: http" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
