//! Fail: `running` → `pending` (retry later) or `dead`, under the lease fence (see `lease`).
//!
//! The attempt closes `failed` with the error. The job goes `dead` when `retry` is false or its
//! budget is spent (`attempts >= max_attempts`); otherwise it is due again after `retry_in`, or
//! after a full-jitter backoff drawn in Rust (`backoff::retry_delay`) from the queue's policy.
//! The row is locked first (to read the budget and policy), then changed under the same fence.
use pgrx::prelude::*;

use crate::args;
use crate::backoff;
use crate::datum::{JobStatus, Jsonb};
use crate::errors;
use crate::queue;
use crate::spi::{self, BOOL, INT8, JSONB, Statement, TIMESTAMPTZ, UUID};

const LOCK: Statement = Statement {
    sql: "SELECT j.attempts, j.max_attempts, q.backoff_base, q.backoff_cap
            FROM leaseq.jobs j
            JOIN leaseq.queues q ON q.name = j.queue
           WHERE j.id = $1 AND j.lease_token = $2 AND j.status = 'running'
             AND j.lease_expires_at > $3
             FOR UPDATE OF j",
    params: &[INT8, UUID, TIMESTAMPTZ],
};

/// `$4`: goes dead; `$5`: next `run_at` otherwise; `$6`: the error.
const FAIL: Statement = Statement {
    sql: "WITH j AS (
              UPDATE leaseq.jobs j
                 SET status = CASE WHEN $4 THEN 'dead' ELSE 'pending' END::leaseq.job_status,
                     run_at = CASE WHEN $4 THEN j.run_at ELSE $5 END,
                     lease_token = NULL,
                     lease_expires_at = NULL,
                     last_error = $6,
                     updated_at = $3,
                     finished_at = CASE WHEN $4 THEN $3 END
               WHERE j.id = $1 AND j.lease_token = $2 AND j.status = 'running'
                 AND j.lease_expires_at > $3
              RETURNING j.id, j.status),
          a AS (
              UPDATE leaseq.attempts a
                 SET outcome = 'failed', ended_at = $3, error = $6
                FROM j
               WHERE a.job_id = j.id AND a.lease_token = $2 AND a.outcome = 'running'
              RETURNING a.job_id)
          SELECT (SELECT status::text FROM j), (SELECT count(*) FROM a)",
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
#[search_path(pg_catalog, pg_temp)]
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
    let now = spi::now();

    Spi::connect_mut(|client| {
        let locked = spi::run(
            client,
            &LOCK,
            &[job_id.into(), lease_token.into(), now.into()],
        );
        if locked.is_empty() {
            return None;
        }
        let row = locked.first();
        let not_null = "job and queue settings are NOT NULL";
        let attempts: i32 = row.get(1).ok().flatten().expect(not_null);
        let max_attempts: i32 = row.get(2).ok().flatten().expect(not_null);
        let policy = queue::backoff_policy(
            row.get(3).ok().flatten().expect(not_null),
            row.get(4).ok().flatten().expect(not_null),
        );
        let dead = !retry || attempts >= max_attempts;
        let delay =
            retry_in.unwrap_or_else(|| backoff::retry_delay(attempts, policy, &mut rand::rng()));
        let run_at = spi::plus_micros(now, delay);

        let failed = spi::run(
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
        .first();
        let status: Option<String> = failed.get(1).ok().flatten();
        let attempts_closed: i64 = failed.get(2).ok().flatten().unwrap_or(0);
        let status = status
            .and_then(|s| JobStatus::from_label(&s))
            .unwrap_or_else(|| errors::internal(F, "a job locked under its lease was not failed"));
        if attempts_closed != 1 {
            errors::internal(F, "the job's current lease had no open attempt");
        }
        Some(status)
    })
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
