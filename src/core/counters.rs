//! Counters: what has happened to each queue's jobs since the server started — jobs enqueued,
//! completed, attempts failed, jobs gone dead, leases expired — and how many attempts each
//! success took, for `metrics`.
//!
//! They live in shared memory and are counted as the functions act, like PostgreSQL's own
//! statistics counters: a call whose transaction then rolls back has still been counted, and a
//! restart starts them at zero (Prometheus reads both as a counter's normal life). Reading them
//! costs the same however long the history. Shared memory exists only when the library is loaded
//! by `shared_preload_libraries = 'leaseq'`; without it nothing is counted and `metrics` reports
//! the gauges alone.
//!
//! Each queue also keeps its last hour minute by minute — completions, and failed attempts
//! (lease expiries included) — for the console's throughput chart (`queue_throughput`): one
//! word per minute, tagged with the minute it counts, so a reader skips what a quiet queue
//! left from an earlier hour and nobody has to clear a bucket.
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};

use pgrx::prelude::*;
use pgrx::{PGRXSharedMemory, PgLwLock, pg_shmem_init};

use crate::core::snapshots::{self, Snapshots};
use crate::core::wake;

/// What is counted, per queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    Enqueued,
    Completed,
    /// An attempt that failed (retried or not).
    Failed,
    /// A job that went `dead` (its budget spent, or failed without retry).
    Dead,
    /// An attempt whose lease ran out, reclaimed.
    LeaseExpired,
    /// An attempt that snoozed.
    Snoozed,
    /// A claim statement that started at the head of the due index, and one that started after
    /// its session's cursor (lifecycle/claim.rs): the claim path's mode, as rates.
    ClaimedFromHead,
    ClaimedAfterCursor,
    /// A claim that skipped its probe of expired leases, the last one having been slow.
    ProbeSkipped,
    /// A step of a queue's sweep of its due index or of its expired leases (lifecycle/claim.rs).
    SweepStep,
}

pub const EVENTS: [Event; 10] = [
    Event::Enqueued,
    Event::Completed,
    Event::Failed,
    Event::Dead,
    Event::LeaseExpired,
    Event::Snoozed,
    Event::ClaimedFromHead,
    Event::ClaimedAfterCursor,
    Event::ProbeSkipped,
    Event::SweepStep,
];

/// Upper bounds of the histogram of attempts per success (and +Inf).
pub const ATTEMPT_BOUNDS: [i64; 5] = [1, 2, 3, 5, 10];

/// Queues counted per server, over all its databases; a queue beyond them is not counted.
pub(crate) const SLOTS: usize = 4096;
/// Queue names are at most 48 bytes (`args::queue_name`).
const NAME: usize = 48;

#[repr(C)]
struct Slot {
    /// Non-zero once `database` and `name` are written (under the exclusive lock).
    used: AtomicU32,
    database: u32,
    name_len: u32,
    name: [u8; NAME],
    events: [AtomicU64; EVENTS.len()],
    /// Successes by attempts, one per bound of `ATTEMPT_BOUNDS` and one beyond (not cumulative).
    attempts: [AtomicU64; ATTEMPT_BOUNDS.len() + 1],
    attempts_sum: AtomicU64,
    /// When the queue's next scan of each kind of `Scan` is due, µs on the server's clock.
    turns: [AtomicI64; 2],
    /// Jobs the queue's claims have asked for (their batches): the clock of the sweeps' budget.
    asked: AtomicU64,
    /// Per `Scan`, what lets its sweep's next step run: `asked` reaching the first, or the
    /// server's clock (µs) the second (`spend_sweep_budget`).
    budget: [(AtomicU64, AtomicI64); 2],
    /// Which of `MINUTES`' rings is the queue's, plus one; 0 while it has none.
    ring: AtomicU32,
}

/// Queues whose last hour is kept minute by minute, per server: the first ones to count an
/// outcome get a ring. A segment of its own (see `Keys`), 480 bytes a queue.
const RINGS: usize = 1024;

