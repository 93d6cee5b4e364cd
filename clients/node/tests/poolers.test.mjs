// Behind a pooler in transaction mode (PgBouncer, its server connections handed out in turn),
// named statements break — one prepared on a server connection is missing on the next — and
// `noPreparedStatements` (`withoutPreparedStatements(pool)` on your own pool) makes every call
// work: the Client, an enqueue in your transaction, the Worker.
import assert from "node:assert/strict";
import { test } from "node:test";

import pg from "pg";

import * as leaseq from "../dist/esm/index.js";
import { newQueue, runBounded, statuses, withClient } from "./helpers.mjs";

const pooler = process.env.LEASEQ_TEST_POOLER_URL;
if (!pooler) {
  throw new Error("set LEASEQ_TEST_POOLER_URL to the test database behind PgBouncer in transaction mode (scripts/test does)");
}

/** Makes the pooler open its second server connection: a transaction holds the first while
 * another client runs a statement. */
async function bothServersOpen() {
  const holder = new pg.Client({ connectionString: pooler });
  const other = new pg.Client({ connectionString: pooler });
  await holder.connect();
  await other.connect();
  try {
    await holder.query("BEGIN");
    await holder.query("SELECT 1");
    await other.query("SELECT 1");
    await holder.query("COMMIT");
  } finally {
    await holder.end();
    await other.end();
  }
}

test("named statements break behind a transaction pooler", () =>
  withClient(async (direct) => {
    const queue = await newQueue(direct);
    await bothServersOpen();
    const client = new leaseq.Client({ connectionString: pooler });
    const refused = new Set();
    try {
      for (let i = 0; i < 20; i++) {
        await client.enqueue(queue, {}).catch((e) => refused.add(e.code));
      }
    } finally {
      await client.close();
    }
    // Missing on this server (26000), or left there by another client (42P05): pg's own errors.
    assert.ok(refused.size > 0 && [...refused].every((c) => ["26000", "42P05", "08P01"].includes(c)), [...refused].join());
  }));

test("without named statements every call works behind a transaction pooler", () =>
  withClient(async (direct) => {
    const queue = await newQueue(direct);
    await bothServersOpen();
    const client = new leaseq.Client({ connectionString: pooler, noPreparedStatements: true });
    const pool = leaseq.withoutPreparedStatements(new pg.Pool({ connectionString: pooler, max: 4 }));
    try {
      const ids = [];
      for (let n = 0; n < 10; n++) ids.push(await client.enqueue(queue, { n }));
      assert.equal((await client.job(ids[0])).status, "pending");
      const tx = await pool.connect();
      try {
        await tx.query("BEGIN");
        for (let n = 10; n < 20; n++) ids.push(await leaseq.enqueue(tx, queue, { n }));
        await tx.query("COMMIT");
      } finally {
        tx.release();
      }
      for (const transactional of [false, true]) {
        const summary = await runBounded(
          new leaseq.Worker({
            connectionString: pooler,
            pool: transactional ? pool : undefined,
            noPreparedStatements: !transactional, // the marked pool implies it
            queue,
            concurrency: 2,
            poll: 100,
            transactional,
            handler: (job) => job.id,
          }),
        );
        assert.deepEqual([summary.lost, summary.fenced], [0, 0]);
        if (!transactional) assert.equal(summary.completed, 20);
      }
      assert.deepEqual(await statuses(queue), { succeeded: 20 });
    } finally {
      await client.close();
      await pool.end();
    }
  }));
