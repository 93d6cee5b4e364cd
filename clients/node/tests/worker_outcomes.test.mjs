// A poison outcome — a result or error JSON.stringify cannot encode, one larger than the server
// takes, one the server refuses — fails only its own job: dead, the reason recorded as its
// error, while the rest of the round completes and the Worker goes on.
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { test } from "node:test";

import * as leaseq from "../dist/esm/index.js";
import { newQueue, runBounded, statuses, url, withClient, withPg } from "./helpers.mjs";

const circular = () => {
  const loop = {};
  loop.self = loop;
  return loop;
};

/** What each poison job's handler returns, by the `poison` key of its payload. */
const POISONS = {
  bigint: () => ({ big: 10n }),
  circular,
  // Encodes, but jsonb refuses it (SQLSTATE 22P05): a refusal the server makes.
  nul: () => "a\u0000b",
  // Larger than leaseq.max_payload_bytes (1 MiB by default): 54000.
  oversized: () => "x".repeat(2 * 1024 * 1024),
};

test("a poison result fails only its own job and the worker goes on", () =>
  withClient(async (client) => {
    const queue = await newQueue(client);
    const good = await client.enqueueBatch(queue, Array.from({ length: 20 }, (_, n) => ({ n })));
    const poisoned = {};
    for (const name of Object.keys(POISONS)) poisoned[name] = await client.enqueue(queue, { poison: name });
    const summary = await runBounded(
      new leaseq.Worker({
        connectionString: url,
        queue,
        concurrency: 8,
        handler: (job) => (job.payload.poison ? POISONS[job.payload.poison]() : { n: job.payload.n }),
      }),
    );
    assert.deepEqual(await statuses(queue), { dead: 4, succeeded: 20 });
    assert.deepEqual([summary.completed, summary.dead, summary.lost, summary.fenced], [20, 4, 0, 0]);
    for (const id of good) assert.notEqual((await client.job(id)).result, null);
    for (const [name, id] of Object.entries(poisoned)) {
      const dead = await client.job(id);
      assert.equal(dead.status, "dead", name);
      const error = JSON.parse(dead.lastError);
      assert.deepEqual([error.error, error.outcome], ["outcome_refused", "complete"], name);
      assert.ok(error.message, name);
    }
    assert.match(JSON.parse((await client.job(poisoned.bigint)).lastError).message, /BigInt/);
    assert.equal(JSON.parse((await client.job(poisoned.oversized)).lastError).sqlstate, "54000");
  }));

test("a poison error document fails only its own job", () =>
  withClient(async (client) => {
    const queue = await newQueue(client);
    await client.enqueueBatch(queue, Array.from({ length: 10 }, (_, n) => ({ n })));
    const badDead = await client.enqueue(queue, { do: "dead" });
    const hugeFailure = await client.enqueue(queue, { do: "throw" });
    const summary = await runBounded(
      new leaseq.Worker({
        connectionString: url,
        queue,
        concurrency: 4,
        handler: (job) => {
          if (job.payload.do === "dead") throw new leaseq.Dead({ big: 1n });
          if (job.payload.do === "throw") throw new Error("y".repeat(2 * 1024 * 1024));
          return null;
        },
      }),
    );
    assert.deepEqual([summary.completed, summary.lost, summary.fenced], [10, 0, 0]);
    const dead = await client.job(badDead);
    assert.equal(dead.status, "dead");
    assert.equal(JSON.parse(dead.lastError).outcome, "dead");
    // A failure whose document the server refuses is still a failure: retried by the queue's
    // policy, the reason in place of the document.
    const failed = await client.job(hugeFailure);
    assert.deepEqual([failed.status, failed.attempts], ["pending", 1]);
    const error = JSON.parse(failed.lastError);
    assert.deepEqual([error.error, error.sqlstate], ["outcome_refused", "54000"]);
    assert.deepEqual(await statuses(queue), { dead: 1, pending: 1, succeeded: 10 });
  }));

test("a transactional poison result rolls back and goes dead with the reason", () =>
  withClient(async (client) => {
    const queue = await newQueue(client);
    const effects = `${queue}_effects`;
    await withPg((c) => c.query(`CREATE TABLE ${effects} (job_id bigint PRIMARY KEY)`));
    const fine = await client.enqueueBatch(queue, Array.from({ length: 4 }, (_, n) => ({ n })));
    const unencodable = await client.enqueue(queue, { poison: "bigint" });
    const oversized = await client.enqueue(queue, { poison: "oversized" });
    const summary = await runBounded(
      new leaseq.Worker({
        connectionString: url,
        queue,
        concurrency: 3,
        transactional: true,
        handler: async (job, { tx }) => {
          await tx.query(`INSERT INTO ${effects} VALUES ($1)`, [job.id]);
          return job.payload.poison ? POISONS[job.payload.poison]() : null;
        },
      }),
    );
    assert.deepEqual([summary.completed, summary.dead, summary.lost], [4, 2, 0]);
    const written = await withPg(async (c) => (await c.query(`SELECT job_id::text AS id FROM ${effects} ORDER BY 1`)).rows);
    assert.deepEqual(
      written.map((r) => r.id),
      [...fine].sort(),
      "the poison jobs' writes rolled back",
    );
    for (const [id, sqlstate] of [
      [unencodable, undefined],
      [oversized, "54000"],
    ]) {
      const dead = await client.job(id);
      assert.equal(dead.status, "dead");
      const error = JSON.parse(dead.lastError);
      assert.deepEqual([error.error, error.outcome, error.sqlstate], ["outcome_refused", "complete", sqlstate]);
    }
    await withPg((c) => c.query(`DROP TABLE ${effects}`));
  }));

test("Dead and Snooze from the CommonJS build are recognised by the ESM Worker", () =>
  withClient(async (client) => {
    const cjs = createRequire(import.meta.url)("../dist/cjs/index.js");
    assert.notEqual(cjs.Dead, leaseq.Dead);
    const queue = await newQueue(client);
    const dying = await client.enqueue(queue, { do: "dead" });
    const snoozing = await client.enqueue(queue, { do: "snooze" });
    const summary = await runBounded(
      new leaseq.Worker({
        connectionString: url,
        queue,
        handler: (job) => {
          if (job.payload.do === "dead") throw new cjs.Dead({ error: "from the other build" });
          throw new cjs.Snooze(3_600_000);
        },
      }),
    );
    assert.deepEqual([summary.dead, summary.snoozed, summary.failed], [1, 1, 0]);
    assert.equal((await client.job(dying)).lastError, '{"error": "from the other build"}');
    assert.equal((await client.job(snoozing)).snoozes, 1);
  }));