/// The last hour of `RINGS` queues: per ring, a word per minute (`minute % 60`) packing the
/// minute's number mod 2^16, then completions and failed attempts, 24 bits each (saturating:
/// 280,000 a second). Atomics only, so no lock; zeroed in place by `minutes_startup` (pgrx's
/// `pg_shmem_init!` builds a segment's value on the postmaster's stack, and each segment's hook
/// runs inside the one before: a third segment overflowed it in a debug build).
#[repr(C)]
pub struct Minutes {
    /// Rings handed out so far.
    taken: AtomicU32,
    rings: [[AtomicU64; 60]; RINGS],
}

static mut MINUTES: *const Minutes = std::ptr::null();
static mut PREV_SHMEM_REQUEST: Option<unsafe extern "C-unwind" fn()> = None;
static mut PREV_SHMEM_STARTUP: Option<unsafe extern "C-unwind" fn()> = None;

#[pg_guard]
unsafe extern "C-unwind" fn minutes_request() {
    // SAFETY: PostgreSQL calls the hook once in the postmaster, while it sizes shared memory;
    // the previous hook was saved by `init` before this one was installed.
    unsafe {
        if let Some(previous) = PREV_SHMEM_REQUEST {
            previous();
        }
        pg_sys::RequestAddinShmemSpace(std::mem::size_of::<Minutes>());
        pg_sys::RequestAddinShmemSpace(std::mem::size_of::<Snapshots>());
        pg_sys::RequestAddinShmemSpace(std::mem::size_of::<wake::Waits>());
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn minutes_startup() {
    // SAFETY: as pgrx's own segments do (AddinShmemInitLock, MainLWLockArray[21]): the segment
    // is found or made under the lock and zeroed once, all zeroes being no ring and no minute.
    unsafe {
        if let Some(previous) = PREV_SHMEM_STARTUP {
            previous();
        }
        let lock = &raw mut (*pg_sys::MainLWLockArray.add(21)).lock;
        pg_sys::LWLockAcquire(lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        MINUTES = zeroed_segment::<Minutes>(c"leaseq_minutes");
        snapshots::attach(zeroed_segment::<Snapshots>(c"leaseq_snapshots"));
        wake::attach(zeroed_segment::<wake::Waits>(c"leaseq_waits"));
        pg_sys::LWLockRelease(lock);
    }
}

/// The segment `name`, found or made and then zeroed.
///
/// # Safety
/// In the shared memory startup hook, under AddinShmemInitLock; all zeroes is a valid `T`.
unsafe fn zeroed_segment<T>(name: &std::ffi::CStr) -> *const T {
    let mut found = false;
    let size = std::mem::size_of::<T>();
    // SAFETY: by the caller.
    unsafe {
        let segment = pg_sys::ShmemInitStruct(name.as_ptr(), size, &mut found);
        if !found {
            std::ptr::write_bytes(segment.cast::<u8>(), 0, size);
        }
        segment.cast::<T>().cast_const()
    }
}

/// The rings, once shared memory is made (the library preloaded).
fn minutes() -> Option<&'static Minutes> {
    // SAFETY: set once by `minutes_startup` before any backend starts, never moved.
    unsafe { MINUTES.as_ref() }
}

/// Keys of each slot's queue (lifecycle/claim.rs), each behind a sequence number, odd while a
/// backend writes it: where the queue's sweep of each kind of `Scan` stands (its first part
/// `i64::MIN`: at the start), then the key of the last job claimed after a cursor (`FRONTIER`).
/// A segment of its own: the postmaster builds each segment's first value on its stack.
#[repr(C)]
pub struct Keys([[[AtomicI64; 4]; 3]; SLOTS]);

// SAFETY: atomics only: valid at any address, in any process.
unsafe impl PGRXSharedMemory for Keys {}

static KEYS: PgLwLock<Keys> = unsafe { PgLwLock::new(c"leaseq_claim_keys") };

/// Which of a slot's `keys` is the frontier; the sweeps' are at their `Scan`.
const FRONTIER: usize = 2;

#[repr(C)]
pub struct Slots([Slot; SLOTS]);

// SAFETY: plain data and atomics, no pointers: valid at any address, in any process.
unsafe impl PGRXSharedMemory for Slots {}

static SHARED: PgLwLock<Slots> = unsafe { PgLwLock::new(c"leaseq_counters") };
static PRELOADED: AtomicBool = AtomicBool::new(false);

thread_local! {
    // Per backend (one database): where each queue's slot is. Slots are never freed.
    static FOUND: RefCell<HashMap<String, usize>> = RefCell::new(HashMap::new());
}

/// Requests the shared memory, when the library is being preloaded (from `_PG_init`).
pub fn init() {
    // SAFETY: a flag PostgreSQL sets while it loads shared_preload_libraries.
    if unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        // SAFETY: all zeroes is an empty table (atomics and integers).
        pg_shmem_init!(SHARED = unsafe { std::mem::zeroed() });
        // SAFETY: all zeroes: every key never written.
        pg_shmem_init!(KEYS = unsafe { std::mem::zeroed() });
        // SAFETY: while libraries are preloaded, once: the hooks' previous values are kept and
        // called first.
        unsafe {
            PREV_SHMEM_REQUEST = pg_sys::shmem_request_hook;
            pg_sys::shmem_request_hook = Some(minutes_request);
            PREV_SHMEM_STARTUP = pg_sys::shmem_startup_hook;
            pg_sys::shmem_startup_hook = Some(minutes_startup);
        }
        PRELOADED.store(true, Ordering::Relaxed);
    }
}

/// Whether counters are kept (the library was preloaded).
pub fn kept() -> bool {
    PRELOADED.load(Ordering::Relaxed)
}

/// Counts `n` events of `queue`.
pub fn count(queue: &str, event: Event, n: usize) {
    if n == 0 || !kept() {
        return;
    }
    if let Some(index) = slot(queue) {
        let slots = SHARED.share();
        slots.0[index].events[event as usize].fetch_add(n as u64, Ordering::Relaxed);
        if matches!(event, Event::Failed | Event::LeaseExpired) {
            add_to_minute(&slots.0[index], Outcome::Failed, n as u64);
        }
    }
}

/// Counts a success of `queue` that took `attempts` attempts.
pub fn succeeded(queue: &str, attempts: i32) {
    succeeded_many(std::iter::once((queue, attempts)));
}

/// Counts each `(queue, attempts)` success, tallied here first: a batch of one queue takes the
/// lock once and touches the shared slot once, not once per job.
pub fn succeeded_many<'q>(successes: impl IntoIterator<Item = (&'q str, i32)>) {
    if !kept() {
        return;
    }
    // Per queue: successes, per attempts bucket, and the attempts' sum.
    let mut tally: Vec<(&str, u64, [u64; ATTEMPT_BOUNDS.len() + 1], u64)> = Vec::new();
    for (queue, attempts) in successes {
        let at = match tally.iter().position(|t| t.0 == queue) {
            Some(at) => at,
            None => {
                tally.push((queue, 0, [0; ATTEMPT_BOUNDS.len() + 1], 0));
                tally.len() - 1
            }
        };
        let bucket = ATTEMPT_BOUNDS
            .iter()
            .position(|&bound| i64::from(attempts) <= bound)
            .unwrap_or(ATTEMPT_BOUNDS.len());
        let entry = &mut tally[at];
        entry.1 += 1;
        entry.2[bucket] += 1;
        entry.3 += attempts.max(0) as u64;
    }
    for (queue, n, buckets, sum) in tally {
        let Some(index) = slot(queue) else { continue };
        let slots = SHARED.share();
        let slot = &slots.0[index];
        slot.events[Event::Completed as usize].fetch_add(n, Ordering::Relaxed);
        add_to_minute(slot, Outcome::Completed, n);
        for (counter, add) in slot.attempts.iter().zip(buckets) {
            if add > 0 {
                counter.fetch_add(add, Ordering::Relaxed);
            }
        }
        slot.attempts_sum.fetch_add(sum, Ordering::Relaxed);
    }
}

