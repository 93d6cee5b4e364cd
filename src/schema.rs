//! The install DDL lives in `sql/schema.sql`, one source for types, tables and indexes; it runs
//! before every generated function, which all refer to its objects by qualified name. Who may do
//! what, `sql/privileges.sql`, runs after them.
//!
//! No function definition carries `SET` clauses: each function applies its settings itself, at
//! run time (`spi::connect`), so an upgrade script that replaces a function cannot lose them.
//!
//! The library serves the schema it finds. Installing a new package replaces the library at once,
//! while each database keeps the previous version's schema until `ALTER EXTENSION leaseq UPDATE`:
//! meanwhile the old functions call the new library. What depends on the schema: where a success
//! is recorded (`history`): on the job's row from 0.2.0, in `closed_attempts` under 0.1.0, whose
//! check forbids a token on a finished row; and whose rights the statements run with (`spi`): the
//! tables' owner's from 0.2.0, the caller's under 0.1.0, which has no per-queue grants either.
use std::cell::Cell;

use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

use crate::spi::{self, Statement};

extension_sql_file!("../sql/schema.sql", name = "schema", bootstrap);

const FACTS: Statement = Statement {
    name: "schema.facts",
    sql: "SELECT extension.extversion <> '0.1.0', jobs.relowner,
                 to_regclass('leaseq.queue_grants') IS NOT NULL,
                 to_regclass('leaseq.schedules') IS NOT NULL,
                 to_regclass('leaseq.groups') IS NOT NULL
            FROM pg_catalog.pg_extension AS extension, pg_catalog.pg_class AS jobs
           WHERE extension.extname = 'leaseq'
             AND jobs.oid = to_regclass('leaseq.jobs')",
    params: &[],
};

/// What the library needs to know of this database's leaseq schema.
#[derive(Clone, Copy)]
struct Facts {
    /// A success is kept on the job's row (0.2.0 on), not in `closed_attempts` (0.1.0).
    success_on_row: bool,
    /// The role the functions act as: the tables' owner from 0.2.0 on; none (the caller's own
    /// rights) under 0.1.0, whose tables belong to whoever installed it.
    owner: Option<pg_sys::Oid>,
    /// The schema has per-queue grants (0.2.0 on).
    queue_grants: bool,
    /// The schema has periodic jobs (0.2.0 on).
    schedules: bool,
    /// The schema has ordered groups (0.2.0 on).
    groups: bool,
}

thread_local! {
    // Per backend; forgotten on every relcache invalidation, which the upgrade's DDL on
    // leaseq.jobs sends to every backend when it commits.
    static FACTS_READ: Cell<Option<Facts>> = const { Cell::new(None) };
}

/// Read as the caller (only catalogs), before `spi::connect` switches to the owner.
fn facts(client: &mut SpiClient<'_>) -> Facts {
    if let Some(known) = FACTS_READ.get() {
        return known;
    }
    let known = spi::run(client, &FACTS, &[]).single(|row| {
        let current: bool = row.required(1);
        Facts {
            success_on_row: current,
            owner: current.then(|| row.required(2)),
            queue_grants: row.required(3),
            schedules: row.required(4),
            groups: row.required(5),
        }
    });
    FACTS_READ.set(Some(known));
    known
}

/// Whether this database's schema keeps a success on the job's row (0.2.0 on) rather than in
/// `closed_attempts` (0.1.0).
pub fn keeps_success_on_row(client: &mut SpiClient<'_>) -> bool {
    facts(client).success_on_row
}

/// Whether this database's schema has `leaseq.queue_grants` (0.2.0 on).
pub fn has_queue_grants(client: &mut SpiClient<'_>) -> bool {
    facts(client).queue_grants
}

/// Whether this database's schema has `leaseq.schedules` (0.2.0 on).
pub fn has_schedules(client: &mut SpiClient<'_>) -> bool {
    facts(client).schedules
}

/// Whether this database's schema has ordered groups (0.2.0 on): jobs with a `group_key`.
pub fn has_groups(client: &mut SpiClient<'_>) -> bool {
    facts(client).groups
}

/// The role whose rights leaseq's statements run with, when not the caller's (see `spi`).
pub fn owner(client: &mut SpiClient<'_>) -> Option<pg_sys::Oid> {
    facts(client).owner
}

/// A table whose rows backends keep (the grants, `access`; the schedules' next ticks, `schedule`)
/// changed: every backend forgets what it read of it when the changing transaction commits — and
/// this one at once. (The caches forget on any relcache invalidation; this sends one.)
#[pg_trigger]
fn cached_table_changed<'a>(
    trigger: &'a PgTrigger<'a>,
) -> Result<Option<PgHeapTuple<'a, AllocatedByRust>>, PgTriggerError> {
    // SAFETY: queues an invalidation of the trigger's own table, sent at commit.
    unsafe { pg_sys::CacheInvalidateRelcacheByRelid(trigger.relid()?) };
    Ok(None)
}

/// Registers the invalidation that makes `facts` read the catalogs again.
pub fn register() {
    #[pg_guard]
    unsafe extern "C-unwind" fn forget(_arg: pg_sys::Datum, _relation: pg_sys::Oid) {
        FACTS_READ.set(None);
    }
    // SAFETY: called once per backend, from _PG_init; the callback only clears a cell.
    unsafe { pg_sys::CacheRegisterRelcacheCallback(Some(forget), pg_sys::Datum::from(0)) };
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use pgrx::prelude::*;

    /// What the code declares at install time for every function: nothing. A `SET` clause left
    /// by an older version (0.1.0 had them) or added by an upgrade script fails this.
    #[pg_test]
    fn no_installed_function_carries_settings_in_its_definition() {
        let with_settings = Spi::get_one::<Vec<String>>(
            "SELECT coalesce(array_agg(p.oid::regprocedure::text), '{}')
               FROM pg_proc p
              WHERE p.pronamespace = 'leaseq'::regnamespace AND p.proconfig IS NOT NULL",
        );
        assert_eq!(with_settings, Ok(Some(vec![])));
    }

    /// The Rust enums and the SQL enums have the same labels, in the same order.
    #[pg_test]
    fn rust_enums_match_the_sql_enums() {
        use crate::datum::{AttemptOutcome, JobStatus, QueuePrivilege};
        let sql = |ty: &str| {
            Spi::get_one::<Vec<String>>(&format!("SELECT enum_range(NULL::{ty})::text[]"))
                .unwrap()
                .unwrap()
        };
        let statuses: Vec<String> = JobStatus::ALL.iter().map(|s| s.label().into()).collect();
        assert_eq!(sql("leaseq.job_status"), statuses);
        let outcomes: Vec<String> = AttemptOutcome::ALL
            .iter()
            .map(|o| o.label().into())
            .collect();
        assert_eq!(sql("leaseq.attempt_outcome"), outcomes);
        let privileges: Vec<String> = QueuePrivilege::ALL
            .iter()
            .map(|p| p.label().into())
            .collect();
        assert_eq!(sql("leaseq.queue_privilege"), privileges);
    }
}
