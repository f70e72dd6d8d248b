"""``escalation bench api``: the HTTP API under load, with a real HTTP client (httpx).

A server (``escalation serve --workers W``, default 2 uvicorn workers) runs on a free
loopback port against the bench target (own Redis namespace, own database). Three figures:

* **batch create**: ``batches`` POSTs of ``batch_size`` escalations from ``batch_concurrency``
  concurrent connections; escalations/s over the wall time (target >= 10,000/s);
* **single create throughput**: ``single_n`` POSTs of one escalation each from
  ``concurrency`` concurrent connections; requests/s (target >= 1,000/s);
* **latency at a fixed rate**: POSTs sent open-loop at ``rate`` requests/s for ``seconds``;
  latency is measured from each request's *scheduled* send time (so a stalled server is not
  hidden by a stalled client: no coordinated omission); p50/p99/max (target p99 <= 25 ms at
  300/s).

Every response must be 201; the ledger must then hold exactly one ENQUEUED row per
escalation sent (checked at the end). The client runs on the same machine: its CPU use is
part of the figures (the load averages are recorded before and after, and the client
process's own CPU time per request is reported).

Two real HTTP clients (keep-alive connections, asyncio): ``aiohttp`` (the default: its C
HTTP parser costs about 0.2 ms of client CPU per request) and ``httpx`` (pure Python, about
3-6 ms per request on the 2-core machine of docs/performance.md, which alone caps one client
process at a few hundred requests/s there).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

import httpx
import sqlalchemy as sa

from escalation.bench.common import Target, load, new_namespace, percentile

IN_FLIGHT = 64
DUE = (datetime.now(UTC) + timedelta(days=3000)).isoformat()  # within DUE_IN_MAX (3650 d)


def _item() -> dict[str, str]:
    did = uuid.uuid4()
    return {"dispute_id": str(did), "source_hash": did.hex, "materiality": "125.50",
            "tier": "standard", "due_at": DUE}


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_api_server(env: dict[str, str], workers: int = 1,
                     timeout_s: float = 90) -> tuple[str, subprocess.Popen[bytes]]:
    """Start ``escalation serve`` on a free loopback port with ``env``; wait for /healthz.

    Returns ``(base URL, process)``; the process's output is in ``process.log_file``, an
    anonymous temporary file the caller closes once the process has ended.

    Raises:
        RuntimeError: the server exited, or did not answer within ``timeout_s`` seconds.
    """
    port = _free_port()
    log = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the server
    proc = subprocess.Popen(  # noqa: S603 - our own interpreter and module
        [sys.executable, "-m", "escalation", "serve", "--host", "127.0.0.1",
         "--port", str(port), "--workers", str(workers)],
        env=env, stdout=log, stderr=subprocess.STDOUT)
    proc.log_file = log  # type: ignore[attr-defined]
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            text = log.read().decode(errors="replace")
            log.close()
            raise RuntimeError("api server exited: " + text)
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return url, proc
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    proc.wait()
    log.close()
    raise RuntimeError(f"api server did not answer /healthz within {timeout_s:.0f} s")


def _start(tgt: Target, namespace: str, workers: int) -> tuple[str, subprocess.Popen[bytes]]:
    env = tgt.worker_env(namespace, "api")
    # the client never has more than IN_FLIGHT requests outstanding: no load is shed here
    # (the overload run below measures shedding)
    env.update(ESCALATION_LOG_LEVEL="WARNING", ESCALATION_API_MAX_IN_FLIGHT=str(IN_FLIGHT))
    return start_api_server(env, workers)


CLIENTS = ("aiohttp", "httpx")


class _Client:
    """A keep-alive HTTP client (aiohttp or httpx) with at most ``connections`` connections,
    sending the bearer token on every request."""

    def __init__(self, kind: str, url: str, token: str, connections: int) -> None:
        if kind not in CLIENTS:
            raise ValueError(f"client must be one of {', '.join(CLIENTS)}, got {kind!r}")
        self.kind = kind
        self._url, self._token, self._n = url, token, connections
        self._session: Any = None

    async def __aenter__(self) -> _Client:
        headers = {"Authorization": f"Bearer {self._token}"}
        if self.kind == "httpx":
            limits = httpx.Limits(max_connections=self._n, max_keepalive_connections=self._n)
            self._session = httpx.AsyncClient(base_url=self._url, limits=limits, timeout=60,
                                              headers=headers)
        else:
            import aiohttp

            self._session = aiohttp.ClientSession(
                self._url, headers=headers, timeout=aiohttp.ClientTimeout(total=60),
                connector=aiohttp.TCPConnector(limit=self._n))
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.kind == "httpx":
            await self._session.aclose()
        else:
            await self._session.close()

    async def post(self, path: str, body: Any) -> int | str:
        """POST; the status code, or the transport error's class name (a dropped connection
        is counted, not fatal: its request may or may not have been processed)."""
        if self.kind == "httpx":
            try:
                return int((await self._session.post(path, json=body)).status_code)
            except httpx.TransportError as exc:
                return type(exc).__name__
        import aiohttp

        try:
            async with self._session.post(path, json=body) as response:
                await response.read()
                return int(response.status)
        except (TimeoutError, aiohttp.ClientError) as exc:
            return type(exc).__name__


class _Endpoint(NamedTuple):
    """Where requests go: the server's base ``url``, the bearer ``token`` and the ``path``."""

    url: str
    token: str
    path: str = "/v1/escalations"


