//! Compat: what serves a database whose schema is an older release's, until `ALTER EXTENSION
//! leaseq UPDATE` (core/release.rs). Its SQL definitions call entry points this release's do not
//! declare (`sql = false`), or call a symbol whose meaning on its schema differs; each is served
//! here, and only here, so the main path never re-implements an old schema.
//!
//! **The window**: a 0.3.x library serves databases still at 0.1.0 and 0.2.0. From 0.4.0 on,
//! an entry point only 0.1.0's definitions call becomes a one-line [`unserved!`] stub raising
//! `55000` "run ALTER EXTENSION leaseq UPDATE" (VectorChord's pattern). Compat may use every
//! folder; nothing uses compat.
//!
//! Served here, for 0.1.0's definitions: `queue_create` with 5 arguments, `queue_enqueue` with 6,
//! `queue_enqueue_batch` with 4, `queue_job` and `queue_stats` with 0.1.0's columns; for 0.1.0's
//! and 0.2.0's, the symbols `queue_complete` and `queue_complete_batch` (0.3.0's definitions call
//! the lifecycle's `complete` and `complete_batch`): under 0.1.0 a success is written to
//! `closed_attempts`, whose check forbids a token on a finished row, as 0.1.0 wrote it; for
//! both, `queue_jobs` with three arguments (0.3.0's takes filters and a keyset cursor); for
//! 0.2.0's, `queue_schedules` without the last job (0.3.0's schema keeps it), and
//! `queue_enqueue` and `queue_enqueue_batch` without dependencies (0.3.0's take `depends_on`),
//! and `queue_job` without progress.
pub(crate) mod before_0_4_0;

use pgrx::prelude::*;

use crate::core::access;
use crate::core::args;
use crate::core::connect::{self, JOB_PATH, WHOLE_QUEUE};
use crate::core::datum::{
    IdArray, JobStatus, Jsonb, JsonbArray, QueuePrivilege, TextArray, UuidArray,
};
use crate::core::release::{self, Release};
use crate::core::spi::{
    self, BOOL, INT4, INT8, INT8_ARRAY, INTERVAL, JSONB, JSONB_ARRAY, Statement, TEXT, TEXT_ARRAY,
    TIMESTAMPTZ, UUID, UUID_ARRAY,
};
use crate::lifecycle::{claim, complete, enqueue, queue, schedule};
use crate::observe::{inspect, stats};

/// A symbol that old definitions call but this library no longer serves: a one-line stub that
/// refuses with `55000`, naming the update that replaces the definition.
// No symbol is retired in 0.3.x (0.1.0's are served through it): only its test uses it yet.
#[cfg_attr(not(any(test, feature = "pg_test")), allow(unused_macros))]
macro_rules! unserved {
    ($symbol:ident, $info:ident) => {
        #[pg_guard]
        #[unsafe(no_mangle)]
        pub extern "C-unwind" fn $symbol(_fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
            crate::core::errors::needs_update(stringify!($symbol))
        }
        #[unsafe(no_mangle)]
        pub extern "C" fn $info() -> &'static pg_sys::Pg_finfo_record {
            const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
            &V1
        }
    };
}

// --- 0.1.0 and 0.2.0: `queue_complete`, `queue_complete_batch` ---

/// Whether this database still keeps a success in `closed_attempts` (0.1.0).
fn success_into_history() -> bool {
    connect::connect(&JOB_PATH, |client| {
        release::current(client) == Release::V0_1_0
    })
}

/// `complete::COMPLETE` under a 0.1.0 schema: the attempt moves to history and the token
/// is cleared, as in 0.1.0.
pub(crate) const COMPLETE_INTO_HISTORY: Statement = Statement {
    name: "complete.into_history",
    sql: "WITH completed AS (
              UPDATE leaseq.jobs AS job
                 SET status = 'succeeded',
                     result = $4,
                     lease_token = NULL,
                     lease_expires_at = NULL,
                     updated_at = $3,
                     finished_at = $3
               WHERE job.id = $1
                 -- the fence (lease.rs)
                 AND job.lease_token = $2 AND job.status = 'running' AND job.lease_expires_at > $3
              RETURNING job.id, job.worker, job.started_at, job.queue, job.attempts),
          closed AS (
              -- the attempt closes (history.rs)
              INSERT INTO leaseq.closed_attempts
                     (job_id, attempt_no, lease_token, worker, started_at, ended_at, outcome, error)
              SELECT completed.id,
                     coalesce((SELECT max(earlier.attempt_no) FROM leaseq.closed_attempts AS earlier
                                WHERE earlier.job_id = completed.id), 0) + 1,
                     $2, completed.worker, completed.started_at, $3, 'succeeded', NULL
                FROM completed
              RETURNING job_id)
          SELECT completed.queue, completed.attempts, NULL::text FROM completed",
    params: &[INT8, UUID, TIMESTAMPTZ, JSONB],
};

