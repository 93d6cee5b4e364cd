// Every call of the extension's SQL functions, written once: its statement, its values, and how
// its rows decode. Statements are static and parameterised, prepared once per connection
// (named); JSON crosses as text, so payloads arrive exactly as enqueued. Durations are
// milliseconds; ids are strings (PostgreSQL's bigint, exact beyond 2^53). The statements run on
// the caller's search_path: an operator whose operand types pg_catalog has no exact match for
// (`bigint * interval`) is written `OPERATOR(pg_catalog.*)`, and PostgreSQL's functions are
// `pg_catalog.`-qualified, so that nothing planted in public is ever run (docs/security.md).

import type { QueryConfig } from "pg";

import * as otel from "./otel.js";

/** A JSON document given as its text, passed as it is (numbers JavaScript cannot hold). Any
 * other value is serialised with `JSON.stringify`. */
export class Json {
  constructor(readonly text: string) {}
}

export function documentOf(value: unknown): string {
  return value instanceof Json ? value.text : JSON.stringify(value);
}

function optionalDocument(value: unknown): string | null {
  return value === undefined || value === null ? null : documentOf(value);
}

export type Row = unknown[];

export interface Call<T> {
  query: QueryConfig & { rowMode: "array" };
  decode: (rows: Row[]) => T;
  /** A call carrying the active span's trace context (`traced`): what to send instead to a
   * database that predates trace contexts (0.2.0, not updated yet). */
  untraced?: Call<T>;
}

function call<T>(name: string, text: string, values: unknown[], decode: (rows: Row[]) => T): Call<T> {
  return { query: { name: `leaseq.${name}`, text, values, rowMode: "array" }, decode };
}

/** The jobs' ids and lease tokens as array literals: digits and hex need no quoting, and the
 * driver's per-element escaping costs more than the rest of a batch call. Anything else (a
 * caller's own values) goes as arrays, for the server to judge. */
function idsAndTokens(jobs: Lease[]): [string, string] | [unknown[], unknown[]] {
  const ids = jobs.map((j) => j.id);
  const tokens = leaseTokens(jobs.map((j) => j.leaseToken));
  const plain = ids.every((id) => DIGITS.test(id)) && tokens.every((t) => UUID.test(t));
  return plain ? [`{${ids.join(",")}}`, `{${tokens.join(",")}}`] : [ids, tokens];
}
/** A batch's lease tokens: one for all when they are one claim's (the server fences each job by
 * its id with it, and the token is sent once), one per job otherwise. */
function leaseTokens(tokens: string[]): string[] {
  return tokens.every((t) => t === tokens[0]) ? tokens.slice(0, 1) : tokens;
}
const DIGITS = /^[0-9]{1,19}$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** One document per job, or NULL (none has one: nothing to send). */
function documents(docs: unknown[]): (string | null)[] | null {
  return docs.every((d) => d === undefined || d === null) ? null : docs.map(optionalDocument);
}

/** `plain` with a trace context — `given`, else the active span's (OpenTelemetry, when its API
 * is installed; then `plain` stays what a database without trace contexts gets) — sent as
 * `text`, which names every argument: `values` are `plain`'s and those it left out, the trace
 * context last. */
function traced<T>(plain: Call<T>, name: string, text: string, values: unknown[], given?: string): Call<T> {
  const traceContext = given ?? otel.traceparent();
  if (traceContext === undefined) return plain;
  const call: Call<T> = {
    query: { name: `leaseq.${name}`, text, values: [...values, traceContext], rowMode: "array" },
    decode: plain.decode,
  };
  if (given === undefined) call.untraced = plain;
  return call;
}

/** Whether the database keeps trace contexts (0.3.0 on): asked once per connection, when a call
 * first carries the active span's. */
export const keepsTraces: Call<boolean> = call(
  "keeps_traces",
  `SELECT EXISTS (SELECT FROM pg_catalog.pg_attribute
                   WHERE attrelid = pg_catalog.to_regclass('leaseq.jobs')
                     AND attname = 'trace_context' AND NOT attisdropped)`,
  [],
  (rows) => rows[0]?.[0] === true,
);

const one = (rows: Row[]): unknown => rows[0]?.[0];
const column = (rows: Row[]): unknown[] => rows.map((r) => r[0]);

/** The extension's enums' labels, in their SQL order (a test holds them to `enum_range`). */
export const JOB_STATUSES = [
  "pending",
  "running",
  "succeeded",
  "dead",
  "cancelled",
  "waiting",
  "blocked",
] as const;
export const ATTEMPT_OUTCOMES = [
  "running",
  "succeeded",
  "failed",
  "lease_expired",
  "cancelled",
  "snoozed",
  "handed_back",
] as const;
export const QUEUE_PRIVILEGES = ["produce", "work", "observe", "admin"] as const;
export const PARENT_FAILURES = ["cancel", "dead", "run"] as const;
export type JobStatus = (typeof JOB_STATUSES)[number];
export type AttemptOutcome = (typeof ATTEMPT_OUTCOMES)[number];
export type QueuePrivilege = (typeof QUEUE_PRIVILEGES)[number];
/** What a blocked job does when a parent goes dead or is cancelled: it is cancelled, goes dead,
 * or runs anyway once its other parents are final. */
export type ParentFailure = (typeof PARENT_FAILURES)[number];

