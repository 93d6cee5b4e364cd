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
//
// A connection that goes silent (a partition: no answer, no RST, no FIN) holds nothing for ever,
// as in the Rust Worker. A lease's end is counted from when the claim or renewal that granted it
// was *sent* (the server counts from when it ran it, later, so ours comes first); unless a
// renewal has answered by that end less a margin, the lease is given up and `signal` aborts —
// even while a renewal is still out, and a transactional handler's connection is destroyed with
// its transaction. Every call waits for its answer a bounded time, then its connection is
// destroyed (not returned to the pool) and the call counts as database trouble: a renewal until
// the first lease it carries must be given up; a claim a lease (the worker's, else the queue's
// as the last claimed jobs told it, else 30 s), as jobs in a later answer would be lost already;
// a finish, a progress report or a step until the end of the leases it carries, 5 s at least,
// the outcome then left to the lease. A call that went unanswered makes every connection not
// heard from since suspect — dropped, not tried — and the LISTEN connection, on which the claims
// go, is replaced: a worker hears of new jobs again after the partition heals.
//
// The worker's own calls — LISTEN and claims, renewals, finishes — go on a small pool of its own
// (`OWN_CONNECTIONS`, made from the connection string or from the given pool's options), never
// behind handlers: transactions, steps and progress reports use the handlers' pool (the given
// one, or one of `concurrency` connections). An outcome JSON cannot encode, or that the server
// refuses for its document (too large, a data exception), fails its own job only — dead, or
// retried if it was a failure, with the reason as its error — never the rest of its round.
// Stopping: claims stop, prefetched jobs are handed back, handlers get `grace`; past it they are
// abandoned (their jobs left to their leases, counted), and `run()`, stopped by a signal, ends
// the process with it, as a second SIGTERM or SIGINT does at once.

import { EventEmitter } from "node:events";
import os from "node:os";
import { setTimeout as delay } from "node:timers/promises";

import pg from "pg";

import * as calls from "./calls.js";
import * as otel from "./otel.js";
import type { Call, Job } from "./calls.js";
import { connectTimeoutOf, isUnprepared, run, whereOf, withoutPreparedStatements } from "./client.js";
import { LeaseqError, connectionFailed, sqlstateOf } from "./errors.js";

/** Thrown by a handler: the job goes dead at once, no retry. */
export class Dead extends Error {
  /** What the Worker goes by, not the class: a `Dead` from the other build (CommonJS or ESM)
   * or another copy of the package is still one. */
  readonly leaseqOutcome = "dead";
  constructor(readonly error?: unknown) {
    super(typeof error === "string" ? error : safeStringify(error ?? null));
    this.name = "Dead";
  }
}

/** Thrown by a handler: not ready yet — the job comes back after `ms`, its budget kept. */
export class Snooze extends Error {
  readonly leaseqOutcome = "snooze";
  constructor(readonly ms: number) {
    super(`snooze ${ms} ms`);
    this.name = "Snooze";
  }
}

/** Thrown by a handler: the attempt failed, and the job comes back after `after` ms instead of
 * the queue's backoff — its attempt spent, as any failure's (`queue_fail(retry_in => …)`: dead
 * once the budget is). `error`: what the attempt records (default: this error's name, message
 * and stack). */
export class Retry extends Error {
  readonly leaseqOutcome = "retry";
  readonly after: number;
  readonly error: unknown;
  constructor(options: { after: number; error?: unknown }) {
    super(`retry in ${options.after} ms`);
    this.name = "Retry";
    this.after = options.after;
    this.error = options.error;
  }
}

/** The reason a handler's `signal` aborts with when it runs past the Worker's `timeout`. */
export class TimedOut extends Error {
  override name = "TimedOut";
  constructor(readonly ms: number) {
    super(`the handler ran past its timeout of ${ms} ms`);
  }
  /** What the job records. */
  get document(): Record<string, unknown> {
    return { error: "timeout", message: this.message };
  }
}

/** `JSON.stringify(value)`, or a word for a value it cannot encode (a message only). */
function safeStringify(value: unknown): string {
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return "(an error JSON cannot encode)";
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
   * out lost (the step is then not recorded); rejects too when the database has not answered by
   * the lease's end (5 s at least). */
  step<T>(name: string, fn: () => Promise<T> | T): Promise<T>;
  /** Reports how far the job has got (any JSON value, or `Json`), under its lease
   * (`queue_progress`), replacing the last report: `client.job(id)` shows it while the job runs.
   * Always in a statement of its own, on the handlers' pool — also with `transactional: true`:
   * a report in `tx` would be seen only once the job completes, and would hold the job's lease
   * renewals back until then. True: kept; false, changing nothing: the lease was lost, and
   * `signal` aborts (what the handler returns will not be sent). Rejects when the database has
   * not answered by the lease's end (5 s at least). */
  progress(value: unknown): Promise<boolean>;
}

export type Handler = (job: Job, context: HandlerContext) => Promise<unknown> | unknown;

/** Where the worker logs: any of the four levels (`console` fits). Left out, warnings and errors
 * go to `console.error`; `null`: nowhere. Each job's line comes with its `jobId`, `queue`,
 * `attempt` and `key` as fields (never its payload, which may hold secrets). */
export interface Logger {
  debug?(message: string, fields?: Record<string, unknown>): void;
  info?(message: string, fields?: Record<string, unknown>): void;
  warn?(message: string, fields?: Record<string, unknown>): void;
  error?(message: string, fields?: Record<string, unknown>): void;
}

const CONSOLE_TROUBLE: Logger = {
  warn: (message) => console.error(message),
  error: (message) => console.error(message),
};

/** What a Worker emits: each job's start, success, failure (with the handler's error and
 * whether the job will be retried), lost lease and fenced outcome; `error` for database trouble
 * (claims, renewals, finishes), emitted only when something listens. */
export interface WorkerEvents {
  "job:start": [job: Job];
  "job:success": [job: Job, result: unknown];
  "job:failure": [job: Job, error: unknown, willRetry: boolean];
  "job:lost": [job: Job, reason: Error];
  "job:fenced": [job: Job];
  error: [error: unknown];
}

