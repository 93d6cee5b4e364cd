//! Renew: `running` → `running` with a later expiry, one job or many; and the fence every finish
//! shares.
//!
//! **The fence.** A call holding `(job_id, lease_token)` may act on the job only while
//!
//! ```sql
//! job.id = <job_id> AND job.lease_token = <lease_token>
//!     AND job.status = 'running' AND job.lease_expires_at > <now>
//! ```
//!
//! holds: the token is the job's current one, the job is running, and the lease has not expired
//! on the server's clock. Every claim draws a new token, and the job leaves `running` only by
//! clearing it (`lease_token = NULL`) or by succeeding, which is final (the token stays as the
//! record of the attempt that succeeded), so a stale worker (paused, partitioned, expired,
//! cancelled, finished) matches no row: its renew, complete and fail change nothing and answer
//! NULL/false. An expired lease is never revived, even before anyone reclaims it.
//!
//! The fence is a predicate of each UPDATE itself (and of the locking SELECT before a fail), not
//! a check before it: under READ COMMITTED an UPDATE that waited for a concurrent reclaim,
//! cancel or finish re-evaluates it on the new row version. Each statement that applies it says
//! so with `-- the fence (lease.rs)`: renew and renew_batch here, `complete` and
//! `complete_batch` (and compat's 0.1.0 forms), `fail`, `fail_batch` and `snooze` with their
//! locking reads, `hand_back`, `step`'s locking read and `progress`. The registry's tests (src/statements.rs) hold each to the predicate, whole;
//! `tests::every_fenced_call_refuses_every_stale_lease` proves they agree.
use pgrx::prelude::*;

use crate::core::access;
use crate::core::args;
use crate::core::clock;
use crate::core::connect::{self, JOB_PATH};
use crate::core::datum::{IdArray, QueuePrivilege, UuidArray};
use crate::core::spi::{
    self, INT8, INT8_ARRAY, INTERVAL, Statement, TIMESTAMPTZ, UUID, UUID_ARRAY,
};

pub(crate) const RENEW: Statement = Statement {
    name: "renew",
    sql: "WITH renewed AS (
              UPDATE leaseq.jobs AS job
                 SET lease_expires_at = $3 + coalesce(
                         $4, (SELECT queue.lease FROM leaseq.queues AS queue
                               WHERE queue.name = job.queue)),
                     updated_at = $3
               WHERE job.id = $1
                 -- the fence (lease.rs)
                 AND job.lease_token = $2 AND job.status = 'running' AND job.lease_expires_at > $3
              RETURNING job.id, job.queue, job.lease_token, job.lease_expires_at),
          -- a lease row at the new end (sql/schema.sql): it covers a lease made shorter
          leased AS (
              INSERT INTO leaseq.leases (queue, expires_at, token, job_ids)
              SELECT renewed.queue, renewed.lease_expires_at, renewed.lease_token,
                     ARRAY[renewed.id]
                FROM renewed)
          SELECT renewed.lease_expires_at FROM renewed",
    params: &[INT8, UUID, TIMESTAMPTZ, INTERVAL],
};

/// Extends the lease of a running job to `lease` (NULL: the queue's) from now, and returns the
/// new expiry — or NULL, changing nothing, when `lease_token` is not the job's current token,
/// the job is not running, or the lease has already expired.
///
/// Errors: `22004` NULL job_id/lease_token, `22023` invalid lease, `0A000` outside READ COMMITTED.
#[pg_extern]
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
    let now = clock::now();
    access::require_jobs(F, &[job_id], QueuePrivilege::Work);
    connect::connect(&JOB_PATH, |client| {
        spi::run(
            client,
            &RENEW,
            &[job_id.into(), lease_token.into(), now.into(), lease.into()],
        )
        .first(|row| row.required(1))
    })
}

/// `RENEW` for many jobs in one statement: `$1` ids, `$2` tokens, `$3` now, `$4` the lease (NULL:
/// each job's queue's). One row per renewed job: its input position and new expiry. The join is
/// a lookup by key (`jobs_pkey`), so the cost is linear in the batch.
pub(crate) const RENEW_BATCH: Statement = Statement {
    name: "renew_batch",
    sql: "WITH given AS (
              SELECT * FROM unnest($1::bigint[], $2::uuid[])
                            WITH ORDINALITY AS given (id, token, ord)),
          renewed AS (
              UPDATE leaseq.jobs AS job
                 SET lease_expires_at = $3 + coalesce(
                         $4, (SELECT queue.lease FROM leaseq.queues AS queue
                               WHERE queue.name = job.queue)),
                     updated_at = $3
                FROM given
               WHERE job.id = given.id
                 -- the fence (lease.rs)
                 AND job.lease_token = given.token AND job.status = 'running'
                 AND job.lease_expires_at > $3
              RETURNING given.ord, job.id, job.queue, job.lease_token, job.lease_expires_at),
          -- one lease row per queue, token and new end (sql/schema.sql)
          leased AS (
              INSERT INTO leaseq.leases (queue, expires_at, token, job_ids)
              SELECT renewed.queue, renewed.lease_expires_at, renewed.lease_token,
                     array_agg(renewed.id)
                FROM renewed
               GROUP BY renewed.queue, renewed.lease_expires_at, renewed.lease_token)
          SELECT renewed.ord, renewed.lease_expires_at FROM renewed",
    params: &[INT8_ARRAY, UUID_ARRAY, TIMESTAMPTZ, INTERVAL],
};

