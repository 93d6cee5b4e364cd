//! Inspect: read-only views of jobs and their attempt history, for operators and tools (the
//! `leaseq` CLI reads the queue only through these and `queue_stats`).
use pgrx::prelude::*;

use crate::core::access;
use crate::core::args;
use crate::core::connect::{self, JOB_PATH, WHOLE_QUEUE};
use crate::core::datum::{AttemptOutcome, JobStatus, Jsonb, QueuePrivilege};
use crate::core::errors;
use crate::core::spi::{self, INT4, INT8, JSONB, Statement, TEXT, TEXT_ARRAY, TIMESTAMPTZ};
use crate::lifecycle::job;
use crate::lifecycle::queue;

/// One page of jobs, newest first, below the keyset cursor `$11` (the last id of the previous
/// page; NULL: from the newest) and above `$12` (NULL: down to the oldest): of queue `$1` (NULL:
/// any queue but those in `$2`, the ones the caller may not observe). Walks `jobs_pkey` backwards: each filter is a condition on the rows it reads, so a page costs
/// what it reads until `$10` rows matched — for a rare payload, up to the whole table. The
/// statements after it serve the filters that have an index to start from.
pub(crate) const JOBS: Statement = Statement {
    name: "jobs",
    sql: "SELECT job.id, job.status::text, job.priority, job.run_at, job.attempts,
                 job.max_attempts, job.worker, job.lease_expires_at, job.last_error,
                 job.created_at, job.finished_at, job.queue, job.group_key, job.dedupe_key
            FROM leaseq.jobs AS job
           WHERE job.id < coalesce($11, 9223372036854775807)
             AND job.id > coalesce($12, 0)
             AND ($1::text IS NULL OR job.queue = $1)
             AND job.queue <> ALL ($2)
             AND ($3::text IS NULL OR job.status::text = $3)
             AND ($4::text IS NULL OR job.group_key = $4)
             AND ($5::text IS NULL OR job.dedupe_key = $5)
             AND ($6::text IS NULL OR job.worker = $6)
             AND ($7::timestamptz IS NULL OR job.created_at >= $7)
             AND ($8::timestamptz IS NULL OR job.created_at < $8)
             AND ($9::jsonb IS NULL OR job.payload @> $9)
           ORDER BY job.id DESC
           LIMIT $10",
    params: &[
        TEXT,
        TEXT_ARRAY,
        TEXT,
        TEXT,
        TEXT,
        TEXT,
        TIMESTAMPTZ,
        TIMESTAMPTZ,
        JSONB,
        INT4,
        INT8,
        INT8,
    ],
};

/// `JOBS` for dead jobs, no other filter given: per queue, the ids of its newest dead jobs from
/// `jobs_dead_idx` (queue, id) backwards, read from the index alone; the newest of those, then
/// their rows. A page costs a page of index entries per queue and one page of rows, however long
/// the history. (With a filter on the rows the planner reads every dead job of each queue and
/// sorts them: `JOBS` serves those.)
pub(crate) const DEAD_JOBS: Statement = Statement {
    name: "jobs.dead",
    sql: "SELECT job.id, job.status::text, job.priority, job.run_at, job.attempts,
                 job.max_attempts, job.worker, job.lease_expires_at, job.last_error,
                 job.created_at, job.finished_at, job.queue, job.group_key, job.dedupe_key
            FROM (SELECT dead.id
                    FROM leaseq.queues AS queue
                   CROSS JOIN LATERAL (
                        SELECT job.id
                          FROM leaseq.jobs AS job
                         WHERE job.queue = queue.name AND job.lane = 'dead'
                           AND job.id < coalesce($11, 9223372036854775807)
                           AND job.id > coalesce($12, 0)
                         ORDER BY job.id DESC
                         LIMIT $10) AS dead
                   WHERE ($1::text IS NULL OR queue.name = $1)
                     AND queue.name <> ALL ($2)
                   ORDER BY dead.id DESC
                   LIMIT $10) AS page
            JOIN leaseq.jobs AS job ON job.id = page.id
           ORDER BY job.id DESC",
    params: JOBS.params,
};

