// `enqueue` and `enqueueBatch` on the caller's own pg client or pool (sharing its transaction),
// and `Client`, every other call of the extension on a pool of its own.

import pg from "pg";

import * as calls from "./calls.js";
import type { Call, EnqueueBatchOptions, EnqueueOptions, Job, QueueSettings } from "./calls.js";
import { connectionFailed, sqlstateOf, target, translated } from "./errors.js";
import * as otel from "./otel.js";

/** What runs a query: a `pg.Client`, a `pg.PoolClient` inside your transaction, or a `pg.Pool`. */
export interface Queryable {
  query: pg.ClientBase["query"];
}

/** Pools and clients whose leaseq calls go as unnamed statements (`withoutPreparedStatements`). */
const unprepared = new WeakSet<object>();

/** Marks `db` — a pool, with every client it connects from now on, or a client — so that
 * leaseq's calls on it go as unnamed statements: for a pooler in transaction mode (PgBouncer
 * before 1.21, or without `max_prepared_statements`), where a statement prepared on one server
 * connection is missing on the next. Returns `db`. */
export function withoutPreparedStatements<T extends Queryable>(db: T): T {
  unprepared.add(db);
  if (db instanceof pg.Pool) db.on("connect", (c) => unprepared.add(c));
  return db;
}

/** Whether `withoutPreparedStatements` marked `db`. */
export function isUnprepared(db: Queryable): boolean {
  return unprepared.has(db);
}

/** Per pool or client: whether its database keeps trace contexts (`calls.keepsTraces`). */
const keepsTraces = new WeakMap<object, boolean>();

/** Runs `call` on `db`, in whatever transaction `db` is in. */
export async function run<T>(db: Queryable, call: Call<T>): Promise<T> {
  if (call.untraced !== undefined) {
    if (!keepsTraces.has(db)) keepsTraces.set(db, await run(db, calls.keepsTraces));
    if (!keepsTraces.get(db)) call = call.untraced;
  }
  const query = unprepared.has(db) ? { ...call.query, name: undefined } : call.query;
  const result = await translated(() => db.query(query) as Promise<pg.QueryArrayResult>);
  return call.decode(result.rows);
}

/** Adds a job to `queue` on `db` — in its transaction, if it is in one — and returns its id. */
export async function enqueue(
  db: Queryable,
  queue: string,
  payload: unknown,
  options: EnqueueOptions = {},
): Promise<string> {
  await otel.loaded();
  return run(db, calls.enqueue(queue, payload, options));
}

/** Records on `db` — in its transaction, the one that made the step's effect — that `job`'s
 * handler did step `name`, with `output`: true when recorded; false, changing nothing, when the
 * lease is stale or the step was already recorded. Until that transaction ends nobody can take
 * the job over; its lease can still be renewed. */
export function step(db: Queryable, job: Job, name: string, output?: unknown): Promise<boolean> {
  return run(db, calls.step(job, name, output));
}

/** Reports on `db` how far `job`'s handler has got (`progress`: any JSON value, or `Json`),
 * under its lease: true when kept, shown by `client.job(id)`; false, changing nothing, when the
 * lease is stale. Report outside a transaction: a report made in one is seen only when it
 * commits, and until then it holds the job's lease renewals back. */
export function progress(db: Queryable, job: Job, progress: unknown): Promise<boolean> {
  return run(db, calls.progress(job, progress));
}

/** Waits on `db` until every one of `jobIds` is final (succeeded, dead or cancelled), or until
 * `timeoutMs` (0 to a day) has passed: `{ allFinal, unfinished }`, the ids not final yet. `db`
 * must be a connection outside any transaction (in one: `NeedsOwnTransactions`, 25001), which it
 * holds while it waits; a `pg.Pool` lends one of its connections for the wait. */
export function awaitJobs(db: Queryable, jobIds: string[], timeoutMs: number): Promise<calls.Awaited> {
  return run(db, calls.awaitJobs(jobIds, timeoutMs));
}