/// `queue_renew` for many jobs at once, in one statement — what a worker holding many jobs sends
/// per heartbeat: one new expiry per job, in input order, or NULL where that job's lease was
/// refused (each with the meaning and the fence of `queue_renew`).
///
/// Errors: `22004` NULL job_ids/lease_tokens or a NULL element of them (named by position),
/// `22023` arrays of different lengths, more than 10000 jobs, a job id twice, or an invalid
/// lease; `0A000` outside READ COMMITTED.
#[pg_extern]
pub fn queue_renew_batch(
    job_ids: Option<IdArray>,
    lease_tokens: Option<UuidArray>,
    lease: default!(Option<Interval>, "NULL"),
) -> SetOfIterator<'static, Option<TimestampWithTimeZone>> {
    const F: &str = "queue_renew_batch";
    let (ids, tokens) = args::job_batch(F, job_ids, lease_tokens);
    let tokens = tokens.per_job(ids.len());
    if let Some(lease) = lease {
        args::lease(F, lease);
    }
    args::read_committed(F);
    if ids.is_empty() {
        return SetOfIterator::new(Vec::new());
    }
    let now = clock::now();
    let n = ids.len();
    access::require_jobs(F, &ids, QueuePrivilege::Work);
    let expiries = connect::connect(&JOB_PATH, |client| {
        let renewed = spi::run(
            client,
            &RENEW_BATCH,
            &[ids.into(), tokens.into(), now.into(), lease.into()],
        );
        let mut expiries = vec![None; n];
        renewed.map(|row| {
            let position: i64 = row.required(1);
            expiries[position as usize - 1] = Some(row.required(2));
        });
        expiries
    });
    SetOfIterator::new(expiries)
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use pgrx::prelude::*;

    /// Everything leaseq stores, as one text: a fenced call must leave it as it was.
    const FINGERPRINT: &str = "
        SELECT md5(concat_ws('|',
                   (SELECT string_agg(j::text, ',' ORDER BY id) FROM leaseq.jobs j),
                   (SELECT string_agg(a::text, ',' ORDER BY job_id, attempt_no)
                      FROM leaseq.closed_attempts a),
                   (SELECT string_agg(s::text, ',' ORDER BY job_id, name) FROM leaseq.job_steps s)))";

    /// Each fenced function, called with `$1` job id and `$2` lease token: whether it acted.
    const FENCED_CALLS: &[(&str, &str)] = &[
        (
            "queue_renew",
            "SELECT leaseq.queue_renew($1, $2) IS NOT NULL",
        ),
        (
            "queue_renew_batch",
            "SELECT bool_or(e IS NOT NULL) FROM leaseq.queue_renew_batch(ARRAY[$1], ARRAY[$2]) AS e",
        ),
        ("queue_complete", "SELECT leaseq.queue_complete($1, $2)"),
        (
            "queue_complete_batch",
            "SELECT bool_or(done) FROM leaseq.queue_complete_batch(ARRAY[$1], ARRAY[$2]) AS done",
        ),
        (
            "queue_complete_batch, token per job",
            "SELECT bool_or(done)
               FROM leaseq.queue_complete_batch(ARRAY[$1, -1], ARRAY[$2, $2]) AS done",
        ),
        ("queue_fail", "SELECT leaseq.queue_fail($1, $2) IS NOT NULL"),
        (
            "queue_fail_batch",
            "SELECT bool_or(s IS NOT NULL) FROM leaseq.queue_fail_batch(ARRAY[$1], ARRAY[$2]) AS s",
        ),
        (
            "queue_snooze",
            "SELECT leaseq.queue_snooze($1, $2, '1 hour') IS NOT NULL",
        ),
        (
            "queue_hand_back",
            "SELECT bool_or(h) FROM leaseq.queue_hand_back(ARRAY[$1], ARRAY[$2]) AS h",
        ),
        (
            "queue_step",
            "SELECT leaseq.queue_step($1, $2, 'charge', '{\"charge\": 1}')",
        ),
        (
            "queue_progress",
            "SELECT leaseq.queue_progress($1, $2, '{\"done\": 0.5}')",
        ),
    ];

    /// A running job of a new queue `queue`, put in the situation `stale` names, and the token
    /// to try: the claim's own, except for `random token`. Every situation but `current` must be
    /// refused by every fenced call.
    fn job_in(queue: &str, stale: &str) -> (i64, pgrx::Uuid) {
        // Its claims must reclaim what expired: a probe slower than leaseq.claim_slow_head on a
        // loaded machine would hold the next ones off for the rescan interval (CI did).
        Spi::run("SET LOCAL leaseq.claim_rescan_interval = 0").unwrap();
        Spi::run_with_args(
            "SELECT leaseq.queue_create($1, lease => '1 hour', backoff_base => '1 hour',
                                        backoff_cap => '1 hour')",
            &[queue.into()],
        )
        .unwrap();
        let (id, token) = Spi::get_two_with_args::<i64, pgrx::Uuid>(
            "WITH e AS (SELECT leaseq.queue_enqueue($1, '{}') AS id)
             SELECT job_id, lease_token FROM e, leaseq.queue_claim($1, 'w')",
            &[queue.into()],
        )
        .unwrap();
        let (id, token) = (id.unwrap(), token.unwrap());
        // A lease row at the new end keeps every running job covered (sql/schema.sql).
        let expire = "WITH ended AS (
                          UPDATE leaseq.jobs SET lease_expires_at = clock_timestamp() - interval '1 ms'
                           WHERE id = $1
                          RETURNING queue, lease_expires_at, lease_token, id)
                      INSERT INTO leaseq.leases (queue, expires_at, token, job_ids)
                      SELECT queue, lease_expires_at, lease_token, ARRAY[id] FROM ended";
        let steps: &[&str] = match stale {
            "current" => &[],
            "random token" => return (id, pgrx::Uuid::from_bytes([7; 16])),
            // The lease ran out; nobody has reclaimed the job yet.
            "expired lease" => &[expire],
            "cancelled" => &["SELECT leaseq.queue_cancel($1)"],
            "completed" => &["SELECT leaseq.queue_complete($1, $2)"],
            "failed and pending" => &["SELECT leaseq.queue_fail($1, $2)"],
            "snoozed" => &["SELECT leaseq.queue_snooze($1, $2, '1 hour')"],
            "handed back" => &["SELECT count(*) FROM leaseq.queue_hand_back(ARRAY[$1], ARRAY[$2])"],
            // Reclaimed and claimed again: the token is a previous generation's.
            "reclaimed and running again" => &[
                expire,
                "SELECT count(*) FROM leaseq.queue_claim($3, 'reclaimer')",
                "UPDATE leaseq.jobs SET run_at = clock_timestamp() WHERE id = $1",
                "SELECT count(*) FROM leaseq.queue_claim($3, 'new owner')",
            ],
            other => panic!("unknown situation {other}"),
        };
        for step in steps {
            Spi::run_with_args(step, &[id.into(), token.into(), queue.into()]).unwrap();
        }
        (id, token)
    }

    #[pg_test]
    fn every_fenced_call_refuses_every_stale_lease() {
        let situations = [
            "random token",
            "expired lease",
            "cancelled",
            "completed",
            "failed and pending",
            "snoozed",
            "handed back",
            "reclaimed and running again",
        ];
        for (s, stale) in situations.iter().enumerate() {
            for (f, (function, call)) in FENCED_CALLS.iter().enumerate() {
                let (id, token) = job_in(&format!("fence_{s}_{f}"), stale);
                let before = Spi::get_one::<String>(FINGERPRINT).unwrap();
                let acted = Spi::get_one_with_args::<bool>(call, &[id.into(), token.into()]);
                assert_eq!(acted, Ok(Some(false)), "{function} with a lease {stale}");
                let after = Spi::get_one::<String>(FINGERPRINT).unwrap();
                assert_eq!(
                    before, after,
                    "{function} with a lease {stale} changed something"
                );
            }
        }
    }

    #[pg_test]
    fn every_fenced_call_acts_on_the_current_lease() {
        for (f, (function, call)) in FENCED_CALLS.iter().enumerate() {
            let (id, token) = job_in(&format!("fence_current_{f}"), "current");
            let acted = Spi::get_one_with_args::<bool>(call, &[id.into(), token.into()]);
            assert_eq!(acted, Ok(Some(true)), "{function} with the current lease");
        }
    }
}
