// The test database (LEASEQ_TEST_DATABASE_URL, with leaseq installed: scripts/test makes it) and
// a fresh queue per test.
import assert from "node:assert/strict";

import pg from "pg";

import { Client } from "../dist/esm/index.js";

export const url = process.env.LEASEQ_TEST_DATABASE_URL;
if (!url) {
  throw new Error("set LEASEQ_TEST_DATABASE_URL to a database with leaseq installed (scripts/test does)");
}

let n = 0;

/** A new queue, retries an hour away (a failed job never comes due again within a test), with
 * any other `settings` given. */
export async function newQueue(client, settings = {}) {
  const name = `node_${process.pid}_${n++}`;
  await client.queueCreate(name, { backoffBase: 3_600_000, backoffCap: 3_600_000, ...settings });
  return name;
}

export async function withClient(f) {
  const client = new Client(url);
  try {
    return await f(client);
  } finally {
    await client.close();
  }
}

/** A plain pg connection for checks and setup. */
export async function withPg(f) {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return await f(c);
  } finally {
    await c.end();
  }
}

export async function statuses(queue) {
  return withPg(async (c) => {
    const { rows } = await c.query(
      "SELECT status::text AS s, count(*)::int AS n FROM leaseq.jobs WHERE queue = $1 GROUP BY 1 ORDER BY 1",
      [queue],
    );
    return Object.fromEntries(rows.map((r) => [r.s, r.n]));
  });
}

export async function paused(queue) {
  return withPg(async (c) => {
    const { rows } = await c.query("SELECT paused FROM leaseq.queue_settings() WHERE queue = $1", [queue]);
    assert.equal(rows.length, 1, queue);
    return rows[0].paused;
  });
}

/** `worker.runUntilIdle()`, bounded: a Worker that stops finishing would hang the suite. */
export async function runBounded(worker, ms = 60_000) {
  let timer;
  const hung = new Promise((_, reject) => {
    timer = setTimeout(() => {
      worker.stop();
      reject(new Error(`runUntilIdle() did not resolve within ${ms} ms`));
    }, ms);
  });
  try {
    return await Promise.race([worker.runUntilIdle(), hung]);
  } finally {
    clearTimeout(timer);
  }
}
