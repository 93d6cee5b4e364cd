//! Stats: a row per queue, counting its jobs by state on the server's clock.
use pgrx::prelude::*;

use crate::core::access;
use crate::core::clock;
use crate::core::connect::{self, WHOLE_QUEUE};
use crate::core::datum::{JobStatus, QueuePrivilege};
use crate::core::spi::{self, Statement, TEXT_ARRAY, TIMESTAMPTZ};

pub(crate) const STATS: Statement = Statement {
    name: "stats",
    sql: "SELECT queue.name,
                 count(job.id) FILTER (WHERE job.status = 'pending' AND job.run_at <= $1),
                 count(job.id) FILTER (WHERE job.status = 'pending' AND job.run_at > $1),
                 count(job.id) FILTER (WHERE job.status = 'running'),
                 count(job.id) FILTER (WHERE job.status = 'running'
                                         AND job.lease_expires_at <= $1),
                 count(job.id) FILTER (WHERE job.status = 'succeeded'),
                 count(job.id) FILTER (WHERE job.status = 'dead'),
                 count(job.id) FILTER (WHERE job.status = 'cancelled'),
                 $1 - min(job.run_at) FILTER (WHERE job.status = 'pending' AND job.run_at <= $1),
                 coalesce(max(job.snoozes) FILTER (WHERE job.status IN ('pending', 'running')), 0),
                 count(job.id) FILTER (WHERE job.status = 'waiting')
            FROM leaseq.queues AS queue
            LEFT JOIN leaseq.jobs AS job ON job.queue = queue.name
           GROUP BY queue.name
           ORDER BY queue.name",
    params: &[TIMESTAMPTZ],
};

/// A row of `queue_stats`, as `stats` reads it.
pub(crate) type StatsRow = (
    String,
    i64,
    i64,
    i64,
    i64,
    i64,
    i64,
    i64,
    Option<Interval>,
    i32,
    i64,
);

/// One row per queue, queues without jobs included: `pending` counts due jobs, `scheduled` those
/// whose `run_at` is still ahead, `running` every job holding a lease and `expired_leases` those
/// of them whose lease has run out (they are reclaimed by the next claim on the queue);
/// only the queues the caller may observe (core/access.rs);
/// `oldest_pending_age` is how long the longest-waiting due job has been due; `most_snoozes` the
/// most times a pending or running job has snoozed (`snooze`); `waiting` counts the jobs waiting
/// for room in their group (`group`).
#[pg_extern(name = "queue_stats")]
pub fn stats() -> TableIterator<
    'static,
    (
        name!(queue, String),
        name!(pending, i64),
        name!(scheduled, i64),
        name!(running, i64),
        name!(expired_leases, i64),
        name!(succeeded, i64),
        name!(dead, i64),
        name!(cancelled, i64),
        name!(oldest_pending_age, Option<Interval>),
        name!(most_snoozes, i32),
        name!(waiting, i64),
    ),
> {
    let mut rows = connect::connect(&WHOLE_QUEUE, |client| read_stats(client, &STATS));
    rows.retain(|row| access::allowed(&row.0, QueuePrivilege::Observe));
    TableIterator::new(rows)
}

/// Every queue's row. (Which of them the caller may observe is asked outside `connect`,
/// with the caller's identity.)
pub(crate) fn read_stats(
    client: &mut pgrx::spi::SpiClient<'_>,
    statement: &'static Statement,
) -> Vec<StatsRow> {
    let now = clock::now();
    spi::run(client, statement, &[now.into()]).map(|row| {
        (
            row.required::<String>(1),
            row.required(2),
            row.required(3),
            row.required(4),
            row.required(5),
            row.required(6),
            row.required(7),
            row.required(8),
            row.get(9),
            row.required(10),
            row.required(11),
        )
    })
}

