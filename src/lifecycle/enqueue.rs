//! Enqueue: nothing → `pending`.
//!
//! An enqueue is an INSERT in the caller's transaction: the job commits or rolls back with the
//! caller's own rows, and its NOTIFY on `leaseq_<queue>` is delivered only at commit (PostgreSQL
//! sends one notification per channel and transaction however many jobs were added). NOTIFY has
//! a price: committing transactions that notified take one global lock in turn, so at peak they
//! serialize (measured: single-call enqueues from 4 connections halve). `leaseq.notify = off`
//! trades it for wake-ups by polling.
//!
//! Dedupe: while a job with the same `(queue, dedupe_key)` is pending or running, enqueue returns
//! that job's id and inserts nothing. The partial unique index `jobs_dedupe_key_live` is the
//! arbiter, so two concurrent enqueues with one key serialize on it: the second waits for the
//! first to commit, then returns its id (or inserts, if the first rolled back).
//!
//! Groups (`group`): a job with a `group_key` is inserted under its group's lock, `pending` if
//! the group has room and `waiting` otherwise. A keyed one looks for its live duplicate before
//! taking that lock, so that replacing a duplicate does not wait for a job's row while holding a
//! group (see the lock order there).
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

use crate::core::access;
use crate::core::args;
use crate::core::clock;
use crate::core::connect::{self, JOB_PATH};
use crate::core::counters::{self, Event};
use crate::core::datum::{IdArray, Jsonb, JsonbArray, QueuePrivilege, TextArray};
use crate::core::errors;
use crate::core::release::{self, Release};
use crate::core::settings;
use crate::core::spi::{
    self, BOOL, INT4, INT8, JSONB, JSONB_ARRAY, Statement, TEXT, TEXT_ARRAY, TIMESTAMPTZ,
};
use crate::lifecycle::depend;
use crate::lifecycle::group;
use crate::lifecycle::queue;

pub(crate) const INSERT: Statement = Statement {
    name: "enqueue",
    sql: "WITH inserted AS (
              INSERT INTO leaseq.jobs
                     (queue, payload, priority, run_at, max_attempts, created_at, updated_at,
                      trace_context)
              SELECT queue.name, $2, $3, coalesce($4, $6), coalesce($5, queue.max_attempts), $6, $6,
                     $8
                FROM leaseq.queues AS queue
               WHERE queue.name = $1
              RETURNING id)
          SELECT inserted.id,
                 CASE WHEN $7 THEN pg_catalog.pg_notify('leaseq_' || $1, '') END
            FROM inserted",
    params: &[
        TEXT,
        JSONB,
        INT4,
        TIMESTAMPTZ,
        INT4,
        TIMESTAMPTZ,
        BOOL,
        TEXT,
    ],
};

/// As `INSERT`, for a job that waits for its parents (`depend`): `blocked`, so no NOTIFY.
pub(crate) const INSERT_BLOCKED: Statement = Statement {
    name: "enqueue.blocked",
    sql: "INSERT INTO leaseq.jobs
                 (queue, payload, priority, run_at, max_attempts, created_at, updated_at, status,
                  trace_context)
          SELECT queue.name, $2, $3, coalesce($4, $6), coalesce($5, queue.max_attempts), $6, $6,
                 'blocked', $7
            FROM leaseq.queues AS queue
           WHERE queue.name = $1
          RETURNING id",
    params: &[TEXT, JSONB, INT4, TIMESTAMPTZ, INT4, TIMESTAMPTZ, TEXT],
};

/// As `INSERT`, but yields to a live job with the same dedupe key (`$8`). The arbiter's predicate
/// implies `jobs_dedupe_key_live`'s under every schema served (`finished_at IS NULL` from 0.3.0,
/// the status lists of 0.1.0 and 0.2.0: compat), as a test checks.
pub(crate) const INSERT_DEDUPED: Statement = Statement {
    name: "enqueue.deduped",
    sql: "WITH inserted AS (
              INSERT INTO leaseq.jobs
                     (queue, payload, priority, run_at, max_attempts, created_at, updated_at,
                      dedupe_key, trace_context)
              SELECT queue.name, $2, $3, coalesce($4, $6), coalesce($5, queue.max_attempts), $6,
                     $6, $8, $9
                FROM leaseq.queues AS queue
               WHERE queue.name = $1
              ON CONFLICT (queue, dedupe_key)
                 WHERE dedupe_key IS NOT NULL AND keyed_finished_at IS NULL
                       AND lane IN ('pending', 'running')
                 DO NOTHING
              RETURNING id)
          SELECT inserted.id,
                 CASE WHEN $7 THEN pg_catalog.pg_notify('leaseq_' || $1, '') END
            FROM inserted",
    params: &[
        TEXT,
        JSONB,
        INT4,
        TIMESTAMPTZ,
        INT4,
        TIMESTAMPTZ,
        BOOL,
        TEXT,
        TEXT,
    ],
};

