// Limits from the handler's side: a handler past the Worker's `timeout` is told (its signal
// aborts with a TimedOut) and abandoned, its slot given to the next job, and its job fails with
// a timeout error; `new Retry({ after })` picks the next attempt's delay instead of the backoff.
import assert from "node:assert/strict";
import { test } from "node:test";

import * as leaseq from "../dist/esm/index.js";
import { newQueue, runBounded, statuses, url, withClient, withPg } from "./helpers.mjs";

test("a handler past its timeout is told and its job fails with a timeout error", () =>
  withClient(async (client) => {
    const queue = await newQueue(client);
    const told = [];
    const handlers = {
      // Hears its signal.
      listening: async (job, { signal }) => {
        if (job.payload.quick) return;
        await new Promise((resolve) => signal.addEventListener("abort", () => resolve(told.push(signal.reason.name))));
        await new Promise((resolve) => setTimeout(resolve, 3000)); // and does not stop at once
      },
      // Does not: abandoned all the same.
      deaf: async (job) => {
        if (!job.payload.quick) await new Promise((resolve) => setTimeout(resolve, 3000));
      },
      transactional: async (job, { tx }) => {
        if (!job.payload.quick) await tx.query("SELECT pg_sleep(3)");
      },
    };
    for (const [name, handler] of Object.entries(handlers)) {
      const slow = await client.enqueue(queue, {});
      const quick = await client.enqueue(queue, { quick: true });
      const started = performance.now();
      // One slot: the quick job runs only if the timed-out one gave its slot up.
      const summary = await runBounded(
        new leaseq.Worker({
          connectionString: url,
          queue,
          concurrency: 1,
          timeout: 1000,
          logger: null,
          transactional: name === "transactional",
          handler,
        }),
      );
      assert.ok(performance.now() - started < 2900, `${name}: ${performance.now() - started} ms`);
      assert.deepEqual(
        [summary.timedOut, summary.failed, summary.completed, summary.lost],
        [1, 1, 1, 0],
        name,
      );
      const failed = await client.job(slow);
      assert.deepEqual([failed.status, failed.attempts], ["pending", 1], name);
      assert.deepEqual(JSON.parse(failed.lastError), {
        error: "timeout",
        message: "the handler ran past its timeout of 1000 ms",
      });
      assert.equal((await client.job(quick)).status, "succeeded", name);
    }
    assert.deepEqual(told, ["TimedOut"]);
    assert.deepEqual(await statuses(queue), { pending: 3, succeeded: 3 });
  }));

test("Retry picks the next attempt's delay", () =>
  withClient(async (client) => {
    const queue = await newQueue(client);
    const later = await client.enqueue(queue, { after: 120_000 });
    const recorded = await client.enqueue(queue, { after: 600_000, why: true });
    const summary = await runBounded(
      new leaseq.Worker({
        connectionString: url,
        queue,
        handler: (job) => {
          throw new leaseq.Retry({
            after: job.payload.after,
            ...(job.payload.why ? { error: { error: "rate limited" } } : {}),
          });
        },
      }),
    );
    assert.equal(summary.failed, 2);
    for (const [id, after] of [
      [later, 120],
      [recorded, 600],
    ]) {
      const row = await withPg(async (c) =>
        (await c.query("SELECT extract(epoch FROM run_at - clock_timestamp())::float8 AS s, attempts FROM leaseq.jobs WHERE id = $1", [id])).rows[0],
      );
      assert.ok(row.s > after - 30 && row.s <= after && row.attempts === 1, JSON.stringify(row));
    }
    assert.match((await client.job(later)).lastError, /"error": "Retry"/);
    assert.equal((await client.job(recorded)).lastError, '{"error": "rate limited"}');
  }));

test("a timeout of zero is refused", () => {
  assert.throws(() => new leaseq.Worker({ connectionString: url, queue: "q", handler: () => null, timeout: 0 }), /timeout must be more than 0 ms/);
});
