//! Claim: `pending` (due) → `running`, after reclaiming expired leases.
//!
//! 1. Reclaim: this queue's running jobs whose lease has expired are locked (`SKIP LOCKED`: a
//!    concurrent claimer reclaims the others), their open attempt closes `lease_expired` at the
//!    instant the lease ended (written to history), and each is rescheduled by the backoff
//!    policy — or goes `dead` when its budget is spent. A crashed worker thus costs one lease
//!    interval and one attempt.
//! 2. Claim: up to `batch` due pending jobs, highest priority, then oldest `run_at`, then id,
//!    locked with `FOR UPDATE SKIP LOCKED` so that concurrent claimers take disjoint jobs without
//!    waiting. Each gets a fresh random lease token and `attempts + 1`; the open attempt lives
//!    on the job's row (token, worker, `started_at`) until it closes.
//! 3. Numbering: each claimed job's attempt is `MAX(attempt_no) + 1` over all of the job's
//!    closed attempts (redrive included), so attempt numbers only ever grow: the fencing
//!    generation to hand to downstream systems. Closing writes the attempt with the same
//!    number: only the holder of the job's row lock writes its history, and the job is ours.
//!    A job claimed for the first time has no history to look at — every attempt in history
//!    was claimed, and claiming sets `started_at`, which nothing clears — so its first attempt
//!    is numbered 1 without the look-up, which is most claims.
//!
//! **Where a claim starts** (step 2). From the head of the due index — unless the queue's last
//! claim from its head was slow ([`Watch`]: it read more than 200 index entries plus 10 per job
//! asked for, or took longer than `leaseq.claim_slow_head`), this session's or another's. A claim
//! from the head is slow when a snapshot holds vacuum back: the head fills with the entries of
//! every job claimed since, and only claims from the head read them. Then the queue's claims
//! start after their session's last claimed job ([`CLAIM_AFTER`]: same priority, later
//! `(run_at, id)`), and take what that range cannot fill from the lower priorities
//! ([`CLAIM_BELOW`]). What sorts before the cursors (a higher priority, an earlier `run_at`, a
//! late commit, a rollback) is found by the queue's **sweep**: once per turn
//! (`counters::take_turn`, one session at a time), a claim walks the next [`SWEEP_STEP`] entries
//! of the index by key alone ([`walk::due`], the heap unread) and claims within that range
//! ([`CLAIM_SWEEP`]); the next turn comes after [`Watch::pace`], and the next pass after
//! `leaseq.claim_rescan_interval`. A claim that finds nothing after its cursor sweeps at once.
//! Either way a step runs only while the queue's sweep has budget left
//! (`counters::sweep_budget_left`): 8 entries per job its claims asked for since the last step,
//! or 50 µs per entry of an idle queue's time. A pass that fits one step from the head ends the
//! mode: order is exact again. Step 1's probe of expired leases reads the same kind of dead range
//! (the entries of lease rows visited since, one per claim call) once the hold outlives a lease:
//! after a slow probe, the queue's claims sweep that index in the same way, and read only the
//! queue's settings between turns ([`reclaim_unless_slow`]).
//!
//! Each step is its own statement, and that is load-bearing: under READ COMMITTED each
//! statement takes a fresh snapshot, so step 3 sees every attempt closed before the row lock of
//! step 2 was granted. Computing the MAX in step 2 itself could read an older snapshot (a retry
//! closed just before our lock) and number two attempts alike.
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

use crate::core::access;
use crate::core::args;
use crate::core::backoff;
use crate::core::clock;
use crate::core::connect::{self, JOB_PATH};
use crate::core::counters::{self, Event, Scan};
use crate::core::datum::{JobStatus, Jsonb, QueuePrivilege};
use crate::core::majors;
use crate::core::settings;
use crate::core::spi::{
    self, BOOL_ARRAY, INT4, INT8, INT8_ARRAY, INTERVAL, Statement, TEXT, TIMESTAMPTZ,
    TIMESTAMPTZ_ARRAY, UUID, UUID_ARRAY,
};
use crate::core::walk::{self, DueKey};
use crate::lifecycle::depend;
use crate::lifecycle::group;
use crate::lifecycle::pause;
use crate::lifecycle::queue::{self, Queue};
use crate::lifecycle::schedule;

/// The most lease rows one claim call visits (on a schema before 0.4.0: the most expired jobs it
/// reclaims); concurrent claimers share the rest.
const RECLAIM_LIMIT: i32 = 1000;

/// The queue's settings, and its expired leases locked for step 1 — one statement, as both are
/// needed on every claim. Up to `$3` of the queue's lease rows whose end has passed are deleted
/// (`SKIP LOCKED`: a concurrent claimer takes the others), and their jobs that still run under
/// the row's token with their lease ended are locked (`SKIP LOCKED`); the rows' other jobs
/// finished, were reclaimed or were renewed, and a later row covers those. No row: no such
/// queue; one row with a NULL id: nothing to reclaim.
pub(crate) const SETTINGS_AND_EXPIRED: Statement = Statement {
    name: "claim.settings_and_expired",
    sql: "WITH due AS (
              SELECT lease.ctid AS row_address
                FROM leaseq.leases AS lease
               WHERE lease.queue = $1 AND lease.expires_at <= $2
               ORDER BY lease.expires_at
               LIMIT $3
                 FOR UPDATE SKIP LOCKED),
          visited AS (
              DELETE FROM leaseq.leases AS lease
               USING due
               WHERE lease.ctid = due.row_address
              RETURNING lease.token, lease.job_ids),
          -- the rows' jobs that still run under the row's token, their lease ended: each once,
          -- though a renewed job is in its claim's row and its renewal's
          ended AS (
              SELECT DISTINCT job.id, visited.token
                FROM visited
               CROSS JOIN LATERAL unnest(visited.job_ids) AS held (id)
                JOIN leaseq.jobs AS job ON job.id = held.id
               WHERE job.lease_token = visited.token AND job.status = 'running'
                 AND job.lease_expires_at <= $2),
          expired AS (
              SELECT job.id, job.attempts, job.max_attempts, job.lease_expires_at,
                     job.lease_token
                FROM ended
                JOIN leaseq.jobs AS job ON job.id = ended.id
               WHERE job.lease_token = ended.token AND job.status = 'running'
                 AND job.lease_expires_at <= $2
                 FOR UPDATE OF job SKIP LOCKED),
          -- what another transaction holds (its worker finishing now) goes back in a row that is
          -- already due: if that transaction rolls back, a later claim reclaims it
          kept AS (
              INSERT INTO leaseq.leases (queue, expires_at, token, job_ids)
              SELECT $1, $2, ended.token, array_agg(ended.id)
                FROM ended
               WHERE ended.id NOT IN (SELECT expired.id FROM expired)
               GROUP BY ended.token)
          SELECT queue.lease, queue.backoff_base, queue.backoff_cap,
                 expired.id, expired.attempts, expired.max_attempts, expired.lease_expires_at,
                 expired.lease_token
            FROM leaseq.queues AS queue
            LEFT JOIN expired ON true
           WHERE queue.name = $1",
    params: &[TEXT, TIMESTAMPTZ, INT4],
};

/// [`SETTINGS_AND_EXPIRED`] within one step of the queue's sweep of expired leases (see the
/// module comment): lease rows ending from `$4` up to but excluding `$5`.
pub(crate) const SETTINGS_AND_EXPIRED_IN: Statement = Statement {
    name: "claim.settings_and_expired_in",
    sql: "WITH due AS (
              SELECT lease.ctid AS row_address
                FROM leaseq.leases AS lease
               WHERE lease.queue = $1 AND lease.expires_at <= $2
                 AND lease.expires_at >= $4 AND lease.expires_at < $5
               ORDER BY lease.expires_at
               LIMIT $3
                 FOR UPDATE SKIP LOCKED),
          visited AS (
              DELETE FROM leaseq.leases AS lease
               USING due
               WHERE lease.ctid = due.row_address
              RETURNING lease.token, lease.job_ids),
          -- the rows' jobs that still run under the row's token, their lease ended: each once,
          -- though a renewed job is in its claim's row and its renewal's
          ended AS (
              SELECT DISTINCT job.id, visited.token
                FROM visited
               CROSS JOIN LATERAL unnest(visited.job_ids) AS held (id)
                JOIN leaseq.jobs AS job ON job.id = held.id
               WHERE job.lease_token = visited.token AND job.status = 'running'
                 AND job.lease_expires_at <= $2),
          expired AS (
              SELECT job.id, job.attempts, job.max_attempts, job.lease_expires_at,
                     job.lease_token
                FROM ended
                JOIN leaseq.jobs AS job ON job.id = ended.id
               WHERE job.lease_token = ended.token AND job.status = 'running'
                 AND job.lease_expires_at <= $2
                 FOR UPDATE OF job SKIP LOCKED),
          -- what another transaction holds (its worker finishing now) goes back in a row that is
          -- already due: if that transaction rolls back, a later claim reclaims it
          kept AS (
              INSERT INTO leaseq.leases (queue, expires_at, token, job_ids)
              SELECT $1, $2, ended.token, array_agg(ended.id)
                FROM ended
               WHERE ended.id NOT IN (SELECT expired.id FROM expired)
               GROUP BY ended.token)
          SELECT queue.lease, queue.backoff_base, queue.backoff_cap,
                 expired.id, expired.attempts, expired.max_attempts, expired.lease_expires_at,
                 expired.lease_token
            FROM leaseq.queues AS queue
            LEFT JOIN expired ON true
           WHERE queue.name = $1",
    params: &[TEXT, TIMESTAMPTZ, INT4, TIMESTAMPTZ, TIMESTAMPTZ],
};