export interface EnqueueOptions {
  runAt?: Date;
  priority?: number;
  dedupeKey?: string;
  maxAttempts?: number;
  /** Milliseconds the key stays taken after its job succeeded or went dead. */
  dedupeFor?: number;
  onDuplicate?: "ignore" | "replace";
  groupKey?: string;
  /** Jobs (of any queue) this one waits for: it is `blocked` until every one succeeded. Not
   * with `dedupeKey` or `groupKey`. */
  dependsOn?: string[];
  /** When a parent goes dead or is cancelled; "cancel" when left out. */
  onParentFailure?: ParentFailure;
  /** The producer's W3C traceparent; left out: the active span's, with OpenTelemetry. */
  traceContext?: string;
}

export function enqueue(queue: string, payload: unknown, o: EnqueueOptions = {}): Call<string> {
  const params: unknown[] = [
    queue,
    documentOf(payload),
    o.runAt ?? null,
    o.priority ?? 0,
    o.dedupeKey ?? null,
    o.maxAttempts ?? null,
    o.dedupeFor ?? null,
    o.onDuplicate ?? "ignore",
    o.groupKey ?? null,
  ];
  const parents = [o.dependsOn ?? null, o.onParentFailure ?? "cancel"];
  const plain = enqueuePlain(params, o);
  return traced(
    plain,
    "enqueue_traced",
    `SELECT leaseq.queue_enqueue(queue => $1::text, payload => $2::text::jsonb,
                                 run_at => $3::timestamptz, priority => $4::int,
                                 dedupe_key => $5::text, max_attempts => $6::int,
                                 dedupe_for => $7::bigint OPERATOR(pg_catalog.*) interval '1 millisecond',
                                 on_duplicate => $8::text, group_key => $9::text,
                                 depends_on => $10::bigint[], on_parent_failure => $11::text,
                                 trace_context => $12::text)::text`,
    [...params, ...parents],
    o.traceContext,
  );
}

function enqueuePlain(params: unknown[], o: EnqueueOptions): Call<string> {
  // Dependencies only when asked for: a database not yet updated to 0.3.0 has no such arguments,
  // and every other enqueue must keep working there.
  if (o.dependsOn === undefined && o.onParentFailure === undefined) {
    return call(
      "enqueue",
      `SELECT leaseq.queue_enqueue(queue => $1::text, payload => $2::text::jsonb,
                                   run_at => $3::timestamptz, priority => $4::int,
                                   dedupe_key => $5::text, max_attempts => $6::int,
                                   dedupe_for => $7::bigint OPERATOR(pg_catalog.*) interval '1 millisecond',
                                   on_duplicate => $8::text, group_key => $9::text)::text`,
      params,
      (rows) => one(rows) as string,
    );
  }
  return call(
    "enqueue_after",
    `SELECT leaseq.queue_enqueue(queue => $1::text, payload => $2::text::jsonb,
                                 run_at => $3::timestamptz, priority => $4::int,
                                 dedupe_key => $5::text, max_attempts => $6::int,
                                 dedupe_for => $7::bigint OPERATOR(pg_catalog.*) interval '1 millisecond',
                                 on_duplicate => $8::text, group_key => $9::text,
                                 depends_on => $10::bigint[], on_parent_failure => $11::text)::text`,
    [...params, o.dependsOn ?? null, o.onParentFailure ?? "cancel"],
    (rows) => one(rows) as string,
  );
}

export interface EnqueueBatchOptions {
  runAt?: Date;
  priority?: number;
  /** One per payload; null: that job has none. */
  groupKeys?: (string | null)[];
  /** Jobs every job of the batch waits for (a fan-out), as in `EnqueueOptions`. */
  dependsOn?: string[];
  onParentFailure?: ParentFailure;
  /** Each job's own parents instead: one list of ids per payload (an empty one: that job waits
   * for nothing, pending at once). Not with `dependsOn` or `groupKeys`. */
  dependsOnEach?: string[][];
  /** The producer's W3C traceparent, every job's; left out: the active span's. */
  traceContext?: string;
}

/** `dependsOnEach` as the server takes it, a JSON array of arrays of ids: each id's decimal
 * digits written as they are (every digit of a bigint kept; `Number` would round past 2^53).
 * Anything else (a caller's own value) goes as its JSON, for the server to refuse. */
function parentsEachDocument(each: string[][]): string {
  const id = (value: unknown): string =>
    typeof value === "string" && JSON_INTEGER.test(value) ? value : (JSON.stringify(value) ?? "null");
  const parents = (list: unknown): string =>
    Array.isArray(list) ? `[${list.map(id).join(", ")}]` : (JSON.stringify(list) ?? "null");
  return `[${each.map(parents).join(", ")}]`;
}
const JSON_INTEGER = /^-?(0|[1-9][0-9]*)$/;

export function enqueueBatch(
  queue: string,
  payloads: unknown[],
  o: EnqueueBatchOptions = {},
): Call<string[]> {
  const params: unknown[] = [
    queue,
    payloads.map(documentOf),
    o.runAt ?? null,
    o.priority ?? 0,
    o.groupKeys ?? null,
  ];
  const each = o.dependsOnEach === undefined ? null : parentsEachDocument(o.dependsOnEach);
  return traced(
    enqueueBatchPlain(params, o),
    "enqueue_batch_traced",
    `SELECT id::text FROM leaseq.queue_enqueue_batch(
         queue => $1::text, payloads => $2::text[]::jsonb[], run_at => $3::timestamptz,
         priority => $4::int, group_keys => $5::text[], depends_on => $6::bigint[],
         on_parent_failure => $7::text, depends_on_each => $8::text::jsonb,
         trace_context => $9::text) AS id`,
    [...params, o.dependsOn ?? null, o.onParentFailure ?? "cancel", each],
    o.traceContext,
  );
}

