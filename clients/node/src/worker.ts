// The worker loop, as the Rust and Python Workers do it: claims into free slots only, one
// heartbeat renewing every held lease with one `queue_renew_batch`, outcomes that arrive
// together finished with one `queue_complete_batch` / `queue_fail_batch` per kind, LISTEN
// wake-ups, backoff on database trouble, and a drain on `stop()`. Each job's `signal` aborts when
// its lease is lost or the worker shuts down past its grace: whatever the handler returns then is
// never sent. With `transactional: true` the handler gets `tx`, a client inside an open
// transaction, and the job is completed in that same transaction: its writes commit only if
// the completion is accepted.

import os from "node:os";
import { setTimeout as delay } from "node:timers/promises";

import pg from "pg";

import * as calls from "./calls.js";
import type { Job } from "./calls.js";
import { run, whereOf } from "./client.js";
import { LeaseqError, connectionFailed } from "./errors.js";

/** Thrown by a handler: the job goes dead at once, no retry. */
export class Dead extends Error {
  constructor(readonly error?: unknown) {
    super(typeof error === "string" ? error : JSON.stringify(error ?? null));
    this.name = "Dead";
  }
}

/** Thrown by a handler: not ready yet — the job comes back after `ms`, its budget kept. */
export class Snooze extends Error {
  constructor(readonly ms: number) {
    super(`snooze ${ms} ms`);
    this.name = "Snooze";
  }
}

export interface HandlerContext {
  /** Aborted when the lease is lost or the worker shuts down past its grace. */
  signal: AbortSignal;
  /** With `transactional: true`: the client inside the transaction that completes the job. */
  tx?: pg.PoolClient;
}

export type Handler = (job: Job, context: HandlerContext) => Promise<unknown> | unknown;

export interface WorkerOptions {
  connectionString?: string;
  pool?: pg.Pool;
  queue: string;
  handler: Handler;
  concurrency?: number;
  /** Milliseconds; the queue's lease when left out. */
  lease?: number;
  batch?: number;
  transactional?: boolean;
  /** Milliseconds between looks when no NOTIFY comes. */
  poll?: number;
  /** Milliseconds running handlers get to finish on `stop()`. */
  grace?: number;
  workerId?: string;
}

export interface Summary {
  completed: number;
  failed: number;
  dead: number;
  snoozed: number;
  /** Jobs whose lease was lost before they finished (never completed nor failed by us). */
  lost: number;
  /** Outcomes the server fenced: the lease ran out between the handler's end and its finish. */
  fenced: number;
}

interface Decision {
  job: Job;
  kind: "complete" | "fail" | "dead" | "snooze";
  document?: unknown;
  delayMs?: number;
  done: () => void;
}

