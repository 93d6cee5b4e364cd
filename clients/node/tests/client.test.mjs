import assert from "node:assert/strict";
import { createRequire } from "node:module";
import net from "node:net";
import { test } from "node:test";

import pg from "pg";

import * as leaseq from "../dist/esm/index.js";
import { newQueue, paused, statuses, url, withClient, withPg } from "./helpers.mjs";

test("an enqueue commits and rolls back with the caller's transaction", () =>
  withClient(async (client) => {
    const queue = await newQueue(client);
    const pool = new pg.Pool({ connectionString: url });
    const tx = await pool.connect();
    await tx.query("BEGIN");
    await leaseq.enqueue(tx, queue, { order: 1 });
    await tx.query("ROLLBACK");
    assert.deepEqual(await statuses(queue), {});
    await tx.query("BEGIN");
    const ids = await leaseq.enqueueBatch(tx, queue, [{ n: 1 }, { n: 2 }]);
    await tx.query("COMMIT");
    tx.release();
    await pool.end();
    assert.equal(ids.length, 2);
    assert.ok(typeof ids[0] === "string" && BigInt(ids[0]) < BigInt(ids[1]), "ids as strings, in order");
    assert.deepEqual(await statuses(queue), { pending: 2 });
  }));

test("a payload comes back exactly as enqueued, and keys dedupe", () =>
  withClient(async (client) => {
    const queue = await newQueue(client);
    const text = '{"big": 123456789012345678901234567890, "fine": 0.1000000000000000055511151231257827}';
    const first = await client.enqueue(queue, new leaseq.Json(text), { dedupeKey: "k" });
    assert.equal(await client.enqueue(queue, {}, { dedupeKey: "k" }), first);
    const [job] = await client.claim(queue, "w");
    assert.equal(job.payloadText, text);
    assert.equal(job.id, first);
  }));

test("queueCreate's defaults are the SQL function's", () =>
  withClient(async (client) => {
    const queue = await newQueue(client);
    await client.queueCreate(`${queue}_node`);
    await withPg(async (c) => {
      await c.query("SELECT leaseq.queue_create($1)", [`${queue}_sql`]);
      const settings = `SELECT lease::text, max_attempts, backoff_base::text, backoff_cap::text,
                               retain::text, max_snoozes, group_concurrency
                          FROM leaseq.queues WHERE name = $1`;
      const a = (await c.query(settings, [`${queue}_node`])).rows;
      const b = (await c.query(settings, [`${queue}_sql`])).rows;
      assert.deepEqual(a, b);
      assert.equal(a.length, 1);
    });
  }));

test("a job lives through claim, renew and complete, fenced afterwards", () =>
  withClient(async (client) => {
    const queue = await newQueue(client);
    await client.queueCreate(queue, { maxAttempts: 2 });
    const id = await client.enqueue(queue, { n: 1 }, { priority: 5 });
    const [job] = await client.claim(queue, "w", 1, 60_000);
    assert.deepEqual([job.id, job.attempt, job.priority], [id, 1, 5]);
    assert.equal(await client.result(id), null, "no result while it runs");
    assert.ok((await client.renewBatch([job]))[0] instanceof Date);
    assert.equal(await client.complete(job, { done: true }), true);
    assert.equal(await client.complete(job), false, "a finished job's token is fenced");
    const detail = await client.job(id);
    assert.equal(detail.status, "succeeded");
    assert.equal(detail.result, '{"done": true}');
    // The key: the id and the enqueue's microsecond (a Date keeps the millisecond).
    const [keyId, enqueuedUs] = job.key.split("-");
    assert.equal(keyId, id);
    assert.equal(Math.floor(Number(enqueuedUs) / 1000), detail.createdAt.getTime());
    assert.equal(await client.result(id), '{"done": true}');
    const second = await client.enqueue(queue, {});
    const [again] = await client.claim(queue, "w");
    assert.equal(await client.fail(again, { error: "once" }, { retryInMs: 0 }), "pending");
    const [third] = await client.claim(queue, "w");
    assert.equal(third.attempt, 2);
    assert.equal(await client.fail(third, { error: "twice" }), "dead");
    assert.equal(await client.redrive(second), true);
    const [fourth] = await client.claim(queue, "w");
    assert.equal(fourth.attempt, 3, "numbered after its whole history");
    assert.equal(await client.snooze(fourth, 3_600_000), "pending");
    assert.deepEqual(
      (await client.attempts(second)).map((a) => a.outcome),
      ["failed", "failed", "snoozed"],
    );
    const [row] = (await client.stats()).filter((s) => s.queue === queue);
    assert.equal(row.succeeded, 1);
    assert.match(await client.metrics(), new RegExp(`leaseq_jobs\\{queue="${queue}",state="scheduled"\\} 1`), "the snoozed job");
  }));

test("a child waits for both its parents (fan-in), then reads their results", () =>
  withClient(async (client) => {
    const queue = await newQueue(client);
    const other = await newQueue(client);
    const first = await client.enqueue(queue, { n: 1 });
    const second = await client.enqueue(other, { n: 2 });
    const child = await client.enqueue(queue, { child: true }, { dependsOn: [first, second] });
    assert.equal((await client.job(child)).status, "blocked");
    assert.deepEqual((await client.jobs(queue, { status: "blocked" })).map((j) => j.jobId), [child]);
    assert.deepEqual(await client.parents(child), [
      { parentId: first, queue, status: "pending", result: null },
      { parentId: second, queue: other, status: "pending", result: null },
    ]);
    assert.deepEqual(await client.parents(first), [], "no parents");

    const [a] = await client.claim(queue, "w", 10);
    assert.equal(a.id, first, "the blocked child is not claimed");
    assert.equal(await client.complete(a, { one: 1 }), true);
    assert.deepEqual(await client.claim(queue, "w", 10), [], "one parent still runs");
    assert.equal((await client.job(child)).status, "blocked");
    const [b] = await client.claim(other, "w");
    assert.equal(b.id, second);
    const big = '{"big": 123456789012345678901234567890}';
    assert.equal(await client.complete(b, new leaseq.Json(big)), true);
    assert.equal((await client.job(child)).status, "pending", "released by the last parent's completion");
    const [c] = await client.claim(queue, "w", 10);
    assert.deepEqual([c.id, c.payloadText], [child, '{"child": true}']);
    assert.deepEqual(await client.parents(child), [
      { parentId: first, queue, status: "succeeded", result: '{"one": 1}' },
      { parentId: second, queue: other, status: "succeeded", result: big },
    ]);
  }));