/// `complete::COMPLETE_BATCH` under a 0.1.0 schema: the attempts move to history and the
/// tokens are cleared, as in 0.1.0.
pub(crate) const COMPLETE_BATCH_INTO_HISTORY: Statement = Statement {
    name: "complete_batch.into_history",
    sql: "WITH given AS (
              SELECT * FROM unnest($1::bigint[], $2::uuid[],
                                   coalesce($3, array_fill(NULL::jsonb, ARRAY[cardinality($1)])))
                            WITH ORDINALITY AS given (id, token, result, ord)),
          completed AS (
              UPDATE leaseq.jobs AS job
                 SET status = 'succeeded',
                     result = given.result,
                     lease_token = NULL,
                     lease_expires_at = NULL,
                     updated_at = $4,
                     finished_at = $4
                FROM given
               WHERE job.id = given.id
                 -- the fence (lease.rs)
                 AND job.lease_token = given.token AND job.status = 'running'
                 AND job.lease_expires_at > $4
              RETURNING job.id, given.ord, given.token, job.worker, job.started_at, job.queue,
                        job.attempts),
          closed AS (
              -- the attempt closes (history.rs)
              INSERT INTO leaseq.closed_attempts
                     (job_id, attempt_no, lease_token, worker, started_at, ended_at, outcome, error)
              SELECT completed.id,
                     coalesce((SELECT max(earlier.attempt_no) FROM leaseq.closed_attempts AS earlier
                                WHERE earlier.job_id = completed.id), 0) + 1,
                     completed.token, completed.worker, completed.started_at, $4, 'succeeded', NULL
                FROM completed
              RETURNING job_id)
          SELECT completed.ord, completed.queue, completed.attempts, NULL::text FROM completed",
    params: &[INT8_ARRAY, UUID_ARRAY, JSONB_ARRAY, TIMESTAMPTZ],
};

/// `queue_complete` as 0.1.0's and 0.2.0's definitions name it.
#[pg_extern(sql = false)]
pub fn queue_complete(
    job_id: Option<i64>,
    lease_token: Option<pgrx::Uuid>,
    result: Option<Jsonb>,
) -> bool {
    let statement = if success_into_history() {
        &COMPLETE_INTO_HISTORY
    } else {
        &complete::COMPLETE
    };
    complete::complete_with(statement, job_id, lease_token, result)
}

/// `queue_complete_batch` as 0.1.0's and 0.2.0's definitions name it.
#[pg_extern(sql = false)]
pub fn queue_complete_batch(
    job_ids: Option<IdArray>,
    lease_tokens: Option<UuidArray>,
    results: Option<JsonbArray>,
) -> SetOfIterator<'static, bool> {
    let (statement, shared) = if success_into_history() {
        (&COMPLETE_BATCH_INTO_HISTORY, None)
    } else {
        (&complete::COMPLETE_BATCH, Some(&complete::COMPLETE_SHARED))
    };
    complete::complete_batch_with(statement, shared, job_ids, lease_tokens, results)
}

// --- 0.1.0: entry points with other signatures ---

/// `queue::UPSERT` under a 0.1.0 schema, whose queues have no `retain` nor
/// `max_snoozes`.
pub(crate) const UPSERT_WITHOUT_RETENTION: Statement = Statement {
    name: "queue_create.without_retention",
    sql: "INSERT INTO leaseq.queues AS queue (name, lease, max_attempts, backoff_base, backoff_cap)
          VALUES ($1, $2, $3, $4, $5)
          ON CONFLICT (name) DO UPDATE
             SET lease = EXCLUDED.lease,
                 max_attempts = EXCLUDED.max_attempts,
                 backoff_base = EXCLUDED.backoff_base,
                 backoff_cap = EXCLUDED.backoff_cap,
                 updated_at = clock_timestamp()",
    params: &[TEXT, INTERVAL, INT4, INTERVAL, INTERVAL],
};

/// `queue_create` as 0.1.0 declared it (no `retain`, no `max_snoozes`), for a database not yet
/// updated: its
/// definition names this entry point, which the SQL of 0.2.0 on does not declare.
#[pg_extern(sql = false)]
pub fn queue_create(
    queue: Option<&str>,
    lease: Option<Interval>,
    max_attempts: Option<i32>,
    backoff_base: Option<Interval>,
    backoff_cap: Option<Interval>,
) {
    const F: &str = "queue_create";
    let queue = args::queue_name(F, queue);
    let (lease, max_attempts, backoff_base, backoff_cap) =
        queue::checked_settings(F, lease, max_attempts, backoff_base, backoff_cap);
    access::require_queue(F, queue, QueuePrivilege::Admin);
    connect::connect(&JOB_PATH, |client| {
        spi::run(
            client,
            &UPSERT_WITHOUT_RETENTION,
            &[
                queue.into(),
                lease.into(),
                max_attempts.into(),
                backoff_base.into(),
                backoff_cap.into(),
            ],
        );
    });
}

