//! Complete: `running` → `succeeded`, under the lease fence (see `lease`).
//!
//! The job row changes, under the fence (`lease`), in one UPDATE: the attempt that succeeds stays
//! on the row as its record (`history`).
//! Application writes made in the same transaction as the call commit only if the call returned
//! true: the in-database exactly-once effect.
use pgrx::prelude::*;

use crate::core::access;
use crate::core::args;
use crate::core::clock;
use crate::core::connect::{self, JOB_PATH};
use crate::core::counters;
use crate::core::datum::{IdArray, JobStatus, Jsonb, JsonbArray, QueuePrivilege, UuidArray};
use crate::core::spi::{
    self, INT8, INT8_ARRAY, JSONB, JSONB_ARRAY, Statement, TIMESTAMPTZ, UUID, UUID_ARRAY,
};
use crate::lifecycle::depend;
use crate::lifecycle::group;

pub(crate) const COMPLETE: Statement = Statement {
    name: "complete",
    sql: "UPDATE leaseq.jobs AS job
             SET status = 'succeeded',
                 result = $4,
                 -- the attempt closes on the job's row (history.rs)
                 lease_expires_at = NULL,
                 updated_at = $3,
                 finished_at = $3
           WHERE job.id = $1
             -- the fence (lease.rs)
             AND job.lease_token = $2 AND job.status = 'running' AND job.lease_expires_at > $3
          RETURNING job.queue, job.attempts, job.group_key",
    params: &[INT8, UUID, TIMESTAMPTZ, JSONB],
};

/// Marks a running job `succeeded` with `result`, closing its attempt `succeeded`. Returns false,
/// changing nothing, when the lease token is not current, the job is not running, or the lease
/// has expired.
///
/// Errors: `22004` NULL job_id/lease_token, `54000` result over `leaseq.max_payload_bytes`,
/// `0A000` outside READ COMMITTED.
#[pg_extern(name = "queue_complete")]
pub fn complete(
    job_id: Option<i64>,
    lease_token: Option<pgrx::Uuid>,
    result: default!(Option<Jsonb>, "NULL"),
) -> bool {
    complete_with(&COMPLETE, job_id, lease_token, result)
}

/// `complete`, recording the success with `statement` (`compat` passes 0.1.0's).
pub(crate) fn complete_with(
    statement: &'static Statement,
    job_id: Option<i64>,
    lease_token: Option<pgrx::Uuid>,
    result: Option<Jsonb>,
) -> bool {
    const F: &str = "queue_complete";
    let job_id = args::required(F, "job_id", job_id);
    let lease_token = args::required(F, "lease_token", lease_token);
    if let Some(result) = &result {
        args::document(F, "result", result);
    }
    args::read_committed(F);
    let now = clock::now();
    access::require_jobs(F, &[job_id], QueuePrivilege::Work);
    connect::connect(&JOB_PATH, |client| {
        let completed = spi::run(
            client,
            statement,
            &[
                job_id.into(),
                lease_token.into(),
                now.into(),
                Jsonb::arg(result),
            ],
        )
        .first(|row| {
            let queue: String = row.required(1);
            (queue, row.required::<i32>(2), row.get::<String>(3))
        });
        let Some((queue, attempts, group)) = completed else {
            return false;
        };
        counters::succeeded(&queue, attempts);
        if let Some(group) = group {
            group::release(client, &[(queue, group)], now);
        }
        depend::finished(client, &[job_id], JobStatus::Succeeded, now);
        true
    })
}

/// `COMPLETE` for many jobs in one statement: `$1` ids, `$2` tokens, `$3` results (or NULL),
/// `$4` now. One row per completed job: its input position. The join is a lookup by key
/// (`jobs_pkey`), so the cost is linear in the batch; answering per input position in SQL would
/// need a join of the input with the completed rows, which the job path's planner settings (no
/// hash or merge joins) make quadratic: 10× slower per job at 1000 jobs.
pub(crate) const COMPLETE_BATCH: Statement = Statement {
    name: "complete_batch",
    sql: "WITH given AS (
              SELECT * FROM unnest($1::bigint[], $2::uuid[],
                                   coalesce($3, array_fill(NULL::jsonb, ARRAY[cardinality($1)])))
                            WITH ORDINALITY AS given (id, token, result, ord))
          UPDATE leaseq.jobs AS job
             SET status = 'succeeded',
                 result = given.result,
                 -- the attempt closes on the job's row (history.rs)
                 lease_expires_at = NULL,
                 updated_at = $4,
                 finished_at = $4
            FROM given
           WHERE job.id = given.id
             -- the fence (lease.rs)
             AND job.lease_token = given.token AND job.status = 'running'
             AND job.lease_expires_at > $4
          RETURNING given.ord, job.queue, job.attempts, job.group_key",
    params: &[INT8_ARRAY, UUID_ARRAY, JSONB_ARRAY, TIMESTAMPTZ],
};