test("each job of a batch waits for its own parents (dependsOnEach)", () =>
  withClient(async (client) => {
    const queue = await newQueue(client);
    const parentsQueue = await newQueue(client); // the parents' claims never take a child
    const first = await client.enqueue(parentsQueue, { part: 1 });
    const second = await client.enqueue(parentsQueue, { part: 2 });
    const [both, onlyFirst, free] = await client.enqueueBatch(queue, [{ n: 1 }, { n: 2 }, { n: 3 }], {
      dependsOnEach: [[first, second], [first], []],
    });
    const status = async (id) => (await client.job(id)).status;
    const all = async (ids) => Promise.all(ids.map(status));
    assert.deepEqual(await all([both, onlyFirst, free]), ["blocked", "blocked", "pending"]);
    assert.deepEqual((await client.parents(both)).map((p) => p.parentId), [first, second]);
    assert.deepEqual((await client.parents(onlyFirst)).map((p) => p.parentId), [first]);
    assert.deepEqual(await client.parents(free), []);
    assert.deepEqual((await client.claim(queue, "w", 10)).map((j) => j.id), [free], "only the job without parents");

    const [a, b] = (await client.claim(parentsQueue, "w", 10)).sort((x, y) => (BigInt(x.id) < BigInt(y.id) ? -1 : 1));
    assert.deepEqual([a.id, b.id], [first, second]);
    assert.equal(await client.complete(a, { one: 1 }), true);
    assert.deepEqual(await all([both, onlyFirst]), ["blocked", "pending"], "released: only the job that waited for it alone");
    assert.deepEqual((await client.claim(queue, "w", 10)).map((j) => j.id), [onlyFirst]);
    assert.equal(await client.complete(b), true);
    assert.equal(await status(both), "pending", "released by its last parent");
    assert.deepEqual((await client.claim(queue, "w", 10)).map((j) => j.id), [both]);

    // `enqueueBatch` on the caller's own pool, with onParentFailure.
    const pool = new pg.Pool({ connectionString: url });
    try {
      const parent = await client.enqueue(parentsQueue, {});
      const [runs, alone] = await leaseq.enqueueBatch(pool, queue, [{}, {}], {
        dependsOnEach: [[parent], []],
        onParentFailure: "run",
      });
      const [cancels] = await leaseq.enqueueBatch(pool, queue, [{}], { dependsOnEach: [[parent]] });
      assert.deepEqual(await all([runs, alone, cancels]), ["blocked", "pending", "blocked"]);
      const [job] = await client.claim(parentsQueue, "w");
      assert.equal(job.id, parent);
      assert.equal(await client.fail(job, { error: "no" }, { retry: false }), "dead");
      assert.deepEqual(await all([runs, cancels]), ["pending", "cancelled"]);
    } finally {
      await pool.end();
    }
  }));

test("a batch waits for one parent (fan-out); a failed parent cancels, kills or runs its children", () =>
  withClient(async (client) => {
    const queue = await newQueue(client);
    await client.queueCreate(queue, { maxAttempts: 1 });
    const parent = await client.enqueue(queue, {});
    const batch = await client.enqueueBatch(queue, [{ n: 1 }, { n: 2 }], { dependsOn: [parent] });
    const dies = await client.enqueue(queue, {}, { dependsOn: [parent], onParentFailure: "dead" });
    const runs = await client.enqueue(queue, { anyway: true }, { dependsOn: [parent], onParentFailure: "run" });
    const runsToo = await client.enqueueBatch(queue, [{}], { dependsOn: [parent], onParentFailure: "run" });
    assert.deepEqual(await statuses(queue), { pending: 1, blocked: 5 });
    for (const id of [...batch, ...runsToo]) {
      assert.deepEqual((await client.parents(id)).map((p) => p.parentId), [parent]);
    }

    const [job] = await client.claim(queue, "w", 10);
    assert.equal(job.id, parent);
    assert.equal(await client.fail(job, { error: "no" }), "dead");
    const status = async (id) => (await client.job(id)).status;
    assert.deepEqual(
      [await status(batch[0]), await status(batch[1]), await status(dies), await status(runs)],
      ["cancelled", "cancelled", "dead", "pending"],
    );
    const claimed = (await client.claim(queue, "w", 10)).map((j) => j.id);
    assert.deepEqual(claimed.sort(), [runs, ...runsToo].sort(), "'run' runs once its parents are final");
    assert.deepEqual(await client.parents(runs), [{ parentId: parent, queue, status: "dead", result: null }]);
  }));

