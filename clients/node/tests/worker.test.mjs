import assert from "node:assert/strict";
import { test } from "node:test";

import pg from "pg";

import * as leaseq from "../dist/esm/index.js";
import { newQueue, statuses, url, withClient, withPg } from "./helpers.mjs";

test("every job runs once and succeeds with its result", () =>
  withClient(async (client) => {
    const queue = await newQueue(client);
    const ids = await client.enqueueBatch(queue, Array.from({ length: 200 }, (_, n) => ({ n })));
    const seen = [];
    const worker = new leaseq.Worker({
      connectionString: url,
      queue,
      concurrency: 8,
      handler: async (job) => {
        seen.push(job.id);
        return { double: job.payload.n * 2 };
      },
    });
    const summary = await worker.runUntilIdle();
    assert.deepEqual([...seen].sort((a, b) => Number(BigInt(a) - BigInt(b))), ids, "every job once");
    assert.equal(summary.completed, 200);
    assert.deepEqual(await statuses(queue), { succeeded: 200 });
    assert.equal((await client.job(ids[7])).result, '{"double": 14}');
  }));

test("outcomes map to retry, dead and snooze", () =>
  withClient(async (client) => {
    const queue = await newQueue(client);
    const failing = await client.enqueue(queue, { do: "throw" });
    const dying = await client.enqueue(queue, { do: "dead" });
    const snoozing = await client.enqueue(queue, { do: "snooze" });
    const summary = await new leaseq.Worker({
      connectionString: url,
      queue,
      handler: (job) => {
        if (job.payload.do === "throw") throw new TypeError("the upstream said no");
        if (job.payload.do === "dead") throw new leaseq.Dead({ error: "unparsable" });
        throw new leaseq.Snooze(3_600_000);
      },
    }).runUntilIdle();
    assert.deepEqual([summary.failed, summary.dead, summary.snoozed], [1, 1, 1]);
    const failed = await client.job(failing);
    assert.equal(failed.status, "pending");
    assert.match(failed.lastError, /"error": "TypeError"/);
    assert.match(failed.lastError, /the upstream said no/);
    assert.equal((await client.job(dying)).status, "dead");
    assert.equal((await client.job(dying)).lastError, '{"error": "unparsable"}');
    const snoozed = await client.job(snoozing);
    assert.deepEqual([snoozed.status, snoozed.attempts, snoozed.snoozes], ["pending", 0, 1]);
  }));

test("never more than concurrency handlers at once", () =>
  withClient(async (client) => {
    const queue = await newQueue(client);
    await client.enqueueBatch(queue, Array.from({ length: 40 }, () => ({})));
    let running = 0;
    let peak = 0;
    const summary = await new leaseq.Worker({
      connectionString: url,
      queue,
      concurrency: 4,
      handler: async () => {
        running += 1;
        peak = Math.max(peak, running);
        await new Promise((r) => setTimeout(r, 20));
        running -= 1;
      },
    }).runUntilIdle();
    assert.equal(summary.completed, 40);
    assert.ok(peak > 1 && peak <= 4, `peak ${peak}`);
  }));

test("a lost lease aborts the job's signal and the job is never finished", () =>
  withClient(async (client) => {
    const queue = await newQueue(client);
    const id = await client.enqueue(queue, {});
    let aborted = false;
    const summary = await new leaseq.Worker({
      connectionString: url,
      queue,
      lease: 1000,
      handler: async (job, { signal }) => {
        await client.cancel(job.id);
        await new Promise((resolve) => {
          const timer = setTimeout(resolve, 5000);
          signal.addEventListener("abort", () => {
            clearTimeout(timer);
            resolve();
          });
        });
        aborted = signal.aborted;
        return "too late";
      },
    }).runUntilIdle();
    assert.ok(aborted, "the signal fired");
    assert.deepEqual([summary.lost, summary.completed], [1, 0]);
    const job = await client.job(id);
    assert.deepEqual([job.status, job.result], ["cancelled", null]);
  }));