function enqueueBatchPlain(params: unknown[], o: EnqueueBatchOptions): Call<string[]> {
  // As in `enqueue`: the new arguments only when asked for.
  if (o.dependsOnEach !== undefined) {
    return call(
      "enqueue_batch_each",
      `SELECT id::text FROM leaseq.queue_enqueue_batch(
           queue => $1::text, payloads => $2::text[]::jsonb[], run_at => $3::timestamptz,
           priority => $4::int, group_keys => $5::text[], depends_on => $6::bigint[],
           on_parent_failure => $7::text, depends_on_each => $8::text::jsonb) AS id`,
      [...params, o.dependsOn ?? null, o.onParentFailure ?? "cancel", parentsEachDocument(o.dependsOnEach)],
      (rows) => column(rows) as string[],
    );
  }
  if (o.dependsOn === undefined && o.onParentFailure === undefined) {
    return call(
      "enqueue_batch",
      `SELECT id::text FROM leaseq.queue_enqueue_batch(
           queue => $1::text, payloads => $2::text[]::jsonb[], run_at => $3::timestamptz,
           priority => $4::int, group_keys => $5::text[]) AS id`,
      params,
      (rows) => column(rows) as string[],
    );
  }
  return call(
    "enqueue_batch_after",
    `SELECT id::text FROM leaseq.queue_enqueue_batch(
         queue => $1::text, payloads => $2::text[]::jsonb[], run_at => $3::timestamptz,
         priority => $4::int, group_keys => $5::text[], depends_on => $6::bigint[],
         on_parent_failure => $7::text) AS id`,
    [...params, o.dependsOn ?? null, o.onParentFailure ?? "cancel"],
    (rows) => column(rows) as string[],
  );
}

export interface QueueSettings {
  /** Milliseconds. */
  lease?: number;
  maxAttempts?: number;
  backoffBase?: number;
  backoffCap?: number;
  retain?: number | null;
  maxSnoozes?: number | null;
  groupConcurrency?: number;
}

/** `queue_create`'s defaults, as the SQL function declares them (a test holds them to it). */
export const QUEUE_DEFAULTS = {
  lease: 30_000,
  maxAttempts: 5,
  backoffBase: 1_000,
  backoffCap: 300_000,
  retain: null,
  maxSnoozes: null,
  groupConcurrency: 1,
} as const;

export function queueCreate(queue: string, s: QueueSettings = {}): Call<void> {
  const v = { ...QUEUE_DEFAULTS, ...s };
  return call(
    "queue_create",
    `SELECT leaseq.queue_create(
         queue => $1::text,
         lease => $2::bigint OPERATOR(pg_catalog.*) interval '1 millisecond',
         max_attempts => $3::int,
         backoff_base => $4::bigint OPERATOR(pg_catalog.*) interval '1 millisecond',
         backoff_cap => $5::bigint OPERATOR(pg_catalog.*) interval '1 millisecond',
         retain => $6::bigint OPERATOR(pg_catalog.*) interval '1 millisecond',
         max_snoozes => $7::int, group_concurrency => $8::int)`,
    [queue, v.lease, v.maxAttempts, v.backoffBase, v.backoffCap, v.retain, v.maxSnoozes, v.groupConcurrency],
    () => undefined,
  );
}

/** A claimed job. */
export interface Job {
  id: string;
  /**
   * The job's key, `<id>-<the microsecond it was enqueued>`: unlike the id, no other job has it,
   * even after a failover to an asynchronous standby that lost acknowledged jobs and then issued
   * their ids again. Key idempotency downstream on it.
   */
  key: string;
  queue: string;
  leaseToken: string;
  /** Strictly increasing per job for ever: the fencing generation to pass downstream. */
  attempt: number;
  /** The payload's JSON text, exactly as stored. */
  payloadText: string;
  /** The payload, parsed. */
  payload: unknown;
  priority: number;
  leaseExpiresAt: Date;
  /** How long the lease had left when the server granted it, in milliseconds. */
  leaseMs: number;
  /** The W3C traceparent its producer enqueued it with (the active span's, with
   * OpenTelemetry): the Worker's span for the attempt is its child. */
  traceContext?: string;
}

/** Claims up to `batch` jobs. `traced: false` for a database not yet updated to 0.3.0, whose
 * claim returns no trace context. */
export function claim(queue: string, worker: string, batch: number, lease?: number, traced = true): Call<Job[]> {
  const decode = (rows: Row[]): Job[] =>
    rows.map((r) => ({
      id: r[0] as string,
      key: r[7] as string,
      queue,
      leaseToken: r[1] as string,
      attempt: r[2] as number,
      payloadText: r[3] as string,
      payload: JSON.parse(r[3] as string) as unknown,
      priority: r[4] as number,
      leaseExpiresAt: new Date(r[5] as number),
      leaseMs: r[6] as number,
      traceContext: (r[8] as string | null | undefined) ?? undefined,
    }));
  const values = [queue, worker, batch, lease ?? null];
  if (!traced) {
    return call(
      "claim_untraced",
      `SELECT job_id::text, lease_token::text, attempt_no, payload::text, priority,
              extract(epoch FROM lease_expires_at)::float8 OPERATOR(pg_catalog.*) 1000,
              extract(epoch FROM lease_expires_at - pg_catalog.clock_timestamp())::float8
                OPERATOR(pg_catalog.*) 1000,
              pg_catalog.concat(job_id, '-', (extract(epoch FROM enqueued_at)
                                              OPERATOR(pg_catalog.*) 1000000)::bigint)
         FROM leaseq.queue_claim(queue => $1::text, worker => $2::text, batch => $3::int,
                                 lease => $4::bigint OPERATOR(pg_catalog.*) interval '1 millisecond')`,
      values,
      decode,
    );
  }
  return call(
    "claim",
    `SELECT job_id::text, lease_token::text, attempt_no, payload::text, priority,
            extract(epoch FROM lease_expires_at)::float8 OPERATOR(pg_catalog.*) 1000,
            extract(epoch FROM lease_expires_at - pg_catalog.clock_timestamp())::float8
              OPERATOR(pg_catalog.*) 1000,
            pg_catalog.concat(job_id, '-', (extract(epoch FROM enqueued_at)
                                            OPERATOR(pg_catalog.*) 1000000)::bigint),
            trace_context
       FROM leaseq.queue_claim(queue => $1::text, worker => $2::text, batch => $3::int,
                               lease => $4::bigint OPERATOR(pg_catalog.*) interval '1 millisecond')`,
    values,
    decode,
  );
}