async def _closed_loop(ep: _Endpoint, bodies: list[Any], concurrency: int,
                       client_kind: str = "aiohttp",
                       ) -> tuple[float, list[float], dict[int | str, int]]:
    """Send ``bodies`` to ``ep`` from ``concurrency`` connections as fast as answered.
    Returns (wall seconds, latencies ms, status counts)."""
    url, token, path = ep
    queue: asyncio.Queue[Any] = asyncio.Queue()
    for b in bodies:
        queue.put_nowait(b)
    lat: list[float] = []
    codes: dict[int | str, int] = {}
    async with _Client(client_kind, url, token, concurrency) as client:

        async def one() -> None:
            while not queue.empty():
                b = queue.get_nowait()
                t0 = time.perf_counter()
                code = await client.post(path, b)
                lat.append((time.perf_counter() - t0) * 1000)
                codes[code] = codes.get(code, 0) + 1

        start = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(concurrency)))
        return time.perf_counter() - start, lat, codes


async def _open_loop(url: str, token: str, rate: float, seconds: float,
                     client_kind: str = "aiohttp",
                     ) -> tuple[list[float], dict[int | str, int], float]:
    """POST one escalation every 1/rate s for ``seconds``; latency from the scheduled send
    time. Returns (latencies ms, status counts, achieved rate)."""
    n = int(rate * seconds)
    lat: list[float] = []
    codes: dict[int | str, int] = {}
    # At most IN_FLIGHT requests outstanding: a request that finds them all busy starts late,
    # and its latency still counts from its scheduled time (a slow server shows as latency,
    # not as a slower client); it also keeps httpx's pool queue short.
    gate = asyncio.Semaphore(IN_FLIGHT)
    async with _Client(client_kind, url, token, IN_FLIGHT) as client:

        async def one(at: float, body: dict[str, str]) -> None:
            delay = at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            async with gate:
                code = await client.post("/v1/escalations", body)
            lat.append((time.perf_counter() - at) * 1000)
            codes[code] = codes.get(code, 0) + 1

        start = time.perf_counter() + 0.2
        bodies = [_item() for _ in range(n)]
        await asyncio.gather(*(one(start + i / rate, bodies[i]) for i in range(n)))
        elapsed = time.perf_counter() - start
    return lat, codes, n / elapsed if elapsed > 0 else 0.0


def _tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of ``pid`` and its descendants (Linux ``/proc``; 0 when
    unavailable): the server's own cost per request, apart from the client's."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
            with open(f"/proc/{p}/task/{p}/children") as fh:
                todo += [int(c) for c in fh.read().split()]
        except (OSError, ValueError, IndexError):
            continue
    return total


def _enqueued_rows(tgt: Target, actor: str) -> int:
    """ENQUEUED ledger rows written as ``actor`` (the bench token's name)."""
    engine = tgt.engine()
    try:
        with engine.connect() as conn:
            return int(conn.execute(sa.text(
                "SELECT count(*) FROM escalation_audit WHERE actor = :a AND event = 'ENQUEUED'"),
                {"a": actor}).scalar_one())
    finally:
        engine.dispose()