/// Applies step 1 to the rows `SETTINGS_AND_EXPIRED` locked: `$1` ids, `$2` whether each goes
/// dead, `$3` its next `run_at`, `$4` when its lease expired, `$6` its lease token; `$5` now. The
/// attempt closes `lease_expired` at the instant its lease ended.
pub(crate) const RECLAIM: Statement = Statement {
    name: "claim.reclaim",
    sql: "WITH decided AS (
              SELECT * FROM unnest($1::bigint[], $2::boolean[], $3::timestamptz[],
                                   $4::timestamptz[], $6::uuid[])
                            AS decided (id, dead, run_at, expired_at, token)),
          reclaimed AS (
              UPDATE leaseq.jobs AS job
                 SET status = CASE WHEN decided.dead THEN 'dead' ELSE 'pending' END
                                  ::leaseq.job_status,
                     run_at = CASE WHEN decided.dead THEN job.run_at ELSE decided.run_at END,
                     lease_token = NULL,
                     lease_expires_at = NULL,
                     last_error = jsonb_build_object('error', 'lease_expired',
                                                     'lease_expires_at', decided.expired_at,
                                                     'worker', job.worker),
                     updated_at = $5,
                     finished_at = CASE WHEN decided.dead THEN $5 END
                FROM decided
               WHERE job.id = decided.id AND job.status = 'running'
                 AND job.lease_expires_at <= $5
              RETURNING job.id, job.worker, job.started_at, job.last_error, decided.token,
                        decided.expired_at),
          closed AS (
              -- the attempt closes (history.rs)
              INSERT INTO leaseq.closed_attempts
                     (job_id, attempt_no, lease_token, worker, started_at, ended_at, outcome, error)
              SELECT reclaimed.id,
                     coalesce((SELECT max(earlier.attempt_no) FROM leaseq.closed_attempts AS earlier
                                WHERE earlier.job_id = reclaimed.id), 0) + 1,
                     reclaimed.token, reclaimed.worker, reclaimed.started_at,
                     reclaimed.expired_at, 'lease_expired', reclaimed.last_error
                FROM reclaimed
              RETURNING job_id)
          SELECT (SELECT count(*) FROM reclaimed), (SELECT count(*) FROM closed)",
    params: &[
        INT8_ARRAY,
        BOOL_ARRAY,
        TIMESTAMPTZ_ARRAY,
        TIMESTAMPTZ_ARRAY,
        TIMESTAMPTZ,
        UUID_ARRAY,
    ],
};

/// Puts expired jobs that step 1 leaves for a later claim (a grouped job whose group another
/// transaction holds) back in a lease row that is already due: `$1` the queue, `$2` now, `$3`
/// ids, `$4` their tokens.
pub(crate) const KEEP_EXPIRED: Statement = Statement {
    name: "claim.keep_expired",
    sql: "INSERT INTO leaseq.leases (queue, expires_at, token, job_ids)
          SELECT $1, $2, kept.token, array_agg(kept.id)
            FROM unnest($3::bigint[], $4::uuid[]) AS kept (id, token)
           GROUP BY kept.token",
    params: &[TEXT, TIMESTAMPTZ, INT8_ARRAY, UUID_ARRAY],
};

/// Step 2. The locking SELECT sits in a CTE, never in `WHERE id IN (SELECT … LIMIT n)`: the
/// planner may re-run such a subquery per outer row and claim far more than `n` jobs. The
/// UPDATE reaches each locked row by its physical address (a TID scan, no index descent: only
/// we can move a row we hold locked), and repeats the state and due-time conditions, so a job
/// finished by another session between the scan and the lock is not flipped back to running.
/// Every row locked takes the claim call's lease token, `$6` ([`fresh_token`]).
pub(crate) const CLAIM: Statement = Statement {
    name: "claim",
    sql: "WITH chosen AS (
              SELECT job.ctid AS row_address, job.started_at IS NULL AS first_claim
                FROM leaseq.jobs AS job
               WHERE job.queue = $1 AND job.lane = 'pending' AND job.run_at <= $2
               ORDER BY job.priority DESC, job.run_at, job.id
               LIMIT $3
                 FOR UPDATE SKIP LOCKED),
          claimed AS (
              UPDATE leaseq.jobs AS job
                 SET status = 'running',
                     attempts = job.attempts + 1,
                     lease_token = $6,
                     lease_expires_at = $2 + $4,
                     worker = $5,
                     started_at = $2,
                     updated_at = $2
                FROM chosen
               WHERE job.ctid = chosen.row_address AND job.status = 'pending' AND job.run_at <= $2
              RETURNING job.id, job.lease_token, job.payload, job.lease_expires_at, job.priority,
                        job.run_at, job.created_at, chosen.first_claim, job.trace_context),
          -- the claim's lease row (sql/schema.sql), none when it claimed nothing
          leased AS (
              INSERT INTO leaseq.leases (queue, expires_at, token, job_ids)
              SELECT $1, $2 + $4, $6, array_agg(claimed.id) FROM claimed HAVING count(*) > 0)
          SELECT claimed.id, claimed.lease_token, claimed.payload, claimed.lease_expires_at,
                 claimed.priority, claimed.run_at, claimed.created_at, claimed.first_claim,
                 claimed.trace_context
            FROM claimed",
    params: &[TEXT, TIMESTAMPTZ, INT4, INTERVAL, TEXT, UUID],
};

/// [`CLAIM`], starting after a session's last claimed job of the queue (see the module comment):
/// `$7` its priority, `$8` its `run_at`, `$9` its id. Only that priority's later jobs: the row
/// comparison is a range of the due index after the equality on queue and priority.
pub(crate) const CLAIM_AFTER: Statement = Statement {
    name: "claim.after",
    sql: "WITH chosen AS (
              SELECT job.ctid AS row_address, job.started_at IS NULL AS first_claim
                FROM leaseq.jobs AS job
               WHERE job.queue = $1 AND job.lane = 'pending' AND job.run_at <= $2
                 AND job.priority = $7 AND (job.run_at, job.id) > ($8, $9)
               ORDER BY job.priority DESC, job.run_at, job.id
               LIMIT $3
                 FOR UPDATE SKIP LOCKED),
          claimed AS (
              UPDATE leaseq.jobs AS job
                 SET status = 'running',
                     attempts = job.attempts + 1,
                     lease_token = $6,
                     lease_expires_at = $2 + $4,
                     worker = $5,
                     started_at = $2,
                     updated_at = $2
                FROM chosen
               WHERE job.ctid = chosen.row_address AND job.status = 'pending' AND job.run_at <= $2
              RETURNING job.id, job.lease_token, job.payload, job.lease_expires_at, job.priority,
                        job.run_at, job.created_at, chosen.first_claim, job.trace_context),
          -- the claim's lease row (sql/schema.sql), none when it claimed nothing
          leased AS (
              INSERT INTO leaseq.leases (queue, expires_at, token, job_ids)
              SELECT $1, $2 + $4, $6, array_agg(claimed.id) FROM claimed HAVING count(*) > 0)
          SELECT claimed.id, claimed.lease_token, claimed.payload, claimed.lease_expires_at,
                 claimed.priority, claimed.run_at, claimed.created_at, claimed.first_claim,
                 claimed.trace_context
            FROM claimed",
    params: &[
        TEXT,
        TIMESTAMPTZ,
        INT4,
        INTERVAL,
        TEXT,
        UUID,
        INT4,
        TIMESTAMPTZ,
        INT8,
    ],
};

