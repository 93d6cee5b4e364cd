//! The checks, each a count read from the last primary after the clients' logs were loaded into
//! it (`faults.ops`). A check that must be zero fails the run otherwise; the others are figures.
//! Every scenario runs the common ones (`figures`, `MUST_BE_ZERO`, `workers`); `failover` and
//! `partition` add their own.
use leaseq_client::Client;

use crate::cluster::Error;
use crate::load::Seen;

pub struct Check {
    pub name: &'static str,
    pub value: i64,
    pub must_be_zero: bool,
}

/// Jobs of the run (both queues: main.rs TX_QUEUE, CMD_QUEUE), with the op each was enqueued for.
const JOBS: &str = "(SELECT j.*, j.payload->>'op' AS op FROM leaseq.jobs j
                      WHERE j.queue IN ('faults_tx', 'faults_cmd'))";

/// Counts that must be zero in every scenario, with what each proves.
const MUST_BE_ZERO: &[(&str, &str)] = &[
    (
        "acknowledged enqueues lost (business row or job missing)",
        "SELECT count(*) FROM faults.ops o
          WHERE o.kind = 'enqueue' AND o.outcome = 'ok'
            AND NOT (EXISTS (SELECT FROM faults.orders r WHERE r.op = o.op)
                     AND EXISTS (SELECT FROM {JOBS} j WHERE j.id = o.job_id AND j.op = o.op))",
    ),
    (
        "acknowledged job ids now naming another job",
        "SELECT count(*) FROM faults.ops o JOIN {JOBS} j ON j.id = o.job_id
          WHERE o.kind = 'enqueue' AND o.outcome = 'ok' AND j.op IS DISTINCT FROM o.op",
    ),
    (
        "enqueues that failed before their commit, found committed",
        "SELECT count(*) FROM faults.ops o
          WHERE o.kind = 'enqueue' AND o.outcome = 'error'
            AND (EXISTS (SELECT FROM faults.orders r WHERE r.op = o.op)
                 OR EXISTS (SELECT FROM {JOBS} j WHERE j.op = o.op))",
    ),
    (
        "business rows and jobs apart (one committed without the other)",
        "SELECT (SELECT count(*) FROM faults.orders r WHERE NOT EXISTS (SELECT FROM {JOBS} j WHERE j.op = r.op))
              + (SELECT count(*) FROM {JOBS} j WHERE NOT EXISTS (SELECT FROM faults.orders r WHERE r.op = j.op))",
    ),
    (
        "jobs not succeeded once settled",
        "SELECT count(*) FROM {JOBS} j WHERE j.status <> 'succeeded'",
    ),
    (
        "double effects (a transactional handler's effect committed twice)",
        "SELECT count(*) FROM (SELECT e.job_id FROM faults.effects e GROUP BY e.job_id
                                HAVING count(*) > 1) doubled",
    ),
    (
        "succeeded jobs without the effect of their succeeding attempt",
        // A job its worker completed for the handler (load.rs, Handler::Mixed) has its effect in
        // the result the completion stored.
        "SELECT count(*) FROM {JOBS} j JOIN leaseq.attempts a
             ON a.job_id = j.id AND a.outcome = 'succeeded'
          WHERE NOT EXISTS (SELECT FROM faults.effects e
                             WHERE e.job_id = j.id AND e.attempt_no = a.attempt_no)
            AND NOT EXISTS (SELECT FROM faults.command_effects e
                             WHERE e.job_id = j.id AND e.attempt_no = a.attempt_no)
            AND (j.result->>'attempt_no') IS DISTINCT FROM a.attempt_no::text",
    ),
    (
        "acknowledged finishes lost (the commit answered, the attempt not succeeded)",
        "SELECT count(*) FROM faults.ops o
          WHERE o.kind = 'finish' AND o.outcome = 'ok'
            AND NOT EXISTS (SELECT FROM leaseq.attempts a
                             WHERE a.job_id = o.job_id AND a.lease_token = o.lease_token
                               AND a.outcome = 'succeeded')",
    ),
    (
        "stale finalizations (success not on the last attempt, or twice)",
        "SELECT count(*) FROM {JOBS} j WHERE
            (j.status = 'succeeded') <> EXISTS (SELECT FROM leaseq.attempts a WHERE a.job_id = j.id AND a.outcome = 'succeeded')
         OR (SELECT count(*) FROM leaseq.attempts a WHERE a.job_id = j.id AND a.outcome = 'succeeded') > 1
         OR (j.status = 'succeeded' AND (SELECT max(attempt_no) FROM leaseq.attempts a WHERE a.job_id = j.id)
                <> (SELECT attempt_no FROM leaseq.attempts a WHERE a.job_id = j.id AND a.outcome = 'succeeded'))",
    ),
    (
        "attempt numbers not unique and gap-free from 1",
        "SELECT count(*) FROM (SELECT a.job_id FROM leaseq.attempts a JOIN {JOBS} j ON j.id = a.job_id
                                GROUP BY a.job_id
                               HAVING min(a.attempt_no) <> 1 OR max(a.attempt_no) <> count(*)
                                   OR count(DISTINCT a.attempt_no) <> count(*)) g",
    ),
    (
        "overlapping live leases on one job",
        "SELECT count(*) FROM (
             SELECT a.started_at < max(coalesce(a.ended_at, 'infinity')) OVER (
                        PARTITION BY a.job_id ORDER BY a.attempt_no
                        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS overlaps
               FROM leaseq.attempts a JOIN {JOBS} j ON j.id = a.job_id) w
          WHERE w.overlaps",
    ),
    (
        "job rows breaking a row invariant (pg_test/invariants.sql)",
        "SELECT count(*) FROM ({INVARIANTS}) broken WHERE broken.queue IN ('faults_tx', 'faults_cmd')",
    ),
];

