//! How leaseq runs SQL.
//!
//! - **Statements** are static, parameterised, named texts, prepared once per backend the first
//!   time they run and kept (`SPI_keepplan`), so a call never re-parses or re-plans. PostgreSQL's
//!   plan cache still re-validates a kept plan after DDL on its tables.
//! - **One registry** (src/statements.rs, handed over by `_PG_init`) names every statement with
//!   the settings it is planned under. A statement outside it, or one registered as a
//!   whole-queue read running under the job path's settings, raises `XX000` the first time it
//!   runs: the plan check and the shape tests, which derive their lists from the registry, cannot
//!   miss a statement that runs.
//! - **Older schemas** run their own text of a statement whose text this release changed: the
//!   registry's twins (src/statements.rs, the texts in compat), chosen by the release the
//!   database runs, so the steps around a statement serve every schema with one body of code.
//!   A twin takes the same parameters and returns the same columns.
//! - **Results** are read through [`Row`], which fails loudly: a NULL where the statement
//!   guarantees a value, or a value of another type, raises `XX000` naming the statement and
//!   the column — never a silent default that would read as "fenced" or "nothing happened".
//!
//! Settings, rights and the clock around the statements: `connect`, `clock`.
use std::cell::Cell;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use pgrx::PgMemoryContexts;
use pgrx::datum::{DatumWithOid, FromDatum, IntoDatum};
use pgrx::pg_sys::PgOid;
use pgrx::prelude::*;
use pgrx::spi::{OwnedPreparedStatement, Query, SpiClient};

use crate::core::errors;
use crate::core::majors;
use crate::core::release::{self, Release};

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

/// The settings a statement is planned under (`connect`): the job path's, whose plans the plan
/// check holds to a shape, or a whole-queue read's, which keeps the planner's own choices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Planning {
    JobPath,
    WholeQueue,
}

/// A statement of the registry, with the settings it is planned under.
pub type Registered = (&'static Statement, Planning);

/// A twin: on a database whose schema is older than the release given, the second statement runs
/// in place of the first.
pub type Twin = (&'static Statement, Release, &'static Statement);

thread_local! {
    // A backend is single-threaded: these are per backend. Plans are handed out as `Rc` so no
    // borrow is held while a statement runs (a trigger may call back into leaseq). Keyed by the
    // address of the statement's text, not the text: hashing a kilobyte of SQL on every run
    // showed in profiles. Distinct texts never share an address (a text the compiler keeps twice
    // is merely prepared twice).
    static PLANS: RefCell<HashMap<usize, (Rc<OwnedPreparedStatement>, Planning)>> =
        RefCell::new(HashMap::new());
    static REGISTRY: Cell<&'static [Registered]> = const { Cell::new(&[]) };
    static TWINS: Cell<&'static [Twin]> = const { Cell::new(&[]) };
    // The settings the current `connect` applied; None outside one.
    static ACTIVE: Cell<Option<Planning>> = const { Cell::new(None) };
}

/// Hands over the registry and the older schemas' twins (from `_PG_init`).
pub fn register(registry: &'static [Registered], twins: &'static [Twin]) {
    REGISTRY.set(registry);
    TWINS.set(twins);
}

/// `statement`, or its twin where this database's schema is older than the twin's release.
fn for_this_schema(
    client: &mut SpiClient<'_>,
    statement: &'static Statement,
) -> &'static Statement {
    let twins = TWINS.get();
    if twins.is_empty() {
        return statement;
    }
    let Some(release) = release::installed(client) else {
        return statement;
    };
    twins
        .iter()
        .find(|(this, before, _)| release < *before && this.name == statement.name)
        .map_or(statement, |(_, _, older)| older)
}

/// Marks the statements run until the guard drops as planned under `planning` (by `connect`).
pub fn planned_under(planning: Planning) -> PlannedUnder {
    PlannedUnder(ACTIVE.replace(Some(planning)))
}

/// Restores the settings marked before, when a `connect` ends (returning or unwinding).
pub struct PlannedUnder(Option<Planning>);

