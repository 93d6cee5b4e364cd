//! Fail: `running` → `pending` (retry later) or `dead`, under the lease fence (`lease`).
//!
//! The attempt closes `failed` with the error. The job goes `dead` when `retry` is false or its
//! budget is spent (`attempts >= max_attempts`); otherwise it is due again after `retry_in`, or
//! after a full-jitter backoff drawn in Rust (`backoff::retry_delay`) from the queue's policy.
//! The row is locked first (to read the budget and policy), then changed under the same fence.
use pgrx::prelude::*;

use crate::core::access;
use crate::core::args;
use crate::core::backoff;
use crate::core::clock;
use crate::core::connect::{self, JOB_PATH};
use crate::core::counters::{self, Event};
use crate::core::datum::{IdArray, JobStatus, Jsonb, JsonbArray, QueuePrivilege, UuidArray};
use crate::core::errors;
use crate::core::spi::{
    self, BOOL, BOOL_ARRAY, INT8, INT8_ARRAY, JSONB, JSONB_ARRAY, Statement, TIMESTAMPTZ,
    TIMESTAMPTZ_ARRAY, UUID, UUID_ARRAY,
};
use crate::lifecycle::depend;
use crate::lifecycle::group;
use crate::lifecycle::queue;

/// The job, locked under the fence, with what the retry decision needs (the queue's settings
/// looked up per row, as in `LOCK_BATCH`).
pub(crate) const LOCK: Statement = Statement {
    name: "fail.lock",
    sql: "SELECT job.attempts, job.max_attempts,
                 (SELECT queue.backoff_base FROM leaseq.queues AS queue
                   WHERE queue.name = job.queue),
                 (SELECT queue.backoff_cap FROM leaseq.queues AS queue
                   WHERE queue.name = job.queue),
                 job.queue
            FROM leaseq.jobs AS job
           WHERE job.id = $1
             -- the fence (lease.rs)
             AND job.lease_token = $2 AND job.status = 'running' AND job.lease_expires_at > $3
             FOR UPDATE OF job",
    params: &[INT8, UUID, TIMESTAMPTZ],
};

/// The retry decision applied: `$4` whether the job goes dead, `$5` its next `run_at`
/// otherwise, `$6` the error. The lease is cleared either way.
pub(crate) const FAIL: Statement = Statement {
    name: "fail",
    sql: "WITH failed AS (
              UPDATE leaseq.jobs AS job
                 SET status = CASE WHEN $4 THEN 'dead' ELSE 'pending' END::leaseq.job_status,
                     run_at = CASE WHEN $4 THEN job.run_at ELSE $5 END,
                     lease_token = NULL,
                     lease_expires_at = NULL,
                     last_error = $6,
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
              SELECT failed.id,
                     coalesce((SELECT max(earlier.attempt_no) FROM leaseq.closed_attempts AS earlier
                                WHERE earlier.job_id = failed.id), 0) + 1,
                     $2, failed.worker, failed.started_at, $3, 'failed', $6
                FROM failed
              RETURNING job_id)
          SELECT (SELECT status::text FROM failed), (SELECT count(*) FROM closed)",
    params: &[INT8, UUID, TIMESTAMPTZ, BOOL, TIMESTAMPTZ, JSONB],
};

