//! How a function runs its statements: under the settings it names, with the rights of
//! leaseq's owner — both applied once per call around the statements and restored after.
//!
//! - **Settings**: every function runs its statements through [`connect`], under the settings it
//!   names there — the one mechanism, declared at each function. No function carries `SET`
//!   clauses in its definition: what lives in the library cannot be lost by an upgrade script
//!   that replaces a function, and a set-returning function does not re-apply its settings once
//!   per returned row (PostgreSQL does that with `SET` clauses: measured at 12% of a 1000-job
//!   `queue_enqueue_batch`).
//! - **Rights**: the statements run as the role that owns leaseq's tables (`leaseq_owner`, see
//!   sql/privileges.sql), switched to once per call around them and back after — what fmgr does
//!   for a `SECURITY DEFINER` function, without the function's definition saying so: the caller's
//!   identity stays known for the per-queue checks that run before (core/access.rs), and a set-
//!   returning function does not switch once per row. No switch on a database still at 0.1.0,
//!   whose functions ran with the caller's rights (`release`).
use std::ffi::CStr;

use pgrx::prelude::*;
use pgrx::spi::SpiClient;

use crate::core::release;
use crate::core::spi::{self, Planning};

/// A named group of settings that a function's statements run under.
pub struct Settings {
    /// How the registry knows statements planned under these settings.
    pub planning: Planning,
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
    planning: Planning::JobPath,
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
    planning: Planning::WholeQueue,
    values: &[(c"search_path", c"pg_catalog, pg_temp")],
};

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
    let planned = spi::planned_under(settings.planning);
    let result = spi::in_callers_context(|| {
        Spi::connect_mut(|client| {
            let owner = release::owner(client);
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
        })
    });
    unsafe { pg_sys::AtEOXact_GUC(true, level) };
    drop(planned);
    result
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
pub(crate) mod tests {
    use pgrx::prelude::*;

    use super::JOB_PATH;
    use crate::core::spi::{self, INT8, Statement};

    // How statements run inside a connection (core/spi.rs), and the connection itself.

    pub(crate) const TWO_COLUMNS: Statement = Statement {
        name: "test two columns",
        sql: "SELECT NULL::bigint AS nothing, $1::bigint AS answer",
        params: &[INT8],
    };

    #[pg_test]
    #[should_panic(expected = "test two columns: column 1 (nothing) is NULL")]
    fn a_null_where_a_value_is_required_raises_naming_statement_and_column() {
        super::connect(&JOB_PATH, |client| {
            spi::run(client, &TWO_COLUMNS, &[42i64.into()]).single(|row| row.required::<i64>(1))
        });
    }

    #[pg_test]
    #[should_panic(expected = "test two columns: column 2 (answer)")]
    fn a_value_of_another_type_raises_naming_statement_and_column() {
        super::connect(&JOB_PATH, |client| {
            spi::run(client, &TWO_COLUMNS, &[42i64.into()]).single(|row| row.get::<String>(2))
        });
    }

    /// Registered as a whole-queue read (src/statements.rs).
    pub(crate) const WHOLE_QUEUE_READ: Statement = Statement {
        name: "test whole-queue read",
        sql: "SELECT count(*) FROM leaseq.jobs AS job",
        params: &[],
    };

    const NOT_REGISTERED: Statement = Statement {
        name: "test not registered",
        sql: "SELECT 1",
        params: &[],
    };

    #[pg_test]
    #[should_panic(expected = "test not registered: is not registered in src/statements.rs")]
    fn a_statement_outside_the_registry_refuses_to_run() {
        super::connect(&JOB_PATH, |client| {
            spi::run(client, &NOT_REGISTERED, &[]).is_empty()
        });
    }

    #[pg_test]
    #[should_panic(expected = "ran under the job path's settings")]
    fn a_whole_queue_statement_refuses_to_run_under_the_job_path() {
        super::connect(&JOB_PATH, |client| {
            spi::run(client, &WHOLE_QUEUE_READ, &[]).is_empty()
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