def _stats(lat: list[float]) -> dict[str, float | None]:
    return {"p50": percentile(lat, 50), "p99": percentile(lat, 99),
            "max": max(lat) if lat else None}


@dataclass(frozen=True, slots=True)
class ApiRound:
    """The three HTTP API measurements (the command of :func:`run`): ``batches`` batch
    creates of ``batch_size`` items from ``batch_concurrency`` connections; ``single_n``
    single creates from ``concurrency`` connections; single creates at ``rate`` per second
    for ``seconds`` s; a server of ``workers`` processes; ``client``: one of
    :data:`CLIENTS`."""

    batches: int
    batch_size: int
    batch_concurrency: int
    single_n: int
    concurrency: int
    rate: float
    seconds: float
    workers: int
    client: str = "aiohttp"


def run(tgt: Target, cmd: ApiRound) -> dict[str, Any]:
    """Run the three measurements (see the module docstring) with ``cmd.client``. Returns
    the figures.

    Raises:
        ValueError: an unknown client (from the first request phase).
    """
    import signal

    from escalation.composition_bench import token_store_on
    from escalation.service_layer.tokens import CreateToken, create_token

    # SIGTERM (e.g. `timeout`) unwinds like Ctrl-C, so the server is stopped and the bench
    # database and namespace are removed
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    ns = new_namespace()
    tgt.namespaces.append(ns)
    engine = tgt.engine()
    try:
        token, _ = create_token(CreateToken(f"{ns}-bench", "service", 1), token_store_on(engine))
    finally:
        engine.dispose()
    load_before = load()
    url, proc = _start(tgt, ns, cmd.workers)
    try:
        warm = [_item() for _ in range(200)]
        asyncio.run(_closed_loop(_Endpoint(url, token), warm, 8, cmd.client))
        batch_bodies = [{"items": [_item() for _ in range(cmd.batch_size)]}
                        for _ in range(cmd.batches)]
        cpu = [_tree_cpu_s(proc.pid)]
        b_wall, b_lat, b_codes = asyncio.run(_closed_loop(
            _Endpoint(url, token, "/v1/escalations/batch"), batch_bodies, cmd.batch_concurrency,
            cmd.client))
        cpu.append(_tree_cpu_s(proc.pid))
        singles = [_item() for _ in range(cmd.single_n)]
        own = time.process_time()
        s_wall, s_lat, s_codes = asyncio.run(
            _closed_loop(_Endpoint(url, token), singles, cmd.concurrency, cmd.client))
        own_single = time.process_time() - own
        cpu.append(_tree_cpu_s(proc.pid))
        own = time.process_time()
        r_lat, r_codes, achieved = asyncio.run(_open_loop(url, token, cmd.rate, cmd.seconds,
                                                          cmd.client))
        own_rate = time.process_time() - own
        cpu.append(_tree_cpu_s(proc.pid))
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log = proc.log_file  # type: ignore[attr-defined]
        log.seek(0)
        server_log = log.read().decode(errors="replace")
        log.close()
    sent = len(warm) + cmd.batches * cmd.batch_size + cmd.single_n + int(cmd.rate * cmd.seconds)
    rows = _enqueued_rows(tgt, f"{ns}-bench")
    batch_rate = cmd.batches * cmd.batch_size / b_wall
    single_rate = cmd.single_n / s_wall
    r_stats = _stats(r_lat)
    answered = (b_codes.get(200, 0) * cmd.batch_size + s_codes.get(201, 0) + r_codes.get(201, 0)
                + len(warm))
    ok_codes = (set(b_codes) == {200} and set(s_codes) == {201} and set(r_codes) == {201})
    ledger_ok = answered <= rows <= sent  # every answered request recorded, nothing extra
    return {
        "scenario": "api", "load": load(), "load_before": load_before,
        "cpus": os.cpu_count(), "uvicorn_workers": cmd.workers, "client": cmd.client,
        "batch": {"requests": cmd.batches, "size": cmd.batch_size,
                  "concurrency": cmd.batch_concurrency,
                  "seconds": round(b_wall, 3), "escalations_per_s": round(batch_rate, 1),
                  "request_ms": _stats(b_lat), "status": b_codes,
                  "server_cpu_ms_per_escalation": round(
                      (cpu[1] - cpu[0]) * 1000 / (cmd.batches * cmd.batch_size), 3),
                  "target_per_s": 10_000, "met": batch_rate >= 10_000},
        "single": {"requests": cmd.single_n, "concurrency": cmd.concurrency,
                   "seconds": round(s_wall, 3), "requests_per_s": round(single_rate, 1),
                   "request_ms": _stats(s_lat), "status": s_codes,
                   "server_cpu_ms_per_request": round((cpu[2] - cpu[1]) * 1000 / cmd.single_n, 3),
                   "client_cpu_ms_per_request": round(own_single * 1000 / cmd.single_n, 3),
                   "target_per_s": 1_000, "met": single_rate >= 1_000},
        "fixed_rate": {"rate_per_s": cmd.rate, "achieved_per_s": round(achieved, 1),
                       "seconds": cmd.seconds, "latency_ms": r_stats, "status": r_codes,
                       "server_cpu_ms_per_request": round(
                           (cpu[3] - cpu[2]) * 1000 / max(1, int(cmd.rate * cmd.seconds)), 3),
                       "client_cpu_ms_per_request": round(
                           own_rate * 1000 / max(1, int(cmd.rate * cmd.seconds)), 3),
                       "target_p99_ms": 25,
                       "met": r_stats["p99"] is not None and r_stats["p99"] <= 25},
        "ledger": {"sent": sent, "answered_2xx": answered, "enqueued_rows": rows,
                   "ok": ledger_ok},
        "server_log_tail": server_log[-2000:] if not ok_codes else "",
        "ok": ok_codes and ledger_ok,
    }


