//! Hand back: `running` → `pending` at once, its attempt budget kept — a worker giving back jobs
//! it claimed but never started (a prefetching worker shutting down), under the lease fence
//! (`lease`).
//!
//! The attempt closes `handed_back` in history: attempt numbers still grow (the next claim is a
//! new fencing generation), but `attempts` goes back down by the one its claim took and nothing
//! else is spent — no snooze, no backoff. The job keeps its `run_at`, so it is due at once, in
//! its place in the queue (and in its group, whose room it keeps, as a snoozed job does).
use pgrx::prelude::*;

use crate::core::access;
use crate::core::args;
use crate::core::clock;
use crate::core::connect::{self, JOB_PATH};
use crate::core::datum::{IdArray, QueuePrivilege, UuidArray};
use crate::core::settings;
use crate::core::spi::{self, BOOL, INT8_ARRAY, Statement, TIMESTAMPTZ, UUID_ARRAY};

/// `$1` ids, `$2` tokens, `$3` now, `$4` whether to notify the queues' listeners. One row per job
/// handed back: its input position. The join is a lookup by key (`jobs_pkey`).
pub(crate) const HAND_BACK: Statement = Statement {
    name: "hand_back",
    sql: "WITH given AS (
              SELECT * FROM unnest($1::bigint[], $2::uuid[])
                            WITH ORDINALITY AS given (id, token, ord)),
          handed AS (
              UPDATE leaseq.jobs AS job
                 SET status = 'pending',
                     attempts = job.attempts - 1,
                     lease_token = NULL,
                     lease_expires_at = NULL,
                     updated_at = $3
                FROM given
               WHERE job.id = given.id
                 -- the fence (lease.rs)
                 AND job.lease_token = given.token AND job.status = 'running'
                 AND job.lease_expires_at > $3
              RETURNING given.ord, job.id, job.queue, given.token, job.worker, job.started_at),
          closed AS (
              -- the attempt closes (history.rs)
              INSERT INTO leaseq.closed_attempts
                     (job_id, attempt_no, lease_token, worker, started_at, ended_at, outcome, error)
              SELECT handed.id,
                     coalesce((SELECT max(earlier.attempt_no) FROM leaseq.closed_attempts AS earlier
                                WHERE earlier.job_id = handed.id), 0) + 1,
                     handed.token, handed.worker, handed.started_at, $3, 'handed_back', NULL
                FROM handed
              RETURNING job_id)
          SELECT handed.ord, (SELECT count(*) FROM closed),
                 CASE WHEN $4 THEN pg_catalog.pg_notify('leaseq_' || handed.queue, '') END
            FROM handed",
    params: &[INT8_ARRAY, UUID_ARRAY, TIMESTAMPTZ, BOOL],
};

/// Gives back running jobs their worker claimed and never started: each is `pending` again at
/// once, in its place, without spending an attempt of its budget, and idle workers are woken.
/// Returns one boolean per job, in input order: false where that job's lease was not current
/// (nothing changed for it), under the fence of `queue_renew`.
///
/// Errors: `22004` NULL job_ids/lease_tokens or a NULL element of them (named by position),
/// `22023` arrays of different lengths, more than 10000 jobs, or a job id twice; `0A000` outside
/// READ COMMITTED.
#[pg_extern]
pub fn queue_hand_back(
    job_ids: Option<IdArray>,
    lease_tokens: Option<UuidArray>,
) -> SetOfIterator<'static, bool> {
    const F: &str = "queue_hand_back";
    let (ids, tokens) = args::job_batch(F, job_ids, lease_tokens);
    let tokens = tokens.per_job(ids.len());
    args::read_committed(F);
    if ids.is_empty() {
        return SetOfIterator::new(Vec::new());
    }
    let now = clock::now();
    let n = ids.len();
    access::require_jobs(F, &ids, QueuePrivilege::Work);
    let handed = connect::connect(&JOB_PATH, |client| {
        let rows = spi::run(
            client,
            &HAND_BACK,
            &[
                ids.into(),
                tokens.into(),
                now.into(),
                settings::notify().into(),
            ],
        );
        let mut handed = vec![false; n];
        let mut closed = 0;
        rows.map(|row| {
            let position: i64 = row.required(1);
            handed[position as usize - 1] = true;
            closed = row.required::<i64>(2);
        });
        if closed != handed.iter().filter(|h| **h).count() as i64 {
            crate::core::errors::internal(F, "a job handed back had no open attempt");
        }
        handed
    });
    SetOfIterator::new(handed)
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use pgrx::prelude::*;

    /// A job of a new queue with a budget of one attempt, claimed: its id and token.
    fn claimed(queue: &str) -> (i64, pgrx::Uuid) {
        Spi::run_with_args(
            "SELECT leaseq.queue_create($1, max_attempts => 1, lease => '1 hour')",
            &[queue.into()],
        )
        .unwrap();
        let (id, token) = Spi::get_two_with_args::<i64, pgrx::Uuid>(
            "WITH e AS (SELECT leaseq.queue_enqueue($1, '{}') AS id)
             SELECT job_id, lease_token FROM e, leaseq.queue_claim($1, 'prefetcher')",
            &[queue.into()],
        )
        .unwrap();
        (id.unwrap(), token.unwrap())
    }

    #[pg_test]
    fn a_handed_back_job_is_due_at_once_with_its_budget_kept() {
        let (id, token) = claimed("hand_back_budget");
        let handed = Spi::get_one_with_args::<bool>(
            "SELECT bool_and(h) FROM leaseq.queue_hand_back(ARRAY[$1], ARRAY[$2]) AS h",
            &[id.into(), token.into()],
        );
        assert_eq!(handed, Ok(Some(true)));
        let state = Spi::get_one_with_args::<String>(
            "SELECT concat_ws(' ', status, attempts, lease_token IS NULL, snoozes)::text
               FROM leaseq.jobs WHERE id = $1",
            &[id.into()],
        );
        assert_eq!(state, Ok(Some("pending 0 t 0".into())));
        // Its one attempt is still there to spend: the next claim gets it, as attempt 2.
        let next = Spi::get_two_with_args::<i64, i32>(
            "SELECT job_id, attempt_no FROM leaseq.queue_claim('hand_back_budget', 'w')",
            &[],
        );
        assert_eq!(next, Ok((Some(id), Some(2))));
        let history = Spi::get_one_with_args::<String>(
            "SELECT string_agg(attempt_no || ' ' || outcome || ' ' || worker, ', '
                               ORDER BY attempt_no)
               FROM leaseq.attempts WHERE job_id = $1",
            &[id.into()],
        );
        assert_eq!(
            history,
            Ok(Some("1 handed_back prefetcher, 2 running w".into()))
        );
    }

    #[pg_test]
    fn hand_back_answers_per_job_in_input_order() {
        let (first, first_token) = claimed("hand_back_order_a");
        let (second, _) = claimed("hand_back_order_b");
        let answers = Spi::get_one_with_args::<Vec<bool>>(
            "SELECT array_agg(h) FROM leaseq.queue_hand_back(ARRAY[$2, $1],
                                                             ARRAY[gen_random_uuid(), $3]) AS h",
            &[first.into(), second.into(), first_token.into()],
        );
        assert_eq!(answers, Ok(Some(vec![false, true])));
        let running = Spi::get_one_with_args::<String>(
            "SELECT status::text FROM leaseq.jobs WHERE id = $1",
            &[second.into()],
        );
        assert_eq!(running, Ok(Some("running".into())));
    }
}
