//! Queues: named settings that every job of the queue follows.
//!
//! `queue_create` creates a queue or, when it exists, replaces its settings. New settings apply
//! to leases taken and retries scheduled from then on; a job keeps the `max_attempts` it was
//! enqueued with.
use std::cell::{Cell, RefCell};
use std::collections::HashMap;

use pgrx::prelude::*;
use pgrx::spi::SpiClient;

use crate::core::access;
use crate::core::args;
use crate::core::backoff::BackoffPolicy;
use crate::core::clock;
use crate::core::connect::{self, JOB_PATH};
use crate::core::datum::QueuePrivilege;
use crate::core::errors;
use crate::core::release::{self, Release};
use crate::core::schema;
use crate::core::spi::{self, INT4, INTERVAL, Statement, TEXT};
use crate::lifecycle::group;

pub(crate) const UPSERT: Statement = Statement {
    name: "queue_create",
    sql: "INSERT INTO leaseq.queues AS queue
                 (name, lease, max_attempts, backoff_base, backoff_cap, retain, max_snoozes,
                  group_concurrency)
          VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
          ON CONFLICT (name) DO UPDATE
             SET lease = EXCLUDED.lease,
                 max_attempts = EXCLUDED.max_attempts,
                 backoff_base = EXCLUDED.backoff_base,
                 backoff_cap = EXCLUDED.backoff_cap,
                 retain = EXCLUDED.retain,
                 max_snoozes = EXCLUDED.max_snoozes,
                 group_concurrency = EXCLUDED.group_concurrency,
                 updated_at = clock_timestamp()",
    params: &[
        TEXT, INTERVAL, INT4, INTERVAL, INTERVAL, INTERVAL, INT4, INT4,
    ],
};

pub(crate) const NAMES: Statement = Statement {
    name: "queue.names",
    sql: "SELECT queue.name FROM leaseq.queues AS queue ORDER BY queue.name",
    params: &[],
};

pub(crate) const LOAD: Statement = Statement {
    name: "queue.load",
    sql: "SELECT queue.lease, queue.backoff_base, queue.backoff_cap
            FROM leaseq.queues AS queue
           WHERE queue.name = $1",
    params: &[TEXT],
};

/// Creates the queue `queue`, or replaces the settings of an existing one.
///
/// - `lease`: how long a claim owns a job before it may be reclaimed; `(0, 1 day]`.
/// - `max_attempts`: the retry budget of each job (claims per life); at least 1.
/// - `backoff_base`, `backoff_cap`: retry `n` waits a uniformly random time in
///   `[0, min(backoff_cap, backoff_base · 2^(n−1))]`; both in `(0, 30 days]`, base ≤ cap.
/// - `retain`: how long succeeded and cancelled jobs are kept once finished, `(0, 100 years]`;
///   the maintenance worker purges older ones (`maintenance`). NULL: kept until `queue_purge`.
/// - `max_snoozes`: how many times a job may snooze (`snooze`) before it goes dead; at least 0.
///   NULL: unlimited.
/// - `group_concurrency`: how many jobs of one group (`group`) may be pending or running at
///   once, 1 to 1000. Raised, waiting jobs are admitted at once; lowered, the jobs already
///   admitted keep their place and no other is admitted until the group is under it.
///
/// Errors: `22004` NULL argument, `22023` invalid name or out-of-range setting.
// Every argument is one of the SQL function's.
#[allow(clippy::too_many_arguments)]
#[pg_extern(name = "queue_create")]
pub fn create_queue(
    queue: Option<&str>,
    lease: default!(Option<Interval>, "'30 seconds'"),
    max_attempts: default!(Option<i32>, 5),
    backoff_base: default!(Option<Interval>, "'1 second'"),
    backoff_cap: default!(Option<Interval>, "'5 minutes'"),
    retain: default!(Option<Interval>, "NULL"),
    max_snoozes: default!(Option<i32>, "NULL"),
    group_concurrency: default!(Option<i32>, 1),
) {
    const F: &str = "queue_create";
    let queue = args::queue_name(F, queue);
    let (lease, max_attempts, backoff_base, backoff_cap) =
        checked_settings(F, lease, max_attempts, backoff_base, backoff_cap);
    if let Some(retain) = retain {
        args::interval_in_range(F, "retain", retain, false, MAX_RETAIN_MICROS, "100 years");
    }
    if let Some(max_snoozes) = max_snoozes {
        let unlimited = Some(" (NULL: unlimited)");
        args::int_in_range(F, "max_snoozes", max_snoozes, 0..=i32::MAX, unlimited);
    }
    let group_concurrency = args::required(F, "group_concurrency", group_concurrency);
    args::int_in_range(F, "group_concurrency", group_concurrency, 1..=1000, None);
    let now = clock::now();
    access::require_queue(F, queue, QueuePrivilege::Admin);
    connect::connect(&JOB_PATH, |client| {
        spi::run(
            client,
            &UPSERT,
            &[
                queue.into(),
                lease.into(),
                max_attempts.into(),
                backoff_base.into(),
                backoff_cap.into(),
                retain.into(),
                max_snoozes.into(),
                group_concurrency.into(),
            ],
        );
        group::resized(client, queue, now);
    });
}

