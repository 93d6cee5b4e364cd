//! leaseq's settings (GUCs). They exist once the library is loaded: after the first call of any
//! leaseq function in a session, or at start with `shared_preload_libraries` / `session_preload_libraries`.
//! Limits and what steers shared state are a superuser's (`Suset`; `GRANT SET ON PARAMETER`
//! hands one to a role); what only changes the caller's own calls is anyone's.
use std::ffi::CString;

use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting};

/// Default time a claim from the head may take, in microseconds, before the session's next claims
/// start after its last claimed job (plus a per-job allowance: `claim.rs`).
const DEFAULT_CLAIM_SLOW_HEAD_US: i32 = 2000;

/// Default largest JSON document (payload, result or error): 1 MiB.
const DEFAULT_MAX_PAYLOAD_BYTES: i32 = 1024 * 1024;

static MAX_PAYLOAD_BYTES: GucSetting<i32> = GucSetting::<i32>::new(DEFAULT_MAX_PAYLOAD_BYTES);
static NOTIFY: GucSetting<bool> = GucSetting::<bool>::new(true);
static CLOCK_OFFSET: GucSetting<i32> = GucSetting::<i32>::new(0);
static CLAIM_RESCAN_INTERVAL: GucSetting<i32> = GucSetting::<i32>::new(1000);
static CLAIM_SLOW_HEAD: GucSetting<i32> = GucSetting::<i32>::new(DEFAULT_CLAIM_SLOW_HEAD_US);
static OVERVIEW_MAX_AGE: GucSetting<i32> = GucSetting::<i32>::new(2000);
static MAINTENANCE_DATABASES: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(None);

pub fn register() {
    GucRegistry::define_int_guc(
        c"leaseq.max_payload_bytes",
        c"Largest JSON document, in bytes, that leaseq accepts as a payload, result or error.",
        c"Measured as the jsonb size before compression. Larger documents are refused with \
          SQLSTATE 54000: a queue row is read on every claim, so big data belongs elsewhere.",
        &MAX_PAYLOAD_BYTES,
        1,
        i32::MAX,
        // A limit the caller could raise for itself would not be one.
        GucContext::Suset,
        GucFlags::UNIT_BYTE,
    );
    GucRegistry::define_bool_guc(
        c"leaseq.notify",
        c"Whether enqueues send NOTIFY leaseq_<queue> to wake idle workers.",
        c"Notifying transactions take a global lock in turn at commit, so at peak enqueue rates \
          they serialize; off leaves wake-ups to the workers' polling.",
        &NOTIFY,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"leaseq.clock_offset",
        c"Test hook: moves the clock every leaseq function reads forward by this many seconds.",
        c"For tests of leases, backoff, history and schedules, which then need not wait out real \
          time. Superusers only; never set it in production: leases and retries would be \
          decided on a clock that is not the server's.",
        &CLOCK_OFFSET,
        0,
        i32::MAX,
        GucContext::Suset,
        GucFlags::UNIT_S,
    );
    GucRegistry::define_int_guc(
        c"leaseq.claim_rescan_interval",
        c"After a slow claim from the head of a queue, at least how long its claims start after \
          their session's last claimed job instead, and the pause between passes of its sweep; \
          0: every claim starts at the head.",
        c"While a long transaction or a standby holds back vacuum, the head of the due index fills \
          with the entries of jobs claimed since, and a claim that starts there reads them all. \
          Starting after the session's last claimed job skips them; a job that sorts before it \
          (a higher priority, an earlier run_at, a late commit) waits for the queue's sweep of \
          the head in bounded steps, or for a claim that finds nothing after its cursor \
          (lifecycle/claim.rs).",
        &CLAIM_RESCAN_INTERVAL,
        0,
        3_600_000,
        // It and claim_slow_head steer the queue-wide turn state in shared memory that every
        // session and the maintenance worker obey: not one session's to set.
        GucContext::Suset,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"leaseq.claim_slow_head",
        c"How long a claim from the head of a queue may take, in microseconds, before the \
          session's claims start after its last claimed job (see claim_rescan_interval).",
        c"Allowed on top: 20 microseconds per job the claim asked for. A claim is this slow when \
          the head of the due index is full of entries vacuum may not remove yet. 0: every claim \
          counts as slow (tests and the chaos run use it to keep the cursor on).",
        &CLAIM_SLOW_HEAD,
        0,
        i32::MAX,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"leaseq.overview_max_age",
        c"How old the counts queue_overview shows may be; 0: it counts on every call.",
        c"Counting a queue's live jobs costs as much as its backlog: queue_overview shows each \
          queue's last count while it is younger than this, and counts again past it. While \
          someone reads the overview, the maintenance worker counts ahead. Needs \
          shared_preload_libraries = 'leaseq'; without it every call counts.",
        &OVERVIEW_MAX_AGE,
        0,
        3_600_000,
        GucContext::Userset,
        GucFlags::UNIT_MS,
    );
    // A server-start setting can only be defined while the server starts: when the library is
    // loaded later (no shared_preload_libraries), it stays undefined and nothing reads it.
    // SAFETY: a flag PostgreSQL sets while it loads shared_preload_libraries.
    if !unsafe { pgrx::pg_sys::process_shared_preload_libraries_in_progress } {
        return;
    }
    GucRegistry::define_string_guc(
        c"leaseq.maintenance_databases",
        c"Databases in which leaseq's maintenance worker runs (comma-separated).",
        c"Needs shared_preload_libraries = 'leaseq'; read at server start. One background worker \
          per database reclaims expired leases, wakes workers when scheduled jobs come due and \
          applies each queue's retention.",
        &MAINTENANCE_DATABASES,
        GucContext::Postmaster,
        GucFlags::default(),
    );
}

/// The databases listed in `leaseq.maintenance_databases`.
pub fn maintenance_databases() -> Vec<String> {
    MAINTENANCE_DATABASES
        .get()
        .map(|list| {
            list.to_string_lossy()
                .split(',')
                .map(|name| name.trim().to_string())
                .filter(|name| !name.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

pub fn notify() -> bool {
    NOTIFY.get()
}

pub fn max_payload_bytes() -> i32 {
    MAX_PAYLOAD_BYTES.get()
}

/// `leaseq.claim_rescan_interval`, in milliseconds (0: every claim from the head).
pub fn claim_rescan_interval_ms() -> i32 {
    CLAIM_RESCAN_INTERVAL.get()
}

/// `leaseq.claim_slow_head`, in microseconds.
pub fn claim_slow_head_us() -> i32 {
    CLAIM_SLOW_HEAD.get()
}

/// `leaseq.clock_offset`, in seconds (0 unless a test moved the clock).
pub fn clock_offset_seconds() -> i32 {
    CLOCK_OFFSET.get()
}

/// `leaseq.overview_max_age`, in milliseconds (0: count on every call).
pub fn overview_max_age_ms() -> i32 {
    OVERVIEW_MAX_AGE.get()
}