/// As `INSERT_DEDUPED`, for a job of the group `$9`, locked by the caller (`group`): `pending`
/// while the group has fewer live jobs than the queue's `group_concurrency` (counted up to it),
/// `waiting` otherwise. `$8` may be NULL.
pub(crate) const INSERT_GROUPED: Statement = Statement {
    name: "enqueue.grouped",
    sql: "WITH inserted AS (
              INSERT INTO leaseq.jobs
                     (queue, payload, priority, run_at, max_attempts, created_at, updated_at,
                      dedupe_key, group_key, trace_context, status)
              SELECT queue.name, $2, $3, coalesce($4, $6), coalesce($5, queue.max_attempts), $6,
                     $6, $8, $9, $10,
                     CASE WHEN (SELECT count(*)
                                  FROM (SELECT FROM leaseq.jobs AS live
                                         WHERE live.queue = $1 AND live.group_key = $9
                                           AND live.keyed_finished_at IS NULL
                                         LIMIT queue.group_concurrency) AS live)
                               < queue.group_concurrency
                          THEN 'pending' ELSE 'waiting' END::leaseq.job_status
                FROM leaseq.queues AS queue
               WHERE queue.name = $1
              ON CONFLICT (queue, dedupe_key)
                 WHERE dedupe_key IS NOT NULL AND keyed_finished_at IS NULL
                       AND lane IN ('pending', 'running')
                 DO NOTHING
              RETURNING id, status)
          SELECT inserted.id,
                 CASE WHEN $7 AND inserted.status = 'pending'
                      THEN pg_catalog.pg_notify('leaseq_' || $1, '') END
            FROM inserted",
    params: &[
        TEXT,
        JSONB,
        INT4,
        TIMESTAMPTZ,
        INT4,
        TIMESTAMPTZ,
        BOOL,
        TEXT,
        TEXT,
        TEXT,
    ],
};

/// The live job holding the key: after `INSERT_DEDUPED` yielded, in a new statement whose fresh
/// snapshot sees the job whose commit the insert waited for. (Live: not final, as the unique
/// index says it.)
pub(crate) const FIND_LIVE_DUPLICATE: Statement = Statement {
    name: "enqueue.find_live_duplicate",
    sql: "SELECT job.id FROM leaseq.jobs AS job
           WHERE job.queue = $1 AND job.dedupe_key = $2 AND job.keyed_finished_at IS NULL",
    params: &[TEXT, TEXT],
};

/// A job with the key that finished (succeeded or dead) at or after `$3`: the window of
/// `dedupe_for`. Its newest, through `jobs_dedupe_key_finished`.
pub(crate) const FIND_RECENT_DUPLICATE: Statement = Statement {
    name: "enqueue.find_recent_duplicate",
    sql: "SELECT job.id FROM leaseq.jobs AS job
           WHERE job.queue = $1 AND job.dedupe_key = $2
             AND (job.lane = 'succeeded' OR job.lane = 'dead')
             AND job.keyed_finished_at >= $3
           ORDER BY job.keyed_finished_at DESC
           LIMIT 1",
    params: &[TEXT, TEXT, TIMESTAMPTZ],
};

/// A purged job with the key that succeeded at or after `$3` (`leaseq.purged_keys`, from 0.3.0
/// on): the window outlives the row.
pub(crate) const FIND_PURGED_DUPLICATE: Statement = Statement {
    name: "enqueue.find_purged_duplicate",
    sql: "SELECT remembered.job_id FROM leaseq.purged_keys AS remembered
           WHERE remembered.queue = $1 AND remembered.dedupe_key = $2
             AND remembered.finished_at >= $3",
    params: &[TEXT, TEXT, TIMESTAMPTZ],
};

/// Takes back the job this call just inserted, when a duplicate finished meanwhile (see
/// `queue_enqueue`): nobody else has seen it.
pub(crate) const TAKE_BACK: Statement = Statement {
    name: "enqueue.take_back",
    sql: "DELETE FROM leaseq.jobs AS job WHERE job.id = $1",
    params: &[INT8],
};

/// `on_duplicate => 'replace'`: the pending (or waiting) duplicate takes the new payload and
/// `run_at` (debounce). A job that started running meanwhile is left as it is.
pub(crate) const REPLACE_PENDING: Statement = Statement {
    name: "enqueue.replace_pending",
    sql: "UPDATE leaseq.jobs AS job
             SET payload = $2, run_at = $3, updated_at = $4
           WHERE job.id = $1 AND job.finished_at IS NULL AND job.status <> 'running'
          RETURNING CASE WHEN $5 THEN pg_catalog.pg_notify('leaseq_' || job.queue, '') END",
    params: &[INT8, JSONB, TIMESTAMPTZ, TIMESTAMPTZ, BOOL],
};