/// [`COMPLETE_BATCH`] for jobs that share one lease token and have no results — a batch from one
/// claim call (claim.rs), the drain's common case: `$1` ids, `$2` the token, `$3` now. One row
/// per completed job: its id. The token goes in once and the jobs are reached by `id = ANY`, not
/// by a join of unnested pairs: about 2 µs less per job for a Python client (docs/benchmarks.md).
pub(crate) const COMPLETE_SHARED: Statement = Statement {
    name: "complete_batch.shared_token",
    sql: "UPDATE leaseq.jobs AS job
             SET status = 'succeeded',
                 result = NULL,
                 -- the attempt closes on the job's row (history.rs)
                 lease_expires_at = NULL,
                 updated_at = $3,
                 finished_at = $3
           WHERE job.id = ANY ($1)
             -- the fence (lease.rs)
             AND job.lease_token = $2 AND job.status = 'running' AND job.lease_expires_at > $3
          RETURNING job.id, job.queue, job.attempts, job.group_key",
    params: &[INT8_ARRAY, UUID, TIMESTAMPTZ],
};

/// `queue_complete` for many jobs at once, in one statement: returns one boolean per job, in
/// input order, each with the meaning and the fence of `queue_complete`. `lease_tokens` has one
/// element per job, or one for all of them (the jobs of one claim share its token); `results`,
/// when given, has one element (or NULL) per job.
///
/// Errors: `22004` NULL job_ids/lease_tokens or a NULL element of them (named by position),
/// `22023` lease_tokens neither one per job nor one, more than 10000 jobs, or a job id twice;
/// `54000` a result over `leaseq.max_payload_bytes`; `0A000` outside READ COMMITTED.
#[pg_extern(name = "queue_complete_batch")]
pub fn complete_batch(
    job_ids: Option<IdArray>,
    lease_tokens: Option<UuidArray>,
    results: default!(Option<JsonbArray>, "NULL"),
) -> SetOfIterator<'static, bool> {
    complete_batch_with(
        &COMPLETE_BATCH,
        Some(&COMPLETE_SHARED),
        job_ids,
        lease_tokens,
        results,
    )
}

