// A Node worker for leaseq-faults (tools/src/bin/leaseq-faults/load.rs starts it), on the client
// built in clients/node/dist. Its handler writes the effect row in the transaction that completes
// the job (transactional), so an effect commits exactly when the completion does. Like the Rust
// workers' handlers it logs (to OPS_LOG, one JSON object a line, as ops.rs reads them) when it
// returned and when its signal aborted while it ran — and, like them, it ignores the signal on
// purpose: the Worker must not complete the job after it.
import { openSync, writeSync } from "node:fs";
import { setTimeout as delay } from "node:timers/promises";

import { Worker } from "../../clients/node/dist/esm/index.js";

const name = process.argv[2];
const ops = openSync(process.env.OPS_LOG, "a");

function record(kind, job, at) {
  const line = {
    kind, op: job.payload?.op ?? null, job_id: Number(job.id), job_key: job.key,
    lease_token: job.leaseToken, attempt_no: job.attempt, worker: name, at,
  };
  // One write of a whole line, synchronous: whole or absent if we are killed.
  writeSync(ops, JSON.stringify(line) + "\n");
}

async function handle(job, { signal, tx }) {
  const stopped = () => record("stop", job, Date.now() / 1000);
  signal.addEventListener("abort", stopped, { once: true });
  try {
    await delay(job.payload?.ms ?? 20);
    await tx.query("INSERT INTO faults.effects (job_id, attempt_no, worker) VALUES ($1, $2, $3)", [
      job.id, job.attempt, name,
    ]);
    record("returned", job, Date.now() / 1000);
  } finally {
    // A signal that aborts later (the shutdown's) is not the handler's business.
    signal.removeEventListener("abort", stopped);
  }
}

await new Worker({
  connectionString: process.env.DATABASE_URL,
  queue: process.env.QUEUE,
  handler: handle,
  transactional: true,
  concurrency: 4,
  poll: 60_000,
  grace: 5_000,
  workerId: name,
}).run();