test("a transactional handler's writes commit only with its completion", () =>
  withPg((c) =>
    withClient(async (client) => {
      const queue = await newQueue(client);
      const effects = `${queue}_effects`;
      await c.query(`CREATE TABLE ${effects} (job_id bigint PRIMARY KEY)`);
      const kept = await client.enqueue(queue, { lose: false });
      const stale = await client.enqueue(queue, { lose: true });
      const failing = await client.enqueue(queue, { throw: true });
      const summary = await new leaseq.Worker({
        connectionString: url,
        queue,
        concurrency: 3,
        transactional: true,
        handler: async (job, { tx }) => {
          await tx.query(`INSERT INTO ${effects} VALUES ($1)`, [job.id]);
          if (job.payload.lose) {
            // The lease runs out before the completion (as for a worker paused past it).
            await c.query("WITH ended AS (UPDATE leaseq.jobs SET lease_expires_at = clock_timestamp() WHERE id = $1" +
              " RETURNING queue, lease_expires_at, lease_token, id)" +
              " INSERT INTO leaseq.leases (queue, expires_at, token, job_ids)" +
              " SELECT queue, lease_expires_at, lease_token, ARRAY[id] FROM ended", [job.id]);
          }
          if (job.payload.throw) throw new Error("rolled back");
          return "effect written";
        },
      }).runUntilIdle();
      assert.deepEqual([summary.completed, summary.fenced, summary.failed], [1, 1, 1]);
      const { rows } = await c.query(`SELECT job_id::text AS id FROM ${effects}`);
      assert.deepEqual(rows.map((r) => r.id), [kept], "only the accepted completion's effect committed");
      assert.equal((await client.job(kept)).status, "succeeded");
      assert.deepEqual((await client.attempts(stale)).map((a) => a.outcome), ["lease_expired"]);
      assert.equal((await client.job(failing)).status, "pending");
      await c.query(`DROP TABLE ${effects}`);
    }),
  ));

test("context.step skips on a retry what an earlier attempt recorded", () =>
  withPg((c) =>
    withClient(async (client) => {
      const queue = await newQueue(client);
      const id = await client.enqueue(queue, { amount: 7 });
      const calls = [];
      const seen = [];
      const handler = async (job, { step }) => {
        const charge = await step("charge", () => {
          calls.push(["charge", job.attempt]);
          return { charged: job.payload.amount };
        });
        seen.push([job.attempt, charge]);
        const again = await step("charge", () => calls.push(["charge again", job.attempt]));
        assert.deepEqual(again, charge, "a step done is not done twice in one attempt either");
        if (job.attempt === 1) throw new Error("the mail server is down");
        const sent = await step("mail", () => {
          calls.push(["mail", job.attempt]);
          return undefined;
        });
        return { charge, sent: sent ?? null };
      };
      const first = await new leaseq.Worker({ connectionString: url, queue, handler }).runUntilIdle();
      assert.equal(first.failed, 1);
      assert.equal((await client.job(id)).status, "pending");
      await c.query("UPDATE leaseq.jobs SET run_at = clock_timestamp() WHERE id = $1", [id]); // due again
      const second = await new leaseq.Worker({ connectionString: url, queue, handler }).runUntilIdle();
      assert.equal(second.completed, 1);
      assert.deepEqual(calls, [["charge", 1], ["mail", 2]], "the charge ran once");
      assert.deepEqual(seen, [[1, { charged: 7 }], [2, { charged: 7 }]], "the retry got the recorded output");
      assert.deepEqual(
        (await client.steps(id)).map((s) => [s.name, s.attemptNo, s.output]),
        [["charge", 1, '{"charged": 7}'], ["mail", 2, null]],
      );
      assert.equal(await client.result(id), '{"sent": null, "charge": {"charged": 7}}');
    }),
  ));