/** What a fenced call needs of a claimed job: its id and lease token. */
export type Lease = Pick<Job, "id" | "leaseToken">;

export function renewBatch(jobs: Lease[], lease?: number): Call<(Date | null)[]> {
  return call(
    "renew_batch",
    `SELECT expires
       FROM leaseq.queue_renew_batch(job_ids => $1::bigint[], lease_tokens => $2::uuid[],
                                     lease => $3::bigint OPERATOR(pg_catalog.*) interval '1 millisecond')
            WITH ORDINALITY AS answer (expires, position)
      ORDER BY position`,
    [...idsAndTokens(jobs), lease ?? null],
    (rows) => column(rows) as (Date | null)[],
  );
}

/** `renewBatch` as the Worker's heartbeat reads it: how long each lease has left, in
 * milliseconds, as the server granted it (as a claim's `leaseMs`), or null where it was lost. */
export function renewBatchLeft(jobs: Lease[], lease?: number): Call<(number | null)[]> {
  return call(
    "renew_batch_left",
    `SELECT extract(epoch FROM expires - pg_catalog.clock_timestamp())::float8
              OPERATOR(pg_catalog.*) 1000
       FROM leaseq.queue_renew_batch(job_ids => $1::bigint[], lease_tokens => $2::uuid[],
                                     lease => $3::bigint OPERATOR(pg_catalog.*) interval '1 millisecond')
            WITH ORDINALITY AS answer (expires, position)
      ORDER BY position`,
    [...idsAndTokens(jobs), lease ?? null],
    (rows) => column(rows) as (number | null)[],
  );
}

export function complete(job: Lease, result?: unknown): Call<boolean> {
  return call(
    "complete",
    `SELECT leaseq.queue_complete(job_id => $1::bigint, lease_token => $2::uuid,
                                  result => $3::text::jsonb)`,
    [job.id, job.leaseToken, optionalDocument(result)],
    (rows) => one(rows) as boolean,
  );
}

export function completeBatch(jobs: [Lease, unknown][]): Call<boolean[]> {
  return call(
    "complete_batch",
    `SELECT done
       FROM leaseq.queue_complete_batch(job_ids => $1::bigint[], lease_tokens => $2::uuid[],
                                        results => $3::text[]::jsonb[])
            WITH ORDINALITY AS answer (done, position)
      ORDER BY position`,
    [...idsAndTokens(jobs.map(([j]) => j)), documents(jobs.map(([, r]) => r))],
    (rows) => column(rows) as boolean[],
  );
}

export function fail(
  job: Lease,
  error?: unknown,
  retry = true,
  retryIn?: number,
): Call<JobStatus | null> {
  return call(
    "fail",
    `SELECT leaseq.queue_fail(job_id => $1::bigint, lease_token => $2::uuid,
                              error => $3::text::jsonb, retry => $4::boolean,
                              retry_in => $5::bigint OPERATOR(pg_catalog.*) interval '1 millisecond')::text`,
    [job.id, job.leaseToken, optionalDocument(error), retry, retryIn ?? null],
    (rows) => (one(rows) ?? null) as JobStatus | null,
  );
}

export function failBatch(jobs: [Lease, unknown][], retry: boolean): Call<(JobStatus | null)[]> {
  return call(
    "fail_batch",
    `SELECT status::text
       FROM leaseq.queue_fail_batch(job_ids => $1::bigint[], lease_tokens => $2::uuid[],
                                    errors => $3::text[]::jsonb[], retry => $4::boolean)
            WITH ORDINALITY AS answer (status, position)
      ORDER BY position`,
    [...idsAndTokens(jobs.map(([j]) => j)), documents(jobs.map(([, e]) => e)), retry],
    (rows) => column(rows) as (JobStatus | null)[],
  );
}

export function snooze(job: Lease, delayMs: number): Call<JobStatus | null> {
  return call(
    "snooze",
    `SELECT leaseq.queue_snooze(job_id => $1::bigint, lease_token => $2::uuid,
                                delay => $3::bigint OPERATOR(pg_catalog.*) interval '1 millisecond')::text`,
    [job.id, job.leaseToken, Math.round(delayMs)],
    (rows) => (one(rows) ?? null) as JobStatus | null,
  );
}

/** Jobs claimed and never started, pending again at once with their budget kept: one answer per
 * job, false where its lease was lost. */
export function handBack(jobs: Lease[]): Call<boolean[]> {
  return call(
    "hand_back",
    `SELECT handed
       FROM leaseq.queue_hand_back(job_ids => $1::bigint[], lease_tokens => $2::uuid[])
            WITH ORDINALITY AS answer (handed, position)
      ORDER BY position`,
    idsAndTokens(jobs),
    (rows) => column(rows) as boolean[],
  );
}

