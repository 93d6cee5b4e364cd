//! Inspect: read-only views of jobs and their attempt history, for operators and tools (the
//! `leaseq` CLI reads the queue only through these and `queue_stats`).
use pgrx::prelude::*;

use crate::core::access;
use crate::core::args;
use crate::core::connect::{self, JOB_PATH, WHOLE_QUEUE};
use crate::core::datum::{AttemptOutcome, JobStatus, Jsonb, QueuePrivilege};
use crate::core::errors;
use crate::core::spi::{self, INT4, INT8, Statement, TEXT};
use crate::lifecycle::job;
use crate::lifecycle::queue;

pub(crate) const JOBS: Statement = Statement {
    name: "jobs",
    sql: "SELECT job.id, job.status::text, job.priority, job.run_at, job.attempts,
                 job.max_attempts, job.worker, job.lease_expires_at, job.last_error,
                 job.created_at, job.finished_at
            FROM leaseq.jobs AS job
           WHERE job.queue = $1 AND ($2::text IS NULL OR job.status::text = $2)
           ORDER BY job.id DESC
           LIMIT $3",
    params: &[TEXT, TEXT, INT4],
};

pub(crate) const JOB: Statement = Statement {
    name: "job",
    sql: "SELECT job.id, job.queue, job.status::text, job.priority, job.run_at, job.attempts,
                 job.max_attempts, job.worker, job.lease_expires_at, job.dedupe_key, job.payload,
                 job.result, job.last_error, job.created_at, job.updated_at, job.finished_at,
                 job.snoozes, job.group_key
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

/// The most recent jobs of `queue` (newest first, at most `max_rows`, 1..=10000), optionally
/// only those in `status`.
///
/// Errors: `22004` NULL queue/max_rows, `22023` invalid name or max_rows, `42704` unknown queue.
#[pg_extern]
pub fn queue_jobs(
    queue: Option<&str>,
    status: default!(Option<JobStatus>, "NULL"),
    max_rows: default!(Option<i32>, 100),
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
            &JOBS,
            &[queue.into(), status.into(), max_rows.into()],
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
            )
        })
    });
    TableIterator::new(rows)
}

/// A row of `queue_job`, as `job` reads it.
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
);

/// One job, all of it; `snoozes`: how many times it snoozed (`snooze`); `group_key`: its group
/// (`group`).
///
/// Errors: `22004` NULL job_id, `42704` no such job.
#[pg_extern(name = "queue_job")]
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
        )
    });
    if found.is_empty() {
        errors::unknown_job(function, job_id);
    }
    found
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
fn status_of(function: &str, row: &spi::Row<'_>, column: usize) -> JobStatus {
    let label: String = row.required(column);
    JobStatus::from_label(&label)
        .unwrap_or_else(|| errors::internal(function, "a job has an unknown status"))
}
