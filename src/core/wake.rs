//! Wakes: how a backend waiting in `queue_await` (observe/wait.rs) learns that jobs may have
//! become final, at once and without polling.
//!
//! A transaction that finished jobs wakes every waiter right after its commit became visible (an
//! end-of-transaction callback), when shared memory says someone waits: one atomic read per
//! finishing transaction otherwise. A waiter registers before it reads the jobs, and sleeps on a
//! condition variable only if no finish was announced since it read (`generation`), so a finish
//! that commits between the waiter's read and its sleep still wakes it (docs/design.md). Shared
//! memory exists only with `shared_preload_libraries = 'leaseq'`; without it nobody is woken and
//! waiters look again every `POLL_MS`.
use std::cell::Cell;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use pgrx::prelude::*;

/// How often a waiter looks again when nobody can wake it (the library not preloaded), in ms.
pub const POLL_MS: i64 = 1000;

/// The shared part: who waits, how many finishes were announced, and where waiters sleep.
#[repr(C)]
pub struct Waits {
    /// Non-zero once `finishes` is initialised (all zeroes is not an empty wait list).
    ready: AtomicU32,
    waiting: AtomicU32,
    announced: AtomicU64,
    finishes: pg_sys::ConditionVariable,
}

static mut WAITS: *const Waits = std::ptr::null();

thread_local! {
    /// Whether this backend's transaction finished a job, and whether the callback is in place.
    static FINISHED: Cell<bool> = const { Cell::new(false) };
    static CALLBACK: Cell<bool> = const { Cell::new(false) };
    /// Whether this backend is counted in `waiting`, and whether its exit gives the count back.
    static COUNTED: Cell<bool> = const { Cell::new(false) };
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

/// This transaction finished jobs: wake the waiters once it commits.
pub fn finished_here() {
    if waits().is_none() || FINISHED.replace(true) {
        return;
    }
    if !CALLBACK.replace(true) {
        // SAFETY: a callback with no argument, registered once per backend.
        unsafe { pg_sys::RegisterXactCallback(Some(at_end), std::ptr::null_mut()) };
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn at_end(event: pg_sys::XactEvent::Type, _arg: *mut std::ffi::c_void) {
    use pg_sys::XactEvent::*;
    // After the commit became visible: a waiter that registered before now reads it, or is
    // woken here.
    let committed = matches!(event, XACT_EVENT_COMMIT | XACT_EVENT_PARALLEL_COMMIT);
    let abandoned = matches!(
        event,
        XACT_EVENT_ABORT | XACT_EVENT_PARALLEL_ABORT | XACT_EVENT_PREPARE
    );
    if committed || abandoned {
        let finished = FINISHED.replace(false);
        if finished && committed {
            wake();
        }
    }
}

fn wake() {
    let Some(waits) = waits() else { return };
    std::sync::atomic::fence(Ordering::SeqCst);
    if waits.waiting.load(Ordering::SeqCst) == 0 {
        return;
    }
    waits.announced.fetch_add(1, Ordering::SeqCst);
    // SAFETY: initialised by `attach`; broadcasting cannot raise.
    unsafe { pg_sys::ConditionVariableBroadcast(std::ptr::addr_of!(waits.finishes).cast_mut()) };
}

/// A backend waiting for finishes, from `wait()` until dropped.
pub struct Waiter(Option<&'static Waits>);

/// Registers this backend as waiting; its reads of the jobs come after.
pub fn wait() -> Waiter {
    let waits = waits();
    if let Some(waits) = waits {
        waits.waiting.fetch_add(1, Ordering::SeqCst);
        COUNTED.set(true);
        if !EXIT_HOOK.replace(true) {
            // SAFETY: a FATAL exit skips the drop: the count is given back on the way out.
            unsafe { pg_sys::before_shmem_exit(Some(uncount_at_exit), pg_sys::Datum::from(0)) };
        }
    }
    Waiter(waits)
}

impl Waiter {
    /// Finishes announced so far: read before each read of the jobs.
    pub fn announced(&self) -> u64 {
        self.0
            .map_or(0, |waits| waits.announced.load(Ordering::SeqCst))
    }

    /// Sleeps until a finish is announced after `seen`, or `ms` pass (at most `POLL_MS` when
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
        if let Some(waits) = self.0 {
            // SAFETY: cancelling a prepared sleep, or none.
            unsafe { pg_sys::ConditionVariableCancelSleep() };
            waits.waiting.fetch_sub(1, Ordering::SeqCst);
            COUNTED.set(false);
        }
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn uncount_at_exit(_code: i32, _arg: pg_sys::Datum) {
    if COUNTED.replace(false)
        && let Some(waits) = waits()
    {
        waits.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}