export const redrive = (jobId: string): Call<boolean> =>
  call("redrive", "SELECT leaseq.queue_redrive(job_id => $1::bigint)", [jobId], (r) => one(r) as boolean);

export const redriveAll = (queue: string, maxJobs?: number): Call<number> =>
  call(
    "redrive_all",
    "SELECT leaseq.queue_redrive_all(queue => $1::text, max_jobs => $2::int)::int",
    [queue, maxJobs ?? null],
    (r) => one(r) as number,
  );

/** `queue_redrive` of each job in one call: one answer per id, in input order; an unknown id
 * refuses the whole call (42704). */
export const redriveMany = (jobIds: string[]): Call<boolean[]> =>
  call(
    "redrive_batch",
    `SELECT changed
       FROM leaseq.queue_redrive_batch(job_ids => $1::bigint[])
            WITH ORDINALITY AS answer (changed, position)
      ORDER BY position`,
    [jobIds],
    (rows) => column(rows) as boolean[],
  );

export const cancel = (jobId: string): Call<boolean> =>
  call("cancel", "SELECT leaseq.queue_cancel(job_id => $1::bigint)", [jobId], (r) => one(r) as boolean);

/** `queue_cancel` of each job in one call: one answer per id, in input order; an unknown id
 * refuses the whole call (42704). */
export const cancelMany = (jobIds: string[]): Call<boolean[]> =>
  call(
    "cancel_batch",
    `SELECT changed
       FROM leaseq.queue_cancel_batch(job_ids => $1::bigint[])
            WITH ORDINALITY AS answer (changed, position)
      ORDER BY position`,
    [jobIds],
    (rows) => column(rows) as boolean[],
  );

/** Claims on the queue return no jobs until `resume`; false: it was already paused. */
export const pause = (queue: string): Call<boolean> =>
  call("pause", "SELECT leaseq.queue_pause(queue => $1::text)", [queue], (r) => one(r) as boolean);

/** False: the queue was not paused. */
export const resume = (queue: string): Call<boolean> =>
  call("resume", "SELECT leaseq.queue_resume(queue => $1::text)", [queue], (r) => one(r) as boolean);

export const metrics = (): Call<string> =>
  call("metrics", "SELECT leaseq.metrics()", [], (r) => one(r) as string);

export interface QueueStats {
  queue: string;
  pending: number;
  scheduled: number;
  running: number;
  expiredLeases: number;
  succeeded: number;
  dead: number;
  cancelled: number;
  /** Milliseconds the longest-waiting due job has been due; null when none is. */
  oldestPendingAgeMs: number | null;
  mostSnoozes: number;
  waiting: number;
}

export const stats = (): Call<QueueStats[]> =>
  call(
    "stats",
    `SELECT queue, pending::int, scheduled::int, running::int, expired_leases::int,
            succeeded::int, dead::int, cancelled::int,
            extract(epoch FROM oldest_pending_age)::float8 OPERATOR(pg_catalog.*) 1000,
            most_snoozes, waiting::int
       FROM leaseq.queue_stats()`,
    [],
    (rows) =>
      rows.map((r) => ({
        queue: r[0] as string,
        pending: r[1] as number,
        scheduled: r[2] as number,
        running: r[3] as number,
        expiredLeases: r[4] as number,
        succeeded: r[5] as number,
        dead: r[6] as number,
        cancelled: r[7] as number,
        oldestPendingAgeMs: r[8] as number | null,
        mostSnoozes: r[9] as number,
        waiting: r[10] as number,
      })),
  );

export interface JobDetail {
  jobId: string;
  queue: string;
  status: JobStatus;
  priority: number;
  runAt: Date;
  attempts: number;
  maxAttempts: number;
  worker: string | null;
  leaseExpiresAt: Date | null;
  dedupeKey: string | null;
  /** JSON documents as the server's text. */
  payload: string;
  result: string | null;
  lastError: string | null;
  createdAt: Date;
  updatedAt: Date;
  finishedAt: Date | null;
  snoozes: number;
  groupKey: string | null;
  /** What its running (or last) attempt last reported (`progress`), as JSON text; null: no
   * report yet. A retried job shows the earlier attempt's until it reports again. */
  progress: string | null;
  /** When that report was made. */
  progressAt: Date | null;
}

const JOB_COLUMNS = `job_id::text, queue, status::text, priority, run_at, attempts, max_attempts,
                     worker, lease_expires_at, dedupe_key, payload::text, result::text,
                     last_error::text, created_at, updated_at, finished_at, snoozes, group_key`;

export const job = (jobId: string): Call<JobDetail> =>
  call(
    "job",
    `SELECT ${JOB_COLUMNS}, progress::text, progress_at
       FROM leaseq.queue_job(job_id => $1::bigint)`,
    [jobId],
    jobDetail,
  );

/** `job` on a database not yet updated to 0.3.0, whose `queue_job` has no progress columns
 * (42703 for `job`): no report, as its jobs can make none. */
export const jobBeforeProgress = (jobId: string): Call<JobDetail> =>
  call(
    "job_before_progress",
    `SELECT ${JOB_COLUMNS} FROM leaseq.queue_job(job_id => $1::bigint)`,
    [jobId],
    jobDetail,
  );

