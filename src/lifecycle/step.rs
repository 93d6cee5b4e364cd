//! Steps: what a running job's handler has done, recorded under the fence so that a retry skips
//! it.
//!
//! `queue_step` writes a named step's output in the caller's transaction — the one that made the
//! step's effect — while the caller holds the job's lease: the job's row is read under the fence
//! with `FOR KEY SHARE`, which every takeover conflicts with (a reclaim skips the row, a cancel
//! waits: both lock it `FOR UPDATE`) and the lease's own renewal, a plain update, does not — so a
//! handler's transaction that recorded a step never holds its worker's heartbeat back. A stale
//! worker's call (its lease expired, reclaimed, cancelled, finished) records nothing. The first
//! record of a name stands: an attempt that finds it in `queue_steps` skips the step. Each record
//! keeps the attempt that made it.
use pgrx::prelude::*;

use crate::core::access;
use crate::core::args;
use crate::core::clock;
use crate::core::connect::{self, JOB_PATH};
use crate::core::datum::{Jsonb, QueuePrivilege};
use crate::core::spi::{self, INT8, JSONB, Statement, TEXT, TIMESTAMPTZ, UUID};
use crate::lifecycle::job;

/// Records step `$4` with output `$5` for job `$1`, held by lease token `$2`, unless the job
/// already has it: whether the lease was held, and whether this call recorded the step. The
/// attempt is the open one, as the attempts view numbers it.
pub(crate) const STEP: Statement = Statement {
    name: "step",
    sql: "WITH held AS (
              SELECT job.id FROM leaseq.jobs AS job
               WHERE job.id = $1
                 -- the fence (lease.rs)
                 AND job.lease_token = $2 AND job.status = 'running' AND job.lease_expires_at > $3
                 FOR KEY SHARE),
          recorded AS (
              INSERT INTO leaseq.job_steps (job_id, name, attempt_no, output, recorded_at)
              SELECT held.id, $4,
                     (SELECT attempt.attempt_no FROM leaseq.attempts AS attempt
                       WHERE attempt.job_id = held.id AND attempt.outcome = 'running'),
                     $5, $3
                FROM held
              ON CONFLICT (job_id, name) DO NOTHING
              RETURNING job_id)
          SELECT EXISTS (SELECT FROM held), EXISTS (SELECT FROM recorded)",
    params: &[INT8, UUID, TIMESTAMPTZ, TEXT, JSONB],
};

/// The steps job `$1` recorded, in the order they were recorded.
pub(crate) const STEPS: Statement = Statement {
    name: "steps",
    sql: "SELECT step.name, step.attempt_no, step.output, step.recorded_at
            FROM leaseq.job_steps AS step
           WHERE step.job_id = $1
           ORDER BY step.recorded_at, step.name",
    params: &[INT8],
};

/// Records that the running job `job_id` did step `name` (1 to 512 bytes), with its `output`
/// (NULL: nothing to keep), in the caller's transaction — the one that made the step's effect —
/// so that a later attempt reads it with `queue_steps` and skips the step. Returns true when
/// this call recorded it; false, changing nothing, when `lease_token` is not the job's current
/// lease (the fence, as for `queue_complete`) or when the step was already recorded (the first
/// record stands).
///
/// Errors: `22004` NULL job_id/lease_token/name, `22023` name not 1 to 512 bytes, `54000` output
/// over `leaseq.max_payload_bytes`, `0A000` outside READ COMMITTED.
#[pg_extern]
pub fn queue_step(
    job_id: Option<i64>,
    lease_token: Option<pgrx::Uuid>,
    name: Option<&str>,
    output: default!(Option<Jsonb>, "NULL"),
) -> bool {
    const F: &str = "queue_step";
    let job_id = args::required(F, "job_id", job_id);
    let lease_token = args::required(F, "lease_token", lease_token);
    let name = args::required(F, "name", name);
    args::short_text(F, "name", name);
    if let Some(output) = &output {
        args::document(F, "output", output);
    }
    args::read_committed(F);
    let now = clock::now();
    access::require_jobs(F, &[job_id], QueuePrivilege::Work);
    connect::connect(&JOB_PATH, |client| {
        spi::run(
            client,
            &STEP,
            &[
                job_id.into(),
                lease_token.into(),
                now.into(),
                name.into(),
                Jsonb::arg(output),
            ],
        )
        .single(|row| row.required::<bool>(1) && row.required::<bool>(2))
    })
}

/// The steps job `job_id` recorded (`queue_step`), in the order they were recorded: each one's
/// name, the attempt that recorded it, its output and when.
///
/// Errors: `22004` NULL job_id, `42704` no such job, `42501` its queue neither workable nor
/// observable by the caller.
#[pg_extern]
pub fn queue_steps(
    job_id: Option<i64>,
) -> TableIterator<
    'static,
    (
        name!(name, String),
        name!(attempt_no, i32),
        name!(output, Option<Jsonb>),
        name!(recorded_at, TimestampWithTimeZone),
    ),
> {
    const F: &str = "queue_steps";
    let job_id = args::required(F, "job_id", job_id);
    access::require_jobs_any(
        F,
        &[job_id],
        &[QueuePrivilege::Work, QueuePrivilege::Observe],
    );
    let rows = connect::connect(&JOB_PATH, |client| {
        job::require_exists(client, F, job_id);
        spi::run(client, &STEPS, &[job_id.into()]).map(|row| {
            (
                row.required(1),
                row.required(2),
                row.get(3),
                row.required(4),
            )
        })
    });
    TableIterator::new(rows)
}
