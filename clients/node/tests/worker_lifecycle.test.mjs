// How a Worker runs and stops: its heartbeat, claims and finishes on connections of its own,
// never behind the handlers' (a pool too small for transactional handlers refused at start),
// `stop()` at any time and a Worker run again, `grace` a bound on the process, a second signal
// that exits at once, and the driver's own errors left as they are.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { fileURLToPath } from "node:url";
import { test } from "node:test";

import pg from "pg";

import * as leaseq from "../dist/esm/index.js";
import { newQueue, runBounded, statuses, url, withClient, withPg } from "./helpers.mjs";

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

test("handlers holding every connection of the user's pool never starve the heartbeat", () =>
  withClient(async (client) => {
    // The README's shape: pg's default pool (max 10), more handlers than connections, each
    // holding one for longer than the lease, which only renewals keep.
    for (const transactional of [false, true]) {
      const queue = await newQueue(client, { lease: 3000 });
      await client.enqueueBatch(queue, Array.from({ length: 12 }, () => ({})));
      const pool = new pg.Pool({ connectionString: url, max: transactional ? 12 : 10 });
      try {
        const summary = await runBounded(
          new leaseq.Worker({
            pool,
            queue,
            concurrency: 12,
            transactional,
            handler: async (job, { tx }) => {
              await (tx ?? pool).query("SELECT pg_sleep(4.5)");
            },
          }),
        );
        assert.deepEqual([summary.completed, summary.lost], [12, 0], `transactional: ${transactional}`);
        assert.deepEqual(await statuses(queue), { succeeded: 12 });
      } finally {
        await pool.end();
      }
    }
  }));

test("a pool too small for transactional handlers is refused at start, naming both numbers", () =>
  withClient(async (client) => {
    const queue = await newQueue(client);
    await client.enqueue(queue, {});
    const pool = new pg.Pool({ connectionString: url }); // max 10
    try {
      assert.throws(
        () => new leaseq.Worker({ pool, queue, concurrency: 16, transactional: true, handler: () => null }),
        (e) =>
          e instanceof RangeError &&
          /pool/.test(e.message) &&
          /max 10/.test(e.message) &&
          /concurrency 16/.test(e.message),
      );
      assert.deepEqual(await statuses(queue), { pending: 1 });
    } finally {
      await pool.end();
    }
  }));

test("stop() before run() makes run() return at once, and the worker runs again after", () =>
  withClient(async (client) => {
    const queue = await newQueue(client);
    await client.enqueueBatch(queue, Array.from({ length: 5 }, () => ({})));
    const worker = new leaseq.Worker({ connectionString: url, queue, handler: () => null });
    worker.stop();
    const started = performance.now();
    const summary = await worker.runUntilIdle();
    assert.ok(performance.now() - started < 5000);
    assert.equal(summary.completed, 0);
    assert.deepEqual(await statuses(queue), { pending: 5 });
    assert.equal((await runBounded(worker)).completed, 5, "the stop was for that run");
  }));

test("the driver's own errors reach the caller unchanged", () =>
  withClient(async (client) => {
    const queue = await newQueue(client);
    // Only leaseq's SQLSTATEs are translated: a statement timeout (57014) inside the caller's
    // transaction stays pg's, for the caller's retry loop.
    await withPg(async (holder) => {
      await holder.query("BEGIN");
      await holder.query("LOCK TABLE leaseq.queues IN ACCESS EXCLUSIVE MODE");
      await withPg(async (mine) => {
        await mine.query("SET statement_timeout = '100ms'");
        await assert.rejects(leaseq.enqueue(mine, queue, {}), (e) => {
          assert.equal(e.code, "57014");
          assert.ok(!(e instanceof leaseq.LeaseqError), "not re-badged");
          assert.ok(e instanceof pg.DatabaseError, e.constructor.name);
          return true;
        });
      });
      await holder.query("ROLLBACK");
    });
    assert.deepEqual(await statuses(queue), {});
  }));

/** A worker process: SIGTERM or SIGINT it. Its handlers never end (not for 60 s) and ignore
 * their signal. */
const PROGRAM = `
  import * as leaseq from ${JSON.stringify(fileURLToPath(new URL("../dist/esm/index.js", import.meta.url)))};
  const [url, queue, grace] = process.argv.slice(1);
  const worker = new leaseq.Worker({
    connectionString: url, queue, concurrency: 2, grace: Number(grace),
    handler: () => {
      process.stdout.write("started\\n");
      return new Promise((resolve) => setTimeout(resolve, 60_000));
    },
  });
  const summary = await worker.run();
  process.stdout.write("summary " + summary.abandoned + " " + summary.completed + "\\n");
`;

async function startWorker(queue, grace) {
  const child = spawn(process.execPath, ["--input-type=module", "-e", PROGRAM, url, queue, String(grace)], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  let out = "";
  child.stdout.setEncoding("utf8");
  child.stdout.on("data", (chunk) => (out += chunk));
  for (let i = 0; i < 200 && (out.match(/started/g) ?? []).length < 2; i++) await sleep(50);
  assert.equal((out.match(/started/g) ?? []).length, 2, out);
  return { child, output: () => out };
}

async function exited(child, ms) {
  const timer = setTimeout(() => child.kill("SIGKILL"), ms);
  const [code, signal] = await once(child, "exit");
  clearTimeout(timer);
  return { code, signal };
}

async function cancelRunning(queue) {
  await withPg((c) =>
    c.query("SELECT leaseq.queue_cancel(id) FROM leaseq.jobs WHERE queue = $1 AND status = 'running'", [queue]),
  );
}

test("grace bounds the process and abandoned jobs are counted", () =>
  withClient(async (client) => {
    const queue = await newQueue(client);
    await client.enqueueBatch(queue, [{}, {}]);
    const { child, output } = await startWorker(queue, 1000);
    const sent = performance.now();
    child.kill("SIGTERM");
    await exited(child, 30_000);
    const took = performance.now() - sent;
    assert.ok(took < 6000, `exited ${Math.round(took)} ms after SIGTERM with grace 1 s`);
    assert.match(output(), /summary 2 0/);
    // Left to their leases: still running on the server, never finished by the worker.
    assert.deepEqual(await statuses(queue), { running: 2 });
    await cancelRunning(queue);
  }));

test("a second signal exits at once", () =>
  withClient(async (client) => {
    for (const [first, second] of [
      ["SIGTERM", "SIGINT"],
      ["SIGINT", "SIGINT"],
    ]) {
      const queue = await newQueue(client);
      await client.enqueueBatch(queue, [{}, {}]);
      const { child } = await startWorker(queue, 60_000);
      child.kill(first);
      await sleep(500);
      assert.equal(child.exitCode, null, "still in its grace");
      const sent = performance.now();
      child.kill(second);
      const { code, signal } = await exited(child, 30_000);
      assert.ok(performance.now() - sent < 3000, "the second signal did not exit at once");
      assert.ok(code !== 0 || signal !== null, `${code} ${signal}`);
      await cancelRunning(queue);
    }
  }));
