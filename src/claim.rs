//! Claim: `pending` (due) → `running`, after reclaiming expired leases.
//!
//! 1. Reclaim: this queue's running jobs whose lease has expired are locked (`SKIP LOCKED`: a
//!    concurrent claimer reclaims the others), their open attempt closes `lease_expired` at the
//!    instant the lease ended (written to history), and each is rescheduled by the backoff
//!    policy — or goes `dead` when its budget is spent. A crashed worker thus costs one lease
//!    interval and one attempt.
//! 2. Claim: up to `batch` due pending jobs, highest priority, then oldest `run_at`, then id,
//!    locked with `FOR UPDATE SKIP LOCKED` so that concurrent claimers take disjoint jobs without
//!    waiting. Each gets a fresh random lease token and `attempts + 1`; the open attempt lives
//!    on the job's row (token, worker, `started_at`) until it closes.
//! 3. Numbering: each claimed job's attempt is `MAX(attempt_no) + 1` over all of the job's
//!    closed attempts (redrive included), so attempt numbers only ever grow: the fencing
//!    generation to hand to downstream systems. Closing writes the attempt with the same
//!    number: only the holder of the job's row lock writes its history, and the job is ours.
//!
//! Each step is its own statement, and that is load-bearing: under READ COMMITTED each
//! statement takes a fresh snapshot, so step 3 sees every attempt closed before the row lock of
//! step 2 was granted. Computing the MAX in step 2 itself could read an older snapshot (a retry
//! closed just before our lock) and number two attempts alike.
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

use crate::args;
use crate::backoff;
use crate::datum::Jsonb;
use crate::queue::{self, Queue};
use crate::spi::{
    self, BOOL_ARRAY, INT4, INT8_ARRAY, INTERVAL, Statement, TEXT, TIMESTAMPTZ, TIMESTAMPTZ_ARRAY,
    UUID_ARRAY,
};

/// The most expired leases one claim call reclaims; concurrent claimers share the rest.
const RECLAIM_LIMIT: i32 = 1000;

/// The queue's settings, and its expired leases locked for step 1 (`SKIP LOCKED`: a concurrent
/// claimer reclaims the others) — one statement, as both are needed on every claim. No row: no
/// such queue; one row with a NULL id: nothing to reclaim.
const SETTINGS_AND_EXPIRED: Statement = Statement {
    sql: "SELECT q.lease, q.backoff_base, q.backoff_cap,
                 e.id, e.attempts, e.max_attempts, e.lease_expires_at, e.lease_token
            FROM leaseq.queues q
            LEFT JOIN LATERAL (
                SELECT id, attempts, max_attempts, lease_expires_at, lease_token
                  FROM leaseq.jobs
                 WHERE queue = q.name AND status = 'running' AND lease_expires_at <= $2
                 ORDER BY lease_expires_at
                 LIMIT $3
                   FOR UPDATE SKIP LOCKED) e ON true
           WHERE q.name = $1",
    params: &[TEXT, TIMESTAMPTZ, INT4],
};

/// Applies step 1 to the rows `SETTINGS_AND_EXPIRED` locked: `$1` ids, `$2` whether each goes dead,
/// `$3` its next `run_at`, `$4` when its lease expired, `$6` its lease token; `$5` now.
const RECLAIM: Statement = Statement {
    sql: concat!(
        "WITH r AS (
              SELECT * FROM unnest($1::bigint[], $2::boolean[], $3::timestamptz[],
                                   $4::timestamptz[], $6::uuid[])
                            AS r (id, dead, run_at, expired_at, token)),
          j AS (
              UPDATE leaseq.jobs j
                 SET ",
        retry_or_bury!(
            dead: "r.dead",
            run_at: "r.run_at",
            error: "jsonb_build_object('error', 'lease_expired', 'lease_expires_at', r.expired_at,
                                       'worker', j.worker)",
            now: "$5"
        ),
        "
                FROM r
               WHERE j.id = r.id AND j.status = 'running' AND j.lease_expires_at <= $5
              RETURNING j.id, j.worker, j.started_at, j.last_error, r.token, r.expired_at),
          a AS (",
        close_attempt!(from: "j", token: "j.token", ended_at: "j.expired_at",
                       outcome: "'lease_expired'", error: "j.last_error"),
        ")
          SELECT (SELECT count(*) FROM j), (SELECT count(*) FROM a)"
    ),
    params: &[
        INT8_ARRAY,
        BOOL_ARRAY,
        TIMESTAMPTZ_ARRAY,
        TIMESTAMPTZ_ARRAY,
        TIMESTAMPTZ,
        UUID_ARRAY,
    ],
};

