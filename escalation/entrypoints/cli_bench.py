"""``escalation bench``: measure this deployment (docs/performance.md).

Each scenario prints a table, one JSON line with every figure, and one
``SUMMARY <scenario>: ...`` line to paste into docs/performance.md. Runs use their own Redis
namespace (``bench-<hex>``, keys UNLINKed at the end) and their own PostgreSQL database
(created and dropped), or ``--database-url``. Targets: the configured servers, else the
embedded ones, like every other command.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from escalation.domain.errors import InvalidInput

bench_app = typer.Typer(help="Benchmarks: drain, precision, idle, enqueue, scale, api, "
                        "compare, notify, ledger.",
                        no_args_is_help=True)

DbOpt = Annotated[str | None, typer.Option(
    help="PostgreSQL server to benchmark (URL of any database on it): the bench creates its "
         "own database there and drops it; it never writes into the named one.")]
JsonOpt = Annotated[bool, typer.Option(
    "--json", "--json-only",
    help="No table: print only the JSON line (every figure) and the SUMMARY line after it.")]


def _ints(text: str, name: str) -> list[int]:
    """``"1,2,4"`` -> ``[1, 2, 4]``; accepts ``k``/``m`` suffixes (``10k``, ``1m``).

    Raises:
        InvalidInput: an empty list or a non-positive / non-integer item.
    """
    out: list[int] = []
    for part in text.split(","):
        item = part.strip().lower()
        mult = 1_000_000 if item.endswith("m") else 1000 if item.endswith("k") else 1
        item = item.rstrip("km")
        if not item.isdigit() or int(item) * mult < 1:
            raise InvalidInput(f"{name}: {part!r} is not a positive integer")
        out.append(int(item) * mult)
    if not out:
        raise InvalidInput(f"{name}: give at least one value")
    return out


def _run(database_url: str | None, fn: Any, redis_url: str | None = None,
         keep_database: str | None = None) -> Any:
    from escalation.bench.common import target
    from escalation.logs import configure_logging

    configure_logging("console", "WARNING")
    with target(database_url, redis_url=redis_url, keep_database=keep_database) as tgt:
        return fn(tgt)


@bench_app.command("drain")
def drain_cmd(  # noqa: PLR0913 - a typer command: one parameter per option (ADR 0036)
    n: Annotated[int, typer.Option(help="Escalations due at one instant.")] = 20_000,
    workers: Annotated[str, typer.Option(help="Worker counts, e.g. 1,2,4.")] = "1,2,4",
    batch_size: Annotated[str, typer.Option(help="Batch sizes 1-500, e.g. 100,250,500.")] = "500",
    lead_s: Annotated[float | None, typer.Option(
        help="Seconds between now and the due instant (default: 2 + 1.5x the measured "
             "enqueue time).")] = None,
    shards: Annotated[int, typer.Option(
        min=1, max=1024, help="Shards of the bench namespace (client and workers); the "
                              "Redis is ESCALATION_REDIS_URL, e.g. a redis+cluster:// URL.")] = 1,
    database_url: DbOpt = None,
    json_only: JsonOpt = False,
) -> None:
    """N escalations due at once, W workers: escalations/s, apply lag, ledger count check."""
    from escalation.bench import drain
    from escalation.bench.common import fmt, report

    ws, bs = _ints(workers, "--workers"), _ints(batch_size, "--batch-size")
    if any(b > 500 for b in bs):
        raise InvalidInput("--batch-size: at most 500 (settings.batch_size range 1-500)")
    result = _run(database_url, lambda t: drain.run(
        t, drain.DrainGrid(n, ws, bs, lead_s, shards)))
    rows = [{"workers": r["workers"], "batch": r["batch_size"], "esc/s": r["rate_per_s"],
             "lag p50 ms": r["lag_ms"]["p50"], "lag p99 ms": r["lag_ms"]["p99"],
             "lag max ms": r["lag_ms"]["max"], "ledger": "PASS" if r["ledger_ok"] else "FAIL",
             "load": " ".join(map(str, r["load"]))} for r in result["runs"]]
    summary = "; ".join(
        f"W={r['workers']} B={r['batch_size']}: {fmt(r['rate_per_s'])}/s lag p50/p99/max "
        f"{fmt(r['lag_ms']['p50'])}/{fmt(r['lag_ms']['p99'])}/{fmt(r['lag_ms']['max'])} ms "
        f"ledger {'PASS' if r['ledger_ok'] else 'FAIL'}" for r in result["runs"])
    where = "" if shards == 1 else f" shards={shards}"
    report(result, rows, f"N={n}{where} {summary}", json_only=json_only)
    if not result["ok"]:
        raise typer.Exit(1)


@bench_app.command("precision")
def precision_cmd(
    rounds: Annotated[int, typer.Option(help="Escalations, one at a time.")] = 20,
    ahead_s: Annotated[float, typer.Option(help="Seconds between enqueue and due.")] = 2.0,
    busy: Annotated[int, typer.Option(
        help="Busy-loop processes running beside the worker (contended cores).")] = 0,
    database_url: DbOpt = None,
    json_only: JsonOpt = False,
) -> None:
    """One escalation due AHEAD_S ahead, ROUNDS times, no backlog: firing lag p50/p99."""
    from escalation.bench import precision
    from escalation.bench.common import report

    if busy < 0:
        raise InvalidInput("--busy: 0 or more")
    result = _run(database_url, lambda t: precision.run(t, rounds, ahead_s, busy))
    lag, claim = result["lag_ms"], result["claim_lag_ms"]
    rows = [{"rounds": rounds, "lag p50 ms": lag["p50"], "lag p99 ms": lag["p99"],
             "lag max ms": lag["max"], "claim lag p50 ms": claim["p50"],
             "claim lag p99 ms": claim["p99"]}]
    report(result, rows, f"{rounds} rounds, due {ahead_s:g} s ahead, {busy} busy loops: "
           f"apply lag p50 "
           f"{lag['p50']:.0f} ms p99 {lag['p99']:.0f} ms (claim lag p50 {claim['p50']:.0f} "
           f"p99 {claim['p99']:.0f} ms)", json_only=json_only)


@bench_app.command("idle")
def idle_cmd(  # noqa: PLR0913 - a typer command: one parameter per option (ADR 0036)
    seconds: Annotated[float, typer.Option(help="Measurement window.")] = 90.0,
    poll_interval_s: Annotated[float, typer.Option(help="Worker poll interval 1-60 s.")] = 5.0,
    workers: Annotated[int, typer.Option(help="Idle worker processes.")] = 1,
    shared_redis: Annotated[bool, typer.Option(
        "--shared-redis", help="Count on the configured Redis (every other client included: "
                               "an upper bound) instead of a private redis-server.")] = False,
    database_url: DbOpt = None,
    json_only: JsonOpt = False,
) -> None:
    """Redis commands/s per idle worker: INFO commandstats delta on a private redis-server."""
    from escalation.bench import idle
    from escalation.bench.common import report

    if workers < 1 or seconds <= 0:
        raise InvalidInput("--workers and --seconds must be positive")
    if shared_redis:
        result = _run(database_url, lambda t: idle.run(
            t, idle.IdleRound(seconds, poll_interval_s, workers=workers, private=False)))
    else:
        from escalation.bench.compare import PrivateRedis

        srv = PrivateRedis.start()
        try:
            result = _run(database_url, lambda t: idle.run(
                t, idle.IdleRound(seconds, poll_interval_s, workers=workers, private=True)),
                redis_url=srv.url)
        finally:
            srv.stop()
    rows = [{"poll s": poll_interval_s, "window s": result["seconds"], "workers": workers,
             "cmds/s per worker": result["cmds_per_s_per_worker"],
             "TIME/min per worker": result["time_calls_per_min_per_worker"],
             "by command": " ".join(f"{k}={v}" for k, v in result["by_command"].items())}]
    where = "private redis-server" if result["private_redis"] else "shared Redis (upper bound)"
    report(result, rows, f"poll {poll_interval_s:g} s, {workers} worker(s), "
           f"{result['seconds']:g} s on a {where}: {result['cmds_per_s_per_worker']:.2f} "
           f"cmds/s per worker ({result['by_command']})", json_only=json_only)


@bench_app.command("notify")
def notify_cmd(  # noqa: PLR0913 - a typer command: one parameter per option (ADR 0036)
    n: Annotated[int, typer.Option(help="Notifications to deliver.")] = 100,
    delay_ms: Annotated[float, typer.Option(
        help="The loopback receiver answers each POST after this many ms.")] = 100.0,
    concurrency: Annotated[int, typer.Option(help="Deliveries at once (notify --concurrency).")
                           ] = 16,
    per_dispute: Annotated[int, typer.Option(
        help="Notifications per dispute (delivered in order, one at a time).")] = 1,
    database_url: DbOpt = None,
    json_only: JsonOpt = False,
) -> None:
    """Webhook deliveries/s: notify's pooled client and delivery threads against a slow
    loopback receiver that checks every signature and the order per dispute."""
    from escalation.bench import notify
    from escalation.bench.common import report

    if n < 1 or per_dispute < 1 or concurrency < 1 or delay_ms < 0:
        raise InvalidInput("--n, --per-dispute and --concurrency must be positive, "
                           "--delay-ms >= 0")
    result = _run(database_url, lambda t: notify.run(
        t, notify.NotifyRound(n, delay_ms, concurrency, per_dispute)))
    rows = [{"deliveries": result["deliveries"], "receiver ms": delay_ms,
             "concurrency": concurrency, "seconds": result["seconds"],
             "per s": result["per_s"], "verified": result["verified"],
             "order ok": result["order_ok"], "connections": result["connections"]}]
    report(result, rows, f"{result['deliveries']} deliveries to a {delay_ms:g} ms receiver, "
           f"concurrency {concurrency}: {result['seconds']:.2f} s ({result['per_s']:.0f}/s), "
           f"{result['verified']}/{result['requests']} signatures verified, order per dispute "
           f"{'kept' if result['order_ok'] else 'BROKEN'}, {result['connections']} connections",
           json_only=json_only)


@bench_app.command("enqueue")
def enqueue_cmd(
    n: Annotated[int, typer.Option(help="Escalations for the batched figures.")] = 5000,
    n_single: Annotated[int, typer.Option(help="Escalations for the one-by-one figures.")] = 1000,
    batch: Annotated[int, typer.Option(help="Chunk size of the batched API.")] = 500,
    database_url: DbOpt = None,
    json_only: JsonOpt = False,
) -> None:
    """Escalations/s from one client: single and batched, with PostgreSQL and Redis-only."""
    from escalation.bench import enqueue
    from escalation.bench.common import report

    result = _run(database_url, lambda t: enqueue.run(t, n, n_single, batch))
    kinds = ("single", "batched", "redis_single", "redis_batched")
    rows = [{"api": k, "n": result[k]["n"], "seconds": result[k]["seconds"],
             "esc/s": result[k]["per_s"]} for k in kinds]
    report(result, rows, ", ".join(f"{k} {result[k]['per_s']:,.0f}/s" for k in kinds)
           + f" (batch {batch})", json_only=json_only)


@bench_app.command("scale")
def scale_cmd(
    sizes: Annotated[str, typer.Option(help="Pending counts, e.g. 10k,100k,1m.")] = "10k,100k,1m",
    rounds: Annotated[int, typer.Option(help="Claims timed per size.")] = 20,
    claim_batch: Annotated[int, typer.Option(help="Members per claim (1-500).")] = 100,
    database_url: DbOpt = None,
    json_only: JsonOpt = False,
) -> None:
    """Claim latency and memory per pending escalation at growing backlogs."""
    from escalation.bench import scale
    from escalation.bench.common import report

    ss = _ints(sizes, "--sizes")
    result = _run(database_url, lambda t: scale.run(t, ss, rounds, claim_batch))
    rows = [{"pending": r["size"], "claim p50 ms": r["claim_ms_p50"],
             "claim mean ms": r["claim_ms_mean"], "bytes/pending": r["bytes_per_pending"],
             "bare bytes": r["bare_bytes"], "mem ratio": r["memory_ratio"]}
            for r in result["sizes"]]
    parts = [f"{r['size']:,}: claim({claim_batch}) p50 {r['claim_ms_p50']:.2f} ms, "
             f"{r['bytes_per_pending']:.0f} B/pending ({r['memory_ratio']}x bare)"
             for r in result["sizes"]]
    report(result, rows, "; ".join(parts) + f"; claim ratio {result['claim_ratio']}x",
           json_only=json_only)


def _bullmq_jobs(text: str) -> tuple[str, ...]:
    """``"audit,empty"`` -> ``("audit", "empty")``: BullMQ processors, the headline first.

    Raises:
        InvalidInput: an empty list, an unknown job or one given twice (field ``--bullmq-job``).
    """
    from escalation.bench.compare import BULLMQ_JOBS

    jobs = tuple(part.strip() for part in text.split(",") if part.strip())
    known = ", ".join(repr(j) for j in BULLMQ_JOBS)
    if not jobs:
        raise InvalidInput(f"--bullmq-job: give one or more of {known}", field="--bullmq-job")
    for job in jobs:
        if job not in BULLMQ_JOBS:
            raise InvalidInput(f"--bullmq-job: {known} (comma-separated), not {job!r}",
                               field="--bullmq-job")
    if len(set(jobs)) != len(jobs):
        raise InvalidInput(f"--bullmq-job: each job once, not {text!r}", field="--bullmq-job")
    return jobs


def _compare_summary(result: dict[str, Any]) -> str:
    """The ``SUMMARY compare`` text: every round's sides and ratios, then the ratios'
    minimum and median per BullMQ job and the checks."""
    from escalation.bench.common import fmt

    def side(name: str, s: dict[str, Any], unit: str) -> str:
        return (f"{name} {fmt(s['rate_per_s'])}/s {fmt(s['cpu_us_per_item'])} us/{unit} "
                f"p50/p99 {fmt(s['lag_ms']['p50'])}/{fmt(s['lag_ms']['p99'])} ms")

    rounds = "; ".join(
        f"round {i}: " + ", ".join(
            [side("escalation", r["escalation"], "esc")]
            + [f"{side(f'bullmq {job}', b, 'job')} ratio {fmt(r['ratio'][job])}"
               for job, b in r["bullmq"].items()])
        for i, r in enumerate(result["rounds"], 1))
    ratios = ", ".join(
        f"{job} {fmt(m['ratio_min'])}/{fmt(m['ratio'])}"
        for job, m in result["median"]["bullmq"].items())
    ledger_ok = all(r["escalation"]["ledger_ok"] for r in result["rounds"])
    checks = f"ledger {'PASS' if ledger_ok else 'FAIL'}"
    if result["audit_ok"] is not None:
        checks += f", audit rows {'PASS' if result['audit_ok'] else 'FAIL'}"
    return (f"N={result['n']} W={result['workers']} B={result['batch_size']} bullmq "
            f"{result['bullmq_version']} c={result['concurrency']} pool={result['pg_pool']} "
            f"jobs={','.join(result['bullmq_jobs'])}: {rounds}; ratio min/median {ratios}; "
            f"{checks}")


@bench_app.command("compare")
def compare_cmd(  # noqa: PLR0913 - a typer command: one parameter per option (ADR 0036)
    n: Annotated[int, typer.Option(help="Escalations / jobs due at one instant.")] = 20_000,
    workers: Annotated[int, typer.Option(help="Worker processes on each side.")] = 2,
    rounds: Annotated[int, typer.Option(help="Interleaved rounds (every side each).")] = 3,
    batch_size: Annotated[int, typer.Option(help="Product batch size 1-500.")] = 500,
    concurrency: Annotated[int, typer.Option(help="BullMQ worker concurrency.")] = 100,
    bullmq_version: Annotated[str | None, typer.Option(
        help="npm version spec of bullmq (default: the registry's latest).")] = None,
    lead_s: Annotated[float | None, typer.Option(
        help="Seconds between now and the due instant (default: product 2 + 1.5x the "
             "measured enqueue time, BullMQ 5 s).")] = None,
    bullmq_job: Annotated[str, typer.Option(
        help="BullMQ processors, comma-separated, each run every round, the first the "
             "headline: 'audit' (one INSERT of an audit row per job into a PostgreSQL table "
             "through a pg Pool, the user's alternative), 'empty' (no work), 'escalate' "
             "(adds the job to the next tier's delayed queue and a review-stream entry).")
    ] = "audit,empty",
    bullmq_pg_pool: Annotated[int, typer.Option(
        help="Connections of the audit job's pg Pool per BullMQ worker process (pg's "
             "default 10).")] = 10,
    keep_audit_database: Annotated[str | None, typer.Option(
        help="Create BullMQ's audit database under this name and keep it with every "
             "round's audit table, to inspect its rows (default: a scratch database, dropped "
             "at the end).")] = None,
    database_url: DbOpt = None,
    json_only: JsonOpt = False,
) -> None:
    """The product's drain beside BullMQ's (npm, installed at run time) on a private
    redis-server: throughput, lag, CPU per item and the ratio per BullMQ job, interleaved
    rounds."""
    from escalation.bench import compare
    from escalation.bench.common import report

    if not 1 <= batch_size <= 500:
        raise InvalidInput("--batch-size: 1-500 (settings.batch_size range)")
    if n < 1 or workers < 1 or rounds < 1 or concurrency < 1 or bullmq_pg_pool < 1:
        raise InvalidInput("--n, --workers, --rounds, --concurrency and --bullmq-pg-pool "
                           "must be positive")
    opts = compare.CompareOptions(n=n, workers=workers, rounds=rounds, batch_size=batch_size,
                                  concurrency=concurrency, lead_s=lead_s,
                                  bullmq_jobs=_bullmq_jobs(bullmq_job), pg_pool=bullmq_pg_pool,
                                  keep_audit_database=keep_audit_database)
    with compare.bullmq_dir(bullmq_version) as workdir:
        srv = compare.PrivateRedis.start()
        try:
            from escalation.bench.common import target
            from escalation.logs import configure_logging

            configure_logging("console", "WARNING")
            with target(database_url, redis_url=srv.url) as tgt:
                result = compare.run(tgt, srv, workdir, opts)
        finally:
            srv.stop()
    rows = []
    for i, r in enumerate(result["rounds"], 1):
        for name in r["order"]:
            job = name.split(":", 1)[1] if ":" in name else None
            s = r["bullmq"][job] if job else r["escalation"]
            rows.append({"round": i, "system": f"bullmq {job}" if job else name,
                         "per s": s["rate_per_s"], "lag p50 ms": s["lag_ms"]["p50"],
                         "lag p99 ms": s["lag_ms"]["p99"], "CPU us/item": s["cpu_us_per_item"],
                         "CPU s": " ".join(f"{k}={v}" for k, v in s["cpu_s"].items()),
                         "ratio": r["ratio"][job] if job else None,
                         "load": " ".join(map(str, s["load"]))})
    report(result, rows, _compare_summary(result), json_only=json_only)
    if not result["ok"]:
        raise typer.Exit(1)


@bench_app.command("api-overload")
def api_overload_cmd(  # noqa: PLR0913 - a typer command: one parameter per option (ADR 0036)
    factor: Annotated[float, typer.Option(
        help="Offered rate as a multiple of the measured capacity (1-20).")] = 2.0,
    seconds: Annotated[float, typer.Option(help="Duration of the overload (1-600 s).")] = 20,
    max_in_flight: Annotated[int, typer.Option(
        help="ESCALATION_API_MAX_IN_FLIGHT of the server (1-100000).")] = 32,
    workers: Annotated[int, typer.Option(help="uvicorn worker processes (1-64).")] = 2,
    connections: Annotated[int, typer.Option(
        help="Client keep-alive connections at most (1-10000).")] = 512,
    capacity_n: Annotated[int, typer.Option(
        help="Single creates of the closed-loop capacity measurement (100-1000000).")] = 2000,
    compare: Annotated[bool, typer.Option(
        help="Also run the same offered rate against a server that does not shed.")] = True,
    database_url: DbOpt = None,
    json_only: JsonOpt = False,
) -> None:
    """Load shedding: single creates open-loop at FACTOR x capacity; accepted vs shed, p99."""
    from escalation.bench import api
    from escalation.bench.common import fmt, report

    if not 1 <= factor <= 20 or not 1 <= seconds <= 600:
        raise InvalidInput("--factor must be 1-20 and --seconds 1-600")
    for name, value, top in (("--max-in-flight", max_in_flight, 100_000),
                             ("--workers", workers, 64),
                             ("--connections", connections, 10_000),
                             ("--capacity-n", capacity_n, 1_000_000)):
        if not (100 if name == "--capacity-n" else 1) <= value <= top:
            raise InvalidInput(f"{name} is out of range, got {value}")
    result = _run(database_url, lambda t: api.run_overload(t, api.OverloadRound(
        workers=workers, max_in_flight=max_in_flight, factor=factor, seconds=seconds,
        connections=connections, capacity_n=capacity_n, compare=compare)))
    sh, un = result["shedding"], result["unbounded"]
    rows = [{"figure": f"accepted p99 at {factor:g}x ({fmt(sh['offered_per_s'])}/s)",
             "value": f"{fmt(sh['accepted_ms']['p99'])} ms",
             "target": f"<= {result['target_p99_ms']:g} ms", "met": result["met"]}]
    if un is not None:
        rows.append({"figure": "same rate, no shedding: p99", "value":
                     f"{fmt(un['accepted_ms']['p99'])} ms", "target": "-", "met": None})
    summary = (f"{workers} uvicorn workers, max in flight {max_in_flight}/process: capacity "
               f"{fmt(sh['capacity_per_s'])}/s, offered {fmt(sh['offered_per_s'])}/s for "
               f"{seconds:g} s: accepted {sh['accepted']} ({fmt(sh['accepted_per_s'])}/s, "
               f"p50/p99/max {fmt(sh['accepted_ms']['p50'])}/{fmt(sh['accepted_ms']['p99'])}/"
               f"{fmt(sh['accepted_ms']['max'])} ms), shed {sh['shed_503']} (503, p99 "
               f"{fmt(sh['shed_ms']['p99'])} ms), other {sh['other']}")
    if un is not None:
        summary += (f"; without shedding: accepted {un['accepted']}, p50/p99/max "
                    f"{fmt(un['accepted_ms']['p50'])}/{fmt(un['accepted_ms']['p99'])}/"
                    f"{fmt(un['accepted_ms']['max'])} ms, other {un['other']}")
    summary += f"; ledger {'PASS' if result['ok'] else 'FAIL'}"
    report(result, rows, summary, json_only=json_only)
    if not result["ok"]:
        raise typer.Exit(1)


@bench_app.command("api")
def api_cmd(  # noqa: PLR0913 - a typer command: one parameter per option (ADR 0036)
    batches: Annotated[int, typer.Option(help="Batch requests.")] = 40,
    batch_size: Annotated[int, typer.Option(help="Escalations per batch (1-1000).")] = 1000,
    batch_concurrency: Annotated[int, typer.Option(help="Concurrent batch requests.")] = 4,
    single_n: Annotated[int, typer.Option(help="Single-create requests.")] = 5000,
    concurrency: Annotated[int, typer.Option(help="Concurrent single requests.")] = 32,
    rate: Annotated[float, typer.Option(help="Fixed request rate for latency (req/s).")] = 300,
    seconds: Annotated[float, typer.Option(help="Duration of the fixed-rate run (s).")] = 20,
    workers: Annotated[int, typer.Option(help="uvicorn worker processes.")] = 2,
    client: Annotated[str, typer.Option(
        help="HTTP client: aiohttp (C parser, ~0.2 ms CPU/request) or httpx (pure Python, "
             "several ms CPU/request).")] = "aiohttp",
    database_url: DbOpt = None,
    json_only: JsonOpt = False,
) -> None:
    """HTTP API with a real client: batch create/s, single create req/s, p99 at a fixed rate."""
    from escalation.bench import api
    from escalation.bench.common import fmt, report

    if not 1 <= batch_size <= 1000:
        raise InvalidInput(f"--batch-size must be 1-1000, got {batch_size}")
    for name, value in (("--batches", batches), ("--single-n", single_n),
                        ("--concurrency", concurrency), ("--workers", workers),
                        ("--batch-concurrency", batch_concurrency)):
        if value < 1:
            raise InvalidInput(f"{name} must be at least 1, got {value}")
    if not 0 < rate <= 100_000 or not 0 < seconds <= 3600:
        raise InvalidInput("--rate must be in (0, 100000] and --seconds in (0, 3600]")
    if client not in api.CLIENTS:
        raise InvalidInput(f"--client must be one of {', '.join(api.CLIENTS)}, got {client!r}")
    result = _run(database_url, lambda t: api.run(t, api.ApiRound(
        batches=batches, batch_size=batch_size, batch_concurrency=batch_concurrency,
        single_n=single_n, concurrency=concurrency, rate=rate, seconds=seconds,
        workers=workers, client=client)))
    b, s, f = result["batch"], result["single"], result["fixed_rate"]
    rows = [
        {"figure": "batch create", "value": f"{fmt(b['escalations_per_s'])} esc/s",
         "target": ">= 10,000/s", "met": b["met"]},
        {"figure": "single create", "value": f"{fmt(s['requests_per_s'])} req/s",
         "target": ">= 1,000/s", "met": s["met"]},
        {"figure": f"p99 at {rate:g}/s", "value": f"{fmt(f['latency_ms']['p99'])} ms",
         "target": "<= 25 ms", "met": f["met"]},
    ]
    report(result, rows,
           f"{workers} uvicorn workers, {client} client: batch "
           f"{fmt(b['escalations_per_s'])} esc/s "
           f"({b['size']}/request, {b['concurrency']} concurrent); single "
           f"{fmt(s['requests_per_s'])} req/s ({s['concurrency']} concurrent, p50/p99 "
           f"{fmt(s['request_ms']['p50'])}/{fmt(s['request_ms']['p99'])} ms; server/client "
           f"CPU {fmt(s['server_cpu_ms_per_request'])}/{fmt(s['client_cpu_ms_per_request'])} "
           f"ms/request); at "
           f"{rate:g}/s (achieved {fmt(f['achieved_per_s'])}) p50/p99/max "
           f"{fmt(f['latency_ms']['p50'])}/{fmt(f['latency_ms']['p99'])}/"
           f"{fmt(f['latency_ms']['max'])} ms; "
           f"ledger {'PASS' if result['ledger']['ok'] else 'FAIL'}",
           json_only=json_only)
    if not result["ok"]:
        raise typer.Exit(1)


@bench_app.command("ledger")
def ledger_cmd(  # noqa: PLR0913 - a typer command: one parameter per option (ADR 0036)
    disputes: Annotated[str, typer.Option(
        help="Disputes to build (k/m suffixes: 2m).")] = "2m",
    months: Annotated[int, typer.Option(min=1, max=120, help="Monthly partitions they span "
                                                           "(the newest is this month).")] = 24,
    jobs: Annotated[int, typer.Option(min=1, max=64, help="Processes writing months.")] = 2,
    changes: Annotated[int, typer.Option(
        min=0, help="Chains changed between the first and the incremental checkpoint.")] = 500,
    keep_database: Annotated[str | None, typer.Option(
        help="Build into a new database of this name and keep it (e.g. "
             "escalation_bench_ledger); default: a bench database dropped at the end.")] = None,
    skip_verify: Annotated[bool, typer.Option(
        "--skip-verify", help="Do not time `audit verify --all`.")] = False,
    build_only: Annotated[bool, typer.Option(
        "--build-only", help="Build the ledger, time nothing (with --keep-database).")] = False,
    database_url: DbOpt = None,
    json_only: JsonOpt = False,
) -> None:
    """A ledger of N disputes cloned from chains the product made, then the audit answers
    timed on it: audit show / search / export of a month / verify --all / checkpoint."""
    from escalation.bench import ledger
    from escalation.bench.common import fmt, report

    (n,) = _ints(disputes, "--disputes")
    result = _run(database_url, lambda t: ledger.run(t, ledger.LedgerRound(
        n, months, jobs, changes, skip_verify=skip_verify, time_it=not build_only)),
        keep_database=keep_database)
    b, lg = result["build"], result["ledger"]
    rows = [{"figure": "build", "value": f"{fmt(b['disputes'])} disputes, {fmt(b['rows'])} rows "
             f"in {fmt(b['build_s'])} s ({fmt(b['rows_per_s'])} rows/s)"},
            {"figure": "partitions", "value": f"{lg['partitions']} ({lg['months_with_disputes']} "
             f"months with disputes), {lg['database_bytes'] / 2**30:.1f} GiB"}]
    parts = [f"{fmt(b['disputes'])} disputes, {fmt(b['rows'])} rows, {lg['months_with_disputes']}"
             f" months: built in {fmt(b['build_s'])} s ({fmt(b['rows_per_s'])} rows/s)"]
    for name, fig in result.get("audit", {}).items():
        if isinstance(fig, dict) and "s" in fig:
            extra = f", {fmt(fig['rows_per_s'])} rows/s" if fig.get("rows_per_s") else ""
            rows.append({"figure": name, "value": f"{fig['s']} s (exit {fig['exit']}){extra}"})
            parts.append(f"{name} {fig['s']} s{extra}" + ("" if fig["exit"] == 0
                                                           else f" EXIT {fig['exit']}"))
    if keep_database:
        parts.append(f"kept in {keep_database}")
    report(result, rows, "; ".join(parts), json_only=json_only)
    failed = [k for k, v in result.get("audit", {}).items()
              if isinstance(v, dict) and v.get("exit") not in (None, 0)]
    if failed:
        raise typer.Exit(1)
