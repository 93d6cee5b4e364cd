// The conformance worker in Node (clients/conformance/README.md says what it does).
import { createRequire } from "node:module";

import * as leaseq from "../node/dist/esm/index.js";

// pg is the Node client's peer dependency: resolved where that client's dependencies are.
const pg = createRequire(new URL("../node/package.json", import.meta.url))("pg");

const url = process.env.DATABASE_URL;
const logs = new pg.Pool({ connectionString: url, max: 4 });

async function log(job, event) {
  await logs.query("INSERT INTO conformance_log (job_id, attempt, pid, event) VALUES ($1, $2, $3, $4)", [
    job.id,
    job.attempt,
    process.pid,
    event,
  ]);
}

async function behave(job) {
  await new Promise((r) => setTimeout(r, job.payload.ms ?? 0));
  await log(job, "end");
  switch (job.payload.do ?? "ok") {
    case "throw":
      throw new Error("asked to fail");
    case "dead":
      throw new leaseq.Dead({ error: "asked to die" });
    case "snooze":
      throw new leaseq.Snooze(3_600_000);
    case "poison":
      return { big: "x".repeat(1_100_000) }; // over leaseq.max_payload_bytes: refused
  }
  return { pid: process.pid };
}

if (process.env.MODE === "enqueue") {
  // A producer: one enqueue rolled back with its transaction, one committed.
  const tx = await logs.connect();
  await tx.query("BEGIN");
  await leaseq.enqueue(tx, process.env.QUEUE, { rolled_back: true });
  await tx.query("ROLLBACK");
  await tx.query("BEGIN");
  await leaseq.enqueue(tx, process.env.QUEUE, { committed: true });
  await tx.query("COMMIT");
  tx.release();
  await logs.end();
  process.exit(0);
}

const transactional = process.env.TRANSACTIONAL === "1";
const worker = new leaseq.Worker({
  connectionString: url,
  queue: process.env.QUEUE,
  concurrency: Number(process.env.CONCURRENCY ?? 4),
  prefetch: Number(process.env.PREFETCH ?? 0),
  lease: process.env.LEASE_MS ? Number(process.env.LEASE_MS) : undefined,
  poll: Number(process.env.POLL_MS ?? 1000),
  grace: Number(process.env.GRACE_MS ?? 5000),
  transactional,
  handler: async (job, { tx }) => {
    await log(job, "start");
    if (transactional) {
      await tx.query("INSERT INTO conformance_effects (job_id, attempt, pid) VALUES ($1, $2, $3)", [
        job.id,
        job.attempt,
        process.pid,
      ]);
    }
    return behave(job);
  },
});
try {
  await worker.run();
  await logs.end();
} catch (e) {
  console.error(`refused: ${e.message}`);
  process.exit(1);
}
