//! Metrics: `leaseq.metrics()`, every queue's operating numbers in the Prometheus text
//! exposition format (0.0.4), names prefixed `leaseq_`, one `queue` label.
//!
//! Gauges are read from the live jobs through the partial indexes (due, lease expiry, dead): their
//! cost follows a queue's backlog and running jobs, never its finished history. Counters and the
//! histogram of attempts per success come from `counters` (shared memory, since the server
//! started), and are left out when the library is not preloaded. A caller sees the queues it may
//! observe (`access`).
use std::collections::HashMap;
use std::fmt::Write;

use pgrx::prelude::*;
use pgrx::spi::SpiClient;

use crate::core::access;
use crate::core::clock;
use crate::core::connect::{self, JOB_PATH};
use crate::core::counters::{self, ATTEMPT_BOUNDS, EVENTS, Event};
use crate::core::datum::QueuePrivilege;
use crate::core::release::{self, Release};
use crate::core::snapshots::Counted;
use crate::core::spi::{self, Statement, TIMESTAMPTZ};
use crate::lifecycle::pause;
use crate::observe::horizon::{self, Horizon};

/// Per queue: due and scheduled pending jobs, running ones, expired leases, dead jobs, jobs
/// waiting for room in their group, jobs blocked by their parents, and when the longest-waiting
/// due job came due (NULL when none is due). Each count walks one partial index over the queue's
/// live jobs only, but the running ones: the jobs of the queue's lease rows that still run. Blocked ones are the statuses after `waiting` (`jobs_held_idx`): the literal
/// `'blocked'` is not valid input before 0.3.0's schema.
pub(crate) const GAUGES: Statement = Statement {
    name: "metrics.gauges",
    sql: "SELECT queue.name,
                 pending.due, pending.scheduled, running.running, running.expired, dead.dead,
                 pending.oldest_due, waiting.waiting, blocked.blocked
            FROM leaseq.queues AS queue
           CROSS JOIN LATERAL (
                SELECT count(*) FILTER (WHERE job.run_at <= $1) AS due,
                       count(*) FILTER (WHERE job.run_at > $1) AS scheduled,
                       min(job.run_at) FILTER (WHERE job.run_at <= $1) AS oldest_due
                  FROM leaseq.jobs AS job
                 WHERE job.queue = queue.name AND job.lane = 'pending') AS pending
           CROSS JOIN LATERAL (
                SELECT count(*) AS running,
                       count(*) FILTER (WHERE job.lease_expires_at <= $1) AS expired
                  FROM (SELECT DISTINCT held.id
                          FROM leaseq.leases AS lease
                         CROSS JOIN LATERAL unnest(lease.job_ids) AS held (id)
                         WHERE lease.queue = queue.name) AS held
                  JOIN leaseq.jobs AS job ON job.id = held.id
                 WHERE job.status = 'running') AS running
           CROSS JOIN LATERAL (
                SELECT count(*) AS dead
                  FROM leaseq.jobs AS job
                 WHERE job.queue = queue.name AND job.lane = 'dead') AS dead
           CROSS JOIN LATERAL (
                SELECT count(*) AS waiting
                  FROM leaseq.jobs AS job
                 WHERE job.queue = queue.name AND job.group_key IS NOT NULL
                   AND job.keyed_finished_at IS NULL AND job.lane = 'waiting') AS waiting
           CROSS JOIN LATERAL (
                SELECT count(*) AS blocked
                  FROM leaseq.jobs AS job
                 WHERE job.queue = queue.name AND job.lane > 'waiting') AS blocked
           ORDER BY queue.name",
    params: &[TIMESTAMPTZ],
};

