//! How leaseq runs SQL.
//!
//! - **Statements** are static, parameterised, named texts, prepared once per backend the first
//!   time they run and kept (`SPI_keepplan`), so a call never re-parses or re-plans. PostgreSQL's
//!   plan cache still re-validates a kept plan after DDL on its tables.
//! - **Settings**: every function runs its statements through [`connect`], under the settings it
//!   names there — the one mechanism, declared at each function, applied once per call and
//!   restored after it. No function carries `SET` clauses in its definition: what lives in the
//!   library cannot be lost by an upgrade script that replaces a function, and a set-returning
//!   function does not re-apply its settings once per returned row (PostgreSQL does that with
//!   `SET` clauses: measured at 12% of a 1000-job `queue_enqueue_batch`).
//! - **Results** are read through [`Row`], which fails loudly: a NULL where the statement
//!   guarantees a value, or a value of another type, raises `XX000` naming the statement and
//!   the column — never a silent default that would read as "fenced" or "nothing happened".
//! - **Rights**: the statements run as the role that owns leaseq's tables (`leaseq_owner`, see
//!   sql/privileges.sql), switched to once per call around them and back after — what fmgr does
//!   for a `SECURITY DEFINER` function, without the function's definition saying so: the caller's
//!   identity stays known for the per-queue checks that run before (src/access.rs), and a set-
//!   returning function does not switch once per row. No switch on a database still at 0.1.0,
//!   whose functions ran with the caller's rights.
//! - **The clock**: `clock_timestamp()`, read once per call and passed to the statements as a
//!   parameter, so all of one call's decisions use the same instant and index conditions stay
//!   plain comparisons.
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::CStr;
use std::rc::Rc;

use pgrx::PgMemoryContexts;
use pgrx::datum::{DatumWithOid, FromDatum, IntoDatum};
use pgrx::pg_sys::PgOid;
use pgrx::prelude::*;
use pgrx::spi::{OwnedPreparedStatement, SpiClient, SpiTupleTable};

use crate::errors;
use crate::schema;

/// A statement: its name (for errors), its text and its parameter types.
pub struct Statement {
    pub name: &'static str,
    pub sql: &'static str,
    pub params: &'static [PgOid],
}

pub const TEXT: PgOid = PgOid::from_untagged(pg_sys::TEXTOID);
pub const INT4: PgOid = PgOid::from_untagged(pg_sys::INT4OID);
pub const INT8: PgOid = PgOid::from_untagged(pg_sys::INT8OID);
pub const OID: PgOid = PgOid::from_untagged(pg_sys::OIDOID);
pub const BOOL: PgOid = PgOid::from_untagged(pg_sys::BOOLOID);
pub const UUID: PgOid = PgOid::from_untagged(pg_sys::UUIDOID);
pub const JSONB: PgOid = PgOid::from_untagged(pg_sys::JSONBOID);
pub const INTERVAL: PgOid = PgOid::from_untagged(pg_sys::INTERVALOID);
pub const TIMESTAMPTZ: PgOid = PgOid::from_untagged(pg_sys::TIMESTAMPTZOID);
pub const INT8_ARRAY: PgOid = PgOid::from_untagged(pg_sys::INT8ARRAYOID);
pub const UUID_ARRAY: PgOid = PgOid::from_untagged(pg_sys::UUIDARRAYOID);
pub const BOOL_ARRAY: PgOid = PgOid::from_untagged(pg_sys::BOOLARRAYOID);
pub const JSONB_ARRAY: PgOid = PgOid::from_untagged(pg_sys::JSONBARRAYOID);
pub const TIMESTAMPTZ_ARRAY: PgOid = PgOid::from_untagged(pg_sys::TIMESTAMPTZARRAYOID);
pub const TEXT_ARRAY: PgOid = PgOid::from_untagged(pg_sys::TEXTARRAYOID);

/// A named group of settings that a function's statements run under.
pub struct Settings {
    pub values: &'static [(&'static CStr, &'static CStr)],
}

