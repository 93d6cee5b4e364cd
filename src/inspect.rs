//! Inspect: read-only views of jobs and their attempt history, for operators and tools (the
//! `leaseq` CLI reads the queue only through these and `queue_stats`).
use pgrx::prelude::*;

use crate::args;
use crate::datum::{AttemptOutcome, JobStatus, Jsonb};
use crate::errors;
use crate::queue;
use crate::redrive::JOB_EXISTS;
use crate::spi::{self, INT4, INT8, Statement, TEXT};

const JOBS: Statement = Statement {
    sql: "SELECT id, status::text, priority, run_at, attempts, max_attempts, worker,
                 lease_expires_at, last_error, created_at, finished_at
            FROM leaseq.jobs
           WHERE queue = $1 AND ($2::text IS NULL OR status::text = $2)
           ORDER BY id DESC
           LIMIT $3",
    params: &[TEXT, TEXT, INT4],
};

const JOB: Statement = Statement {
    sql: "SELECT id, queue, status::text, priority, run_at, attempts, max_attempts, worker,
                 lease_expires_at, dedupe_key, payload, result, last_error, created_at,
                 updated_at, finished_at
            FROM leaseq.jobs
           WHERE id = $1",
    params: &[INT8],
};

const ATTEMPTS: Statement = Statement {
    sql: "SELECT attempt_no, worker, started_at, ended_at, outcome::text, error
            FROM leaseq.attempts
           WHERE job_id = $1
           ORDER BY attempt_no",
    params: &[INT8],
};

/// The most recent jobs of `queue` (newest first, at most `max_rows`, 1..=10000), optionally
/// only those in `status`.
///
/// Errors: `22004` NULL queue/max_rows, `22023` invalid name or max_rows, `42704` unknown queue.
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
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
    if !(1..=args::MAX_BATCH).contains(&max_rows) {
        errors::invalid_argument(F, "max_rows", "must be between 1 and 10000");
    }
    let status = status.map(JobStatus::label);
    let rows: Vec<_> = Spi::connect_mut(|client| {
        queue::load(client, F, queue);
        spi::run(
            client,
            &JOBS,
            &[queue.into(), status.into(), max_rows.into()],
        )
        .map(|row| {
            let nn = "job columns are NOT NULL";
            (
                row.get(1).ok().flatten().expect(nn),
                status_of(row.get::<String>(2).ok().flatten()),
                row.get(3).ok().flatten().expect(nn),
                row.get(4).ok().flatten().expect(nn),
                row.get(5).ok().flatten().expect(nn),
                row.get(6).ok().flatten().expect(nn),
                row.get(7).ok().flatten(),
                row.get(8).ok().flatten(),
                row.get(9).ok().flatten(),
                row.get(10).ok().flatten().expect(nn),
                row.get(11).ok().flatten(),
            )
        })
        .collect()
    });
    TableIterator::new(rows)
}

/// One job, all of it.
///
/// Errors: `22004` NULL job_id, `42704` no such job.
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
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
    let rows: Vec<_> = Spi::connect_mut(|client| {
        let found = spi::run(client, &JOB, &[job_id.into()]);
        if found.is_empty() {
            errors::unknown_job(F, job_id);
        }
        found
            .map(|row| {
                let nn = "job columns are NOT NULL";
                (
                    row.get(1).ok().flatten().expect(nn),
                    row.get(2).ok().flatten().expect(nn),
                    status_of(row.get::<String>(3).ok().flatten()),
                    row.get(4).ok().flatten().expect(nn),
                    row.get(5).ok().flatten().expect(nn),
                    row.get(6).ok().flatten().expect(nn),
                    row.get(7).ok().flatten().expect(nn),
                    row.get(8).ok().flatten(),
                    row.get(9).ok().flatten(),
                    row.get(10).ok().flatten(),
                    row.get(11).ok().flatten().expect(nn),
                    row.get(12).ok().flatten(),
                    row.get(13).ok().flatten(),
                    row.get(14).ok().flatten().expect(nn),
                    row.get(15).ok().flatten().expect(nn),
                    row.get(16).ok().flatten(),
                )
            })
            .collect()
    });
    TableIterator::new(rows)
}

/// A job's attempt history, oldest first: every claim it ever had, with how it ended.
///
/// Errors: `22004` NULL job_id, `42704` no such job.
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
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
    let rows: Vec<_> = Spi::connect_mut(|client| {
        if spi::run(client, &JOB_EXISTS, &[job_id.into()]).is_empty() {
            errors::unknown_job(F, job_id);
        }
        spi::run(client, &ATTEMPTS, &[job_id.into()])
            .map(|row| {
                let nn = "attempt columns are NOT NULL";
                let outcome: String = row.get(5).ok().flatten().expect(nn);
                (
                    row.get(1).ok().flatten().expect(nn),
                    row.get(2).ok().flatten().expect(nn),
                    row.get(3).ok().flatten().expect(nn),
                    row.get(4).ok().flatten(),
                    AttemptOutcome::from_label(&outcome).expect("known outcome"),
                    row.get(6).ok().flatten(),
                )
            })
            .collect()
    });
    TableIterator::new(rows)
}

fn status_of(label: Option<String>) -> JobStatus {
    label
        .and_then(|l| JobStatus::from_label(&l))
        .expect("job status is NOT NULL and a known label")
}