/** `worker.metrics()`: what its runs did so far, and what it holds now. */
export interface WorkerMetrics extends Summary {
  queue: string;
  /** Handlers running now. */
  running: number;
  /** Jobs claimed and not yet finished (running, waiting for a slot, or being finished). */
  held: number;
}

export interface WorkerOptions {
  connectionString?: string;
  /** Your own pool, for your handlers: their transactions (`transactional: true`, which needs
   * its `max` to be at least `concurrency`), steps and progress reports. The worker's own calls
   * go on a few connections of its own, made with this pool's options. Set its
   * `connectionTimeoutMillis`: the worker bounds its waits for a connection, but cannot cancel a
   * connection attempt the pool makes. */
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
  /** No named statements on the worker's connections, nor on `pool`: for a pooler in
   * transaction mode (the README's "Poolers"). Implied by a `pool` marked with
   * `withoutPreparedStatements`. */
  noPreparedStatements?: boolean;
  /** Where the worker logs (see `Logger`). */
  logger?: Logger | null;
  /** Milliseconds a handler may run: past them its `signal` aborts (a `TimedOut`), a
   * transactional handler's connection is destroyed, the handler is abandoned (its slot given to
   * the next job) and its job fails with `{"error": "timeout"}`, retried by the queue's policy. */
  timeout?: number;
}

export interface Summary {
  completed: number;
  failed: number;
  dead: number;
  snoozed: number;
  /** Jobs whose lease was lost before they finished (never completed nor failed by us), or
   * whose outcome went unsent or unanswered: left to their leases. */
  lost: number;
  /** Outcomes the server fenced: the lease ran out between the handler's end and its finish. */
  fenced: number;
  /** Prefetched jobs never started, handed back on `stop()`. */
  handedBack: number;
  /** Jobs whose handler was still running when the grace ran out: left to their leases. */
  abandoned: number;
  /** Jobs whose handler ran past the Worker's `timeout`: failed with a timeout error (also
   * counted `failed` or `dead`). */
  timedOut: number;
}

interface Decision {
  held: Held;
  kind: "complete" | "fail" | "dead" | "snooze" | "retry";
  document?: unknown;
  delayMs?: number;
  /** Its own outcome could not be sent: it fails with the reason instead (`poison`). */
  poisoned?: boolean;
  /** What the handler returned (`job:success`), or threw (`job:failure`). */
  result?: unknown;
  error?: unknown;
}

/** SQLSTATE classes of a claim the server refuses and would refuse again (bad input, a constraint,
 * names and privileges, unsupported, program limits, no schema): thrown, not retried. */
export const REFUSED_CLASSES = ["0A", "22", "23", "3F", "42", "54"];
/** SQLSTATE classes of an outcome the server refuses for its document (a data exception, too
 * large): it would be refused again, so its job fails with the reason instead. */
export const POISON_CLASSES = ["22", "54"];
/** The worker's own connections: LISTEN (claims go on it), a claim while it is replaced, the
 * heartbeat, and the two finishing rounds out at once. */
const OWN_CONNECTIONS = 5;

/** The error a job records when its outcome (`kind`) cannot be sent: why, and the server's
 * SQLSTATE when it refused it. */
export function refusal(kind: Decision["kind"], why: unknown): Record<string, unknown> {
  const sqlstate = sqlstateOf(why);
  if (sqlstate !== undefined) {
    const message = why instanceof LeaseqError ? why.serverMessage : errorOf(why).message;
    return { error: "outcome_refused", outcome: kind, message, sqlstate };
  }
  const message = why instanceof Error ? `${why.name}: ${why.message}` : String(why);
  return { error: "outcome_refused", outcome: kind, message };
}

/** The outcome cannot be sent, and never will: the job fails with the reason as its error —
 * dead, unless it was a failure already (then retried by the queue's policy). */
function poison(d: Decision, why: unknown): void {
  d.error ??= why;
  d.document = new calls.Json(calls.documentOf(refusal(d.kind, why)));
  d.kind = d.kind === "fail" || d.kind === "retry" ? "fail" : "dead";
  delete d.delayMs;
  d.poisoned = true;
}

/** Encodes the decision's document now, in the handler's turn: one JSON cannot encode poisons
 * this decision, not the finisher's round. */
function encode(d: Decision): Decision {
  if (d.document !== undefined && d.document !== null && !(d.document instanceof calls.Json)) {
    try {
      // (undefined for a function or a symbol: no document, as JSON has no such value)
      const text: string | undefined = calls.documentOf(d.document);
      d.document = text === undefined ? null : new calls.Json(text);
    } catch (e) {
      poison(d, e);
    }
  }
  return d;
}

/** How long a claim may wait for its answer before any claim has told the queue's lease. */
export const FIRST_CLAIM_WAIT = 30_000;
/** The least time a call under a lease (a finish, a progress report, a step) waits for its
 * answer, even when the lease is about to end: past it the server refuses anyway, and the fence
 * makes a late or repeated finish safe. */
export const MIN_FINISH_WAIT = 5_000;
/** How long taking a connection and LISTEN may take: it answers at once on a live server. */
const LISTEN_WAIT = 5_000;

/** A timer for `ms` from now (at most ~24 days: Node fires a longer one at once). */
function timeout(f: () => void, ms: number): NodeJS.Timeout {
  return setTimeout(f, Math.min(Math.max(ms, 0), 2 ** 31 - 1));
}

/** How long before a lease's end (as we count it) its handler is told, when no renewal has
 * answered: a tenth of the lease, at most a second — room for a late timer on a busy machine and
 * for the handler to stop, well after the renewal due at a third left. */
function stopMargin(leaseMs: number): number {
  return Math.min(leaseMs / STOP_MARGIN_FRACTION, STOP_MARGIN_CAP);
}
/** The stop margin is 1/STOP_MARGIN_FRACTION of the lease left, STOP_MARGIN_CAP ms at most. */
export const STOP_MARGIN_FRACTION = 10;
export const STOP_MARGIN_CAP = 1000;

/** A job the worker holds, from its claim until its outcome is sent. Its AbortSignal is made
 * only when a handler reads it (most never do): a lost lease is a flag first. */
