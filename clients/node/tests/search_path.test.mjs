// No statement of the Client or the Worker runs an operator someone else planted in schema
// public, on the default search_path (the CVE-2018-1058 class; docs/security.md, "The clients'
// own statements"). The trojans are clients/conformance/public_trojans.sql, shared with the Rust
// and Python clients' tests: each records the role it ran as in public.trojan_calls.
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { test } from "node:test";

import pg from "pg";

import * as leaseq from "../dist/esm/index.js";
import { url, withPg } from "./helpers.mjs";

const TROJANS = new URL("../../conformance/public_trojans.sql", import.meta.url);

/** Runs `f` with the URL of a database of its own, leaseq installed and the trojans planted. */
async function withPlanted(f) {
  const database = `leaseq_trojans_node_${process.pid}`;
  return withPg(async (c) => {
    await c.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`);
    await c.query(`DROP ROLE IF EXISTS ${database}_author`);
    await c.query(`CREATE DATABASE ${database}`);
    try {
      const planted = new URL(url);
      planted.pathname = `/${database}`;
      const setup = new pg.Client({ connectionString: planted.toString() });
      await setup.connect();
      try {
        await setup.query("CREATE EXTENSION leaseq");
        await setup.query(await readFile(TROJANS, "utf8"));
        const { rows } = await setup.query(
          "SELECT count(*)::int AS n FROM pg_catalog.pg_operator WHERE oprnamespace OPERATOR(pg_catalog.=) 'public'::regnamespace",
        );
        assert.ok(rows[0].n > 100, "the trojans are planted");
      } finally {
        await setup.end();
      }
      return await f(planted.toString());
    } finally {
      await c.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`);
      await c.query(`DROP ROLE IF EXISTS ${database}_author`);
    }
  });
}

test("no statement of the client or the worker runs an operator planted in public", () =>
  withPlanted(async (planted) => {
    const queue = "trojans";
    const client = new leaseq.Client(planted);
    try {
      await client.queueCreate(queue, { lease: 30_000, backoffBase: 3_600_000, backoffCap: 3_600_000, retain: 86_400_000 });
      const ids = await client.enqueueBatch(queue, [0, 1, 2, 3].map((n) => ({ n })));
      ids.push(await client.enqueue(queue, { n: 4 }, { dedupeKey: "once", dedupeFor: 3_600_000 }));
      ids.push(await client.enqueue(queue, { n: 5 }, { dependsOn: [ids[0]] }));

      // By hand: every call on a claimed job.
      const claimed = await client.claim(queue, "by-hand", 4, 30_000);
      assert.deepEqual(claimed.map((j) => j.id).sort(), ids.slice(0, 4).sort());
      for (const job of claimed) assert.ok(job.key.startsWith(`${job.id}-`), job.key);
      const [first, second, third, fourth] = [...claimed].sort((a, b) => Number(BigInt(a.id) - BigInt(b.id)));
      assert.ok((await client.renewBatch(claimed, 30_000)).every((expires) => expires !== null));
      assert.equal(await client.progress(first, { half: true }), true);
      assert.equal(await client.step(first, "one", { s: 1 }), true);
      assert.equal(await client.complete(first, { ok: true }), true);
      assert.equal(await client.snooze(second, 0), "pending");
      assert.equal(await client.fail(third, { e: 1 }, { retryInMs: 0 }), "pending");
      assert.deepEqual(await client.handBack([fourth]), [true]);

      // The Worker: claims, a heartbeat (one job outlives two thirds of its 3 s lease), the
      // batched finishes.
      const summary = await new leaseq.Worker({
        connectionString: planted,
        queue,
        concurrency: 4,
        lease: 3_000,
        handler: async (job) => {
          if (job.payload.n === 2) await new Promise((r) => setTimeout(r, 2_500));
          return { n: job.payload.n };
        },
      }).runUntilIdle();
      assert.equal(summary.completed, 5);
      assert.equal((await client.awaitJobs(ids, 5_000)).allFinal, true);
      for (const id of ids) assert.equal((await client.job(id)).status, "succeeded", id);
      assert.equal((await client.stats()).find((s) => s.queue === queue).succeeded, 6);
      assert.equal((await client.jobs(queue)).length, 6);
      assert.equal((await client.attempts(ids[2])).length, 2);
      assert.equal(await client.purge(queue, 86_400_000), 0);
    } finally {
      await client.close();
    }

    const check = new pg.Client({ connectionString: planted });
    await check.connect();
    try {
      const { rows } = await check.query("SELECT DISTINCT operator, called_by FROM public.trojan_calls ORDER BY 1");
      assert.deepEqual(rows, [], "a client statement ran operators planted in public");
    } finally {
      await check.end();
    }
  }));