test("a flow fans out and in: ids by key in the order given, and its status counted", () =>
  withClient(async (client) => {
    const queue = await newQueue(client);
    const other = await newQueue(client);
    const big = '{"big": 123456789012345678901234567890}';
    const ids = await client.flow([
      { key: "report", queue, dependsOn: ["resize-a", "resize-b"], priority: 3 },
      { key: "fetch", queue, payload: new leaseq.Json(big) },
      { key: "resize-a", queue, payload: { part: "a" }, dependsOn: ["fetch"] },
      { key: "resize-b", queue: other, dependsOn: ["fetch"], maxAttempts: 2, onParentFailure: "dead" },
    ]);
    assert.ok(ids instanceof Map);
    assert.deepEqual([...ids.keys()], ["report", "fetch", "resize-a", "resize-b"], "the order given");
    const id = (key) => ids.get(key);
    assert.ok(BigInt(id("fetch")) < BigInt(id("resize-a")) && BigInt(id("resize-b")) < BigInt(id("report")), "parents first");
    const fetch = await client.job(id("fetch"));
    assert.deepEqual([fetch.status, fetch.payload], ["pending", big], "every digit kept");
    const report = await client.job(id("report"));
    assert.deepEqual([report.status, report.priority, report.payload], ["blocked", 3, "{}"]);
    const resizeB = await client.job(id("resize-b"));
    assert.deepEqual([resizeB.queue, resizeB.maxAttempts], [other, 2]);
    assert.equal((await client.job(id("resize-a"))).payload, '{"part": "a"}');
    const byId = (a, b) => (BigInt(a) < BigInt(b) ? -1 : 1);
    assert.deepEqual(
      (await client.parents(id("report"))).map((p) => p.parentId),
      [id("resize-a"), id("resize-b")].sort(byId),
    );
    const counts = { jobs: 4, blocked: 0, pending: 0, running: 0, succeeded: 0, dead: 0, cancelled: 0 };
    assert.deepEqual(await client.flowStatus(id("fetch")), { ...counts, blocked: 3, pending: 1, finished: false });
    assert.deepEqual(await client.flowStatus(id("resize-b")), { ...counts, jobs: 2, blocked: 2, finished: false });

    const [first] = await client.claim(queue, "w", 10);
    assert.equal(first.id, id("fetch"));
    assert.deepEqual(await client.flowStatus(id("fetch")), { ...counts, blocked: 3, running: 1, finished: false });
    await client.complete(first, { fetched: true });
    assert.deepEqual(await client.flowStatus(id("fetch")), { ...counts, blocked: 1, pending: 2, succeeded: 1, finished: false });
    const [a] = await client.claim(queue, "w", 10);
    const [b] = await client.claim(other, "w", 10);
    assert.deepEqual([a.id, b.id], [id("resize-a"), id("resize-b")]);
    await client.completeBatch([[a, { done: "a" }]]);
    assert.deepEqual(await client.claim(queue, "w", 10), [], "the fan-in waits for resize-b");
    await client.complete(b, { done: "b" });
    const [last] = await client.claim(queue, "w", 10);
    assert.equal(last.id, id("report"));
    assert.deepEqual(
      (await client.parents(id("report"))).map((p) => p.result).sort(),
      ['{"done": "a"}', '{"done": "b"}'],
    );
    await client.complete(last);
    assert.deepEqual(await client.flowStatus(id("fetch")), { ...counts, succeeded: 4, finished: true });
  }));

test("a step is recorded once, under the lease, in the caller's transaction", () =>
  withClient(async (client) => {
    const queue = await newQueue(client);
    const id = await client.enqueue(queue, {});
    const [job] = await client.claim(queue, "w");
    assert.deepEqual(await client.steps(id), [], "none yet");
    assert.equal(await client.step(job, "charge", { charged: 12.5 }), true);
    assert.equal(await client.step(job, "charge", { charged: 99 }), false, "the first record stands");
    assert.equal(await client.step(job, "notify"), true, "no output");
    const steps = await client.steps(id);
    assert.deepEqual(
      steps.map((s) => [s.name, s.attemptNo, s.output]),
      [["charge", 1, '{"charged": 12.5}'], ["notify", 1, null]],
    );
    assert.ok(steps[0].recordedAt instanceof Date);

    // In the caller's transaction: rolled back with it, kept with its commit.
    const pool = new pg.Pool({ connectionString: url });
    const tx = await pool.connect();
    await tx.query("BEGIN");
    assert.equal(await leaseq.step(tx, job, "ship", new leaseq.Json('{"big": 123456789012345678901234567890}')), true);
    await tx.query("ROLLBACK");
    assert.deepEqual((await client.steps(id)).map((s) => s.name), ["charge", "notify"]);
    await tx.query("BEGIN");
    assert.equal(await leaseq.step(tx, job, "ship", new leaseq.Json('{"big": 123456789012345678901234567890}')), true);
    await tx.query("COMMIT");
    tx.release();
    await pool.end();
    assert.equal((await client.steps(id))[2].output, '{"big": 123456789012345678901234567890}');

    // A stale token records nothing: the job failed, and its next attempt holds the lease.
    assert.equal(await client.fail(job, { error: "once" }, { retryInMs: 0 }), "pending");
    assert.equal(await client.step(job, "late", 1), false, "the failed attempt's token");
    const [again] = await client.claim(queue, "w");
    assert.equal(again.attempt, 2);
    assert.equal(await client.step(job, "late", 1), false, "a previous generation's token");
    assert.equal(await client.step({ ...again, leaseToken: "00000000-0000-0000-0000-000000000000" }, "late", 1), false);
    assert.deepEqual((await client.steps(id)).map((s) => s.name), ["charge", "notify", "ship"], "nothing recorded");
    assert.equal(await client.step(again, "late", 2), true);
    assert.deepEqual(
      (await client.steps(id)).map((s) => [s.name, s.attemptNo]),
      [["charge", 1], ["notify", 1], ["ship", 1], ["late", 2]],
    );
    await assert.rejects(client.step(again, "", 1), leaseq.InvalidArgument, "an empty name");
    await assert.rejects(client.steps("-1"), leaseq.NotFound);
  }));