/// Ids come back sorted: identities are drawn in `ORDER BY ord`, so that is payload order.
pub(crate) const INSERT_BATCH: Statement = Statement {
    name: "enqueue_batch",
    sql: "WITH inserted AS (
              INSERT INTO leaseq.jobs
                     (queue, payload, priority, run_at, max_attempts, created_at, updated_at,
                      trace_context)
              SELECT queue.name, given.payload, $3, coalesce($4, $5), queue.max_attempts, $5, $5,
                     $7
                FROM leaseq.queues AS queue,
                     unnest($2) WITH ORDINALITY AS given (payload, ord)
               WHERE queue.name = $1
               ORDER BY given.ord
              RETURNING id)
          SELECT array_agg(inserted.id ORDER BY inserted.id),
                 CASE WHEN $6 THEN pg_catalog.pg_notify('leaseq_' || $1, '') END
            FROM inserted",
    params: &[
        TEXT,
        JSONB_ARRAY,
        INT4,
        TIMESTAMPTZ,
        TIMESTAMPTZ,
        BOOL,
        TEXT,
    ],
};

/// As `INSERT_BATCH`, for jobs that wait for their parents (`depend`): `blocked`, so no NOTIFY.
pub(crate) const INSERT_BATCH_BLOCKED: Statement = Statement {
    name: "enqueue_batch.blocked",
    sql: "WITH inserted AS (
              INSERT INTO leaseq.jobs
                     (queue, payload, priority, run_at, max_attempts, created_at, updated_at,
                      status, trace_context)
              SELECT queue.name, given.payload, $3, coalesce($4, $5), queue.max_attempts, $5, $5,
                     'blocked', $6
                FROM leaseq.queues AS queue,
                     unnest($2) WITH ORDINALITY AS given (payload, ord)
               WHERE queue.name = $1
               ORDER BY given.ord
              RETURNING id)
          SELECT array_agg(inserted.id ORDER BY inserted.id) FROM inserted",
    params: &[TEXT, JSONB_ARRAY, INT4, TIMESTAMPTZ, TIMESTAMPTZ, TEXT],
};

/// As `INSERT_BATCH`, with a group per job (`$7`, NULL elements: none), locked by the caller:
/// the n-th job of a group in the batch is `pending` if the group's live jobs before it, counted
/// up to the queue's `group_concurrency`, leave it room.
pub(crate) const INSERT_BATCH_GROUPED: Statement = Statement {
    name: "enqueue_batch.grouped",
    sql: "WITH given AS (
              SELECT given.payload, given.group_key, given.ord,
                     row_number() OVER (PARTITION BY given.group_key ORDER BY given.ord) AS nth
                FROM unnest($2, $7::text[]) WITH ORDINALITY AS given (payload, group_key, ord)),
          inserted AS (
              INSERT INTO leaseq.jobs
                     (queue, payload, priority, run_at, max_attempts, created_at, updated_at,
                      group_key, trace_context, status)
              SELECT queue.name, given.payload, $3, coalesce($4, $5), queue.max_attempts, $5, $5,
                     given.group_key, $8,
                     CASE WHEN given.group_key IS NULL
                            OR (SELECT count(*)
                                  FROM (SELECT FROM leaseq.jobs AS live
                                         WHERE live.queue = $1
                                           AND live.group_key = given.group_key
                                           AND live.keyed_finished_at IS NULL
                                         LIMIT queue.group_concurrency) AS live)
                               + given.nth <= queue.group_concurrency
                          THEN 'pending' ELSE 'waiting' END::leaseq.job_status
                FROM leaseq.queues AS queue, given
               WHERE queue.name = $1
               ORDER BY given.ord
              RETURNING id, status)
          SELECT array_agg(inserted.id ORDER BY inserted.id),
                 CASE WHEN $6 AND bool_or(inserted.status = 'pending')
                      THEN pg_catalog.pg_notify('leaseq_' || $1, '') END
            FROM inserted",
    params: &[
        TEXT,
        JSONB_ARRAY,
        INT4,
        TIMESTAMPTZ,
        TIMESTAMPTZ,
        BOOL,
        TEXT_ARRAY,
        TEXT,
    ],
};

/// How often enqueue retries when the live duplicate it yielded to finished before it could be
/// read. Each round needs another session to finish a job with this key in that instant.
const DEDUPE_ROUNDS: usize = 8;

/// What an enqueue does when its dedupe key is taken (`on_duplicate`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum OnDuplicate {
    /// Return the duplicate's id; change nothing.
    Ignore,
    /// A pending duplicate takes the new payload and `run_at`; otherwise as `Ignore`.
    Replace,
}