class Held {
  lost = false;
  /** Told when the lease is lost, once (the worker's log and `job:lost`). */
  onLost?: (reason: Error) => void;
  /** Its handler has started; abandoned: still running when the grace ran out. */
  running = false;
  abandoned = false;
  private reason?: Error;
  private controller?: AbortController;
  /** Called when the lease is lost (see `runInTransaction`). */
  whenLost?: () => void;
  /** The attempt's span (OpenTelemetry), until it ends (`Worker.ended`). */
  span?: otel.Span;
  /** When the lease ends as we count it (`performance.now()` ms): from when the claim or renewal
   * that granted it was sent, never after its end on the server. */
  ends = 0;
  /** Renewed with others from here on (a sixth of its time gone) … */
  early = 0;
  /** … and at the latest here (a third of its time left). */
  due = 0;
  /** Unless a renewal has answered by here, the lease is given up and the handler told. */
  stopAt = 0;

  /** `job`, claimed by the claim sent at `sent`. */
  constructor(
    readonly job: Job,
    sent: number,
  ) {
    this.granted(sent, job.leaseMs);
  }

  /** The server gave `leftMs` to the claim or renewal sent at `sent`. */
  granted(sent: number, leftMs: number): void {
    this.ends = sent + leftMs;
    this.early = sent + leftMs / 6;
    this.due = sent + (leftMs * 2) / 3;
    this.stopAt = this.ends - stopMargin(leftMs);
  }

  /** How long a call under this lease may wait for its answer: until the lease ends, 5 s at
   * least. */
  until(): number {
    return Math.max(this.ends, performance.now() + MIN_FINISH_WAIT);
  }

  lose(reason: Error): void {
    if (this.lost) return;
    this.lost = true;
    this.reason = reason;
    this.controller?.abort(reason);
    this.whenLost?.();
    this.onLost?.(reason);
  }

  /** The handler ran past its timeout: told (its signal aborts, a transaction it has open is
   * destroyed), though the lease stays ours for its failure to be sent. */
  timeOut(reason: TimedOut): void {
    if (this.lost) return;
    this.reason = reason;
    if (this.controller === undefined) this.controller = new AbortController();
    this.controller.abort(reason);
    this.whenLost?.();
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
  context(db: Connections, tx?: pg.PoolClient): HandlerContext {
    return new Context(this, db, tx);
  }
}

/** A transactional completion that cannot be sent (its result does not encode, or the server
 * refuses it for its document): the handler's writes roll back, and the job goes dead with the
 * reason. */
class Poison extends Error {
  override name = "Poison";
  constructor(readonly why: unknown) {
    super("the completion cannot be sent");
  }
}

/** No answer from the database within a call's bound: its connection was destroyed. */
class NoAnswer extends Error {
  override name = "NoAnswer";
}

/** A statement whose answer has nothing to read (BEGIN, COMMIT, LISTEN …). */
function statement(text: string): Call<void> {
  return { query: { text, rowMode: "array" }, decode: () => undefined };
}

/** Listens to a connection's errors while it is out of the pool (unheard, an 'error' ends the
 * process): the call under way rejects with it. */
const unheard = () => {};

/** The worker's calls, each on a connection taken for it — of its own pool, or of the handlers'
 * (`handlers`: transactions, steps, progress) — and waited for until a bound: past it the
 * connection, silent (a partition), is destroyed — never returned to its pool, which would hand
 * it out again — and the call rejects with `NoAnswer`. One clock of silence for both pools: a
 * partition takes them all. */
class Connections {
  /** When the last call that went unanswered was sent (`performance.now()`): a connection not
   * heard from since may be as dead (a partition takes them all), and is dropped, not tried. */
  private silentSince = -Infinity;
  private readonly heardAt = new WeakMap<pg.ClientBase, number>();
  /** Connections taken and not yet given back or destroyed: each goes back once. */
  private readonly out = new Set<pg.PoolClient>();
  private readonly connected = (c: pg.PoolClient) => this.heard(c);

  /** `onSilence` is called when a call goes unanswered. */
  constructor(
    readonly pool: pg.Pool,
    readonly handlers: pg.Pool,
    private readonly onSilence: () => void,
  ) {
    pool.on("connect", this.connected);
    if (handlers !== pool) handlers.on("connect", this.connected);
  }

  close(): void {
    this.pool.off("connect", this.connected);
    this.handlers.off("connect", this.connected);
  }

  heard(c: pg.ClientBase): void {
    this.heardAt.set(c, performance.now());
  }

  /** Whether `c` has answered since the database last went silent. */
  fresh(c: pg.ClientBase): boolean {
    return (this.heardAt.get(c) ?? -Infinity) >= this.silentSince;
  }

  /** `call` on a connection of its own (of `from`), answered by `until` at the latest. */
  async call<T>(call: Call<T>, until: number, from = this.pool): Promise<T> {
    const c = await this.take(until, from);
    try {
      const answer = await this.answer(c, call, until);
      this.release(c);
      return answer;
    } catch (e) {
      // The server's refusal leaves the session usable; anything else may not have.
      this.release(c, sqlstateOf(e) !== undefined ? undefined : errorOf(e));
      throw e;
    }
  }

  /** A connection of `from`, by `until` at the latest; to be given back with `release` (or
   * destroyed with `drop`). */
  async take(until: number, from = this.pool): Promise<pg.PoolClient> {
    for (;;) {
      const c = await this.connect(until, from);
      this.out.add(c);
      c.on("error", unheard);
      if (this.fresh(c)) return c;
      this.drop(c);
    }
  }

  /** `call`'s answer on `c`, taken with `take`, waited for until `until`: past it `c` is
   * destroyed and the call rejects with `NoAnswer`. */
  answer<T>(c: pg.PoolClient, call: Call<T>, until: number): Promise<T> {
    const sent = performance.now();
    return new Promise<T>((resolve, reject) => {
      const timer = timeout(() => {
        this.drop(c);
        if (sent > this.silentSince) {
          this.silentSince = sent;
          this.onSilence();
        }
        reject(new NoAnswer(`no answer from the database within ${Math.round(until - sent)} ms: connection dropped`));
      }, until - sent);
      run(c, call).then(
        (answer) => {
          clearTimeout(timer);
          this.heard(c);
          resolve(answer);
        },
        (e: unknown) => {
          clearTimeout(timer);
          reject(e);
        },
      );
    });
  }

