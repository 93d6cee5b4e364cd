//! Maintenance: with `shared_preload_libraries = 'leaseq'`, one background worker per database
//! named in `leaseq.maintenance_databases`, so that nothing waits for somebody to claim:
//!
//! - every queue's expired leases are reclaimed within about a second of expiry, exactly as a
//!   claim reclaims them (`claim::reclaim_expired`: history, backoff, budget), and the queue's
//!   workers are woken;
//! - a queue's workers are woken (`NOTIFY leaseq_<queue>`) when scheduled or retried jobs come
//!   due, so idle workers need no fast poll (they keep a slow one as a safety net);
//! - each queue's `retain` is applied: succeeded and cancelled jobs that finished longer ago are
//!   purged with their history, `PURGE_BATCH` at a time;
//! - every schedule's due ticks are enqueued, as a claim enqueues them (`schedule::materialize`);
//! - while someone reads `queue_overview`, every queue's live jobs are counted ahead of the
//!   readers (core/snapshots.rs), with at most a tenth of the worker's time.
//!
//! Every action runs in its own short transaction, and the worker sleeps outside any. It logs one
//! line per action that did something, at `LOG`, and reads the configuration again on SIGHUP
//! (`pg_reload_conf()`). The postmaster restarts it after a crash, a
//! server crash-restart or `pg_terminate_backend` (it exits with status 1 on SIGTERM: 0 would
//! unregister it). Without it everything works as before: claims reclaim, workers poll,
//! `queue_purge` purges.
use std::time::Duration;

use pgrx::bgworkers::{
    BackgroundWorker, BackgroundWorkerBuilder, BgWorkerStartTime, SignalWakeFlags,
};
use pgrx::prelude::*;

use crate::core::args;
use crate::core::clock;
use crate::core::connect::{self, JOB_PATH, WHOLE_QUEUE};
use crate::core::release::{self, Release};
use crate::core::settings;
use crate::core::snapshots;
use crate::core::spi::{self, Statement, TEXT, TIMESTAMPTZ};
use crate::lifecycle::claim::{self, RECLAIM_BATCH};
use crate::lifecycle::purge;
use crate::lifecycle::schedule;
use crate::observe::overview;

/// How often the worker looks: an expired lease waits at most this long for it.
const TICK: Duration = Duration::from_millis(250);
/// Jobs purged per transaction, and transactions per queue and tick.
const PURGE_BATCH: i32 = 1000;
const PURGE_BATCHES_PER_TICK: usize = 10;
/// How long after a reader's last look at the overview the worker goes on counting ahead.
const WATCHED_US: i64 = 60_000_000;
/// Counting ahead takes at most one part in this many of the worker's time.
const COUNT_SHARE: i64 = 10;
/// After a crash or a termination, the postmaster starts the worker again this much later.
const RESTART: Duration = Duration::from_secs(2);

/// Every queue, for `reclaim`: those with an expired lease probe them — or sweep them while their
/// probe is slow (a snapshot holding the horizon back), which an EXISTS over them would not.
pub(crate) const QUEUES: Statement = Statement {
    name: "maintenance.queues",
    sql: "SELECT queue.name FROM leaseq.queues AS queue ORDER BY queue.name",
    params: &[],
};

/// Queues with a job that came due in `($1, $2]` after waiting (scheduled, or retried): the
/// scheduled-jobs index, one probe each.
pub(crate) const CAME_DUE: Statement = Statement {
    name: "maintenance.came_due",
    sql: "SELECT queue.name FROM leaseq.queues AS queue
           WHERE EXISTS (SELECT FROM leaseq.jobs AS job
                          WHERE job.queue = queue.name AND job.lane = 'pending'
                            AND job.run_at > job.created_at
                            AND job.run_at > $1 AND job.run_at <= $2)
           ORDER BY queue.name",
    params: &[TIMESTAMPTZ, TIMESTAMPTZ],
};

