//! Overview: each queue at a glance, for the console's first page — its live jobs by state, read
//! through the partial indexes as `metrics` reads them, and its last hour minute by minute from
//! the counters. Nothing here counts finished jobs: the cost follows the backlog, never the
//! history (a console that counts history stops loading at a few million jobs); and the counts
//! are kept for `leaseq.overview_max_age` (core/snapshots.rs), so that a page costs the same
//! however large the backlog.
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

use crate::core::access;
use crate::core::args;
use crate::core::clock;
use crate::core::connect::{self, JOB_PATH};
use crate::core::counters;
use crate::core::datum::QueuePrivilege;
use crate::core::settings;
use crate::core::snapshots::{self, Counted};
use crate::core::spi;
use crate::lifecycle::pause;
use crate::lifecycle::queue;
use crate::observe::metrics;

/// Every queue the caller may observe: whether it is paused; its due (`pending`) and future
/// (`scheduled`) pending jobs, running jobs and expired leases among them, dead, waiting and
/// blocked jobs; how long the longest-waiting due job has been due; when those were counted (at most
/// `leaseq.overview_max_age` ago); and its completions and failed attempts (lease expiries
/// included) over the last hour, from the counters (zero when the library is not preloaded;
/// since the server started when that is less than an hour).
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
        name!(blocked, i64),
        name!(oldest_pending_age, Option<Interval>),
        name!(counted_at, TimestampWithTimeZone),
        name!(completed_last_hour, i64),
        name!(failed_last_hour, i64),
    ),
> {
    let now = clock::now();
    let now_us: pg_sys::TimestampTz = now.into();
    let oldest_us = now_us - i64::from(settings::overview_max_age_ms()) * 1000;
    let mut rows = connect::connect(&JOB_PATH, |client| {
        let queues = spi::run(client, &queue::NAMES, &[]).map(|row| row.required::<String>(1));
        let kept: Option<Vec<Counted>> = queues
            .iter()
            .map(|queue| snapshots::read(queue, now_us, oldest_us))
            .collect();
        let counted = match kept {
            Some(kept) => queues.into_iter().zip(kept).collect(),
            None => count(client, now),
        };
        counted
            .into_iter()
            .map(|(queue, counted)| (pause::paused(client, &queue), queue, counted))
            .collect::<Vec<_>>()
    });
    // Asked as the caller, outside `connect` (which acts as the owner).
    rows.retain(|(_, queue, _)| access::allowed(queue, QueuePrivilege::Observe));
    let hour = counters::last_minutes(now, 60);
    TableIterator::new(rows.into_iter().map(move |(paused, queue, c)| {
        let (completed, failed) = hour.get(&queue).map_or((0, 0), |minutes| {
            minutes.iter().fold((0, 0), |(done, failed), m| {
                (done + m.completed as i64, failed + m.failed as i64)
            })
        });
        let oldest = c.oldest_due.map(|due| {
            Interval::new(0, 0, now_us.saturating_sub(due).max(0))
                .expect("the time since a job came due fits an interval")
        });
        (
            queue,
            paused,
            c.due,
            c.scheduled,
            c.running,
            c.expired,
            c.dead,
            c.waiting,
            c.blocked,
            oldest,
            clock::from_raw(c.counted_at),
            completed,
            failed,
        )
    }))
}

/// Counts every queue's gauges at `now` and keeps them for the next readers.
pub(crate) fn count(
    client: &mut SpiClient<'_>,
    now: TimestampWithTimeZone,
) -> Vec<(String, Counted)> {
    let counted = metrics::count(client, now);
    for (queue, c) in &counted {
        snapshots::store(queue, c);
    }
    counted
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

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use pgrx::prelude::*;

    /// The test server does not preload the library, as a default install: the overview counts
    /// on every call and the last hour reads zeros, never an error (it raised `XX000 PgLwLock
    /// was not initialized`, keeping the counts it had made).
    #[pg_test]
    fn without_preloading_the_overview_counts_on_every_call_and_the_hour_reads_zeros() {
        Spi::run(
            "SELECT leaseq.queue_create('viewed');
             SELECT leaseq.queue_enqueue('viewed', '{}');",
        )
        .expect("a queue with a due job");
        for _ in 0..2 {
            let pending = Spi::get_one::<i64>(
                "SELECT pending FROM leaseq.queue_overview() WHERE queue = 'viewed'",
            );
            assert_eq!(pending, Ok(Some(1)));
        }
        let hour = Spi::get_two::<i64, i64>(
            "SELECT count(*), sum(completed + failed)::bigint FROM leaseq.queue_throughput()
              WHERE queue = 'viewed'",
        );
        assert_eq!(hour, Ok((Some(60), Some(0))));
    }
}