/// Adds a job to `queue` in the caller's transaction and returns its id.
///
/// - `run_at`: when it becomes due; NULL means now. Must be finite.
/// - `priority`: higher runs first among due jobs.
/// - `dedupe_key`: while a job with this key is pending or running in the queue, return its id
///   instead of adding another (1 to 512 bytes).
/// - `max_attempts`: this job's retry budget; NULL means the queue's.
/// - `dedupe_for`: the key also stays taken for this long after its job succeeded or went dead
///   (cancelling frees it); greater than 0; beyond the clock's range (`'10000 years'`) means for
///   ever. Needs `dedupe_key`.
/// - `on_duplicate`: `ignore` (the default) or `replace`: a pending duplicate takes this
///   payload and `run_at` (debounce); a running or finished one is never changed. Needs
///   `dedupe_key`.
/// - `group_key`: the job's group (`group`, 1 to 512 bytes): at most the queue's
///   `group_concurrency` of its jobs run at once, with 1 in enqueue order.
/// - `depends_on`: its parents (`depend`), jobs of any queue: the job is `blocked` until every
///   one has succeeded, and becomes pending in the transaction that completes the last. Not
///   with `dedupe_key` or `group_key`.
/// - `on_parent_failure`: what the job does when a parent goes dead or is cancelled: `cancel`
///   (it and its own descendants are cancelled), `dead`, or `run` (anyway, once every parent is
///   final).
/// - `trace_context`: the producer's W3C `traceparent` (`00-<trace id>-<span id>-<flags>`),
///   returned by the claim so that the worker's span joins the producer's trace.
///
/// Errors: `22004` NULL queue/payload/priority/on_duplicate/on_parent_failure or an element of
/// depends_on, `22023` invalid argument, `42704` unknown queue or parent, `42501` without
/// `observe` or `work` on a parent's queue, `54000` payload over `leaseq.max_payload_bytes`.
// Every argument is one of the SQL function's.
#[allow(clippy::too_many_arguments)]
#[pg_extern(name = "queue_enqueue")]
pub fn enqueue_job(
    queue: Option<&str>,
    payload: Option<Jsonb>,
    run_at: default!(Option<TimestampWithTimeZone>, "NULL"),
    priority: default!(Option<i32>, 0),
    dedupe_key: default!(Option<&str>, "NULL"),
    max_attempts: default!(Option<i32>, "NULL"),
    dedupe_for: default!(Option<Interval>, "NULL"),
    on_duplicate: default!(Option<&str>, "'ignore'"),
    group_key: default!(Option<&str>, "NULL"),
    depends_on: default!(Option<IdArray>, "NULL"),
    on_parent_failure: default!(Option<&str>, "'cancel'"),
    trace_context: default!(Option<&str>, "NULL"),
) -> i64 {
    let job = Job {
        run_at,
        priority,
        dedupe_key,
        max_attempts,
        dedupe_for,
        on_duplicate,
        group_key,
        depends_on,
        on_parent_failure,
        trace_context,
    };
    enqueue_with(&THIS_RELEASE, queue, payload, job)
}

/// The statements an enqueue inserts with: this release's, or (compat) an older schema's, whose
/// jobs have no `trace_context` (its parameter is there, unused). A job with parents is only
/// ever enqueued on this release's schema.
pub(crate) struct Inserts {
    pub one: &'static Statement,
    pub deduped: &'static Statement,
    pub grouped: &'static Statement,
    pub batch: &'static Statement,
    pub batch_grouped: &'static Statement,
}

pub(crate) const THIS_RELEASE: Inserts = Inserts {
    one: &INSERT,
    deduped: &INSERT_DEDUPED,
    grouped: &INSERT_GROUPED,
    batch: &INSERT_BATCH,
    batch_grouped: &INSERT_BATCH_GROUPED,
};

/// `queue_enqueue`'s optional arguments.
pub(crate) struct Job<'a> {
    pub run_at: Option<TimestampWithTimeZone>,
    pub priority: Option<i32>,
    pub dedupe_key: Option<&'a str>,
    pub max_attempts: Option<i32>,
    pub dedupe_for: Option<Interval>,
    pub on_duplicate: Option<&'a str>,
    pub group_key: Option<&'a str>,
    pub depends_on: Option<IdArray>,
    pub on_parent_failure: Option<&'a str>,
    pub trace_context: Option<&'a str>,
}