test("progress is kept under the lease and shown by job(); a stale token's changes nothing", () =>
  withClient(async (client) => {
    const queue = await newQueue(client);
    const id = await client.enqueue(queue, {});
    const fresh = await client.job(id);
    assert.deepEqual([fresh.progress, fresh.progressAt], [null, null], "no report yet");
    const [job] = await client.claim(queue, "w");
    const before = new Date();
    assert.equal(await client.progress(job, { done: 0.5 }), true);
    let detail = await client.job(id);
    assert.equal(detail.progress, '{"done": 0.5}');
    assert.ok(detail.progressAt instanceof Date);
    assert.ok(Math.abs(detail.progressAt.getTime() - before.getTime()) < 60_000, "made now");
    const big = '{"rows": 123456789012345678901234567890}';
    assert.equal(await client.progress(job, new leaseq.Json(big)), true, "replaces the last report");
    assert.equal((await client.job(id)).progress, big, "every digit kept");

    // The standalone call, on the caller's own connection.
    await withPg(async (c) => {
      assert.equal(await leaseq.progress(c, job, "three of four"), true);
    });
    detail = await client.job(id);
    assert.equal(detail.progress, '"three of four"');

    // A stale token reports nothing: the attempt failed, and the next one holds the lease.
    assert.equal(await client.fail(job, { error: "once" }, { retryInMs: 0 }), "pending");
    assert.equal(await client.progress(job, { done: 0.9 }), false, "the failed attempt's token");
    const [again] = await client.claim(queue, "w");
    assert.equal(await client.progress(job, { done: 0.9 }), false, "a previous generation's token");
    assert.equal(
      await client.progress({ ...again, leaseToken: "00000000-0000-0000-0000-000000000000" }, { done: 0.9 }),
      false,
    );
    const unchanged = await client.job(id);
    assert.deepEqual([unchanged.progress, unchanged.progressAt], [detail.progress, detail.progressAt]);
    assert.equal(await client.progress(again, [1, 2]), true);
    assert.equal(await client.complete(again), true);
    assert.equal(await client.progress(again, [2, 2]), false, "a finished job's token");
    const done = await client.job(id);
    assert.deepEqual([done.status, done.progress], ["succeeded", "[1, 2]"], "the last report stays");

    // Refusals change nothing either.
    const other = await client.enqueue(queue, {});
    const [running] = await client.claim(queue, "w");
    assert.equal(running.id, other);
    await assert.rejects(client.progress(running, undefined), (e) => {
      assert.ok(e instanceof leaseq.NullArgument);
      assert.equal(e.sqlstate, "22004");
      return true;
    });
    await assert.rejects(client.progress(running, { blob: "x".repeat(1024 * 1024 + 1) }), (e) => {
      assert.ok(e instanceof leaseq.PayloadTooLarge);
      assert.equal(e.sqlstate, "54000");
      return true;
    });
    const pool = new pg.Pool({ connectionString: url });
    const tx = await pool.connect();
    try {
      await tx.query("BEGIN ISOLATION LEVEL REPEATABLE READ");
      await assert.rejects(leaseq.progress(tx, running, 1), leaseq.NeedsReadCommitted);
      await tx.query("ROLLBACK");
    } finally {
      tx.release();
      await pool.end();
    }
    const refused = await client.job(other);
    assert.deepEqual([refused.status, refused.progress, refused.progressAt], ["running", null, null]);
  }));

test("awaitJobs answers at once when every job is final, and the unfinished at its timeout", { timeout: 60_000 }, () =>
  withClient(async (client) => {
    const queue = await newQueue(client);
    await client.queueCreate(queue, { maxAttempts: 1 });
    const [succeeded, dead, cancelled, pending, running] = await client.enqueueBatch(queue, [{}, {}, {}, {}, {}]);
    const [first, second] = await client.claim(queue, "w", 2);
    assert.deepEqual([first.id, second.id], [succeeded, dead]);
    assert.equal(await client.complete(first), true);
    assert.equal(await client.fail(second, { error: "no" }), "dead");
    assert.equal(await client.cancel(cancelled), true);

    let started = Date.now();
    assert.deepEqual(await client.awaitJobs([succeeded, dead, cancelled], 60_000), { allFinal: true, unfinished: [] });
    assert.ok(Date.now() - started < 10_000, "not its timeout");

    // Timeout 0: one look.
    assert.deepEqual(await client.awaitJobs([pending], 0), { allFinal: false, unfinished: [pending] });
    const [claimed] = await client.claim(queue, "w");
    assert.equal(claimed.id, pending);
    // Milliseconds: it waits as long as asked, and answers the unfinished ones, ascending.
    started = Date.now();
    const awaited = await client.awaitJobs([running, succeeded, pending], 400);
    const took = Date.now() - started;
    assert.deepEqual(awaited, { allFinal: false, unfinished: [pending, running] });
    assert.ok(took >= 350 && took < 10_000, `waited ${took} ms for 400`);
    assert.ok(awaited.unfinished.every((id) => typeof id === "string"), "ids as strings");

    // The standalone call on a connection of the caller's own, outside a transaction.
    await withPg(async (c) => {
      assert.deepEqual(await leaseq.awaitJobs(c, [pending], 0), { allFinal: false, unfinished: [pending] });
      assert.equal((await c.query("SELECT 1 AS one")).rows[0].one, 1, "the connection still works");
    });
    assert.deepEqual((await client.job(pending)).status, "running", "a wait changes nothing");
  }));

test("awaitJobs wakes when another connection finishes the job, holding a connection of its own", { timeout: 60_000 }, () =>
  withClient(async (client) => {
    const queue = await newQueue(client);
    const [a, b] = await client.enqueueBatch(queue, [{}, {}]);
    const [ja, jb] = await client.claim(queue, "w", 2);
    const waiter = new leaseq.Client(url);
    try {
      const started = Date.now();
      let settled = false;
      const waiting = waiter.awaitJobs([a, b], 60_000).finally(() => (settled = true));
      await new Promise((r) => setTimeout(r, 500));
      // The waiter's other calls still run: the wait has a pool connection to itself.
      assert.equal((await waiter.job(a)).status, "running");
      assert.equal(settled, false, "still waiting: nothing is final");
      await withClient(async (other) => {
        assert.equal(await other.complete(ja, "one"), true);
        await new Promise((r) => setTimeout(r, 500));
        assert.equal(settled, false, "one of two is final");
        assert.equal(await other.cancel(jb.id), true);
      });
      assert.deepEqual(await waiting, { allFinal: true, unfinished: [] });
      const took = Date.now() - started;
      assert.ok(took < 20_000, `woken after ${took} ms, not at its 60 s timeout`);
    } finally {
      await waiter.close();
    }
  }));

