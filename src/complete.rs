//! Complete: `running` → `succeeded`, under the lease fence (see `lease`).
//!
//! The job row and its open attempt change in one statement, so history never shows a succeeded
//! job with a running attempt. Application writes made in the same transaction as the call
//! commit only if the call returned true: the in-database exactly-once effect.
use pgrx::prelude::*;

use crate::args;
use crate::datum::Jsonb;
use crate::errors;
use crate::spi::{self, INT8, JSONB, Statement, TIMESTAMPTZ, UUID};

const COMPLETE: Statement = Statement {
    sql: "WITH j AS (
              UPDATE leaseq.jobs j
                 SET status = 'succeeded',
                     result = $4,
                     lease_token = NULL,
                     lease_expires_at = NULL,
                     updated_at = $3,
                     finished_at = $3
               WHERE j.id = $1 AND j.lease_token = $2 AND j.status = 'running'
                 AND j.lease_expires_at > $3
              RETURNING j.id),
          a AS (
              UPDATE leaseq.attempts a
                 SET outcome = 'succeeded', ended_at = $3
                FROM j
               WHERE a.job_id = j.id AND a.lease_token = $2 AND a.outcome = 'running'
              RETURNING a.job_id)
          SELECT (SELECT count(*) FROM j), (SELECT count(*) FROM a)",
    params: &[INT8, UUID, TIMESTAMPTZ, JSONB],
};

/// Marks a running job `succeeded` with `result`, closing its attempt `succeeded`. Returns false,
/// changing nothing, when the lease token is not current, the job is not running, or the lease
/// has expired.
///
/// Errors: `22004` NULL job_id/lease_token, `54000` result over `leaseq.max_payload_bytes`,
/// `0A000` outside READ COMMITTED.
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
pub fn queue_complete(
    job_id: Option<i64>,
    lease_token: Option<pgrx::Uuid>,
    result: default!(Option<Jsonb>, "NULL"),
) -> bool {
    const F: &str = "queue_complete";
    let job_id = args::required(F, "job_id", job_id);
    let lease_token = args::required(F, "lease_token", lease_token);
    if let Some(result) = &result {
        args::document(F, "result", result);
    }
    args::read_committed(F);
    let now = spi::now();
    Spi::connect_mut(|client| {
        let counts = spi::run(
            client,
            &COMPLETE,
            &[
                job_id.into(),
                lease_token.into(),
                now.into(),
                Jsonb::arg(result),
            ],
        )
        .first();
        let jobs: i64 = counts.get(1).ok().flatten().unwrap_or(0);
        let attempts: i64 = counts.get(2).ok().flatten().unwrap_or(0);
        if jobs != attempts {
            errors::internal(F, "the job's current lease had no open attempt");
        }
        jobs == 1
    })
}
