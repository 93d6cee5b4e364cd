//! History: each attempt is written once, when it closes. While it is open it lives on the job's
//! row (`lease_token`, `worker`, `started_at`); the statement that takes the job out of `running`
//! closes it in the same statement, so history and the job's state never disagree.
//!
//! A failure, an expired lease, a cancel, a snooze or a hand-back — fail, fail_batch, reclaim (in
//! claim), cancel, snooze, hand_back — moves the attempt to `leaseq.closed_attempts` and clears the token. Each of those statements writes
//! it whole, marked `-- the attempt closes (history.rs)`, in the same shape:
//!
//! ```sql
//! INSERT INTO leaseq.closed_attempts
//!        (job_id, attempt_no, lease_token, worker, started_at, ended_at, outcome, error)
//! SELECT <closing>.id,
//!        coalesce((SELECT max(earlier.attempt_no) FROM leaseq.closed_attempts AS earlier
//!                   WHERE earlier.job_id = <closing>.id), 0) + 1,
//!        <the lease token>, <closing>.worker, <closing>.started_at, <end>, <outcome>, <error>
//!   FROM <closing>
//! ```
//!
//! A success — complete, complete_batch — is final, so its attempt stays on the row, token
//! included, with `finished_at` as its end: marked `-- the attempt closes on the job's row
//! (history.rs)`. That saves a history row and its index entry on the path every job takes.
//! (Jobs that succeeded under 0.1.0 have their success in `closed_attempts` and no token; so do
//! those completed by this library on a database not yet updated from 0.1.0, through
//! `compat::COMPLETE_INTO_HISTORY` and `COMPLETE_BATCH_INTO_HISTORY`.)
//!
//! The attempt is numbered `MAX + 1` over the job's closed attempts — the very number
//! `queue_claim` handed out with the same expression, since nothing else writes a job's history
//! while its attempt is open (the job's row lock and lease token say who may). The view
//! `leaseq.attempts` numbers the attempt on a job's row the same way. The registry's tests
//! (src/statements.rs) hold every closing statement to this shape; the test below checks what
//! each one writes.