/** What a handler's error records as the attempt's error. */
export function errorDocument(e: unknown): Record<string, unknown> {
  return e instanceof Error
    ? { error: e.name, message: e.message, stack: e.stack ?? null }
    : { error: "thrown", message: String(e) };
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

export class Worker {
  readonly summary: Summary = { completed: 0, failed: 0, dead: 0, snoozed: 0, lost: 0, fenced: 0 };
  private readonly pool: pg.Pool;
  private readonly ownsPool: boolean;
  private readonly o: Required<Omit<WorkerOptions, "connectionString" | "pool" | "lease">> & {
    lease: number | undefined;
  };
  private readonly where: string;
  private stopping = false;
  private wake: () => void = () => {};

  constructor(options: WorkerOptions) {
    const concurrency = options.concurrency ?? 10;
    if (!Number.isInteger(concurrency) || concurrency < 1) {
      throw new RangeError("concurrency must be an integer of at least 1");
    }
    this.ownsPool = options.pool === undefined;
    this.pool =
      options.pool ??
      new pg.Pool({
        connectionString: options.connectionString,
        max: concurrency + 4,
        application_name: "leaseq-node",
      });
    this.where = options.connectionString ? whereOf(options.connectionString) : "the pool's server";
    this.o = {
      queue: options.queue,
      handler: options.handler,
      concurrency,
      lease: options.lease,
      batch: Math.max(1, Math.min(options.batch ?? concurrency, 10000)),
      transactional: options.transactional ?? false,
      poll: options.poll ?? 1000,
      grace: options.grace ?? 30000,
      workerId: options.workerId ?? `${os.hostname()}/pid-${process.pid}/node`,
    };
  }

  /** Works until `stop()` (or SIGTERM/SIGINT, which call it), then drains and resolves. */
  async run(): Promise<Summary> {
    const stop = () => this.stop();
    process.once("SIGTERM", stop);
    process.once("SIGINT", stop);
    try {
      return await this.work(false);
    } finally {
      process.off("SIGTERM", stop);
      process.off("SIGINT", stop);
    }
  }

  /** Works until no job is due and none is held: for tests and batch jobs. */
  runUntilIdle(): Promise<Summary> {
    return this.work(true);
  }

  /** Stops claiming; running handlers get `grace` to finish. */
  stop(): void {
    this.stopping = true;
    this.wake();
  }

  private async work(untilIdle: boolean): Promise<Summary> {
    const held = new Map<string, { job: Job; abort: AbortController }>();
    const running = new Set<Promise<void>>();
    const decisions: Decision[] = [];
    let decided: () => void = () => {};
    let free = this.o.concurrency;
    let slotFreed: () => void = () => {};

    // One connection of the pool held for the run: LISTEN lives as long as its session.
    let listener: pg.PoolClient;
    try {
      listener = await this.pool.connect();
    } catch (e) {
      if (this.ownsPool) await this.pool.end();
      throw connectionFailed(this.where, e);
    }
    listener.on("notification", () => this.wake());
    await listener.query(`LISTEN ${pg.escapeIdentifier(`leaseq_${this.o.queue}`)}`);

    let finishing = true;
    const finisher = (async () => {
      while (finishing || decisions.length > 0) {
        if (decisions.length === 0) {
          await new Promise<void>((resolve) => (decided = resolve));
          continue;
        }
        const round = decisions.splice(0, decisions.length);
        try {
          await this.finishRound(round);
        } catch {
          this.summary.lost += round.length; // unsent: left to their leases
        }
        round.forEach((d) => d.done());
      }
    })();

    const stopBeating = new AbortController();
    const heartbeat = (async () => {
      while (!stopBeating.signal.aborted) {
        const jobs = [...held.values()].filter((h) => !h.abort.signal.aborted);
        // Every held lease renewed at a third of the shortest (nothing held: look again soon).
        const shortest = jobs.length > 0 ? Math.min(...jobs.map((h) => h.job.leaseMs)) : 300;
        try {
          await delay(Math.min(Math.max(shortest / 3, 50), 10000), undefined, { signal: stopBeating.signal });
        } catch {
          return; // stopped
        }
        const now = [...held.values()].filter((h) => !h.abort.signal.aborted);
        if (now.length === 0) continue;
        try {
          const expiries = await run(this.pool, calls.renewBatch(now.map((h) => h.job), this.o.lease));
          expiries.forEach((expiry, i) => {
            if (expiry === null) now[i]?.abort.abort(new Error("the lease was lost"));
          });
        } catch {
          // Database trouble: try again next beat; a lease that runs out meanwhile is lost.
        }
      }
    })();

    const runJob = async (job: Job, abort: AbortController): Promise<void> => {
      let released = false;
      const release = () => {
        if (!released) {
          released = true;
          free += 1;
          slotFreed();
        }
      };
      try {
        if (this.o.transactional) {
          await this.runInTransaction(job, abort.signal);
          return;
        }
        let decision: Omit<Decision, "done">;
        try {
          const result = await this.o.handler(job, { signal: abort.signal });
          decision = { job, kind: "complete", document: result };
        } catch (e) {
          decision =
            e instanceof Dead
              ? { job, kind: "dead", document: e.error }
              : e instanceof Snooze
                ? { job, kind: "snooze", delayMs: e.ms }
                : { job, kind: "fail", document: errorDocument(e) };
        }
        release();
        if (abort.signal.aborted) {
          this.summary.lost += 1;
          return;
        }
        await new Promise<void>((done) => {
          decisions.push({ ...decision, done });
          decided();
        });
      } finally {
        release();
        held.delete(job.id);
      }
    };

    let backoff = 100;
    try {
      while (!this.stopping) {
        if (free === 0) {
          await new Promise<void>((resolve) => (slotFreed = resolve));
          continue;
        }
        const asking = Math.min(free, this.o.batch);
        let jobs: Job[];
        try {
          jobs = await run(this.pool, calls.claim(this.o.queue, this.o.workerId, asking, this.o.lease));
          backoff = 100;
        } catch (e) {
          if (e instanceof LeaseqError && e.sqlstate && ["22", "42", "0A", "54", "3F"].includes(e.sqlstate.slice(0, 2))) {
            throw e; // refused, and would be again
          }
          await sleep(backoff);
          backoff = Math.min(backoff * 2, 5000);
          continue;
        }
        for (const job of jobs) {
          free -= 1;
          const abort = new AbortController();
          held.set(job.id, { job, abort });
          const task = runJob(job, abort);
          running.add(task);
          void task.finally(() => running.delete(task));
        }
        if (jobs.length > 0) continue;
        if (untilIdle && held.size === 0 && running.size === 0 && decisions.length === 0) break;
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, untilIdle ? 50 : this.o.poll);
          this.wake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
      }
      // Drain: running handlers get the grace; the rest are left to their leases.
      const late = setTimeout(() => {
        for (const h of held.values()) h.abort.abort(new Error("the worker shut down past its grace"));
      }, this.o.grace);
      await Promise.allSettled([...running]);
      clearTimeout(late);
    } finally {
      finishing = false;
      decided();
      await finisher;
      stopBeating.abort();
      await heartbeat;
      listener.release();
      if (this.ownsPool) await this.pool.end();
    }
    return this.summary;
  }

  private async finishRound(round: Decision[]): Promise<void> {
    const completes = round.filter((d) => d.kind === "complete");
    if (completes.length > 0) {
      const done = await run(this.pool, calls.completeBatch(completes.map((d) => [d.job, d.document])));
      const accepted = done.filter(Boolean).length;
      this.summary.completed += accepted;
      this.summary.fenced += done.length - accepted;
    }
    for (const [kind, retry] of [["fail", true], ["dead", false]] as const) {
      const failing = round.filter((d) => d.kind === kind);
      if (failing.length === 0) continue;
      const statuses = await run(this.pool, calls.failBatch(failing.map((d) => [d.job, d.document]), retry));
      statuses.forEach((s) => this.count(kind, s));
    }
    for (const d of round.filter((d) => d.kind === "snooze")) {
      this.count("snooze", await run(this.pool, calls.snooze(d.job, d.delayMs ?? 0)));
    }
  }

  private count(kind: Decision["kind"], status: calls.JobStatus | null): void {
    if (status === null) this.summary.fenced += 1;
    else if (kind === "snooze") this.summary.snoozed += 1;
    else if (status === "dead") this.summary.dead += 1;
    else this.summary.failed += 1;
  }

  /** The handler and the completion in one transaction, committed only if the completion is
   * accepted; a failure rolls the handler's writes back and fails the job apart. */
  private async runInTransaction(job: Job, signal: AbortSignal): Promise<void> {
    const tx = await this.pool.connect();
    let outcome: { kind: Decision["kind"] | "completed" | "fenced"; document?: unknown; delayMs?: number };
    try {
      await tx.query("BEGIN");
      try {
        const result = await this.o.handler(job, { signal, tx });
        if (await run(tx, calls.complete(job, result))) {
          await tx.query("COMMIT");
          outcome = { kind: "completed" };
        } else {
          await tx.query("ROLLBACK");
          outcome = { kind: "fenced" };
        }
      } catch (e) {
        await tx.query("ROLLBACK");
        outcome =
          e instanceof Dead
            ? { kind: "dead", document: e.error }
            : e instanceof Snooze
              ? { kind: "snooze", delayMs: e.ms }
              : { kind: "fail", document: errorDocument(e) };
      }
    } finally {
      tx.release();
    }
    if (outcome.kind === "completed" || outcome.kind === "fenced") {
      this.summary[outcome.kind] += 1;
    } else if (outcome.kind === "snooze") {
      this.count("snooze", await run(this.pool, calls.snooze(job, outcome.delayMs ?? 0)));
    } else {
      const retry = outcome.kind !== "dead";
      this.count(outcome.kind, await run(this.pool, calls.fail(job, outcome.document, retry)));
    }
  }
}