impl Drop for PlannedUnder {
    fn drop(&mut self) {
        ACTIVE.set(self.0);
    }
}

/// How the registry plans `statement`; `XX000` when it is not registered.
fn registered(statement: &'static Statement) -> Planning {
    REGISTRY
        .get()
        .iter()
        .find(|(known, _)| known.name == statement.name)
        .map(|(_, planning)| *planning)
        .unwrap_or_else(|| {
            errors::internal_statement(statement.name, "is not registered in src/statements.rs")
        })
}

/// Runs `statement` with `args`, preparing it on first use in this backend.
pub fn run<'conn>(
    client: &mut SpiClient<'conn>,
    statement: &'static Statement,
    args: &[DatumWithOid<'_>],
) -> Rows<'conn> {
    let statement = for_this_schema(client, statement);
    let key = statement.sql.as_ptr() as usize;
    let cached = PLANS.with(|plans| plans.borrow().get(&key).cloned());
    let (plan, planning) = match cached {
        Some(cached) => cached,
        None => {
            let planning = registered(statement);
            let plan = client
                .prepare_mut(statement.sql, statement.params)
                .unwrap_or_else(|e| {
                    errors::internal_statement(statement.name, &format!("cannot prepare: {e}"))
                })
                .keep();
            let plan = (Rc::new(plan), planning);
            PLANS.with(|plans| plans.borrow_mut().insert(key, plan.clone()));
            plan
        }
    };
    if planning == Planning::WholeQueue && ACTIVE.get() == Some(Planning::JobPath) {
        errors::internal_statement(
            statement.name,
            "is registered as a whole-queue read but ran under the job path's settings",
        );
    }
    // Executed as prepared (read-write: a fresh snapshot per statement), not through
    // `SpiClient::update`, which first assigns the transaction an id: a call that changes nothing
    // would then write a commit record and wait for its flush (pg_test/sql/writes_nothing.sql).
    let rows = Query::execute(&*plan, client, None, args)
        .unwrap_or_else(|e| errors::internal_statement(statement.name, &format!("{e}")))
        .len();
    Rows::of_last(statement, rows)
}

thread_local! {
    // `run_latest`'s plans, kept as `PLANS` keeps `run`'s.
    static LATEST_PLANS: RefCell<HashMap<usize, pg_sys::SPIPlanPtr>> = RefCell::new(HashMap::new());
}

/// Runs a read-only `statement` under a snapshot taken now, whatever the caller's isolation
/// level, as PostgreSQL's own foreign-key checks do: for what a backend keeps past its
/// transaction (grants, paused queues, schedules), which must never be what a REPEATABLE READ
/// caller's older snapshot saw — a revoke would then be ignored until the next invalidation.
pub fn run_latest<'conn>(
    _client: &mut SpiClient<'conn>,
    statement: &'static Statement,
    args: &[DatumWithOid<'_>],
) -> Rows<'conn> {
    let key = statement.sql.as_ptr() as usize;
    let plan = match LATEST_PLANS.with_borrow(|plans| plans.get(&key).copied()) {
        Some(plan) => plan,
        None => {
            registered(statement);
            let sql = std::ffi::CString::new(statement.sql).expect("a statement has no NUL");
            let mut types: Vec<pg_sys::Oid> = statement.params.iter().map(|t| t.value()).collect();
            // SAFETY: inside an SPI connection (`_client`); the plan is kept in SPI's long-lived
            // context (SPI_keepplan) and never freed, as `run`'s are.
            let plan = unsafe {
                let plan =
                    pg_sys::SPI_prepare(sql.as_ptr(), types.len() as i32, types.as_mut_ptr());
                if plan.is_null() || pg_sys::SPI_keepplan(plan) != 0 {
                    errors::internal_statement(statement.name, "cannot prepare");
                }
                plan
            };
            LATEST_PLANS.with_borrow_mut(|plans| plans.insert(key, plan));
            plan
        }
    };
    if args.len() != statement.params.len() {
        errors::internal_statement(statement.name, "ran with another number of arguments");
    }
    let (mut values, nulls): (Vec<pg_sys::Datum>, Vec<std::ffi::c_char>) = args
        .iter()
        .map(|arg| match arg.datum() {
            Some(datum) => (datum.sans_lifetime(), b' ' as std::ffi::c_char),
            None => (pg_sys::Datum::from(0), b'n' as std::ffi::c_char),
        })
        .unzip();
    // SAFETY: a kept plan of this statement, its arguments, and the latest snapshot (copied
    // when SPI makes it the active one); read only, so the snapshot is used as it is.
    let status = unsafe {
        pg_sys::SPI_tuptable = std::ptr::null_mut();
        pg_sys::SPI_execute_snapshot(
            plan,
            values.as_mut_ptr(),
            nulls.as_ptr(),
            pg_sys::GetLatestSnapshot(),
            std::ptr::null_mut(),
            true,
            false,
            0,
        )
    };
    if status < 0 {
        errors::internal_statement(statement.name, &format!("SPI error {status}"));
    }
    // SAFETY: the statement just ran; SPI_processed counts its rows.
    let rows = unsafe { pg_sys::SPI_processed } as usize;
    Rows::of_last(statement, rows)
}