/// `complete_batch`, recording the successes with `statement`, or with `shared` for jobs that
/// share one token and have no results (`compat` passes 0.1.0's, and no `shared`).
pub(crate) fn complete_batch_with(
    statement: &'static Statement,
    shared: Option<&'static Statement>,
    job_ids: Option<IdArray>,
    lease_tokens: Option<UuidArray>,
    results: Option<JsonbArray>,
) -> SetOfIterator<'static, bool> {
    const F: &str = "queue_complete_batch";
    let (ids, tokens) = args::job_batch(F, job_ids, lease_tokens);
    args::documents_per_job(F, "results", results.as_ref(), ids.len());
    args::read_committed(F);
    if ids.is_empty() {
        return SetOfIterator::new(Vec::new());
    }
    let now = clock::now();
    let n = ids.len();
    access::require_jobs(F, &ids, QueuePrivilege::Work);
    let done: Vec<bool> = connect::connect(&JOB_PATH, |client| {
        // Each completed job: its input position (from 1), queue, attempts, group.
        let completed: Vec<(usize, String, i32, Option<String>)> = match (tokens, shared) {
            (args::LeaseTokens::Shared(token), Some(shared)) if results.is_none() => {
                let position: std::collections::HashMap<i64, usize> =
                    ids.iter().enumerate().map(|(i, id)| (*id, i + 1)).collect();
                spi::run(
                    client,
                    shared,
                    &[ids.clone().into(), token.into(), now.into()],
                )
                .map(|row| {
                    let id: i64 = row.required(1);
                    (position[&id], row.required(2), row.required(3), row.get(4))
                })
            }
            (tokens, _) => {
                let results_arg = match &results {
                    Some(r) => r.arg(),
                    None => pgrx::datum::DatumWithOid::null_oid(pgrx::pg_sys::JSONBARRAYOID),
                };
                let tokens = tokens.per_job(n);
                spi::run(
                    client,
                    statement,
                    &[ids.clone().into(), tokens.into(), results_arg, now.into()],
                )
                .map(|row| {
                    let position: i64 = row.required(1);
                    (
                        position as usize,
                        row.required(2),
                        row.required(3),
                        row.get(4),
                    )
                })
            }
        };
        let mut done = vec![false; n];
        let mut finished = Vec::with_capacity(completed.len());
        let mut groups = group::Groups::new();
        counters::succeeded_many(
            completed
                .iter()
                .map(|(_, queue, attempts, _)| (queue.as_str(), *attempts)),
        );
        for (position, queue, _, group) in completed {
            done[position - 1] = true;
            finished.push(ids[position - 1]);
            groups.extend(group.map(|group| (queue, group)));
        }
        group::release(client, &groups, now);
        depend::finished(client, &finished, JobStatus::Succeeded, now);
        done
    });
    SetOfIterator::new(done)
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use pgrx::prelude::*;

    /// A batch sent with its claim's one token completes exactly the jobs that still hold that
    /// token: one of them, reclaimed and claimed again meanwhile, stays with its new owner.
    #[pg_test]
    fn a_shared_token_completes_only_the_jobs_that_still_hold_it() {
        completes_only_the_holders(
            "complete_shared",
            "ARRAY[(SELECT lease_token FROM first_claim LIMIT 1)]",
        );
    }

    /// The same batch sent as a client returns a claim's rows — the one token once per job — is
    /// fenced job by job in the same way (it runs as the shared token's statement).
    #[pg_test]
    fn a_token_repeated_per_job_completes_only_the_jobs_that_still_hold_it() {
        completes_only_the_holders(
            "complete_repeated",
            "ARRAY(SELECT lease_token FROM first_claim ORDER BY job_id)",
        );
    }

    /// Claims three jobs of a new `queue` in one call, has the middle one reclaimed and claimed
    /// by another worker, then completes all three with `tokens` (SQL over `first_claim`).
    fn completes_only_the_holders(queue: &str, tokens: &str) {
        // Each claim here must reclaim what expired: a probe slower than leaseq.claim_slow_head
        // on a loaded machine would hold the next ones off for the rescan interval (CI did).
        Spi::run("SET LOCAL leaseq.claim_rescan_interval = 0").unwrap();
        Spi::run_with_args(
            "SELECT leaseq.queue_create($1, lease => '1 hour',
                                       backoff_base => '1 hour', backoff_cap => '1 hour')",
            &[queue.into()],
        )
        .unwrap();
        Spi::run_with_args(
            "SELECT leaseq.queue_enqueue_batch($1, ARRAY['{}', '{}', '{}']::jsonb[])",
            &[queue.into()],
        )
        .unwrap();
        Spi::run_with_args(
            "CREATE TEMP TABLE first_claim AS
                 SELECT job_id, lease_token FROM leaseq.queue_claim($1, 'w', 3)",
            &[queue.into()],
        )
        .unwrap();
        let middle =
            Spi::get_one::<i64>("SELECT job_id FROM first_claim ORDER BY job_id OFFSET 1 LIMIT 1")
                .unwrap()
                .unwrap();
        // The middle job's lease runs out; it is reclaimed, due again, and claimed by another.
        Spi::run_with_args(
            "WITH ended AS (
                UPDATE leaseq.jobs SET lease_expires_at = clock_timestamp() - interval '1 ms'
                 WHERE id = $1
                RETURNING queue, lease_expires_at, lease_token, id)
            INSERT INTO leaseq.leases (queue, expires_at, token, job_ids)
            SELECT queue, lease_expires_at, lease_token, ARRAY[id] FROM ended",
            &[middle.into()],
        )
        .unwrap();
        Spi::run_with_args(
            "SELECT count(*) FROM leaseq.queue_claim($1, 'reclaimer')",
            &[queue.into()],
        )
        .unwrap();
        Spi::run_with_args(
            "UPDATE leaseq.jobs SET run_at = clock_timestamp() WHERE id = $1",
            &[middle.into()],
        )
        .unwrap();
        let new_owner = Spi::get_one_with_args::<i64>(
            "SELECT job_id FROM leaseq.queue_claim($1, 'new owner')",
            &[queue.into()],
        );
        assert_eq!(new_owner, Ok(Some(middle)));
        let done = Spi::get_one::<Vec<bool>>(&format!(
            "SELECT array_agg(done ORDER BY ord)
               FROM leaseq.queue_complete_batch(
                        ARRAY(SELECT job_id FROM first_claim ORDER BY job_id), {tokens})
                    WITH ORDINALITY AS done (done, ord)"
        ));
        assert_eq!(done, Ok(Some(vec![true, false, true])));
        let statuses = Spi::get_one_with_args::<Vec<String>>(
            "SELECT array_agg(status::text || ':' || worker ORDER BY id) FROM leaseq.jobs
              WHERE queue = $1",
            &[queue.into()],
        );
        assert_eq!(
            statuses,
            Ok(Some(vec![
                "succeeded:w".to_string(),
                "running:new owner".to_string(),
                "succeeded:w".to_string()
            ]))
        );
    }
}
