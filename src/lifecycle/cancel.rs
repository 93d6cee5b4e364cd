//! Cancel: `pending`, `running`, `waiting` or `dead` → `cancelled` (final).
//!
//! A running job loses its lease at once: its token is cleared, so its worker's renew, complete
//! and fail are fenced from then on, and its open attempt closes `cancelled`. The worker learns
//! of it at its next renew (NULL) and should stop. A cancelled pending or running job of a group
//! gives its group room (`group`).
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

use crate::core::access;
use crate::core::args;
use crate::core::clock;
use crate::core::connect::{self, JOB_PATH};
use crate::core::datum::{IdArray, JobStatus, QueuePrivilege};
use crate::core::spi::{self, INT8, Statement, TIMESTAMPTZ};
use crate::lifecycle::depend;
use crate::lifecycle::group;
use crate::lifecycle::job;

/// The row is locked first to read what the update clears: whether an attempt was open, and
/// its token (written to history with the attempt, which closes `cancelled`). A finished job is
/// not locked: nothing changes it, and a lock would give the call a transaction id to commit.
pub(crate) const CANCEL: Statement = Statement {
    name: "cancel",
    sql: "WITH locked AS (
              SELECT job.id, job.status, job.lease_token
                FROM leaseq.jobs AS job
               WHERE job.id = $1 AND job.status NOT IN ('succeeded', 'cancelled')
                 FOR UPDATE),
          cancelled AS (
              UPDATE leaseq.jobs AS job
                 SET status = 'cancelled',
                     lease_token = NULL,
                     lease_expires_at = NULL,
                     updated_at = $2,
                     finished_at = $2
                FROM locked
               WHERE job.id = locked.id AND locked.status NOT IN ('succeeded', 'cancelled')
              RETURNING job.id, locked.status AS was, locked.lease_token AS token, job.worker,
                        job.started_at),
          closed AS (
              -- the attempt closes (history.rs), if one was open
              INSERT INTO leaseq.closed_attempts
                     (job_id, attempt_no, lease_token, worker, started_at, ended_at, outcome, error)
              SELECT cancelled.id,
                     coalesce((SELECT max(earlier.attempt_no) FROM leaseq.closed_attempts AS earlier
                                WHERE earlier.job_id = cancelled.id), 0) + 1,
                     cancelled.token, cancelled.worker, cancelled.started_at, $2, 'cancelled', NULL
                FROM cancelled
               WHERE cancelled.was = 'running'
              RETURNING job_id)
          SELECT count(*), bool_or(cancelled.was IN ('pending', 'running')) FROM cancelled",
    params: &[INT8, TIMESTAMPTZ],
};

/// Cancels a pending, running or dead job. Returns false when it had already finished
/// (`succeeded` or `cancelled`).
///
/// Errors: `22004` NULL job_id, `42704` no such job.
#[pg_extern]
pub fn queue_cancel(job_id: Option<i64>) -> bool {
    const F: &str = "queue_cancel";
    let job_id = args::required(F, "job_id", job_id);
    let now = clock::now();
    access::require_jobs(F, &[job_id], QueuePrivilege::Admin);
    connect::connect(&JOB_PATH, |client| {
        let (cancelled, admitted) = cancel(client, job_id, now);
        if admitted {
            group::ended(client, &[job_id], now);
        }
        if cancelled {
            depend::finished(client, &[job_id], JobStatus::Cancelled, now);
        } else {
            job::require_exists(client, F, job_id);
        }
        cancelled
    })
}

/// Cancels `job_id` unless it has finished: whether it did, and whether the job was admitted
/// in its group (pending or running), which then gets room — the caller's to give.
fn cancel(client: &mut SpiClient<'_>, job_id: i64, now: TimestampWithTimeZone) -> (bool, bool) {
    let (cancelled, admitted) = spi::run(client, &CANCEL, &[job_id.into(), now.into()])
        .single(|row| (row.required::<i64>(1), row.get::<bool>(2)));
    (cancelled == 1, admitted == Some(true))
}

/// `queue_cancel` of each of `job_ids` (at most 10000), in one transaction: a boolean per id, in
/// input order — false where the job had already finished. Running jobs lose their lease at
/// once, as with `queue_cancel`.
///
/// Errors: `22004` NULL job_ids or element, `22023` more than 10000 ids or an id twice, `42704`
/// an id no job has, `42501` without the `admin` privilege on a job's queue — each before
/// anything changed.
#[pg_extern]
pub fn queue_cancel_batch(job_ids: Option<IdArray>) -> SetOfIterator<'static, bool> {
    const F: &str = "queue_cancel_batch";
    let job_ids = args::job_ids(F, job_ids);
    let now = clock::now();
    access::require_jobs(F, &job_ids, QueuePrivilege::Admin);
    let cancelled = connect::connect(&JOB_PATH, |client| {
        job::require_all_exist(client, F, &job_ids);
        let mut admitted = Vec::new();
        let cancelled: Vec<bool> = job_ids
            .iter()
            .map(|&id| {
                let (cancelled, was_admitted) = cancel(client, id, now);
                if was_admitted {
                    admitted.push(id);
                }
                cancelled
            })
            .collect();
        group::ended(client, &admitted, now);
        let ended: Vec<i64> = job_ids
            .iter()
            .zip(&cancelled)
            .filter_map(|(&id, &c)| c.then_some(id))
            .collect();
        depend::finished(client, &ended, JobStatus::Cancelled, now);
        cancelled
    });
    SetOfIterator::new(cancelled)
}