/// `JOBS` for running jobs: per queue, the jobs of its lease rows (as many as its workers took
/// within a lease) that still run, newest first.
pub(crate) const RUNNING_JOBS: Statement = Statement {
    name: "jobs.running",
    sql: "SELECT job.id, job.status::text, job.priority, job.run_at, job.attempts,
                 job.max_attempts, job.worker, job.lease_expires_at, job.last_error,
                 job.created_at, job.finished_at, job.queue, job.group_key, job.dedupe_key
            FROM leaseq.queues AS queue
           CROSS JOIN LATERAL (
                SELECT job.*
                  FROM (SELECT DISTINCT held.id
                          FROM leaseq.leases AS lease
                         CROSS JOIN LATERAL unnest(lease.job_ids) AS held (id)
                         WHERE lease.queue = queue.name) AS held
                  JOIN leaseq.jobs AS job ON job.id = held.id
                 WHERE job.queue = queue.name AND job.status = 'running'
                   AND job.id < coalesce($11, 9223372036854775807)
                   AND job.id > coalesce($12, 0)
                   AND ($4::text IS NULL OR job.group_key = $4)
                   AND ($5::text IS NULL OR job.dedupe_key = $5)
                   AND ($6::text IS NULL OR job.worker = $6)
                   AND ($7::timestamptz IS NULL OR job.created_at >= $7)
                   AND ($8::timestamptz IS NULL OR job.created_at < $8)
                   AND ($9::jsonb IS NULL OR job.payload @> $9)
                 ORDER BY job.id DESC
                 LIMIT $10) AS job
           WHERE ($1::text IS NULL OR queue.name = $1)
             AND queue.name <> ALL ($2)
           ORDER BY job.id DESC
           LIMIT $10",
    params: JOBS.params,
};

/// `JOBS` by payload, when `jobs_payload_idx` exists (`queue_index_payloads`): per queue, the
/// jobs whose `{queue: payload}` contains `{queue: $9}` — a bitmap of that queue's matches
/// alone, from the index — then the newest of them. A page costs the matches of the payload
/// in each queue searched, not the jobs walked past to find them. The cursor is a filter, not
/// an index condition: a generic plan would otherwise AND the matches with every id below it.
pub(crate) const JOBS_BY_PAYLOAD: Statement = Statement {
    name: "jobs.by_payload",
    sql: "SELECT job.id, job.status::text, job.priority, job.run_at, job.attempts,
                 job.max_attempts, job.worker, job.lease_expires_at, job.last_error,
                 job.created_at, job.finished_at, job.queue, job.group_key, job.dedupe_key
            FROM leaseq.queues AS queue
           CROSS JOIN LATERAL (
                SELECT job.*
                  FROM leaseq.jobs AS job
                 WHERE jsonb_set('{}', ARRAY[job.queue], job.payload)
                       @> jsonb_set('{}', ARRAY[queue.name], $9)
                   AND job.queue = queue.name
                   AND ($11::bigint IS NULL OR job.id < $11)
                   AND ($12::bigint IS NULL OR job.id > $12)
                   AND ($3::text IS NULL OR job.status::text = $3)
                   AND ($4::text IS NULL OR job.group_key = $4)
                   AND ($5::text IS NULL OR job.dedupe_key = $5)
                   AND ($6::text IS NULL OR job.worker = $6)
                   AND ($7::timestamptz IS NULL OR job.created_at >= $7)
                   AND ($8::timestamptz IS NULL OR job.created_at < $8)
                 ORDER BY job.id DESC
                 LIMIT $10) AS job
           WHERE ($1::text IS NULL OR queue.name = $1)
             AND queue.name <> ALL ($2)
           ORDER BY job.id DESC
           LIMIT $10",
    params: JOBS.params,
};

/// Whether `queue_index_payloads` made the index `JOBS_BY_PAYLOAD` needs (and it is valid: a
/// `CREATE INDEX CONCURRENTLY` may still be building it).
pub(crate) const PAYLOADS_INDEXED: Statement = Statement {
    name: "jobs.payloads_indexed",
    sql: "SELECT EXISTS (SELECT FROM pg_catalog.pg_index AS index
                          WHERE index.indexrelid = pg_catalog.to_regclass('leaseq.jobs_payload_idx')
                            AND index.indisvalid)",
    params: &[],
};

