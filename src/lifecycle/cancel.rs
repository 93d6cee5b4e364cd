//! Cancel: `pending`, `running`, `waiting` or `dead` → `cancelled` (final).
//!
//! A running job loses its lease at once: its token is cleared, so its worker's renew, complete
//! and fail are fenced from then on, and its open attempt closes `cancelled`. The worker learns
//! of it at its next renew (NULL) and should stop. A cancelled pending or running job of a group
//! gives its group room (`group`).
use pgrx::prelude::*;

use crate::core::access;
use crate::core::args;
use crate::core::clock;
use crate::core::connect::{self, JOB_PATH};
use crate::core::datum::QueuePrivilege;
use crate::core::spi::{self, INT8, Statement, TIMESTAMPTZ};
use crate::lifecycle::group;
use crate::lifecycle::job;

/// The row is locked first to read what the update clears: whether an attempt was open, and
/// its token (written to history with the attempt, which closes `cancelled`).
pub(crate) const CANCEL: Statement = Statement {
    name: "cancel",
    sql: "WITH locked AS (
              SELECT job.id, job.status, job.lease_token
                FROM leaseq.jobs AS job
               WHERE job.id = $1
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
        let (cancelled, admitted) = spi::run(client, &CANCEL, &[job_id.into(), now.into()])
            .single(|row| (row.required::<i64>(1), row.get::<bool>(2)));
        if cancelled == 1 {
            if admitted == Some(true) {
                group::ended(client, &[job_id], now);
            }
            return true;
        }
        job::require_exists(client, F, job_id);
        false
    })
}