/** Adds one job per payload in one statement; ids in payload order. */
export async function enqueueBatch(
  db: Queryable,
  queue: string,
  payloads: unknown[],
  options: EnqueueBatchOptions = {},
): Promise<string[]> {
  await otel.loaded();
  return run(db, calls.enqueueBatch(queue, payloads, options));
}

export interface ClientOptions {
  connectionString?: string;
  /** Your own pool; `close()` then leaves it open. */
  pool?: pg.Pool;
  /** No named statements (`withoutPreparedStatements` on the pool): for a pooler in transaction
   * mode. */
  noPreparedStatements?: boolean;
}

/** `host:port/database as user` of a connection URL (or the unreadable string's own words). */
/** Milliseconds a connection attempt may take: the connection string's `connect_timeout`
 * (seconds), else 5 s — a server that accepts and never answers must not hang a worker (the
 * driver's default is to wait for ever). */
export function connectTimeoutOf(connectionString: string | undefined): number {
  try {
    const given = Number(new URL(connectionString ?? "").searchParams.get("connect_timeout"));
    return Number.isFinite(given) && given > 0 ? given * 1000 : DEFAULT_CONNECT_TIMEOUT;
  } catch {
    return DEFAULT_CONNECT_TIMEOUT;
  }
}
const DEFAULT_CONNECT_TIMEOUT = 5000;

