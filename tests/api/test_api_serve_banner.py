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
