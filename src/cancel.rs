//! Cancel: `pending`, `running` or `dead` → `cancelled` (final).
//!
//! A running job loses its lease at once: its token is cleared, so its worker's renew, complete
//! and fail are fenced from then on, and its open attempt closes `cancelled`. The worker learns
//! of it at its next renew (NULL) and should stop.
use pgrx::prelude::*;

use crate::args;
use crate::errors;
use crate::redrive::JOB_EXISTS;
use crate::spi::{self, INT8, Statement, TIMESTAMPTZ};

/// The row is locked first to read what the update clears: whether an attempt was open, and
/// its token (written to history with the attempt).
const CANCEL: Statement = Statement {
    sql: concat!(
        "WITH o AS (
              SELECT id, status, lease_token FROM leaseq.jobs WHERE id = $1 FOR UPDATE),
          j AS (
              UPDATE leaseq.jobs j
                 SET status = 'cancelled',
                     lease_token = NULL,
                     lease_expires_at = NULL,
                     updated_at = $2,
                     finished_at = $2
                FROM o
               WHERE j.id = o.id AND o.status IN ('pending', 'running', 'dead')
              RETURNING j.id, o.status AS was, o.lease_token AS token, j.worker, j.started_at),
          closing AS (SELECT * FROM j WHERE was = 'running'),
          a AS (",
        close_attempt!(from: "closing", token: "j.token", ended_at: "$2", outcome: "'cancelled'", error: "NULL"),
        ")
          SELECT count(*) FROM j"
    ),
    params: &[INT8, TIMESTAMPTZ],
};

/// Cancels a pending, running or dead job. Returns false when it had already finished
/// (`succeeded` or `cancelled`).
///
/// Errors: `22004` NULL job_id, `42704` no such job.
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
pub fn queue_cancel(job_id: Option<i64>) -> bool {
    const F: &str = "queue_cancel";
    let job_id = args::required(F, "job_id", job_id);
    let now = spi::now();
    Spi::connect_mut(|client| {
        let cancelled: i64 = spi::run(client, &CANCEL, &[job_id.into(), now.into()])
            .first()
            .get(1)
            .ok()
            .flatten()
            .unwrap_or(0);
        if cancelled == 1 {
            return true;
        }
        if spi::run(client, &JOB_EXISTS, &[job_id.into()]).is_empty() {
            errors::unknown_job(F, job_id);
        }
        false
    })
}
