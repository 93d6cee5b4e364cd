// The Worker across a network partition: its connections go through a proxy that can go silent
// (every byte dropped, no RST, no FIN), while the test reads the database directly.
import assert from "node:assert/strict";
import net from "node:net";
import { test } from "node:test";

import * as leaseq from "../dist/esm/index.js";
import { newQueue, statuses, url, withClient, withPg } from "./helpers.mjs";

/** A TCP proxy on 127.0.0.1 in front of the test server. `silence()` partitions it: every
 * connection open passes nothing more either way and is never closed, and connections made
 * meanwhile are held without reaching the server. `heal()` forwards the connections made from
 * then on; those open across the partition stay silent, as when the far end gave up on them
 * meanwhile — nothing tells the worker, only its own bounds. */
class Partition {
  silent = false;
  /** Bytes that, any of them sent by a worker, silence the proxy before they pass (see
   * `silenceOn`). */
  #trigger;
  #silenced = () => {};
  /** Each connection: the worker's socket, the server's (none when made while silent). */
  #pairs = new Set();
  #server;
  #target;

  static async start() {
    const proxy = new Partition();
    const target = new URL(url);
    proxy.#target = { host: target.hostname, port: Number(target.port || 5432) };
    proxy.#server = net.createServer((socket) => proxy.#accept(socket));
    await new Promise((resolve) => proxy.#server.listen(0, "127.0.0.1", resolve));
    return proxy;
  }

  /** The test database's URL, through the proxy. */
  get url() {
    const through = new URL(url);
    through.hostname = "127.0.0.1";
    through.port = String(this.#server.address().port);
    return through.href;
  }

  silence() {
    this.silent = true;
    this.#trigger = undefined;
    for (const pair of this.#pairs) pair.dead = true;
    this.#silenced();
  }

  heal() {
    this.silent = false;
  }

  /** Silences the proxy when a worker sends a message holding one of `texts` (a prepared
   * statement's name, "COMMIT"), that message dropped with the rest; resolves then. */
  silenceOn(...texts) {
    this.#trigger = texts.map((text) => Buffer.from(`${text}\0`));
    return new Promise((resolve) => (this.#silenced = resolve));
  }

  /** Closes every connection: the server's sessions end. */
  async close() {
    for (const { worker, server } of this.#pairs) {
      worker.destroy();
      server?.destroy();
    }
    this.#pairs.clear();
    if (this.#server.listening) await new Promise((resolve) => this.#server.close(resolve));
  }

  #accept(worker) {
    const pair = { dead: this.silent, worker, server: undefined };
    this.#pairs.add(pair);
    worker.on("error", () => {}); // a reset at the test's teardown
    if (!pair.dead) {
      pair.server = net.connect(this.#target);
      pair.server.on("error", () => {});
      pair.server.on("data", (bytes) => pair.dead || pair.worker.write(bytes));
      // A live pair closes together; a dead one stays open at the other end, as in a partition.
      pair.server.on("close", () => pair.dead || pair.worker.destroy());
      worker.on("close", () => pair.dead || pair.server.destroy());
    }
    worker.on("data", (bytes) => {
      if (!pair.dead && this.#trigger?.some((t) => bytes.includes(t))) this.silence();
      if (!pair.dead) pair.server.write(bytes);
    });
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));

/** Resolves with what `promise` gives, or rejects once `ms` have passed. */
function within(ms, promise, what) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not within ${ms} ms`)), ms);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

/** Polls `ready` every 20 ms until it holds or `ms` have passed; whether it held. */
async function until(ms, ready) {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    if (await ready()) return true;
    await sleep(20);
  }
  return ready();
}

/** A promise and its resolve. */
function signalled() {
  let resolve;
  const promise = new Promise((r) => (resolve = r));
  return { promise, resolve };
}

/** Resolves when `signal` aborts. */
const aborted = (signal) =>
  new Promise((resolve) => {
    if (signal.aborted) resolve();
    else signal.addEventListener("abort", () => resolve(), { once: true });
  });

/** The running attempt's lease expiry, as the server holds it. */
const leaseExpiry = (c, id) =>
  c.query("SELECT lease_expires_at AS at FROM leaseq.jobs WHERE id = $1", [id]).then((r) => r.rows[0].at);

/** The server's clock now, on a connection made beforehand. */
const serverNow = (c) => c.query("SELECT clock_timestamp() AS at").then((r) => r.rows[0].at);

/** Runs `f(proxy, client, c)` with a proxy, a Client and a direct pg connection (not through the
 * proxy), closing them after. */
async function partitioned(f) {
  const proxy = await Partition.start();
  try {
    return await withPg((c) => withClient((client) => f(proxy, client, c)));
  } finally {
    await proxy.close();
  }
}

test("a handler cut off from the database is told it lost its job before the lease ends on the server's clock", { timeout: 20_000 }, () =>
  partitioned(async (proxy, client, c) => {
    const queue = await newQueue(client);
    const id = await client.enqueue(queue, {});
    const started = signalled();
    const told = signalled();
    const worker = new leaseq.Worker({
      connectionString: proxy.url,
      queue,
      lease: 2000,
      poll: 600_000,
      handler: async (job, { signal }) => {
        started.resolve();
        await aborted(signal);
        told.resolve(serverNow(c));
        return "too late";
      },
    });
    const running = worker.run();
    await within(5000, started.promise, "the job started");
    proxy.silence();
    const heard = await within(5000, told.promise, "the handler was told");
    // Read after it was told: the last renewal the server accepted, if any, is in.
    const ends = await leaseExpiry(c, id);
    assert.ok(heard < ends, `told at ${heard.toISOString()}, the lease ends at ${ends.toISOString()}`);
    assert.ok(ends - heard < 1000, `told ${ends - heard} ms before the lease's end: not at the first trouble`);
    worker.stop();
    const summary = await within(10_000, running, "the run ended");
    assert.deepEqual([summary.lost, summary.completed], [1, 0]);
  }));

test("a job whose lease was given up is not finished, even when the database answers again before the lease ends", { timeout: 20_000 }, () =>
  partitioned(async (proxy, client, c) => {
    const queue = await newQueue(client);
    const id = await client.enqueue(queue, {});
    const started = signalled();
    const handlerReturns = signalled();
    let toldFirst;
    const worker = new leaseq.Worker({
      connectionString: proxy.url,
      queue,
      lease: 6000, // given up 600 ms before its end, unless renewed
      poll: 600_000,
      handler: async (job, { signal }) => {
        started.resolve();
        await handlerReturns.promise;
        toldFirst = signal.aborted;
        return "late"; // as a handler that ignores its signal
      },
    });
    const running = worker.run();
    await within(5000, started.promise, "the job started");
    proxy.silence();
    const ends = await leaseExpiry(c, id);
    // The database answers again, and the handler returns, while the server still holds the
    // lease: a completion sent now would be accepted. The worker gave the lease up before.
    await sleep(ends - Date.now() - 550);
    proxy.heal();
    await sleep(ends - Date.now() - 500);
    handlerReturns.resolve();
    await sleep(ends - Date.now() + 300);
    const job = await client.job(id);
    const outcomes = (await client.attempts(id)).map((a) => a.outcome);
    assert.ok(job.status !== "succeeded" && job.result === null, `never completed by the worker: ${job.status}`);
    assert.ok(!outcomes.includes("succeeded"), `its attempts: ${outcomes}`);
    assert.equal(toldFirst, true, "the handler was told before it returned");
    worker.stop();
    const summary = await within(10_000, running, "the run ended");
    assert.deepEqual([summary.lost, summary.completed, summary.fenced], [1, 0, 0]);
  }));

test("a claim left unanswered by a silent connection is sent again after the heal, long before the poll", { timeout: 20_000 }, () =>
  partitioned(async (proxy, client) => {
    // The queue's lease, 2 s, is what the worker's claims wait for, once a claim has told it.
    const queue = await newQueue(client, { lease: 2000 });
    await client.enqueue(queue, { first: true });
    const worker = new leaseq.Worker({ connectionString: proxy.url, queue, poll: 600_000, handler: () => "done" });
    const running = worker.run();
    assert.ok(await until(5000, async () => (await statuses(queue)).succeeded === 1), "the first job ran");
    await sleep(300); // its next claim found nothing: idle, its poll ten minutes away
    // The claim reads trace contexts only under an OpenTelemetry SDK: either statement.
    const silenced = proxy.silenceOn("leaseq.claim", "leaseq.claim_untraced");
    const during = await client.enqueue(queue, { during: true }); // its NOTIFY wakes the worker
    await within(5000, silenced, "a claim went out");
    await sleep(500);
    proxy.heal();
    const healed = performance.now();
    // The claim is dropped after a lease (2 s), and sent again; the LISTEN connection, silent
    // too, is replaced, so that a job enqueued later wakes the worker.
    assert.ok(await until(8000, async () => (await client.job(during)).status === "succeeded"), "claimed after the heal");
    const claimedAfter = performance.now() - healed;
    await sleep(300);
    const enqueued = performance.now();
    const after = await client.enqueue(queue, { after: true });
    assert.ok(await until(5000, async () => (await client.job(after)).status === "succeeded"), "woken after the heal");
    const wokenAfter = performance.now() - enqueued;
    worker.stop();
    const summary = await within(10_000, running, "the run ended");
    assert.equal(summary.completed, 3);
    assert.ok(claimedAfter < 5000, `claimed ${claimedAfter} ms after the heal`);
    assert.ok(wokenAfter < 2000, `the job enqueued after the heal ran ${wokenAfter} ms later`);
  }));

test("a transactional handler cut off from the database is told in time, freed from its transaction, and never commits", { timeout: 20_000 }, () =>
  partitioned(async (proxy, client, c) => {
    const queue = await newQueue(client);
    const effects = `${queue}_effects`;
    await c.query(`CREATE TABLE ${effects} (job_id bigint PRIMARY KEY)`);
    const id = await client.enqueue(queue, {});
    const wrote = signalled();
    const freed = signalled();
    const worker = new leaseq.Worker({
      connectionString: proxy.url,
      queue,
      lease: 2000,
      poll: 600_000,
      transactional: true,
      handler: async (job, { tx, signal }) => {
        await tx.query(`INSERT INTO ${effects} VALUES ($1)`, [job.id]);
        wrote.resolve();
        // Sent on the silent connection: answered never, rejected once the lease is given up.
        const stuck = await tx.query("SELECT 1").then(
          () => "answered",
          (e) => e,
        );
        freed.resolve([await serverNow(c), signal.aborted, stuck]);
        return "too late";
      },
    });
    const running = worker.run();
    await within(5000, wrote.promise, "the handler wrote");
    proxy.silence();
    const [at, told, stuck] = await within(5000, freed.promise, "the handler was freed");
    const ends = await leaseExpiry(c, id);
    assert.ok(at < ends, `freed at ${at.toISOString()}, the lease ends at ${ends.toISOString()}`);
    assert.ok(told, "its signal aborted");
    assert.ok(stuck instanceof Error, `its query on the silent transaction was rejected, not ${stuck}`);
    proxy.heal();
    worker.stop();
    const summary = await within(10_000, running, "the run ended");
    assert.deepEqual([summary.lost, summary.completed], [1, 0]);
    const { rows } = await c.query(`SELECT count(*)::int AS n FROM ${effects}`);
    assert.equal(rows[0].n, 0, "its write never committed");
    assert.equal((await client.job(id)).status, "running", "left to its lease");
    await proxy.close(); // its session ends, rolling its transaction back, before the table goes
    await c.query(`DROP TABLE ${effects}`);
  }));

test("a completion left unanswered is given up within its bound, and stop() is not held by it", { timeout: 20_000 }, () =>
  partitioned(async (proxy, client) => {
    const queue = await newQueue(client);
    const worker = new leaseq.Worker({ connectionString: proxy.url, queue, lease: 2000, poll: 600_000, handler: () => "done" });
    const running = worker.run();
    await sleep(300); // idle
    const silenced = proxy.silenceOn("leaseq.complete_batch");
    const id = await client.enqueue(queue, {});
    await within(5000, silenced, "its completion went out");
    const sent = performance.now();
    await sleep(500);
    proxy.heal();
    worker.stop();
    const summary = await within(10_000, running, "the run ended");
    // The least wait of a finishing call (5 s), its lease being shorter.
    const ended = performance.now() - sent;
    assert.ok(ended > 4500 && ended < 7000, `the run ended ${ended} ms after the completion went out`);
    assert.deepEqual([summary.completed, summary.lost], [0, 1], "left to its lease");
    assert.equal((await client.job(id)).status, "running", "the completion never reached the server");
  }));

test("a transactional handler's commit left unanswered is given up by the lease's end, and stop() is not held by it", { timeout: 20_000 }, () =>
  partitioned(async (proxy, client) => {
    const queue = await newQueue(client);
    const worker = new leaseq.Worker({
      connectionString: proxy.url,
      queue,
      lease: 2000,
      poll: 600_000,
      transactional: true,
      handler: () => "done",
    });
    const running = worker.run();
    await sleep(300); // idle
    const silenced = proxy.silenceOn("COMMIT");
    const id = await client.enqueue(queue, {});
    await within(5000, silenced, "its commit went out");
    const sent = performance.now();
    await sleep(500);
    proxy.heal();
    worker.stop();
    const summary = await within(10_000, running, "the run ended");
    // Its lease (2 s) is given up unrenewed, and its transaction with it, before the least wait
    // of a finish (5 s) is over.
    const ended = performance.now() - sent;
    assert.ok(ended < 4000, `the run ended ${ended} ms after the commit went out`);
    assert.deepEqual([summary.completed, summary.lost], [0, 1], "left to its lease");
    assert.equal((await client.job(id)).status, "running", "its transaction never committed");
  }));

test("a worker stopped while its idle connections are silent ends at once", { timeout: 20_000 }, () =>
  partitioned(async (proxy, client) => {
    const queue = await newQueue(client);
    // Transactional: its handlers' pool holds idle connections too.
    const worker = new leaseq.Worker({ connectionString: proxy.url, queue, poll: 600_000, transactional: true, handler: () => "done" });
    const running = worker.run();
    const id = await client.enqueue(queue, {});
    assert.ok(await until(5000, async () => (await client.job(id)).status === "succeeded"), "a job ran");
    await sleep(300); // idle: every connection back in its pool
    proxy.silence();
    const stopped = performance.now();
    worker.stop();
    await within(5000, running, "the run ended");
    const ended = performance.now() - stopped;
    assert.ok(ended < 2500, `the run ended ${ended} ms after stop()`);
  }));
