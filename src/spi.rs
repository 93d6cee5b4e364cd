//! How leaseq runs SQL: every statement is a static, parameterised text, prepared once per
//! backend the first time it runs and kept (`SPI_keepplan`), so a call never re-parses or
//! re-plans. PostgreSQL's plan cache still re-validates a kept plan after DDL on its tables.
//!
//! Also the one clock: `clock_timestamp()`, read once per call and passed to the statements as a
//! parameter, so all of one call's decisions use the same instant and index conditions stay
//! plain comparisons.
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::CStr;
use std::rc::Rc;

use pgrx::datum::DatumWithOid;
use pgrx::pg_sys::PgOid;
use pgrx::prelude::*;
use pgrx::spi::{OwnedPreparedStatement, SpiClient, SpiTupleTable};

/// A statement and its parameter types.
pub struct Statement {
    pub sql: &'static str,
    pub params: &'static [PgOid],
}

pub const TEXT: PgOid = PgOid::from_untagged(pg_sys::TEXTOID);
pub const INT4: PgOid = PgOid::from_untagged(pg_sys::INT4OID);
pub const INT8: PgOid = PgOid::from_untagged(pg_sys::INT8OID);
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

thread_local! {
    // A backend is single-threaded: this is one cache per backend. Plans are handed out as `Rc`
    // so no borrow is held while a statement runs (a trigger may call back into leaseq).
    static PLANS: RefCell<HashMap<&'static str, Rc<OwnedPreparedStatement>>> =
        RefCell::new(HashMap::new());
}

/// Runs `statement` with `args`, preparing it on first use in this backend.
pub fn run<'conn>(
    client: &mut SpiClient<'conn>,
    statement: &Statement,
    args: &[DatumWithOid<'_>],
) -> SpiTupleTable<'conn> {
    let cached = PLANS.with(|plans| plans.borrow().get(statement.sql).cloned());
    let plan = match cached {
        Some(plan) => plan,
        None => {
            let plan = client
                .prepare_mut(statement.sql, statement.params)
                .expect("leaseq's statements are valid SQL for its own schema")
                .keep();
            let plan = Rc::new(plan);
            PLANS.with(|plans| plans.borrow_mut().insert(statement.sql, plan.clone()));
            plan
        }
    };
    client
        .update(&*plan, None, args)
        .expect("leaseq's statements get as many arguments as they declare")
}

/// The settings the job path's statements run under: `search_path` pinned (a kept plan is also
/// re-analysed whenever it differs from the one it was made with), and the plan choices of
/// `schema.rs`. Most functions carry them as `SET` clauses (see `schema.rs`). The set-returning
/// ones apply them here instead, once per call: PostgreSQL calls a set-returning function once
/// per row it returns, and re-applies its `SET` clauses on each of those calls — measured at 12%
/// of a 1000-job `queue_enqueue_batch`.
pub const SETTINGS: &[(&CStr, &CStr)] = &[
    (c"search_path", c"pg_catalog, pg_temp"),
    (c"plan_cache_mode", c"force_generic_plan"),
    (c"enable_seqscan", c"off"),
    (c"jit", c"off"),
    (c"enable_hashjoin", c"off"),
    (c"enable_mergejoin", c"off"),
];

/// `Spi::connect_mut` under `SETTINGS`, restored when `f` returns. For the set-returning
/// functions, which run all their SQL in their first call.
pub fn connect_with_settings<R>(f: impl FnOnce(&mut SpiClient<'_>) -> R) -> R {
    // SAFETY: what fmgr does for a function's SET clauses: the values are saved at a new GUC
    // nest level and restored by popping it; an error pops it with the (sub)transaction's abort.
    let level = unsafe { pg_sys::NewGUCNestLevel() };
    for (name, value) in SETTINGS {
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
    let result = Spi::connect_mut(f);
    unsafe { pg_sys::AtEOXact_GUC(true, level) };
    result
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