/// The failover scenario's: what the worker paused past its lease did afterwards.
const PAUSED_MUST_BE_ZERO: &[(&str, &str)] = &[
    (
        "paused worker's leases finalized by it after the failover",
        "SELECT count(*) FROM faults.paused p JOIN leaseq.attempts a
             ON a.job_id = p.job_id AND a.lease_token = p.lease_token
          WHERE a.outcome <> 'lease_expired'",
    ),
    (
        "paused worker's effects committed under the leases it lost",
        "SELECT count(*) FROM faults.paused p JOIN leaseq.attempts a
             ON a.job_id = p.job_id AND a.lease_token = p.lease_token
           JOIN faults.effects e ON e.job_id = a.job_id AND e.attempt_no = a.attempt_no",
    ),
];

/// Each library attempt with what its handler logged (load.rs): when it last ended a finish or
/// returned an outcome (`ended_at`: its end), and when its stop token fired while it ran.
const HANDLED: &str = "(SELECT o.job_id, o.lease_token,
                               max(o.at) FILTER (WHERE o.kind IN ('finish', 'returned')) AS ended_at,
                               min(o.at) FILTER (WHERE o.kind = 'stop') AS stopped_at
                          FROM faults.ops o WHERE o.kind IN ('finish', 'returned', 'stop')
                         GROUP BY o.job_id, o.lease_token)";

/// The library queue's lease.
const TX_LEASE: &str =
    "(SELECT s.lease FROM leaseq.queue_settings() s WHERE s.queue = 'faults_tx')";