  /** Gives `c` back to the pool; with `error`, the pool ends it instead. */
  release(c: pg.PoolClient, error?: Error): void {
    if (!this.out.delete(c)) return;
    c.off("error", unheard);
    c.release(error);
  }

  /** Destroys `c`, which stopped answering: its socket closed at once, no goodbye waited for. */
  drop(c: pg.PoolClient): void {
    if (!this.out.delete(c)) return;
    c.release(new Error("leaseq: the connection stopped answering"));
    // (`unheard` stays: an error from its last moments must not end the process.)
    c.connection?.stream?.destroy();
  }

  /** `from.connect()`, by `until` at the latest; a connection that comes later goes back. */
  private connect(until: number, from: pg.Pool): Promise<pg.PoolClient> {
    return new Promise<pg.PoolClient>((resolve, reject) => {
      let late = false;
      const timer = timeout(() => {
        late = true;
        reject(new NoAnswer("no connection from the pool in time"));
      }, until - performance.now());
      from.connect().then(
        (c) => {
          if (late) return c.release();
          clearTimeout(timer);
          resolve(c);
        },
        (e: unknown) => {
          clearTimeout(timer);
          reject(e);
        },
      );
    });
  }
}

function errorOf(e: unknown): Error {
  return e instanceof Error ? e : new Error(String(e));
}

class Context implements HandlerContext {
  readonly #held: Held;
  readonly #db: Connections;
  /** The steps earlier attempts recorded, name to output (JSON text), read at the first `step`;
   * those this attempt records are added. */
  #steps?: Promise<Map<string, string | null>>;
  /** Steps of this attempt under way: a second `step` of the same name waits for the first. */
  readonly #running = new Map<string, Promise<unknown>>();

  constructor(held: Held, db: Connections, readonly tx?: pg.PoolClient) {
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
    const kept = await this.#db.call(calls.progress(this.#held.job, value), this.#held.until(), this.#db.handlers);
    // Only the lease's holder reports, and its report was refused: the lease is gone.
    if (!kept) this.#held.lose(new Error("progress not kept: the lease was lost"));
    return kept;
  };

  /** `call` in `tx`, or on a connection of its own; under the job's lease either way. */
  #run<T>(call: Call<T>): Promise<T> {
    const until = this.#held.until();
    return this.tx === undefined
      ? this.#db.call(call, until, this.#db.handlers)
      : this.#db.answer(this.tx, call, until);
  }

