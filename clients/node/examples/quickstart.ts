// leaseq in five minutes: an order and the job that emails its confirmation, committed in one
// transaction, then a Worker that runs the job. DATABASE_URL: a database with leaseq installed.
import { randomUUID } from "node:crypto";

import pg from "pg";
import { Client, Worker, enqueue } from "leaseq";

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
const client = new Client({ pool });
await client.queueCreate("emails", { maxAttempts: 5 }); // creates the queue, or updates its settings

// Your row and its job in one transaction: both are committed, or neither is.
const tx = await pool.connect();
let jobId: string;
try {
  await tx.query("BEGIN");
  await tx.query("CREATE TABLE IF NOT EXISTS orders (id uuid PRIMARY KEY, email text NOT NULL)");
  const order = randomUUID();
  await tx.query("INSERT INTO orders (id, email) VALUES ($1, $2)", [order, "ada@example.com"]);
  jobId = await enqueue(tx, "emails", { order, email: "ada@example.com" });
  await tx.query("COMMIT");
} catch (e) {
  await tx.query("ROLLBACK");
  throw e;
} finally {
  tx.release();
}

const worker = new Worker({
  pool,
  queue: "emails",
  logger: console, // its own lines: started, each job's start and success, stopped
  // What the handler returns is the job's result; a throw fails the attempt.
  handler: async (job) => {
    const { order, email } = job.payload as { order: string; email: string };
    console.log(`emailing ${email} about order ${order}`);
    return { sent_to: email };
  },
});
// Runs due jobs until none is left; a service calls run(), which works until SIGTERM.
await worker.runUntilIdle();

const job = await client.job(jobId);
console.log(`job ${jobId}: ${job.status}, result ${job.result}`);
await pool.end();
