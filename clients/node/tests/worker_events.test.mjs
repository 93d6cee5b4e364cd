// Every Worker event is emitted and logged with the job's fields: start and success (debug), a
// failure with the handler's error and whether the job will be retried (warn when retried, error
// when dead), a lost lease and a fenced outcome (warn); database trouble as `error`, only when
// something listens; warnings go to console.error unless a logger is given; `metrics()`.
import assert from "node:assert/strict";
import { test } from "node:test";

import * as leaseq from "../dist/esm/index.js";
import { newQueue, runBounded, url, withClient, withPg } from "./helpers.mjs";

function capture() {
  const lines = [];
  const at = (level) => (message, fields) => lines.push({ level, message, fields });
  return { lines, logger: { debug: at("debug"), info: at("info"), warn: at("warn"), error: at("error") } };
}

test("each job event is emitted and logged with the job's fields", () =>
  withClient(async (client) => {
    const queue = await newQueue(client, { maxAttempts: 2 });
    const fine = await client.enqueue(queue, { do: "ok" });
    const retried = await client.enqueue(queue, { do: "throw" });
    const dying = await client.enqueue(queue, { do: "dead" });
    const { lines, logger } = capture();
    const worker = new leaseq.Worker({
      connectionString: url,
      queue,
      logger,
      handler: (job) => {
        if (job.payload.do === "throw") throw new RangeError("the upstream said no");
        if (job.payload.do === "dead") throw new leaseq.Dead({ error: "bad input" });
        return { ok: true };
      },
    });
    const events = [];
    for (const name of ["job:start", "job:success", "job:failure", "job:lost", "job:fenced"]) {
      worker.on(name, (job, ...rest) => events.push([name, job.id, ...rest]));
    }
    await runBounded(worker);
    const of = (id) => events.filter((e) => e[1] === id);
    assert.deepEqual(of(fine), [
      ["job:start", fine],
      ["job:success", fine, { ok: true }],
    ]);
    const [, [, , error, willRetry]] = of(retried);
    assert.ok(error instanceof RangeError && willRetry === true);
    const [, [, , dead, deadRetry]] = of(dying);
    assert.ok(dead instanceof leaseq.Dead && deadRetry === false);
    const said = (id) => lines.filter((l) => l.fields?.jobId === id);
    for (const id of [fine, retried, dying]) {
      for (const { fields } of said(id)) {
        assert.deepEqual([fields.queue, fields.attempt], [queue, 1]);
        assert.ok(fields.key.startsWith(`${id}-`));
      }
    }
    assert.deepEqual(
      said(fine).map((l) => l.level),
      ["debug", "debug"],
    );
    const failure = said(retried).find((l) => l.level !== "debug");
    assert.equal(failure.level, "warn");
    assert.match(failure.message, /to be retried: RangeError: the upstream said no\n\s+at /);
    assert.equal(said(dying).find((l) => l.level !== "debug").level, "error");
    assert.ok(lines.some((l) => l.level === "info" && /working queue/.test(l.message)));
    const m = worker.metrics();
    assert.deepEqual([m.queue, m.completed, m.failed, m.dead, m.running, m.held], [queue, 1, 1, 1, 0, 0]);
  }));

test("a lost lease and a fenced outcome are emitted and warned", () =>
  withClient(async (client) => {
    const queue = await newQueue(client);
    const lost = await client.enqueue(queue, {});
    const { lines, logger } = capture();
    const worker = new leaseq.Worker({
      connectionString: url,
      queue,
      lease: 1000,
      logger,
      handler: async (job, { signal }) => {
        await withPg((c) => c.query("SELECT leaseq.queue_cancel($1)", [job.id]));
        await new Promise((resolve) => signal.addEventListener("abort", resolve));
      },
    });
    const seen = [];
    worker.on("job:lost", (job, reason) => seen.push([job.id, reason.message]));
    await runBounded(worker);
    assert.equal(seen.length, 1);
    assert.equal(seen[0][0], lost);
    assert.ok(lines.some((l) => l.level === "warn" && l.fields?.jobId === lost && /lost its lease/.test(l.message)));

    const fenced = await client.enqueue(queue, {});
    const fencing = new leaseq.Worker({
      connectionString: url,
      queue,
      logger,
      transactional: true,
      handler: async (job) => {
        // The lease runs out on the server before the completion: it is fenced.
        await withPg((c) => c.query("WITH ended AS (UPDATE leaseq.jobs SET lease_expires_at = clock_timestamp() WHERE id = $1" +
              " RETURNING queue, lease_expires_at, lease_token, id)" +
              " INSERT INTO leaseq.leases (queue, expires_at, token, job_ids)" +
              " SELECT queue, lease_expires_at, lease_token, ARRAY[id] FROM ended", [job.id]));
      },
    });
    const fencedSeen = [];
    fencing.on("job:fenced", (job) => fencedSeen.push(job.id));
    const summary = await runBounded(fencing);
    assert.equal(summary.fenced, 1);
    assert.deepEqual(fencedSeen, [fenced]);
    assert.ok(lines.some((l) => l.level === "warn" && l.fields?.jobId === fenced && /fenced/.test(l.message)));
  }));

test("without a logger, a failure is written to console.error; database trouble is an 'error' event", () =>
  withClient(async (client) => {
    const queue = await newQueue(client);
    const id = await client.enqueue(queue, {});
    const written = [];
    const original = console.error;
    console.error = (...args) => written.push(args.join(" "));
    try {
      await runBounded(
        new leaseq.Worker({
          connectionString: url,
          queue,
          handler: () => {
            throw new Error("boom");
          },
        }),
      );
    } finally {
      console.error = original;
    }
    assert.ok(written.some((w) => w.includes(`job ${id} failed`) && w.includes("Error: boom")), written.join("\n"));
    // A claim the server answers with trouble it may not repeat (a lock timeout): retried,
    // and said.
    const impatient = new URL(url);
    impatient.searchParams.set("options", "-c lock_timeout=50ms");
    const troubled = new leaseq.Worker({
      connectionString: impatient.toString(),
      queue,
      logger: null,
      handler: () => null,
      poll: 50,
    });
    const errors = [];
    troubled.on("error", (e) => {
      errors.push(e);
      troubled.stop();
    });
    await withPg(async (holder) => {
      await holder.query("BEGIN");
      await holder.query("LOCK TABLE leaseq.queues IN ACCESS EXCLUSIVE MODE");
      try {
        await troubled.run();
      } finally {
        await holder.query("ROLLBACK");
      }
    });
    assert.ok(errors.length > 0 && errors[0].code === "55P03", String(errors[0]));
  }));
