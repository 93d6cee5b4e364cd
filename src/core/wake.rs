//! Wakes: how a backend waiting in `queue_await` (observe/wait.rs) learns that a job it waits
//! for may have become final, at once and without polling.
//!
//! A waiter counts the jobs it waits for in shared memory (`wanted`, by a hash of database and
//! job id) before it reads them. A transaction that finished jobs keeps their ids, and right after
//! its commit became visible (an end-of-transaction callback) wakes the waiters if one of them is
//! counted: a finish nobody waits for costs one atomic read at commit, and a hash collision only
//! wakes waiters for nothing. A waiter sleeps on a condition variable only if no wake was
//! announced since it read the jobs (`announced`), so a finish that commits between its read and
//! its sleep still wakes it (docs/design.md). Shared memory exists only with
//! `shared_preload_libraries = 'leaseq'`; without it nobody is woken and waiters look again every
//! `POLL_MS`.
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use pgrx::prelude::*;

/// How often a waiter looks again when nobody can wake it (the library not preloaded), in ms.
pub const POLL_MS: i64 = 1000;

/// Counters of waited-for jobs, by hash.
const WANTED: usize = 1 << 16;

/// The shared part: how many backends wait, which jobs, how many wakes were announced, and where
/// waiters sleep.
#[repr(C)]
pub struct Waits {
    /// Non-zero once `finishes` is initialised (all zeroes is not an empty wait list).
    ready: AtomicU32,
    waiting: AtomicU32,
    announced: AtomicU64,
    finishes: pg_sys::ConditionVariable,
    wanted: [AtomicU32; WANTED],
}

static mut WAITS: *const Waits = std::ptr::null();

thread_local! {
    /// The jobs this backend's transaction finished, and whether the callback is in place.
    static FINISHED: RefCell<Vec<i64>> = const { RefCell::new(Vec::new()) };
    static CALLBACK: Cell<bool> = const { Cell::new(false) };
    /// The `wanted` counters this backend's wait holds (while it waits), and whether its exit
    /// gives them back.
    static COUNTED: RefCell<Option<Vec<usize>>> = const { RefCell::new(None) };
    static EXIT_HOOK: Cell<bool> = const { Cell::new(false) };
}

/// Keeps the zeroed segment made by the shared memory startup hook (core/counters.rs).
///
/// # Safety
/// In the shared memory startup hook, under AddinShmemInitLock, with a segment of `Waits`
/// zeroed when it was made.
pub(crate) unsafe fn attach(segment: *const Waits) {
    // SAFETY: by the caller: nobody else touches the segment yet.
    unsafe {
        if (*segment).ready.load(Ordering::Relaxed) == 0 {
            pg_sys::ConditionVariableInit(std::ptr::addr_of!((*segment).finishes).cast_mut());
            (*segment).ready.store(1, Ordering::Release);
        }
        WAITS = segment;
    }
}

fn waits() -> Option<&'static Waits> {
    // SAFETY: set once by `attach` before any backend starts, never moved.
    unsafe { WAITS.as_ref() }
}

/// The `wanted` counter of job `id` of this database (Fibonacci hashing).
fn slot(id: i64) -> usize {
    // SAFETY: reads this backend's database.
    let database = u64::from(unsafe { pg_sys::MyDatabaseId }.to_u32());
    let key = (database << 40) ^ id as u64;
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - WANTED.trailing_zeros())) as usize
}