async def _overload_loop(url: str, token: str, rate: float, seconds: float,
                         connections: int) -> tuple[list[float], list[float],
                                                    dict[int | str, int], float]:
    """Open loop without a client-side bound: POST one escalation every 1/rate s for
    ``seconds`` whatever the answers (``connections`` keep-alive connections at most; a
    request waiting for one still counts from its scheduled time). Returns (latencies ms of
    the 201s, latencies ms of the 503s, status counts, wall seconds)."""
    n = int(rate * seconds)
    accepted: list[float] = []
    shed: list[float] = []
    codes: dict[int | str, int] = {}
    async with _Client("aiohttp", url, token, connections) as client:

        async def one(at: float, body: dict[str, str]) -> None:
            delay = at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            code = await client.post("/v1/escalations", body)
            ms = (time.perf_counter() - at) * 1000
            (accepted if code == 201 else shed if code == 503 else []).append(ms)
            codes[code] = codes.get(code, 0) + 1

        start = time.perf_counter() + 0.2
        bodies = [_item() for _ in range(n)]
        await asyncio.gather(*(one(start + i / rate, bodies[i]) for i in range(n)))
        return accepted, shed, codes, time.perf_counter() - start


OVERLOAD_TARGET_P99_MS = 1000.0
"""The bound the overload run checks on p99 of the accepted requests, or twice the p99 of the
closed-loop capacity run when that is higher (a machine whose saturated p99 is already over
a second, e.g. under others' load, is judged against itself): overload must not add more
than the wait of one more full queue."""


@dataclass(frozen=True, slots=True)
class OverloadRound:
    """Load shedding under an open-loop overload (the command of :func:`run_overload`): a
    server of ``workers`` processes with ``api_max_in_flight = max_in_flight``, offered
    ``factor`` x its capacity for ``seconds`` s from ``connections`` connections, its
    capacity measured with ``capacity_n`` single creates; ``compare``: the same offered rate
    against a server that does not shed."""

    workers: int
    max_in_flight: int
    factor: float
    seconds: float
    connections: int
    capacity_n: int
    compare: bool = False