test("awaitJobs refuses a transaction block and bad input with the server's SQLSTATE", { timeout: 60_000 }, () =>
  withClient(async (client) => {
    const queue = await newQueue(client);
    const id = await client.enqueue(queue, {});
    const before = await client.job(id);
    const pool = new pg.Pool({ connectionString: url });
    const dedicated = await pool.connect();
    try {
      await dedicated.query("BEGIN");
      await assert.rejects(leaseq.awaitJobs(dedicated, [id], 60_000), (e) => {
        assert.ok(e instanceof leaseq.NeedsOwnTransactions && e instanceof leaseq.LeaseqError);
        assert.equal(e.sqlstate, "25001");
        assert.match(e.message, /queue_await must be called by CALL on its own/);
        return true;
      });
      await dedicated.query("ROLLBACK");
      // On its own, the same connection may.
      assert.deepEqual(await leaseq.awaitJobs(dedicated, [id], 0), { allFinal: false, unfinished: [id] });
    } finally {
      dedicated.release();
      await pool.end();
    }

    const unknown = String(9_000_000_000_000_000_000n);
    const refusals = [
      [() => client.awaitJobs([id], -1), leaseq.InvalidArgument, "22023", /"timeout" must be at least 0 and at most 1 day/],
      [() => client.awaitJobs([id], 86_400_001), leaseq.InvalidArgument, "22023", /"timeout"/],
      [() => client.awaitJobs([id, id], 0), leaseq.InvalidArgument, "22023", /must not name a job twice/],
      [() => client.awaitJobs([id, unknown], 60_000), leaseq.NotFound, "42704", new RegExp(`job ${unknown} does not exist`)],
      [() => client.awaitJobs([id, null], 0), leaseq.NullArgument, "22004", /"job_ids\[2\]" must not be NULL/],
      [() => client.awaitJobs(null, 0), leaseq.NullArgument, "22004", /"job_ids" must not be NULL/],
      [() => client.awaitJobs([id], null), leaseq.NullArgument, "22004", /"timeout" must not be NULL/],
    ];
    for (const [f, Class, sqlstate, message] of refusals) {
      const started = Date.now();
      await assert.rejects(f(), (e) => {
        assert.ok(e instanceof Class, `${e}`);
        assert.equal(e.sqlstate, sqlstate);
        assert.match(e.message, message);
        return true;
      });
      assert.ok(Date.now() - started < 10_000, "refused at once, not after a wait");
    }
    assert.deepEqual(await client.job(id), before, "nothing changed");
  }));

test("job() reads a database not yet updated to 0.3.0; its progress and await are not there yet", () =>
  withPg(async (c) => {
    const old = `node_at_020_${process.pid}`;
    await c.query(`DROP DATABASE IF EXISTS ${old}`);
    await c.query(`CREATE DATABASE ${old}`);
    try {
      const oldUrl = new URL(url);
      oldUrl.pathname = `/${old}`;
      const setup = new pg.Client({ connectionString: oldUrl.toString() });
      await setup.connect();
      try {
        await setup.query("CREATE EXTENSION leaseq VERSION '0.2.0'");
      } finally {
        await setup.end();
      }
      const client = new leaseq.Client(oldUrl.toString());
      try {
        await client.queueCreate("node_old");
        const id = await client.enqueue("node_old", { n: 1 });
        const [job] = await client.claim("node_old", "w");
        const detail = await client.job(id);
        assert.deepEqual([detail.jobId, detail.status, detail.payload], [id, "running", '{"n": 1}']);
        assert.deepEqual([detail.progress, detail.progressAt], [null, null]);
        for (const call of [client.progress(job, 1), client.awaitJobs([id], 0)]) {
          // The server's own error, as pg raised it: not one of leaseq's refusals.
          await assert.rejects(call, (e) => {
            assert.equal(e.code, "42883", "undefined: update the extension");
            return true;
          });
        }
        assert.equal(await client.complete(job), true);
        assert.equal((await client.job(id)).status, "succeeded");
      } finally {
        await client.close();
      }
    } finally {
      await c.query(`DROP DATABASE ${old} WITH (FORCE)`);
    }
  }));

test("jobs, grants, schedules and purge read as typed rows", () =>
  withPg((c) =>
    withClient(async (client) => {
      const queue = await newQueue(client);
      const id = await client.enqueue(queue, {});
      const [summary] = await client.jobs(queue);
      assert.deepEqual([summary.jobId, summary.status], [id, "pending"]);
      await c.query(
        "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'node_team') THEN CREATE ROLE node_team NOLOGIN; END IF; END $$",
      );
      assert.equal(await client.grant(queue, "node_team", "work"), true);
      const [grant] = (await client.grants()).filter((g) => g.queue === queue);
      assert.deepEqual([grant.role, grant.privilege], ["node_team", "work"]);
      assert.equal(await client.revoke(queue, "node_team", "work"), true);
      const [mine] = (await client.privileges()).filter((p) => p.queue === queue);
      assert.deepEqual(mine, { queue, produce: true, work: true, observe: true, admin: true });
      const first = await client.schedule(`${queue}_tick`, queue, "*/5 * * * *", { tick: true });
      const [found] = (await client.schedules()).filter((s) => s.name === `${queue}_tick`);
      assert.equal(found.nextAt.getTime(), first.getTime());
      assert.equal(found.payload, '{"tick": true}');
      assert.equal(found.lastJobId, null); // no tick yet
      assert.equal(await client.unschedule(`${queue}_tick`), true);
      assert.equal(await client.purge(queue, 0), 0);
    }),
  ));

test("a paused queue claims nothing until resumed", () =>
  withClient(async (client) => {
    const queue = await newQueue(client);
    const id = await client.enqueue(queue, {});
    assert.equal(await client.pause(queue), true);
    assert.equal(await client.pause(queue), false, "already paused");
    assert.deepEqual(await client.claim(queue, "w"), []);
    assert.equal(await client.resume(queue), true);
    assert.equal(await client.resume(queue), false, "already running");
    const [job] = await client.claim(queue, "w");
    assert.equal(job.id, id);
  }));