function jobDetail(rows: Row[]): JobDetail {
  const r = rows[0] as Row;
  return {
    jobId: r[0] as string,
    queue: r[1] as string,
    status: r[2] as JobStatus,
    priority: r[3] as number,
    runAt: r[4] as Date,
    attempts: r[5] as number,
    maxAttempts: r[6] as number,
    worker: r[7] as string | null,
    leaseExpiresAt: r[8] as Date | null,
    dedupeKey: r[9] as string | null,
    payload: r[10] as string,
    result: r[11] as string | null,
    lastError: r[12] as string | null,
    createdAt: r[13] as Date,
    updatedAt: r[14] as Date,
    finishedAt: r[15] as Date | null,
    snoozes: r[16] as number,
    groupKey: r[17] as string | null,
    progress: (r[18] ?? null) as string | null,
    progressAt: (r[19] ?? null) as Date | null,
  };
}

export interface Attempt {
  attemptNo: number;
  worker: string;
  startedAt: Date;
  endedAt: Date | null;
  outcome: AttemptOutcome;
  error: string | null;
}

/** What the job returned when it succeeded, as JSON text; null until then. */
export const result = (jobId: string): Call<string | null> =>
  call(
    "result",
    "SELECT leaseq.queue_result(job_id => $1::bigint)::text",
    [jobId],
    (r) => one(r) as string | null,
  );

/** A parent of a job (`EnqueueOptions.dependsOn`). */
export interface Parent {
  parentId: string;
  /** Null: the parent was purged since. */
  queue: string | null;
  status: JobStatus | null;
  /** What it returned, as JSON text; null until it succeeded. */
  result: string | null;
}

/** The jobs `jobId` depends on, oldest first; none: it has no parents. */
export const parents = (jobId: string): Call<Parent[]> =>
  call(
    "parents",
    `SELECT parent_id::text, queue, status::text, result::text
       FROM leaseq.queue_parents(job_id => $1::bigint)`,
    [jobId],
    (rows) =>
      rows.map((r) => ({
        parentId: r[0] as string,
        queue: r[1] as string | null,
        status: r[2] as JobStatus | null,
        result: r[3] as string | null,
      })),
  );

/** A job of a flow. */
export interface FlowNode {
  /** Its name within the flow: what `dependsOn` and the answer name it by. */
  key: string;
  queue: string;
  /** Any JSON value, or `Json`; `{}` when left out. */
  payload?: unknown;
  /** Keys of the same flow this job waits for; none: it starts at once. */
  dependsOn?: string[];
  onParentFailure?: ParentFailure;
  priority?: number;
  maxAttempts?: number;
}

/** The flow's JSON document in the server's field names, fields left out absent; the payload as
 * `enqueue` sends it (a `Json` as its text, so a payload keeps every digit), every other field
 * serialised.
 *
 * A `Json` text is spliced only when it is exactly one JSON value: `{}, "queue": "billing"` would
 * add members to its node, and jsonb keeps a repeated key's last value, so the job would go to
 * another queue or lose its edges. */
function flowDocument(nodes: FlowNode[]): string {
  const payload = (value: unknown): string => {
    if (value instanceof Json) {
      try {
        JSON.parse(value.text);
      } catch (e) {
        throw new SyntaxError(
          `a flow payload's Json text must be exactly one JSON value: ${(e as Error).message}`,
        );
      }
    }
    return documentOf(value);
  };
  const node = (n: FlowNode): string => {
    const fields: [string, unknown][] = [
      ["key", n.key],
      ["queue", n.queue],
      ["payload", n.payload],
      ["depends_on", n.dependsOn],
      ["on_parent_failure", n.onParentFailure],
      ["priority", n.priority],
      ["max_attempts", n.maxAttempts],
    ];
    const given = fields.filter(([, value]) => value !== undefined);
    const member = ([name, value]: [string, unknown]): string =>
      `"${name}": ${name === "payload" ? payload(value) : JSON.stringify(value)}`;
    return `{${given.map(member).join(", ")}}`;
  };
  return `[${nodes.map(node).join(", ")}]`;
}

/** Enqueues a graph of jobs in one call, parents first, and answers each key's job id in the
 * order given; the whole graph is checked before the first insert. */
export function flow(nodes: FlowNode[], traceContext?: string): Call<Map<string, string>> {
  const document = flowDocument(nodes);
  const plain = call(
    "flow",
    `SELECT key, job_id::text
       FROM leaseq.queue_flow(jobs => $1::text::jsonb)
            WITH ORDINALITY AS answer (key, job_id, position)
      ORDER BY position`,
    [document],
    (rows) => new Map(rows.map((r) => [r[0] as string, r[1] as string])),
  );
  return traced(
    plain,
    "flow_traced",
    `SELECT key, job_id::text
       FROM leaseq.queue_flow(jobs => $1::text::jsonb, trace_context => $2::text)
            WITH ORDINALITY AS answer (key, job_id, position)
      ORDER BY position`,
    [document],
    traceContext,
  );
}

/** How far a flow got: its root and every job that depends on it, directly or not, by status
 * (`pending` includes jobs waiting for their group; purged jobs are not counted). */
export interface FlowStatus {
  jobs: number;
  blocked: number;
  pending: number;
  running: number;
  succeeded: number;
  dead: number;
  cancelled: number;
  /** Every one of them is final. */
  finished: boolean;
}

export const flowStatus = (root: string): Call<FlowStatus> =>
  call(
    "flow_status",
    `SELECT jobs::int, blocked::int, pending::int, running::int, succeeded::int, dead::int,
            cancelled::int, finished
       FROM leaseq.queue_flow_status(root => $1::bigint)`,
    [root],
    (rows) => {
      const r = rows[0] as Row;
      return {
        jobs: r[0] as number,
        blocked: r[1] as number,
        pending: r[2] as number,
        running: r[3] as number,
        succeeded: r[4] as number,
        dead: r[5] as number,
        cancelled: r[6] as number,
        finished: r[7] as boolean,
      };
    },
  );

