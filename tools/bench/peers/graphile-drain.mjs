// leaseq-bench section 15: graphile-worker, with the preset its performance page documents for
// peak throughput (a local queue of 500 jobs, completions batched), drains the same no-op jobs
// with CONCURRENCY slots in one process. It prints what it did: seconds from its first job to an
// empty queue, and its CPU time.
import { run, makeWorkerUtils, Logger } from "graphile-worker";
const connectionString = process.env.DATABASE_URL;
const jobs = Number(process.env.JOBS ?? 20000);
const quiet = new Logger(() => () => {});
const utils = await makeWorkerUtils({ connectionString, logger: quiet });
await utils.migrate();
await utils.withPgClient((c) => c.query("DELETE FROM graphile_worker._private_jobs"));
await utils.withPgClient((c) =>
  c.query(
    `SELECT graphile_worker.add_jobs(ARRAY(SELECT json_populate_record(NULL::graphile_worker.job_spec,
             json_build_object('identifier', 'noop', 'payload', '{}'::json)) FROM generate_series(1, $1)))`,
    [jobs],
  ),
);
let handled = 0, first;
let allHandled;
const finished = new Promise((r) => (allHandled = r));
const cpu0 = process.cpuUsage();
const runner = await run({
  logger: quiet,
  noHandleSignals: true,
  preset: { worker: { connectionString, concurrentJobs: Number(process.env.CONCURRENCY ?? 16), maxPoolSize: 17,
    localQueue: { size: 500 }, completeJobBatchDelay: 0, failJobBatchDelay: 0, pollInterval: 2000 } },
  taskList: { noop: async () => { first ??= performance.now(); if (++handled === jobs) allHandled(); } },
});
await finished;
for (;;) {
  const { rows } = await utils.withPgClient((c) => c.query("SELECT count(*)::int AS n FROM graphile_worker._private_jobs"));
  if (rows[0].n === 0) break;
  await new Promise((r) => setTimeout(r, 2));
}
const seconds = (performance.now() - first) / 1000;
const cpu = process.cpuUsage(cpu0);
await runner.stop();
await utils.release();
console.log(JSON.stringify({ completed: handled, seconds, cpu_seconds: (cpu.user + cpu.system) / 1e6 }));
