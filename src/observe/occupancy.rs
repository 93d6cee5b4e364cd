//! Occupancy: who holds what right now — the workers holding leases, and the groups with jobs
//! admitted or waiting. Both read only live jobs: the lease rows' jobs, the live groups' index.
use pgrx::prelude::*;

use crate::core::access;
use crate::core::args;
use crate::core::clock;
use crate::core::connect::{self, WHOLE_QUEUE};
use crate::core::datum::QueuePrivilege;
use crate::core::spi::{self, INT4, Statement, TEXT, TIMESTAMPTZ};
use crate::lifecycle::queue;

/// Running jobs by worker and queue: the jobs of the lease rows that still run.
pub(crate) const WORKERS: Statement = Statement {
    name: "occupancy.workers",
    sql: "SELECT job.worker, job.queue, count(*), min(job.started_at), min(job.lease_expires_at),
                 count(*) FILTER (WHERE job.lease_expires_at <= $1)
            FROM (SELECT DISTINCT held.id
                    FROM leaseq.leases AS lease
                   CROSS JOIN LATERAL unnest(lease.job_ids) AS held (id)) AS held
            JOIN leaseq.jobs AS job ON job.id = held.id
           WHERE job.status = 'running'
           GROUP BY job.worker, job.queue
           ORDER BY job.worker, job.queue",
    params: &[TIMESTAMPTZ],
};

/// A queue's groups with live jobs, the ones with the most waiting first; from the live groups'
/// index alone (group, status, id).
pub(crate) const GROUPS: Statement = Statement {
    name: "occupancy.groups",
    sql: "SELECT live.group_key,
                 count(*) FILTER (WHERE live.lane <> 'waiting'),
                 count(*) FILTER (WHERE live.lane = 'waiting'),
                 min(live.id) FILTER (WHERE live.lane = 'waiting')
            FROM leaseq.jobs AS live
           WHERE live.queue = $1 AND live.group_key IS NOT NULL AND live.keyed_finished_at IS NULL
           GROUP BY live.group_key
           ORDER BY 3 DESC, 1
           LIMIT $2",
    params: &[TEXT, INT4],
};

/// Who holds leases now: per worker and queue (of the queues the caller may observe), how many
/// jobs it runs, when the oldest of their attempts started, the soonest lease expiry, and how
/// many of its leases have expired (their jobs are reclaimed by the next claim on the queue).
#[pg_extern]
pub fn queue_workers() -> TableIterator<
    'static,
    (
        name!(worker, String),
        name!(queue, String),
        name!(running, i64),
        name!(oldest_started_at, TimestampWithTimeZone),
        name!(next_expiry, TimestampWithTimeZone),
        name!(expired, i64),
    ),
> {
    let now = clock::now();
    let mut rows = connect::connect(&WHOLE_QUEUE, |client| {
        spi::run(client, &WORKERS, &[now.into()]).map(|row| {
            (
                row.required::<String>(1),
                row.required::<String>(2),
                row.required(3),
                row.required(4),
                row.required(5),
                row.required(6),
            )
        })
    });
    rows.retain(|row| access::allowed(&row.1, QueuePrivilege::Observe));
    TableIterator::new(rows)
}

/// The groups (`group`) of `queue` with live jobs, those with the most waiting first: how many
/// of a group's jobs are admitted (pending or running), how many wait for room, and the oldest
/// waiting one's id (the next to be admitted). At most `max_rows` (1..=10000).
///
/// Errors: `22004` NULL queue or max_rows, `22023` invalid name or max_rows, `42704` unknown
/// queue, `42501` queue not observable by the caller.
#[pg_extern]
pub fn queue_groups(
    queue: Option<&str>,
    max_rows: default!(Option<i32>, 100),
) -> TableIterator<
    'static,
    (
        name!(group_key, String),
        name!(admitted, i64),
        name!(waiting, i64),
        name!(oldest_waiting_id, Option<i64>),
    ),
> {
    const F: &str = "queue_groups";
    let queue = args::queue_name(F, queue);
    let max_rows = args::required(F, "max_rows", max_rows);
    args::int_in_range(F, "max_rows", max_rows, 1..=args::MAX_BATCH, None);
    access::require_queue(F, queue, QueuePrivilege::Observe);
    let rows = connect::connect(&WHOLE_QUEUE, |client| {
        queue::load(client, F, queue);
        spi::run(client, &GROUPS, &[queue.into(), max_rows.into()]).map(|row| {
            (
                row.required::<String>(1),
                row.required(2),
                row.required(3),
                row.get(4),
            )
        })
    });
    TableIterator::new(rows)
}