/// Step 2. The locking SELECT sits in a CTE, never in `WHERE id IN (SELECT … LIMIT n)`: the
/// planner may re-run such a subquery per outer row and claim far more than `n` jobs. The
/// UPDATE repeats the state and due-time conditions, so a job finished by another session
/// between the scan and the lock is not flipped back to running.
const CLAIM: Statement = Statement {
    sql: "WITH c AS (
              SELECT id FROM leaseq.jobs
               WHERE queue = $1 AND status = 'pending' AND run_at <= $2
               ORDER BY priority DESC, run_at, id
               LIMIT $3
                 FOR UPDATE SKIP LOCKED)
          UPDATE leaseq.jobs j
             SET status = 'running',
                 attempts = j.attempts + 1,
                 lease_token = gen_random_uuid(),
                 lease_expires_at = $2 + $4,
                 worker = $5,
                 started_at = $2,
                 updated_at = $2
            FROM c
           WHERE j.id = c.id AND j.status = 'pending' AND j.run_at <= $2
          RETURNING j.id, j.lease_token, j.payload, j.lease_expires_at, j.priority, j.run_at,
                    j.created_at",
    params: &[TEXT, TIMESTAMPTZ, INT4, INTERVAL, TEXT],
};

/// Step 3, in its own statement (see the module comment): the claimed jobs' attempt numbers, in
/// the order of `$1`.
const ATTEMPT_NOS: Statement = Statement {
    sql: "SELECT coalesce((SELECT max(c.attempt_no) FROM leaseq.closed_attempts c
                            WHERE c.job_id = j.id), 0) + 1
            FROM unnest($1::bigint[]) WITH ORDINALITY AS j (id, ord)
           ORDER BY j.ord",
    params: &[INT8_ARRAY],
};

/// Claims up to `batch` due jobs of `queue` for `worker`, after reclaiming the queue's expired
/// leases, and returns them in claim order (priority, then `run_at`, then id).
///
/// Each row carries the `lease_token` to pass to renew/complete/fail, and the `attempt_no`:
/// strictly increasing per job for ever, it is the fencing generation to give to downstream
/// systems. The lease lasts `lease` (NULL: the queue's) from now, on the server's clock.
///
/// Errors: `22004` NULL queue/worker/batch, `22023` batch outside 1..=10000 or invalid lease or
/// worker, `42704` unknown queue, `0A000` outside READ COMMITTED.
#[pg_extern]
pub fn queue_claim(
    queue: Option<&str>,
    worker: Option<&str>,
    batch: default!(Option<i32>, 1),
    lease: default!(Option<Interval>, "NULL"),
) -> TableIterator<
    'static,
    (
        name!(job_id, i64),
        name!(lease_token, pgrx::Uuid),
        name!(attempt_no, i32),
        name!(payload, Jsonb),
        name!(lease_expires_at, TimestampWithTimeZone),
        name!(priority, i32),
        name!(enqueued_at, TimestampWithTimeZone),
    ),
> {
    const F: &str = "queue_claim";
    let queue = args::queue_name(F, queue);
    let worker = args::required(F, "worker", worker);
    args::short_text(F, "worker", worker);
    let batch = args::required(F, "batch", batch);
    if !(1..=args::MAX_BATCH).contains(&batch) {
        args_batch_error(F);
    }
    if let Some(lease) = lease {
        args::lease(F, lease);
    }
    args::read_committed(F);
    let now = spi::now();

    let rows = spi::connect_with_settings(|client| {
        let settings = reclaim_expired(client, queue, now);
        let lease = lease.unwrap_or(settings.lease);
        claim(client, queue, worker, batch, lease, now)
    });
    TableIterator::new(rows)
}

fn args_batch_error(function: &str) -> ! {
    crate::errors::invalid_argument(function, "batch", "must be between 1 and 10000")
}

/// Step 1; returns the queue's settings (`42704` when there is no such queue).
fn reclaim_expired(client: &mut SpiClient<'_>, queue: &str, now: TimestampWithTimeZone) -> Queue {
    let rows = spi::run(
        client,
        &SETTINGS_AND_EXPIRED,
        &[queue.into(), now.into(), RECLAIM_LIMIT.into()],
    );
    if rows.is_empty() {
        crate::errors::unknown_queue("queue_claim", queue);
    }
    let mut rng = rand::rng();
    let mut settings = None;
    let (mut ids, mut dead, mut run_at, mut expired_at, mut tokens) =
        (vec![], vec![], vec![], vec![], vec![]);
    for row in rows {
        let settings = settings.get_or_insert_with(|| {
            let nn = |n| {
                row.get::<Interval>(n)
                    .ok()
                    .flatten()
                    .expect("queue settings are NOT NULL")
            };
            Queue {
                lease: nn(1),
                backoff: queue::backoff_policy(nn(2), nn(3)),
            }
        });
        let Some(id) = row.get::<i64>(4).ok().flatten() else {
            continue; // the queue's row alone: nothing expired
        };
        let attempts: i32 = row.get(5).ok().flatten().expect("attempts is NOT NULL");
        let max_attempts: i32 = row.get(6).ok().flatten().expect("max_attempts is NOT NULL");
        ids.push(id);
        dead.push(attempts >= max_attempts);
        let delay = backoff::retry_delay(attempts, settings.backoff, &mut rng);
        run_at.push(spi::plus_micros(now, delay));
        expired_at.push(
            row.get::<TimestampWithTimeZone>(7)
                .ok()
                .flatten()
                .expect("running jobs have a lease"),
        );
        tokens.push(
            row.get::<pgrx::Uuid>(8)
                .ok()
                .flatten()
                .expect("running jobs have a lease"),
        );
    }
    let settings = settings.expect("at least the queue's row");
    if ids.is_empty() {
        return settings;
    }
    let reclaimed = ids.len();
    let counts = spi::run(
        client,
        &RECLAIM,
        &[
            ids.into(),
            dead.into(),
            run_at.into(),
            expired_at.into(),
            now.into(),
            tokens.into(),
        ],
    )
    .first();
    let jobs: i64 = counts.get(1).ok().flatten().unwrap_or(0);
    let attempts: i64 = counts.get(2).ok().flatten().unwrap_or(0);
    if jobs as usize != reclaimed || attempts != jobs {
        crate::errors::internal(
            "queue_claim",
            "a reclaimed job's attempt was not closed once",
        );
    }
    settings
}