/// Records a failed attempt of a running job and returns the job's new status: `pending` (it
/// will be retried at its new `run_at`) or `dead`. Returns NULL, changing nothing, under the
/// same fence as `queue_renew`.
///
/// - `retry => false`: straight to `dead` (a permanent error, such as invalid input).
/// - `retry_in`: the delay before the retry, in `[0, 30 days]`; NULL means the queue's backoff:
///   uniform in `[0, min(backoff_cap, backoff_base · 2^(attempts−1))]`.
///
/// Errors: `22004` NULL job_id/lease_token/retry, `22023` invalid retry_in, `54000` error over
/// `leaseq.max_payload_bytes`, `0A000` outside READ COMMITTED.
#[pg_extern]
pub fn queue_fail(
    job_id: Option<i64>,
    lease_token: Option<pgrx::Uuid>,
    error: default!(Option<Jsonb>, "NULL"),
    retry: default!(Option<bool>, true),
    retry_in: default!(Option<Interval>, "NULL"),
) -> Option<JobStatus> {
    const F: &str = "queue_fail";
    let job_id = args::required(F, "job_id", job_id);
    let lease_token = args::required(F, "lease_token", lease_token);
    if let Some(error) = &error {
        args::document(F, "error", error);
    }
    let retry = args::required(F, "retry", retry);
    let retry_in = retry_in.map(|d| {
        args::interval_in_range(F, "retry_in", d, true, args::MAX_DELAY_MICROS, "30 days") as i64
    });
    args::read_committed(F);
    let now = clock::now();

    access::require_jobs(F, &[job_id], QueuePrivilege::Work);
    connect::connect(&JOB_PATH, |client| {
        let locked = spi::run(
            client,
            &LOCK,
            &[job_id.into(), lease_token.into(), now.into()],
        )
        .first(|row| {
            let attempts: i32 = row.required(1);
            let max_attempts: i32 = row.required(2);
            let policy = queue::backoff_policy(row.required(3), row.required(4));
            (attempts, max_attempts, policy, row.required::<String>(5))
        });
        let (attempts, max_attempts, policy, queue) = locked?;
        let dead = !retry || attempts >= max_attempts;
        let delay =
            retry_in.unwrap_or_else(|| backoff::retry_delay(attempts, policy, &mut rand::rng()));
        let run_at = clock::plus_micros(now, delay);

        let (status, attempts_closed) = spi::run(
            client,
            &FAIL,
            &[
                job_id.into(),
                lease_token.into(),
                now.into(),
                dead.into(),
                run_at.into(),
                Jsonb::arg(error),
            ],
        )
        .single(|row| (row.get::<String>(1), row.required::<i64>(2)));
        let status = status
            .and_then(|s| JobStatus::from_label(&s))
            .unwrap_or_else(|| errors::internal(F, "a job locked under its lease was not failed"));
        if attempts_closed != 1 {
            errors::internal(F, "the job's current lease had no open attempt");
        }
        counters::count(&queue, Event::Failed, 1);
        counters::count(&queue, Event::Dead, usize::from(dead));
        if dead {
            group::ended(client, &[job_id], now);
            depend::finished(client, &[job_id], JobStatus::Dead, now);
        }
        Some(status)
    })
}

/// `LOCK` for many jobs: the fenced ones among `$1` ids / `$2` tokens, locked in id order (two
/// batches touching the same jobs cannot deadlock), with what the retry decision needs. The
/// queue's settings come from per-row lookups, not a join on `queue`: a join condition on
/// `job.queue` would let the planner scan a queue-wide partial index and rescan the input for
/// each of its entries (measured: 3 s for 3,000 jobs).
pub(crate) const LOCK_BATCH: Statement = Statement {
    name: "fail_batch.lock",
    sql: "SELECT job.id, job.attempts, job.max_attempts,
                 (SELECT queue.backoff_base FROM leaseq.queues AS queue
                   WHERE queue.name = job.queue),
                 (SELECT queue.backoff_cap FROM leaseq.queues AS queue
                   WHERE queue.name = job.queue),
                 job.queue
            FROM unnest($1::bigint[], $2::uuid[]) AS given (id, token)
            JOIN leaseq.jobs AS job
              ON job.id = given.id
             -- the fence (lease.rs)
             AND job.lease_token = given.token AND job.status = 'running'
             AND job.lease_expires_at > $3
           ORDER BY job.id
             FOR UPDATE OF job",
    params: &[INT8_ARRAY, UUID_ARRAY, TIMESTAMPTZ],
};