test("redriveMany and cancelMany answer per id in input order", () =>
  withClient(async (client) => {
    const queue = await newQueue(client);
    await client.queueCreate(queue, { maxAttempts: 1 });
    const dead = await client.enqueue(queue, {});
    const [job] = await client.claim(queue, "w");
    assert.equal(await client.fail(job), "dead");
    const pending = await client.enqueue(queue, {});
    assert.deepEqual(await client.redriveMany([dead, pending]), [true, false]);
    assert.equal((await client.job(dead)).status, "pending");
    assert.equal((await client.job(pending)).status, "pending");
    assert.deepEqual(await client.redriveMany([]), []);
    const claimed = Object.fromEntries((await client.claim(queue, "w", 2)).map((j) => [j.id, j]));
    assert.equal(await client.complete(claimed[pending]), true);
    assert.deepEqual(await client.cancelMany([pending, dead]), [false, true], "finished already; running");
    assert.equal(await client.complete(claimed[dead]), false, "the cancelled job's lease is gone");
    assert.equal((await client.job(dead)).status, "cancelled");
    assert.equal((await client.job(pending)).status, "succeeded");
    assert.deepEqual((await client.attempts(dead)).map((a) => a.outcome), ["failed", "cancelled"]);
  }));

test("jobs filters and keyset pages", () =>
  withClient(async (client) => {
    const queue = await newQueue(client);
    const other = await newQueue(client);
    const mark = { customer: queue }; // matches this test's jobs only
    const a = await client.enqueue(queue, { ...mark, n: 1 }, { groupKey: "g1", dedupeKey: `${queue}_d1` });
    const b = await client.enqueue(queue, { customer: "someone else" });
    const c = await client.enqueue(queue, { ...mark, n: 3 });
    const d = await client.enqueue(other, mark);
    const [running] = await client.claim(queue, `${queue}_w`);
    assert.equal(running.id, a);
    const ids = (rows) => rows.map((r) => r.jobId);

    assert.deepEqual(ids(await client.jobs(queue)), [c, b, a], "newest first");
    assert.deepEqual(ids(await client.jobs(queue, { payloadContains: mark })), [c, a]);
    assert.deepEqual(ids(await client.jobs(queue, { payloadContains: new leaseq.Json('{"n": 3}') })), [c]);
    assert.deepEqual(ids(await client.jobs(null, { payloadContains: mark })), [d, c, a], "every queue when null");
    assert.deepEqual(ids(await client.jobs(queue, "running")), [a]);
    assert.deepEqual(ids(await client.jobs(queue, "pending", 1)), [c], "status and maxRows positionally");
    assert.deepEqual(ids(await client.jobs(queue, { status: "pending", maxRows: 1 })), [c]);
    const [found] = await client.jobs(undefined, { worker: `${queue}_w` });
    assert.deepEqual(
      [found.jobId, found.queue, found.groupKey, found.dedupeKey, found.worker],
      [a, queue, "g1", `${queue}_d1`, `${queue}_w`],
    );
    assert.deepEqual(ids(await client.jobs(queue, { groupKey: "g1" })), [a]);
    assert.deepEqual(ids(await client.jobs(null, { dedupeKey: `${queue}_d1` })), [a]);
    const createdB = (await client.job(b)).createdAt;
    assert.deepEqual(ids(await client.jobs(queue, { createdAfter: createdB })), [c, b]);
    assert.deepEqual(ids(await client.jobs(queue, { createdBefore: createdB })), [a]);

    const many = await client.enqueueBatch(other, Array.from({ length: 7 }, (_, i) => ({ i })));
    const everything = ids(await client.jobs(other));
    assert.deepEqual(everything, [...many].reverse().concat([d]));
    const pages = [];
    let beforeId;
    for (;;) {
      const page = ids(await client.jobs(other, { maxRows: 3, beforeId }));
      if (page.length === 0) break;
      pages.push(page);
      beforeId = page[page.length - 1];
    }
    assert.deepEqual(pages.map((p) => p.length), [3, 3, 2]);
    assert.deepEqual(pages.flat(), everything, "disjoint pages, all of them, in order");
    // Newer than one seen (tailing), and a window of ids.
    assert.deepEqual(ids(await client.jobs(other, { afterId: many[4] })), [many[6], many[5]]);
    assert.deepEqual(
      ids(await client.jobs(other, { afterId: many[1], beforeId: many[4] })),
      [many[3], many[2]],
    );
  }));

test("the console calls refuse bad input whole and change nothing", () =>
  withClient(async (client) => {
    const queue = await newQueue(client);
    await client.queueCreate(queue, { maxAttempts: 1 });
    const dead = await client.enqueue(queue, {});
    const [job] = await client.claim(queue, "w");
    await client.fail(job);
    const pending = await client.enqueue(queue, {});
    const unknown = 9_000_000_000_000_000_000n;
    for (const many of [(ids) => client.redriveMany(ids), (ids) => client.cancelMany(ids)]) {
      await assert.rejects(many([dead, pending, String(unknown)]), (e) => {
        assert.ok(e instanceof leaseq.NotFound);
        assert.equal(e.sqlstate, "42704");
        assert.match(e.message, new RegExp(`job ${unknown} does not exist`));
        return true;
      });
      await assert.rejects(many([dead, pending, dead]), (e) => {
        assert.ok(e instanceof leaseq.InvalidArgument);
        assert.match(e.message, /"job_ids" must not name a job twice/);
        return true;
      });
      const tooMany = Array.from({ length: 9999 }, (_, i) => String(unknown + BigInt(i)));
      await assert.rejects(many([dead, pending, ...tooMany]), (e) => {
        assert.ok(e instanceof leaseq.InvalidArgument);
        assert.match(e.message, /"job_ids" must have at most 10000/);
        return true;
      });
      await assert.rejects(many([dead, null]), leaseq.NullArgument);
    }
    assert.equal((await client.job(dead)).status, "dead", "the whole call was refused");
    assert.equal((await client.job(pending)).status, "pending");
    for (const toggle of [(q) => client.pause(q), (q) => client.resume(q)]) {
      await assert.rejects(toggle("node_no_such_queue"), (e) => {
        assert.ok(e instanceof leaseq.NotFound);
        assert.match(e.message, /queue "node_no_such_queue" does not exist/);
        return true;
      });
      await assert.rejects(toggle(null), leaseq.NullArgument);
    }
    assert.equal(await paused(queue), false);
    for (const maxRows of [0, 10001]) {
      await assert.rejects(client.jobs(queue, { maxRows }), (e) => {
        assert.ok(e instanceof leaseq.InvalidArgument);
        assert.match(e.message, /"max_rows" must be between 1 and 10000/);
        return true;
      });
    }
    await assert.rejects(client.jobs("node_no_such_queue"), leaseq.NotFound);
    const [claimed] = await client.claim(queue, "w");
    assert.equal(claimed.id, pending, "the queue runs, its pending job untouched");
  }));

