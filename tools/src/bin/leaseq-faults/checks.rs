//! The checks, each a count read from the last primary after the clients' logs were loaded into
//! it (`faults.ops`). A check that must be zero fails the run otherwise; the others are figures.
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

/// The key the clients hand out for a job row (`Job::key`).
const KEY: &str = "j.id || '-' || (extract(epoch FROM j.created_at) * 1000000)::bigint";

/// Counts that must be zero, with what each proves — `true` beside the ones that hold only with a
/// synchronous standby (with an asynchronous one they measure what a failover lost).
const MUST_BE_ZERO: &[(&str, bool, &str)] = &[
    (
        "acknowledged enqueues lost (business row or job missing)",
        true,
        "SELECT count(*) FROM faults.ops o
          WHERE o.kind = 'enqueue' AND o.outcome = 'ok'
            AND NOT (EXISTS (SELECT FROM faults.orders r WHERE r.op = o.op)
                     AND EXISTS (SELECT FROM {JOBS} j WHERE j.id = o.job_id AND j.op = o.op))",
    ),
    (
        "acknowledged job ids now naming another job",
        true,
        "SELECT count(*) FROM faults.ops o JOIN {JOBS} j ON j.id = o.job_id
          WHERE o.kind = 'enqueue' AND o.outcome = 'ok' AND j.op IS DISTINCT FROM o.op",
    ),
    (
        "acknowledged job keys now naming another job",
        false,
        "SELECT count(*) FROM faults.ops o JOIN {JOBS} j ON j.id = o.job_id
          WHERE o.kind = 'enqueue' AND o.outcome = 'ok' AND j.op IS DISTINCT FROM o.op
            AND {KEY} = o.job_key",
    ),
    (
        "finished job ids that named two jobs (downstream keyed on the id collides)",
        true,
        "SELECT count(*) FROM (SELECT o.job_id FROM faults.ops o WHERE o.kind = 'finish'
                                GROUP BY o.job_id HAVING count(DISTINCT o.op) > 1) twice",
    ),
    (
        "finished job keys that named two jobs (LEASEQ_JOB_KEY, Job.key)",
        false,
        "SELECT count(*) FROM (SELECT o.job_key FROM faults.ops o WHERE o.kind = 'finish'
                                GROUP BY o.job_key HAVING count(DISTINCT o.op) > 1) twice",
    ),
    (
        "enqueues that failed before their commit, found committed",
        false,
        "SELECT count(*) FROM faults.ops o
          WHERE o.kind = 'enqueue' AND o.outcome = 'error'
            AND (EXISTS (SELECT FROM faults.orders r WHERE r.op = o.op)
                 OR EXISTS (SELECT FROM {JOBS} j WHERE j.op = o.op))",
    ),
    (
        "business rows and jobs apart (one committed without the other)",
        false,
        "SELECT (SELECT count(*) FROM faults.orders r WHERE NOT EXISTS (SELECT FROM {JOBS} j WHERE j.op = r.op))
              + (SELECT count(*) FROM {JOBS} j WHERE NOT EXISTS (SELECT FROM faults.orders r WHERE r.op = j.op))",
    ),
    (
        "jobs not succeeded once settled",
        false,
        "SELECT count(*) FROM {JOBS} j WHERE j.status <> 'succeeded'",
    ),
    (
        "double effects (a transactional handler's effect committed twice)",
        false,
        "SELECT count(*) FROM (SELECT e.job_id FROM faults.effects e GROUP BY e.job_id
                                HAVING count(*) > 1) doubled",
    ),
    (
        "succeeded jobs without the effect of their succeeding attempt",
        false,
        "SELECT count(*) FROM {JOBS} j JOIN leaseq.attempts a
             ON a.job_id = j.id AND a.outcome = 'succeeded'
          WHERE NOT EXISTS (SELECT FROM faults.effects e
                             WHERE e.job_id = j.id AND e.attempt_no = a.attempt_no)
            AND NOT EXISTS (SELECT FROM faults.command_effects e
                             WHERE e.job_id = j.id AND e.attempt_no = a.attempt_no)",
    ),
    (
        "acknowledged finishes lost (the commit answered, the attempt not succeeded)",
        true,
        "SELECT count(*) FROM faults.ops o
          WHERE o.kind = 'finish' AND o.outcome = 'ok'
            AND NOT EXISTS (SELECT FROM leaseq.attempts a
                             WHERE a.job_id = o.job_id AND a.lease_token = o.lease_token
                               AND a.outcome = 'succeeded')",
    ),
    (
        "stale finalizations (success not on the last attempt, or twice)",
        false,
        "SELECT count(*) FROM {JOBS} j WHERE
            (j.status = 'succeeded') <> EXISTS (SELECT FROM leaseq.attempts a WHERE a.job_id = j.id AND a.outcome = 'succeeded')
         OR (SELECT count(*) FROM leaseq.attempts a WHERE a.job_id = j.id AND a.outcome = 'succeeded') > 1
         OR (j.status = 'succeeded' AND (SELECT max(attempt_no) FROM leaseq.attempts a WHERE a.job_id = j.id)
                <> (SELECT attempt_no FROM leaseq.attempts a WHERE a.job_id = j.id AND a.outcome = 'succeeded'))",
    ),
    (
        "attempt numbers not unique and gap-free from 1",
        false,
        "SELECT count(*) FROM (SELECT a.job_id FROM leaseq.attempts a JOIN {JOBS} j ON j.id = a.job_id
                                GROUP BY a.job_id
                               HAVING min(a.attempt_no) <> 1 OR max(a.attempt_no) <> count(*)
                                   OR count(DISTINCT a.attempt_no) <> count(*)) g",
    ),
    (
        "overlapping live leases on one job",
        false,
        "SELECT count(*) FROM (
             SELECT a.started_at < max(coalesce(a.ended_at, 'infinity')) OVER (
                        PARTITION BY a.job_id ORDER BY a.attempt_no
                        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS overlaps
               FROM leaseq.attempts a JOIN {JOBS} j ON j.id = a.job_id) w
          WHERE w.overlaps",
    ),
    (
        "paused worker's leases finalized by it after the failover",
        false,
        "SELECT count(*) FROM faults.paused p JOIN leaseq.attempts a
             ON a.job_id = p.job_id AND a.lease_token = p.lease_token
          WHERE a.outcome <> 'lease_expired'",
    ),
    (
        "paused worker's effects committed under the leases it lost",
        false,
        "SELECT count(*) FROM faults.paused p JOIN leaseq.attempts a
             ON a.job_id = p.job_id AND a.lease_token = p.lease_token
           JOIN faults.effects e ON e.job_id = a.job_id AND e.attempt_no = a.attempt_no",
    ),
    (
        "job rows breaking a row invariant (pg_test/invariants.sql)",
        false,
        "SELECT count(*) FROM ({INVARIANTS}) broken WHERE broken.queue IN ('faults_tx', 'faults_cmd')",
    ),
];