/// Per queue with running jobs: the earliest of their last signs of progress — each one's last
/// report (`queue_progress`), or its attempt's start when it has not reported since.
pub(crate) const PROGRESSED: Statement = Statement {
    name: "metrics.progressed",
    sql: "SELECT job.queue, min(greatest(job.started_at, job.progress_at))
            FROM (SELECT DISTINCT held.id
                    FROM leaseq.leases AS lease
                   CROSS JOIN LATERAL unnest(lease.job_ids) AS held (id)) AS held
            JOIN leaseq.jobs AS job ON job.id = held.id
           WHERE job.status = 'running'
           GROUP BY job.queue",
    params: &[],
};

/// Per queue: how long its running job that has gone longest without a sign of progress has
/// (`PROGRESSED`), in seconds at `now`. None on a schema without progress (before 0.3.0).
fn progress_ages(client: &mut SpiClient<'_>, now: TimestampWithTimeZone) -> HashMap<String, f64> {
    if release::current(client) < Release::V0_3_0 {
        return HashMap::new();
    }
    let now: pg_sys::TimestampTz = now.into();
    spi::run(client, &PROGRESSED, &[])
        .map(|row| {
            let since: pg_sys::TimestampTz = row.required::<TimestampWithTimeZone>(2).into();
            let seconds = (now.saturating_sub(since) as f64 / 1_000_000.0).max(0.0);
            (row.required::<String>(1), seconds)
        })
        .into_iter()
        .collect()
}

/// Every queue's gauges (of every queue: the caller filters), counted now.
pub(crate) fn count(
    client: &mut SpiClient<'_>,
    now: TimestampWithTimeZone,
) -> Vec<(String, Counted)> {
    let counted_at: pg_sys::TimestampTz = now.into();
    spi::run(client, &GAUGES, &[now.into()]).map(|row| {
        let oldest_due: Option<TimestampWithTimeZone> = row.get(7);
        (
            row.required(1),
            Counted {
                counted_at,
                due: row.required(2),
                scheduled: row.required(3),
                running: row.required(4),
                expired: row.required(5),
                dead: row.required(6),
                waiting: row.required(8),
                blocked: row.required(9),
                oldest_due: oldest_due.map(Into::into),
            },
        )
    })
}

/// How long the longest-waiting due job has waited at `at`, in seconds (0 when none is due).
fn oldest_due_seconds(counted: &Counted, at: pg_sys::TimestampTz) -> f64 {
    counted.oldest_due.map_or(0.0, |due| {
        (at.saturating_sub(due) as f64 / 1_000_000.0).max(0.0)
    })
}

struct Gauges {
    queue: String,
    counted: Counted,
    oldest_due_seconds: f64,
    progress_age_seconds: f64,
    paused: bool,
}

/// Every queue the caller may observe, as Prometheus text: gauges `leaseq_jobs{state}` (pending,
/// scheduled, running, dead, waiting, blocked: `Counted::states`), `leaseq_expired_leases`, `leaseq_oldest_pending_age_seconds`,
/// `leaseq_progress_age_seconds`; with
/// the library preloaded, counters
/// `leaseq_{enqueued,completed,failed,dead,lease_expired,snoozed}_total`; `leaseq_queue_paused`
/// and the histogram `leaseq_attempts_per_success`.
#[pg_extern]
pub fn metrics() -> String {
    let now = clock::now();
    let (mut gauges, held) = connect::connect(&JOB_PATH, |client| {
        let progress_ages = progress_ages(client, now);
        let gauges: Vec<Gauges> = count(client, now)
            .into_iter()
            .map(|(queue, counted)| Gauges {
                paused: pause::paused(client, &queue),
                oldest_due_seconds: oldest_due_seconds(&counted, now.into()),
                progress_age_seconds: progress_ages.get(&queue).copied().unwrap_or(0.0),
                queue,
                counted,
            })
            .collect();
        (gauges, horizon::read(client))
    });
    gauges.retain(|g| access::allowed(&g.queue, QueuePrivilege::Observe));
    exposition(&gauges, &held, &counters::read(), counters::kept())
}

