//! Snapshots: each queue's last counted gauges (jobs by state, expired leases, the oldest due
//! job), kept in shared memory with when they were counted, so that the console's overview costs
//! the same whatever the backlog: counting a queue's 10,000 pending jobs takes milliseconds, and
//! a page that counts on every load slows with the backlog (docs/benchmarks.md, section 17).
//!
//! A reader takes a queue's snapshot while it is younger than `leaseq.overview_max_age`; past it,
//! the reader counts again and stores what it counted. While someone reads them, the maintenance
//! worker counts ahead of the readers (admin/maintenance.rs), so that none of them waits for a
//! count. Each snapshot sits behind a sequence number, odd while a backend writes it: a reader
//! never takes half of one. Without shared memory (the library not preloaded) every read counts.
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use crate::core::counters;
use crate::core::datum::JobStatus;

/// What a snapshot holds of a queue, as counted at `counted_at` (µs on the server's clock).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counted {
    pub counted_at: i64,
    pub due: i64,
    pub scheduled: i64,
    pub running: i64,
    pub expired: i64,
    pub dead: i64,
    pub waiting: i64,
    pub blocked: i64,
    /// When the longest-waiting due job came due (µs), if one is due.
    pub oldest_due: Option<i64>,
}

impl Counted {
    /// Each gauged state and its count, in `JobStatus::ALL`'s order, as metrics and the console
    /// name them: every status but the two that end in history (succeeded, cancelled: the
    /// counters count them), pending split into due and scheduled. The match is exhaustive: a
    /// new status does not build until it is given a gauge here, or said to have none.
    pub fn states(&self) -> Vec<(&'static str, i64)> {
        JobStatus::ALL
            .iter()
            .flat_map(|status| match status {
                JobStatus::Pending => vec![("pending", self.due), ("scheduled", self.scheduled)],
                JobStatus::Running => vec![("running", self.running)],
                JobStatus::Dead => vec![("dead", self.dead)],
                JobStatus::Waiting => vec![("waiting", self.waiting)],
                JobStatus::Blocked => vec![("blocked", self.blocked)],
                JobStatus::Succeeded | JobStatus::Cancelled => vec![],
            })
            .collect()
    }
}

const VALUES: usize = 9;

#[repr(C)]
struct Snapshot {
    /// 0: never written; odd while a backend writes it.
    seq: AtomicU64,
    /// When a reader last asked for the queue's snapshot (µs): the maintenance worker counts
    /// ahead only while someone reads.
    read_at: AtomicI64,
    values: [AtomicI64; VALUES],
}

/// One snapshot per slot of `counters` (a queue of a database).
#[repr(C)]
pub struct Snapshots([Snapshot; counters::SLOTS]);

static mut SNAPSHOTS: *const Snapshots = std::ptr::null();

/// Called by `counters`' shared memory hook once the segment exists (zeroed: nothing counted).
///
/// # Safety
/// `segment` points to a zeroed `Snapshots` in shared memory that is never moved.
pub(crate) unsafe fn attach(segment: *const Snapshots) {
    // SAFETY: by the caller, once, before any backend starts.
    unsafe { SNAPSHOTS = segment };
}

fn snapshots() -> Option<&'static Snapshots> {
    // SAFETY: set once by `attach` before any backend starts, never moved.
    unsafe { SNAPSHOTS.as_ref() }.filter(|_| counters::kept())
}

fn encode(counted: &Counted) -> [i64; VALUES] {
    [
        counted.counted_at,
        counted.due,
        counted.scheduled,
        counted.running,
        counted.expired,
        counted.dead,
        counted.waiting,
        counted.blocked,
        counted.oldest_due.unwrap_or(i64::MIN),
    ]
}

fn decode(values: [i64; VALUES]) -> Counted {
    Counted {
        counted_at: values[0],
        due: values[1],
        scheduled: values[2],
        running: values[3],
        expired: values[4],
        dead: values[5],
        waiting: values[6],
        blocked: values[7],
        oldest_due: (values[8] != i64::MIN).then_some(values[8]),
    }
}

/// `queue`'s snapshot if one was counted at `oldest_us` or later, and not after `now_us` (a
/// clock moved back by the tests' `leaseq.clock_offset`); notes that it was asked for at
/// `now_us`. `None` when it is older, never written, being written, or not kept.
pub fn read(queue: &str, now_us: i64, oldest_us: i64) -> Option<Counted> {
    let snapshot = &snapshots()?.0[counters::slot(queue)?];
    snapshot.read_at.fetch_max(now_us, Ordering::Relaxed);
    let before = snapshot.seq.load(Ordering::Acquire);
    let values = snapshot
        .values
        .each_ref()
        .map(|v| v.load(Ordering::Acquire));
    let torn = before % 2 == 1 || snapshot.seq.load(Ordering::Acquire) != before;
    let counted = decode(values);
    let fresh = (oldest_us..=now_us).contains(&counted.counted_at);
    (before != 0 && !torn && fresh).then_some(counted)
}

/// Stores what was counted of `queue` — unless another backend is writing its snapshot at the
/// same moment (then theirs, as fresh, stands).
pub fn store(queue: &str, counted: &Counted) {
    // Not `zip`: its argument would ask for a slot even without shared memory.
    let Some(snapshot) = snapshots().and_then(|s| Some(&s.0[counters::slot(queue)?])) else {
        return;
    };
    let before = snapshot.seq.load(Ordering::Acquire);
    if before % 2 == 1
        || snapshot
            .seq
            .compare_exchange(before, before + 1, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
    {
        return;
    }
    for (value, new) in snapshot.values.iter().zip(encode(counted)) {
        value.store(new, Ordering::Release);
    }
    snapshot.seq.store(before + 2, Ordering::Release);
}

/// Whether a reader asked for a snapshot of this database's queues at `watched_since_us` or
/// later while it was counted before `fresh_since_us` (or never). Shared memory alone: the
/// maintenance worker asks on every tick.
pub fn wanted(watched_since_us: i64, fresh_since_us: i64) -> bool {
    let Some(snapshots) = snapshots() else {
        return false;
    };
    counters::slots_of_this_database().into_iter().any(|at| {
        let snapshot = &snapshots.0[at];
        snapshot.read_at.load(Ordering::Relaxed) >= watched_since_us
            && snapshot.values[0].load(Ordering::Acquire) < fresh_since_us
    })
}

#[cfg(test)]
mod unit_tests {
    use super::{Counted, decode, encode};

    #[test]
    fn a_snapshot_reads_back_what_was_stored_with_or_without_a_due_job() {
        let mut counted = Counted {
            counted_at: 1_000,
            due: 10,
            scheduled: 2,
            running: 3,
            expired: 1,
            dead: 4,
            waiting: 5,
            blocked: 6,
            oldest_due: Some(-7),
        };
        assert_eq!(decode(encode(&counted)), counted);
        counted.oldest_due = None;
        assert_eq!(decode(encode(&counted)), counted);
    }
}