/// The rows a statement returned.
pub struct Rows<'conn> {
    statement: &'static Statement,
    rows: usize,
    raw: *mut pg_sys::SPITupleTable,
    /// The result lives until the SPI connection ends — beyond `'conn`'s reach.
    connection: std::marker::PhantomData<&'conn ()>,
}

impl Rows<'_> {
    /// The result of the statement that just ran, which returned `rows` rows.
    fn of_last(statement: &'static Statement, rows: usize) -> Self {
        Rows {
            statement,
            rows,
            // SAFETY: the statement just ran: SPI_tuptable is its result (NULL when it returned
            // none), which stays allocated until the SPI connection ends.
            raw: unsafe { pg_sys::SPI_tuptable },
            connection: std::marker::PhantomData,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.rows == 0
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
        let rows = self.rows.min(limit);
        let mut out = Vec::with_capacity(rows);
        if rows == 0 || self.raw.is_null() {
            return out;
        }
        // SAFETY: `raw` is the statement's result, holding at least `rows` tuples.
        let (tuples, descriptor) = unsafe {
            let raw = &*self.raw;
            (std::slice::from_raw_parts(raw.vals, rows), raw.tupdesc)
        };
        // SAFETY: the result's descriptor, which lives as long as `raw`.
        let attributes = unsafe { majors::attributes(descriptor) };
        let columns = attributes.len();
        // Values are copied into the context `connect` was entered in — the caller's call (a
        // row's, or a set-returning function's calls) — so that they outlive the SPI
        // connection and no longer: SPI's own parent is the transaction's context, where a
        // `queue_result` per row of a scan piled up every result until the commit (M-14).
        let outer = match CALLERS_CONTEXT.get() {
            context if !context.is_null() => context,
            // SAFETY: inside an SPI connection, whose context always has a parent.
            _ => unsafe { PgMemoryContexts::CurrentMemoryContext.parent() }
                .expect("SPI's context has a parent")
                .value(),
        };
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
        let rows = self.rows;
        if rows != 1 {
            errors::internal_statement(name, &format!("returned {rows} rows instead of one"));
        }
        self.first(f).expect("one row, checked above")
    }
}

thread_local! {
    /// The memory context `connect` was entered in, while it runs ([`in_callers_context`]).
    static CALLERS_CONTEXT: Cell<pg_sys::MemoryContext> = const { Cell::new(std::ptr::null_mut()) };
}

/// Runs `f` (a `connect`ion) with values read copied into the context current now, the
/// caller's; the one before is back after, an error's unwinding included.
pub fn in_callers_context<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(pg_sys::MemoryContext);
    impl Drop for Restore {
        fn drop(&mut self) {
            CALLERS_CONTEXT.set(self.0);
        }
    }
    // SAFETY: reads the backend's current memory context.
    let _restore = Restore(CALLERS_CONTEXT.replace(unsafe { pg_sys::CurrentMemoryContext }));
    f()
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
