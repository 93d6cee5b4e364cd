//! Progress: what a running job's handler says it has done so far, under the fence.
//!
//! `queue_progress` keeps one document per job, on the job's row (`progress`, `progress_at`),
//! overwritten by each report: what `queue_job`, `leaseq show` and the console show, and what
//! the metrics' `leaseq_progress_age_seconds` measures the running jobs by. A report is a plain
//! update, like a renewal, meant for a transaction of its own: one made inside a handler's longer
//! transaction would be seen by nobody before that transaction ends, and would hold the row —
//! the lease's renewal waits for it — until then. A stale worker's report changes nothing. The
//! last report of an attempt stays on the row after it ends (a retried job shows where the
//! earlier attempt got to until it reports again).
use pgrx::prelude::*;

use crate::core::access;
use crate::core::args;
use crate::core::clock;
use crate::core::connect::{self, JOB_PATH};
use crate::core::datum::{Jsonb, QueuePrivilege};
use crate::core::spi::{self, INT8, JSONB, Statement, TIMESTAMPTZ, UUID};

/// Sets job `$1`'s progress to `$4` at `$3`, while lease token `$2` holds it.
pub(crate) const PROGRESS: Statement = Statement {
    name: "progress",
    sql: "UPDATE leaseq.jobs AS job
             SET progress = $4, progress_at = $3, updated_at = $3
           WHERE job.id = $1
             -- the fence (lease.rs)
             AND job.lease_token = $2 AND job.status = 'running' AND job.lease_expires_at > $3
          RETURNING true",
    params: &[INT8, UUID, TIMESTAMPTZ, JSONB],
};

/// Reports the running job `job_id`'s `progress` (any JSON document: a fraction, counts, a
/// message), replacing the last report; call it in a transaction of its own (autocommit).
/// Returns true when it was kept; false, changing nothing, when `lease_token` is not the job's
/// current lease (the fence, as for `queue_complete`).
///
/// Errors: `22004` NULL job_id/lease_token/progress, `54000` progress over
/// `leaseq.max_payload_bytes`, `0A000` outside READ COMMITTED.
#[pg_extern]
pub fn queue_progress(
    job_id: Option<i64>,
    lease_token: Option<pgrx::Uuid>,
    progress: Option<Jsonb>,
) -> bool {
    const F: &str = "queue_progress";
    let job_id = args::required(F, "job_id", job_id);
    let lease_token = args::required(F, "lease_token", lease_token);
    let progress = args::required(F, "progress", progress);
    args::document(F, "progress", &progress);
    args::read_committed(F);
    let now = clock::now();
    access::require_jobs(F, &[job_id], QueuePrivilege::Work);
    connect::connect(&JOB_PATH, |client| {
        !spi::run(
            client,
            &PROGRESS,
            &[
                job_id.into(),
                lease_token.into(),
                now.into(),
                Jsonb::arg(Some(progress)),
            ],
        )
        .is_empty()
    })
}