pub(crate) const SETTINGS: Statement = Statement {
    name: "settings",
    sql: "SELECT queue.name, queue.lease, queue.max_attempts, queue.backoff_base,
                 queue.backoff_cap, queue.retain, queue.max_snoozes, queue.group_concurrency,
                 queue.paused, queue.created_at, queue.updated_at
            FROM leaseq.queues AS queue
           ORDER BY queue.name",
    params: &[],
};

pub(crate) const JOB: Statement = Statement {
    name: "job",
    sql: "SELECT job.id, job.queue, job.status::text, job.priority, job.run_at, job.attempts,
                 job.max_attempts, job.worker, job.lease_expires_at, job.dedupe_key, job.payload,
                 job.result, job.last_error, job.created_at, job.updated_at, job.finished_at,
                 job.snoozes, job.group_key, job.progress, job.progress_at
            FROM leaseq.jobs AS job
           WHERE job.id = $1",
    params: &[INT8],
};

pub(crate) const ATTEMPTS: Statement = Statement {
    name: "attempts",
    sql: "SELECT attempt.attempt_no, attempt.worker, attempt.started_at, attempt.ended_at,
                 attempt.outcome::text, attempt.error
            FROM leaseq.attempts AS attempt
           WHERE attempt.job_id = $1
           ORDER BY attempt.attempt_no",
    params: &[INT8],
};

/// A page of jobs, newest first: those of `queue` (NULL: of every queue the caller may
/// observe), filtered by `status`, `group_key`, `dedupe_key`, `worker`, enqueue time
/// (`created_after` ≤ created_at < `created_before`) and payload (`payload_contains`: JSON
/// containment, `payload @> value`), at most `max_rows` (1..=10000) with ids below `before_id`:
/// pass the last id of a page to get the next one (keyset pagination: a page never shifts when
/// jobs are added) — and above `after_id` (the jobs enqueued since one seen; with both, a window
/// of ids, which also bounds what a search without an index to start from reads).
///
/// Errors: `22004` NULL max_rows, `22023` invalid queue name, max_rows, group_key, dedupe_key or
/// worker (1 to 512 bytes), `42704` unknown queue, `42501` queue not observable by the caller.
// One SQL argument per filter: SQL callers name the ones they use.
#[allow(clippy::too_many_arguments)]
#[pg_extern(name = "queue_jobs")]
pub fn jobs(
    queue: default!(Option<&str>, "NULL"),
    status: default!(Option<JobStatus>, "NULL"),
    max_rows: default!(Option<i32>, 100),
    group_key: default!(Option<&str>, "NULL"),
    dedupe_key: default!(Option<&str>, "NULL"),
    worker: default!(Option<&str>, "NULL"),
    created_after: default!(Option<TimestampWithTimeZone>, "NULL"),
    created_before: default!(Option<TimestampWithTimeZone>, "NULL"),
    payload_contains: default!(Option<Jsonb>, "NULL"),
    before_id: default!(Option<i64>, "NULL"),
    after_id: default!(Option<i64>, "NULL"),
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
        name!(queue, String),
        name!(group_key, Option<String>),
        name!(dedupe_key, Option<String>),
    ),