/// Every queue's jobs by status `$1` (each in that order, zeros included): one walk of the jobs.
pub(crate) const COUNTS: Statement = Statement {
    name: "stats.counts",
    sql: "SELECT queue.name, status.label, count(job.id)
            FROM leaseq.queues AS queue
           CROSS JOIN unnest($1::text[]) WITH ORDINALITY AS status (label, position)
            LEFT JOIN leaseq.jobs AS job
                   ON job.queue = queue.name AND job.status::text = status.label
           GROUP BY queue.name, status.label, status.position
           ORDER BY queue.name, status.position",
    params: &[TEXT_ARRAY],
};

/// How many jobs each queue the caller may observe has in each status: a row per queue and
/// status, every status of `leaseq.job_status` in its order, zeros included. `queue_stats`'
/// successor: a status added later is a new row, not a new column. Finished jobs are counted
/// too, so it reads the whole table; metrics and `queue_overview` count live jobs only.
#[pg_extern]
pub fn queue_counts() -> TableIterator<
    'static,
    (
        name!(queue, String),
        name!(status, JobStatus),
        name!(jobs, i64),
    ),
> {
    let labels: Vec<&str> = JobStatus::ALL.iter().map(|status| status.label()).collect();
    let mut rows = connect::connect(&WHOLE_QUEUE, |client| {
        spi::run(client, &COUNTS, &[labels.into()]).map(|row| {
            let label: String = row.required(2);
            let status = JobStatus::from_label(&label).expect("a label of JobStatus::ALL");
            (row.required::<String>(1), status, row.required::<i64>(3))
        })
    });
    rows.retain(|row| access::allowed(&row.0, QueuePrivilege::Observe));
    TableIterator::new(rows)
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::core::datum::JobStatus;

    /// A job in every status of `JobStatus::ALL`, in one queue: `queue_counts` has a row for
    /// each, and `metrics()` a `leaseq_jobs` gauge and `queue_overview` a column for each live
    /// one (all but succeeded and cancelled, which only history holds). A status added to the
    /// enum and forgotten by one of them fails here.
    #[pg_test]
    fn every_status_is_counted_by_queue_counts_metrics_and_the_overview() {
        Spi::run(
            "SELECT leaseq.queue_create('every_status', group_concurrency => 1);
             SELECT leaseq.queue_enqueue('every_status', '{}');
             SELECT leaseq.queue_complete(job_id, lease_token)
               FROM leaseq.queue_claim('every_status', 'w');
             SELECT leaseq.queue_enqueue('every_status', '{}');
             SELECT leaseq.queue_fail(job_id, lease_token, retry => false)
               FROM leaseq.queue_claim('every_status', 'w');
             SELECT leaseq.queue_enqueue('every_status', '{}');
             SELECT leaseq.queue_claim('every_status', 'w');
             SELECT leaseq.queue_cancel(leaseq.queue_enqueue('every_status', '{}'));
             SELECT leaseq.queue_enqueue('every_status', '{}', depends_on =>
                        ARRAY[leaseq.queue_enqueue('every_status', '{}', group_key => 'g')]);
             SELECT leaseq.queue_enqueue('every_status', '{}', group_key => 'g');",
        )
        .expect("a job in every status");
        let metrics = Spi::get_one::<String>("SELECT leaseq.metrics()")
            .expect("metrics")
            .expect("metrics text");
        let overview = Spi::get_one::<pgrx::JsonB>(
            "SELECT to_jsonb(overview) FROM leaseq.queue_overview() AS overview
              WHERE queue = 'every_status'",
        )
        .expect("the overview")
        .expect("the queue's row")
        .0;
        for status in JobStatus::ALL {
            let label = status.label();
            let counted = Spi::get_one_with_args::<i64>(
                "SELECT jobs FROM leaseq.queue_counts()
                  WHERE queue = 'every_status' AND status::text = $1",
                &[label.into()],
            );
            assert_eq!(counted, Ok(Some(1)), "queue_counts of {label}");
            if matches!(status, JobStatus::Succeeded | JobStatus::Cancelled) {
                continue;
            }
            let gauge = format!("leaseq_jobs{{queue=\"every_status\",state=\"{label}\"}} 1\n");
            assert!(metrics.contains(&gauge), "{gauge} in:\n{metrics}");
            assert_eq!(overview[label], 1, "queue_overview's {label} in {overview}");
        }
    }
}