/// A scan of a queue that a held snapshot makes expensive (lifecycle/claim.rs): a claim from the
/// head of the due index, or the probe of expired leases. Backends take turns at them through
/// the queue's slot, so that one of them, not every one, reads the dead range per interval.
#[derive(Clone, Copy)]
pub enum Scan {
    Head = 0,
    Probe = 1,
}

/// Whether this backend takes its turn at `scan` of `queue` at `now_us`: `Ok` when nobody's turn
/// runs past now — then the next is due `hold_us` later for every other backend — or `Err` with
/// when the turn of another ends. `None` without shared memory: each backend decides alone.
pub fn take_turn(queue: &str, scan: Scan, now_us: i64, hold_us: i64) -> Option<Result<(), i64>> {
    if !kept() {
        return None;
    }
    let index = slot(queue)?;
    let slots = SHARED.share();
    let due = &slots.0[index].turns[scan as usize];
    let at = due.load(Ordering::Acquire);
    if at > now_us {
        return Some(Err(at));
    }
    Some(
        due.compare_exchange(at, now_us + hold_us, Ordering::AcqRel, Ordering::Acquire)
            .map(|_| ())
            .map_err(|theirs| theirs.max(now_us)),
    )
}

/// When another backend's hold-off of `scan` of `queue` ends, if after `now_us`. It asks before
/// the queue is known to exist (a claim's first step), so it takes no slot: a queue without one
/// has no hold-off.
pub fn held_off(queue: &str, scan: Scan, now_us: i64) -> Option<i64> {
    if !kept() {
        return None;
    }
    let index = find(queue)?;
    let slots = SHARED.share();
    let at = slots.0[index].turns[scan as usize].load(Ordering::Acquire);
    (at > now_us).then_some(at)
}