/** Records, under `job`'s lease (fenced as `complete` is), that its handler did step `name`
 * (1 to 512 bytes) with `output` (serialised as `complete`'s result; left out: none), in the
 * transaction of the connection it runs on — the one that made the step's effect. True: recorded;
 * false, changing nothing: the lease token is stale or the step was already recorded (the first
 * record stands). Until that transaction ends nobody can take the job over (a key-share lock). */
export function step(job: Lease, name: string, output?: unknown): Call<boolean> {
  return call(
    "step",
    `SELECT leaseq.queue_step(job_id => $1::bigint, lease_token => $2::uuid, name => $3::text,
                              output => $4::text::jsonb)`,
    [job.id, job.leaseToken, name, optionalDocument(output)],
    (rows) => one(rows) as boolean,
  );
}

/** A step a job's handler recorded (`step`). */
export interface Step {
  name: string;
  /** The attempt that recorded it. */
  attemptNo: number;
  /** Its output, as JSON text; null: none. */
  output: string | null;
  recordedAt: Date;
}

/** The steps any attempt of `jobId` recorded, in the order they were recorded. */
export const steps = (jobId: string): Call<Step[]> =>
  call(
    "steps",
    `SELECT name, attempt_no, output::text, recorded_at
       FROM leaseq.queue_steps(job_id => $1::bigint)`,
    [jobId],
    (rows) =>
      rows.map((r) => ({
        name: r[0] as string,
        attemptNo: r[1] as number,
        output: r[2] as string | null,
        recordedAt: r[3] as Date,
      })),
  );

/** Reports, under `job`'s lease (fenced as `complete` is), how far its handler has got:
 * `progress` is any JSON document (a fraction, counts, a message; serialised as a payload is),
 * replacing the last report, and shown by `job` with the time it was made. True: kept; false,
 * changing nothing: the lease token is stale. A report is an update of the job's row: made in a
 * transaction, it is seen only once that transaction commits, and until then it holds the
 * job's renewals back — report in a statement of its own. */
export function progress(job: Lease, progress: unknown): Call<boolean> {
  return call(
    "progress",
    `SELECT leaseq.queue_progress(job_id => $1::bigint, lease_token => $2::uuid,
                                  progress => $3::text::jsonb)`,
    [job.id, job.leaseToken, documentOf(progress)],
    (rows) => one(rows) as boolean,
  );
}

/** What `awaitJobs` saw at its last look. */
export interface Awaited {
  /** Every job is final (succeeded, dead or cancelled; one purged while it waited counts). */
  allFinal: boolean;
  /** The ids not final yet, ascending; empty when all are. */
  unfinished: string[];
}

/** `CALL queue_await`: returns once every one of `jobIds` (at most 10000, none twice) is final,
 * or when `timeoutMs` (0 to a day) has passed. The procedure commits between its looks and
 * sleeps holding no snapshot, so it must run on a connection of its own, outside a transaction
 * (inside one: 25001), and it holds that connection while it waits. */
export function awaitJobs(jobIds: string[], timeoutMs: number): Call<Awaited> {
  return call(
    "await",
    `CALL leaseq.queue_await(job_ids => $1::bigint[],
                             timeout => $2::bigint OPERATOR(pg_catalog.*) interval '1 millisecond')`,
    [jobIds, timeoutMs],
    (rows) => {
      const r = rows[0] as Row;
      // The driver's own bigint[] parser gives strings; anything a caller registered, too.
      return { allFinal: r[0] as boolean, unfinished: (r[1] as unknown[]).map(String) };
    },
  );
}

export const attempts = (jobId: string): Call<Attempt[]> =>
  call(
    "attempts",
    `SELECT attempt_no, worker, started_at, ended_at, outcome::text, error::text
       FROM leaseq.queue_attempts(job_id => $1::bigint)`,
    [jobId],
    (rows) =>
      rows.map((r) => ({
        attemptNo: r[0] as number,
        worker: r[1] as string,
        startedAt: r[2] as Date,
        endedAt: r[3] as Date | null,
        outcome: r[4] as AttemptOutcome,
        error: r[5] as string | null,
      })),
  );

export const grant = (queue: string, role: string, privilege: QueuePrivilege): Call<boolean> =>
  call(
    "grant",
    "SELECT leaseq.queue_grant(queue => $1::text, role => $2::text::regrole, privilege => $3::text)",
    [queue, role, privilege],
    (r) => one(r) as boolean,
  );

export const revoke = (queue: string, role: string, privilege: QueuePrivilege): Call<boolean> =>
  call(
    "revoke",
    "SELECT leaseq.queue_revoke(queue => $1::text, role => $2::text::regrole, privilege => $3::text)",
    [queue, role, privilege],
    (r) => one(r) as boolean,
  );

export interface JobSummary {
  jobId: string;
  status: JobStatus;
  priority: number;
  runAt: Date;
  attempts: number;
  maxAttempts: number;
  worker: string | null;
  leaseExpiresAt: Date | null;
  lastError: string | null;
  createdAt: Date;
  finishedAt: Date | null;
  queue: string;
  groupKey: string | null;
  dedupeKey: string | null;
}

/** `queue_jobs`' filters; those left out do not narrow. */
export interface JobsOptions {
  status?: JobStatus | null;
  /** 1..10000; 100 when left out. */
  maxRows?: number;
  groupKey?: string | null;
  dedupeKey?: string | null;
  worker?: string | null;
  /** `createdAfter` <= created_at < `createdBefore`. */
  createdAfter?: Date | null;
  createdBefore?: Date | null;
  /** JSON containment (`payload @> value`): any JSON value, or `Json`. */
  payloadContains?: unknown;
  /** The next page: the last row's `jobId`. */
  beforeId?: string | null;
  /** Only jobs newer than this one (with `beforeId`: a window of ids). */
  afterId?: string | null;
}