/// [`CLAIM`] within one step of the queue's sweep (see the module comment): `$7` the step's
/// priority, from `($8, $9)` (`run_at`, id) up to but excluding `($10, $11)` — a range of the due
/// index whose length [`walk::due`] measured.
pub(crate) const CLAIM_SWEEP: Statement = Statement {
    name: "claim.sweep",
    sql: "WITH chosen AS (
              SELECT job.ctid AS row_address, job.started_at IS NULL AS first_claim
                FROM leaseq.jobs AS job
               WHERE job.queue = $1 AND job.lane = 'pending' AND job.run_at <= $2
                 AND job.priority = $7 AND (job.run_at, job.id) >= ($8, $9)
                 AND (job.run_at, job.id) < ($10, $11)
               ORDER BY job.priority DESC, job.run_at, job.id
               LIMIT $3
                 FOR UPDATE SKIP LOCKED),
          claimed AS (
              UPDATE leaseq.jobs AS job
                 SET status = 'running',
                     attempts = job.attempts + 1,
                     lease_token = $6,
                     lease_expires_at = $2 + $4,
                     worker = $5,
                     started_at = $2,
                     updated_at = $2
                FROM chosen
               WHERE job.ctid = chosen.row_address AND job.status = 'pending' AND job.run_at <= $2
              RETURNING job.id, job.lease_token, job.payload, job.lease_expires_at, job.priority,
                        job.run_at, job.created_at, chosen.first_claim, job.trace_context),
          -- the claim's lease row (sql/schema.sql), none when it claimed nothing
          leased AS (
              INSERT INTO leaseq.leases (queue, expires_at, token, job_ids)
              SELECT $1, $2 + $4, $6, array_agg(claimed.id) FROM claimed HAVING count(*) > 0)
          SELECT claimed.id, claimed.lease_token, claimed.payload, claimed.lease_expires_at,
                 claimed.priority, claimed.run_at, claimed.created_at, claimed.first_claim,
                 claimed.trace_context
            FROM claimed",
    params: &[
        TEXT,
        TIMESTAMPTZ,
        INT4,
        INTERVAL,
        TEXT,
        UUID,
        INT4,
        TIMESTAMPTZ,
        INT8,
        TIMESTAMPTZ,
        INT8,
    ],
};

/// [`CLAIM`] below a session's cursor's priority, `$7`: what its range after the cursor could not
/// fill, without reading the dead head of the cursor's own priority.
pub(crate) const CLAIM_BELOW: Statement = Statement {
    name: "claim.below",
    sql: "WITH chosen AS (
              SELECT job.ctid AS row_address, job.started_at IS NULL AS first_claim
                FROM leaseq.jobs AS job
               WHERE job.queue = $1 AND job.lane = 'pending' AND job.run_at <= $2
                 AND job.priority < $7
               ORDER BY job.priority DESC, job.run_at, job.id
               LIMIT $3
                 FOR UPDATE SKIP LOCKED),
          claimed AS (
              UPDATE leaseq.jobs AS job
                 SET status = 'running',
                     attempts = job.attempts + 1,
                     lease_token = $6,
                     lease_expires_at = $2 + $4,
                     worker = $5,
                     started_at = $2,
                     updated_at = $2
                FROM chosen
               WHERE job.ctid = chosen.row_address AND job.status = 'pending' AND job.run_at <= $2
              RETURNING job.id, job.lease_token, job.payload, job.lease_expires_at, job.priority,
                        job.run_at, job.created_at, chosen.first_claim, job.trace_context),
          -- the claim's lease row (sql/schema.sql), none when it claimed nothing
          leased AS (
              INSERT INTO leaseq.leases (queue, expires_at, token, job_ids)
              SELECT $1, $2 + $4, $6, array_agg(claimed.id) FROM claimed HAVING count(*) > 0)
          SELECT claimed.id, claimed.lease_token, claimed.payload, claimed.lease_expires_at,
                 claimed.priority, claimed.run_at, claimed.created_at, claimed.first_claim,
                 claimed.trace_context
            FROM claimed",
    params: &[TEXT, TIMESTAMPTZ, INT4, INTERVAL, TEXT, UUID, INT4],
};

/// Where a session's next claim of a queue may start (see the module comment): the key of the
/// last job it claimed there.
#[derive(Clone, Copy)]
struct Cursor {
    key: DueKey,
    /// Until when claims start here (after a slow claim from the head), µs on the server's
    /// clock; `None`: at the head.
    until: Option<i64>,
    /// Where the queue's sweep stands, when no shared memory keeps it (`None`: at the head).
    sweep: Option<DueKey>,
}

/// A claim from the head is slow past `leaseq.claim_slow_head` plus this per job asked for.
const SLOW_HEAD_PER_JOB_US: u128 = 20;