> {
    const F: &str = "queue_jobs";
    let max_rows = args::required(F, "max_rows", max_rows);
    args::int_in_range(F, "max_rows", max_rows, 1..=args::MAX_BATCH, None);
    for (argument, value) in [
        ("group_key", group_key),
        ("dedupe_key", dedupe_key),
        ("worker", worker),
    ] {
        if let Some(value) = value {
            args::short_text(F, argument, value);
        }
    }
    let queue = queue.map(|queue| args::queue_name(F, Some(queue)));
    let hidden = match queue {
        Some(queue) => {
            access::require_queue(F, queue, QueuePrivilege::Observe);
            Vec::new()
        }
        None => access::hidden_queues(QueuePrivilege::Observe),
    };
    let status = status.map(JobStatus::label);
    let filtered = group_key.is_some()
        || dedupe_key.is_some()
        || worker.is_some()
        || created_after.is_some()
        || created_before.is_some();
    let rows = connect::connect(&JOB_PATH, |client| {
        if let Some(queue) = queue {
            queue::load(client, F, queue);
        }
        // Dead and running jobs, and payloads once indexed, have an index to start from.
        let statement = if payload_contains.is_some() {
            let indexed: bool =
                spi::run(client, &PAYLOADS_INDEXED, &[]).single(|row| row.required(1));
            if indexed { &JOBS_BY_PAYLOAD } else { &JOBS }
        } else {
            match status {
                Some("dead") if !filtered => &DEAD_JOBS,
                Some("running") => &RUNNING_JOBS,
                _ => &JOBS,
            }
        };
        spi::run(
            client,
            statement,
            &[
                queue.into(),
                hidden.into(),
                status.into(),
                group_key.into(),
                dedupe_key.into(),
                worker.into(),
                created_after.into(),
                created_before.into(),
                Jsonb::arg(payload_contains),
                max_rows.into(),
                before_id.into(),
                after_id.into(),
            ],
        )
        .map(|row| {
            (
                row.required(1),
                status_of(F, row, 2),
                row.required(3),
                row.required(4),
                row.required(5),
                row.required(6),
                row.get(7),
                row.get(8),
                row.get(9),
                row.required(10),
                row.get(11),
                row.required(12),
                row.get(13),
                row.get(14),
            )
        })
    });
    TableIterator::new(rows)
}

/// Every queue the caller may observe with its settings, as `queue_create` took them, and
/// whether it is paused (`queue_pause`).
#[pg_extern]
pub fn queue_settings() -> TableIterator<
    'static,
    (
        name!(queue, String),
        name!(lease, Interval),
        name!(max_attempts, i32),
        name!(backoff_base, Interval),
        name!(backoff_cap, Interval),
        name!(retain, Option<Interval>),
        name!(max_snoozes, Option<i32>),
        name!(group_concurrency, i32),
        name!(paused, bool),
        name!(created_at, TimestampWithTimeZone),
        name!(updated_at, TimestampWithTimeZone),
    ),
> {
    let mut rows = connect::connect(&WHOLE_QUEUE, |client| {
        spi::run(client, &SETTINGS, &[]).map(|row| {
            (
                row.required::<String>(1),
                row.required(2),
                row.required(3),
                row.required(4),
                row.required(5),
                row.get(6),
                row.get(7),
                row.required(8),
                row.required(9),
                row.required(10),
                row.required(11),
            )
        })
    });
    rows.retain(|row| access::allowed(&row.0, QueuePrivilege::Observe));
    TableIterator::new(rows)
}

/// A row of `queue_job`, as `inspect_job` reads it.
pub(crate) type JobRow = (
    i64,
    String,
    JobStatus,
    i32,
    TimestampWithTimeZone,
    i32,
    i32,
    Option<String>,
    Option<TimestampWithTimeZone>,
    Option<String>,
    Jsonb,
    Option<Jsonb>,
    Option<Jsonb>,
    TimestampWithTimeZone,
    TimestampWithTimeZone,
    Option<TimestampWithTimeZone>,
    i32,
    Option<String>,
    Option<Jsonb>,
    Option<TimestampWithTimeZone>,
);

/// One job, all of it; `snoozes`: how many times it snoozed (`snooze`); `group_key`: its group
/// (`group`); `progress`: what its running (or last) attempt last reported, and when
/// (`progress_at`; `queue_progress`).
///
/// Errors: `22004` NULL job_id, `42704` no such job.
#[pg_extern(name = "queue_job")]
pub fn inspect_job(
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
        name!(progress, Option<Jsonb>),
        name!(progress_at, Option<TimestampWithTimeZone>),
    ),
> {
    const F: &str = "queue_job";
    let job_id = args::required(F, "job_id", job_id);
    access::require_jobs(F, &[job_id], QueuePrivilege::Observe);
    let rows = connect::connect(&JOB_PATH, |client| read_job(client, F, job_id, &JOB));
    TableIterator::new(rows)
}