/// The job path: claim, renew, finish, enqueue, redrive, cancel, inspect one job. Each statement
/// has one right plan — an index walk over one queue's due work, or nested loops reaching single
/// jobs through their primary key — and the planner strays from it exactly when it hurts: the
/// plan cache re-plans each backend's first calls with the parameters' values (custom plans,
/// measured at 10% of a claim); a generic plan for `LIMIT $n` guesses hundreds of rows and hash-
/// or merge-joins the claimed ids against every pending job; and a plan made while statistics
/// describe an empty table (a new queue, a truncated one) prefers scans that grow with the
/// queue. So: generic plans, made once per backend, no sequential scans, no hash or merge joins,
/// and no JIT — a generic claim plan's estimated cost grows with the backlog and passed
/// `jit_above_cost` near a million due jobs, after which every claim spent 9 ms compiling
/// (0.08× the rate of a small backlog, measured). The partial indexes' predicates keep
/// single-job statements on `jobs_pkey` (see sql/schema.sql). `search_path` is pinned: nothing
/// resolves through the caller's path, and a kept plan is re-analysed whenever it changes.
pub const JOB_PATH: Settings = Settings {
    values: &[
        (c"search_path", c"pg_catalog, pg_temp"),
        (c"plan_cache_mode", c"force_generic_plan"),
        (c"enable_seqscan", c"off"),
        (c"enable_hashjoin", c"off"),
        (c"enable_mergejoin", c"off"),
        (c"jit", c"off"),
    ],
};

/// Whole-queue reads and deletes (`queue_stats`, `queue_jobs`, `queue_purge`): the planner's own
/// choices, which may rightly scan a table; only `search_path` is pinned.
pub const WHOLE_QUEUE: Settings = Settings {
    values: &[(c"search_path", c"pg_catalog, pg_temp")],
};

thread_local! {
    // A backend is single-threaded: this is one cache per backend. Plans are handed out as `Rc`
    // so no borrow is held while a statement runs (a trigger may call back into leaseq).
    // Keyed by the address of the statement's text, not the text: hashing a kilobyte of SQL on
    // every run showed in profiles. Distinct texts never share an address (a text the compiler
    // keeps twice is merely prepared twice).
    static PLANS: RefCell<HashMap<usize, Rc<OwnedPreparedStatement>>> =
        RefCell::new(HashMap::new());
}

/// Runs `f` with an SPI connection, under `settings` and with the rights of leaseq's owner, both
/// restored when `f` returns. The only way leaseq's functions run SQL.
pub fn connect<R>(settings: &Settings, f: impl FnOnce(&mut SpiClient<'_>) -> R) -> R {
    // SAFETY: what fmgr does for a function's SET clauses: the values are saved at a new GUC
    // nest level and restored by popping it; an error pops it with the (sub)transaction's abort.
    let level = unsafe { pg_sys::NewGUCNestLevel() };
    for (name, value) in settings.values {
        unsafe {
            pg_sys::set_config_option(
                name.as_ptr(),
                value.as_ptr(),
                pg_sys::GucContext::PGC_USERSET,
                pg_sys::GucSource::PGC_S_SESSION,
                pg_sys::GucAction::GUC_ACTION_SAVE,
                true,
                0,
                false,
            )
        };
    }
    let result = Spi::connect_mut(|client| {
        let owner = schema::owner(client);
        let (mut caller, mut context) = (pg_sys::Oid::INVALID, 0);
        // SAFETY: fmgr_security_definer's switch: the caller is restored after `f`, and by the
        // (sub)transaction's abort when `f` raises. SECURITY_LOCAL_USERID_CHANGE refuses SET ROLE
        // and SET SESSION AUTHORIZATION meanwhile.
        unsafe {
            pg_sys::GetUserIdAndSecContext(&mut caller, &mut context);
            if let Some(owner) = owner {
                let local = context | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32;
                pg_sys::SetUserIdAndSecContext(owner, local);
            }
        }
        let result = f(client);
        unsafe { pg_sys::SetUserIdAndSecContext(caller, context) };
        result
    });
    unsafe { pg_sys::AtEOXact_GUC(true, level) };
    result
}

/// Runs `statement` with `args`, preparing it on first use in this backend.
pub fn run<'conn>(
    client: &mut SpiClient<'conn>,
    statement: &'static Statement,
    args: &[DatumWithOid<'_>],
) -> Rows<'conn> {
    let key = statement.sql.as_ptr() as usize;
    let cached = PLANS.with(|plans| plans.borrow().get(&key).cloned());
    let plan = match cached {
        Some(plan) => plan,
        None => {
            let plan = client
                .prepare_mut(statement.sql, statement.params)
                .unwrap_or_else(|e| {
                    errors::internal_statement(statement.name, &format!("cannot prepare: {e}"))
                })
                .keep();
            let plan = Rc::new(plan);
            PLANS.with(|plans| plans.borrow_mut().insert(key, plan.clone()));
            plan
        }
    };
    let table = client
        .update(&*plan, None, args)
        .unwrap_or_else(|e| errors::internal_statement(statement.name, &format!("{e}")));
    // SAFETY: the statement just ran: SPI_tuptable is its result (NULL when it returned none),
    // which stays allocated until the SPI connection ends — beyond `'conn`'s reach.
    let raw = unsafe { pg_sys::SPI_tuptable };
    Rows {
        statement,
        table,
        raw,
    }
}