/// `synchronous`: whether the cluster ran with a synchronous standby (see `MUST_BE_ZERO`).
pub async fn failover(
    admin: &Client,
    workers: &[String],
    seen: &Seen,
    synchronous: bool,
) -> Result<Vec<Check>, Error> {
    let count = |sql: String| async move {
        let row = admin.raw().query_one(sql.as_str(), &[]).await?;
        Ok::<i64, Error>(row.get(0))
    };
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
        out.push(figure(name, count(sql).await?));
    }
    out.push(figure(
        "  of the unanswered enqueues, committed",
        count(format!(
            "SELECT count(*) FROM faults.ops o WHERE o.kind = 'enqueue' AND o.outcome = 'unknown'
                AND EXISTS (SELECT FROM {JOBS} j WHERE j.op = o.op)"
        ))
        .await?,
    ));
    out.push(figure(
        "jobs (all attempts: expired leases reclaimed)",
        count(format!("SELECT count(*) FROM {JOBS} j")).await?,
    ));
    out.push(figure(
        "attempts ended by an expired lease",
        count(format!(
            "SELECT count(*) FROM leaseq.attempts a JOIN {JOBS} j ON j.id = a.job_id
              WHERE a.outcome = 'lease_expired'"
        ))
        .await?,
    ));
    out.push(figure(
        "leases the paused worker held",
        count("SELECT count(*) FROM faults.paused".into()).await?,
    ));
    let invariants = include_str!("../../../../pg_test/invariants.sql");
    let invariants = invariants.trim_end().trim_end_matches(';');
    for (name, needs_sync, sql) in MUST_BE_ZERO {
        let sql = sql
            .replace("{JOBS}", JOBS)
            .replace("{KEY}", KEY)
            .replace("{INVARIANTS}", invariants);
        out.push(Check {
            name,
            value: count(sql).await?,
            must_be_zero: synchronous || !needs_sync,
        });
    }
    out.push(figure(
        "window of the acknowledged enqueues lost, ms (first to last acknowledgement)",
        count(format!(
            "SELECT coalesce(round(extract(epoch FROM max(o.at) - min(o.at)) * 1000), 0)::bigint
               FROM faults.ops o
              WHERE o.kind = 'enqueue' AND o.outcome = 'ok'
                AND NOT EXISTS (SELECT FROM {JOBS} j WHERE j.id = o.job_id AND j.op = o.op)"
        ))
        .await?,
    ));
    // Every worker, library or `leaseq work`, finished a job after the last fault, in the same
    // process that lived through them all.
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
    out.push(Check {
        name: "workers with no job finished after the last fault",
        value: idle,
        must_be_zero: true,
    });
    out.push(Check {
        name: "worker processes that exited before the end",
        value: seen.workers_exited,
        must_be_zero: true,
    });
    Ok(out)
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
