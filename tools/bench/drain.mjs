// leaseq-bench section 15: the Node Worker (a no-op async handler) drains the queue `bench` with
// CONCURRENCY slots (PREFETCH jobs held beyond them, claims of BATCH, when given) until nothing is
// due, then prints what it did and its CPU time.
import * as leaseq from "../../clients/node/dist/esm/index.js";

const worker = new leaseq.Worker({
  connectionString: process.env.DATABASE_URL,
  queue: "bench",
  concurrency: Number(process.env.CONCURRENCY ?? 16),
  prefetch: Number(process.env.PREFETCH ?? 0),
  batch: process.env.BATCH ? Number(process.env.BATCH) : undefined,
  handler: async () => null,
});
const summary = await worker.runUntilIdle();
const { user, system } = process.cpuUsage();
console.log(JSON.stringify({ completed: summary.completed, cpu_seconds: (user + system) / 1e6 }));