thread_local! {
    // Per backend: each queue's cursor. A hint only: what a stale one skips, the sweep finds.
    static CURSORS: std::cell::RefCell<std::collections::HashMap<String, Cursor>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
    // Per backend: each queue probed, until when its claims skip step 1 after a slow probe, µs
    // on the server's clock (`None`: the last probe was not slow), and where the sweep of expired
    // leases stands when no shared memory keeps it (`None`: at the earliest).
    static PROBES: std::cell::RefCell<std::collections::HashMap<String, (Option<i64>, Option<i64>)>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

/// `map[queue] = value`, allocating the key only the first time (this runs on every claim).
fn remember<V>(map: &mut std::collections::HashMap<String, V>, queue: &str, value: V) {
    match map.get_mut(queue) {
        Some(known) => *known = value,
        None => {
            map.insert(queue.to_string(), value);
        }
    }
}

/// A statement of the claim path under watch: when it started, and how many entries of the index
/// it walks (`None`: no such index) this backend had read so far in its transaction —
/// PostgreSQL's pending statistics counts, which stay at 0 with `track_counts` off.
struct Watch {
    started: std::time::Instant,
    index: Option<pg_sys::Oid>,
    entries: i64,
}

/// A claim from the head is slow past this many index entries read, plus
/// `SLOW_ENTRIES_PER_JOB` per job asked for: entries of rows it could not take, dead ones that a
/// held snapshot keeps or locked ones it skipped. Counted, unlike time, the same on a busy
/// machine as on an idle one: 8 workers claiming 100 at a time read about 750 per claim here,
/// 4 workers claiming one about 5, and 7,000 once a snapshot had been held 15 s. The dead head
/// grows by the jobs claimed: until it crosses the threshold, every claim reads it (at 1,000
/// entries, one job a claim read 15× its entries of before the hold for that window,
/// docs/benchmarks.md).
const SLOW_ENTRIES: i64 = 200;
const SLOW_ENTRIES_PER_JOB: i64 = 10;

/// A probe of expired leases is slow past this many entries of the index of lease ends, plus
/// `SLOW_ENTRIES_PER_JOB` per job its claim asked for or it reclaimed. Each probe reads the
/// entries of finished jobs whose leases ended since the last probe — about a claim's batch —
/// and a held snapshot's dead range on top, which every probe reads until one crosses the
/// threshold (pg_test/specs/claim_probe_threshold.spec).
const SLOW_PROBE_ENTRIES: i64 = 100;

impl Watch {
    /// Starts watching a statement that walks leaseq's index `index`.
    fn start(index: &std::ffi::CStr) -> Watch {
        // SAFETY: catalog look-ups by name (missing_ok), and a read of this backend's pending
        // statistics entry, if any.
        let index = unsafe {
            let schema = pg_sys::get_namespace_oid(c"leaseq".as_ptr(), true);
            let oid = pg_sys::get_relname_relid(index.as_ptr(), schema);
            (oid != pg_sys::InvalidOid).then_some(oid)
        };
        Watch {
            started: std::time::Instant::now(),
            index,
            entries: index.map_or(0, majors::pending_tuples_returned),
        }
    }

    /// Whether the statement was slow: it read more than `entries` index entries, or took
    /// longer than `leaseq.claim_slow_head` plus `extra_us`. A session's first statement
    /// (`first`) also prepared and planned its statements: never slow on that account, unless
    /// forced (a setting of 0: every one is).
    fn was_slow(&self, first: bool, entries: i64, extra_us: u128) -> bool {
        let slow_head = settings::claim_slow_head_us() as u128;
        slow_head == 0
            || self.read() > entries
            || (!first && self.started.elapsed().as_micros() >= slow_head + extra_us)
    }

    /// `was_slow` for a claim that asked for `asked` jobs: `SLOW_ENTRIES`, and per job
    /// `SLOW_ENTRIES_PER_JOB` more entries and `SLOW_HEAD_PER_JOB_US` more time.
    fn claim_was_slow(&self, first: bool, asked: i32) -> bool {
        self.was_slow(
            first,
            SLOW_ENTRIES + SLOW_ENTRIES_PER_JOB * i64::from(asked),
            SLOW_HEAD_PER_JOB_US * asked as u128,
        )
    }

    /// `was_slow` for a probe of expired leases that `jobs` asked for (its claim's batch) or
    /// reclaimed: `SLOW_PROBE_ENTRIES`, and `SLOW_ENTRIES_PER_JOB` more per job.
    fn probe_was_slow(&self, first: bool, jobs: i64) -> bool {
        self.was_slow(first, SLOW_PROBE_ENTRIES + SLOW_ENTRIES_PER_JOB * jobs, 0)
    }

    /// Entries of the index read since the start.
    fn read(&self) -> i64 {
        self.index.map_or(0, |index| {
            majors::pending_tuples_returned(index) - self.entries
        })
    }

    /// Until when a session stays off the scan, now that it was slow:
    /// `leaseq.claim_rescan_interval` (`interval_ms`), or longer after a longer scan — ten times
    /// what it took, and 10 µs per entry it read. The dead range a held snapshot keeps grows for
    /// as long as it lives; so do the scans that read it, and the pause after each with them. Such
    /// scans thus take at most a few percent of the time of the session that makes them, and the
    /// entries read per claim stay flat (docs/benchmarks.md).
    fn hold_off(&self, interval_ms: i32) -> i64 {
        let took = self.started.elapsed().as_micros() as i64;
        micros_now()
            + (i64::from(interval_ms) * 1000)
                .max(10 * took)
                .max(HOLD_OFF_PER_ENTRY_US * self.read())
    }
}

/// How long a slow scan keeps claims off it per index entry it read (`Watch::hold_off`).
const HOLD_OFF_PER_ENTRY_US: i64 = 10;

impl Watch {
    /// Until when the queue's next sweep step waits, now that this one is done: ten times what it
    /// took, and `SWEEP_PER_ENTRY_US` per entry it read — at least `pass_ms` when it ended a pass.
    fn pace(&self, pass_ms: Option<i32>) -> i64 {
        let took = self.started.elapsed().as_micros() as i64;
        micros_now()
            + (10 * took)
                .max(SWEEP_PER_ENTRY_US * self.read())
                .max(pass_ms.map_or(0, |ms| i64::from(ms) * 1000))
    }
}

/// Index entries one step of a queue's sweep covers, at most; and how long the queue's claims
/// wait for the next step per entry the last one read. The sweep thus reads at most 200,000
/// entries a second: faster than 8 workers claim (about 60,000 jobs a second here), so that a
/// pass ends, and slow enough that each step costs a few percent of the session that makes it.
const SWEEP_STEP: usize = 10_000;
const SWEEP_PER_ENTRY_US: i64 = 5;

/// One step of the queue's sweep of its due index (see the module comment), from `at` (`None`:
/// the head) towards the session's cursor: claims up to `batch` jobs from the next
/// `SWEEP_STEP` entries of one priority, and returns them with where the next step starts
/// (`None`: the pass reached the cursor, and the next one starts at the head).
#[allow(clippy::too_many_arguments)]
fn sweep_step<T>(
    client: &mut SpiClient<'_>,
    queue: &str,
    batch: i32,
    cursor: DueKey,
    at: Option<DueKey>,
    statement: &'static Statement,
    take: &impl Fn(
        &mut SpiClient<'_>,
        &'static Statement,
        i32,
        Vec<pgrx::datum::DatumWithOid<'static>>,
    ) -> Vec<T>,
) -> (Vec<T>, Option<DueKey>) {
    let Some(walked) = walk::due(queue, at, cursor, SWEEP_STEP) else {
        return (Vec::new(), None);
    };
    let Some(first) = walked.first.filter(|&first| first < cursor) else {
        return (Vec::new(), None);
    };
    // Up to the walk's stop within the priority, or to the priority's end.
    let (to_run_at, to_id) = match walked.stop {
        Some(stop) if stop.priority == first.priority => (stop.run_at, stop.id),
        _ => (pg_sys::TimestampTz::MAX, 0),
    };
    let range = vec![
        first.priority.into(),
        clock::from_raw(first.run_at).into(),
        first.id.into(),
        clock::from_raw(to_run_at).into(),
        to_id.into(),
    ];
    let jobs = take(client, statement, batch, range);
    // A full batch may have left more of the range: the next step starts there again.
    let next = if jobs.len() == batch as usize {
        Some(first)
    } else {
        walked.stop.filter(|&stop| stop < cursor)
    };
    (jobs, next)
}

/// Now on the server's clock, µs: the clock in which backends share their turns (`counters`).
fn micros_now() -> i64 {
    // SAFETY: reads the system clock.
    unsafe { pg_sys::GetCurrentTimestamp() }
}

/// Whether a session looks at `scan` now, given until when it holds off (`until`; `None`: it does
/// not). Once its hold-off has ended, and the queue's sweep has budget left
/// (`counters::sweep_budget_left`), not while another session's turn at it lasts: then `until`
/// moves to the end of that turn.
fn my_turn(
    queue: &str,
    scan: Scan,
    until: &mut Option<i64>,
    now_us: i64,
    interval_ms: i32,
) -> bool {
    match *until {
        None => true,
        Some(until_us) if until_us > now_us => false,
        Some(_) if !counters::sweep_budget_left(queue, scan, now_us) => false,
        Some(_) => match counters::take_turn(queue, scan, now_us, i64::from(interval_ms) * 1000) {
            Some(Err(theirs)) => {
                *until = Some(theirs);
                false
            }
            _ => true,
        },
    }
}

/// Step 1, and the queue's settings — unless this session's last probe of the queue's expired
/// leases was slow, or another session's was: then the queue's claims sweep the lease-end
/// index instead, one bounded step per turn ([`Watch::pace`]), and the others read only the
/// settings. The maintenance worker takes its turns like any session of the queue. `asked`: the
/// jobs the claim asks for (0 for the maintenance worker).
pub(crate) fn reclaim_unless_slow(
    client: &mut SpiClient<'_>,
    queue_name: &str,
    now: TimestampWithTimeZone,
    asked: i32,
) -> Reclaimed {
    let interval = settings::claim_rescan_interval_ms();
    let now_us = micros_now();
    let known = PROBES.with(|p| p.borrow().get(queue_name).copied());
    if interval == 0 {
        return reclaim_expired(client, queue_name, now, None);
    }
    let (mut until, mut sweep) = known.unwrap_or_default();
    if until.is_none() {
        // Another session's probe was slow: its hold-off is the queue's.
        until = counters::held_off(queue_name, Scan::Probe, now_us);
    }
    if !my_turn(queue_name, Scan::Probe, &mut until, now_us, interval) {
        PROBES.with(|p| remember(&mut p.borrow_mut(), queue_name, (until, sweep)));
        counters::count(queue_name, Event::ProbeSkipped, 1);
        return Reclaimed::nothing(client, queue_name);
    }
    let watch = Watch::start(walk::lease_index());
    let reclaimed = match until {
        // Probing as ever.
        None => {
            let reclaimed = reclaim_expired(client, queue_name, now, None);
            until = watch
                .probe_was_slow(known.is_none(), i64::from(asked) + reclaimed.jobs as i64)
                .then(|| {
                    let until = watch.hold_off(interval);
                    counters::defer(queue_name, Scan::Probe, until);
                    until
                });
            reclaimed
        }
        // A step of the sweep, up to the next `SWEEP_STEP` entries' lease ends.
        Some(_) => {
            let now_raw: pg_sys::TimestampTz = now.into();
            let at =
                counters::sweep_at(queue_name, Scan::Probe).map_or(sweep, |at| at.map(|k| k[0]));
            let Some((first, stop)) = walk::expiry(queue_name, at, now_raw, SWEEP_STEP) else {
                // No valid index to walk: the whole look by statement, and probing as ever.
                (until, sweep) = (None, None);
                counters::sweep_to(queue_name, Scan::Probe, None);
                counters::end_turn(queue_name, Scan::Probe, 0);
                let reclaimed = reclaim_expired(client, queue_name, now, None);
                PROBES.with(|p| remember(&mut p.borrow_mut(), queue_name, (until, sweep)));
                return reclaimed;
            };
            counters::count(queue_name, Event::SweepStep, 1);
            let range = first
                .filter(|&first| first <= now_raw)
                .map(|first| (first, stop.unwrap_or(pg_sys::TimestampTz::MAX)));
            let reclaimed = match range {
                Some(_) => reclaim_expired(client, queue_name, now, range),
                None => Reclaimed::nothing(client, queue_name),
            };
            sweep = match range {
                Some((first, _)) if reclaimed.jobs >= RECLAIM_BATCH => Some(first),
                _ => stop.filter(|&stop| stop <= now_raw),
            };
            counters::sweep_to(queue_name, Scan::Probe, sweep.map(|k| [k, 0, 0]));
            counters::spend_sweep_budget(queue_name, Scan::Probe, watch.read(), now_us);
            // The whole pass fit in one step from the earliest: probing is cheap again.
            let cheap = at.is_none()
                && sweep.is_none()
                && !watch.probe_was_slow(false, i64::from(asked) + reclaimed.jobs as i64);
            until = (!cheap).then(|| watch.pace(sweep.is_none().then_some(interval)));
            counters::end_turn(queue_name, Scan::Probe, until.unwrap_or(0));
            reclaimed
        }
    };
    PROBES.with(|p| remember(&mut p.borrow_mut(), queue_name, (until, sweep)));
    reclaimed
}

/// A claim call's lease token: a random (version 4) UUID, as `gen_random_uuid()` makes them. One
/// per call, shared by the jobs it claims: the fence is the job's id with the token, so a job
/// reclaimed since still refuses the old holder — and a batch finish can send the token once
/// (docs/design.md, "One token per claim"). The bytes come from a ChaCha generator of this
/// backend's, seeded from the server's strong random source: that source cost 12 µs a call
/// (OpenSSL checks its own seeding each time), a tenth of a claim of one job. A process forked
/// from one that had seeded it would repeat its tokens, so the seed is tied to the process id.
fn fresh_token() -> pgrx::Uuid {
    use rand::{RngCore, SeedableRng};
    thread_local! {
        static TOKENS: std::cell::RefCell<Option<(i32, rand::rngs::StdRng)>> =
            const { std::cell::RefCell::new(None) };
    }
    // SAFETY: reads this process's id, set before any function runs.
    let pid = unsafe { pg_sys::MyProcPid };
    let mut random = [0u8; 16];
    TOKENS.with(|tokens| {
        let mut tokens = tokens.borrow_mut();
        if tokens
            .as_ref()
            .is_none_or(|(seeded_by, _)| *seeded_by != pid)
        {
            let mut seed = [0u8; 32];
            // SAFETY: fills exactly the buffer it is given.
            if !unsafe { pg_sys::pg_strong_random(seed.as_mut_ptr().cast(), seed.len()) } {
                crate::core::errors::internal(
                    "queue_claim",
                    "could not seed the generator of lease tokens",
                );
            }
            *tokens = Some((pid, rand::rngs::StdRng::from_seed(seed)));
        }
        let (_, rng) = tokens.as_mut().expect("seeded above");
        rng.fill_bytes(&mut random);
    });
    let token = uuid::Builder::from_random_bytes(random).into_uuid();
    pgrx::Uuid::from_bytes(*token.as_bytes())
}

/// Step 3, in its own statement (see the module comment): the attempt numbers of claimed jobs
/// that were claimed before, in the order of `$1` — numbered as every closing statement numbers
/// them (history.rs).
pub(crate) const ATTEMPT_NOS: Statement = Statement {
    name: "claim.attempt_nos",
    sql: "SELECT coalesce((SELECT max(earlier.attempt_no) FROM leaseq.closed_attempts AS earlier
                            WHERE earlier.job_id = claimed.id), 0) + 1
            FROM unnest($1::bigint[]) WITH ORDINALITY AS claimed (id, ord)
           ORDER BY claimed.ord",
    params: &[INT8_ARRAY],
};

