//! Renew: `running` → `running` with a later expiry; and the fence every finish shares.
//!
//! The fence: a call holding `(job_id, lease_token)` may act only while that token is the job's
//! current one, the job is running, and the lease has not expired on the server's clock. Every
//! claim draws a new token and every exit from `running` clears it, so a stale worker (paused,
//! partitioned, expired, cancelled) matches no row: its renew, complete and fail change nothing
//! and answer NULL/false. An expired lease is never revived, even before anyone reclaims it.
//!
//! The fence is a predicate of the UPDATE itself, not a check before it: under READ COMMITTED an
//! UPDATE that waited for a concurrent reclaim re-evaluates it on the new row version.
use pgrx::prelude::*;

use crate::args;
use crate::spi::{self, INT8, INTERVAL, Statement, TIMESTAMPTZ, UUID};

const RENEW: Statement = Statement {
    sql: "UPDATE leaseq.jobs j
             SET lease_expires_at = $3 + coalesce(
                     $4, (SELECT q.lease FROM leaseq.queues q WHERE q.name = j.queue)),
                 updated_at = $3
           WHERE j.id = $1 AND j.lease_token = $2 AND j.status = 'running'
             AND j.lease_expires_at > $3
          RETURNING j.lease_expires_at",
    params: &[INT8, UUID, TIMESTAMPTZ, INTERVAL],
};

/// Extends the lease of a running job to `lease` (NULL: the queue's) from now, and returns the
/// new expiry — or NULL, changing nothing, when `lease_token` is not the job's current token,
/// the job is not running, or the lease has already expired.
///
/// Errors: `22004` NULL job_id/lease_token, `22023` invalid lease, `0A000` outside READ COMMITTED.
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
pub fn queue_renew(
    job_id: Option<i64>,
    lease_token: Option<pgrx::Uuid>,
    lease: default!(Option<Interval>, "NULL"),
) -> Option<TimestampWithTimeZone> {
    const F: &str = "queue_renew";
    let job_id = args::required(F, "job_id", job_id);
    let lease_token = args::required(F, "lease_token", lease_token);
    if let Some(lease) = lease {
        args::lease(F, lease);
    }
    args::read_committed(F);
    let now = spi::now();
    Spi::connect_mut(|client| {
        let renewed = spi::run(
            client,
            &RENEW,
            &[job_id.into(), lease_token.into(), now.into(), lease.into()],
        );
        if renewed.is_empty() {
            return None;
        }
        renewed
            .first()
            .get::<TimestampWithTimeZone>(1)
            .ok()
            .flatten()
    })
}