/// This transaction finished jobs `ids`: wake whoever waits for one of them once it commits.
pub fn finished_here(ids: &[i64]) {
    if waits().is_none() {
        return;
    }
    FINISHED.with_borrow_mut(|finished| finished.extend_from_slice(ids));
    if !CALLBACK.replace(true) {
        // SAFETY: a callback with no argument, registered once per backend.
        unsafe { pg_sys::RegisterXactCallback(Some(at_end), std::ptr::null_mut()) };
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn at_end(event: pg_sys::XactEvent::Type, _arg: *mut std::ffi::c_void) {
    use pg_sys::XactEvent::*;
    let committed = matches!(event, XACT_EVENT_COMMIT | XACT_EVENT_PARALLEL_COMMIT);
    let abandoned = matches!(
        event,
        XACT_EVENT_ABORT | XACT_EVENT_PARALLEL_ABORT | XACT_EVENT_PREPARE
    );
    if committed || abandoned {
        let finished = FINISHED.take();
        if committed && !finished.is_empty() {
            wake(&finished);
        }
    }
}

/// After the commit of the finishes of `ids` became visible: a waiter that counted one of them
/// before now reads it, or is woken here.
fn wake(ids: &[i64]) {
    let Some(waits) = waits() else { return };
    std::sync::atomic::fence(Ordering::SeqCst);
    if waits.waiting.load(Ordering::SeqCst) == 0
        || !ids
            .iter()
            .any(|&id| waits.wanted[slot(id)].load(Ordering::SeqCst) > 0)
    {
        return;
    }
    waits.announced.fetch_add(1, Ordering::SeqCst);
    // SAFETY: initialised by `attach`; broadcasting cannot raise.
    unsafe { pg_sys::ConditionVariableBroadcast(std::ptr::addr_of!(waits.finishes).cast_mut()) };
}

/// A backend waiting for jobs to finish, from `wait()` until dropped.
pub struct Waiter(Option<&'static Waits>);

/// Counts this backend as waiting for jobs `ids`; its reads of the jobs come after.
pub fn wait(ids: &[i64]) -> Waiter {
    let waits = waits();
    if let Some(waits) = waits {
        let slots: Vec<usize> = ids.iter().map(|&id| slot(id)).collect();
        for &slot in &slots {
            waits.wanted[slot].fetch_add(1, Ordering::SeqCst);
        }
        waits.waiting.fetch_add(1, Ordering::SeqCst);
        COUNTED.set(Some(slots));
        if !EXIT_HOOK.replace(true) {
            // SAFETY: a FATAL exit skips the drop: the counts are given back on the way out.
            unsafe { pg_sys::before_shmem_exit(Some(uncount_at_exit), pg_sys::Datum::from(0)) };
        }
    }
    Waiter(waits)
}

impl Waiter {
    /// Wakes announced so far: read before each read of the jobs.
    pub fn announced(&self) -> u64 {
        self.0
            .map_or(0, |waits| waits.announced.load(Ordering::SeqCst))
    }

    /// Sleeps until a wake is announced after `seen`, or `ms` pass (at most `POLL_MS` when
    /// nobody can wake us). Interruptible: a cancel raises here.
    pub fn sleep(&self, seen: u64, ms: i64) {
        let Some(waits) = self.0 else {
            // SAFETY: this backend's own latch.
            unsafe {
                pg_sys::WaitLatch(
                    pg_sys::MyLatch,
                    (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH)
                        as i32,
                    ms.min(POLL_MS),
                    pg_sys::PG_WAIT_EXTENSION,
                );
                pg_sys::ResetLatch(pg_sys::MyLatch);
            }
            check_for_interrupts!();
            return;
        };
        let finishes = std::ptr::addr_of!(waits.finishes).cast_mut();
        // SAFETY: initialised by `attach`. Once prepared, a broadcast sets our latch; one that
        // came before is seen in `announced`.
        unsafe {
            pg_sys::ConditionVariablePrepareToSleep(finishes);
            if waits.announced.load(Ordering::SeqCst) == seen {
                pg_sys::ConditionVariableTimedSleep(finishes, ms, pg_sys::PG_WAIT_EXTENSION);
            }
        }
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        if self.0.is_some() {
            // SAFETY: cancelling a prepared sleep, or none.
            unsafe { pg_sys::ConditionVariableCancelSleep() };
            uncount();
        }
    }
}

/// Gives back the counts of this backend's wait, if it holds them.
fn uncount() {
    if let (Some(waits), Some(slots)) = (waits(), COUNTED.take()) {
        for slot in slots {
            waits.wanted[slot].fetch_sub(1, Ordering::SeqCst);
        }
        waits.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn uncount_at_exit(_code: i32, _arg: pg_sys::Datum) {
    uncount();
}
