//! Overview: each queue at a glance, for the console's first page — its live jobs by state, read
//! through the partial indexes as `metrics` reads them, and its last hour minute by minute from
//! the counters. Nothing here counts finished jobs: the cost follows the backlog, never the
//! history (a console that counts history stops loading at a few million jobs).
use pgrx::prelude::*;

use crate::core::access;
use crate::core::args;
use crate::core::clock;
use crate::core::connect::{self, JOB_PATH};
use crate::core::counters;
use crate::core::datum::QueuePrivilege;
use crate::core::spi;
use crate::lifecycle::pause;
use crate::lifecycle::queue;
use crate::observe::metrics::GAUGES;

/// Every queue the caller may observe: whether it is paused; its due (`pending`) and future
/// (`scheduled`) pending jobs, running jobs and expired leases among them, dead and waiting
/// jobs; how long the longest-waiting due job has been due; and its completions and failed
/// attempts (lease expiries included) over the last hour, from the counters (zero when the
/// library is not preloaded; since the server started when that is less than an hour).
#[pg_extern]
pub fn queue_overview() -> TableIterator<
    'static,
    (
        name!(queue, String),
        name!(paused, bool),
        name!(pending, i64),
        name!(scheduled, i64),
        name!(running, i64),
        name!(expired_leases, i64),
        name!(dead, i64),
        name!(waiting, i64),
        name!(oldest_pending_age, Option<Interval>),
        name!(completed_last_hour, i64),
        name!(failed_last_hour, i64),
    ),
> {
    let now = clock::now();
    let mut rows = connect::connect(&JOB_PATH, |client| {
        let gauges = spi::run(client, &GAUGES, &[now.into()]).map(|row| {
            let oldest_seconds: Option<f64> = row.get(7);
            (
                row.required::<String>(1),
                row.required::<i64>(2),
                row.required::<i64>(3),
                row.required::<i64>(4),
                row.required::<i64>(5),
                row.required::<i64>(6),
                row.required::<i64>(8),
                oldest_seconds,
            )
        });
        gauges
            .into_iter()
            .map(|g| {
                let paused = pause::paused(client, &g.0);
                (g, paused)
            })
            .collect::<Vec<_>>()
    });
    rows.retain(|(g, _)| access::allowed(&g.0, QueuePrivilege::Observe));
    let hour = counters::last_minutes(now, 60);
    TableIterator::new(rows.into_iter().map(move |(g, paused)| {
        let (completed, failed) = hour.get(&g.0).map_or((0, 0), |minutes| {
            minutes.iter().fold((0, 0), |(c, f), m| {
                (c + m.completed as i64, f + m.failed as i64)
            })
        });
        let oldest = g.7.map(|seconds| {
            Interval::new(0, 0, (seconds * 1_000_000.0).round() as i64)
                .expect("an age in seconds read from an interval fits an interval")
        });
        (
            g.0, paused, g.1, g.2, g.3, g.4, g.5, g.6, oldest, completed, failed,
        )
    }))
}

/// The last `minutes` minutes (1 to 60, the current one last) of every queue the caller may
/// observe, a row per queue and minute, zeros included: when the minute began, jobs completed
/// and attempts failed (lease expiries included) in it. From the counters: zeros when the
/// library is not preloaded, and for a queue beyond the first 1,024 of the server to count.
///
/// Errors: `22004` NULL minutes, `22023` minutes outside 1..=60.
#[pg_extern]
pub fn queue_throughput(
    minutes: default!(Option<i32>, 60),
) -> TableIterator<
    'static,
    (
        name!(queue, String),
        name!(minute, TimestampWithTimeZone),
        name!(completed, i64),
        name!(failed, i64),
    ),
> {
    const F: &str = "queue_throughput";
    let minutes = args::required(F, "minutes", minutes);
    args::int_in_range(F, "minutes", minutes, 1..=60, None);
    let now = clock::now();
    let mut queues = connect::connect(&JOB_PATH, |client| {
        spi::run(client, &queue::NAMES, &[]).map(|row| row.required::<String>(1))
    });
    queues.retain(|queue| access::allowed(queue, QueuePrivilege::Observe));
    let counted = counters::last_minutes(now, minutes as usize);
    // A queue that has counted nothing yet has the same minutes, empty.
    let empty: Vec<counters::Minute> = counters::last_minutes_empty(now, minutes as usize);
    let mut rows = Vec::with_capacity(queues.len() * minutes as usize);
    for queue in queues {
        for m in counted.get(&queue).unwrap_or(&empty) {
            rows.push((
                queue.clone(),
                clock::from_raw(m.began_at),
                m.completed as i64,
                m.failed as i64,
            ));
        }
    }
    TableIterator::new(rows)
}