/// The statements of step 2: this release's ([`THIS_RELEASE`]), or (compat) an older schema's,
/// whose jobs have no `trace_context` (they return NULL in its place).
pub(crate) struct ClaimStatements {
    pub head: &'static Statement,
    pub after: &'static Statement,
    pub sweep: &'static Statement,
    pub below: &'static Statement,
}

pub(crate) const THIS_RELEASE: ClaimStatements = ClaimStatements {
    head: &CLAIM,
    after: &CLAIM_AFTER,
    sweep: &CLAIM_SWEEP,
    below: &CLAIM_BELOW,
};

/// A claimed job: id, lease token, attempt number, payload, lease end, priority, enqueued at,
/// trace context.
pub(crate) type ClaimedRow = (
    i64,
    pgrx::Uuid,
    i32,
    Jsonb,
    TimestampWithTimeZone,
    i32,
    TimestampWithTimeZone,
    Option<String>,
);

/// Claims up to `batch` due jobs of `queue` for `worker`, after reclaiming the queue's expired
/// leases, and returns them in claim order (priority, then `run_at`, then id).
///
/// Each row carries the `lease_token` to pass to renew/complete/fail, and the `attempt_no`:
/// strictly increasing per job for ever, it is the fencing generation to give to downstream
/// systems. The lease lasts `lease` (NULL: the queue's) from now, on the server's clock. A
/// paused queue (`pause`) returns no rows and reclaims nothing. `trace_context` is the W3C
/// `traceparent` its producer enqueued it with (NULL: none), for the worker's span.
///
/// Errors: `22004` NULL queue/worker/batch, `22023` batch outside 1..=10000 or invalid lease or
/// worker, `42704` unknown queue, `0A000` outside READ COMMITTED.
#[pg_extern(name = "queue_claim")]
pub fn claim_jobs(
    queue: Option<&str>,
    worker: Option<&str>,
    batch: default!(Option<i32>, 1),
    lease: default!(Option<Interval>, "NULL"),
) -> TableIterator<
    'static,
    (
        name!(job_id, i64),
        name!(lease_token, pgrx::Uuid),
        name!(attempt_no, i32),
        name!(payload, Jsonb),
        name!(lease_expires_at, TimestampWithTimeZone),
        name!(priority, i32),
        name!(enqueued_at, TimestampWithTimeZone),
        name!(trace_context, Option<String>),
    ),
> {
    TableIterator::new(claim_with(&THIS_RELEASE, queue, worker, batch, lease))
}

/// `queue_claim`'s work, with the statements of the schema it serves.
pub(crate) fn claim_with(
    statements: &ClaimStatements,
    queue: Option<&str>,
    worker: Option<&str>,
    batch: Option<i32>,
    lease: Option<Interval>,
) -> Vec<ClaimedRow> {
    const F: &str = "queue_claim";
    let queue = args::queue_name(F, queue);
    let worker = args::required(F, "worker", worker);
    args::short_text(F, "worker", worker);
    let batch = args::required(F, "batch", batch);
    args::int_in_range(F, "batch", batch, 1..=args::MAX_BATCH, None);
    if let Some(lease) = lease {
        args::lease(F, lease);
    }
    args::read_committed(F);
    let now = clock::now();

    access::require_queue(F, queue, QueuePrivilege::Work);
    connect::connect(&JOB_PATH, |client| {
        if pause::paused(client, queue) {
            return Vec::new();
        }
        schedule::materialize(client, Some(queue), now);
        let settings = reclaim_unless_slow(client, queue, now, batch).settings;
        let lease = lease.unwrap_or(settings.lease);
        claim(client, statements, queue, worker, batch, lease, now)
    })
}

/// What step 1 did.
pub(crate) struct Reclaimed {
    /// The queue's settings.
    pub settings: Queue,
    /// Expired leases reclaimed (at most `RECLAIM_LIMIT`), and how many of their jobs went dead.
    pub jobs: usize,
    pub dead: usize,
}

impl Reclaimed {
    /// Nothing reclaimed: the queue's settings alone (`42704` when there is no such queue).
    fn nothing(client: &mut SpiClient<'_>, queue_name: &str) -> Reclaimed {
        Reclaimed {
            settings: queue::cached(client, "queue_claim", queue_name),
            jobs: 0,
            dead: 0,
        }
    }
}