/// The partition scenario's (partition.rs): faults `short partition`, `long partition`,
/// `lossy link`, each with its window (`began_at`, healed `at`).
const PARTITION_MUST_BE_ZERO: &[(&str, &str)] = &[
    (
        "library leases lost to a short partition",
        // A lease ends (ended_at, on a lease_expired attempt) a lease after it was last granted;
        // one lost to a partition ended after it began and was last granted before it healed.
        // A lease lost to the next fault was granted after this one healed: renewals come every
        // two thirds of a lease at most, and the next fault begins more than a lease later.
        "SELECT count(*) FROM leaseq.attempts a JOIN {JOBS} j ON j.id = a.job_id
           JOIN faults.faults f ON f.kind = 'short partition'
          WHERE j.queue = 'faults_tx' AND a.outcome = 'lease_expired'
            AND a.ended_at > f.began_at AND a.ended_at - {TX_LEASE} < f.at",
    ),
    (
        "lost leases whose running handler was not stopped before the lease's end",
        // ended_at of a lease_expired attempt is the lease's end on the server's clock; the
        // handler's times are the wall clock of the same machine.
        "SELECT count(*) FROM leaseq.attempts a JOIN {JOBS} j ON j.id = a.job_id
           JOIN {HANDLED} h ON h.job_id = a.job_id AND h.lease_token = a.lease_token
          WHERE a.outcome = 'lease_expired'
            AND (h.ended_at IS NULL OR h.ended_at >= a.ended_at)
            AND (h.stopped_at IS NULL OR h.stopped_at >= a.ended_at)",
    ),
    (
        "jobs the worker completed after it had stopped their handler",
        // The handler returned its outcome for the worker to send (`returned`), its stop token
        // had fired while it ran, and the attempt succeeded: the worker sent it regardless.
        "SELECT count(*) FROM {HANDLED} h
           JOIN leaseq.attempts a ON a.job_id = h.job_id AND a.lease_token = h.lease_token
          WHERE h.stopped_at IS NOT NULL AND a.outcome = 'succeeded'
            AND EXISTS (SELECT FROM faults.ops r WHERE r.kind = 'returned'
                           AND r.job_id = h.job_id AND r.lease_token = h.lease_token)",
    ),
];

/// The partition scenario's figures.
const PARTITION_FIGURES: &[(&str, &str)] = &[
    (
        "attempts that ran through a short partition and succeeded",
        "SELECT count(*) FROM leaseq.attempts a JOIN {JOBS} j ON j.id = a.job_id
           JOIN faults.faults f ON f.kind = 'short partition'
          WHERE a.outcome = 'succeeded' AND a.started_at < f.began_at AND a.ended_at > f.at",
    ),
    (
        "  of them, running longer than two thirds of a lease (renewed)",
        "SELECT count(*) FROM leaseq.attempts a JOIN {JOBS} j ON j.id = a.job_id
           JOIN faults.faults f ON f.kind = 'short partition'
          WHERE a.outcome = 'succeeded' AND a.started_at < f.began_at AND a.ended_at > f.at
            AND a.ended_at - a.started_at > {TX_LEASE} * 2 / 3",
    ),
    (
        "library leases lost in a long partition",
        "SELECT count(*) FROM leaseq.attempts a JOIN {JOBS} j ON j.id = a.job_id
           JOIN faults.faults f ON f.kind = 'long partition'
          WHERE j.queue = 'faults_tx' AND a.outcome = 'lease_expired'
            AND a.ended_at > f.began_at AND a.ended_at - {TX_LEASE} < f.at",
    ),
    (
        "  their jobs finished by the worker never cut off",
        "SELECT count(DISTINCT a.job_id) FROM leaseq.attempts a JOIN {JOBS} j ON j.id = a.job_id
           JOIN faults.faults f ON f.kind = 'long partition'
           JOIN leaseq.attempts done ON done.job_id = a.job_id AND done.outcome = 'succeeded'
          WHERE j.queue = 'faults_tx' AND a.outcome = 'lease_expired'
            AND a.ended_at > f.began_at AND a.ended_at - {TX_LEASE} < f.at
            AND done.worker = 'c1'",
    ),
    (
        "library leases lost through the lossy link",
        "SELECT count(*) FROM leaseq.attempts a JOIN {JOBS} j ON j.id = a.job_id
           JOIN faults.faults f ON f.kind = 'lossy link'
          WHERE j.queue = 'faults_tx' AND a.outcome = 'lease_expired'
            AND a.ended_at > f.began_at AND a.ended_at - {TX_LEASE} < f.at",
    ),
    (
        "handlers whose stop token fired while they ran",
        "SELECT count(*) FROM {HANDLED} h WHERE h.stopped_at IS NOT NULL",
    ),
    (
        "least lead of a stop before its lease's end on the server (ms)",
        "SELECT coalesce(min(extract(epoch FROM a.ended_at - h.stopped_at) * 1000), 0)::bigint
           FROM {HANDLED} h JOIN leaseq.attempts a
             ON a.job_id = h.job_id AND a.lease_token = h.lease_token
          WHERE a.outcome = 'lease_expired' AND h.stopped_at IS NOT NULL",
    ),
    (
        "median lead of a stop before its lease's end on the server (ms)",
        "SELECT coalesce(percentile_cont(0.5) WITHIN GROUP (
                    ORDER BY extract(epoch FROM a.ended_at - h.stopped_at) * 1000), 0)::bigint
           FROM {HANDLED} h JOIN leaseq.attempts a
             ON a.job_id = h.job_id AND a.lease_token = h.lease_token
          WHERE a.outcome = 'lease_expired' AND h.stopped_at IS NOT NULL",
    ),
    (
        "handler commits landing after its stop fired (it ignores it; the fence let them in)",
        "SELECT count(*) FROM {HANDLED} h
           JOIN leaseq.attempts a ON a.job_id = h.job_id AND a.lease_token = h.lease_token
          WHERE a.outcome = 'succeeded' AND a.ended_at > h.stopped_at
            AND NOT EXISTS (SELECT FROM faults.ops r WHERE r.kind = 'returned'
                               AND r.job_id = h.job_id AND r.lease_token = h.lease_token)",
    ),
];