/// `queue_enqueue`'s work, with the statements of the schema it serves.
pub(crate) fn enqueue_with(
    inserts: &Inserts,
    queue: Option<&str>,
    payload: Option<Jsonb>,
    job: Job<'_>,
) -> i64 {
    const F: &str = "queue_enqueue";
    let Job {
        run_at,
        priority,
        dedupe_key,
        max_attempts,
        dedupe_for,
        on_duplicate,
        group_key,
        depends_on,
        on_parent_failure,
        trace_context,
    } = job;
    let queue = args::queue_name(F, queue);
    let payload = args::required(F, "payload", payload);
    args::document(F, "payload", &payload);
    if let Some(run_at) = run_at {
        args::finite_time(F, "run_at", run_at);
    }
    let priority = args::required(F, "priority", priority);
    if let Some(key) = dedupe_key {
        args::short_text(F, "dedupe_key", key);
    }
    if let Some(max_attempts) = max_attempts {
        args::max_attempts(F, max_attempts);
    }
    if let Some(group) = group_key {
        args::short_text(F, "group_key", group);
    }
    if let Some(trace) = trace_context {
        args::trace_context(F, "trace_context", trace);
    }
    let on_duplicate = match args::required(F, "on_duplicate", on_duplicate) {
        "ignore" => OnDuplicate::Ignore,
        "replace" => OnDuplicate::Replace,
        _ => errors::invalid_argument(F, "on_duplicate", "must be ignore or replace"),
    };
    if dedupe_key.is_none() && (dedupe_for.is_some() || on_duplicate != OnDuplicate::Ignore) {
        errors::invalid_argument(
            F,
            "dedupe_key",
            "must be given with dedupe_for or on_duplicate => 'replace'",
        );
    }
    let window = dedupe_for.map(|d| {
        let micros = args::interval_micros(d);
        if micros <= 0 {
            errors::invalid_argument(
                F,
                "dedupe_for",
                "must be greater than 0 ('10000 years': for ever)",
            );
        }
        micros
    });
    let parents = args::parent_ids(F, depends_on);
    let on_parent_failure = args::parent_failure(F, on_parent_failure);
    if !parents.is_empty() && (dedupe_key.is_some() || group_key.is_some()) {
        errors::invalid_argument(
            F,
            "depends_on",
            "cannot be combined with dedupe_key or group_key",
        );
    }
    let now = clock::now();
    // Finished duplicates count from this instant on; past the clock's range, for ever.
    let since = window.map(|micros| {
        let raw: pg_sys::TimestampTz = now.into();
        i64::try_from(raw as i128 - micros)
            .ok()
            .and_then(|raw| TimestampWithTimeZone::try_from(raw).ok())
            .unwrap_or_else(TimestampWithTimeZone::negative_infinity)
    });

    let notify = settings::notify();
    // One statement inserts: by group, then by key. `None`: nothing inserted — the key is taken
    // or the queue unknown.
    let insert = |client: &mut SpiClient<'_>| -> Option<i64> {
        let mut args = vec![
            queue.into(),
            Jsonb::arg(Some(payload)),
            priority.into(),
            run_at.into(),
            max_attempts.into(),
            now.into(),
            notify.into(),
        ];
        let statement = match (group_key, dedupe_key) {
            (None, None) => inserts.one,
            (None, Some(key)) => {
                args.push(key.into());
                inserts.deduped
            }
            (Some(group), key) => {
                group::lock(client, &[(queue.to_owned(), group.to_owned())]);
                args.extend([key.into(), group.into()]);
                inserts.grouped
            }
        };
        args.push(trace_context.into());
        spi::run(client, statement, &args).first(|row| row.required(1))
    };
    access::require_queue(F, queue, QueuePrivilege::Produce);
    access::require_jobs_any(
        F,
        &parents,
        &[QueuePrivilege::Observe, QueuePrivilege::Work],
    );
    connect::connect(&JOB_PATH, |client| {
        if !parents.is_empty() {
            // Blocked until its parents let it run (`depend`).
            let parents = depend::read_parents(client, F, "depends_on", &parents);
            let id = spi::run(
                client,
                &INSERT_BLOCKED,
                &[
                    queue.into(),
                    Jsonb::arg(Some(payload)),
                    priority.into(),
                    run_at.into(),
                    max_attempts.into(),
                    now.into(),
                    trace_context.into(),
                ],
            )
            .first(|row| row.required(1))
            .unwrap_or_else(|| errors::unknown_queue(F, queue));
            depend::link(client, &[(id, &parents)], on_parent_failure, now);
            counters::count(queue, Event::Enqueued, 1);
            return id;
        }
        let Some(key) = dedupe_key else {
            let id = insert(client).unwrap_or_else(|| errors::unknown_queue(F, queue));
            counters::count(queue, Event::Enqueued, 1);
            return id;
        };
        let recent = |client: &mut SpiClient<'_>| -> Option<i64> {
            let since = since?;
            let find = |client: &mut SpiClient<'_>, statement| {
                spi::run(client, statement, &[queue.into(), key.into(), since.into()])
                    .first(|row| row.required(1))
            };
            find(client, &FIND_RECENT_DUPLICATE).or_else(|| {
                // 0.2.0's schema remembers no purged key.
                (release::current(client) >= Release::V0_3_0)
                    .then(|| find(client, &FIND_PURGED_DUPLICATE))
                    .flatten()
            })
        };
        // The live duplicate's id, after replacing its payload if asked to.
        let live = |client: &mut SpiClient<'_>| -> Option<i64> {
            let id = spi::run(client, &FIND_LIVE_DUPLICATE, &[queue.into(), key.into()])
                .first(|row| row.required::<i64>(1))?;
            if on_duplicate == OnDuplicate::Replace {
                spi::run(
                    client,
                    &REPLACE_PENDING,
                    &[
                        id.into(),
                        Jsonb::arg(Some(payload)),
                        run_at.unwrap_or(now).into(),
                        now.into(),
                        notify.into(),
                    ],
                );
            }
            Some(id)
        };
        for _ in 0..DEDUPE_ROUNDS {
            if let Some(id) = recent(client) {
                return id;
            }
            // Before the group's lock (see the module comment).
            if group_key.is_some()
                && let Some(id) = live(client)
            {
                return id;
            }
            if let Some(id) = insert(client) {
                // A live duplicate that finished while this call inserted did not stop the
                // insert; in a new statement, its fresh snapshot sees it.
                if let Some(finished) = recent(client) {
                    spi::run(client, &TAKE_BACK, &[id.into()]);
                    return finished;
                }
                counters::count(queue, Event::Enqueued, 1);
                return id;
            }
            if let Some(id) = live(client) {
                return id;
            }
            // Nothing inserted and no duplicate: either the queue is unknown, or the duplicate
            // finished in between and the key is free again.
            queue::load(client, F, queue);
        }
        errors::internal(F, "the dedupe key kept changing hands; retry the call")
    })
}