/** Jobs newest first, of `queue` or (null) of every queue the role may observe. */
export const jobs = (queue: string | null | undefined, o: JobsOptions = {}): Call<JobSummary[]> =>
  call(
    "jobs",
    `SELECT job_id::text, status::text, priority, run_at, attempts, max_attempts, worker,
            lease_expires_at, last_error::text, created_at, finished_at, queue, group_key,
            dedupe_key
       FROM leaseq.queue_jobs(queue => $1::text, status => $2::text::leaseq.job_status,
                              max_rows => $3::int, group_key => $4::text, dedupe_key => $5::text,
                              worker => $6::text, created_after => $7::timestamptz,
                              created_before => $8::timestamptz,
                              payload_contains => $9::text::jsonb, before_id => $10::bigint,
                              after_id => $11::bigint)`,
    [
      queue ?? null,
      o.status ?? null,
      o.maxRows ?? 100,
      o.groupKey ?? null,
      o.dedupeKey ?? null,
      o.worker ?? null,
      o.createdAfter ?? null,
      o.createdBefore ?? null,
      optionalDocument(o.payloadContains),
      o.beforeId ?? null,
      o.afterId ?? null,
    ],
    (rows) =>
      rows.map((r) => ({
        jobId: r[0] as string,
        status: r[1] as JobStatus,
        priority: r[2] as number,
        runAt: r[3] as Date,
        attempts: r[4] as number,
        maxAttempts: r[5] as number,
        worker: r[6] as string | null,
        leaseExpiresAt: r[7] as Date | null,
        lastError: r[8] as string | null,
        createdAt: r[9] as Date,
        finishedAt: r[10] as Date | null,
        queue: r[11] as string,
        groupKey: r[12] as string | null,
        dedupeKey: r[13] as string | null,
      })),
  );

export const purge = (queue: string, olderThanMs: number, maxJobs = 10000): Call<number> =>
  call(
    "purge",
    `SELECT leaseq.queue_purge(queue => $1::text,
                               older_than => $2::bigint OPERATOR(pg_catalog.*) interval '1 millisecond',
                               max_jobs => $3::int)::int`,
    [queue, olderThanMs, maxJobs],
    (r) => one(r) as number,
  );

export interface QueueGrant {
  queue: string;
  role: string;
  privilege: QueuePrivilege;
  grantedAt: Date;
}

export const grants = (): Call<QueueGrant[]> =>
  call(
    "grants",
    "SELECT queue, role::text, privilege::text, granted_at FROM leaseq.queue_grants()",
    [],
    (rows) =>
      rows.map((r) => ({
        queue: r[0] as string,
        role: r[1] as string,
        privilege: r[2] as QueuePrivilege,
        grantedAt: r[3] as Date,
      })),
  );

/** A row of `queue_privileges`: what the connecting role may do on a queue (its group roles and
 * the queue's grants together). */
export interface QueueAccess {
  queue: string;
  produce: boolean;
  work: boolean;
  observe: boolean;
  admin: boolean;
}

export const privileges = (): Call<QueueAccess[]> =>
  call(
    "privileges",
    "SELECT queue, produce, work, observe, admin FROM leaseq.queue_privileges()",
    [],
    (rows) =>
      rows.map((r) => ({
        queue: r[0] as string,
        produce: r[1] as boolean,
        work: r[2] as boolean,
        observe: r[3] as boolean,
        admin: r[4] as boolean,
      })),
  );

export interface Schedule {
  name: string;
  queue: string;
  every: string;
  timezone: string;
  catchUp: boolean;
  /** The payload's JSON text. */
  payload: string;
  nextAt: Date;
  /** The job its last tick enqueued (an id as text, like every job id); null before its first tick. */
  lastJobId: string | null;
}

export function schedule(
  name: string,
  queue: string,
  every: string,
  payload: unknown,
  o: { timezone?: string; catchUp?: boolean; traceContext?: string } = {},
): Call<Date> {
  const values = [name, queue, every, documentOf(payload), o.timezone ?? "UTC", o.catchUp ?? false];
  const plain = call(
    "schedule",
    `SELECT leaseq.queue_schedule(name => $1::text, queue => $2::text, every => $3::text,
                                  payload => $4::text::jsonb, timezone => $5::text,
                                  catch_up => $6::boolean)`,
    values,
    (r) => one(r) as Date,
  );
  return traced(
    plain,
    "schedule_traced",
    `SELECT leaseq.queue_schedule(name => $1::text, queue => $2::text, every => $3::text,
                                  payload => $4::text::jsonb, timezone => $5::text,
                                  catch_up => $6::boolean, trace_context => $7::text)`,
    values,
    o.traceContext,
  );
}

export const unschedule = (name: string): Call<boolean> =>
  call("unschedule", "SELECT leaseq.queue_unschedule(name => $1::text)", [name], (r) => one(r) as boolean);

export const schedules = (): Call<Schedule[]> =>
  call(
    "schedules",
    `SELECT name, queue, every, timezone, catch_up, payload::text, next_at, last_job_id
       FROM leaseq.queue_schedules()`,
    [],
    (rows) =>
      rows.map((r) => ({
        name: r[0] as string,
        queue: r[1] as string,
        every: r[2] as string,
        timezone: r[3] as string,
        catchUp: r[4] as boolean,
        payload: r[5] as string,
        nextAt: r[6] as Date,
        lastJobId: r[7] as string | null,
      })),
  );