pub(crate) fn read_job(
    client: &mut pgrx::spi::SpiClient<'_>,
    function: &str,
    job_id: i64,
    statement: &'static Statement,
) -> Vec<JobRow> {
    let found = spi::run(client, statement, &[job_id.into()]).map(|row| {
        (
            row.required(1),
            row.required(2),
            status_of(function, row, 3),
            row.required(4),
            row.required(5),
            row.required(6),
            row.required(7),
            row.get(8),
            row.get(9),
            row.get(10),
            row.required(11),
            row.get(12),
            row.get(13),
            row.required(14),
            row.required(15),
            row.get(16),
            row.required(17),
            row.get(18),
            row.get(19),
            row.get(20),
        )
    });
    if found.is_empty() {
        errors::unknown_job(function, job_id);
    }
    found
}

/// What job `$1` returned, once it succeeded (NULL before); no row: no such job.
pub(crate) const RESULT: Statement = Statement {
    name: "result",
    sql: "SELECT CASE WHEN job.status = 'succeeded' THEN job.result END
            FROM leaseq.jobs AS job
           WHERE job.id = $1",
    params: &[INT8],
};

/// What job `job_id` returned when it succeeded (`queue_complete`'s `result`): NULL until it
/// succeeds, and for a job that succeeded without one.
///
/// Errors: `22004` NULL job_id, `42704` no such job, `42501` its queue not observable by the
/// caller.
#[pg_extern]
pub fn queue_result(job_id: Option<i64>) -> Option<Jsonb> {
    const F: &str = "queue_result";
    let job_id = args::required(F, "job_id", job_id);
    access::require_jobs(F, &[job_id], QueuePrivilege::Observe);
    connect::connect(&JOB_PATH, |client| {
        spi::run(client, &RESULT, &[job_id.into()])
            .first(|row| row.get::<Jsonb>(1))
            .unwrap_or_else(|| errors::unknown_job(F, job_id))
    })
}

/// The parents of job `$1` (lifecycle/depend.rs), oldest first; one purged since has no row.
pub(crate) const PARENTS: Statement = Statement {
    name: "parents",
    sql: "SELECT edge.parent_id, parent.queue, parent.status::text,
                 CASE WHEN parent.status = 'succeeded' THEN parent.result END
            FROM leaseq.job_parents AS edge
            LEFT JOIN leaseq.jobs AS parent ON parent.id = edge.parent_id
           WHERE edge.child_id = $1
           ORDER BY edge.parent_id",
    params: &[INT8],
};

/// The jobs job `job_id` depends on (`queue_enqueue`'s `depends_on`), oldest first: each one's
/// id, queue, status and — once it succeeded — result. A child's handler reads its parents'
/// outputs here, and with `on_parent_failure => 'run'`, which of them failed. A parent purged
/// since (by its queue's retention, once final), or in a queue the caller may neither observe
/// nor work, has NULL queue, status and result. No rows: no parents.
///
/// Errors: `22004` NULL job_id, `42704` no such job, `42501` the job's queue neither observable
/// nor workable by the caller.
#[pg_extern]
pub fn queue_parents(
    job_id: Option<i64>,
) -> TableIterator<
    'static,
    (
        name!(parent_id, i64),
        name!(queue, Option<String>),
        name!(status, Option<JobStatus>),
        name!(result, Option<Jsonb>),
    ),
> {
    const F: &str = "queue_parents";
    let job_id = args::required(F, "job_id", job_id);
    access::require_jobs_any(
        F,
        &[job_id],
        &[QueuePrivilege::Observe, QueuePrivilege::Work],
    );
    let rows: Vec<(i64, Option<String>, Option<JobStatus>, Option<Jsonb>)> =
        connect::connect(&JOB_PATH, |client| {
            job::require_exists(client, F, job_id);
            spi::run(client, &PARENTS, &[job_id.into()]).map(|row| {
                (
                    row.required(1),
                    row.get(2),
                    row.get::<String>(3).map(|_| status_of(F, row, 3)),
                    row.get(4),
                )
            })
        });
    // As the caller again (connect ran as the owner): a related job's queue is checked here.
    let rows = rows
        .into_iter()
        .map(|(id, queue, status, result)| match queue {
            Some(q) if !access::sees_related(&q) => (id, None, None, None),
            queue => (id, queue, status, result),
        })
        .collect::<Vec<_>>();
    TableIterator::new(rows)
}

