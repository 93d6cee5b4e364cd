// The worker loop, as the Rust and Python Workers do it: claims into free slots only, one
// heartbeat renewing every held lease with one `queue_renew_batch`, outcomes that arrive
// together finished with one `queue_complete_batch` / `queue_fail_batch` per kind, LISTEN
// wake-ups, backoff on database trouble, and a drain on `stop()`. Each job's `signal` aborts when
// its lease is lost or the worker shuts down past its grace: whatever the handler returns then is
// never sent. With `transactional: true` the handler gets `tx`, a client inside an open
// transaction, and the job is completed in that same transaction: its writes commit only if
// the completion is accepted. With `prefetch: n` (opt-in) claims also fill n places for jobs
// that wait, in claim order, for the next free slot, their leases renewed with the others; at
// `stop()` those not started are handed back (`queue_hand_back`: due again at once, no attempt
// spent). The trade — fairness between workers, `started_at` is the claim — is in docs/design.md.

import os from "node:os";
import { setTimeout as delay } from "node:timers/promises";

import pg from "pg";

import * as calls from "./calls.js";
import type { Job } from "./calls.js";
import { connectTimeoutOf, run, whereOf } from "./client.js";
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
  /** A durable step: runs `fn` unless an earlier attempt of the job recorded step `name`, records
   * what it returned as the step's output (`queue_step`, under the job's lease) and returns it;
   * when already recorded, returns the recorded output (parsed; none: null) without calling
   * `fn`. Recorded in `tx` with `transactional: true` (kept only if the job completes), else in
   * a statement of its own once `fn` is done. Rejects, and aborts `signal`, when the lease turns
   * out lost (the step is then not recorded). */
  step<T>(name: string, fn: () => Promise<T> | T): Promise<T>;
  /** Reports how far the job has got (any JSON value, or `Json`), under its lease
   * (`queue_progress`), replacing the last report: `client.job(id)` shows it while the job runs.
   * Always in a statement of its own, on the worker's pool — also with `transactional: true`:
   * a report in `tx` would be seen only once the job completes, and would hold the job's lease
   * renewals back until then. True: kept; false, changing nothing: the lease was lost, and
   * `signal` aborts (what the handler returns will not be sent). */
  progress(value: unknown): Promise<boolean>;
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
  /** Jobs claimed beyond the free slots, waiting for one; handed back unstarted on `stop()`. */
  prefetch?: number;
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
  /** Prefetched jobs never started, handed back on `stop()`. */
  handedBack: number;
}

interface Decision {
  job: Job;
  kind: "complete" | "fail" | "dead" | "snooze";
  document?: unknown;
  delayMs?: number;
}

/** A job the worker holds, from its claim until its outcome is sent. Its AbortSignal is made
 * only when a handler reads it (most never do): a lost lease is a flag first. */
class Held {
  lost = false;
  private reason?: Error;
  private controller?: AbortController;

  constructor(readonly job: Job) {}

  lose(reason: Error): void {
    if (this.lost) return;
    this.lost = true;
    this.reason = reason;
    this.controller?.abort(reason);
  }

  get signal(): AbortSignal {
    if (this.controller === undefined) {
      this.controller = new AbortController();
      if (this.lost) this.controller.abort(this.reason);
    }
    return this.controller.signal;
  }

  /** What its handler gets; `db` runs its progress reports, and its steps' calls when it has
   * no `tx`. */
  context(db: pg.Pool, tx?: pg.PoolClient): HandlerContext {
    return new Context(this, db, tx);
  }
}

class Context implements HandlerContext {
  readonly #held: Held;
  readonly #db: pg.Pool;
  /** The steps earlier attempts recorded, name to output (JSON text), read at the first `step`;
   * those this attempt records are added. */
  #steps?: Promise<Map<string, string | null>>;
  /** Steps of this attempt under way: a second `step` of the same name waits for the first. */
  readonly #running = new Map<string, Promise<unknown>>();

  constructor(held: Held, db: pg.Pool, readonly tx?: pg.PoolClient) {
    this.#held = held;
    this.#db = db;
  }
  get signal(): AbortSignal {
    return this.#held.signal;
  }