/// Whether a lease of `queue` may have ended by `now` (raw). Every running job is in a lease row
/// that ends no later than its lease, written before its claim or renewal commits (before 0.4.0:
/// an entry of its own in the lease-expiry index), so when the queue's first entry of the index
/// of lease ends (a dead row's too, unless a scan marked it killed) ends after `now`, none has;
/// without a valid index to walk, one may have.
pub(crate) fn lease_may_have_ended(queue: &str, now: pg_sys::TimestampTz) -> bool {
    !matches!(walk::expiry(queue, None, now, 1), Some((None, _)))
}

/// The most expired leases one call of `reclaim_expired` reclaims.
pub(crate) const RECLAIM_BATCH: usize = RECLAIM_LIMIT as usize;

/// Step 1 (also the maintenance worker's): `42704` when there is no such queue. Only the expired
/// leases that end within `range` (from, up to but excluding; raw times) when given.
pub(crate) fn reclaim_expired(
    client: &mut SpiClient<'_>,
    queue: &str,
    now: TimestampWithTimeZone,
    range: Option<(pg_sys::TimestampTz, pg_sys::TimestampTz)>,
) -> Reclaimed {
    if range.is_none() && !lease_may_have_ended(queue, now.into()) {
        return Reclaimed::nothing(client, queue);
    }
    let mut args = vec![queue.into(), now.into(), RECLAIM_LIMIT.into()];
    let statement = match range {
        None => &SETTINGS_AND_EXPIRED,
        Some((from, to)) => {
            args.extend([clock::from_raw(from).into(), clock::from_raw(to).into()]);
            &SETTINGS_AND_EXPIRED_IN
        }
    };
    let rows = spi::run(client, statement, &args);
    if rows.is_empty() {
        crate::core::errors::unknown_queue("queue_claim", queue);
    }
    let mut rng = rand::rng();
    let mut settings = None;
    // Each expired job: id, whether it goes dead, its next run_at, when its lease expired, token.
    let mut expired = Vec::new();
    rows.map(|row| {
        let settings = settings.get_or_insert_with(|| queue::loaded(row));
        let Some(id) = row.get::<i64>(4) else {
            return; // the queue's row alone: nothing expired
        };
        let attempts: i32 = row.required(5);
        let max_attempts: i32 = row.required(6);
        let delay = backoff::retry_delay(attempts, settings.backoff, &mut rng);
        expired.push((
            id,
            attempts >= max_attempts,
            clock::plus_micros(now, delay),
            row.required::<TimestampWithTimeZone>(7),
            row.required::<pgrx::Uuid>(8),
        ));
    });
    let settings = settings.expect("at least the queue's row");
    // A job of a group that ends here needs its group, taken only if nobody holds it (`group`);
    // otherwise it stays expired for a later claim.
    let ending: Vec<i64> = expired.iter().filter(|e| e.1).map(|e| e.0).collect();
    let (groups, held_back) = group::try_lock(client, &ending);
    if !held_back.is_empty() {
        let (ids, tokens): (Vec<i64>, Vec<pgrx::Uuid>) = expired
            .iter()
            .filter(|e| held_back.contains(&e.0))
            .map(|e| (e.0, e.4))
            .unzip();
        spi::run(
            client,
            &KEEP_EXPIRED,
            &[queue.into(), now.into(), ids.into(), tokens.into()],
        );
    }
    expired.retain(|e| !held_back.contains(&e.0));
    if expired.is_empty() {
        return Reclaimed {
            settings,
            jobs: 0,
            dead: 0,
        };
    }
    let (mut ids, mut dead, mut run_at, mut expired_at, mut tokens) =
        (vec![], vec![], vec![], vec![], vec![]);
    for (id, goes_dead, next_run_at, expired_when, token) in expired {
        ids.push(id);
        dead.push(goes_dead);
        run_at.push(next_run_at);
        expired_at.push(expired_when);
        tokens.push(token);
    }
    let reclaimed = ids.len();
    let dead_ids: Vec<i64> = ids
        .iter()
        .zip(&dead)
        .filter_map(|(&id, &dead)| dead.then_some(id))
        .collect();
    let went_dead = dead_ids.len();
    let (jobs, attempts) = spi::run(
        client,
        &RECLAIM,
        &[
            ids.into(),
            dead.into(),
            run_at.into(),
            expired_at.into(),
            now.into(),
            tokens.into(),
        ],
    )
    .single(|row| (row.required::<i64>(1), row.required::<i64>(2)));
    if jobs as usize != reclaimed || attempts != jobs {
        crate::core::errors::internal(
            "queue_claim",
            "a reclaimed job's attempt was not closed once",
        );
    }
    counters::count(queue, Event::LeaseExpired, reclaimed);
    counters::count(queue, Event::Dead, went_dead);
    group::admit(client, &groups, now);
    depend::finished(client, &dead_ids, JobStatus::Dead, now);
    Reclaimed {
        settings,
        jobs: reclaimed,
        dead: went_dead,
    }
}