/// Steps 2 and 3.
fn claim(
    client: &mut SpiClient<'_>,
    queue: &str,
    worker: &str,
    batch: i32,
    lease: Interval,
    now: TimestampWithTimeZone,
) -> Vec<(
    i64,
    pgrx::Uuid,
    i32,
    Jsonb,
    TimestampWithTimeZone,
    i32,
    TimestampWithTimeZone,
)> {
    let claimed = spi::run(
        client,
        &CLAIM,
        &[
            queue.into(),
            now.into(),
            batch.into(),
            lease.into(),
            worker.into(),
        ],
    );
    if claimed.is_empty() {
        return Vec::new();
    }
    struct Claimed {
        id: i64,
        token: pgrx::Uuid,
        payload: Jsonb,
        lease_expires_at: TimestampWithTimeZone,
        priority: i32,
        run_at: TimestampWithTimeZone,
        enqueued_at: TimestampWithTimeZone,
    }
    let not_null = "claimed job columns are NOT NULL";
    let mut jobs: Vec<Claimed> = claimed
        .map(|row| Claimed {
            id: row.get(1).ok().flatten().expect(not_null),
            token: row.get(2).ok().flatten().expect(not_null),
            payload: row.get(3).ok().flatten().expect(not_null),
            lease_expires_at: row.get(4).ok().flatten().expect(not_null),
            priority: row.get(5).ok().flatten().expect(not_null),
            run_at: row.get(6).ok().flatten().expect(not_null),
            enqueued_at: row.get(7).ok().flatten().expect(not_null),
        })
        .collect();
    // RETURNING order is unspecified: restore claim order.
    jobs.sort_by(|a, b| {
        b.priority
            .cmp(&a.priority)
            .then(a.run_at.cmp(&b.run_at))
            .then(a.id.cmp(&b.id))
    });

    let ids: Vec<i64> = jobs.iter().map(|j| j.id).collect();
    let attempt_nos = spi::run(client, &ATTEMPT_NOS, &[ids.into()]);
    jobs.into_iter()
        .zip(attempt_nos)
        .map(|(j, row)| {
            let attempt_no: i32 = row.get(1).ok().flatten().expect(not_null);
            (
                j.id,
                j.token,
                attempt_no,
                j.payload,
                j.lease_expires_at,
                j.priority,
                j.enqueued_at,
            )
        })
        .collect()
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use pgrx::prelude::*;

    #[pg_test]
    fn claim_takes_exactly_batch_jobs_even_with_stale_statistics() {
        // No ANALYZE after the insert: the planner's estimates are wrong, which is when a
        // `WHERE id IN (SELECT … LIMIT n)` claim re-runs its subquery and takes too many.
        Spi::run("SELECT leaseq.queue_create('claim_exact')").unwrap();
        Spi::run(
            "SELECT leaseq.queue_enqueue_batch('claim_exact',
                 ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 200)))",
        )
        .unwrap();
        let claimed =
            Spi::get_one::<i64>("SELECT count(*) FROM leaseq.queue_claim('claim_exact', 'w', 2)");
        assert_eq!(claimed, Ok(Some(2)));
        let running = Spi::get_one::<i64>(
            "SELECT count(*) FROM leaseq.jobs WHERE queue = 'claim_exact' AND status = 'running'",
        );
        assert_eq!(running, Ok(Some(2)));
    }

    #[pg_test]
    fn claim_on_an_empty_queue_returns_no_rows() {
        Spi::run("SELECT leaseq.queue_create('claim_empty')").unwrap();
        let claimed =
            Spi::get_one::<i64>("SELECT count(*) FROM leaseq.queue_claim('claim_empty', 'w', 100)");
        assert_eq!(claimed, Ok(Some(0)));
    }

    #[pg_test]
    fn claim_uses_the_given_lease_over_the_queues() {
        Spi::run("SELECT leaseq.queue_create('claim_lease', lease => '1 minute')").unwrap();
        Spi::run("SELECT leaseq.queue_enqueue('claim_lease', '{}')").unwrap();
        let long = Spi::get_one::<bool>(
            "SELECT lease_expires_at > clock_timestamp() + interval '59 minutes'
               FROM leaseq.queue_claim('claim_lease', 'w', lease => '1 hour')",
        );
        assert_eq!(long, Ok(Some(true)));
    }
}
