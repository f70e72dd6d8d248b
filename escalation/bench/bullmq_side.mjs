// The BullMQ side of `escalation bench compare` (docs/performance.md, "Method").
// Run with node from a scratch directory where `npm install bullmq ioredis pg` was done at
// run time; no BullMQ code is kept in this repository.
//
// Usage:
//   node bullmq_side.mjs produce <redis-url> <prefix> <queue> <n> <due-ms>
//     adds n jobs (addBulk, chunks of 1,000) all due at <due-ms> (epoch ms, host clock:
//     delay = due - Date.now() per chunk), removeOnComplete/removeOnFail true; prints
//     {"produced": n, "done_ms": ...} and exits.
//   node bullmq_side.mjs worker <redis-url> <prefix> <queue> <concurrency> <out.json> [job]
//       [table] [pool-size]
//     one Worker with that concurrency; prints {"ready": true} once connected; records
//     Date.now() - due at every 'completed' event (after BullMQ moved the job to
//     finished); on SIGTERM closes the worker and writes {"lags": [...], "last_ms": ...,
//     "count": ..., "failed": ..., "first_error": ...} to <out.json>.
//     job = "empty" (default): an empty processor.
//     job = "escalate": the processor does what a product escalation's apply does, the way
//     a BullMQ user would build it: it adds the job to the next tier's queue ("<queue>-senior",
//     delayed by a 24 h SLA window, jobId = "d<i>-2" as the idempotency key) and appends a
//     review-stream entry (XADD "<prefix>:<queue>:review", dispute + idempotency key).
//     job = "audit": the processor records the decision the way a BullMQ user would: one
//     INSERT of one audit row per job into <table> of the PostgreSQL database named by the
//     environment variable BENCH_PG_URL, through a `pg` Pool of [pool-size] connections
//     (default 10, pg's default), autocommit (the row is durable when the job completes).
//     The pool's connections are opened before "ready" and kept (no idle timeout), so the
//     bench counts their backends' CPU over the whole drain.
import { Queue, Worker } from 'bullmq';
import { Redis } from 'ioredis';
import { writeFileSync } from 'node:fs';

const [mode, redisUrl, prefix, queueName, ...rest] = process.argv.slice(2);
const url = new URL(redisUrl);
const connection = {
  host: url.hostname,
  port: Number(url.port || 6379),
  db: Number(url.pathname.slice(1) || 0),
  maxRetriesPerRequest: null,
};

if (mode === 'produce') {
  const n = Number(rest[0]);
  const dueMs = Number(rest[1]);
  const queue = new Queue(queueName, { connection, prefix });
  for (let i = 0; i < n; i += 1000) {
    const now = Date.now();
    const jobs = [];
    for (let j = i; j < Math.min(n, i + 1000); j += 1) {
      jobs.push({
        name: 'escalate',
        data: { due: dueMs, i: j },
        opts: { delay: Math.max(0, dueMs - now), removeOnComplete: true, removeOnFail: true },
      });
    }
    await queue.addBulk(jobs);
  }
  await queue.close();
  console.log(JSON.stringify({ produced: n, done_ms: Date.now() }));
  process.exit(0);
} else if (mode === 'worker') {
  const concurrency = Number(rest[0]);
  const out = rest[1];
  const job = rest[2] || 'empty';
  const lags = [];
  let last = 0;
  let processor = async () => null;
  let pool = null;
  if (job === 'escalate') {
    const next = new Queue(`${queueName}-senior`, { connection, prefix });
    const client = new Redis(connection);
    const stream = `${prefix}:${queueName}:review`;
    processor = async (j) => {
      const key = `d${j.data.i}-2`;
      await next.add('escalate', { ...j.data, tier: 'senior' },
        { delay: 86400000, jobId: key, removeOnComplete: true, removeOnFail: true });
      await client.xadd(stream, '*', 'dispute', String(j.data.i), 'idempotency_key', key);
    };
  } else if (job === 'audit') {
    const table = rest[3];
    const poolSize = Number(rest[4] || 10);
    if (!/^[a-z_][a-z0-9_]*$/.test(table || '') || !(poolSize >= 1)) {
      console.error('audit: a plain table name and a positive pool size are needed');
      process.exit(2);
    }
    const { default: pg } = await import('pg');
    pool = new pg.Pool({
      connectionString: process.env.BENCH_PG_URL, max: poolSize, idleTimeoutMillis: 0,
    });
    const opened = await Promise.all(Array.from({ length: poolSize }, () => pool.connect()));
    opened.forEach((c) => c.release());
    const sql = `INSERT INTO ${table} (job_id, dispute_id, event, from_tier, to_tier, due_at, `
      + 'worker, details) VALUES ($1, $2, $3, $4, $5, to_timestamp($6 / 1000.0), $7, $8)';
    const workerName = `bullmq-${process.pid}`;
    processor = async (j) => {
      await pool.query(sql, [j.id, `d${j.data.i}`, 'PROMOTED', 'agent', 'senior', j.data.due,
        workerName, { queue: queueName, attempt: j.attemptsMade + 1 }]);
    };
  } else if (job !== 'empty') {
    console.error(`unknown job ${job}`);
    process.exit(2);
  }
  const worker = new Worker(queueName, processor, { connection, prefix, concurrency });
  let failed = 0;
  let firstError = null;
  worker.on('failed', (j, err) => {
    failed += 1;
    if (firstError === null) firstError = String(err && err.message);
  });
  worker.on('completed', (job) => {
    const t = Date.now();
    lags.push(t - job.data.due);
    if (t > last) last = t;
  });
  await worker.waitUntilReady();
  console.log(JSON.stringify({ ready: true }));
  process.on('SIGTERM', async () => {
    await worker.close();
    if (pool !== null) await pool.end();
    writeFileSync(out, JSON.stringify({
      lags, last_ms: last, count: lags.length, failed, first_error: firstError,
    }));
    process.exit(0);
  });
} else {
  console.error(`unknown mode ${mode}`);
  process.exit(2);
}