/// Steps 2 and 3.
fn claim(
    client: &mut SpiClient<'_>,
    statements: &ClaimStatements,
    queue: &str,
    worker: &str,
    batch: i32,
    lease: Interval,
    now: TimestampWithTimeZone,
) -> Vec<ClaimedRow> {
    struct Claimed {
        id: i64,
        token: pgrx::Uuid,
        payload: Jsonb,
        lease_expires_at: TimestampWithTimeZone,
        priority: i32,
        run_at: TimestampWithTimeZone,
        enqueued_at: TimestampWithTimeZone,
        first_claim: bool,
        trace_context: Option<String>,
    }
    impl Claimed {
        fn key(&self) -> DueKey {
            DueKey {
                priority: self.priority,
                run_at: self.run_at.into(),
                id: self.id,
            }
        }
    }
    let token = fresh_token();
    let take =
        |client: &mut SpiClient<'_>, statement: &'static Statement, n: i32, after: Vec<_>| {
            let mut params = vec![
                queue.into(),
                now.into(),
                n.into(),
                lease.into(),
                worker.into(),
                token.into(),
            ];
            params.extend(after);
            spi::run(client, statement, &params).map(|row| Claimed {
                id: row.required(1),
                token: row.required(2),
                payload: row.required(3),
                lease_expires_at: row.required(4),
                priority: row.required(5),
                run_at: row.required(6),
                enqueued_at: row.required(7),
                first_claim: row.required(8),
                trace_context: row.get(9),
            })
        };
    // From the head, unless the queue's claims hold off it (after a slow claim from it, this
    // session's or another's): then after the session's cursor, once per turn a step of the
    // queue's sweep before it, and below its priority what that leaves unfilled.
    let interval = settings::claim_rescan_interval_ms();
    let now_us = micros_now();
    let mut known = CURSORS.with(|c| c.borrow().get(queue).copied());
    let mut until = known.and_then(|c| c.until);
    if until.is_none() && interval > 0 {
        until = counters::held_off(queue, Scan::Head, now_us);
        // A session new to the queue starts after the queue's last claim after a cursor.
        if until.is_some() && known.is_none() {
            known = counters::frontier(queue).flatten().map(|key| Cursor {
                key: DueKey::from_raw(key),
                until,
                sweep: None,
            });
        }
    }
    let mut sweep = known.and_then(|c| c.sweep);
    let mut jobs = Vec::new();
    match known.filter(|_| interval > 0 && until.is_some()) {
        None => {
            let head = Watch::start(c"jobs_due_idx");
            counters::claimed(queue, Event::ClaimedFromHead, batch);
            jobs = take(client, statements.head, batch, Vec::new());
            let slow = head.claim_was_slow(known.is_none(), batch);
            until = (interval > 0 && slow).then(|| {
                let until = head.hold_off(interval);
                counters::defer(queue, Scan::Head, until);
                until
            });
        }
        Some(c) => {
            // A step of the sweep from where the queue's stands: the jobs it claimed, and
            // whether the whole pass fit in it from the head — then the head is cheap again.
            let step = |client: &mut SpiClient<'_>, asked: i32, sweep: &mut Option<DueKey>| {
                let watch = Watch::start(c"jobs_due_idx");
                let at = counters::sweep_at(queue, Scan::Head)
                    .map_or(*sweep, |at| at.map(DueKey::from_raw));
                let (found, next) =
                    sweep_step(client, queue, asked, c.key, at, statements.sweep, &take);
                counters::count(queue, Event::SweepStep, 1);
                *sweep = next;
                counters::sweep_to(queue, Scan::Head, next.map(DueKey::raw));
                counters::spend_sweep_budget(queue, Scan::Head, watch.read(), micros_now());
                let cheap = at.is_none() && next.is_none() && !watch.claim_was_slow(false, asked);
                (found, watch, cheap)
            };
            let turn = my_turn(queue, Scan::Head, &mut until, now_us, interval);
            if turn {
                let (found, watch, cheap) = step(client, batch, &mut sweep);
                jobs = found;
                until = (!cheap).then(|| watch.pace(sweep.is_none().then_some(interval)));
                counters::end_turn(queue, Scan::Head, until.unwrap_or(0));
            }
            counters::claimed(queue, Event::ClaimedAfterCursor, batch);
            let after = vec![
                c.key.priority.into(),
                clock::from_raw(c.key.run_at).into(),
                c.key.id.into(),
            ];
            let asked = batch - jobs.len() as i32;
            if asked > 0 {
                jobs.extend(take(client, statements.after, asked, after));
            }
            let asked = batch - jobs.len() as i32;
            if asked > 0 {
                jobs.extend(take(
                    client,
                    statements.below,
                    asked,
                    vec![c.key.priority.into()],
                ));
            }
            // Nothing after the cursor nor below it: what sorts before it is found by the
            // sweep, which goes on now, without the turn, for up to one step's entries — while
            // the queue's sweep has budget left.
            let dry = Watch::start(c"jobs_due_idx");
            while jobs.is_empty()
                && !turn
                && until.is_some()
                && counters::sweep_budget_left(queue, Scan::Head, micros_now())
            {
                let (found, _, cheap) = step(client, batch, &mut sweep);
                jobs = found;
                if cheap {
                    until = None;
                }
                if sweep.is_none() || dry.read() >= SWEEP_STEP as i64 {
                    break;
                }
            }
        }
    }
    // RETURNING order is unspecified: restore claim order.
    jobs.sort_by_key(Claimed::key);
    if interval > 0 {
        // The furthest key claimed: a sweep's jobs sort before the cursor.
        let key = jobs
            .last()
            .map(Claimed::key)
            .into_iter()
            .chain(known.map(|c| c.key))
            .max();
        if let Some(key) = key {
            // Where a session new to the queue starts while it holds off the head.
            if until.is_some() && !jobs.is_empty() {
                counters::frontier_to(queue, key.raw());
            }
            let next = Cursor { key, until, sweep };
            CURSORS.with(|c| remember(&mut c.borrow_mut(), queue, next));
        }
    }
    if jobs.is_empty() {
        return Vec::new();
    }

    let again: Vec<i64> = jobs
        .iter()
        .filter(|j| !j.first_claim)
        .map(|j| j.id)
        .collect();
    let mut numbered = Vec::new();
    if !again.is_empty() {
        let wanted = again.len();
        numbered = spi::run(client, &ATTEMPT_NOS, &[again.into()]).map(|row| row.required(1));
        if numbered.len() != wanted {
            crate::core::errors::internal("queue_claim", "a claimed job was not numbered");
        }
    }
    let mut numbered = numbered.into_iter();
    jobs.into_iter()
        .map(|j| {
            let attempt_no = if j.first_claim {
                1
            } else {
                numbered.next().expect("one number per job claimed before")
            };
            (
                j.id,
                j.token,
                attempt_no,
                j.payload,
                j.lease_expires_at,
                j.priority,
                j.enqueued_at,
                j.trace_context,
            )
        })
        .collect()
}

#[cfg(test)]
mod unit_tests {
    /// What numbering a first claim 1 without looking at history rests on: the claim is the one
    /// statement that sets `started_at`, and nothing clears it.
    #[test]
    fn only_the_claim_sets_started_at() {
        let assign = concat!("started_at", " ="); // split, so that this line is no match
        let assignments: usize = crate::rules::sources()
            .values()
            .map(|source| source.matches(assign).count())
            .sum();
        // The claim's statements: this release's and (compat) an older schema's.
        let claims: Vec<_> = crate::statements::ALL
            .iter()
            .map(|(statement, _)| statement)
            .filter(|statement| statement.sql.contains(assign))
            .collect();
        assert_eq!(assignments, claims.len());
        for claim in claims {
            assert!(
                claim.name.starts_with("claim") && claim.sql.contains(&format!("{assign} $2")),
                "{}",
                claim.name
            );
        }
    }
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use pgrx::prelude::*;

