//! Stats: a row per queue, counting its jobs by state on the server's clock.
use pgrx::prelude::*;

use crate::access;
use crate::datum::QueuePrivilege;
use crate::spi::{self, Statement, TIMESTAMPTZ, WHOLE_QUEUE};

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
                 $1 - min(job.run_at) FILTER (WHERE job.status = 'pending' AND job.run_at <= $1)
            FROM leaseq.queues AS queue
            LEFT JOIN leaseq.jobs AS job ON job.queue = queue.name
           GROUP BY queue.name
           ORDER BY queue.name",
    params: &[TIMESTAMPTZ],
};

/// One row per queue, queues without jobs included: `pending` counts due jobs, `scheduled` those
/// whose `run_at` is still ahead, `running` every job holding a lease and `expired_leases` those
/// of them whose lease has run out (they are reclaimed by the next claim on the queue);
/// only the queues the caller may observe (src/access.rs);
/// `oldest_pending_age` is how long the longest-waiting due job has been due.
#[pg_extern]
pub fn queue_stats() -> TableIterator<
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
    ),
> {
    let now = spi::now();
    let mut rows = spi::connect(&WHOLE_QUEUE, |client| {
        spi::run(client, &STATS, &[now.into()]).map(|row| {
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
            )
        })
    });
    rows.retain(|row| access::allowed(&row.0, QueuePrivilege::Observe));
    TableIterator::new(rows)
}
