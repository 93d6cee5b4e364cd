//! Stats: a row per queue, counting its jobs by state on the server's clock.
use pgrx::prelude::*;

use crate::core::access;
use crate::core::clock;
use crate::core::connect::{self, WHOLE_QUEUE};
use crate::core::datum::QueuePrivilege;
use crate::core::spi::{self, Statement, TIMESTAMPTZ};

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
