//! The checks, each a count read from the server the clients used last (the last primary), after
//! their logs were loaded into it (`faults.ops`). A check that must be zero fails the run
//! otherwise; the others are figures. Every scenario runs the common part (`run` with `COMMON`)
//! and adds its own.
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

/// What was acknowledged is there: zero wherever commits are durable where they are read — one
/// server, or a synchronous standby; after a failover to an asynchronous standby, the loss.
pub const ACKNOWLEDGED: &[(&str, &str)] = &[
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
        "finished job ids that named two jobs (downstream keyed on the id collides)",
        "SELECT count(*) FROM (SELECT o.job_id FROM faults.ops o WHERE o.kind = 'finish'
                                GROUP BY o.job_id HAVING count(DISTINCT o.op) > 1) twice",
    ),
    (
        "acknowledged finishes lost (the commit answered, the attempt not succeeded)",
        "SELECT count(*) FROM faults.ops o
          WHERE o.kind = 'finish' AND o.outcome = 'ok'
            AND NOT EXISTS (SELECT FROM leaseq.attempts a
                             WHERE a.job_id = o.job_id AND a.lease_token = o.lease_token
                               AND a.outcome = 'succeeded')",
    ),
];

/// Counts that must be zero under every fault, with what each proves.
pub const COMMON: &[(&str, &str)] = &[
    (
        "acknowledged job keys now naming another job",
        "SELECT count(*) FROM faults.ops o JOIN {JOBS} j ON j.id = o.job_id
          WHERE o.kind = 'enqueue' AND o.outcome = 'ok' AND j.op IS DISTINCT FROM o.op
            AND {KEY} = o.job_key",
    ),
    (
        "finished job keys that named two jobs (LEASEQ_JOB_KEY, Job.key)",
        "SELECT count(*) FROM (SELECT o.job_key FROM faults.ops o WHERE o.kind = 'finish'
                                GROUP BY o.job_key HAVING count(DISTINCT o.op) > 1) twice",
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

/// The worker the failover scenario pauses past its lease (`faults.paused`).
pub const PAUSED: &[(&str, &str)] = &[
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
pub const PARTITION: &[(&str, &str)] = &[
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
pub const PARTITION_FIGURES: &[(&str, &str)] = &[
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
        "  of these and the long partition's, the Python worker's (py1)",
        "SELECT count(*) FROM leaseq.attempts a JOIN {JOBS} j ON j.id = a.job_id
           JOIN faults.faults f ON f.kind IN ('long partition', 'lossy link')
          WHERE j.queue = 'faults_tx' AND a.outcome = 'lease_expired' AND a.worker = 'py1'
            AND a.ended_at > f.began_at AND a.ended_at - {TX_LEASE} < f.at",
    ),
    (
        "  of these and the long partition's, the Node worker's (nd1)",
        "SELECT count(*) FROM leaseq.attempts a JOIN {JOBS} j ON j.id = a.job_id
           JOIN faults.faults f ON f.kind IN ('long partition', 'lossy link')
          WHERE j.queue = 'faults_tx' AND a.outcome = 'lease_expired' AND a.worker = 'nd1'
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

impl Check {
    pub fn zero(name: &'static str, value: i64) -> Check {
        Check {
            name,
            value,
            must_be_zero: true,
        }
    }

    pub fn figure(name: &'static str, value: i64) -> Check {
        Check {
            name,
            value,
            must_be_zero: false,
        }
    }
}

/// One count, read with `sql`.
pub async fn count(admin: &Client, sql: &str) -> Result<i64, Error> {
    Ok(admin.raw().query_one(sql, &[]).await?.get(0))
}

/// What the clients did and what the jobs went through (figures), then `groups` of counts that
/// must be zero and `measured` ones that are figures here, then the workers: each alive at the
/// end and each with a job finished after the last fault recorded in `faults.faults`.
pub async fn run(
    admin: &Client,
    workers: &[String],
    seen: &Seen,
    groups: &[&[(&'static str, &str)]],
    measured: &[&[(&'static str, &str)]],
) -> Result<Vec<Check>, Error> {
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
        let done: i64 = admin
            .raw()
            .query_one(
                "SELECT count(*) FROM faults.ops WHERE kind = $1 AND outcome = $2",
                &[&kind, &outcome],
            )
            .await?
            .get(0);
        out.push(Check::figure(name, done));
    }
    out.push(Check::figure(
        "  of the unanswered enqueues, committed",
        count(
            admin,
            &format!(
                "SELECT count(*) FROM faults.ops o WHERE o.kind = 'enqueue' AND o.outcome = 'unknown'
                    AND EXISTS (SELECT FROM {JOBS} j WHERE j.op = o.op)"
            ),
        )
        .await?,
    ));
    out.push(Check::figure(
        "jobs (all attempts: expired leases reclaimed)",
        count(admin, &format!("SELECT count(*) FROM {JOBS} j")).await?,
    ));
    out.push(Check::figure(
        "attempts ended by an expired lease",
        count(
            admin,
            &format!(
                "SELECT count(*) FROM leaseq.attempts a JOIN {JOBS} j ON j.id = a.job_id
                  WHERE a.outcome = 'lease_expired'"
            ),
        )
        .await?,
    ));
    let invariants = include_str!("../../../../pg_test/invariants.sql");
    let invariants = invariants.trim_end().trim_end_matches(';');
    let checked = groups.iter().map(|g| (g, true));
    for (group, must_be_zero) in checked.chain(measured.iter().map(|g| (g, false))) {
        for (name, sql) in group.iter() {
            let sql = sql
                .replace("{JOBS}", JOBS)
                .replace("{KEY}", KEY)
                .replace("{HANDLED}", HANDLED)
                .replace("{TX_LEASE}", TX_LEASE)
                .replace("{INVARIANTS}", invariants);
            out.push(Check {
                name,
                value: count(admin, &sql).await?,
                must_be_zero,
            });
        }
    }
    out.push(Check::figure(
        "window of the acknowledged enqueues lost, ms (first to last acknowledgement)",
        count(
            admin,
            &format!(
                "SELECT coalesce(round(extract(epoch FROM max(o.at) - min(o.at)) * 1000), 0)::bigint
                   FROM faults.ops o
                  WHERE o.kind = 'enqueue' AND o.outcome = 'ok'
                    AND NOT EXISTS (SELECT FROM {JOBS} j WHERE j.id = o.job_id AND j.op = o.op)"
            ),
        )
        .await?,
    ));
    // Every worker, library or `leaseq work`, finished a job after the last fault, in the same
    // process that lived through them all. The last fault is the last recorded, not the latest
    // time: a clock stepped back records its last fault before an earlier one.
    let mut idle = 0;
    for worker in workers {
        let resumed: i64 = admin
            .raw()
            .query_one(
                "SELECT count(*) FROM leaseq.attempts a
                  WHERE a.worker = $1 AND a.outcome = 'succeeded'
                    AND a.ended_at > (SELECT f.at FROM faults.faults f ORDER BY f.n DESC LIMIT 1)",
                &[worker],
            )
            .await?
            .get(0);
        idle += i64::from(resumed == 0);
    }
    out.push(Check::zero(
        "workers with no job finished after the last fault",
        idle,
    ));
    out.push(Check::zero(
        "worker processes that exited before the end",
        seen.workers_exited,
    ));
    Ok(out)
}

/// Writes `dir/report.json`: the scenario's own `figures` (a JSON object), every check, whether
/// all passed, and how long the run took; the file's path.
pub fn write_report(
    dir: &std::path::Path,
    mut figures: serde_json::Value,
    report: &[Check],
    passed: bool,
    seconds: f64,
) -> Result<std::path::PathBuf, Error> {
    figures["checks"] = to_json(report);
    figures["passed"] = passed.into();
    figures["seconds"] = seconds.into();
    let path = dir.join("report.json");
    std::fs::write(&path, serde_json::to_string_pretty(&figures)?)?;
    Ok(path)
}

fn to_json(report: &[Check]) -> serde_json::Value {
    report
        .iter()
        .map(|c| serde_json::json!({"check": c.name, "value": c.value, "must_be_zero": c.must_be_zero}))
        .collect()
}

/// The table, under `title` (where the counts were read); whether every must-be-zero count is.
pub fn print(title: &str, report: &[Check]) -> bool {
    println!("\n{title:<76} {:>8}", "count");
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