/// `FAIL` for the locked jobs: `$1` ids, `$2` tokens, `$3` whether each goes dead, `$4` its next
/// run_at, `$5` its error, `$6` now. Returns each failed job's new status.
pub(crate) const FAIL_BATCH: Statement = Statement {
    name: "fail_batch",
    sql: "WITH decided AS (
              SELECT * FROM unnest($1::bigint[], $2::uuid[], $3::boolean[], $4::timestamptz[],
                                   $5::jsonb[]) AS decided (id, token, dead, run_at, error)),
          failed AS (
              UPDATE leaseq.jobs AS job
                 SET status = CASE WHEN decided.dead THEN 'dead' ELSE 'pending' END
                                  ::leaseq.job_status,
                     run_at = CASE WHEN decided.dead THEN job.run_at ELSE decided.run_at END,
                     lease_token = NULL,
                     lease_expires_at = NULL,
                     last_error = decided.error,
                     updated_at = $6,
                     finished_at = CASE WHEN decided.dead THEN $6 END
                FROM decided
               WHERE job.id = decided.id
                 -- the fence (lease.rs)
                 AND job.lease_token = decided.token AND job.status = 'running'
                 AND job.lease_expires_at > $6
              RETURNING job.id, job.status, decided.token, decided.error, job.worker,
                        job.started_at),
          closed AS (
              -- the attempt closes (history.rs)
              INSERT INTO leaseq.closed_attempts
                     (job_id, attempt_no, lease_token, worker, started_at, ended_at, outcome, error)
              SELECT failed.id,
                     coalesce((SELECT max(earlier.attempt_no) FROM leaseq.closed_attempts AS earlier
                                WHERE earlier.job_id = failed.id), 0) + 1,
                     failed.token, failed.worker, failed.started_at, $6, 'failed', failed.error
                FROM failed
              RETURNING job_id)
          SELECT failed.id, failed.status::text, (SELECT count(*) FROM closed) FROM failed",
    params: &[
        INT8_ARRAY,
        UUID_ARRAY,
        BOOL_ARRAY,
        TIMESTAMPTZ_ARRAY,
        JSONB_ARRAY,
        TIMESTAMPTZ,
    ],
};