  /** Bound: `async (job, { step }) => …` works. */
  readonly step = <T>(name: string, fn: () => Promise<T> | T): Promise<T> => {
    const under = this.#running.get(name) as Promise<T> | undefined;
    if (under !== undefined) return under;
    const done = this.#step(name, fn);
    this.#running.set(name, done);
    done.catch(() => this.#running.delete(name)); // a step that failed may be tried again
    return done;
  };

  /** Bound, as `step` is. On the pool, never in `tx` (see `HandlerContext.progress`). */
  readonly progress = async (value: unknown): Promise<boolean> => {
    const kept = await run(this.#db, calls.progress(this.#held.job, value));
    // Only the lease's holder reports, and its report was refused: the lease is gone.
    if (!kept) this.#held.lose(new Error("progress not kept: the lease was lost"));
    return kept;
  };

  async #step<T>(name: string, fn: () => Promise<T> | T): Promise<T> {
    const db = this.tx ?? this.#db;
    this.#steps ??= run(db, calls.steps(this.#held.job.id)).then(
      (rows) => new Map(rows.map((r) => [r.name, r.output])),
    );
    const recorded = await this.#steps;
    if (recorded.has(name)) {
      const output = recorded.get(name) ?? null;
      return (output === null ? null : JSON.parse(output)) as T;
    }
    const value = await fn();
    const output = value === undefined || value === null ? null : calls.documentOf(value);
    if (!(await run(db, calls.step(this.#held.job, name, value)))) {
      // Only the lease's holder records, and it found no record: the lease is gone.
      const lost = new Error(`step ${JSON.stringify(name)} not recorded: the lease was lost`);
      this.#held.lose(lost);
      throw lost;
    }
    recorded.set(name, output);
    return value;
  }
}

/** What a handler's error records as the attempt's error. */
export function errorDocument(e: unknown): Record<string, unknown> {
  return e instanceof Error
    ? { error: e.name, message: e.message, stack: e.stack ?? null }
    : { error: "thrown", message: String(e) };
}

/** Finishing rounds out at once (see `work`). */
const FINISHING_ROUNDS = 2;

/** What a handler's throw decides: dead at once, a snooze, or a failure the queue retries. */
function outcomeOf(e: unknown): Omit<Decision, "job"> {
  return e instanceof Dead
    ? { kind: "dead", document: e.error }
    : e instanceof Snooze
      ? { kind: "snooze", delayMs: e.ms }
      : { kind: "fail", document: errorDocument(e) };
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

export class Worker {
  readonly summary: Summary = { completed: 0, failed: 0, dead: 0, snoozed: 0, lost: 0, fenced: 0, handedBack: 0 };
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
    const prefetch = options.prefetch ?? 0;
    if (!Number.isInteger(prefetch) || prefetch < 0 || prefetch > 10000) {
      throw new RangeError("prefetch must be an integer between 0 and 10000");
    }
    this.ownsPool = options.pool === undefined;
    this.pool =
      options.pool ??
      new pg.Pool({
        connectionString: options.connectionString,
        max: concurrency + 4,
        application_name: "leaseq-node",
        connectionTimeoutMillis: connectTimeoutOf(options.connectionString),
      });
    if (this.ownsPool) {
      // As the Client's: an idle connection the server ends leaves the pool, and is replaced.
      this.pool.on("error", () => {});
    }
    this.where = options.connectionString ? whereOf(options.connectionString) : "the pool's server";
    this.o = {
      queue: options.queue,
      handler: options.handler,
      concurrency,
      lease: options.lease,
      batch: Math.max(1, Math.min(options.batch ?? concurrency + prefetch, 10000)),
      prefetch,
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
    const held = new Map<string, Held>();
    const decisions: Decision[] = [];
    let decided: () => void = () => {};
    // Room for jobs claimed and not done (running or waiting); the jobs waiting for a slot, in
    // claim order (`next` is the first: no shift per job); the handlers running.
    let free = this.o.concurrency + this.o.prefetch;
    let slotFreed: () => void = () => {};
    let waiting: Held[] = [];
    let next = 0;
    let handlers = 0;
    let allReturned: () => void = () => {};
    const halfAClaim = Math.max(1, Math.floor(Math.min(this.o.batch, free) / 2));

    // One connection taken out of the pool for LISTEN, whose notifications end with its session
    // (a failover, a terminated backend): then another one listens, and the loop is woken, for
    // jobs may have come meanwhile — an idle worker would otherwise sleep until its poll.
    let listener: pg.PoolClient | undefined;
    // A wake-up while a claim is out may be for a job that claim's snapshot missed: remembered
    // until the next claim is sent, so the loop claims again instead of waiting for its poll.
    let notified = false;
    const notify = () => {
      notified = true;
      this.wake();
    };
    const stopListening = new AbortController();
    let listeningAgain = Promise.resolve();
    const listen = async (): Promise<void> => {
      const client = await this.pool.connect();
      // Out of the pool, its 'error' has no handler but this one (unhandled, it would end the
      // process): a session in error is gone or of no use, so it is ended, and 'end' follows.
      client.on("error", () => void client.end());
      client.on("notification", notify);
      client.once("end", () => {
        if (client !== listener || stopListening.signal.aborted) return; // or released at shutdown
        listener = undefined;
        client.release(true);
        listeningAgain = listenAgain();
      });
      try {
        await client.query(`LISTEN ${pg.escapeIdentifier(`leaseq_${this.o.queue}`)}`);
      } catch (e) {
        client.release(true);
        throw e;
      }
      listener = client;
    };
    const listenAgain = async (): Promise<void> => {
      for (let backoff = 100; !stopListening.signal.aborted; backoff = Math.min(backoff * 2, 5000)) {
        try {
          await listen();
          notify();
          return;
        } catch {
          await delay(backoff, undefined, { signal: stopListening.signal }).catch(() => {});
        }
      }
    };
    try {
      await listen();
    } catch (e) {
      if (this.ownsPool) await this.pool.end();
      throw connectionFailed(this.where, e);
    }

    let finishing = true;
    // Up to two rounds out at once: one is sent while the other commits.
    const rounds = new Set<Promise<void>>();
    const sendRound = async (round: Decision[]) => {
      try {
        await this.finishRound(round);
      } catch {
        this.summary.lost += round.length; // unsent: left to their leases
      }
      for (const d of round) held.delete(d.job.id);
    };
    const finisher = (async () => {
      while (finishing || decisions.length > 0 || rounds.size > 0) {
        if (decisions.length === 0 || rounds.size === FINISHING_ROUNDS) {
          await Promise.race([new Promise<void>((resolve) => (decided = resolve)), ...rounds]);
          continue;
        }
        const round = sendRound(decisions.splice(0, decisions.length));
        rounds.add(round);
        void round.then(() => {
          rounds.delete(round);
          decided();
        });
      }
    })();

    const stopBeating = new AbortController();
    const heartbeat = (async () => {
      while (!stopBeating.signal.aborted) {
        const jobs = [...held.values()].filter((h) => !h.lost);
        // Every held lease renewed at a third of the shortest (nothing held: look again soon).
        const shortest = jobs.length > 0 ? Math.min(...jobs.map((h) => h.job.leaseMs)) : 300;
        try {
          await delay(Math.min(Math.max(shortest / 3, 50), 10000), undefined, { signal: stopBeating.signal });
        } catch {
          return; // stopped
        }
        const now = [...held.values()].filter((h) => !h.lost);
        if (now.length === 0) continue;
        try {
          const expiries = await run(this.pool, calls.renewBatch(now.map((h) => h.job), this.o.lease));
          expiries.forEach((expiry, i) => {
            if (expiry === null) now[i]?.lose(new Error("the lease was lost"));
          });
        } catch {
          // Database trouble: try again next beat; a lease that runs out meanwhile is lost.
        }
      }
    })();

    // Waiting jobs take the free slots in claim order; one whose lease is gone is not ours.
    const startWaiting = () => {
      while (handlers < this.o.concurrency && next < waiting.length && !this.stopping) {
        const h = waiting[next++]!;
        if (h.lost) {
          this.summary.lost += 1;
          held.delete(h.job.id);
          free += 1;
        } else {
          handlers += 1;
          void runJob(h);
        }
      }
      if (next === waiting.length) (waiting = []), (next = 0);
      slotFreed();
    };

    const runJob = async (h: Held): Promise<void> => {
      let outcome: Omit<Decision, "job"> | undefined;
      try {
        if (this.o.transactional) {
          try {
            await this.runInTransaction(h);
          } catch {
            this.summary.lost += 1; // its transaction or its failure not sent: left to its lease
          }
        } else {
          try {
            outcome = { kind: "complete", document: await this.o.handler(h.job, h.context(this.pool)) };
          } catch (e) {
            outcome = outcomeOf(e);
          }
        }
      } finally {
        // The slot frees as soon as the handler is done: the next job overlaps the finish.
        free += 1;
        handlers -= 1;
        if (outcome === undefined || h.lost) {
          if (h.lost && outcome !== undefined) this.summary.lost += 1;
          held.delete(h.job.id);
        } else {
          decisions.push({ job: h.job, ...outcome });
          decided();
        }
        startWaiting();
        if (handlers === 0) allReturned();
      }
    };

    let backoff = 100;
    try {
      while (!this.stopping) {
        // Claims stay big while jobs wait for slots: half a claim's room, or any when none wait.
        if (free === 0 || (next < waiting.length && free < halfAClaim)) {
          await new Promise<void>((resolve) => (slotFreed = this.wake = resolve));
          continue;
        }
        const asking = Math.min(free, this.o.batch);
        notified = false;
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
        free -= jobs.length;
        for (const job of jobs) {
          const h = new Held(job);
          held.set(job.id, h);
          waiting.push(h);
        }
        startWaiting();
        if (jobs.length > 0) continue;
        if (untilIdle && held.size === 0 && handlers === 0 && decisions.length === 0) break;
        // A stop() while the claim was out woke nothing: look before waiting.
        if (this.stopping) break;
        if (notified) continue;
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, untilIdle ? 50 : this.o.poll);
          this.wake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
      }
      if (next < waiting.length) await this.handBack(waiting.splice(next), held);
      // Drain: running handlers get the grace; the rest are left to their leases.
      if (handlers > 0) {
        const late = setTimeout(() => {
          for (const h of held.values()) h.lose(new Error("the worker shut down past its grace"));
        }, this.o.grace);
        await new Promise<void>((resolve) => (allReturned = resolve));
        clearTimeout(late);
      }
    } finally {
      finishing = false;
      decided();
      await finisher;
      stopBeating.abort();
      await heartbeat;
      stopListening.abort();
      await listeningAgain;
      // Ended, not returned to the pool: its LISTEN goes with its session.
      listener?.release(true);
      if (this.ownsPool) await this.pool.end();
    }
    return this.summary;
  }

  /** Gives back, in one call, the prefetched jobs not started at shutdown; should that fail
   * they are left to their leases. */
  private async handBack(waiting: Held[], held: Map<string, Held>): Promise<void> {
    const jobs = waiting.filter((h) => !h.lost).map((h) => h.job);
    this.summary.lost += waiting.length - jobs.length;
    try {
      const handed = await run(this.pool, calls.handBack(jobs));
      const accepted = handed.filter(Boolean).length;
      this.summary.handedBack += accepted;
      this.summary.lost += handed.length - accepted;
    } catch {
      // Database trouble: they are left to their leases, and retried by the queue's policy.
    } finally {
      for (const h of waiting) held.delete(h.job.id);
    }
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
  private async runInTransaction(held: Held): Promise<void> {
    const job = held.job;
    const tx = await this.pool.connect();
    let outcome: { kind: Decision["kind"] | "completed" | "fenced"; document?: unknown; delayMs?: number };
    try {
      await tx.query("BEGIN");
      try {
        const result = await this.o.handler(job, held.context(this.pool, tx));
        if (await run(tx, calls.complete(job, result))) {
          await tx.query("COMMIT");
          outcome = { kind: "completed" };
        } else {
          await tx.query("ROLLBACK");
          outcome = { kind: "fenced" };
        }
      } catch (e) {
        await tx.query("ROLLBACK");
        outcome = outcomeOf(e);
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