/// `queue_enqueue` as 0.1.0 declared it (six arguments), for a database not yet updated: its
/// definition names this entry point, which the SQL of 0.2.0 on does not declare.
#[pg_extern(sql = false)]
pub fn queue_enqueue(
    queue: Option<&str>,
    payload: Option<Jsonb>,
    run_at: Option<TimestampWithTimeZone>,
    priority: Option<i32>,
    dedupe_key: Option<&str>,
    max_attempts: Option<i32>,
) -> i64 {
    enqueue(
        queue,
        payload,
        run_at,
        priority,
        dedupe_key,
        max_attempts,
        None,
        Some("ignore"),
        None,
    )
}

/// `queue_enqueue_batch` as 0.1.0 declared it (no `group_keys`), for a database not yet updated:
/// its definition names this entry point, which the SQL of 0.2.0 on does not declare.
#[pg_extern(sql = false)]
pub fn queue_enqueue_batch(
    queue: Option<&str>,
    payloads: Option<JsonbArray>,
    run_at: Option<TimestampWithTimeZone>,
    priority: Option<i32>,
) -> SetOfIterator<'static, i64> {
    enqueue_batch(queue, payloads, run_at, priority, None)
}

// --- 0.1.0 and 0.2.0: `queue_enqueue`, `queue_enqueue_batch` without dependencies ---

/// `queue_enqueue` as 0.2.0 declared it (no `depends_on`), for a database not yet updated.
// Every argument is one of the SQL function's.
#[allow(clippy::too_many_arguments)]
#[pg_extern(sql = false)]
pub fn enqueue(
    queue: Option<&str>,
    payload: Option<Jsonb>,
    run_at: Option<TimestampWithTimeZone>,
    priority: Option<i32>,
    dedupe_key: Option<&str>,
    max_attempts: Option<i32>,
    dedupe_for: Option<Interval>,
    on_duplicate: Option<&str>,
    group_key: Option<&str>,
) -> i64 {
    let job = enqueue::Job {
        run_at,
        priority,
        dedupe_key,
        max_attempts,
        dedupe_for,
        on_duplicate,
        group_key,
        depends_on: None,
        on_parent_failure: Some("cancel"),
        trace_context: None,
    };
    enqueue::enqueue_with(&INSERTS_UNTRACED, queue, payload, job)
}

/// `queue_enqueue_batch` as 0.2.0 declared it (no `depends_on`), for a database not yet updated.
#[pg_extern(sql = false)]
pub fn enqueue_batch(
    queue: Option<&str>,
    payloads: Option<JsonbArray>,
    run_at: Option<TimestampWithTimeZone>,
    priority: Option<i32>,
    group_keys: Option<TextArray>,
) -> SetOfIterator<'static, i64> {
    let jobs = enqueue::Batch {
        run_at,
        priority,
        group_keys,
        depends_on: None,
        on_parent_failure: Some("cancel"),
        depends_on_each: None,
        trace_context: None,
    };
    SetOfIterator::new(enqueue::enqueue_batch_with(
        &INSERTS_UNTRACED,
        queue,
        payloads,
        jobs,
    ))
}