test("a transactional handler's steps are kept only with its completion; a lost lease rejects a step", () =>
  withClient(async (client) => {
    const queue = await newQueue(client);
    const id = await client.enqueue(queue, {});
    const ran = [];
    const handler = async (job, { step }) => {
      await step("write", () => ran.push(job.attempt));
      if (job.attempt === 1) throw new Error("rolled back, the step with it");
      return "done";
    };
    await new leaseq.Worker({ connectionString: url, queue, transactional: true, handler }).runUntilIdle();
    assert.deepEqual(await client.steps(id), []);
    await withPg((c) => c.query("UPDATE leaseq.jobs SET run_at = clock_timestamp() WHERE id = $1", [id]));
    const summary = await new leaseq.Worker({ connectionString: url, queue, transactional: true, handler }).runUntilIdle();
    assert.equal(summary.completed, 1);
    assert.deepEqual(ran, [1, 2], "rolled back with attempt 1, so done again");
    assert.deepEqual((await client.steps(id)).map((s) => [s.name, s.attemptNo]), [["write", 2]]);

    const cancelled = await client.enqueue(queue, {});
    let refused;
    let aborted;
    const lost = await new leaseq.Worker({
      connectionString: url,
      queue,
      handler: async (job, { step, signal }) => {
        await client.cancel(job.id);
        refused = await step("late", () => 1).catch((e) => e);
        aborted = signal.aborted;
      },
    }).runUntilIdle();
    assert.match(refused?.message ?? "", /step "late" not recorded: the lease was lost/);
    assert.ok(aborted, "the signal fired");
    assert.deepEqual([lost.lost, lost.completed], [1, 0]);
    assert.deepEqual(await client.steps(cancelled), []);
  }));

test("context.progress is seen by job() while the handler runs", () =>
  withClient(async (client) => {
    const queue = await newQueue(client);
    const id = await client.enqueue(queue, { rows: 4 });
    const seen = [];
    const summary = await new leaseq.Worker({
      connectionString: url,
      queue,
      handler: async (job, { progress }) => {
        for (let done = 1; done <= job.payload.rows; done++) {
          assert.equal(await progress({ done, of: job.payload.rows }), true);
          seen.push((await client.job(job.id)).progress);
        }
        return "all rows";
      },
    }).runUntilIdle();
    assert.equal(summary.completed, 1);
    assert.deepEqual(seen, [1, 2, 3, 4].map((done) => `{"of": 4, "done": ${done}}`));
    const job = await client.job(id);
    assert.deepEqual([job.status, job.progress], ["succeeded", '{"of": 4, "done": 4}']);
    assert.ok(job.progressAt instanceof Date);
  }));

test("a transactional handler's progress is seen at once and holds no renewal back", () =>
  withClient(async (client) => {
    const queue = await newQueue(client);
    const id = await client.enqueue(queue, {});
    let seenDuring;
    const summary = await new leaseq.Worker({
      connectionString: url,
      queue,
      transactional: true,
      lease: 1000,
      handler: async (job, { progress, tx }) => {
        await tx.query("SELECT 1");
        assert.equal(await progress({ phase: "copying" }), true);
        seenDuring = (await client.job(job.id)).progress;
        // Three leases long: only the heartbeat's renewals keep the job.
        await new Promise((r) => setTimeout(r, 3000));
        return "copied";
      },
    }).runUntilIdle();
    assert.equal(seenDuring, '{"phase": "copying"}', "not waiting for the handler's transaction");
    assert.deepEqual([summary.completed, summary.fenced, summary.lost], [1, 0, 0], "the lease held");
    const job = await client.job(id);
    assert.deepEqual([job.status, job.result, job.progress], ["succeeded", '"copied"', '{"phase": "copying"}']);
    assert.deepEqual((await client.attempts(id)).map((a) => a.outcome), ["succeeded"]);
  }));