/// The holder of the turn at `scan` of `queue`, done: the next turn comes at `until_us` (0:
/// no hold-off any more).
pub fn end_turn(queue: &str, scan: Scan, until_us: i64) {
    if !kept() {
        return;
    }
    if let Some(index) = slot(queue) {
        let slots = SHARED.share();
        slots.0[index].turns[scan as usize].store(until_us, Ordering::Release);
    }
}

/// Index entries a sweep may read per job the queue's claims ask for, and how long an idle
/// queue's sweep waits per entry its last step read: a dead range that grows with the hold costs
/// each claim a bounded share (docs/design.md, "The sweep's budget").
const SWEEP_ENTRIES_PER_JOB: u64 = 8;
const SWEEP_IDLE_US_PER_ENTRY: i64 = 50;

/// A claim of `queue` from where `mode` says (`ClaimedFromHead` or `ClaimedAfterCursor`), asking
/// for `batch` jobs: counted, and the jobs asked for are the clock of its sweeps' budget.
pub fn claimed(queue: &str, mode: Event, batch: i32) {
    if let Some(index) = slot(queue) {
        let slots = SHARED.share();
        let slot = &slots.0[index];
        slot.events[mode as usize].fetch_add(1, Ordering::Relaxed);
        slot.asked.fetch_add(batch as u64, Ordering::Relaxed);
    }
}

/// Whether `queue`'s sweep of `scan` may take a step at `now_us`: its claims have asked for the
/// jobs its last step's reads cost, or an idle queue's wait has passed. Always without shared
/// memory (each backend's sweep is then paced by its turns alone).
pub fn sweep_budget_left(queue: &str, scan: Scan, now_us: i64) -> bool {
    let Some(index) = slot(queue) else {
        return true;
    };
    let slots = SHARED.share();
    let slot = &slots.0[index];
    let (asked_due, idle_due) = &slot.budget[scan as usize];
    slot.asked.load(Ordering::Relaxed) >= asked_due.load(Ordering::Relaxed)
        || now_us >= idle_due.load(Ordering::Relaxed)
}

/// A step of `queue`'s sweep of `scan` read `entries` at `now_us`: the next one waits until the
/// queue's claims have asked for `entries / SWEEP_ENTRIES_PER_JOB` more jobs, or
/// `entries × SWEEP_IDLE_US_PER_ENTRY` have passed.
pub fn spend_sweep_budget(queue: &str, scan: Scan, entries: i64, now_us: i64) {
    let Some(index) = slot(queue) else {
        return;
    };
    let entries = entries.max(0);
    let slots = SHARED.share();
    let slot = &slots.0[index];
    let (asked_due, idle_due) = &slot.budget[scan as usize];
    asked_due.store(
        slot.asked.load(Ordering::Relaxed) + entries as u64 / SWEEP_ENTRIES_PER_JOB,
        Ordering::Relaxed,
    );
    idle_due.store(
        now_us + entries * SWEEP_IDLE_US_PER_ENTRY,
        Ordering::Relaxed,
    );
}

/// After a slow `scan` of `queue`: nobody's turn comes before `until_us`.
pub fn defer(queue: &str, scan: Scan, until_us: i64) {
    if !kept() {
        return;
    }
    if let Some(index) = slot(queue) {
        let slots = SHARED.share();
        slots.0[index].turns[scan as usize].fetch_max(until_us, Ordering::AcqRel);
    }
}

