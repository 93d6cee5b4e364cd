//! Stats: a row per queue, counting its jobs by state on the server's clock.
use pgrx::prelude::*;

use crate::spi::{self, Statement, TIMESTAMPTZ};

const STATS: Statement = Statement {
    sql: "SELECT q.name,
                 count(j.id) FILTER (WHERE j.status = 'pending' AND j.run_at <= $1),
                 count(j.id) FILTER (WHERE j.status = 'pending' AND j.run_at > $1),
                 count(j.id) FILTER (WHERE j.status = 'running'),
                 count(j.id) FILTER (WHERE j.status = 'running' AND j.lease_expires_at <= $1),
                 count(j.id) FILTER (WHERE j.status = 'succeeded'),
                 count(j.id) FILTER (WHERE j.status = 'dead'),
                 count(j.id) FILTER (WHERE j.status = 'cancelled'),
                 $1 - min(j.run_at) FILTER (WHERE j.status = 'pending' AND j.run_at <= $1)
            FROM leaseq.queues q
            LEFT JOIN leaseq.jobs j ON j.queue = q.name
           GROUP BY q.name
           ORDER BY q.name",
    params: &[TIMESTAMPTZ],
};

/// One row per queue, queues without jobs included: `pending` counts due jobs, `scheduled` those
/// whose `run_at` is still ahead, `running` every job holding a lease and `expired_leases` those
/// of them whose lease has run out (they are reclaimed by the next claim on the queue);
/// `oldest_pending_age` is how long the longest-waiting due job has been due.
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
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
    let rows: Vec<_> = Spi::connect_mut(|client| {
        spi::run(client, &STATS, &[now.into()])
            .map(|row| {
                let count = |n| row.get::<i64>(n).ok().flatten().unwrap_or(0);
                (
                    row.get::<String>(1)
                        .ok()
                        .flatten()
                        .expect("queue names are NOT NULL"),
                    count(2),
                    count(3),
                    count(4),
                    count(5),
                    count(6),
                    count(7),
                    count(8),
                    row.get::<Interval>(9).ok().flatten(),
                )
            })
            .collect()
    });
    TableIterator::new(rows)
}