/// `queue_fail` for many jobs at once: one status per job, in input order — `pending`, `dead`,
/// or NULL where that job's lease was not current (nothing changed for it). `errors`, when
/// given, has one element (or NULL) per job; `retry` applies to all.
///
/// Errors: as `queue_complete_batch`, plus `22004` NULL retry.
#[pg_extern]
pub fn queue_fail_batch(
    job_ids: Option<IdArray>,
    lease_tokens: Option<UuidArray>,
    errors: default!(Option<JsonbArray>, "NULL"),
    retry: default!(Option<bool>, true),
) -> SetOfIterator<'static, Option<JobStatus>> {
    const F: &str = "queue_fail_batch";
    let (ids, tokens) = args::job_batch(F, job_ids, lease_tokens);
    let tokens = tokens.per_job(ids.len());
    args::documents_per_job(F, "errors", errors.as_ref(), ids.len());
    let retry = args::required(F, "retry", retry);
    args::read_committed(F);
    if ids.is_empty() {
        return SetOfIterator::new(Vec::new());
    }
    let now = clock::now();
    let docs: Vec<Option<Jsonb>> = match &errors {
        Some(e) => e.elements(),
        None => vec![None; ids.len()],
    };
    access::require_jobs(F, &ids, QueuePrivilege::Work);
    let statuses = connect::connect(&JOB_PATH, |client| {
        let locked = spi::run(
            client,
            &LOCK_BATCH,
            &[ids.clone().into(), tokens.clone().into(), now.into()],
        );
        let token_of: std::collections::HashMap<i64, (pgrx::Uuid, Option<Jsonb>)> = ids
            .iter()
            .zip(tokens.iter().zip(docs.iter()))
            .map(|(id, (token, doc))| (*id, (*token, *doc)))
            .collect();
        let mut rng = rand::rng();
        // Per queue: attempts failed, jobs gone dead.
        let mut failed_in = std::collections::HashMap::<String, (usize, usize)>::new();
        let (mut f_ids, mut f_tokens, mut f_dead, mut f_run_at, mut f_errors) =
            (vec![], vec![], vec![], vec![], vec![]);
        locked.map(|row| {
            let id: i64 = row.required(1);
            let attempts: i32 = row.required(2);
            let max_attempts: i32 = row.required(3);
            let policy = queue::backoff_policy(row.required(4), row.required(5));
            let (token, doc) = token_of[&id];
            let dead = !retry || attempts >= max_attempts;
            let tally = failed_in.entry(row.required::<String>(6)).or_default();
            *tally = (tally.0 + 1, tally.1 + usize::from(dead));
            f_ids.push(id);
            f_tokens.push(token);
            f_dead.push(dead);
            f_run_at.push(clock::plus_micros(
                now,
                backoff::retry_delay(attempts, policy, &mut rng),
            ));
            f_errors.push(doc);
        });
        let mut status_of = std::collections::HashMap::with_capacity(f_ids.len());
        if !f_ids.is_empty() {
            let locked_count = f_ids.len();
            let errors_arg = JsonbArray::arg_of(&f_errors);
            let failed = spi::run(
                client,
                &FAIL_BATCH,
                &[
                    f_ids.into(),
                    f_tokens.into(),
                    f_dead.into(),
                    f_run_at.into(),
                    errors_arg,
                    now.into(),
                ],
            );
            let mut attempts_closed = 0i64;
            failed.map(|row| {
                let id: i64 = row.required(1);
                let status: String = row.required(2);
                attempts_closed = row.required(3);
                let status = JobStatus::from_label(&status)
                    .unwrap_or_else(|| errors::internal(F, "a failed job has an unknown status"));
                status_of.insert(id, status);
            });
            if status_of.len() != locked_count || attempts_closed as usize != locked_count {
                errors::internal(
                    F,
                    "a job locked under its lease was not failed with its attempt",
                );
            }
            for (queue, (failed, dead)) in &failed_in {
                counters::count(queue, Event::Failed, *failed);
                counters::count(queue, Event::Dead, *dead);
            }
            let dead: Vec<i64> = status_of
                .iter()
                .filter(|(_, status)| **status == JobStatus::Dead)
                .map(|(id, _)| *id)
                .collect();
            group::ended(client, &dead, now);
            depend::finished(client, &dead, JobStatus::Dead, now);
        }
        ids.iter()
            .map(|id| status_of.get(id).copied())
            .collect::<Vec<_>>()
    });
    SetOfIterator::new(statuses)
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use pgrx::prelude::*;

    fn claim_and_fail(queue: &str, retry: bool) -> Option<String> {
        Spi::get_one_with_args::<String>(
            "SELECT leaseq.queue_fail(c.job_id, c.lease_token, '{\"error\": \"x\"}', retry => $2)::text
               FROM leaseq.queue_claim($1, 'w') c",
            &[queue.into(), retry.into()],
        )
        .unwrap()
    }

    #[pg_test]
    fn fail_without_retry_is_dead_with_budget_left() {
        Spi::run("SELECT leaseq.queue_create('fail_permanent', max_attempts => 5)").unwrap();
        Spi::run("SELECT leaseq.queue_enqueue('fail_permanent', '{}')").unwrap();
        assert_eq!(
            claim_and_fail("fail_permanent", false).as_deref(),
            Some("dead")
        );
        let attempts =
            Spi::get_one::<i32>("SELECT attempts FROM leaseq.jobs WHERE queue = 'fail_permanent'");
        assert_eq!(attempts, Ok(Some(1)));
    }

    #[pg_test]
    fn fail_on_the_last_attempt_is_dead() {
        Spi::run("SELECT leaseq.queue_create('fail_budget', max_attempts => 1)").unwrap();
        Spi::run("SELECT leaseq.queue_enqueue('fail_budget', '{}')").unwrap();
        assert_eq!(claim_and_fail("fail_budget", true).as_deref(), Some("dead"));
    }

    #[pg_test]
    fn fail_with_budget_left_schedules_a_retry_no_later_than_the_backoff_ceiling() {
        Spi::run("SELECT leaseq.queue_create('fail_retry', backoff_base => '3 seconds')").unwrap();
        Spi::run("SELECT leaseq.queue_enqueue('fail_retry', '{}')").unwrap();
        assert_eq!(
            claim_and_fail("fail_retry", true).as_deref(),
            Some("pending")
        );
        let within = Spi::get_one::<bool>(
            "SELECT j.run_at BETWEEN a.ended_at AND a.ended_at + interval '3 seconds'
               FROM leaseq.jobs j JOIN leaseq.attempts a ON a.job_id = j.id
              WHERE j.queue = 'fail_retry'",
        );
        assert_eq!(within, Ok(Some(true)));
    }
}