/// The failover scenario's checks (failover.rs).
pub async fn failover(
    admin: &Client,
    workers: &[String],
    seen: &Seen,
) -> Result<Vec<Check>, Error> {
    let mut out = figures(admin).await?;
    out.push(Check {
        name: "leases the paused worker held",
        value: count(admin, "SELECT count(*) FROM faults.paused").await?,
        must_be_zero: false,
    });
    out.extend(counts(admin, MUST_BE_ZERO, true).await?);
    out.extend(counts(admin, PAUSED_MUST_BE_ZERO, true).await?);
    out.extend(self::workers(admin, workers, seen).await?);
    Ok(out)
}

/// The partition scenario's checks (partition.rs), with the figures the proxy reported.
pub async fn partition(
    admin: &Client,
    workers: &[String],
    seen: &Seen,
    proxy: &[(&'static str, i64)],
) -> Result<Vec<Check>, Error> {
    let mut out = figures(admin).await?;
    out.extend(counts(admin, PARTITION_FIGURES, false).await?);
    out.extend(proxy.iter().map(|&(name, value)| Check {
        name,
        value,
        must_be_zero: false,
    }));
    out.extend(counts(admin, MUST_BE_ZERO, true).await?);
    out.extend(counts(admin, PARTITION_MUST_BE_ZERO, true).await?);
    out.extend(self::workers(admin, workers, seen).await?);
    Ok(out)
}

async fn count(admin: &Client, sql: &str) -> Result<i64, Error> {
    let invariants = include_str!("../../../../pg_test/invariants.sql");
    let invariants = invariants.trim_end().trim_end_matches(';');
    let sql = sql
        .replace("{JOBS}", JOBS)
        .replace("{HANDLED}", HANDLED)
        .replace("{TX_LEASE}", TX_LEASE)
        .replace("{INVARIANTS}", invariants);
    let row = admin.raw().query_one(sql.as_str(), &[]).await?;
    Ok(row.get(0))
}

async fn counts(
    admin: &Client,
    checks: &[(&'static str, &str)],
    must_be_zero: bool,
) -> Result<Vec<Check>, Error> {
    let mut out = Vec::new();
    for &(name, sql) in checks {
        out.push(Check {
            name,
            value: count(admin, sql).await?,
            must_be_zero,
        });
    }
    Ok(out)
}

/// What every scenario reports: the clients' operations by outcome, the jobs, the expiries.
async fn figures(admin: &Client) -> Result<Vec<Check>, Error> {
    let figure = |name, value| Check {
        name,
        value,
        must_be_zero: false,
    };
    let mut out = Vec::new();
    for (kind, outcome, name) in [
        ("enqueue", "ok", "enqueues acknowledged"),
        ("enqueue", "error", "enqueues failed before their commit"),
        (
            "enqueue",
            "unknown",
            "enqueues whose commit went unanswered",
        ),
        ("finish", "ok", "finishes acknowledged"),
        (
            "finish",
            "refused",
            "finishes refused (lease no longer held)",
        ),
        ("finish", "error", "finishes failed before their commit"),
        ("finish", "unknown", "finishes whose commit went unanswered"),
    ] {
        let sql = format!(
            "SELECT count(*) FROM faults.ops WHERE kind = '{kind}' AND outcome = '{outcome}'"
        );
        out.push(figure(name, count(admin, &sql).await?));
    }
    out.push(figure(
        "  of the unanswered enqueues, committed",
        count(
            admin,
            "SELECT count(*) FROM faults.ops o WHERE o.kind = 'enqueue' AND o.outcome = 'unknown'
                AND EXISTS (SELECT FROM {JOBS} j WHERE j.op = o.op)",
        )
        .await?,
    ));
    out.push(figure(
        "jobs (all attempts: expired leases reclaimed)",
        count(admin, "SELECT count(*) FROM {JOBS} j").await?,
    ));
    out.push(figure(
        "attempts ended by an expired lease",
        count(
            admin,
            "SELECT count(*) FROM leaseq.attempts a JOIN {JOBS} j ON j.id = a.job_id
              WHERE a.outcome = 'lease_expired'",
        )
        .await?,
    ));
    Ok(out)
}

/// Every worker, library or `leaseq work`, finished a job after the last fault, in the same
/// process that lived through them all.
async fn workers(admin: &Client, workers: &[String], seen: &Seen) -> Result<Vec<Check>, Error> {
    let mut idle = 0;
    for worker in workers {
        let resumed: i64 = admin
            .raw()
            .query_one(
                "SELECT count(*) FROM leaseq.attempts a
                  WHERE a.worker = $1 AND a.outcome = 'succeeded'
                    AND a.ended_at > (SELECT max(f.at) FROM faults.faults f)",
                &[worker],
            )
            .await?
            .get(0);
        idle += i64::from(resumed == 0);
    }
    Ok(vec![
        Check {
            name: "workers with no job finished after the last fault",
            value: idle,
            must_be_zero: true,
        },
        Check {
            name: "worker processes that exited before the end",
            value: seen.workers_exited,
            must_be_zero: true,
        },
    ])
}

pub fn to_json(report: &[Check]) -> serde_json::Value {
    report
        .iter()
        .map(|c| serde_json::json!({"check": c.name, "value": c.value, "must_be_zero": c.must_be_zero}))
        .collect()
}

pub fn print(report: &[Check]) -> bool {
    println!("\n{:<76} {:>8}", "checked on the last primary", "count");
    let mut ok = true;
    for c in report {
        let mark = match (c.must_be_zero, c.value == 0) {
            (false, _) => "",
            (true, true) => "ok",
            (true, false) => {
                ok = false;
                "VIOLATED"
            }
        };
        println!("{:<76} {:>8}  {mark}", c.name, c.value);
    }
    ok
}