def _overload_phase(tgt: Target, token: str, actor: str, cmd: OverloadRound,
                    rate: float | None) -> dict[str, Any]:
    """One server with ``api_max_in_flight = cmd.max_in_flight``: its capacity (closed
    loop), then an open loop at ``cmd.factor`` x capacity (or at ``rate`` when given)."""
    max_in_flight, workers, factor, seconds = (cmd.max_in_flight, cmd.workers, cmd.factor,
                                               cmd.seconds)
    connections, capacity_n = cmd.connections, cmd.capacity_n
    ns = new_namespace()
    tgt.namespaces.append(ns)
    env = tgt.worker_env(ns, "api")
    env.update(ESCALATION_LOG_LEVEL="WARNING", ESCALATION_API_MAX_IN_FLIGHT=str(max_in_flight))
    rows_before = _enqueued_rows(tgt, actor)
    url, proc = start_api_server(env, workers)
    try:
        warm = [_item() for _ in range(200)]
        _, _, w_codes = asyncio.run(_closed_loop(_Endpoint(url, token), warm, 8))
        bodies = [_item() for _ in range(capacity_n)]
        c_wall, c_lat, c_codes = asyncio.run(
            _closed_loop(_Endpoint(url, token), bodies, 32))
        capacity = c_codes.get(201, 0) / c_wall
        offered = rate if rate is not None else factor * capacity
        accepted, shed, codes, wall = asyncio.run(
            _overload_loop(url, token, offered, seconds, connections))
    finally:
        proc.terminate()
        try:
            exit_code: int | None = proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            exit_code = None
        proc.log_file.close()  # type: ignore[attr-defined]
    rows = _enqueued_rows(tgt, actor) - rows_before
    created = w_codes.get(201, 0) + c_codes.get(201, 0) + codes.get(201, 0)
    errors = sum(n for c, n in codes.items() if c not in (201, 503))
    dropped = sum(n for phase in (w_codes, c_codes, codes) for c, n in phase.items()
                  if c not in (201, 503))
    acc = _stats(accepted)
    return {
        "max_in_flight": max_in_flight, "capacity_per_s": round(capacity, 1),
        "capacity_request_ms": _stats(c_lat),
        "offered_per_s": round(offered, 1), "seconds": seconds,
        "sent": int(offered * seconds), "wall_s": round(wall, 2),
        "accepted": codes.get(201, 0), "accepted_per_s": round(codes.get(201, 0) / wall, 1),
        "shed_503": codes.get(503, 0), "other": errors, "status": codes,
        "accepted_ms": acc, "shed_ms": _stats(shed),
        # every 201 recorded once; a 503 wrote nothing; a dropped connection may or may not
        # have been written
        "ledger_ok": created <= rows <= created + dropped,
        "enqueued_rows": rows, "exit_code_on_sigterm": exit_code,
    }


def run_overload(tgt: Target, cmd: OverloadRound) -> dict[str, Any]:
    """Load shedding under an open-loop overload (docs/performance.md, "Load shedding").

    A server with ``api_max_in_flight = max_in_flight``: its single-create capacity is
    measured closed-loop, then single creates are sent open-loop at ``factor`` x that rate for
    ``seconds``; latency counts from each request's scheduled send time. Reported: accepted
    (201) and shed (503) counts, p50/p99/max of each. ``compare``: the same offered rate
    against a server that does not shed (``api_max_in_flight`` 100,000), to show what the
    bound buys. ``met``: no error but 503, the ledger holds exactly the accepted requests,
    and p99 of the accepted ones <= :data:`OVERLOAD_TARGET_P99_MS` (or twice the capacity
    run's p99 when higher).
    """
    import signal

    from escalation.composition_bench import token_store_on
    from escalation.service_layer.tokens import CreateToken, create_token

    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    actor = f"{new_namespace()}-overload"
    engine = tgt.engine()
    try:
        token, _ = create_token(CreateToken(actor, "service", 1), token_store_on(engine))
    finally:
        engine.dispose()
    load_before = load()
    workers, factor = cmd.workers, cmd.factor
    shedding = _overload_phase(tgt, token, actor, cmd, None)
    unbounded = None
    if cmd.compare:
        unbounded = _overload_phase(tgt, token, actor, replace(cmd, max_in_flight=100_000),
                                    shedding["offered_per_s"])
    p99 = shedding["accepted_ms"]["p99"]
    bound = max(OVERLOAD_TARGET_P99_MS, 2 * (shedding["capacity_request_ms"]["p99"] or 0))
    met = (shedding["other"] == 0 and shedding["ledger_ok"] and p99 is not None
           and p99 <= bound)
    return {"scenario": "api-overload", "load_before": load_before, "load": load(),
            "cpus": os.cpu_count(), "uvicorn_workers": workers, "factor": factor,
            "shedding": shedding, "unbounded": unbounded,
            "target_p99_ms": round(bound, 1), "met": met,
            "ok": shedding["ledger_ok"] and (unbounded is None or unbounded["ledger_ok"])}