/// Where `queue`'s sweep of the index of `scan` stands: `Some(None)` at its start (also when never
/// written, or while another backend writes it), `None` without shared memory.
pub fn sweep_at(queue: &str, scan: Scan) -> Option<Option<[i64; 3]>> {
    read_key(queue, scan as usize)
}

/// Moves `queue`'s sweep of the index of `scan` to `at` (`None`: back to its start) — unless
/// another backend is writing it at the same moment, which then wins.
pub fn sweep_to(queue: &str, scan: Scan, at: Option<[i64; 3]>) {
    write_key(queue, scan as usize, at);
}

/// The key of the last job of `queue` claimed after a cursor, as `sweep_at` reads.
pub fn frontier(queue: &str) -> Option<Option<[i64; 3]>> {
    read_key(queue, FRONTIER)
}

/// After a claim after a cursor: the key of the last job it claimed, as `sweep_to` writes.
pub fn frontier_to(queue: &str, key: [i64; 3]) {
    write_key(queue, FRONTIER, Some(key));
}

/// A key kept in a queue's slot behind a sequence number, odd while it is written: `Some(None)`
/// when never written, torn, or written as none (its first part `i64::MIN`).
fn read_key(queue: &str, which: usize) -> Option<Option<[i64; 3]>> {
    if !kept() {
        return None;
    }
    let index = slot(queue)?;
    let keys = KEYS.share();
    let [seq, key @ ..] = &keys.0[index][which];
    let before = seq.load(Ordering::Acquire);
    let key = key.each_ref().map(|part| part.load(Ordering::Acquire));
    let torn = before % 2 == 1 || seq.load(Ordering::Acquire) != before;
    Some((before != 0 && !torn && key[0] != i64::MIN).then_some(key))
}