/// Wakes the workers listening on the queue's channel, at commit.
pub(crate) const WAKE: Statement = Statement {
    name: "maintenance.wake",
    sql: "SELECT pg_catalog.pg_notify('leaseq_' || $1, '')",
    params: &[TEXT],
};

/// Queues that keep finished jobs for a while, with how long.
pub(crate) const RETAINING: Statement = Statement {
    name: "maintenance.retaining",
    sql: "SELECT queue.name, queue.retain FROM leaseq.queues AS queue
           WHERE queue.retain IS NOT NULL
           ORDER BY queue.name",
    params: &[],
};

/// Registers one worker per database of `leaseq.maintenance_databases` (from `_PG_init`, when
/// the library is preloaded: only then may it register workers).
pub fn register() {
    // SAFETY: a flag PostgreSQL sets while it loads shared_preload_libraries.
    if !unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        return;
    }
    for database in settings::maintenance_databases() {
        if database.len() >= pg_sys::BGW_EXTRALEN as usize {
            warning!("leaseq.maintenance_databases: database name too long: {database}");
            continue;
        }
        BackgroundWorkerBuilder::new(&format!("leaseq maintenance {database}"))
            .set_type("leaseq maintenance")
            .set_library("leaseq")
            .set_function("leaseq_maintenance_main")
            .set_extra(&database)
            .enable_spi_access()
            .set_start_time(BgWorkerStartTime::RecoveryFinished)
            .set_restart_time(Some(RESTART))
            .load();
    }
}

/// The worker's life: connect, then act every `TICK` until SIGTERM.
#[pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn leaseq_maintenance_main(_argument: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    let database = BackgroundWorker::get_extra().to_string();
    BackgroundWorker::connect_worker_to_spi(Some(&database), None);
    log!("leaseq maintenance: started on database \"{database}\"");
    let mut looked = clock::plus_micros(clock::now(), -(TICK.as_micros() as i64));
    let mut said_not_installed = false;
    let mut next_count_us = i64::MIN;
    while BackgroundWorker::wait_latch(Some(TICK)) {
        if BackgroundWorker::sighup_received() {
            // pg_reload_conf(): the handler only set a flag; the settings are read here, between
            // transactions, as PostgreSQL's own workers do.
            // SAFETY: outside any transaction, in the worker's main loop.
            unsafe { pg_sys::ProcessConfigFile(pg_sys::GucContext::PGC_SIGHUP) };
            log!("leaseq maintenance: configuration reloaded");
        }
        let now = clock::now();
        // The worker knows the schema of 0.2.0 on (retention, schedules); under 0.1.0 it waits.
        let installed =
            BackgroundWorker::transaction(|| connect::connect(&JOB_PATH, release::installed));
        if !installed.is_some_and(Release::has_0_2_0_tables) {
            if !said_not_installed {
                log!(
                    "leaseq maintenance: leaseq 0.2.0 or later is not installed in \"{database}\"; waiting"
                );
                said_not_installed = true;
            }
            continue;
        }
        said_not_installed = false;
        reclaim(now);
        materialize(now);
        wake(looked, now);
        retain(now);
        count_ahead(now, &mut next_count_us);
        looked = now;
    }
    log!("leaseq maintenance: stopping on database \"{database}\"");
    // SAFETY: ends this process; 1 asks the postmaster to start the worker again (it does not
    // while the server shuts down).
    unsafe { pg_sys::proc_exit(1) };
}