/// `enqueue::INSERT` and its variants under an older schema, whose jobs have no `trace_context`:
/// the same parameters, the last one (the trace context, always NULL here) unused.
pub(crate) const INSERT_UNTRACED: Statement = Statement {
    name: "enqueue.untraced",
    sql: "WITH inserted AS (
              INSERT INTO leaseq.jobs
                     (queue, payload, priority, run_at, max_attempts, created_at, updated_at)
              SELECT queue.name, $2, $3, coalesce($4, $6), coalesce($5, queue.max_attempts), $6, $6
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

pub(crate) const INSERT_DEDUPED_UNTRACED: Statement = Statement {
    name: "enqueue.deduped.untraced",
    sql: "WITH inserted AS (
              INSERT INTO leaseq.jobs
                     (queue, payload, priority, run_at, max_attempts, created_at, updated_at,
                      dedupe_key)
              SELECT queue.name, $2, $3, coalesce($4, $6), coalesce($5, queue.max_attempts), $6,
                     $6, $8
                FROM leaseq.queues AS queue
               WHERE queue.name = $1
              ON CONFLICT (queue, dedupe_key)
                 WHERE dedupe_key IS NOT NULL AND finished_at IS NULL
                       AND status IN ('pending', 'running')
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

pub(crate) const INSERT_GROUPED_UNTRACED: Statement = Statement {
    name: "enqueue.grouped.untraced",
    sql: "WITH inserted AS (
              INSERT INTO leaseq.jobs
                     (queue, payload, priority, run_at, max_attempts, created_at, updated_at,
                      dedupe_key, group_key, status)
              SELECT queue.name, $2, $3, coalesce($4, $6), coalesce($5, queue.max_attempts), $6,
                     $6, $8, $9,
                     CASE WHEN (SELECT count(*)
                                  FROM (SELECT FROM leaseq.jobs AS live
                                         WHERE live.queue = $1 AND live.group_key = $9
                                           AND live.finished_at IS NULL
                                         LIMIT queue.group_concurrency) AS live)
                               < queue.group_concurrency
                          THEN 'pending' ELSE 'waiting' END::leaseq.job_status
                FROM leaseq.queues AS queue
               WHERE queue.name = $1
              ON CONFLICT (queue, dedupe_key)
                 WHERE dedupe_key IS NOT NULL AND finished_at IS NULL
                       AND status IN ('pending', 'running')
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

pub(crate) const INSERT_BATCH_UNTRACED: Statement = Statement {
    name: "enqueue_batch.untraced",
    sql: "WITH inserted AS (
              INSERT INTO leaseq.jobs
                     (queue, payload, priority, run_at, max_attempts, created_at, updated_at)
              SELECT queue.name, given.payload, $3, coalesce($4, $5), queue.max_attempts, $5, $5
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

pub(crate) const INSERT_BATCH_GROUPED_UNTRACED: Statement = Statement {
    name: "enqueue_batch.grouped.untraced",
    sql: "WITH given AS (
              SELECT given.payload, given.group_key, given.ord,
                     row_number() OVER (PARTITION BY given.group_key ORDER BY given.ord) AS nth
                FROM unnest($2, $7::text[]) WITH ORDINALITY AS given (payload, group_key, ord)),
          inserted AS (
              INSERT INTO leaseq.jobs
                     (queue, payload, priority, run_at, max_attempts, created_at, updated_at,
                      group_key, status)
              SELECT queue.name, given.payload, $3, coalesce($4, $5), queue.max_attempts, $5, $5,
                     given.group_key,
                     CASE WHEN given.group_key IS NULL
                            OR (SELECT count(*)
                                  FROM (SELECT FROM leaseq.jobs AS live
                                         WHERE live.queue = $1
                                           AND live.group_key = given.group_key
                                           AND live.finished_at IS NULL
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

const INSERTS_UNTRACED: enqueue::Inserts = enqueue::Inserts {
    one: &INSERT_UNTRACED,
    deduped: &INSERT_DEDUPED_UNTRACED,
    grouped: &INSERT_GROUPED_UNTRACED,
    batch: &INSERT_BATCH_UNTRACED,
    batch_grouped: &INSERT_BATCH_GROUPED_UNTRACED,
};

/// `inspect::JOB` under a 0.1.0 schema, whose jobs neither snooze nor have groups.
pub(crate) const JOB_WITHOUT_SNOOZES: Statement = Statement {
    name: "job.without_snoozes",
    sql: "SELECT job.id, job.queue, job.status::text, job.priority, job.run_at, job.attempts,
                 job.max_attempts, job.worker, job.lease_expires_at, job.dedupe_key, job.payload,
                 job.result, job.last_error, job.created_at, job.updated_at, job.finished_at, 0,
                 NULL::text, NULL::jsonb, NULL::timestamptz
            FROM leaseq.jobs AS job
           WHERE job.id = $1",
    params: &[INT8],
};

/// `inspect::JOB` under a 0.2.0 schema, whose jobs report no progress.
pub(crate) const JOB_WITHOUT_PROGRESS: Statement = Statement {
    name: "job.without_progress",
    sql: "SELECT job.id, job.queue, job.status::text, job.priority, job.run_at, job.attempts,
                 job.max_attempts, job.worker, job.lease_expires_at, job.dedupe_key, job.payload,
                 job.result, job.last_error, job.created_at, job.updated_at, job.finished_at,
                 job.snoozes, job.group_key, NULL::jsonb, NULL::timestamptz
            FROM leaseq.jobs AS job
           WHERE job.id = $1",
    params: &[INT8],
};

/// `queue_job` as 0.2.0 declared it (no `progress`), for a database not yet updated: its
/// definition names this entry point, which 0.3.0's does not declare.
#[pg_extern(sql = false)]
pub fn job(
    job_id: Option<i64>,
) -> TableIterator<
    'static,
    (
        name!(job_id, i64),
        name!(queue, String),
        name!(status, JobStatus),
        name!(priority, i32),
        name!(run_at, TimestampWithTimeZone),
        name!(attempts, i32),
        name!(max_attempts, i32),
        name!(worker, Option<String>),
        name!(lease_expires_at, Option<TimestampWithTimeZone>),
        name!(dedupe_key, Option<String>),
        name!(payload, Jsonb),
        name!(result, Option<Jsonb>),
        name!(last_error, Option<Jsonb>),
        name!(created_at, TimestampWithTimeZone),
        name!(updated_at, TimestampWithTimeZone),
        name!(finished_at, Option<TimestampWithTimeZone>),
        name!(snoozes, i32),
        name!(group_key, Option<String>),
    ),
> {
    const F: &str = "queue_job";
    let job_id = args::required(F, "job_id", job_id);
    access::require_jobs(F, &[job_id], QueuePrivilege::Observe);
    let rows = connect::connect(&JOB_PATH, |client| {
        inspect::read_job(client, F, job_id, &JOB_WITHOUT_PROGRESS)
    });
    TableIterator::new(rows.into_iter().map(|r| {
        (
            r.0, r.1, r.2, r.3, r.4, r.5, r.6, r.7, r.8, r.9, r.10, r.11, r.12, r.13, r.14, r.15,
            r.16, r.17,
        )
    }))
}

/// `queue_job` as 0.1.0 declared it (no `snoozes`), for a database not yet updated: its
/// definition names this entry point, which the SQL of 0.2.0 on does not declare.
#[pg_extern(sql = false)]
pub fn queue_job(
    job_id: Option<i64>,
) -> TableIterator<
    'static,
    (
        name!(job_id, i64),
        name!(queue, String),
        name!(status, JobStatus),
        name!(priority, i32),
        name!(run_at, TimestampWithTimeZone),
        name!(attempts, i32),
        name!(max_attempts, i32),
        name!(worker, Option<String>),
        name!(lease_expires_at, Option<TimestampWithTimeZone>),
        name!(dedupe_key, Option<String>),
        name!(payload, Jsonb),
        name!(result, Option<Jsonb>),
        name!(last_error, Option<Jsonb>),
        name!(created_at, TimestampWithTimeZone),
        name!(updated_at, TimestampWithTimeZone),
        name!(finished_at, Option<TimestampWithTimeZone>),
    ),
> {
    const F: &str = "queue_job";
    let job_id = args::required(F, "job_id", job_id);
    access::require_jobs(F, &[job_id], QueuePrivilege::Observe);
    let rows = connect::connect(&JOB_PATH, |client| {
        inspect::read_job(client, F, job_id, &JOB_WITHOUT_SNOOZES)
    });
    TableIterator::new(rows.into_iter().map(|r| {
        (
            r.0, r.1, r.2, r.3, r.4, r.5, r.6, r.7, r.8, r.9, r.10, r.11, r.12, r.13, r.14, r.15,
        )
    }))
}

/// `queue_jobs` as 0.1.0 and 0.2.0 declared it: one queue, no filters but the status, no
/// keyset cursor.
pub(crate) const JOBS_OF_ONE_QUEUE: Statement = Statement {
    name: "jobs.of_one_queue",
    sql: "SELECT job.id, job.status::text, job.priority, job.run_at, job.attempts,
                 job.max_attempts, job.worker, job.lease_expires_at, job.last_error,
                 job.created_at, job.finished_at
            FROM leaseq.jobs AS job
           WHERE job.queue = $1 AND ($2::text IS NULL OR job.status::text = $2)
           ORDER BY job.id DESC
           LIMIT $3",
    params: &[TEXT, TEXT, INT4],
};

/// `queue_jobs` as 0.1.0 and 0.2.0 declared it (three arguments, eleven columns), for a
/// database not yet updated: 0.3.0's definition calls `inspect::jobs`.
#[pg_extern(sql = false)]
pub fn queue_jobs(
    queue: Option<&str>,
    status: Option<JobStatus>,
    max_rows: Option<i32>,
) -> TableIterator<
    'static,
    (
        name!(job_id, i64),
        name!(status, JobStatus),
        name!(priority, i32),
        name!(run_at, TimestampWithTimeZone),
        name!(attempts, i32),
        name!(max_attempts, i32),
        name!(worker, Option<String>),
        name!(lease_expires_at, Option<TimestampWithTimeZone>),
        name!(last_error, Option<Jsonb>),
        name!(created_at, TimestampWithTimeZone),
        name!(finished_at, Option<TimestampWithTimeZone>),
    ),
> {
    const F: &str = "queue_jobs";
    let queue = args::queue_name(F, queue);
    let max_rows = args::required(F, "max_rows", max_rows);
    args::int_in_range(F, "max_rows", max_rows, 1..=args::MAX_BATCH, None);
    let status = status.map(JobStatus::label);
    access::require_queue(F, queue, QueuePrivilege::Observe);
    let rows = connect::connect(&WHOLE_QUEUE, |client| {
        queue::load(client, F, queue);
        spi::run(
            client,
            &JOBS_OF_ONE_QUEUE,
            &[queue.into(), status.into(), max_rows.into()],
        )
        .map(|row| {
            (
                row.required(1),
                inspect::status_of(F, row, 2),
                row.required(3),
                row.required(4),
                row.required(5),
                row.required(6),
                row.get(7),
                row.get(8),
                row.get(9),
                row.required(10),
                row.get(11),
            )
        })
    });
    TableIterator::new(rows)
}

/// `stats::STATS` under a 0.1.0 schema, whose jobs neither snooze nor wait.
pub(crate) const STATS_WITHOUT_SNOOZES: Statement = Statement {
    name: "stats.without_snoozes",
    sql: "SELECT queue.name,
                 count(job.id) FILTER (WHERE job.status = 'pending' AND job.run_at <= $1),
                 count(job.id) FILTER (WHERE job.status = 'pending' AND job.run_at > $1),
                 count(job.id) FILTER (WHERE job.status = 'running'),
                 count(job.id) FILTER (WHERE job.status = 'running'
                                         AND job.lease_expires_at <= $1),
                 count(job.id) FILTER (WHERE job.status = 'succeeded'),
                 count(job.id) FILTER (WHERE job.status = 'dead'),
                 count(job.id) FILTER (WHERE job.status = 'cancelled'),
                 $1 - min(job.run_at) FILTER (WHERE job.status = 'pending' AND job.run_at <= $1),
                 0, 0::bigint
            FROM leaseq.queues AS queue
            LEFT JOIN leaseq.jobs AS job ON job.queue = queue.name
           GROUP BY queue.name
           ORDER BY queue.name",
    params: &[TIMESTAMPTZ],
};

/// `queue_stats` as 0.1.0 declared it (no `most_snoozes`), for a database not yet updated: its
/// definition names this entry point, which the SQL of 0.2.0 on does not declare.
#[pg_extern(sql = false)]
pub fn queue_stats() -> TableIterator<
    'static,
    (
        name!(queue, String),
        name!(pending, i64),
        name!(scheduled, i64),
        name!(running, i64),
        name!(expired_leases, i64),
        name!(succeeded, i64),
        name!(dead, i64),
        name!(cancelled, i64),
        name!(oldest_pending_age, Option<Interval>),
    ),
> {
    let mut rows = connect::connect(&WHOLE_QUEUE, |client| {
        stats::read_stats(client, &STATS_WITHOUT_SNOOZES)
    });
    rows.retain(|row| access::allowed(&row.0, QueuePrivilege::Observe));
    TableIterator::new(
        rows.into_iter()
            .map(|r| (r.0, r.1, r.2, r.3, r.4, r.5, r.6, r.7, r.8)),
    )
}

// --- 0.2.0: `queue_schedules` ---

/// `schedule::LIST` as 0.2.0's schema has it: no last job.
pub(crate) const SCHEDULES_WITHOUT_LAST_JOB: Statement = Statement {
    name: "schedules.without_last_job",
    sql: "SELECT schedule.name, schedule.queue, schedule.every, schedule.timezone,
                 schedule.catch_up, schedule.payload, schedule.next_at
            FROM leaseq.schedules AS schedule
           ORDER BY schedule.name",
    params: &[],
};

/// `queue_schedules` as 0.2.0 declared it (seven columns), for a database not yet updated:
/// 0.3.0's definition calls `schedule::schedules`.
#[pg_extern(sql = false)]
pub fn queue_schedules() -> TableIterator<
    'static,
    (
        name!(name, String),
        name!(queue, String),
        name!(every, String),
        name!(timezone, String),
        name!(catch_up, bool),
        name!(payload, Jsonb),
        name!(next_at, TimestampWithTimeZone),
    ),
> {
    let mut rows = connect::connect(&WHOLE_QUEUE, |client| {
        spi::run(client, &SCHEDULES_WITHOUT_LAST_JOB, &[]).map(|row| {
            (
                row.required::<String>(1),
                row.required::<String>(2),
                row.required(3),
                row.required(4),
                row.required(5),
                row.required(6),
                row.required(7),
            )
        })
    });
    rows.retain(|row| access::allowed(&row.1, QueuePrivilege::Observe));
    TableIterator::new(rows)
}

// --- 0.1.0 and 0.2.0: `queue_claim` without `trace_context` ---

/// `claim::CLAIM` and its three variants under an older schema, whose jobs have no
/// `trace_context`: NULL in its place, so that the claim reads their rows as its own.
pub(crate) const CLAIM_UNTRACED: Statement = Statement {
    name: "claim.untraced",
    sql: "WITH chosen AS (
              SELECT job.ctid AS row_address, job.started_at IS NULL AS first_claim
                FROM leaseq.jobs AS job
               WHERE job.queue = $1 AND job.status = 'pending' AND job.run_at <= $2
               ORDER BY job.priority DESC, job.run_at, job.id
               LIMIT $3
                 FOR UPDATE SKIP LOCKED)
          UPDATE leaseq.jobs AS job
             SET status = 'running',
                 attempts = job.attempts + 1,
                 lease_token = $6,
                 lease_expires_at = $2 + $4,
                 worker = $5,
                 started_at = $2,
                 updated_at = $2
            FROM chosen
           WHERE job.ctid = chosen.row_address AND job.status = 'pending' AND job.run_at <= $2
          RETURNING job.id, job.lease_token, job.payload, job.lease_expires_at, job.priority,
                    job.run_at, job.created_at, chosen.first_claim, NULL::text",
    params: &[TEXT, TIMESTAMPTZ, INT4, INTERVAL, TEXT, UUID],
};

pub(crate) const CLAIM_AFTER_UNTRACED: Statement = Statement {
    name: "claim.after.untraced",
    sql: "WITH chosen AS (
              SELECT job.ctid AS row_address, job.started_at IS NULL AS first_claim
                FROM leaseq.jobs AS job
               WHERE job.queue = $1 AND job.status = 'pending' AND job.run_at <= $2
                 AND job.priority = $7 AND (job.run_at, job.id) > ($8, $9)
               ORDER BY job.priority DESC, job.run_at, job.id
               LIMIT $3
                 FOR UPDATE SKIP LOCKED)
          UPDATE leaseq.jobs AS job
             SET status = 'running',
                 attempts = job.attempts + 1,
                 lease_token = $6,
                 lease_expires_at = $2 + $4,
                 worker = $5,
                 started_at = $2,
                 updated_at = $2
            FROM chosen
           WHERE job.ctid = chosen.row_address AND job.status = 'pending' AND job.run_at <= $2
          RETURNING job.id, job.lease_token, job.payload, job.lease_expires_at, job.priority,
                    job.run_at, job.created_at, chosen.first_claim, NULL::text",
    params: &[
        TEXT,
        TIMESTAMPTZ,
        INT4,
        INTERVAL,
        TEXT,
        UUID,
        INT4,
        TIMESTAMPTZ,
        INT8,
    ],
};

pub(crate) const CLAIM_SWEEP_UNTRACED: Statement = Statement {
    name: "claim.sweep.untraced",
    sql: "WITH chosen AS (
              SELECT job.ctid AS row_address, job.started_at IS NULL AS first_claim
                FROM leaseq.jobs AS job
               WHERE job.queue = $1 AND job.status = 'pending' AND job.run_at <= $2
                 AND job.priority = $7 AND (job.run_at, job.id) >= ($8, $9)
                 AND (job.run_at, job.id) < ($10, $11)
               ORDER BY job.priority DESC, job.run_at, job.id
               LIMIT $3
                 FOR UPDATE SKIP LOCKED)
          UPDATE leaseq.jobs AS job
             SET status = 'running',
                 attempts = job.attempts + 1,
                 lease_token = $6,
                 lease_expires_at = $2 + $4,
                 worker = $5,
                 started_at = $2,
                 updated_at = $2
            FROM chosen
           WHERE job.ctid = chosen.row_address AND job.status = 'pending' AND job.run_at <= $2
          RETURNING job.id, job.lease_token, job.payload, job.lease_expires_at, job.priority,
                    job.run_at, job.created_at, chosen.first_claim, NULL::text",
    params: &[
        TEXT,
        TIMESTAMPTZ,
        INT4,
        INTERVAL,
        TEXT,
        UUID,
        INT4,
        TIMESTAMPTZ,
        INT8,
        TIMESTAMPTZ,
        INT8,
    ],
};

pub(crate) const CLAIM_BELOW_UNTRACED: Statement = Statement {
    name: "claim.below.untraced",
    sql: "WITH chosen AS (
              SELECT job.ctid AS row_address, job.started_at IS NULL AS first_claim
                FROM leaseq.jobs AS job
               WHERE job.queue = $1 AND job.status = 'pending' AND job.run_at <= $2
                 AND job.priority < $7
               ORDER BY job.priority DESC, job.run_at, job.id
               LIMIT $3
                 FOR UPDATE SKIP LOCKED)
          UPDATE leaseq.jobs AS job
             SET status = 'running',
                 attempts = job.attempts + 1,
                 lease_token = $6,
                 lease_expires_at = $2 + $4,
                 worker = $5,
                 started_at = $2,
                 updated_at = $2
            FROM chosen
           WHERE job.ctid = chosen.row_address AND job.status = 'pending' AND job.run_at <= $2
          RETURNING job.id, job.lease_token, job.payload, job.lease_expires_at, job.priority,
                    job.run_at, job.created_at, chosen.first_claim, NULL::text",
    params: &[TEXT, TIMESTAMPTZ, INT4, INTERVAL, TEXT, UUID, INT4],
};

const CLAIM_STATEMENTS_UNTRACED: claim::ClaimStatements = claim::ClaimStatements {
    head: &CLAIM_UNTRACED,
    after: &CLAIM_AFTER_UNTRACED,
    sweep: &CLAIM_SWEEP_UNTRACED,
    below: &CLAIM_BELOW_UNTRACED,
};

/// `queue_claim` as 0.1.0 and 0.2.0 declared it (no `trace_context`), for a database not yet
/// updated: its definition names this entry point, which 0.3.0's does not declare.
#[pg_extern(sql = false)]
pub fn queue_claim(
    queue: Option<&str>,
    worker: Option<&str>,
    batch: Option<i32>,
    lease: Option<Interval>,
) -> TableIterator<
    'static,
    (
        name!(job_id, i64),
        name!(lease_token, pgrx::Uuid),
        name!(attempt_no, i32),
        name!(payload, Jsonb),
        name!(lease_expires_at, TimestampWithTimeZone),
        name!(priority, i32),
        name!(enqueued_at, TimestampWithTimeZone),
    ),
> {
    let rows = claim::claim_with(&CLAIM_STATEMENTS_UNTRACED, queue, worker, batch, lease);
    TableIterator::new(
        rows.into_iter()
            .map(|(a, b, c, d, e, f, g, _)| (a, b, c, d, e, f, g)),
    )
}

// --- 0.1.0 and 0.2.0: `queue_schedule` without `trace_context` ---

/// `schedule::UPSERT` under an older schema, whose schedules keep no trace context (`$8`, always
/// NULL here, unused).
pub(crate) const UPSERT_SCHEDULE_UNTRACED: Statement = Statement {
    name: "queue_schedule.untraced",
    sql: "INSERT INTO leaseq.schedules AS schedule
                 (name, queue, every, payload, timezone, catch_up, next_at)
          VALUES ($1, $2, $3, $4, $5, $6, $7)
          ON CONFLICT (name) DO UPDATE
             SET queue = EXCLUDED.queue, every = EXCLUDED.every, payload = EXCLUDED.payload,
                 timezone = EXCLUDED.timezone, catch_up = EXCLUDED.catch_up,
                 next_at = EXCLUDED.next_at, updated_at = clock_timestamp()",
    params: &[TEXT, TEXT, TEXT, JSONB, TEXT, BOOL, TIMESTAMPTZ, TEXT],
};

/// `queue_schedule` as 0.1.0 and 0.2.0 declared it (no `trace_context`), for a database not yet
/// updated: its definition names this entry point, which 0.3.0's does not declare.
#[pg_extern(sql = false)]
pub fn queue_schedule(
    name: Option<&str>,
    queue: Option<&str>,
    every: Option<&str>,
    payload: Option<Jsonb>,
    timezone: Option<&str>,
    catch_up: Option<bool>,
) -> TimestampWithTimeZone {
    let schedule_of = schedule::Schedule {
        name,
        queue,
        every,
        payload,
        timezone,
        catch_up,
        trace_context: None,
    };
    schedule::schedule_with(&UPSERT_SCHEDULE_UNTRACED, schedule_of)
}

#[cfg(any(test, feature = "pg_test"))]
unserved!(leaseq_test_unserved, pg_finfo_leaseq_test_unserved);

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use pgrx::prelude::*;

    /// What 0.4.0 will answer to 0.1.0's definitions: a stub refusing with 55000, naming the
    /// update, and changing nothing.
    #[pg_test]
    fn an_unserved_symbol_refuses_with_55000_and_names_the_update() {
        Spi::run(
            "CREATE FUNCTION pg_temp.retired() RETURNS void LANGUAGE c
                 AS '$libdir/leaseq', 'leaseq_test_unserved'",
        )
        .unwrap();
        Spi::run(
            "CREATE FUNCTION pg_temp.refusal() RETURNS text LANGUAGE plpgsql AS $$
             DECLARE hint text;
             BEGIN
                 PERFORM pg_temp.retired();
                 RETURN 'served';
             EXCEPTION WHEN OTHERS THEN
                 GET STACKED DIAGNOSTICS hint = PG_EXCEPTION_HINT;
                 RETURN SQLSTATE || ': ' || hint;
             END $$",
        )
        .unwrap();
        let refusal = Spi::get_one::<String>("SELECT pg_temp.refusal()");
        assert_eq!(
            refusal,
            Ok(Some("55000: run ALTER EXTENSION leaseq UPDATE".to_string()))
        );
    }
}