/// Writes a key `read_key` reads, unless another backend writes it at the same moment.
fn write_key(queue: &str, which: usize, key: Option<[i64; 3]>) {
    if !kept() {
        return;
    }
    let Some(index) = slot(queue) else { return };
    let keys = KEYS.share();
    let [seq, parts @ ..] = &keys.0[index][which];
    let before = seq.load(Ordering::Acquire);
    if before % 2 == 1
        || seq
            .compare_exchange(before, before + 1, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
    {
        return;
    }
    for (part, value) in parts.iter().zip(key.unwrap_or([i64::MIN, 0, 0])) {
        part.store(value, Ordering::Release);
    }
    seq.store(before + 2, Ordering::Release);
}

/// What a minute of a queue's ring counts.
#[derive(Clone, Copy)]
enum Outcome {
    Completed = 0,
    Failed = 1,
}

const TAG_BITS: u32 = 16;
const COUNT_BITS: u32 = 24;
const COUNT_MAX: u64 = (1 << COUNT_BITS) - 1;

/// The minute `at` falls in, counted from 2000-01-01 on the server's clock.
fn minute_of(at: TimestampWithTimeZone) -> i64 {
    let raw: pg_sys::TimestampTz = at.into();
    raw.div_euclid(60_000_000)
}

/// `word` as the counts of `minute`: zero when it counts another minute.
fn counts_of(word: u64, minute: i64) -> [u64; 2] {
    if word >> (2 * COUNT_BITS) != (minute as u64) & ((1 << TAG_BITS) - 1) {
        return [0, 0];
    }
    [word & COUNT_MAX, (word >> COUNT_BITS) & COUNT_MAX]
}

/// `word` with `n` more of `outcome` in `minute` (a word of another minute starts again).
fn with_added(word: u64, minute: i64, outcome: Outcome, n: u64) -> u64 {
    let mut counts = counts_of(word, minute);
    counts[outcome as usize] = (counts[outcome as usize] + n).min(COUNT_MAX);
    ((minute as u64) & ((1 << TAG_BITS) - 1)) << (2 * COUNT_BITS)
        | counts[1] << COUNT_BITS
        | counts[0]
}

/// Adds `n` of `outcome` to the current minute of `slot`'s ring, taking a ring on first use.
fn add_to_minute(slot: &Slot, outcome: Outcome, n: u64) {
    let Some(minutes) = minutes() else { return };
    let ring = match slot.ring.load(Ordering::Acquire) {
        0 => {
            let taken = minutes.taken.fetch_add(1, Ordering::AcqRel);
            if taken as usize >= RINGS {
                minutes.taken.fetch_sub(1, Ordering::AcqRel);
                return;
            }
            // Two backends may race to give this slot a ring: the loser's stays unused.
            match slot
                .ring
                .compare_exchange(0, taken + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => taken as usize,
                Err(theirs) => theirs as usize - 1,
            }
        }
        ring => ring as usize - 1,
    };
    let minute = minute_of(crate::core::clock::now());
    let word = &minutes.rings[ring][minute.rem_euclid(60) as usize];
    let mut seen = word.load(Ordering::Acquire);
    while let Err(now_there) = word.compare_exchange_weak(
        seen,
        with_added(seen, minute, outcome, n),
        Ordering::AcqRel,
        Ordering::Acquire,
    ) {
        seen = now_there;
    }
}

/// One minute of a queue: when it began (µs on the server's clock), completions, failed
/// attempts.
pub struct Minute {
    pub began_at: pg_sys::TimestampTz,
    pub completed: u64,
    pub failed: u64,
}

/// The last `count` minutes up to `now`'s, oldest first, with nothing counted: those of a queue
/// without a ring.
pub fn last_minutes_empty(now: TimestampWithTimeZone, count: usize) -> Vec<Minute> {
    minutes_up_to(now, count)
        .map(|minute| Minute {
            began_at: minute * 60_000_000,
            completed: 0,
            failed: 0,
        })
        .collect()
}

fn minutes_up_to(now: TimestampWithTimeZone, count: usize) -> std::ops::RangeInclusive<i64> {
    let current = minute_of(now);
    current + 1 - count as i64..=current
}

/// The last `count` minutes up to `now`'s (oldest first) of every queue of this database that
/// has a ring; empty when none are kept.
pub fn last_minutes(now: TimestampWithTimeZone, count: usize) -> HashMap<String, Vec<Minute>> {
    let mut out = HashMap::new();
    let Some(minutes) = minutes().filter(|_| kept()) else {
        return out;
    };
    let database = this_database();
    let slots = SHARED.share();
    for slot in slots.0.iter() {
        let ring = slot.ring.load(Ordering::Acquire);
        if ring == 0 || slot.used.load(Ordering::Acquire) == 0 || slot.database != database {
            continue;
        }
        let words = &minutes.rings[ring as usize - 1];
        let read = minutes_up_to(now, count)
            .map(|minute| {
                let [completed, failed] = counts_of(
                    words[minute.rem_euclid(60) as usize].load(Ordering::Acquire),
                    minute,
                );
                Minute {
                    began_at: minute * 60_000_000,
                    completed,
                    failed,
                }
            })
            .collect();
        let name = String::from_utf8_lossy(&slot.name[..slot.name_len as usize]).into_owned();
        out.insert(name, read);
    }
    out
}

/// One queue's counters, as read.
pub struct Read {
    pub events: [u64; EVENTS.len()],
    /// Cumulative, one per bound of `ATTEMPT_BOUNDS`, then +Inf.
    pub attempts_le: [u64; ATTEMPT_BOUNDS.len() + 1],
    pub attempts_sum: u64,
}

/// The counters of every queue of this database that has any; empty when none are kept.
pub fn read() -> HashMap<String, Read> {
    let mut out = HashMap::new();
    if !kept() {
        return out;
    }
    let database = this_database();
    let slots = SHARED.share();
    for slot in slots.0.iter() {
        if slot.used.load(Ordering::Acquire) == 0 || slot.database != database {
            continue;
        }
        let name = String::from_utf8_lossy(&slot.name[..slot.name_len as usize]).into_owned();
        let events = std::array::from_fn(|i| slot.events[i].load(Ordering::Relaxed));
        let mut running = 0;
        let attempts_le = std::array::from_fn(|i| {
            running += slot.attempts[i].load(Ordering::Relaxed);
            running
        });
        let attempts_sum = slot.attempts_sum.load(Ordering::Relaxed);
        out.insert(
            name,
            Read {
                events,
                attempts_le,
                attempts_sum,
            },
        );
    }
    out
}

/// The slots of this database's queues (those counted or looked up since the server started).
pub(crate) fn slots_of_this_database() -> Vec<usize> {
    if !kept() {
        return Vec::new();
    }
    let database = this_database();
    let slots = SHARED.share();
    (0..SLOTS)
        .filter(|&i| {
            slots.0[i].used.load(Ordering::Acquire) != 0 && slots.0[i].database == database
        })
        .collect()
}

fn this_database() -> u32 {
    // SAFETY: the backend's database, set once it connected.
    unsafe { pg_sys::MyDatabaseId }.to_u32()
}

/// The slot of `queue` in this database if it has one (never takes one).
fn find(queue: &str) -> Option<usize> {
    if !kept() {
        return None;
    }
    if let Some(index) = FOUND.with_borrow(|found| found.get(queue).copied()) {
        return Some(index);
    }
    let (name, database, start) = placed(queue)?;
    let slots = SHARED.share();
    let index = (0..SLOTS)
        .map(|i| (start + i) % SLOTS)
        .take_while(|&i| slots.0[i].used.load(Ordering::Acquire) != 0)
        .find(|&i| holds(&slots.0[i], database, name))?;
    FOUND.with_borrow_mut(|found| found.insert(queue.to_string(), index));
    Some(index)
}

/// `queue`'s name, this database, and where its probe for a slot starts; `None` for a name too
/// long for a slot.
fn placed(queue: &str) -> Option<(&[u8], u32, usize)> {
    let name = queue.as_bytes();
    if name.len() > NAME {
        return None;
    }
    let database = this_database();
    let start = name.iter().fold(database as usize, |h, &b| {
        h.wrapping_mul(31).wrapping_add(b as usize)
    }) % SLOTS;
    Some((name, database, start))
}

fn holds(slot: &Slot, database: u32, name: &[u8]) -> bool {
    slot.database == database && &slot.name[..slot.name_len as usize] == name
}

/// The slot of `queue` in this database, taken on first use; `None` when every slot is taken
/// or there are none (the library not preloaded). Slots are never given back (until the server
/// restarts): only a queue known to exist may take one.
pub(crate) fn slot(queue: &str) -> Option<usize> {
    if !kept() {
        return None;
    }
    if let Some(index) = find(queue) {
        return Some(index);
    }
    let (name, database, start) = placed(queue)?;
    let matches = |slot: &Slot| holds(slot, database, name);
    let index = {
        let mut slots = SHARED.exclusive();
        let index = (0..SLOTS)
            .map(|i| (start + i) % SLOTS)
            .find(|&i| slots.0[i].used.load(Ordering::Acquire) == 0 || matches(&slots.0[i]))?;
        let slot = &mut slots.0[index];
        if slot.used.load(Ordering::Acquire) == 0 {
            slot.database = database;
            slot.name_len = name.len() as u32;
            slot.name[..name.len()].copy_from_slice(name);
            slot.used.store(1, Ordering::Release);
        }
        index
    };
    FOUND.with_borrow_mut(|found| found.insert(queue.to_string(), index));
    Some(index)
}

#[cfg(test)]
mod unit_tests {
    use super::{COUNT_MAX, Outcome, counts_of, with_added};

    #[test]
    fn a_minute_counts_both_outcomes_and_starts_again_when_its_word_is_reused() {
        let word = with_added(0, 1_000, Outcome::Completed, 5);
        let word = with_added(word, 1_000, Outcome::Failed, 2);
        assert_eq!(counts_of(word, 1_000), [5, 2]);
        // The same bucket an hour later: the old counts are not this minute's.
        assert_eq!(counts_of(word, 1_060), [0, 0]);
        let reused = with_added(word, 1_060, Outcome::Failed, 1);
        assert_eq!(counts_of(reused, 1_060), [0, 1]);
    }

    #[test]
    fn a_minute_saturates_instead_of_spilling_into_the_other_count() {
        let word = with_added(0, 7, Outcome::Completed, COUNT_MAX - 1);
        let word = with_added(word, 7, Outcome::Completed, 10);
        assert_eq!(counts_of(word, 7), [COUNT_MAX, 0]);
    }

    #[test]
    fn an_unwritten_word_counts_nothing_even_for_minute_zero() {
        assert_eq!(counts_of(0, 0), [0, 0]);
        assert_eq!(counts_of(0, 65_536), [0, 0]);
    }
}