/// The rows a statement returned.
pub struct Rows<'conn> {
    statement: &'static Statement,
    table: SpiTupleTable<'conn>,
    raw: *mut pg_sys::SPITupleTable,
}

impl Rows<'_> {
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Each row through `f`, in the order the statement returned them.
    pub fn map<T>(self, f: impl FnMut(&Row<'_>) -> T) -> Vec<T> {
        self.read(usize::MAX, f)
    }

    /// The first row through `f`, or `None` when the statement returned no row.
    pub fn first<T>(self, f: impl FnOnce(&Row<'_>) -> T) -> Option<T> {
        let mut f = Some(f);
        let first = self.read(1, |row| f.take().map(|f| f(row)));
        first.into_iter().next().flatten()
    }

    /// The first `limit` rows through `f`. Each row is taken apart once, with one call, and its
    /// values read from that: reading it through pgrx costs two guarded calls per column and a
    /// vector per row, a sixth of a claim's time in a profile (docs/benchmarks.md).
    fn read<T>(self, limit: usize, mut f: impl FnMut(&Row<'_>) -> T) -> Vec<T> {
        let rows = self.table.len().min(limit);
        let mut out = Vec::with_capacity(rows);
        if rows == 0 || self.raw.is_null() {
            return out;
        }
        // SAFETY: `raw` is the statement's result, holding at least `rows` tuples.
        let (tuples, descriptor) = unsafe {
            let raw = &*self.raw;
            (std::slice::from_raw_parts(raw.vals, rows), raw.tupdesc)
        };
        // SAFETY: a valid descriptor, whose `natts` attributes follow it.
        let attributes = unsafe {
            let columns = usize::try_from((*descriptor).natts).expect("natts ≥ 0");
            (*descriptor).attrs.as_slice(columns)
        };
        let columns = attributes.len();
        // Values are copied into the context the function was called in, so that they outlive
        // the SPI connection (as pgrx's own reading does).
        // SAFETY: inside an SPI connection, whose context always has a parent.
        let outer = unsafe { PgMemoryContexts::CurrentMemoryContext.parent() }
            .expect("SPI's context has a parent")
            .value();
        let (mut values, mut nulls) = (vec![pg_sys::Datum::from(0); columns], vec![true; columns]);
        for &tuple in tuples {
            // SAFETY: a tuple of this descriptor, and arrays of its width.
            unsafe {
                pg_sys::heap_deform_tuple(
                    tuple,
                    descriptor,
                    values.as_mut_ptr(),
                    nulls.as_mut_ptr(),
                )
            };
            out.push(f(&Row {
                statement: self.statement,
                attributes,
                values: &values,
                nulls: &nulls,
                outer,
            }));
        }
        out
    }

    /// The one row of a statement that always returns exactly one (an aggregate, say).
    pub fn single<T>(self, f: impl FnOnce(&Row<'_>) -> T) -> T {
        let name = self.statement.name;
        let rows = self.table.len();
        if rows != 1 {
            errors::internal_statement(name, &format!("returned {rows} rows instead of one"));
        }
        self.first(f).expect("one row, checked above")
    }
}

/// One row of a statement's result; values are read by 1-based column position.
pub struct Row<'a> {
    statement: &'static Statement,
    attributes: &'a [pg_sys::FormData_pg_attribute],
    values: &'a [pg_sys::Datum],
    nulls: &'a [bool],
    outer: pg_sys::MemoryContext,
}

impl Row<'_> {
    /// The value of a column that may be NULL. A value of another type is an internal error.
    pub fn get<T: IntoDatum + FromDatum>(&self, column: usize) -> Option<T> {
        if column == 0 || column > self.attributes.len() {
            errors::internal_statement(
                self.statement.name,
                &format!("column {column}: no such column"),
            );
        }
        let i = column - 1;
        let type_oid = self.attributes[i].atttypid;
        // SAFETY: compares type oids (a catalog look-up only when they differ).
        if !T::is_compatible_with(type_oid)
            && !unsafe { pg_sys::IsBinaryCoercible(type_oid, T::type_oid()) }
        {
            errors::internal_statement(
                self.statement.name,
                &format!(
                    "column {}: not a {}",
                    self.column_name(column),
                    std::any::type_name::<T>()
                ),
            );
        }
        let outer = PgMemoryContexts::For(self.outer);
        // SAFETY: the datum and its null flag come from a tuple of this type, just taken apart.
        unsafe { T::from_datum_in_memory_context(outer, self.values[i], self.nulls[i], type_oid) }
    }

    /// The value of a column the statement guarantees is not NULL; NULL is an internal error.
    pub fn required<T: IntoDatum + FromDatum>(&self, column: usize) -> T {
        self.get(column).unwrap_or_else(|| {
            errors::internal_statement(
                self.statement.name,
                &format!("column {} is NULL", self.column_name(column)),
            )
        })
    }

    fn column_name(&self, column: usize) -> String {
        match column.checked_sub(1).and_then(|i| self.attributes.get(i)) {
            Some(attribute) => format!(
                "{column} ({})",
                pg_sys::name_data_to_str(&attribute.attname)
            ),
            None => format!("{column} (no such column)"),
        }
    }
}

/// `clock_timestamp()`: the server's clock now, not the transaction's start.
pub fn now() -> TimestampWithTimeZone {
    // SAFETY: reads the system clock; no state involved.
    let raw = unsafe { pg_sys::GetCurrentTimestamp() };
    TimestampWithTimeZone::try_from(raw).expect("the server clock is a valid timestamp")
}

/// `at` plus `micros` microseconds.
pub fn plus_micros(at: TimestampWithTimeZone, micros: i64) -> TimestampWithTimeZone {
    let raw: pg_sys::TimestampTz = at.into();
    TimestampWithTimeZone::try_from(raw.saturating_add(micros))
        .expect("a finite time moved by a validated interval is a valid timestamp")
}

#[cfg(test)]
mod unit_tests {
    /// The settings each SQL-visible function runs under: whole-queue reads and deletes get the
    /// planner's own choices, everything else the job path's.
    const EXPECTED: &[(&str, &str)] = &[
        ("create_queue", "JOB_PATH"),
        ("enqueue", "JOB_PATH"),
        ("enqueue_batch", "JOB_PATH"),
        ("queue_claim", "JOB_PATH"),
        ("queue_renew", "JOB_PATH"),
        ("queue_renew_batch", "JOB_PATH"),
        ("queue_complete", "JOB_PATH"),
        ("queue_complete_batch", "JOB_PATH"),
        ("queue_fail", "JOB_PATH"),
        ("queue_fail_batch", "JOB_PATH"),
        ("queue_snooze", "JOB_PATH"),
        ("queue_redrive", "JOB_PATH"),
        ("queue_redrive_all", "JOB_PATH"),
        ("queue_cancel", "JOB_PATH"),
        ("job", "JOB_PATH"),
        ("queue_attempts", "JOB_PATH"),
        ("queue_purge", "WHOLE_QUEUE"),
        ("stats", "WHOLE_QUEUE"),
        ("queue_jobs", "WHOLE_QUEUE"),
        ("queue_grant", "JOB_PATH"),
        ("queue_revoke", "JOB_PATH"),
        ("queue_grants", "WHOLE_QUEUE"),
        ("metrics", "JOB_PATH"),
        ("queue_schedule", "JOB_PATH"),
        ("queue_unschedule", "JOB_PATH"),
        ("queue_schedules", "WHOLE_QUEUE"),
    ];

    /// Each SQL-visible `#[pg_extern]` function's Rust name and body (up to its closing brace at
    /// column 0); entry points kept only for older schemas (`sql = false`) are left out.
    fn functions() -> Vec<(String, String)> {
        let mut found = Vec::new();
        for source in crate::SOURCES {
            for (_, rest) in source
                .match_indices("#[pg_extern")
                .map(|(i, _)| source.split_at(i))
                .filter(|(_, rest)| !rest.starts_with("#[pg_extern(sql = false)]"))
            {
                let after_fn = rest.split_once("pub fn ").expect("a function follows").1;
                let name = after_fn.split(['(', '<']).next().unwrap().to_string();
                let body = after_fn.split_once("\n}\n").expect("a body").0.to_string();
                found.push((name, body));
            }
        }
        found
    }

    /// Every SQL-visible function checks the caller's per-queue rights before its statements
    /// run — but `queue_stats` and `metrics`, which show only the queues the caller may observe, and
    /// `queue_grants`, which only `leaseq_admin` may call.
    #[test]
    fn every_function_checks_access_before_its_statements() {
        for (name, body) in functions() {
            let connect = body.find("spi::connect(").expect("a connect");
            match name.as_str() {
                "stats" | "metrics" | "queue_schedules" => {
                    assert!(body[connect..].contains("access::allowed("))
                }
                "queue_grants" => assert!(!body.contains("access::")),
                _ => {
                    let check = body.find("require_queue(").or(body.find("require_jobs("));
                    assert!(check.is_some_and(|c| c < connect), "{name} checks first");
                }
            }
        }
    }

    /// Every SQL-visible function runs its SQL through exactly one `spi::connect`, under the
    /// settings it names there; nothing else opens an SPI connection or sets `search_path`.
    #[test]
    fn every_function_connects_once_under_its_declared_settings() {
        let functions = functions();
        let mut names: Vec<&str> = functions.iter().map(|(n, _)| n.as_str()).collect();
        let mut expected: Vec<&str> = EXPECTED.iter().map(|(n, _)| *n).collect();
        names.sort();
        expected.sort();
        assert_eq!(names, expected, "every function has its expected settings");
        for (name, body) in &functions {
            let group = EXPECTED.iter().find(|(n, _)| n == name).unwrap().1;
            let connects = body.matches("spi::connect(").count();
            let declared = body.matches(&format!("spi::connect(&{group}, ")).count();
            assert_eq!(
                (connects, declared),
                (1, 1),
                "{name} connects once, under {group}"
            );
        }
        let anywhere = |needle: &str| crate::SOURCES.iter().any(|s| s.contains(needle));
        assert!(
            !anywhere("SECURITY DEFINER"),
            "rights are switched by connect"
        );
        assert!(!anywhere("Spi::connect"));
        assert!(!anywhere("#[search_path"));
    }
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use pgrx::prelude::*;

    use super::{INT8, JOB_PATH, Statement};

    /// Every statement that runs under the job path's settings.
    fn job_path_statements() -> Vec<&'static Statement> {
        use crate::*;
        vec![
            &queue::UPSERT,
            &queue::LOAD,
            &enqueue::INSERT,
            &enqueue::INSERT_DEDUPED,
            &enqueue::FIND_LIVE_DUPLICATE,
            &enqueue::FIND_RECENT_DUPLICATE,
            &enqueue::TAKE_BACK,
            &enqueue::REPLACE_PENDING,
            &enqueue::INSERT_BATCH,
            &enqueue::INSERT_GROUPED,
            &enqueue::INSERT_BATCH_GROUPED,
            &group::LOCK,
            &group::ADMIT,
            &group::GROUPS_OF,
            &group::ENSURE,
            &group::TRY_LOCK,
            &group::UNADMIT,
            &group::WAITING,
            &claim::SETTINGS_AND_EXPIRED,
            &claim::RECLAIM,
            &claim::CLAIM,
            &claim::ATTEMPT_NOS,
            &lease::RENEW,
            &lease::RENEW_BATCH,
            &complete::COMPLETE,
            &complete::COMPLETE_BATCH,
            &complete::COMPLETE_INTO_HISTORY,
            &complete::COMPLETE_BATCH_INTO_HISTORY,
            &fail::LOCK,
            &fail::FAIL,
            &fail::LOCK_BATCH,
            &fail::FAIL_BATCH,
            &snooze::LOCK,
            &snooze::SNOOZE,
            &redrive::REDRIVE,
            &redrive::REDRIVE_ALL,
            &redrive::JOB_EXISTS,
            &cancel::CANCEL,
            &inspect::JOB,
            &inspect::JOB_WITHOUT_SNOOZES,
            &inspect::ATTEMPTS,
            &access::GRANT,
            &access::REVOKE,
            &access::QUEUES_OF_JOBS,
            &metrics::GAUGES,
            &maintenance::EXPIRED_QUEUES,
            &maintenance::CAME_DUE,
            &schedule::DUE,
            &schedule::ENQUEUE_TICK,
            &schedule::ADVANCE,
            &schedule::QUEUE_OF,
            &schedule::DELETE,
            &schedule::UPSERT,
        ]
    }

    /// The plan shape whose cost grows with the square of a batch: a nested loop that, for each
    /// of several outer rows, rescans a whole set (a CTE, a function's rows, a materialised
    /// result, a table) instead of looking up a key. The job path rules out hash and merge
    /// joins, so any join of two sets in a batch statement takes this shape. A primary-key
    /// lookup (the queue's settings row) on either side is a constant, not a set; row estimates
    /// are not trusted (a CTE over `RETURNING`, or a partial index that statistics describe as
    /// empty, is guessed at one row). A LATERAL subquery with a LIMIT over an index (a group's
    /// oldest waiting jobs) is a bounded lookup per outer row, not a set.
    const QUADRATIC_LOOPS: &str = "
        SELECT coalesce(string_agg(outer_side->>'Node Type' || ' × '
                                   || (inner_side->>'Node Type'), '; '), '')
          FROM jsonb_path_query($1::jsonb, 'lax $.**') AS loop,
               LATERAL (SELECT loop->'Plans'->0 AS outer_side, loop->'Plans'->1 AS inner_side) AS s
         WHERE loop->>'Node Type' = 'Nested Loop'
           AND NOT (outer_side->>'Node Type' IN ('Index Scan', 'Index Only Scan')
                    AND outer_side->>'Index Name' LIKE '%\\_pkey')
           AND inner_side->>'Node Type' IN ('CTE Scan', 'Function Scan', 'Materialize',
                                            'Seq Scan', 'Values Scan', 'Subquery Scan',
                                            'WorkTable Scan')
           AND NOT (inner_side->>'Node Type' = 'Materialize'
                    AND inner_side->'Plans'->0->>'Node Type' IN ('Index Scan', 'Index Only Scan')
                    AND inner_side->'Plans'->0->>'Index Name' LIKE '%\\_pkey')
           AND NOT (inner_side->>'Node Type' = 'Subquery Scan'
                    AND inner_side->'Plans'->0->>'Node Type' = 'Limit'
                    AND EXISTS (SELECT FROM jsonb_array_elements(inner_side->'Plans'->0->'Plans')
                                               AS below
                                 WHERE below->>'Parent Relationship' = 'Outer'
                                   AND below->>'Node Type'
                                       IN ('LockRows', 'Index Scan', 'Index Only Scan')))";

    /// Guards linear batch statements: every job-path statement's generic plan, made under
    /// the job path's settings, is free of [`QUADRATIC_LOOPS`] — planned once with the
    /// statistics of a queue where nothing has run yet (as after a deploy, before autovacuum
    /// analyses again: partial indexes look empty), and once with those of a busy queue (jobs
    /// pending, running, succeeded, dead, with history). (Whole-queue statements keep the
    /// planner's hash and merge joins, which adapt to the sizes it sees.)
    #[pg_test]
    fn no_statement_plans_a_loop_that_rescans_a_set_per_row() {
        Spi::run("SELECT leaseq.queue_create('plans', max_attempts => 2)").unwrap();
        Spi::run(
            "SELECT count(*) FROM leaseq.queue_enqueue_batch('plans',
                 ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 4000)))",
        )
        .unwrap();
        Spi::run("ANALYZE leaseq.jobs, leaseq.closed_attempts, leaseq.queues").unwrap();
        assert_no_quadratic_loops("nothing run yet");

        Spi::run(
            "CREATE TEMP TABLE claimed AS SELECT * FROM leaseq.queue_claim('plans', 'w', 3000)",
        )
        .unwrap();
        for finish in [
            "SELECT count(*) FROM leaseq.queue_complete_batch(
                 (SELECT array_agg(job_id) FROM claimed WHERE job_id % 3 = 0),
                 (SELECT array_agg(lease_token) FROM claimed WHERE job_id % 3 = 0))",
            "SELECT count(*) FROM leaseq.queue_fail_batch(
                 (SELECT array_agg(job_id) FROM claimed WHERE job_id % 3 = 1),
                 (SELECT array_agg(lease_token) FROM claimed WHERE job_id % 3 = 1),
                 retry => false)",
        ] {
            Spi::run(finish).unwrap();
        }
        Spi::run("ANALYZE leaseq.jobs, leaseq.closed_attempts, leaseq.queues").unwrap();
        assert_no_quadratic_loops("a busy queue");
    }

    fn assert_no_quadratic_loops(statistics: &str) {
        for statement in job_path_statements() {
            let plan = super::connect(&JOB_PATH, |client| {
                let types: Vec<String> = statement
                    .params
                    .iter()
                    .map(|oid| {
                        Spi::get_one_with_args::<String>(
                            "SELECT format_type($1, NULL)",
                            &[oid.value().into()],
                        )
                        .unwrap()
                        .unwrap()
                    })
                    .collect();
                let nulls = vec!["NULL"; types.len()].join(", ");
                let prepare = format!(
                    "PREPARE plan_check({}) AS {}",
                    types.join(", "),
                    statement.sql
                );
                client.update(prepare.as_str(), None, &[]).unwrap();
                let explain = format!("EXPLAIN (FORMAT JSON) EXECUTE plan_check({nulls})");
                let plan = client
                    .update(explain.as_str(), None, &[])
                    .unwrap()
                    .first()
                    .get_one::<pgrx::datum::JsonString>()
                    .unwrap()
                    .unwrap();
                client.update("DEALLOCATE plan_check", None, &[]).unwrap();
                plan.0
            });
            let loops = Spi::get_one_with_args::<String>(QUADRATIC_LOOPS, &[plan.as_str().into()]);
            assert_eq!(
                loops,
                Ok(Some(String::new())),
                "{} with the statistics of {statistics}: {plan}",
                statement.name
            );
        }
    }

    const TWO_COLUMNS: Statement = Statement {
        name: "test two columns",
        sql: "SELECT NULL::bigint AS nothing, $1::bigint AS answer",
        params: &[INT8],
    };

    #[pg_test]
    #[should_panic(expected = "test two columns: column 1 (nothing) is NULL")]
    fn a_null_where_a_value_is_required_raises_naming_statement_and_column() {
        super::connect(&super::JOB_PATH, |client| {
            super::run(client, &TWO_COLUMNS, &[42i64.into()]).single(|row| row.required::<i64>(1))
        });
    }

    #[pg_test]
    #[should_panic(expected = "test two columns: column 2 (answer)")]
    fn a_value_of_another_type_raises_naming_statement_and_column() {
        super::connect(&super::JOB_PATH, |client| {
            super::run(client, &TWO_COLUMNS, &[42i64.into()]).single(|row| row.get::<String>(2))
        });
    }

    #[pg_test]
    fn a_connection_runs_under_its_settings_as_the_owner_and_restores_the_callers() {
        Spi::run("SET enable_seqscan = on").unwrap();
        Spi::run("SET search_path = public").unwrap();
        let inside = super::connect(&super::JOB_PATH, |client| {
            client
                .select("SELECT current_setting('enable_seqscan') || ' ' || current_setting('search_path') || ' ' || current_user", None, &[])
                .unwrap()
                .first()
                .get_one::<String>()
                .unwrap()
        });
        assert_eq!(
            inside.as_deref(),
            Some("off pg_catalog, pg_temp leaseq_owner")
        );
        let user = Spi::get_one::<String>("SELECT current_user::text");
        assert_ne!(user, Ok(Some("leaseq_owner".to_string())));
        let seqscan = Spi::get_one::<String>("SHOW enable_seqscan");
        assert_eq!(seqscan, Ok(Some("on".to_string())));
        let path = Spi::get_one::<String>("SHOW search_path");
        assert_eq!(path, Ok(Some("public".to_string())));
    }
}
