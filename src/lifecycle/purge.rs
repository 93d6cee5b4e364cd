//! Purge: retention for finished work. Deletes a queue's `succeeded` and `cancelled` jobs that
//! finished more than `older_than` ago, with their attempt history, steps and edges to their
//! parents, so that history does not grow for ever. Dead jobs stay: they wait for a redrive or a cancel.
//! A purged succeeded job's dedupe key is remembered (`leaseq.purged_keys`, one row per key): a
//! `dedupe_for` window, "for ever" included, outlives the row.
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

use crate::core::access;
use crate::core::args;
use crate::core::clock;
use crate::core::connect::{self, WHOLE_QUEUE};
use crate::core::datum::QueuePrivilege;
use crate::core::errors;
use crate::core::release::{self, Release};
use crate::core::spi::{
    self, INT4, INT8_ARRAY, Statement, TEXT, TEXT_ARRAY, TIMESTAMPTZ, TIMESTAMPTZ_ARRAY,
};
use crate::lifecycle::queue;

/// Rows locked first (`SKIP LOCKED`: a concurrent purge takes others), then deleted with their
/// attempts, in one statement.
pub(crate) const PURGE: Statement = Statement {
    name: "purge",
    sql: "WITH chosen AS (
              SELECT job.id FROM leaseq.jobs AS job
               WHERE job.queue = $1 AND job.status IN ('succeeded', 'cancelled')
                 AND job.finished_at < $2
               ORDER BY job.id
               LIMIT $3
                 FOR UPDATE SKIP LOCKED),
          history_deleted AS (
              DELETE FROM leaseq.closed_attempts AS attempt
               USING chosen
               WHERE attempt.job_id = chosen.id),
          jobs_deleted AS (
              DELETE FROM leaseq.jobs AS job
               USING chosen
               WHERE job.id = chosen.id
              RETURNING job.id, job.status, job.dedupe_key, job.finished_at)
          SELECT coalesce(array_agg(deleted.id), '{}'),
                 coalesce(array_agg(deleted.dedupe_key) FILTER (WHERE deleted.keyed), '{}'),
                 coalesce(array_agg(deleted.id) FILTER (WHERE deleted.keyed), '{}'),
                 coalesce(array_agg(deleted.finished_at) FILTER (WHERE deleted.keyed), '{}')
            FROM (SELECT jobs_deleted.*,
                         jobs_deleted.status = 'succeeded'
                             AND jobs_deleted.dedupe_key IS NOT NULL AS keyed
                    FROM jobs_deleted) AS deleted",
    params: &[TEXT, TIMESTAMPTZ, INT4],
};

/// The keys `$2` of queue `$1`'s purged succeeded jobs `$3`, finished at `$4`: remembered, the
/// newest finish of each, so that a `dedupe_for` window outlives the row (from 0.3.0 on).
pub(crate) const REMEMBER_KEYS: Statement = Statement {
    name: "purge.remember_keys",
    sql: "INSERT INTO leaseq.purged_keys AS remembered (queue, dedupe_key, job_id, finished_at)
          SELECT DISTINCT ON (purged.dedupe_key) $1, purged.dedupe_key, purged.id, purged.finished_at
            FROM unnest($2::text[], $3::bigint[], $4::timestamptz[])
                     AS purged (dedupe_key, id, finished_at)
           ORDER BY purged.dedupe_key, purged.finished_at DESC
              ON CONFLICT (queue, dedupe_key) DO UPDATE
             SET job_id = EXCLUDED.job_id, finished_at = EXCLUDED.finished_at
           WHERE remembered.finished_at < EXCLUDED.finished_at",
    params: &[TEXT, TEXT_ARRAY, INT8_ARRAY, TIMESTAMPTZ_ARRAY],
};

/// The purged jobs `$1`'s steps, and their edges to their parents (from 0.3.0 on).
pub(crate) const PURGE_STEPS_AND_EDGES: Statement = Statement {
    name: "purge.steps_and_edges",
    sql: "WITH steps_deleted AS (
              DELETE FROM leaseq.job_steps AS step WHERE step.job_id = ANY ($1))
          DELETE FROM leaseq.job_parents AS edge WHERE edge.child_id = ANY ($1)",
    params: &[INT8_ARRAY],
};

/// Deletes up to `max_jobs` (1..=100000) of `queue`'s succeeded and cancelled jobs that finished
/// more than `older_than` ago, and their attempts; returns how many jobs. Call it until it
/// returns less than `max_jobs` to purge everything due, in bounded transactions.
///
/// Errors: `22004` NULL argument, `22023` invalid name, negative `older_than` or `max_jobs` out of
/// range, `42704` unknown queue.
#[pg_extern]
pub fn queue_purge(
    queue: Option<&str>,
    older_than: Option<Interval>,
    max_jobs: default!(Option<i32>, 10000),
) -> i64 {
    const F: &str = "queue_purge";
    let queue = args::queue_name(F, queue);
    let older_than = args::required(F, "older_than", older_than);
    let age = args::interval_micros(older_than);
    if age < 0 {
        errors::invalid_argument(F, "older_than", "must not be negative");
    }
    let max_jobs = args::required(F, "max_jobs", max_jobs);
    args::int_in_range(F, "max_jobs", max_jobs, 1..=100_000, None);
    // Finished before `cutoff`; an age reaching before PostgreSQL's first timestamp purges nothing.
    let now: pg_sys::TimestampTz = clock::now().into();
    let cutoff = i64::try_from(now as i128 - age)
        .ok()
        .and_then(|raw| TimestampWithTimeZone::try_from(raw).ok())
        .unwrap_or_else(TimestampWithTimeZone::negative_infinity);
    access::require_queue(F, queue, QueuePrivilege::Admin);
    connect::connect(&WHOLE_QUEUE, |client| {
        queue::load(client, F, queue);
        purge(client, queue, cutoff, max_jobs)
    })
}

/// [`PURGE`] of up to `max_jobs` of `queue`'s jobs finished before `cutoff`, with their steps and
/// edges: how many jobs (`queue_purge`, and the maintenance worker's retention).
pub(crate) fn purge(
    client: &mut SpiClient<'_>,
    queue: &str,
    cutoff: TimestampWithTimeZone,
    max_jobs: i32,
) -> i64 {
    let (purged, keys, keyed, finished): (
        Vec<i64>,
        Vec<String>,
        Vec<i64>,
        Vec<TimestampWithTimeZone>,
    ) = spi::run(
        client,
        &PURGE,
        &[queue.into(), cutoff.into(), max_jobs.into()],
    )
    .single(|row| {
        (
            row.required(1),
            row.required(2),
            row.required(3),
            row.required(4),
        )
    });
    // 0.2.0's schema has neither steps, nor edges, nor purged keys (served through 0.3.x:
    // docs/design.md).
    let count = purged.len() as i64;
    if count > 0 && release::current(client) >= Release::V0_3_0 {
        spi::run(client, &PURGE_STEPS_AND_EDGES, &[purged.into()]);
        if !keys.is_empty() {
            spi::run(
                client,
                &REMEMBER_KEYS,
                &[queue.into(), keys.into(), keyed.into(), finished.into()],
            );
        }
    }
    count
}