/// The jobs that depend on job `$1`, oldest first (the child is the nullable side, so the plan
/// walks the parent's edges).
pub(crate) const CHILDREN: Statement = Statement {
    name: "children",
    sql: "SELECT edge.child_id, child.queue, child.status::text
            FROM leaseq.job_parents AS edge
            LEFT JOIN leaseq.jobs AS child ON child.id = edge.child_id
           WHERE edge.parent_id = $1
           ORDER BY edge.child_id",
    params: &[INT8],
};

/// The jobs that depend on job `job_id` (enqueued with it in `depends_on`), oldest first: each
/// one's id, queue and status. A child purged since, or in a queue the caller may neither
/// observe nor work, has NULL queue and status.
///
/// Errors: `22004` NULL job_id, `42704` no such job, `42501` the job's queue neither observable
/// nor workable by the caller.
#[pg_extern]
pub fn queue_children(
    job_id: Option<i64>,
) -> TableIterator<
    'static,
    (
        name!(child_id, i64),
        name!(queue, Option<String>),
        name!(status, Option<JobStatus>),
    ),
> {
    const F: &str = "queue_children";
    let job_id = args::required(F, "job_id", job_id);
    access::require_jobs_any(
        F,
        &[job_id],
        &[QueuePrivilege::Observe, QueuePrivilege::Work],
    );
    let rows: Vec<(i64, Option<String>, Option<JobStatus>)> =
        connect::connect(&JOB_PATH, |client| {
            job::require_exists(client, F, job_id);
            spi::run(client, &CHILDREN, &[job_id.into()]).map(|row| {
                (
                    row.required(1),
                    row.get(2),
                    row.get::<String>(3).map(|_| status_of(F, row, 3)),
                )
            })
        });
    let rows = rows
        .into_iter()
        .map(|(id, queue, status)| match queue {
            Some(q) if !access::sees_related(&q) => (id, None, None),
            queue => (id, queue, status),
        })
        .collect::<Vec<_>>();
    TableIterator::new(rows)
}

/// A job's attempt history, oldest first: every claim it ever had, with how it ended.
///
/// Errors: `22004` NULL job_id, `42704` no such job.
#[pg_extern]
pub fn queue_attempts(
    job_id: Option<i64>,
) -> TableIterator<
    'static,
    (
        name!(attempt_no, i32),
        name!(worker, String),
        name!(started_at, TimestampWithTimeZone),
        name!(ended_at, Option<TimestampWithTimeZone>),
        name!(outcome, AttemptOutcome),
        name!(error, Option<Jsonb>),
    ),
> {
    const F: &str = "queue_attempts";
    let job_id = args::required(F, "job_id", job_id);
    access::require_jobs(F, &[job_id], QueuePrivilege::Observe);
    let rows = connect::connect(&JOB_PATH, |client| {
        job::require_exists(client, F, job_id);
        spi::run(client, &ATTEMPTS, &[job_id.into()]).map(|row| {
            let outcome: String = row.required(5);
            let outcome = AttemptOutcome::from_label(&outcome)
                .unwrap_or_else(|| errors::internal(F, "an attempt has an unknown outcome"));
            (
                row.required(1),
                row.required(2),
                row.required(3),
                row.get(4),
                outcome,
                row.get(6),
            )
        })
    });
    TableIterator::new(rows)
}

/// The job status in `column` of `row`, a label of `leaseq.job_status`.
pub(crate) fn status_of(function: &str, row: &spi::Row<'_>, column: usize) -> JobStatus {
    let label: String = row.required(column);
    JobStatus::from_label(&label)
        .unwrap_or_else(|| errors::internal(function, "a job has an unknown status"))
}