    #[pg_test]
    fn claim_takes_exactly_batch_jobs_even_with_stale_statistics() {
        // No ANALYZE after the insert: the planner's estimates are wrong, which is when a
        // `WHERE id IN (SELECT … LIMIT n)` claim re-runs its subquery and takes too many.
        Spi::run("SELECT leaseq.queue_create('claim_exact')").unwrap();
        Spi::run(
            "SELECT leaseq.queue_enqueue_batch('claim_exact',
                 ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 200)))",
        )
        .unwrap();
        let claimed =
            Spi::get_one::<i64>("SELECT count(*) FROM leaseq.queue_claim('claim_exact', 'w', 2)");
        assert_eq!(claimed, Ok(Some(2)));
        let running = Spi::get_one::<i64>(
            "SELECT count(*) FROM leaseq.jobs WHERE queue = 'claim_exact' AND status = 'running'",
        );
        assert_eq!(running, Ok(Some(2)));
    }

    #[pg_test]
    fn claim_on_an_empty_queue_returns_no_rows() {
        Spi::run("SELECT leaseq.queue_create('claim_empty')").unwrap();
        let claimed =
            Spi::get_one::<i64>("SELECT count(*) FROM leaseq.queue_claim('claim_empty', 'w', 100)");
        assert_eq!(claimed, Ok(Some(0)));
    }

    #[pg_test]
    fn claim_uses_the_given_lease_over_the_queues() {
        Spi::run("SELECT leaseq.queue_create('claim_lease', lease => '1 minute')").unwrap();
        Spi::run("SELECT leaseq.queue_enqueue('claim_lease', '{}')").unwrap();
        let long = Spi::get_one::<bool>(
            "SELECT lease_expires_at > clock_timestamp() + interval '59 minutes'
               FROM leaseq.queue_claim('claim_lease', 'w', lease => '1 hour')",
        );
        assert_eq!(long, Ok(Some(true)));
    }

    /// After a slow claim from the head (here: every one), a session's claims start after the
    /// last job it claimed: a job that sorts before it (an earlier `run_at`, a higher priority)
    /// waits for the queue's sweep — its turn, or a claim that finds nothing after the cursor —
    /// and with the interval at 0 every claim starts from the head again, in exact order.
    #[pg_test]
    fn a_claim_after_the_cursor_leaves_what_sorts_before_it_to_the_sweep() {
        let claim = || {
            Spi::get_one::<String>(
                "SELECT payload->>'n' FROM leaseq.queue_claim('claim_cursor', 'w')",
            )
            .unwrap()
            .unwrap_or_default()
        };
        let enqueue = |n: &str, settings: &str| {
            Spi::run(&format!(
                "SELECT leaseq.queue_enqueue('claim_cursor', '{{\"n\": \"{n}\"}}'{settings})"
            ))
            .unwrap();
        };
        Spi::run("SELECT leaseq.queue_create('claim_cursor')").unwrap();
        // Every claim from the head counts as slow: the cursor stays on for the hour.
        Spi::run("SET leaseq.claim_rescan_interval = '1h'").unwrap();
        Spi::run("SET leaseq.claim_slow_head = 0").unwrap();
        for n in ["a", "b", "c"] {
            enqueue(n, ", run_at => now() - interval '1 minute'");
        }
        assert_eq!(claim(), "a", "the first claim starts at the head");
        enqueue("earlier", ", run_at => now() - interval '1 hour'");
        enqueue(
            "urgent",
            ", priority => 5, run_at => now() - interval '1 minute'",
        );
        assert_eq!(claim(), "b", "after the cursor: what sorts before it waits");
        assert_eq!(claim(), "c");
        // Nothing after the cursor: the same claim sweeps from the head, in index order.
        assert_eq!(claim(), "urgent");
        assert_eq!(claim(), "earlier");
        let left =
            Spi::get_one::<i64>("SELECT count(*) FROM leaseq.queue_claim('claim_cursor', 'w')");
        assert_eq!(left, Ok(Some(0)), "nothing left anywhere");

        enqueue("d", "");
        enqueue("first again", ", run_at => now() - interval '2 hours'");
        Spi::run("SET leaseq.claim_rescan_interval = 0").unwrap();
        assert_eq!(claim(), "first again", "every claim from the head");
        assert_eq!(claim(), "d");
    }

    /// A claim from the head that read more than `SLOW_ENTRIES` (plus 10 per job) index entries
    /// is slow however fast it ran: here the entries of 1,200 jobs this transaction claimed,
    /// which no scan may skip while it lasts, as while a snapshot holds vacuum back.
    #[pg_test]
    fn a_claim_that_read_the_entries_of_many_claimed_jobs_starts_the_cursor() {
        Spi::run("SELECT leaseq.queue_create('claim_entries')").unwrap();
        Spi::run("SET leaseq.claim_rescan_interval = '1h'").unwrap();
        // Time never makes a claim slow here: only what it read.
        Spi::run("SET leaseq.claim_slow_head = 2147483647").unwrap();
        Spi::run(
            "SELECT leaseq.queue_enqueue_batch('claim_entries',
                 ARRAY(SELECT jsonb_build_object('n', n) FROM generate_series(1, 1203) AS n),
                 run_at => now() - interval '1 minute')",
        )
        .unwrap();
        let claim = || {
            Spi::get_one::<i32>(
                "SELECT (payload->>'n')::int FROM leaseq.queue_claim('claim_entries', 'w')",
            )
            .unwrap()
            .unwrap()
        };
        let claimed = Spi::get_one::<i64>(
            "SELECT count(*) FROM leaseq.queue_claim('claim_entries', 'w', 1200)",
        );
        assert_eq!(
            claimed,
            Ok(Some(1200)),
            "1,200 entries for 1,200 jobs: not slow"
        );
        assert_eq!(
            claim(),
            1201,
            "from the head, past 1,200 claimed entries: slow"
        );
        Spi::run("SELECT leaseq.queue_enqueue('claim_entries', '{\"n\": 0}', priority => 5)")
            .unwrap();
        assert_eq!(claim(), 1202, "after the cursor: the urgent job waits");
        assert_eq!(claim(), 1203);
        assert_eq!(claim(), 0, "nothing after the cursor: the sweep finds it");
    }

    /// A renewed job is in two lease rows: its claim's and its renewal's. When both have come
    /// due by the time a claim looks (claims held off, or none for a while) and the job's lease
    /// has ended, the look reclaims it once, with one attempt closed `lease_expired`.
    #[pg_test]
    fn a_renewed_job_whose_two_lease_rows_are_due_is_reclaimed_once() {
        Spi::run("SET LOCAL leaseq.claim_rescan_interval = 0").unwrap();
        Spi::run(
            "SELECT leaseq.queue_create('claim_renewed', lease => '1 hour',
                                       backoff_base => '1 hour', backoff_cap => '1 hour')",
        )
        .unwrap();
        Spi::run("SELECT leaseq.queue_enqueue('claim_renewed', '{}')").unwrap();
        Spi::run(
            "CREATE TEMP TABLE renewed AS
                 SELECT job_id, lease_token FROM leaseq.queue_claim('claim_renewed', 'w')",
        )
        .unwrap();
        Spi::run("SELECT leaseq.queue_renew(job_id, lease_token, '2 hours') FROM renewed").unwrap();
        // Both rows, and the lease, end in the past.
        Spi::run(
            "UPDATE leaseq.jobs SET lease_expires_at = clock_timestamp() - interval '1 ms'
              WHERE queue = 'claim_renewed'",
        )
        .unwrap();
        Spi::run(
            "UPDATE leaseq.leases SET expires_at = clock_timestamp() - interval '1 ms'
              WHERE queue = 'claim_renewed'",
        )
        .unwrap();
        let rows =
            Spi::get_one::<i64>("SELECT count(*) FROM leaseq.leases WHERE queue = 'claim_renewed'");
        assert_eq!(rows, Ok(Some(2)), "the claim's row and the renewal's");
        Spi::run("SELECT count(*) FROM leaseq.queue_claim('claim_renewed', 'w')").unwrap();
        let history = Spi::get_one::<String>(
            "SELECT job.status::text || ' ' || string_agg(a.outcome::text, ',')
               FROM leaseq.jobs AS job JOIN leaseq.attempts AS a ON a.job_id = job.id
              WHERE job.queue = 'claim_renewed' GROUP BY job.status",
        );
        assert_eq!(history, Ok(Some("pending lease_expired".to_string())));
    }

    /// After a slow probe of expired leases (here: every one), a session's claims skip step 1
    /// for the interval: an expired lease waits for it (or the maintenance worker), then is
    /// reclaimed as ever.
    #[pg_test]
    fn after_a_slow_probe_claims_skip_reclaim_for_the_interval() {
        Spi::run("SELECT leaseq.queue_create('claim_probe')").unwrap();
        Spi::run("SELECT leaseq.queue_enqueue_batch('claim_probe', ARRAY['{}', '{}']::jsonb[])")
            .unwrap();
        Spi::run("SET leaseq.claim_rescan_interval = '1h'").unwrap();
        Spi::run("SET leaseq.claim_slow_head = 0").unwrap();
        let claimed =
            Spi::get_one::<i64>("SELECT job_id FROM leaseq.queue_claim('claim_probe', 'w')")
                .unwrap()
                .unwrap();
        Spi::run_with_args(
            "WITH ended AS (
                UPDATE leaseq.jobs SET lease_expires_at = clock_timestamp() - interval '1 ms'
                 WHERE id = $1
                RETURNING queue, lease_expires_at, lease_token, id)
            INSERT INTO leaseq.leases (queue, expires_at, token, job_ids)
            SELECT queue, lease_expires_at, lease_token, ARRAY[id] FROM ended",
            &[claimed.into()],
        )
        .unwrap();
        let status = || {
            Spi::get_one_with_args::<String>(
                "SELECT status::text FROM leaseq.jobs WHERE id = $1",
                &[claimed.into()],
            )
            .unwrap()
            .unwrap()
        };
        Spi::run("SELECT count(*) FROM leaseq.queue_claim('claim_probe', 'w')").unwrap();
        assert_eq!(
            status(),
            "running",
            "the probe was skipped: still expired, not reclaimed"
        );
        Spi::run("SET leaseq.claim_rescan_interval = 0").unwrap();
        Spi::run("SELECT count(*) FROM leaseq.queue_claim('claim_probe', 'w')").unwrap();
        assert_eq!(status(), "pending", "probed again: reclaimed");
    }

    /// Lease tokens are random UUIDs of version 4 and the RFC 4122 variant, as
    /// `gen_random_uuid()` makes them: one per claim call, shared by the jobs it claims, and
    /// every call's its own.
    #[pg_test]
    fn each_claim_call_has_its_own_random_version_4_lease_token() {
        Spi::run("SELECT leaseq.queue_create('claim_tokens')").unwrap();
        Spi::run(
            "SELECT leaseq.queue_enqueue_batch('claim_tokens',
                 ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 200)))",
        )
        .unwrap();
        Spi::run(
            "CREATE TEMP TABLE claimed AS
                 SELECT call, claimed.job_id, claimed.lease_token
                   FROM generate_series(1, 20) AS call,
                        -- the worker names the call: a scan whose arguments do not change is
                        -- run once, and its rows replayed
                        LATERAL leaseq.queue_claim('claim_tokens', 'w' || call, 10) AS claimed",
        )
        .unwrap();
        let per_call = Spi::get_one::<i64>(
            "SELECT count(*) FROM (SELECT call FROM claimed GROUP BY call
                                   HAVING count(DISTINCT lease_token) = 1
                                      AND count(*) = 10) AS one_token_each",
        );
        assert_eq!(per_call, Ok(Some(20)), "each call: 10 jobs, one token");
        let tokens = Spi::get_two::<i64, bool>(
            "SELECT count(DISTINCT lease_token),
                    bool_and(lease_token::text
                             ~ '^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$')
               FROM claimed",
        );
        assert_eq!(tokens, Ok((Some(20), Some(true))), "a token per call");
        let jobs = Spi::get_one::<i64>("SELECT count(DISTINCT job_id) FROM claimed");
        assert_eq!(jobs, Ok(Some(200)), "20 calls, 200 jobs");
    }
}