export function whereOf(connectionString: string): string {
  try {
    const url = new URL(connectionString);
    return target({
      host: url.hostname || undefined,
      port: url.port ? Number(url.port) : undefined,
      database: url.pathname.replace(/^\//, "") || undefined,
      user: decodeURIComponent(url.username) || undefined,
    });
  } catch {
    return "the server of the connection string";
  }
}

/** The passwords a connection string may carry, however malformed (`user:password@`,
 * `password=…`): a parser that misreads the string can put one in a database name, which the
 * server's refusal then quotes. */
export function secretsOf(connectionString: string): string[] {
  const found = [
    ...connectionString.matchAll(/:([^:@/\s]+)@/g),
    ...connectionString.matchAll(/password\s*=\s*('(?:[^'\\]|\\.)*'|[^\s&]+)/gi),
  ];
  return found.map((m) => m[1] ?? "").filter((secret) => secret.length > 0);
}

/** Every call of the extension. Refusals reject with the `leaseq` error of their SQLSTATE. */
export class Client {
  readonly pool: pg.Pool;
  private readonly ownsPool: boolean;
  private readonly where: string;
  private readonly secrets: string[];

  constructor(options: ClientOptions | string) {
    const o = typeof options === "string" ? { connectionString: options } : options;
    this.ownsPool = o.pool === undefined;
    this.pool =
      o.pool ??
      new pg.Pool({
        connectionString: o.connectionString,
        application_name: "leaseq-node",
        connectionTimeoutMillis: connectTimeoutOf(o.connectionString),
      });
    if (this.ownsPool) {
      // An idle connection the server ends (a restart, idle_session_timeout, DROP DATABASE …
      // FORCE) leaves the pool, and the next call opens another; unheard, Node ends the process.
      this.pool.on("error", () => {});
    }
    if (o.noPreparedStatements) withoutPreparedStatements(this.pool);
    const c = this.pool.options;
    this.secrets = secretsOf(o.connectionString ?? "");
    this.where = o.connectionString
      ? whereOf(o.connectionString)
      : target({ host: c.host, port: c.port, database: c.database, user: c.user });
  }

  /** Connects once, so that a wrong address fails here, naming where and why. */
  async check(): Promise<this> {
    await this.connection(async () => undefined);
    return this;
  }

  async close(): Promise<void> {
    if (this.ownsPool) {
      await this.pool.end();
    }
  }

  private async connection<T>(f: (c: pg.PoolClient) => Promise<T>): Promise<T> {
    let c: pg.PoolClient;
    try {
      c = await this.pool.connect();
    } catch (e) {
      throw connectionFailed(this.where, e, this.secrets);
    }
    try {
      return await f(c);
    } finally {
      c.release();
    }
  }

  run<T>(call: Call<T>): Promise<T> {
    return this.connection((c) => run(c, call));
  }

  queueCreate(queue: string, settings: QueueSettings = {}): Promise<void> {
    return this.run(calls.queueCreate(queue, settings));
  }
  async enqueue(queue: string, payload: unknown, options: EnqueueOptions = {}): Promise<string> {
    await otel.loaded();
    return this.run(calls.enqueue(queue, payload, options));
  }
  async enqueueBatch(queue: string, payloads: unknown[], options: EnqueueBatchOptions = {}): Promise<string[]> {
    await otel.loaded();
    return this.run(calls.enqueueBatch(queue, payloads, options));
  }
  async claim(queue: string, worker: string, batch = 1, leaseMs?: number): Promise<Job[]> {
    try {
      return await this.run(calls.claim(queue, worker, batch, leaseMs));
    } catch (e) {
      // A database not yet updated to 0.3.0: its claim returns no trace context.
      if (sqlstateOf(e) !== "42703") throw e;
      return this.run(calls.claim(queue, worker, batch, leaseMs, false));
    }
  }
  renewBatch(jobs: Job[], leaseMs?: number): Promise<(Date | null)[]> {
    return this.run(calls.renewBatch(jobs, leaseMs));
  }
  complete(job: Job, result?: unknown): Promise<boolean> {
    return this.run(calls.complete(job, result));
  }
  completeBatch(jobs: [Job, unknown][]): Promise<boolean[]> {
    return this.run(calls.completeBatch(jobs));
  }
  fail(job: Job, error?: unknown, opts: { retry?: boolean; retryInMs?: number } = {}) {
    return this.run(calls.fail(job, error, opts.retry ?? true, opts.retryInMs));
  }
  failBatch(jobs: [Job, unknown][], retry = true) {
    return this.run(calls.failBatch(jobs, retry));
  }
  snooze(job: Job, delayMs: number) {
    return this.run(calls.snooze(job, delayMs));
  }
  /** Jobs claimed and never started, pending again at once with their budget kept. */
  handBack(jobs: Job[]): Promise<boolean[]> {
    return this.run(calls.handBack(jobs));
  }
  redrive(jobId: string): Promise<boolean> {
    return this.run(calls.redrive(jobId));
  }
  redriveAll(queue: string, maxJobs?: number): Promise<number> {
    return this.run(calls.redriveAll(queue, maxJobs));
  }
  /** `redrive` of each job in one call: one answer per id, in input order. */
  redriveMany(jobIds: string[]): Promise<boolean[]> {
    return this.run(calls.redriveMany(jobIds));
  }
  cancel(jobId: string): Promise<boolean> {
    return this.run(calls.cancel(jobId));
  }
  /** `cancel` of each job in one call: one answer per id, in input order. */
  cancelMany(jobIds: string[]): Promise<boolean[]> {
    return this.run(calls.cancelMany(jobIds));
  }
  /** Claims on `queue` return no jobs until `resume`; false: it was already paused. */
  pause(queue: string): Promise<boolean> {
    return this.run(calls.pause(queue));
  }
  /** False: `queue` was not paused. */
  resume(queue: string): Promise<boolean> {
    return this.run(calls.resume(queue));
  }
  stats() {
    return this.run(calls.stats());
  }
  /** The job's row, with what its handler last reported (`progress`, `progressAt`). */
  async job(jobId: string): Promise<calls.JobDetail> {
    try {
      return await this.run(calls.job(jobId));
    } catch (e) {
      // A database not yet updated to 0.3.0: its `queue_job` has no progress columns.
      if (sqlstateOf(e) === "42703") {
        return this.run(calls.jobBeforeProgress(jobId));
      }
      throw e;
    }
  }
  attempts(jobId: string) {
    return this.run(calls.attempts(jobId));
  }
  result(jobId: string) {
    return this.run(calls.result(jobId));
  }
  /** The jobs `jobId` depends on, oldest first, each one's result once it succeeded. */
  parents(jobId: string): Promise<calls.Parent[]> {
    return this.run(calls.parents(jobId));
  }
  /** Records, in a statement of its own, that `job`'s handler did step `name` with `output`;
   * false: the lease is stale or the step was already recorded. To record it in the
   * transaction that made its effect, use `step(tx, job, name, output)`. */
  step(job: Job, name: string, output?: unknown): Promise<boolean> {
    return this.run(calls.step(job, name, output));
  }
  /** Reports how far `job`'s handler has got (any JSON value, or `Json`), replacing its last
   * report, under its lease: true when kept; false, changing nothing, when the lease is stale.
   * `job(id)` shows it as `progress` (JSON text) and `progressAt`. */
  progress(job: Job, progress: unknown): Promise<boolean> {
    return this.run(calls.progress(job, progress));
  }
  /** Waits until every one of `jobIds` (at most 10000, none twice) is final — succeeded, dead
   * or cancelled — or until `timeoutMs` (0 to a day) has passed, woken by the commits that
   * finish them: `{ allFinal, unfinished }`, the ids not final at its last look, ascending. It
   * holds one connection of the pool to itself while it waits. */
  awaitJobs(jobIds: string[], timeoutMs: number): Promise<calls.Awaited> {
    return this.run(calls.awaitJobs(jobIds, timeoutMs));
  }
  /** The steps every attempt of `jobId` recorded, in order, each one's output as JSON text. */
  steps(jobId: string): Promise<calls.Step[]> {
    return this.run(calls.steps(jobId));
  }
  /** Enqueues a graph of jobs in one call (nothing unless all of it is valid): each key's job
   * id, in the order given. */
  async flow(nodes: calls.FlowNode[], traceContext?: string): Promise<Map<string, string>> {
    await otel.loaded();
    return this.run(calls.flow(nodes, traceContext));
  }
  /** How far the flow from `root` got: it and every job depending on it, by status. */
  flowStatus(root: string): Promise<calls.FlowStatus> {
    return this.run(calls.flowStatus(root));
  }
  grant(queue: string, role: string, privilege: calls.QueuePrivilege): Promise<boolean> {
    return this.run(calls.grant(queue, role, privilege));
  }
  revoke(queue: string, role: string, privilege: calls.QueuePrivilege): Promise<boolean> {
    return this.run(calls.revoke(queue, role, privilege));
  }
  metrics(): Promise<string> {
    return this.run(calls.metrics());
  }
  /** Jobs newest first, of `queue` or (null) of every queue the role may observe: `jobs(queue,
   * status?, maxRows?)`, or `jobs(queue, { status, maxRows, payloadContains, beforeId, … })`. */
  jobs(queue?: string | null, status?: calls.JobStatus | null, maxRows?: number): Promise<calls.JobSummary[]>;
  jobs(queue: string | null | undefined, options: calls.JobsOptions): Promise<calls.JobSummary[]>;
  jobs(
    queue?: string | null,
    statusOrOptions?: calls.JobStatus | calls.JobsOptions | null,
    maxRows?: number,
  ): Promise<calls.JobSummary[]> {
    const o =
      typeof statusOrOptions === "object" && statusOrOptions !== null
        ? statusOrOptions
        : { status: statusOrOptions, maxRows };
    return this.run(calls.jobs(queue, o));
  }
  purge(queue: string, olderThanMs: number, maxJobs = 10000): Promise<number> {
    return this.run(calls.purge(queue, olderThanMs, maxJobs));
  }
  grants() {
    return this.run(calls.grants());
  }
  /** What the connecting role may do on each queue. */
  privileges(): Promise<calls.QueueAccess[]> {
    return this.run(calls.privileges());
  }
  async schedule(
    name: string,
    queue: string,
    every: string,
    payload: unknown,
    o: { timezone?: string; catchUp?: boolean; traceContext?: string } = {},
  ): Promise<Date> {
    await otel.loaded();
    return this.run(calls.schedule(name, queue, every, payload, o));
  }
  unschedule(name: string): Promise<boolean> {
    return this.run(calls.unschedule(name));
  }
  schedules() {
    return this.run(calls.schedules());
  }
}