fn exposition(
    gauges: &[Gauges],
    held: &Horizon,
    counted: &HashMap<String, counters::Read>,
    kept: bool,
) -> String {
    let mut out = String::new();
    header(
        &mut out,
        "oldest_snapshot_age_seconds",
        "gauge",
        "How long the oldest transaction of this database that holds a snapshot has been open (0 when none): \
         while it lives, VACUUM keeps every job version it could see, and claims read them.",
    );
    put_line(
        &mut out,
        format_args!(
            "leaseq_oldest_snapshot_age_seconds {}",
            held.oldest_snapshot_seconds.unwrap_or(0.0).max(0.0)
        ),
    );
    header(
        &mut out,
        "xmin_horizon_age_transactions",
        "gauge",
        "Transactions since the oldest xmin that each kind of holder keeps for this database's tables \
         (0 when it keeps none): a backend of this database, a standby's hot_standby_feedback, a replication slot.",
    );
    for (holder, xids) in [
        ("backend", held.backend_xids),
        ("standby", held.standby_xids),
        ("slot", held.slot_xids),
    ] {
        put_line(
            &mut out,
            format_args!(
                "leaseq_xmin_horizon_age_transactions{{holder=\"{holder}\"}} {}",
                xids.unwrap_or(0)
            ),
        );
    }
    header(
        &mut out,
        "jobs",
        "gauge",
        "Live jobs by state: pending (due), scheduled (due later), running, dead, waiting (for room in their group), blocked (by their parents).",
    );
    for g in gauges {
        for (state, n) in g.counted.states() {
            put_line(
                &mut out,
                format_args!(
                    "leaseq_jobs{{queue=\"{}\",state=\"{state}\"}} {n}",
                    label(&g.queue)
                ),
            );
        }
    }
    per_queue(
        &mut out,
        gauges,
        "expired_leases",
        "Running jobs whose lease has run out, not yet reclaimed.",
        |g| g.counted.expired as f64,
    );
    per_queue(
        &mut out,
        gauges,
        "oldest_pending_age_seconds",
        "How long the longest-waiting due job has been due (0 when none is).",
        |g| g.oldest_due_seconds,
    );
    per_queue(
        &mut out,
        gauges,
        "progress_age_seconds",
        "Seconds since the running job heard from least recently reported progress (queue_progress), or started its attempt if it has not reported; 0 when none runs.",
        |g| g.progress_age_seconds,
    );
    per_queue(
        &mut out,
        gauges,
        "queue_paused",
        "1 while the queue is paused (queue_pause): its claims return no jobs, its enqueues still commit.",
        |g| f64::from(u8::from(g.paused)),
    );
    if !kept {
        out.push_str("# leaseq counters need shared_preload_libraries = 'leaseq'\n");
        return out;
    }
    let none = counters::Read {
        events: [0; EVENTS.len()],
        attempts_le: [0; ATTEMPT_BOUNDS.len() + 1],
        attempts_sum: 0,
    };
    for event in EVENTS {
        let (name, help) = match event {
            Event::Enqueued => ("enqueued_total", "Jobs enqueued since the server started."),
            Event::Completed => (
                "completed_total",
                "Jobs completed since the server started.",
            ),
            Event::Failed => (
                "failed_total",
                "Attempts failed (retried or not) since the server started.",
            ),
            Event::Dead => ("dead_total", "Jobs gone dead since the server started."),
            Event::LeaseExpired => (
                "lease_expired_total",
                "Attempts whose lease ran out, reclaimed, since the server started.",
            ),
            Event::Snoozed => (
                "snoozed_total",
                "Attempts snoozed (the job back later, its budget kept) since the server started.",
            ),
            Event::ClaimedFromHead => (
                "claims_from_head_total",
                "Claim statements that started at the head of the due jobs, since the server started.",
            ),
            Event::ClaimedAfterCursor => (
                "claims_after_cursor_total",
                "Claim statements that started after their session's last claimed job, the head \
                 having been slow (a snapshot holding the xmin horizon back), since the server started.",
            ),
            Event::ProbeSkipped => (
                "reclaim_probes_skipped_total",
                "Claims that skipped their probe of expired leases, the last one having been slow, \
                 since the server started.",
            ),
            Event::SweepStep => (
                "claim_sweep_steps_total",
                "Bounded steps of the sweeps that find due jobs and expired leases while their \
                 index ranges are long (a snapshot holding the xmin horizon back), since the \
                 server started.",
            ),
        };
        header(&mut out, name, "counter", help);
        for g in gauges {
            let read = counted.get(&g.queue).unwrap_or(&none);
            put_line(
                &mut out,
                format_args!(
                    "leaseq_{name}{{queue=\"{}\"}} {}",
                    label(&g.queue),
                    read.events[event as usize]
                ),
            );
        }
    }
    header(
        &mut out,
        "attempts_per_success",
        "histogram",
        "Attempts each completed job took, since the server started.",
    );
    for g in gauges {
        let read = counted.get(&g.queue).unwrap_or(&none);
        let queue = label(&g.queue);
        let bounds = ATTEMPT_BOUNDS
            .iter()
            .map(|b| b.to_string())
            .chain(["+Inf".to_string()]);
        for (bound, n) in bounds.zip(read.attempts_le) {
            put_line(
                &mut out,
                format_args!(
                    "leaseq_attempts_per_success_bucket{{queue=\"{queue}\",le=\"{bound}\"}} {n}"
                ),
            );
        }
        put_line(
            &mut out,
            format_args!(
                "leaseq_attempts_per_success_sum{{queue=\"{queue}\"}} {}",
                read.attempts_sum
            ),
        );
        put_line(
            &mut out,
            format_args!(
                "leaseq_attempts_per_success_count{{queue=\"{queue}\"}} {}",
                read.attempts_le[ATTEMPT_BOUNDS.len()]
            ),
        );
    }
    out
}