test("an observer lists jobs but may not pause or cancel, and its privileges say so", () =>
  withPg(async (c) => {
    const role = `node_observer_${process.pid}`;
    await c.query(`DROP ROLE IF EXISTS ${role}`);
    await c.query(`CREATE ROLE ${role} LOGIN IN ROLE leaseq_observer`);
    try {
      await withClient(async (admin) => {
        const queue = await newQueue(admin);
        const id = await admin.enqueue(queue, {});
        const asRole = new URL(url);
        asRole.username = role;
        const observer = new leaseq.Client(asRole.toString());
        try {
          const [mine] = (await observer.privileges()).filter((p) => p.queue === queue);
          assert.deepEqual(mine, { queue, produce: false, work: false, observe: true, admin: false });
          assert.deepEqual((await observer.jobs(queue)).map((j) => j.jobId), [id]);
          await assert.rejects(observer.pause(queue), (e) => {
            assert.ok(e instanceof leaseq.PermissionDenied);
            assert.match(e.message, /permission denied for function queue_pause/);
            return true;
          });
          await assert.rejects(observer.cancelMany([id]), leaseq.PermissionDenied);
        } finally {
          await observer.close();
        }
        assert.equal(await paused(queue), false);
        assert.equal((await admin.job(id)).status, "pending");
      });
    } finally {
      await c.query(`DROP ROLE ${role}`);
    }
  }));

test("every refusal is the error of its SQLSTATE with the server's message, and changes nothing", () =>
  withClient(async (client) => {
    const queue = await newQueue(client);
    await assert.rejects(client.enqueue(queue, {}, { groupKey: "" }), (e) => {
      assert.ok(e instanceof leaseq.InvalidArgument && e instanceof leaseq.LeaseqError);
      assert.equal(e.sqlstate, "22023");
      assert.match(e.message, /argument "group_key" must be between 1 and 512 bytes long/);
      return true;
    });
    assert.deepEqual(await statuses(queue), {});
    await assert.rejects(client.claim(queue, "w", 0), leaseq.InvalidArgument);
    await assert.rejects(client.enqueue("node_no_such_queue", {}), (e) => {
      assert.ok(e instanceof leaseq.NotFound);
      assert.match(e.hint, /queue_create/);
      return true;
    });
    await assert.rejects(client.queueCreate(queue, { maxAttempts: null }), leaseq.NullArgument);
  }));

test("dependencies and flows refuse bad input with the server's SQLSTATE and insert nothing", () =>
  withClient(async (client) => {
    const queue = await newQueue(client);
    const unknown = String(9_000_000_000_000_000_000n);
    const parent = await client.enqueue(queue, {});
    const unknownParent = (e) => {
      assert.ok(e instanceof leaseq.NotFound);
      assert.equal(e.sqlstate, "42704");
      assert.match(e.message, new RegExp(`argument "depends_on" names job ${unknown}, which does not exist`));
      return true;
    };
    await assert.rejects(client.enqueue(queue, {}, { dependsOn: [parent, unknown] }), unknownParent);
    await assert.rejects(client.enqueueBatch(queue, [{}, {}], { dependsOn: [unknown] }), unknownParent);
    await assert.rejects(client.enqueue(queue, {}, { dependsOn: [parent], dedupeKey: "k" }), (e) => {
      assert.ok(e instanceof leaseq.InvalidArgument);
      assert.equal(e.sqlstate, "22023");
      assert.match(e.message, /argument "depends_on" cannot be combined with dedupe_key or group_key/);
      return true;
    });
    await assert.rejects(
      client.enqueue(queue, {}, { dependsOn: [parent], onParentFailure: "retry" }),
      leaseq.InvalidArgument,
    );
    assert.deepEqual(await statuses(queue), { pending: 1 }, "only the parent");

    // dependsOnEach: one list per payload, judged whole by the server.
    await assert.rejects(client.enqueueBatch(queue, [{}, {}, {}], { dependsOnEach: [[parent], []] }), (e) => {
      assert.ok(e instanceof leaseq.InvalidArgument);
      assert.equal(e.sqlstate, "22023");
      assert.match(e.message, /argument "depends_on_each" must have one array of job ids per payload/);
      return true;
    });
    await assert.rejects(client.enqueueBatch(queue, [{}, {}], { dependsOnEach: [[], [parent, parent]] }), (e) => {
      assert.ok(e instanceof leaseq.InvalidArgument);
      assert.match(e.message, /argument "depends_on_each\[2\]" must not name a job twice/);
      return true;
    });
    await assert.rejects(
      client.enqueueBatch(queue, [{}], { dependsOn: [parent], dependsOnEach: [[parent]] }),
      (e) => e instanceof leaseq.InvalidArgument && /cannot be combined with depends_on/.test(e.message),
    );
    // Past 2^53: every digit reaches the server (Number() would have sent ...000).
    const unknownEach = "9000000000000000001";
    await assert.rejects(
      client.enqueueBatch(queue, [{}, {}], { dependsOnEach: [[parent], [unknownEach, parent]] }),
      (e) => {
        assert.ok(e instanceof leaseq.NotFound);
        assert.equal(e.sqlstate, "42704");
        assert.match(e.message, new RegExp(`argument "depends_on_each" names job ${unknownEach}, which does not exist`));
        return true;
      },
    );
    assert.deepEqual(await statuses(queue), { pending: 1 }, "no batch inserted a job");

    const cycle = [
      { key: "start", queue },
      { key: "a", queue, dependsOn: ["start", "c"] },
      { key: "b", queue, dependsOn: ["a"] },
      { key: "c", queue, dependsOn: ["b"] },
    ];
    await assert.rejects(client.flow(cycle), (e) => {
      assert.ok(e instanceof leaseq.InvalidArgument);
      assert.equal(e.sqlstate, "22023");
      assert.match(e.message, /argument "jobs" node \d \("[abc]"\): "depends_on" closes a cycle/);
      return true;
    });
    await assert.rejects(client.flow([{ key: "a", queue, dependsOn: ["zz"] }]), (e) => {
      assert.ok(e instanceof leaseq.InvalidArgument);
      assert.match(e.message, /node 1 \("a"\): "depends_on" names "zz", which is not a key of this flow/);
      return true;
    });
    await assert.rejects(client.flow([{ key: "a", queue }, { key: "b", queue: "node_no_such_queue" }]), (e) => {
      assert.ok(e instanceof leaseq.NotFound);
      assert.match(e.message, /queue "node_no_such_queue" does not exist/);
      return true;
    });
    assert.deepEqual(await statuses(queue), { pending: 1 }, "no flow inserted a job");
    await assert.rejects(client.parents(unknown), leaseq.NotFound);
    await assert.rejects(client.flowStatus(unknown), leaseq.NotFound);
  }));