#[cfg(any(test, feature = "pg_test"))]
use pgrx::prelude::*;

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use pgrx::prelude::*;

    /// Each way an attempt closes: the statements that close a job claimed as `$1` id / `$2`
    /// token of queue `$3`, the outcome it records, and the error it records (its `error` key,
    /// or the whole document, as text; `-` for none).
    const CLOSES: &[(&str, &[&str], &str, &str)] = &[
        (
            "complete",
            &["SELECT leaseq.queue_complete($1, $2, '{\"r\": 1}')"],
            "succeeded",
            "-",
        ),
        (
            "complete_batch",
            &["SELECT count(*) FROM leaseq.queue_complete_batch(ARRAY[$1], ARRAY[$2])"],
            "succeeded",
            "-",
        ),
        (
            "fail",
            &["SELECT leaseq.queue_fail($1, $2, '{\"e\": 1}')"],
            "failed",
            "{\"e\": 1}",
        ),
        (
            "fail_batch",
            &[
                "SELECT count(*) FROM leaseq.queue_fail_batch(ARRAY[$1], ARRAY[$2],
                                                           ARRAY['{\"e\": 2}']::jsonb[])",
            ],
            "failed",
            "{\"e\": 2}",
        ),
        (
            "reclaim",
            &[
                "WITH ended AS (
                      UPDATE leaseq.jobs SET lease_expires_at = clock_timestamp()
                       WHERE id = $1 AND lease_token = $2
                      RETURNING queue, lease_expires_at, lease_token, id)
                  INSERT INTO leaseq.leases (queue, expires_at, token, job_ids)
                  SELECT queue, lease_expires_at, lease_token, ARRAY[id] FROM ended",
                "SELECT count(*) FROM leaseq.queue_claim($3, 'reclaimer')",
            ],
            "lease_expired",
            "lease_expired",
        ),
        (
            "cancel",
            &["SELECT leaseq.queue_cancel($1)"],
            "cancelled",
            "-",
        ),
        (
            "hand_back",
            &["SELECT count(*) FROM leaseq.queue_hand_back(ARRAY[$1], ARRAY[$2])"],
            "handed_back",
            "-",
        ),
    ];

    /// Closes a second attempt of a job (the first was failed) in each way, and checks the
    /// attempt in `leaseq.attempts` against what the claim handed out: number, token, worker,
    /// start, and an end at or after it — once, wherever it is kept.
    #[pg_test]
    fn every_close_writes_the_attempt_the_claim_opened() {
        // Each claim here must reclaim what expired: a probe slower than leaseq.claim_slow_head
        // on a loaded machine would hold the next ones off for the rescan interval (CI did).
        Spi::run("SET LOCAL leaseq.claim_rescan_interval = 0").unwrap();
        for (way, close, outcome, error) in CLOSES {
            let queue = format!("closes_{way}");
            let worker = format!("worker-{way}");
            Spi::run_with_args(
                "SELECT leaseq.queue_create($1, backoff_base => '1 hour', backoff_cap => '1 hour')",
                &[queue.as_str().into()],
            )
            .unwrap();
            let (id, token) = Spi::get_two_with_args::<i64, pgrx::Uuid>(
                "WITH e AS (SELECT leaseq.queue_enqueue($1, '{}'))
                 SELECT job_id, lease_token FROM e, leaseq.queue_claim($1, 'first')",
                &[queue.as_str().into()],
            )
            .unwrap();
            let (id, token) = (id.unwrap(), token.unwrap());
            Spi::run_with_args(
                "SELECT leaseq.queue_fail($1, $2)",
                &[id.into(), token.into()],
            )
            .unwrap();
            Spi::run_with_args(
                "UPDATE leaseq.jobs SET run_at = clock_timestamp() WHERE id = $1",
                &[id.into()],
            )
            .unwrap();
            let (token, attempt_no, expires) =
                Spi::get_three_with_args::<pgrx::Uuid, i32, TimestampWithTimeZone>(
                    "SELECT lease_token, attempt_no, lease_expires_at
                       FROM leaseq.queue_claim($1, $2)",
                    &[queue.as_str().into(), worker.as_str().into()],
                )
                .unwrap();
            assert_eq!(attempt_no, Some(2));
            for step in *close {
                Spi::run_with_args(step, &[id.into(), token.into(), queue.as_str().into()])
                    .unwrap();
            }
            let matches = Spi::get_one_with_args::<bool>(
                "SELECT count(*) = 1
                        AND bool_and(a.lease_token = $2 AND a.worker = $3
                                     AND a.started_at + q.lease = $4
                                     AND a.ended_at >= a.started_at
                                     AND a.outcome::text = $5
                                     AND coalesce(a.error->>'error', a.error::text, '-') = $6)
                   FROM leaseq.attempts a
                   JOIN leaseq.jobs j ON j.id = a.job_id
                   JOIN leaseq.queues q ON q.name = j.queue
                  WHERE a.job_id = $1 AND a.attempt_no = 2",
                &[
                    id.into(),
                    token.into(),
                    worker.as_str().into(),
                    expires.into(),
                    (*outcome).into(),
                    (*error).into(),
                ],
            );
            assert_eq!(matches, Ok(Some(true)), "the attempt {way} closed");
            let attempts = Spi::get_two_with_args::<i64, i64>(
                "SELECT count(*), count(*) FILTER (WHERE outcome = 'running')
                   FROM leaseq.attempts WHERE job_id = $1",
                &[id.into()],
            );
            assert_eq!(
                attempts,
                Ok((Some(2), Some(0))),
                "{way}: two attempts, none open"
            );
            let leased = Spi::get_one_with_args::<i64>(
                "SELECT count(*) FROM leaseq.jobs
                  WHERE id = $1 AND (status = 'running' OR lease_expires_at IS NOT NULL)",
                &[id.into()],
            );
            assert_eq!(leased, Ok(Some(0)), "{way} ended the lease");
        }
    }
}
