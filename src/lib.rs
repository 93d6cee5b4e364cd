//! leaseq: a job queue inside PostgreSQL, with leases, fenced completion and attempt history.
//!
//! Each lifecycle module reads contract → SQL → function → tests, and runs its SQL through
//! `spi::connect` under the settings it names there (`spi::JOB_PATH` or `spi::WHOLE_QUEUE`).
// `#[pg_extern]` must see `RETURNS TABLE` column lists spelled out (it rejects type aliases).
#![allow(clippy::type_complexity)]

use pgrx::prelude::*;

::pgrx::pg_module_magic!();

// The install DDL, and what every step shares.
mod args; // argument checks, before any row is touched
mod backoff; // the retry policy, pure
mod datum; // raw jsonb, the SQL enums as Rust types
mod errors; // every SQLSTATE leaseq raises
mod schema; // sql/schema.sql: types, tables, indexes
mod settings; // leaseq.* GUCs
mod spi; // statements, settings, loud results, the clock
mod counters; // what happened to each queue since the server started (shared memory)

// The lifecycle, in order: a queue, a job enqueued, claimed (expired leases reclaimed), its lease
// renewed under the fence, finished — completed or failed, closing its attempt in history —,
// redriven when dead, cancelled, purged when old.
mod queue; // queue_create
mod enqueue; // queue_enqueue, queue_enqueue_batch
mod claim; // queue_claim (reclaim, claim, attempt numbers)
mod lease; // queue_renew, queue_renew_batch; the fence, in words
mod complete; // queue_complete, queue_complete_batch
mod fail; // queue_fail, queue_fail_batch
mod snooze; // queue_snooze
mod history; // how every close writes its attempt
mod redrive; // queue_redrive, queue_redrive_all
mod cancel; // queue_cancel
mod purge; // queue_purge
mod group; // ordered groups: which of a group's jobs may run, and when the next one may
mod schedule; // queue_schedule, queue_unschedule, queue_schedules; ticks materialised on claim

// Looking at it.
mod stats; // queue_stats
mod inspect; // queue_jobs, queue_job, queue_attempts
mod metrics; // metrics(): Prometheus text

// Without anyone claiming: the background worker (shared_preload_libraries).
mod maintenance; // reclaim, wake, retain

// Who may do what: group roles, per-queue grants (sql/privileges.sql).
mod access; // queue_grant, queue_revoke, queue_grants; the checks every function makes

extension_sql_file!("../sql/privileges.sql", name = "privileges", finalize);

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    settings::register();
    schema::register();
    access::register();
    counters::init();
    schedule::register();
    maintenance::register();
}

/// The lifecycle modules' sources and the install DDL, for tests that hold statements to a shape.
#[cfg(test)]
const SOURCES: &[&str] = &[
    include_str!("queue.rs"),
    include_str!("enqueue.rs"),
    include_str!("claim.rs"),
    include_str!("lease.rs"),
    include_str!("complete.rs"),
    include_str!("fail.rs"),
    include_str!("snooze.rs"),
    include_str!("redrive.rs"),
    include_str!("cancel.rs"),
    include_str!("purge.rs"),
    include_str!("schedule.rs"),
    include_str!("group.rs"),
    include_str!("stats.rs"),
    include_str!("inspect.rs"),
    include_str!("access.rs"),
    include_str!("metrics.rs"),
    include_str!("../sql/schema.sql"),
];

/// Required by `cargo pgrx test`.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec![]
    }
}