/// Every queue's expired leases, `RECLAIM_BATCH` per transaction; their workers woken.
fn reclaim(now: TimestampWithTimeZone) {
    let queues = BackgroundWorker::transaction(|| {
        connect::connect(&JOB_PATH, |client| {
            let queues = spi::run(client, &QUEUES, &[]).map(|row| row.required::<String>(1));
            // Only queues whose lease may have ended: read from the index alone, so that a held
            // snapshot's dead range costs nothing here.
            let now: pg_sys::TimestampTz = now.into();
            queues
                .into_iter()
                .filter(|queue| claim::lease_may_have_ended(queue, now))
                .collect::<Vec<_>>()
        })
    });
    for queue in queues {
        let (mut jobs, mut dead) = (0, 0);
        loop {
            let done = BackgroundWorker::transaction(|| {
                connect::connect(&JOB_PATH, |client| {
                    let done = claim::reclaim_unless_slow(client, &queue, now, 0);
                    if done.jobs > done.dead {
                        spi::run(client, &WAKE, &[queue.as_str().into()]);
                    }
                    (done.jobs, done.dead)
                })
            });
            jobs += done.0;
            dead += done.1;
            if done.0 < RECLAIM_BATCH {
                break;
            }
        }
        if jobs > 0 {
            log!(
                "leaseq maintenance: reclaimed {jobs} expired lease(s) in queue \"{queue}\", {dead} of the jobs dead"
            );
        }
    }
}

/// Enqueues every schedule's due ticks (`schedule`), in one transaction.
fn materialize(now: TimestampWithTimeZone) {
    let enqueued = BackgroundWorker::transaction(|| {
        connect::connect(&JOB_PATH, |client| schedule::materialize(client, None, now))
    });
    if enqueued > 0 {
        log!("leaseq maintenance: enqueued {enqueued} scheduled job(s)");
    }
}

/// Wakes the workers of every queue where a waiting job came due in `(since, now]`.
fn wake(since: TimestampWithTimeZone, now: TimestampWithTimeZone) {
    let woken = BackgroundWorker::transaction(|| {
        connect::connect(&JOB_PATH, |client| {
            let queues = spi::run(client, &CAME_DUE, &[since.into(), now.into()])
                .map(|row| row.required::<String>(1));
            for queue in &queues {
                spi::run(client, &WAKE, &[queue.as_str().into()]);
            }
            queues
        })
    });
    if !woken.is_empty() {
        log!(
            "leaseq maintenance: jobs came due in {}: woke their workers",
            woken.join(", ")
        );
    }
}

/// While the overview is read, counts every queue's gauges before its snapshots are half
/// `leaseq.overview_max_age` old; then waits `COUNT_SHARE` times as long as the count took.
fn count_ahead(now: TimestampWithTimeZone, next_count_us: &mut i64) {
    let now_us: pg_sys::TimestampTz = now.into();
    let max_age_us = i64::from(settings::overview_max_age_ms()) * 1000;
    if now_us < *next_count_us
        || max_age_us == 0
        || !snapshots::wanted(now_us - WATCHED_US, now_us - max_age_us / 2)
    {
        return;
    }
    let started = std::time::Instant::now();
    BackgroundWorker::transaction(|| {
        connect::connect(&JOB_PATH, |client| overview::count(client, now))
    });
    *next_count_us = now_us + COUNT_SHARE * started.elapsed().as_micros() as i64;
}

/// Applies each queue's `retain`.
fn retain(now: TimestampWithTimeZone) {
    let queues = BackgroundWorker::transaction(|| {
        connect::connect(&WHOLE_QUEUE, |client| {
            spi::run(client, &RETAINING, &[])
                .map(|row| (row.required::<String>(1), row.required::<Interval>(2)))
        })
    });
    for (queue, retain) in queues {
        let raw: pg_sys::TimestampTz = now.into();
        let cutoff = TimestampWithTimeZone::try_from(
            (raw as i128 - args::interval_micros(retain)).max(i64::MIN as i128) as i64,
        )
        .unwrap_or_else(|_| TimestampWithTimeZone::negative_infinity());
        let mut purged = 0;
        for _ in 0..PURGE_BATCHES_PER_TICK {
            let deleted: i64 = BackgroundWorker::transaction(|| {
                connect::connect(&WHOLE_QUEUE, |client| {
                    purge::purge(client, &queue, cutoff, PURGE_BATCH)
                })
            });
            purged += deleted;
            if deleted < i64::from(PURGE_BATCH) {
                break;
            }
        }
        if purged > 0 {
            log!(
                "leaseq maintenance: purged {purged} finished job(s) of queue \"{queue}\" (retain {retain})"
            );
        }
    }
}