test("a lost lease's progress is not kept and aborts the signal", () =>
  withClient(async (client) => {
    const queue = await newQueue(client);
    const id = await client.enqueue(queue, {});
    let kept;
    let aborted;
    const summary = await new leaseq.Worker({
      connectionString: url,
      queue,
      handler: async (job, { progress, signal }) => {
        assert.equal(await progress("started"), true);
        await client.cancel(job.id);
        kept = await progress("after the cancel");
        aborted = signal.aborted;
        return "not sent";
      },
    }).runUntilIdle();
    assert.equal(kept, false);
    assert.ok(aborted, "the signal fired");
    assert.deepEqual([summary.lost, summary.completed], [1, 0]);
    const job = await client.job(id);
    assert.deepEqual([job.status, job.progress, job.result], ["cancelled", '"started"', null]);
  }));

test("a committed enqueue wakes an idle worker, and stop() drains it", () =>
  withClient(async (client) => {
    const queue = await newQueue(client);
    let woke;
    const worker = new leaseq.Worker({
      connectionString: url,
      queue,
      poll: 600_000,
      handler: () => {
        woke = performance.now();
      },
    });
    const running = worker.run();
    await new Promise((r) => setTimeout(r, 500)); // idle, its poll ten minutes away
    const enqueued = performance.now();
    await client.enqueue(queue, {});
    for (let i = 0; i < 100 && woke === undefined; i++) await new Promise((r) => setTimeout(r, 10));
    worker.stop();
    const summary = await running;
    assert.equal(summary.completed, 1);
    assert.ok(woke !== undefined && woke - enqueued < 500, `woken after ${woke - enqueued} ms`);
    assert.deepEqual(await statuses(queue), { succeeded: 1 });
  }));

test("an idle worker whose sessions are cut listens again long before its poll", { timeout: 60_000 }, () =>
  withClient(async (client) => {
    const queue = await newQueue(client);
    // Its sessions are told apart by their application name (the test files run side by side).
    const name = `leaseq-relisten-${process.pid}`;
    const conninfo = new URL(url);
    conninfo.searchParams.set("application_name", name);
    const theirs = "FROM pg_stat_activity WHERE application_name = $1 AND backend_start > $2";
    const until = async (ready) => {
      for (let i = 0; i < 1000; i++) {
        if (await ready()) return true;
        await new Promise((r) => setTimeout(r, 10));
      }
      return false;
    };
    const beganSince = (since, besides = []) =>
      withPg(async (c) => (await c.query(`SELECT count(*)::int AS n ${theirs} AND pid <> ALL($3)`, [name, since, besides])).rows[0].n);
    const worker = new leaseq.Worker({ connectionString: conninfo.href, queue, poll: 600_000, handler: () => null });
    const running = worker.run();
    await until(async () => (await beganSince("-infinity")) >= 1); // its LISTEN, where it claims
    await new Promise((r) => setTimeout(r, 500)); // its first claim found nothing: idle
    // As a failover does: every session of the idle worker ends, and nothing tells it.
    const sql = `SELECT array_agg(pid) FILTER (WHERE pg_terminate_backend(pid)) AS pids ${theirs}`;
    const cut = await withPg(async (c) => (await c.query(sql, [name, "-infinity"])).rows[0].pids ?? []);
    assert.ok(cut.length >= 1, `${cut.length} sessions cut`);
    // Told apart by pid, not by time: a loaded machine may start its new session before the
    // statement that cut the old ones has ended.
    const back = await until(async () => (await beganSince("-infinity", cut)) > 0);
    await new Promise((r) => setTimeout(r, 500)); // its claim after connecting again found nothing
    const id = await client.enqueue(queue, {});
    // Its poll is ten minutes away: only a NOTIFY on a new session can have woken it.
    const done = await until(async () => (await client.job(id)).status === "succeeded");
    worker.stop();
    const summary = await running;
    assert.ok(back, "the worker connected again at once, not at its poll");
    assert.ok(done && summary.completed === 1, "woken by a NOTIFY on its new session");
  }));