/// The longest `retain`: 100 years, counted as intervals count them (a month is 30 days).
const MAX_RETAIN_MICROS: i128 = 100 * 12 * 30 * args::MICROS_PER_DAY;

/// The settings both `queue_create`s take, each required and in its range.
pub(crate) fn checked_settings(
    function: &str,
    lease: Option<Interval>,
    max_attempts: Option<i32>,
    backoff_base: Option<Interval>,
    backoff_cap: Option<Interval>,
) -> (Interval, i32, Interval, Interval) {
    let lease = args::required(function, "lease", lease);
    let max_attempts = args::required(function, "max_attempts", max_attempts);
    let backoff_base = args::required(function, "backoff_base", backoff_base);
    let backoff_cap = args::required(function, "backoff_cap", backoff_cap);
    args::lease(function, lease);
    args::max_attempts(function, max_attempts);
    let base = args::interval_in_range(
        function,
        "backoff_base",
        backoff_base,
        false,
        args::MAX_DELAY_MICROS,
        "30 days",
    );
    let cap = args::interval_in_range(
        function,
        "backoff_cap",
        backoff_cap,
        false,
        args::MAX_DELAY_MICROS,
        "30 days",
    );
    if base > cap {
        errors::invalid_argument(
            function,
            "backoff_base",
            "must not be greater than backoff_cap",
        );
    }
    (lease, max_attempts, backoff_base, backoff_cap)
}

/// A queue's settings, as the lifecycle steps use them.
#[derive(Clone, Copy)]
pub struct Queue {
    pub lease: Interval,
    pub backoff: BackoffPolicy,
}

/// The settings of `queue`, or `42704` when it does not exist.
pub fn load(client: &mut SpiClient<'_>, function: &str, queue: &str) -> Queue {
    spi::run(client, &LOAD, &[queue.into()])
        .first(loaded)
        .unwrap_or_else(|| errors::unknown_queue(function, queue))
}

/// A row of `LOAD`.
pub(crate) fn loaded(row: &spi::Row<'_>) -> Queue {
    Queue {
        lease: row.required(1),
        backoff: backoff_policy(row.required(2), row.required(3)),
    }
}

thread_local! {
    // Per backend: how many relcache invalidations of leaseq.queues it has seen (from 0.3.0 on,
    // the table's trigger sends one for every change), and the table's OID, noted when read.
    static QUEUES_CHANGES: Cell<u64> = const { Cell::new(0) };
    static QUEUES_TABLE: Cell<pg_sys::Oid> = const { Cell::new(pg_sys::InvalidOid) };
    // The settings `cached` read, by queue, and the count of changes they were read at.
    static CACHED: RefCell<(u64, HashMap<String, Queue>)> = RefCell::new((0, HashMap::new()));
}

/// The count of changes to `leaseq.queues` this backend has seen: what it keeps of the table
/// holds while the count stays the one `queues_read_at` gave before the read.
pub fn queues_changes() -> u64 {
    QUEUES_CHANGES.get()
}

/// Before a read of `leaseq.queues` to keep: notes the table's OID for the invalidation and
/// returns the count to keep the read at. (An invalidation processed during the read, when its
/// statement locks the table, is of a change the read's snapshot may miss.)
pub fn queues_read_at() -> u64 {
    QUEUES_TABLE.set(schema::table_oid(c"queues"));
    QUEUES_CHANGES.get()
}

/// `load`, read once per backend and again after any change to `leaseq.queues`, under the latest
/// snapshot (what a backend keeps past its transaction, `spi::run_latest`): for a claim that
/// finds no lease to reclaim, which then runs no statement for its queue's settings. Schemas
/// before 0.3.0 send no invalidation: their settings are read each time.
pub fn cached(client: &mut SpiClient<'_>, function: &str, queue: &str) -> Queue {
    let seen = queues_changes();
    let known = CACHED.with_borrow(|(at, c)| c.get(queue).copied().filter(|_| *at == seen));
    if let Some(known) = known {
        return known;
    }
    if release::current(client) < Release::V0_3_0 {
        return load(client, function, queue);
    }
    let seen = queues_read_at();
    let settings = spi::run_latest(client, &LOAD, &[queue.into()])
        .first(loaded)
        .unwrap_or_else(|| errors::unknown_queue(function, queue));
    CACHED.with_borrow_mut(|(at, c)| {
        if *at != seen {
            c.clear();
            *at = seen;
        }
        c.insert(queue.to_owned(), settings);
    });
    settings
}

/// Registers the invalidation that counts the changes to `leaseq.queues`.
pub fn register() {
    #[pg_guard]
    unsafe extern "C-unwind" fn changed(_arg: pg_sys::Datum, relation: pg_sys::Oid) {
        if schema::concerns(relation, QUEUES_TABLE.get()) {
            QUEUES_CHANGES.set(QUEUES_CHANGES.get() + 1);
        }
    }
    // SAFETY: called once per backend, from _PG_init; the callback only counts.
    unsafe { pg_sys::CacheRegisterRelcacheCallback(Some(changed), pg_sys::Datum::from(0)) };
}

/// The policy of a queue's `backoff_base` and `backoff_cap` columns.
pub fn backoff_policy(base: Interval, cap: Interval) -> BackoffPolicy {
    BackoffPolicy {
        base_micros: args::interval_micros(base) as i64,
        cap_micros: args::interval_micros(cap) as i64,
    }
}