test("a producer may enqueue but not claim, and hears why", () =>
  withPg(async (c) => {
    const role = `node_producer_${process.pid}`;
    await c.query(`DROP ROLE IF EXISTS ${role}`);
    await c.query(`CREATE ROLE ${role} LOGIN IN ROLE leaseq_producer`);
    try {
      await withClient(async (admin) => {
        const queue = await newQueue(admin);
        const asRole = new URL(url);
        asRole.username = role;
        const producer = new leaseq.Client(asRole.toString());
        try {
          const id = await producer.enqueue(queue, { by: "producer" });
          await assert.rejects(producer.claim(queue, "w"), (e) => {
            assert.ok(e instanceof leaseq.PermissionDenied);
            assert.match(e.message, /permission denied for function queue_claim \(SQLSTATE 42501\)/);
            return true;
          });
          await assert.rejects(producer.awaitJobs([id], 0), (e) => {
            assert.ok(e instanceof leaseq.PermissionDenied);
            assert.equal(e.sqlstate, "42501");
            return true;
          });
        } finally {
          await producer.close();
        }
        assert.deepEqual(await statuses(queue), { pending: 1 });
      });
    } finally {
      await c.query(`DROP ROLE ${role}`);
    }
  }));

test("the enums have the extension's labels in order", () =>
  withPg(async (c) => {
    for (const [type, labels] of [
      ["leaseq.job_status", leaseq.JOB_STATUSES],
      ["leaseq.attempt_outcome", leaseq.ATTEMPT_OUTCOMES],
      ["leaseq.queue_privilege", leaseq.QUEUE_PRIVILEGES],
      ["leaseq.parent_failure", leaseq.PARENT_FAILURES],
    ]) {
      const { rows } = await c.query(`SELECT enum_range(NULL::${type})::text[] AS labels`);
      assert.deepEqual(rows[0].labels, [...labels], type);
    }
  }));

test("a server that accepts and never answers times out and says so", async () => {
  const sockets = [];
  const silent = net.createServer((socket) => sockets.push(socket)); // accepts, says nothing
  const port = await new Promise((resolve) => silent.listen(0, "127.0.0.1", () => resolve(silent.address().port)));
  try {
    const asked = performance.now();
    const client = new leaseq.Client(`postgresql://nobody@127.0.0.1:${port}/nowhere?connect_timeout=1`);
    await assert.rejects(client.stats(), (e) => {
      assert.ok(e instanceof leaseq.ConnectionFailed);
      assert.match(e.message, new RegExp(`^cannot connect to 127\\.0\\.0\\.1:${port}/nowhere as nobody: .*timeout`));
      return true;
    });
    assert.ok(performance.now() - asked < 10_000, "bounded by connect_timeout");
    await client.close();
  } finally {
    for (const s of sockets) s.destroy();
    silent.close();
  }
});

test("a failed connection names the server and the cause; a bare database says what to run, and its end kills nothing", async () => {
  const port = await new Promise((resolve) => {
    const s = net.createServer().listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
  const nowhere = new leaseq.Client(`postgresql://nobody@127.0.0.1:${port}/nowhere`);
  await assert.rejects(nowhere.stats(), (e) => {
    assert.ok(e instanceof leaseq.ConnectionFailed);
    assert.match(e.message, new RegExp(`^cannot connect to 127\\.0\\.0\\.1:${port}/nowhere as nobody: .*ECONNREFUSED`));
    return true;
  });
  await nowhere.close();
  const unknown = new URL(url);
  unknown.pathname = "/node_no_such_database";
  const lost = new leaseq.Client(unknown.toString());
  await assert.rejects(lost.stats(), (e) => {
    assert.ok(e instanceof leaseq.ConnectionFailed);
    assert.match(e.message, /database "node_no_such_database" does not exist \(SQLSTATE 3D000\)/);
    return true;
  });
  await lost.close();
  await withPg(async (c) => {
    const bare = `node_bare_${process.pid}`;
    await c.query(`DROP DATABASE IF EXISTS ${bare}`);
    await c.query(`CREATE DATABASE ${bare}`);
    const there = new URL(url);
    there.pathname = `/${bare}`;
    const client = new leaseq.Client(there.toString());
    try {
      await assert.rejects(client.stats(), (e) => {
        assert.ok(e instanceof leaseq.ExtensionMissing);
        assert.match(e.message, /run CREATE EXTENSION leaseq in it/);
        return true;
      });
      // The server ends the client's idle connection: the pool drops it, the process lives on.
      await c.query(`DROP DATABASE ${bare} WITH (FORCE)`);
      await new Promise((resolve) => setTimeout(resolve, 200));
    } finally {
      await client.close();
      await c.query(`DROP DATABASE IF EXISTS ${bare} WITH (FORCE)`);
    }
  });
});

test("the CommonJS build loads with require()", () => {
  const require = createRequire(import.meta.url);
  const cjs = require("../dist/cjs/index.js");
  assert.equal(typeof cjs.Client, "function");
  assert.equal(typeof cjs.Worker, "function");
});