test("prefetch holds jobs beyond the slots and hands back the unstarted on stop()", () =>
  withClient(async (client) => {
    const queue = await newQueue(client);
    await client.enqueueBatch(queue, Array.from({ length: 20 }, () => ({})));
    let open;
    const gate = new Promise((r) => (open = r));
    let running = 0;
    let peak = 0;
    const worker = new leaseq.Worker({
      connectionString: url,
      queue,
      concurrency: 2,
      prefetch: 5,
      batch: 10,
      handler: async () => {
        peak = Math.max(peak, ++running);
        await gate;
        running -= 1;
      },
    });
    const until = async (want) => {
      for (let i = 0; i < 500; i++) {
        const now = await statuses(queue);
        if (JSON.stringify(now) === JSON.stringify(want)) return now;
        await new Promise((r) => setTimeout(r, 10));
      }
      return statuses(queue);
    };
    const run = worker.run();
    assert.deepEqual(await until({ pending: 13, running: 7 }), { pending: 13, running: 7 }, "2 running, 5 prefetched");
    worker.stop();
    assert.deepEqual(await until({ pending: 18, running: 2 }), { pending: 18, running: 2 }, "the prefetched go back first");
    open();
    const summary = await run;
    assert.equal(peak, 2, "never more handlers than slots");
    assert.deepEqual([summary.completed, summary.handedBack], [2, 5]);
    const handed = await withPg((c) =>
      c.query(
        `SELECT count(*)::int AS n FROM leaseq.attempts a JOIN leaseq.jobs j ON j.id = a.job_id
          WHERE j.queue = $1 AND a.outcome = 'handed_back' AND a.attempt_no = 1
            AND j.status = 'pending' AND j.attempts = 0`,
        [queue],
      ),
    );
    assert.equal(handed.rows[0].n, 5, "handed back with no attempt spent, in history");
  }));

test("prefetch out of range is refused before anything runs", () => {
  for (const prefetch of [-1, 1.5, 10001]) {
    assert.throws(
      () => new leaseq.Worker({ connectionString: url, queue: "q", handler: () => null, prefetch }),
      (e) => e instanceof RangeError && /prefetch must be an integer between 0 and 10000/.test(e.message),
    );
  }
});

test("stop() while a claim is out ends the run at once, not at the next poll", { timeout: 20_000 }, () =>
  withClient(async (client) => {
    const queue = await newQueue(client);
    // The claim is held up by a lock on the queues, and stop() comes while it waits.
    await withPg(async (holder) => {
      await holder.query("BEGIN");
      await holder.query("LOCK TABLE leaseq.queues IN ACCESS EXCLUSIVE MODE");
      const worker = new leaseq.Worker({ connectionString: url, queue, poll: 600_000, handler: () => null });
      const running = worker.run();
      for (let waiting = 0; waiting === 0; await new Promise((r) => setTimeout(r, 20))) {
        const { rows } = await client.pool.query(
          "SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%queue_claim%'",
        );
        waiting = rows[0].n;
      }
      worker.stop();
      const stopped = performance.now();
      const released = new Promise((resolve) => setTimeout(resolve, 300)).then(() => holder.query("ROLLBACK"));
      await running;
      assert.ok(performance.now() - stopped < 5000, `ended ${performance.now() - stopped} ms after stop()`);
      await released;
    });
  }));

test("a worker that cannot connect says where and why", async () => {
  const worker = new leaseq.Worker({
    connectionString: "postgresql://nobody@127.0.0.1:1/nowhere",
    queue: "q",
    handler: () => null,
  });
  await assert.rejects(worker.runUntilIdle(), (e) => {
    assert.ok(e instanceof leaseq.ConnectionFailed);
    assert.match(e.message, /^cannot connect to 127\.0\.0\.1:1\/nowhere as nobody: .*ECONNREFUSED/);
    return true;
  });
});
