//! The install DDL lives in `sql/schema.sql`, one source for types, tables and indexes; it runs
//! before every generated function, which all refer to its objects by qualified name. Who may do
//! what, `sql/privileges.sql`, runs after them.
//!
//! No function definition carries `SET` clauses: each function applies its settings itself, at
//! run time (`connect`), so an upgrade script that replaces a function cannot lose them.
//! Which release's schema a database runs, and what the library serves of it: `release`.
use pgrx::pg_sys;
use pgrx::prelude::*;

extension_sql_file!("../../sql/schema.sql", name = "schema", bootstrap);

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

/// The OID of the table `leaseq.<name>`; `InvalidOid` when there is none (an older release's
/// schema, or leaseq not installed). For the caches that keep a table's rows: they note it when
/// they read the table, and forget what they read only on `changed` for it.
pub fn table_oid(name: &std::ffi::CStr) -> pg_sys::Oid {
    // SAFETY: syscache lookups by name, missing_ok; called inside a transaction (a leaseq call,
    // or the maintenance worker's).
    unsafe {
        let schema = pg_sys::get_namespace_oid(c"leaseq".as_ptr(), true);
        if schema == pg_sys::InvalidOid {
            return pg_sys::InvalidOid;
        }
        pg_sys::get_relname_relid(name.as_ptr(), schema)
    }
}

/// Whether a relcache invalidation of `relation` concerns the cached table `table`: it is that
/// table, or every relation (`InvalidOid`: a cache reset), or the table is not known (not read
/// yet, or absent, when any relation created may be it). Any other relation's change — a temporary
/// table, ANALYZE, another extension's DDL — leaves the cache alone: flushing on those would cost
/// every claim in every backend up to four extra statements.
pub fn concerns(relation: pg_sys::Oid, table: pg_sys::Oid) -> bool {
    relation == pg_sys::InvalidOid || table == pg_sys::InvalidOid || relation == table
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
        use crate::core::datum::{AttemptOutcome, JobStatus, ParentFailure, QueuePrivilege};
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
        let policies: Vec<String> = ParentFailure::ALL
            .iter()
            .map(|p| p.label().into())
            .collect();
        assert_eq!(sql("leaseq.parent_failure"), policies);
    }
}
