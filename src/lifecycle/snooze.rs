//! Snooze: `running` → `pending` later, without spending the attempt budget — "not ready yet",
//! under the lease fence (`lease`).
//!
//! The attempt closes `snoozed` in history (attempt numbers still grow: a snoozed attempt is a
//! fencing generation like any other); `attempts` goes back down by the one its claim took and
//! `snoozes` up by one. A job cannot snooze for ever unnoticed: `queue_job` shows its snoozes,
//! `queue_stats` the most any live job of the queue has, and past the queue's `max_snoozes` the
//! job goes `dead` instead. The row is locked first (to read the count and the limit), then
//! changed under the same fence, as `fail` does.
use pgrx::prelude::*;

use crate::core::access;
use crate::core::args;
use crate::core::clock;
use crate::core::connect::{self, JOB_PATH};
use crate::core::counters::{self, Event};
use crate::core::datum::{JobStatus, QueuePrivilege};
use crate::core::errors;
use crate::core::spi::{self, BOOL, INT8, Statement, TIMESTAMPTZ, UUID};
use crate::lifecycle::depend;
use crate::lifecycle::group;

/// The job, locked under the fence, with its snoozes and its queue's limit.
pub(crate) const LOCK: Statement = Statement {
    name: "snooze.lock",
    sql: "SELECT job.snoozes,
                 (SELECT queue.max_snoozes FROM leaseq.queues AS queue
                   WHERE queue.name = job.queue),
                 job.queue
            FROM leaseq.jobs AS job
           WHERE job.id = $1
             -- the fence (lease.rs)
             AND job.lease_token = $2 AND job.status = 'running' AND job.lease_expires_at > $3
             FOR UPDATE OF job",
    params: &[INT8, UUID, TIMESTAMPTZ],
};

/// The snooze applied: `$4` whether the job goes dead (past `max_snoozes`), `$5` when it is due
/// again otherwise. The lease is cleared either way.
pub(crate) const SNOOZE: Statement = Statement {
    name: "snooze",
    sql: "WITH snoozed AS (
              UPDATE leaseq.jobs AS job
                 SET status = CASE WHEN $4 THEN 'dead' ELSE 'pending' END::leaseq.job_status,
                     run_at = CASE WHEN $4 THEN job.run_at ELSE $5 END,
                     attempts = job.attempts - 1,
                     snoozes = job.snoozes + 1,
                     lease_token = NULL,
                     lease_expires_at = NULL,
                     last_error = CASE WHEN $4
                                       THEN jsonb_build_object('error', 'snoozed too often',
                                                               'snoozes', job.snoozes + 1)
                                       ELSE job.last_error END,
                     updated_at = $3,
                     finished_at = CASE WHEN $4 THEN $3 END
               WHERE job.id = $1
                 -- the fence (lease.rs)
                 AND job.lease_token = $2 AND job.status = 'running' AND job.lease_expires_at > $3
              RETURNING job.id, job.status, job.worker, job.started_at),
          closed AS (
              -- the attempt closes (history.rs)
              INSERT INTO leaseq.closed_attempts
                     (job_id, attempt_no, lease_token, worker, started_at, ended_at, outcome, error)
              SELECT snoozed.id,
                     coalesce((SELECT max(earlier.attempt_no) FROM leaseq.closed_attempts AS earlier
                                WHERE earlier.job_id = snoozed.id), 0) + 1,
                     $2, snoozed.worker, snoozed.started_at, $3, 'snoozed', NULL
                FROM snoozed
              RETURNING job_id)
          SELECT (SELECT status::text FROM snoozed), (SELECT count(*) FROM closed)",
    params: &[INT8, UUID, TIMESTAMPTZ, BOOL, TIMESTAMPTZ],
};

/// Puts a running job back to `pending`, due again `delay` from now (`[0, 30 days]`), without
/// spending an attempt of its budget; returns its new status: `pending`, or `dead` when it has
/// snoozed more than its queue's `max_snoozes`. Returns NULL, changing nothing, under the same
/// fence as `queue_renew`.
///
/// Errors: `22004` NULL argument, `22023` delay out of range, `0A000` outside READ COMMITTED.
#[pg_extern]
pub fn queue_snooze(
    job_id: Option<i64>,
    lease_token: Option<pgrx::Uuid>,
    delay: Option<Interval>,
) -> Option<JobStatus> {
    const F: &str = "queue_snooze";
    let job_id = args::required(F, "job_id", job_id);
    let lease_token = args::required(F, "lease_token", lease_token);
    let delay = args::required(F, "delay", delay);
    let delay =
        args::interval_in_range(F, "delay", delay, true, args::MAX_DELAY_MICROS, "30 days") as i64;
    args::read_committed(F);
    let now = clock::now();

    access::require_jobs(F, &[job_id], QueuePrivilege::Work);
    connect::connect(&JOB_PATH, |client| {
        let (snoozes, max_snoozes, queue) = spi::run(
            client,
            &LOCK,
            &[job_id.into(), lease_token.into(), now.into()],
        )
        .first(|row| {
            (
                row.required::<i32>(1),
                row.get::<i32>(2),
                row.required::<String>(3),
            )
        })?;
        let dead = max_snoozes.is_some_and(|limit| snoozes >= limit);
        let (status, attempts_closed) = spi::run(
            client,
            &SNOOZE,
            &[
                job_id.into(),
                lease_token.into(),
                now.into(),
                dead.into(),
                clock::plus_micros(now, delay).into(),
            ],
        )
        .single(|row| (row.get::<String>(1), row.required::<i64>(2)));
        let status = status
            .and_then(|s| JobStatus::from_label(&s))
            .unwrap_or_else(|| errors::internal(F, "a job locked under its lease was not snoozed"));
        if attempts_closed != 1 {
            errors::internal(F, "the job's current lease had no open attempt");
        }
        counters::count(&queue, Event::Snoozed, 1);
        counters::count(&queue, Event::Dead, usize::from(dead));
        if dead {
            group::ended(client, &[job_id], now);
            depend::finished(client, &[job_id], JobStatus::Dead, now);
        }
        Some(status)
    })
}