/// A gauge with one sample per queue.
fn per_queue(
    out: &mut String,
    gauges: &[Gauges],
    name: &str,
    help: &str,
    value: impl Fn(&Gauges) -> f64,
) {
    header(out, name, "gauge", help);
    for g in gauges {
        put_line(
            out,
            format_args!(
                "leaseq_{name}{{queue=\"{}\"}} {}",
                label(&g.queue),
                value(g)
            ),
        );
    }
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    put_line(out, format_args!("# HELP leaseq_{name} {help}"));
    put_line(out, format_args!("# TYPE leaseq_{name} {kind}"));
}

fn put_line(out: &mut String, text: std::fmt::Arguments<'_>) {
    out.write_fmt(text).expect("a String takes any text");
    out.push('\n');
}

/// A label value, escaped as the exposition format asks (queue names never need it).
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use pgrx::prelude::*;

    /// Without the library preloaded (as in this test server) the gauges are all there is, and
    /// the text says why the counters are missing.
    #[pg_test]
    fn without_preloading_metrics_reports_the_gauges_and_says_why_no_counters() {
        Spi::run(
            "SELECT leaseq.queue_create('metered');
             SELECT leaseq.queue_enqueue('metered', '{}');
             SELECT leaseq.queue_enqueue('metered', '{}', run_at => now() + interval '1 hour');",
        )
        .unwrap();
        let text = Spi::get_one::<String>("SELECT leaseq.metrics()")
            .unwrap()
            .unwrap();
        for line in [
            "# TYPE leaseq_jobs gauge",
            "leaseq_jobs{queue=\"metered\",state=\"pending\"} 1",
            "leaseq_jobs{queue=\"metered\",state=\"scheduled\"} 1",
            "leaseq_jobs{queue=\"metered\",state=\"running\"} 0",
            "leaseq_expired_leases{queue=\"metered\"} 0",
            "# leaseq counters need shared_preload_libraries = 'leaseq'",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
        assert!(!text.contains("_total"), "{text}");
    }
}
