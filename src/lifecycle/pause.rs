//! Pause and resume: a paused queue's claims return nothing, while its enqueues still commit,
//! its leases run on and its running jobs still finish. Resuming wakes the queue's listening
//! workers (the enqueue's NOTIFY) so that they claim at once.
//!
//! Claims ask every backend's set of paused queues, read once and again after any change to
//! `leaseq.queues` (its trigger sends the invalidation, as for the grants and schedules): a claim
//! pays a set look-up, never a statement. A claim that began before the pause committed may still
//! take jobs. Schemas before 0.3.0 have no pauses.
use std::cell::RefCell;
use std::collections::HashSet;

use pgrx::prelude::*;
use pgrx::spi::SpiClient;

use crate::core::access;
use crate::core::args;
use crate::core::clock;
use crate::core::connect::{self, JOB_PATH};
use crate::core::datum::QueuePrivilege;
use crate::core::errors;
use crate::core::release::{self, Release};
use crate::core::settings;
use crate::core::spi::{self, BOOL, Statement, TEXT, TIMESTAMPTZ};
use crate::lifecycle::queue;

/// Whether `queue` is paused, its row locked until the caller's transaction ends: two pauses
/// of one queue decide one after the other. No row: no such queue.
pub(crate) const LOCK: Statement = Statement {
    name: "pause.lock",
    sql: "SELECT queue.paused FROM leaseq.queues AS queue WHERE queue.name = $1 FOR UPDATE",
    params: &[TEXT],
};

/// Pauses (`$2` true) or resumes the queue; a resume notifies its channel when notifications are
/// on (`$4`).
pub(crate) const SET: Statement = Statement {
    name: "pause.set",
    sql: "UPDATE leaseq.queues AS queue
             SET paused = $2, updated_at = $3
           WHERE queue.name = $1
          RETURNING CASE WHEN NOT $2 AND $4 THEN pg_catalog.pg_notify('leaseq_' || $1, '') END",
    params: &[TEXT, BOOL, TIMESTAMPTZ, BOOL],
};

pub(crate) const PAUSED: Statement = Statement {
    name: "pause.paused",
    sql: "SELECT queue.name FROM leaseq.queues AS queue WHERE queue.paused",
    params: &[],
};

/// Pauses `queue`: its claims return no jobs until `queue_resume`. True when it was running,
/// false when it was already paused.
///
/// Errors: `22004` NULL queue, `22023` invalid name, `42704` unknown queue, `42501` without the
/// queue's `admin` privilege.
#[pg_extern]
pub fn queue_pause(queue: Option<&str>) -> bool {
    !pause_with(queue, true, "queue_pause")
}

/// Resumes `queue` and wakes its listening workers. True when it was paused, false when it was
/// running.
///
/// Errors: as `queue_pause`.
#[pg_extern]
pub fn queue_resume(queue: Option<&str>) -> bool {
    pause_with(queue, false, "queue_resume")
}

/// Sets whether `queue` is paused; returns whether it was.
fn pause_with(queue: Option<&str>, paused: bool, function: &str) -> bool {
    let queue = args::queue_name(function, queue);
    let now = clock::now();
    access::require_queue(function, queue, QueuePrivilege::Admin);
    connect::connect(&JOB_PATH, |client| {
        let was = spi::run(client, &LOCK, &[queue.into()])
            .first(|row| row.required::<bool>(1))
            .unwrap_or_else(|| errors::unknown_queue(function, queue));
        if was != paused {
            let notify = settings::notify();
            spi::run(
                client,
                &SET,
                &[queue.into(), paused.into(), now.into(), notify.into()],
            );
        }
        was
    })
}

thread_local! {
    // Per backend: the paused queues, and the count of changes to leaseq.queues they were read at
    // (`queue::queues_read_at`).
    static PAUSED_READ: RefCell<Option<(u64, HashSet<String>)>> = const { RefCell::new(None) };
}

/// Whether `queue` is paused.
pub fn paused(client: &mut SpiClient<'_>, queue: &str) -> bool {
    let seen = queue::queues_changes();
    let known = PAUSED_READ.with_borrow(|p| {
        p.as_ref()
            .filter(|(at, _)| *at == seen)
            .map(|(_, set)| set.contains(queue))
    });
    if let Some(known) = known {
        return known;
    }
    let seen = queue::queues_read_at();
    let read: HashSet<String> = if release::current(client) >= Release::V0_3_0 {
        spi::run_latest(client, &PAUSED, &[])
            .map(|row| row.required::<String>(1))
            .into_iter()
            .collect()
    } else {
        HashSet::new()
    };
    let is_paused = read.contains(queue);
    PAUSED_READ.set(Some((seen, read)));
    is_paused
}