  async #step<T>(name: string, fn: () => Promise<T> | T): Promise<T> {
    this.#steps ??= this.#run(calls.steps(this.#held.job.id)).then(
      (rows) => new Map(rows.map((r) => [r.name, r.output])),
    );
    const recorded = await this.#steps;
    if (recorded.has(name)) {
      const output = recorded.get(name) ?? null;
      return (output === null ? null : JSON.parse(output)) as T;
    }
    const value = await fn();
    const output = value === undefined || value === null ? null : calls.documentOf(value);
    if (!(await this.#run(calls.step(this.#held.job, name, value)))) {
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

/** What a handler's throw decides: dead at once, a snooze (both known by their
 * `leaseqOutcome`, whichever build or copy threw them), or a failure the queue retries. */
function outcomeOf(e: unknown): Omit<Decision, "held"> {
  const brand = typeof e === "object" && e !== null ? (e as { leaseqOutcome?: unknown }).leaseqOutcome : undefined;
  if (brand === "dead") return { kind: "dead", document: (e as Dead).error };
  if (brand === "snooze") return { kind: "snooze", delayMs: (e as Snooze).ms };
  if (brand === "retry") {
    const retry = e as Retry;
    return { kind: "retry", document: retry.error ?? errorDocument(e), delayMs: retry.after };
  }
  if (e instanceof TimedOut) return { kind: "fail", document: e.document };
  return { kind: "fail", document: errorDocument(e) };
}

/** The call that sends `group`'s outcomes of `kind`; its answer, one per decision. */
function outcomesCall(kind: Decision["kind"], group: Decision[]): Call<(boolean | calls.JobStatus | null)[]> {
  if (kind === "complete") return calls.completeBatch(group.map((d) => [d.held.job, d.document]));
  if (kind === "snooze" || kind === "retry") {
    const d = group[0]!;
    const one =
      kind === "snooze" ? calls.snooze(d.held.job, d.delayMs ?? 0) : calls.fail(d.held.job, d.document, true, d.delayMs);
    return { query: one.query, decode: (rows) => [one.decode(rows)] };
  }
  return calls.failBatch(group.map((d) => [d.held.job, d.document]), kind === "fail");
}

/** How long the calls for `held` may wait: until the first of their leases ends, 5 s at least. */
function untilFor(held: Held[]): number {
  let ends = Infinity;
  for (const h of held) ends = Math.min(ends, h.ends);
  return Math.max(ends, performance.now() + MIN_FINISH_WAIT);
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** The fields of a job's log lines. */
function fieldsOf(job: Job): Record<string, unknown> {
  return { jobId: job.id, queue: job.queue, attempt: job.attempt, key: job.key };
}

export class Worker extends EventEmitter<WorkerEvents> {
  readonly summary: Summary = {
    completed: 0,
    failed: 0,
    dead: 0,
    snoozed: 0,
    lost: 0,
    fenced: 0,
    handedBack: 0,
    abandoned: 0,
    timedOut: 0,
  };
  /** The worker's own connections (see the top of this file), made by each run. */
  private readonly ownConfig: pg.PoolConfig;
  /** The handlers' pool: the given one, or the worker's, made by each run. */
  private readonly given: pg.Pool | undefined;
  /** No named statements on any of them. */
  private readonly unprepared: boolean;
  private readonly o: Required<Omit<WorkerOptions, "connectionString" | "pool" | "lease" | "noPreparedStatements" | "logger" | "timeout">> & {
    lease: number | undefined;
    timeout: number | undefined;
  };
  private readonly where: string;
  private stopping = false;
  private wake: () => void = () => {};
  private readonly logger: Logger;
  private running = 0;
  /** The jobs the run under way holds. */
  private heldNow = new Map<string, Held>();

  constructor(options: WorkerOptions) {
    super();
    this.logger = options.logger === undefined ? CONSOLE_TROUBLE : (options.logger ?? {});
    const concurrency = options.concurrency ?? 10;
    if (options.timeout !== undefined && !(options.timeout > 0)) {
      throw new RangeError("timeout must be more than 0 ms");
    }
    if (!Number.isInteger(concurrency) || concurrency < 1) {
      throw new RangeError("concurrency must be an integer of at least 1");
    }
    const prefetch = options.prefetch ?? 0;
    if (!Number.isInteger(prefetch) || prefetch < 0 || prefetch > 10000) {
      throw new RangeError("prefetch must be an integer between 0 and 10000");
    }
    const transactional = options.transactional ?? false;
    this.given = options.pool;
    this.unprepared = (options.noPreparedStatements ?? false) || (this.given !== undefined && isUnprepared(this.given));
    if (this.unprepared && this.given !== undefined) withoutPreparedStatements(this.given);
    if (this.given !== undefined && transactional) {
      const max = this.given.options.max ?? 10;
      if (max < concurrency) {
        throw new RangeError(
          `pool max ${max} is smaller than concurrency ${concurrency}: with transactional: true each running ` +
            `handler holds one of the pool's connections for its transaction; give the pool max: ${concurrency} or more`,
        );
      }
    }
    this.ownConfig = this.given?.options ?? {
      connectionString: options.connectionString,
      application_name: "leaseq-node",
      connectionTimeoutMillis: connectTimeoutOf(options.connectionString),
    };
    this.where = options.connectionString ? whereOf(options.connectionString) : "the pool's server";
    this.o = {
      queue: options.queue,
      handler: options.handler,
      concurrency,
      lease: options.lease,
      batch: Math.max(1, Math.min(options.batch ?? concurrency + prefetch, 10000)),
      prefetch,
      transactional,
      poll: options.poll ?? 1000,
      grace: options.grace ?? 30000,
      timeout: options.timeout,
      workerId: options.workerId ?? `${os.hostname()}/pid-${process.pid}/node`,
    };
  }

  /** Works until `stop()`, SIGTERM or SIGINT, then drains and resolves. A second signal (either)
   * ends the process at once; so does the first, once `run()` has resolved, when handlers
   * outlived the grace: what they left running would keep the process alive. */
  async run(): Promise<Summary> {
    let first: NodeJS.Signals | undefined;
    const exitBy = (signal: NodeJS.Signals) => {
      process.off("SIGTERM", onSignal);
      process.off("SIGINT", onSignal);
      process.exit(128 + (os.constants.signals[signal] ?? 0));
    };
    const onSignal = (signal: NodeJS.Signals) => {
      if (first !== undefined) return exitBy(signal);
      first = signal;
      this.stop();
    };
    process.on("SIGTERM", onSignal);
    process.on("SIGINT", onSignal);
    let summary: Summary;
    try {
      summary = await this.work(false);
    } finally {
      process.off("SIGTERM", onSignal);
      process.off("SIGINT", onSignal);
    }
    const signal = first;
    if (signal !== undefined && summary.abandoned > 0) setImmediate(() => exitBy(signal));
    return summary;
  }

  /** `work`, the handler's, until the Worker's `timeout`: past it the handler is told
   * (`Held.timeOut`), abandoned — not waited for — and `TimedOut` thrown. */
  private timed<T>(h: Held, work: () => Promise<T> | T): Promise<T> | T {
    const ms = this.o.timeout;
    // Without a timeout, the handler's own promise: no wrapper to allocate and settle per job.
    return ms === undefined ? work() : this.raced(h, work, ms);
  }

  private async raced<T>(h: Held, work: () => Promise<T> | T, ms: number): Promise<T> {
    const running = (async () => work())();
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = timeout(() => reject(new TimedOut(ms)), ms);
    });
    try {
      return await Promise.race([running, late]);
    } catch (e) {
      if (e instanceof TimedOut) {
        running.catch(() => {}); // abandoned: what it throws later is nobody's
        h.timeOut(e);
        this.summary.timedOut += 1;
        this.logger.warn?.(`leaseq worker: job ${h.job.id}: its handler ran past the timeout of ${ms} ms: it fails with a timeout error`, fieldsOf(h.job));
      }
      throw e;
    } finally {
      clearTimeout(timer);
    }
  }

  /** What its runs did so far, and what it holds now. */
  metrics(): WorkerMetrics {
    return { ...this.summary, queue: this.o.queue, running: this.running, held: this.heldNow.size };
  }

  /** Database trouble: logged, and emitted as `error` when something listens. */
  private trouble(message: string, e: unknown): void {
    this.logger.warn?.(`leaseq worker: ${message}: ${errorOf(e).message}`, { queue: this.o.queue });
    if (this.listenerCount("error") > 0) this.emit("error", e);
  }

  /** A job's outcome, as the server answered it (`answer`: the completion's boolean, else the
   * job's status; null or false: fenced). */
  private finished(d: Decision, answer: boolean | calls.JobStatus | null): void {
    const job = d.held.job;
    if (answer === null || answer === false) {
      this.ended(d.held, "fenced");
      return this.fenced(job);
    }
    const timedOut = d.error instanceof TimedOut;
    this.ended(d.held, timedOut ? "timed_out" : answer === "dead" ? "dead" : d.kind, d.error);
    if (d.kind === "complete") {
      this.logger.debug?.(`leaseq worker: job ${job.id} succeeded`, fieldsOf(job));
      this.emit("job:success", job, d.result);
    } else if (d.kind === "snooze") {
      this.logger.debug?.(`leaseq worker: job ${job.id} snoozed for ${d.delayMs} ms`, fieldsOf(job));
    } else {
      const willRetry = answer !== "dead";
      const error = d.error ?? d.document;
      const said = d.error === undefined ? "" : `: ${errorOf(d.error).stack ?? errorOf(d.error).message}`;
      const message = `leaseq worker: job ${job.id} failed (attempt ${job.attempt}), ${willRetry ? "to be retried" : "dead"}${said}`;
      if (willRetry) this.logger.warn?.(message, fieldsOf(job));
      else this.logger.error?.(message, fieldsOf(job));
      this.emit("job:failure", job, error, willRetry);
    }
  }

  private fenced(job: Job): void {
    this.logger.warn?.(`leaseq worker: job ${job.id}: its outcome was fenced: the lease ran out before it was sent`, fieldsOf(job));
    this.emit("job:fenced", job);
  }

  /** Works until no job is due and none is held: for tests and batch jobs. */
  runUntilIdle(): Promise<Summary> {
    return this.work(true);
  }

  /** Stops claiming; running handlers get `grace` to finish. Before a run too: then the run
   * returns at once. */
  stop(): void {
    this.stopping = true;
    this.wake();
  }

  private async work(untilIdle: boolean): Promise<Summary> {
    if (this.stopping) {
      this.stopping = false;
      return this.summary;
    }
    const own = new pg.Pool({ ...this.ownConfig, max: OWN_CONNECTIONS });
    // As the Client's: an idle connection the server ends leaves the pool, and is replaced.
    own.on("error", () => {});
    const handlerPool = this.given ?? new pg.Pool({ ...this.ownConfig, max: this.o.concurrency });
    if (this.given === undefined) handlerPool.on("error", () => {});
    if (this.unprepared) {
      withoutPreparedStatements(own);
      withoutPreparedStatements(handlerPool);
    }
    const endPools = async () => {
      await own.end();
      if (this.given === undefined) await handlerPool.end();
    };
    try {
      return await this.workOn(own, handlerPool, untilIdle, endPools);
    } finally {
      this.stopping = false;
    }
  }

  private async workOn(
    own: pg.Pool,
    handlerPool: pg.Pool,
    untilIdle: boolean,
    endPools: () => Promise<void>,
  ): Promise<Summary> {
    const held = new Map<string, Held>();
    this.heldNow = held;
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
    // jobs may have come meanwhile — an idle worker would otherwise sleep until its poll. A
    // silent one ends nothing and tells nothing: the claims go on it, and it is replaced when
    // one of them — or any other call, while it has not been heard from since — goes
    // unanswered.
    let listener: pg.PoolClient | undefined;
    const conns = new Connections(own, handlerPool, () => {
      if (listener !== undefined && !conns.fresh(listener)) dropListener(listener);
    });
    // A wake-up while a claim is out may be for a job that claim's snapshot missed: remembered
    // until the next claim is sent, so the loop claims again instead of waiting for its poll.
    let notified = false;
    const notify = () => {
      notified = true;
      this.wake();
    };
    const stopListening = new AbortController();
    let listeningAgain = Promise.resolve();
    let relistening = false;
    const listen = async (): Promise<void> => {
      const until = performance.now() + LISTEN_WAIT;
      const client = await conns.take(until);
      try {
        await conns.answer(client, statement(`LISTEN ${pg.escapeIdentifier(`leaseq_${this.o.queue}`)}`), until);
      } catch (e) {
        conns.drop(client);
        throw e;
      }
      client.on("notification", () => {
        conns.heard(client);
        notify();
      });
      // A session in error is gone or of no use; 'end' follows either way.
      client.on("error", () => dropListener(client));
      client.once("end", () => dropListener(client));
      listener = client;
    };
    const dropListener = (client: pg.PoolClient) => {
      if (client !== listener) return; // replaced already, or released at shutdown
      listener = undefined;
      conns.drop(client);
      if (!relistening && !stopListening.signal.aborted) listeningAgain = listenAgain();
    };
    const listenAgain = async (): Promise<void> => {
      relistening = true;
      try {
        for (let backoff = 100; !stopListening.signal.aborted; backoff = Math.min(backoff * 2, 5000)) {
          try {
            await listen();
            notify();
            return;
          } catch {
            await delay(backoff, undefined, { signal: stopListening.signal }).catch(() => {});
          }
        }
      } finally {
        relistening = false;
      }
    };
    try {
      await listen();
    } catch (e) {
      conns.close();
      await endPools();
      throw connectionFailed(this.where, e);
    }
    const fields = { queue: this.o.queue, worker: this.o.workerId };
    this.logger.info?.(`leaseq worker ${this.o.workerId}: working queue ${this.o.queue} (concurrency ${this.o.concurrency})`, fields);

    let finishing = true;
    // Up to two rounds out at once: one is sent while the other commits.
    const rounds = new Set<Promise<void>>();
    const sendRound = async (round: Decision[]) => {
      await this.finishRound(conns, round);
      for (const d of round) held.delete(d.held.job.id);
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

    // Renews the leases held together: at the latest when one has a third of its time left,
    // with every other past a sixth. It wakes for the first lease to give up too, not only for
    // the renewals, and a renewal waits for its answer until then at most: a handler cut off
    // from the database is told before the server may hand its job to another worker.
    let beat: () => void = () => {};
    let beating = true;
    const heartbeat = (async () => {
      let renewal: Promise<void> | undefined;
      let trouble: unknown;
      let retryAt = 0;
      let backoff = 100;
      const renew = async (group: Held[]): Promise<void> => {
        const sent = performance.now();
        let until = Infinity;
        for (const h of group) until = Math.min(until, h.stopAt);
        try {
          const left = await conns.call(calls.renewBatchLeft(group.map((h) => h.job), this.o.lease), until);
          if (left.length !== group.length) throw new Error(`${left.length} answers for ${group.length} leases`);
          left.forEach((ms, i) => {
            const h = group[i]!;
            if (h.lost) return; // given up meanwhile: it stays so
            if (ms === null) h.lose(new Error("the lease was lost"));
            else h.granted(sent, ms);
          });
          (trouble = undefined), (retryAt = 0), (backoff = 100);
        } catch (e) {
          // Database trouble: renewed again after a pause; a lease whose stop time comes
          // meanwhile is given up.
          this.trouble(`renewing ${group.length} lease(s) failed, retrying in ${backoff} ms`, e);
          (trouble = e), (retryAt = performance.now() + backoff), (backoff = Math.min(backoff * 2, 5000));
        }
      };
      while (beating) {
        const now = performance.now();
        let wakeAt = Infinity;
        let due = false;
        for (const h of held.values()) {
          if (h.lost) continue;
          if (h.stopAt <= now) {
            const reason = "no renewal answered before the lease's end";
            h.lose(trouble === undefined ? new Error(reason) : new Error(reason, { cause: trouble }));
            continue;
          }
          wakeAt = Math.min(wakeAt, h.stopAt);
          if (renewal === undefined) {
            if (h.due <= now) due = true;
            else wakeAt = Math.min(wakeAt, h.due);
          }
        }
        if (due && now >= retryAt) {
          const group = [...held.values()].filter((h) => !h.lost && h.early <= now);
          renewal = renew(group).finally(() => {
            renewal = undefined;
            beat();
          });
          continue;
        }
        if (due) wakeAt = Math.min(wakeAt, retryAt);
        await new Promise<void>((resolve) => {
          const timer = wakeAt === Infinity ? undefined : timeout(resolve, wakeAt - now);
          beat = () => {
            clearTimeout(timer);
            resolve();
          };
        });
      }
      await renewal;
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
          h.running = true;
          void runJob(h);
        }
      }
      if (next === waiting.length) (waiting = []), (next = 0);
      slotFreed();
    };

    const runJob = async (h: Held): Promise<void> => {
      let outcome: Omit<Decision, "held"> | undefined;
      this.running += 1;
      this.logger.debug?.(`leaseq worker: job ${h.job.id} started (attempt ${h.job.attempt})`, fieldsOf(h.job));
      this.emit("job:start", h.job);
      h.span = otel.startAttempt(h.job);
      try {
        if (this.o.transactional) {
          try {
            await this.runInTransaction(conns, h);
          } catch {
            this.lostOne(h); // its transaction or its failure not sent: left to its lease
          }
        } else {
          try {
            const run = () => this.o.handler(h.job, h.context(conns));
            const result = await this.timed(h, () => otel.within(h.span, run));
            outcome = { kind: "complete", document: result, result };
          } catch (e) {
            outcome = { ...outcomeOf(e), error: e };
          }
        }
      } finally {
        this.running -= 1;
        h.running = false;
        // The slot frees as soon as the handler is done: the next job overlaps the finish.
        free += 1;
        handlers -= 1;
        if (outcome === undefined || h.lost) {
          if (h.lost && outcome !== undefined && !h.abandoned) this.summary.lost += 1;
          if (h.lost) this.ended(h, "lost");
          held.delete(h.job.id);
        } else {
          decisions.push(encode({ held: h, ...outcome }));
          decided();
        }
        startWaiting();
        if (handlers === 0) allReturned();
      }
    };

    // A claim waits for its answer a lease at most — the worker's, else the queue's as the last
    // claimed jobs told it: jobs in a later answer would be lost already.
    let claimWait = this.o.lease ?? FIRST_CLAIM_WAIT;
    let traced = true;
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
        const sent = performance.now();
        try {
          // The trace contexts only when spans are made: a column fewer to read per job.
          const claim = calls.claim(this.o.queue, this.o.workerId, asking, this.o.lease, traced && otel.tracing());
          // On the LISTEN connection while there is one, as the Rust Worker claims: every look
          // at the queue, an idle worker's polls too, finds it out should it have gone silent.
          jobs = await (listener === undefined
            ? conns.call(claim, sent + claimWait)
            : conns.answer(listener, claim, sent + claimWait));
          backoff = 100;
        } catch (e) {
          if (traced && sqlstateOf(e) === "42703") {
            traced = false; // a database not yet updated to 0.3.0: no trace contexts
            continue;
          }
          if (REFUSED_CLASSES.includes(sqlstateOf(e)?.slice(0, 2) ?? "")) {
            throw e; // refused, and would be again
          }
          this.trouble(`claim failed, retrying in ${backoff} ms`, e);
          await sleep(backoff);
          backoff = Math.min(backoff * 2, 5000);
          continue;
        }
        if (this.o.lease === undefined && jobs[0] !== undefined) claimWait = jobs[0].leaseMs;
        free -= jobs.length;
        for (const job of jobs) {
          const h = new Held(job, sent);
          h.onLost = (reason) => {
            this.logger.warn?.(`leaseq worker: job ${job.id} lost its lease (attempt ${job.attempt}): ${reason.message}`, fieldsOf(job));
            this.emit("job:lost", job, reason);
          };
          held.set(job.id, h);
          waiting.push(h);
        }
        beat(); // their stop times may come before the heartbeat would wake
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
      if (next < waiting.length) await this.handBack(conns, waiting.splice(next), held);
      // Drain: running handlers get the grace; past it they are abandoned, their jobs left to
      // their leases — not waited for: a handler that ignores its signal may never return.
      if (handlers > 0) {
        let late: NodeJS.Timeout | undefined;
        const graceOver = new Promise<boolean>((resolve) => (late = timeout(() => resolve(true), this.o.grace)));
        const returned = new Promise<boolean>((resolve) => (allReturned = () => resolve(false)));
        if (await Promise.race([returned, graceOver])) {
          for (const h of held.values()) {
            if (!h.running) continue;
            // One whose lease was lost and that still runs is abandoned too: it holds the
            // process as much (and a signal-stopped run ends it).
            h.abandoned = true;
            this.summary.abandoned += 1;
            if (!h.lost) h.lose(new Error("the worker shut down past its grace: abandoned, left to its lease"));
          }
        }
        clearTimeout(late);
      }
    } finally {
      finishing = false;
      decided();
      await finisher;
      beating = false;
      beat();
      await heartbeat;
      stopListening.abort();
      await listeningAgain;
      // Ended, not returned to the pool: its LISTEN goes with its session.
      if (listener !== undefined) {
        if (conns.fresh(listener)) conns.release(listener, new Error("the worker stopped"));
        else conns.drop(listener);
      }
      conns.close();
      await endPools();
    }
    this.logger.info?.(`leaseq worker ${this.o.workerId}: stopped: ${JSON.stringify(this.summary)}`, fields);
    return this.summary;
  }

  /** Gives back, in one call, the prefetched jobs not started at shutdown; should that fail
   * they are left to their leases. */
  private async handBack(conns: Connections, waiting: Held[], held: Map<string, Held>): Promise<void> {
    const live = waiting.filter((h) => !h.lost);
    this.summary.lost += waiting.length - live.length;
    try {
      if (live.length === 0) return;
      const handed = await conns.call(calls.handBack(live.map((h) => h.job)), untilFor(live));
      const accepted = handed.filter(Boolean).length;
      this.summary.handedBack += accepted;
      this.summary.lost += handed.length - accepted;
    } catch (e) {
      // Database trouble: they are left to their leases, and retried by the queue's policy.
      this.trouble(`${live.length} prefetched job(s) left to their leases`, e);
    } finally {
      for (const h of waiting) held.delete(h.job.id);
    }
  }

  /** Sends a round's outcomes, one call per kind (a snooze alone: each has its own delay), each
   * waiting for its answer until the first lease it carries ends (5 s at least). A job whose
   * lease was given up meanwhile is never finished; those of a call that failed or went
   * unanswered are left to their leases. */
  private async finishRound(conns: Connections, round: Decision[]): Promise<void> {
    const live = round.filter((d) => !d.held.lost);
    this.summary.lost += round.length - live.length;
    for (const d of round) if (d.held.lost) this.ended(d.held, "lost");
    // Grouped before anything is sent: a poisoned decision changes its kind, and is sent by
    // its first group only.
    const kinds = ["complete", "fail", "dead", "snooze", "retry"] as const;
    const groups = kinds.map((kind) => [kind, live.filter((d) => d.kind === kind)] as const);
    for (const [kind, group] of groups) {
      for (const part of kind === "snooze" || kind === "retry" ? group.map((d) => [d]) : [group]) {
        if (part.length === 0) continue;
        try {
          await this.send(conns, kind, part);
        } catch (e) {
          this.summary.lost += part.length; // unsent or unanswered: left to their leases
          for (const d of part) this.ended(d.held, "lost");
          this.trouble(`${part.length} outcome(s) not sent, left to their leases`, e);
        }
      }
    }
  }

  /** Sends `group`'s outcomes of `kind` in one call, and counts the answers. One the server
   * refuses for its document is sent again alone, and refused alone its job fails with the
   * reason (`poison`): one poison outcome never sinks the rest. */
  private async send(conns: Connections, kind: Decision["kind"], group: Decision[]): Promise<void> {
    let answers: (boolean | calls.JobStatus | null)[];
    try {
      answers = await conns.call(outcomesCall(kind, group), untilFor(group.map((d) => d.held)));
    } catch (e) {
      if (!POISON_CLASSES.includes(sqlstateOf(e)?.slice(0, 2) ?? "") || group[0]!.poisoned) throw e;
      if (group.length > 1) {
        for (const d of group) await this.send(conns, kind, [d]);
        return;
      }
      poison(group[0]!, e);
      return this.send(conns, group[0]!.kind, group);
    }
    answers.forEach((answer, i) => {
      if (kind !== "complete") this.count(kind, answer as calls.JobStatus | null);
      else if (answer === true) this.summary.completed += 1;
      else this.summary.fenced += 1;
      this.finished(group[i]!, answer);
    });
  }

  /** `h` lost its lease before it finished: counted, unless it was abandoned (counted so). */
  private lostOne(h: Held): void {
    if (!h.abandoned) this.summary.lost += 1;
    this.ended(h, "lost");
  }

  /** Ends the attempt's span, once. */
  private ended(h: Held, kind: string, error?: unknown): void {
    otel.end(h.span, kind, error);
    h.span = undefined;
  }

  private count(kind: Decision["kind"], status: calls.JobStatus | null): void {
    if (status === null) this.summary.fenced += 1;
    else if (kind === "snooze") this.summary.snoozed += 1;
    else if (status === "dead") this.summary.dead += 1;
    else this.summary.failed += 1;
  }

  /** The handler and the completion in one transaction, committed only if the completion is
   * accepted; a failure rolls the handler's writes back and fails the job apart. Every
   * statement of the worker's in it waits until the lease ends (5 s at least); one left
   * unanswered leaves the job to its lease (rejects), as a lost lease does (counted lost). */
  private async runInTransaction(conns: Connections, held: Held): Promise<void> {
    const job = held.job;
    const tx = await conns.take(held.until(), conns.handlers);
    // A lost lease destroys the connection, and the server rolls the transaction back: its
    // completion could never be accepted, and a handler waiting on a silent connection would
    // wait for ever.
    held.whenLost = () => conns.drop(tx);
    let failure: { error: unknown };
    try {
      if (held.lost) throw held.signal.reason;
      await conns.answer(tx, statement("BEGIN"), held.until());
      try {
        const run = () => this.o.handler(job, held.context(conns, tx));
        const result = await this.timed(held, () => otel.within(held.span, run));
        if (held.lost) {
          this.lostOne(held);
          return;
        }
        let completion: Call<boolean>;
        try {
          completion = calls.complete(job, result);
        } catch (e) {
          throw new Poison(e); // a result JSON cannot encode
        }
        let done: boolean;
        try {
          done = await conns.answer(tx, completion, held.until());
        } catch (e) {
          throw POISON_CLASSES.includes(sqlstateOf(e)?.slice(0, 2) ?? "") ? new Poison(e) : e;
        }
        if (done) {
          await conns.answer(tx, statement("COMMIT"), held.until());
          this.ended(held, "complete");
          this.summary.completed += 1;
          this.logger.debug?.(`leaseq worker: job ${job.id} succeeded`, fieldsOf(job));
          this.emit("job:success", job, result);
        } else {
          await conns.answer(tx, statement("ROLLBACK"), held.until());
          this.summary.fenced += 1;
          this.ended(held, "fenced");
          this.fenced(job);
        }
        return;
      } catch (e) {
        // The handler's throw, the server's refusal (a deferred constraint at COMMIT), or a
        // poison result: the job fails with it. No answer, or a lost lease: left to the lease.
        if (held.lost) {
          this.lostOne(held);
          return;
        }
        if (e instanceof NoAnswer) throw e;
        failure = { error: e };
      }
      // (A timed-out handler's connection is destroyed already: the server rolls back.)
      if (!(failure.error instanceof TimedOut)) await conns.answer(tx, statement("ROLLBACK"), held.until());
    } catch (e) {
      conns.drop(tx); // its transaction's state unknown: not for the pool
      throw e;
    } finally {
      held.whenLost = undefined;
      conns.release(tx); // (a lost lease's was destroyed already)
    }
    const decision = encode(
      failure.error instanceof Poison
        ? { held, kind: "dead", document: refusal("complete", failure.error.why), error: failure.error.why }
        : { held, ...outcomeOf(failure.error), error: failure.error },
    );
    if (held.lost) {
      this.lostOne(held); // lost while rolling back: its failure is not sent
    } else {
      await this.send(conns, decision.kind, [decision]);
    }
  }
}