/// Adds one job per element of `payloads` in one statement, all with the same `run_at` and
/// `priority`, and returns their ids in payload order. An empty array adds nothing.
///
/// - `group_keys`: each job's group (`group_key` of `queue_enqueue`), one per payload; a NULL
///   element: that job has none. Jobs of one group are in payload order.
/// - `depends_on`, `on_parent_failure`: every job's parents, as for `queue_enqueue` (a fan-out:
///   the jobs wait for the same parents). Not with `group_keys`.
/// - `depends_on_each`: each job's own parents instead, a JSON array with one array of job ids
///   per payload (`[[12, 13], [], [12]]`; an empty one: that job waits for nothing).
/// - `trace_context`: the producer's W3C `traceparent`, every job's (see `queue_enqueue`).
///
/// Errors: as `queue_enqueue`; a NULL payload is `22004` and names its position;
/// `depends_on_each` not an array of arrays of ids, not one per payload, a job twice in one
/// list, over 10000 parents in all, or with `depends_on` or `group_keys`: `22023` naming it.
#[pg_extern(name = "queue_enqueue_batch")]
#[allow(clippy::too_many_arguments)]
pub fn enqueue_jobs(
    queue: Option<&str>,
    payloads: Option<JsonbArray>,
    run_at: default!(Option<TimestampWithTimeZone>, "NULL"),
    priority: default!(Option<i32>, 0),
    group_keys: default!(Option<TextArray>, "NULL"),
    depends_on: default!(Option<IdArray>, "NULL"),
    on_parent_failure: default!(Option<&str>, "'cancel'"),
    depends_on_each: default!(Option<Jsonb>, "NULL"),
    trace_context: default!(Option<&str>, "NULL"),
) -> SetOfIterator<'static, i64> {
    let jobs = Batch {
        run_at,
        priority,
        group_keys,
        depends_on,
        on_parent_failure,
        depends_on_each,
        trace_context,
    };
    SetOfIterator::new(enqueue_batch_with(&THIS_RELEASE, queue, payloads, jobs))
}

/// `queue_enqueue_batch`'s optional arguments.
pub(crate) struct Batch<'a> {
    pub run_at: Option<TimestampWithTimeZone>,
    pub priority: Option<i32>,
    pub group_keys: Option<TextArray>,
    pub depends_on: Option<IdArray>,
    pub on_parent_failure: Option<&'a str>,
    pub depends_on_each: Option<Jsonb>,
    pub trace_context: Option<&'a str>,
}

/// `queue_enqueue_batch`'s work, with the statements of the schema it serves.
pub(crate) fn enqueue_batch_with(
    inserts: &Inserts,
    queue: Option<&str>,
    payloads: Option<JsonbArray>,
    jobs: Batch<'_>,
) -> Vec<i64> {
    const F: &str = "queue_enqueue_batch";
    let Batch {
        run_at,
        priority,
        group_keys,
        depends_on,
        on_parent_failure,
        depends_on_each,
        trace_context,
    } = jobs;
    // Sizes first, from the arguments' headers: the work and the memory of a call are linear in
    // its jobs and edges, and both are bounded before anything is copied or parsed.
    let queue = args::queue_name(F, queue);
    let payloads = args::required(F, "payloads", payloads);
    let jobs = payloads.len();
    args::at_most_a_batch(F, "payloads", jobs);
    let parents = args::parent_ids(F, depends_on);
    args::at_most_edges(F, "depends_on", jobs * parents.len());
    if let Some(run_at) = run_at {
        args::finite_time(F, "run_at", run_at);
    }
    let priority = args::required(F, "priority", priority);
    let on_parent_failure = args::parent_failure(F, on_parent_failure);
    if let Some(trace) = trace_context {
        args::trace_context(F, "trace_context", trace);
    }
    if group_keys.is_some() && (!parents.is_empty() || depends_on_each.is_some()) {
        let argument = if parents.is_empty() {
            "depends_on_each"
        } else {
            "depends_on"
        };
        errors::invalid_argument(F, argument, "cannot be combined with group_keys");
    }
    if depends_on_each.is_some() && !parents.is_empty() {
        errors::invalid_argument(F, "depends_on_each", "cannot be combined with depends_on");
    }
    access::require_queue(F, queue, QueuePrivilege::Produce);
    let group_keys = args::group_keys(F, group_keys, jobs);
    let elements = payloads.elements();
    for (i, element) in elements.iter().enumerate() {
        check_for_interrupts!();
        match element {
            Some(doc) => args::document(F, &format!("payloads[{}]", i + 1), doc),
            None => errors::null_argument(F, &format!("payloads[{}]", i + 1)),
        }
    }
    // Each job's own parents (`depends_on_each`), or `parents` for every one of them.
    let each = depends_on_each.map(|doc| args::parents_each(F, &doc, jobs));
    let (parents_argument, all_parents) = match &each {
        None => ("depends_on", parents),
        Some(each) => {
            let mut all: Vec<i64> = each.iter().flatten().copied().collect();
            all.sort_unstable();
            all.dedup();
            ("depends_on_each", all)
        }
    };
    access::require_jobs_any(
        F,
        &all_parents,
        &[QueuePrivilege::Observe, QueuePrivilege::Work],
    );
    let now = clock::now();
    let ids = connect::connect(&JOB_PATH, |client| {
        if elements.is_empty() {
            queue::load(client, F, queue);
            return Vec::new();
        }
        if !all_parents.is_empty() {
            let locked = depend::read_parents(client, F, parents_argument, &all_parents);
            let args = [
                queue.into(),
                payloads.arg(),
                priority.into(),
                run_at.into(),
                now.into(),
                trace_context.into(),
            ];
            let ids: Vec<i64> = spi::run(client, &INSERT_BATCH_BLOCKED, &args)
                .single(|row| row.get(1))
                .unwrap_or_else(|| errors::unknown_queue(F, queue));
            let own: Vec<Vec<depend::Parent>> = match &each {
                None => Vec::new(),
                Some(each) => {
                    let by_id: std::collections::HashMap<i64, &depend::Parent> =
                        locked.iter().map(|parent| (parent.id(), parent)).collect();
                    each.iter()
                        .map(|parents| parents.iter().map(|p| by_id[p].clone()).collect())
                        .collect()
                }
            };
            let children: Vec<(i64, &[depend::Parent])> = match &each {
                None => ids.iter().map(|&id| (id, locked.as_slice())).collect(),
                Some(_) => ids
                    .iter()
                    .copied()
                    .zip(own.iter().map(Vec::as_slice))
                    .collect(),
            };
            depend::link(client, &children, on_parent_failure, now);
            return ids;
        }
        let mut args = vec![
            queue.into(),
            payloads.arg(),
            priority.into(),
            run_at.into(),
            now.into(),
            settings::notify().into(),
        ];
        let groups: group::Groups = group_keys
            .iter()
            .flatten()
            .flatten()
            .map(|key| (queue.to_owned(), key.clone()))
            .collect();
        let statement = if groups.is_empty() {
            inserts.batch
        } else {
            group::lock(client, &groups);
            args.push(group_keys.clone().into());
            inserts.batch_grouped
        };
        args.push(trace_context.into());
        let inserted = spi::run(client, statement, &args);
        // One row always (an aggregate); NULL ids: the queue did not exist.
        inserted
            .single(|row| row.get::<Vec<i64>>(1))
            .unwrap_or_else(|| errors::unknown_queue(F, queue))
    });
    if ids.len() != elements.len() {
        errors::internal(
            F,
            "a batch inserted a different number of jobs than payloads",
        );
    }
    counters::count(queue, Event::Enqueued, ids.len());
    ids
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use pgrx::prelude::*;

    #[pg_test]
    fn enqueue_takes_budget_from_the_queue_and_run_at_from_the_clock() {
        Spi::run("SELECT leaseq.queue_create('enq_defaults', max_attempts => 7)").unwrap();
        let id = Spi::get_one::<i64>("SELECT leaseq.queue_enqueue('enq_defaults', '{}')")
            .unwrap()
            .unwrap();
        let ok = Spi::get_one_with_args::<bool>(
            "SELECT status = 'pending' AND attempts = 0 AND max_attempts = 7 AND priority = 0
                    AND run_at = created_at AND run_at <= clock_timestamp() AND lease_token IS NULL
               FROM leaseq.jobs WHERE id = $1",
            &[id.into()],
        );
        assert_eq!(ok, Ok(Some(true)));
    }

    #[pg_test]
    fn a_payload_comes_back_from_claim_bit_for_bit() {
        Spi::run("SELECT leaseq.queue_create('enq_exact')").unwrap();
        let doc = r#"{"big": 123456789012345678901234567890, "fine": 0.1000000000000000055511151231257827, "tiny": 1e-30, "text": "naïve ☃ \"quoted\"", "nested": [1, {"a": null}]}"#;
        Spi::run_with_args(
            "SELECT leaseq.queue_enqueue('enq_exact', $1::jsonb)",
            &[doc.into()],
        )
        .unwrap();
        let same = Spi::get_one_with_args::<bool>(
            "SELECT payload::text = $1::jsonb::text FROM leaseq.queue_claim('enq_exact', 'w')",
            &[doc.into()],
        );
        assert_eq!(same, Ok(Some(true)));
    }

    #[pg_test]
    fn batch_enqueue_returns_ids_in_payload_order() {
        Spi::run("SELECT leaseq.queue_create('enq_batch')").unwrap();
        // The n-th id returned must be the job holding the n-th payload (read in a statement of
        // its own: the enqueuing statement's snapshot does not see its own function's inserts).
        Spi::run(
            "CREATE TEMP TABLE returned AS
                 SELECT id, position
                   FROM leaseq.queue_enqueue_batch('enq_batch',
                            ARRAY(SELECT jsonb_build_object('n', n)
                                    FROM generate_series(1, 500) n ORDER BY n DESC))
                        WITH ORDINALITY AS r (id, position)",
        )
        .unwrap();
        let misplaced = Spi::get_two::<i64, i64>(
            "SELECT count(*),
                    count(*) FILTER (WHERE (j.payload->>'n')::bigint <> 501 - r.position)
               FROM returned r JOIN leaseq.jobs j ON j.id = r.id",
        );
        assert_eq!(misplaced, Ok((Some(500), Some(0))));
    }

    /// The text of `sql` from `start` to the next `end` (both excluded), whitespace collapsed.
    fn between(sql: &str, start: &str, end: &str) -> String {
        let after = sql.split_once(start).expect("the start").1;
        let inside = after.split_once(end).expect("the end").0;
        inside.split_whitespace().collect::<Vec<_>>().join(" ")
    }

    /// The dedupe arbiter must imply the predicate of `jobs_dedupe_key_live` on every schema this
    /// library serves — each released install script's with the older schemas' arbiter (their
    /// twin, src/compat/before_0_4_0.rs), the installed one's with this release's — or the
    /// enqueue fails with 42P10 (no unique index matches the ON CONFLICT specification). Tried on
    /// a table of the index's columns with each predicate: the second insert must yield.
    #[pg_test]
    fn the_dedupe_arbiter_implies_the_live_key_index_of_every_release_served() {
        use super::{INSERT_DEDUPED, INSERT_GROUPED};
        use crate::compat::before_0_4_0::{INSERT_DEDUPED_0_3_0, INSERT_GROUPED_0_3_0};
        let arbiter = |deduped: &str, grouped: &str| {
            let arbiter = between(deduped, "ON CONFLICT (queue, dedupe_key)", "DO NOTHING");
            assert_eq!(
                arbiter,
                between(grouped, "ON CONFLICT (queue, dedupe_key)", "DO NOTHING")
            );
            arbiter
        };
        let this = arbiter(INSERT_DEDUPED.sql, INSERT_GROUPED.sql);
        let older = arbiter(INSERT_DEDUPED_0_3_0.sql, INSERT_GROUPED_0_3_0.sql);
        let index = "CREATE UNIQUE INDEX jobs_dedupe_key_live ON leaseq.jobs (queue, dedupe_key)";
        let mut predicates: Vec<(&str, String, &str)> = [
            ("0.1.0", include_str!("../../sql/leaseq--0.1.0.sql")),
            ("0.2.0", include_str!("../../sql/leaseq--0.2.0.sql")),
            ("0.3.0", include_str!("../../sql/leaseq--0.3.0.sql")),
        ]
        .into_iter()
        .map(|(release, script)| (release, between(script, index, ";"), older.as_str()))
        .collect();
        let installed = Spi::get_one::<String>(
            "SELECT pg_get_indexdef('leaseq.jobs_dedupe_key_live'::regclass)",
        )
        .unwrap()
        .unwrap();
        let installed = installed.split_once(" WHERE ").expect("a partial index").1;
        predicates.push(("installed", format!("WHERE {installed}"), this.as_str()));
        for (release, predicate, arbiter) in predicates {
            Spi::run(
                "CREATE TEMP TABLE arbiter_check
                     (queue text, dedupe_key text, status leaseq.job_status, finished_at timestamptz,
                      lane leaseq.job_status, keyed_finished_at timestamptz)",
            )
            .unwrap();
            Spi::run(&format!(
                "CREATE UNIQUE INDEX ON arbiter_check (queue, dedupe_key) {predicate}"
            ))
            .unwrap();
            let insert = format!(
                "INSERT INTO arbiter_check VALUES ('q', 'k', 'pending', NULL, 'pending', NULL)
                 ON CONFLICT (queue, dedupe_key) {arbiter} DO NOTHING"
            );
            Spi::run(&insert).unwrap_or_else(|e| panic!("{release}: {predicate}: {e}"));
            Spi::run(&insert).unwrap();
            let rows = Spi::get_one::<i64>("SELECT count(*) FROM arbiter_check");
            assert_eq!(rows, Ok(Some(1)), "{release}: the second insert yields");
            Spi::run("DROP TABLE arbiter_check").unwrap();
        }
    }
}
