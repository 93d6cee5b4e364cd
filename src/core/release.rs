//! The release whose schema this database runs. Installing a new package replaces the library at
//! once, while each database keeps its release's schema until `ALTER EXTENSION leaseq UPDATE`:
//! meanwhile that release's SQL definitions call this library, which serves them through
//! `compat` (the support window: docs/design.md). The main path asks only what differs in
//! kind — whose rights the statements run with, and whether the schema has 0.2.0's tables.
//!
//! Read once per backend, as the caller (catalogs only, before `connect` switches to the owner),
//! and forgotten on every change to a function and on a relcache invalidation of `leaseq.jobs`:
//! every upgrade script ends with sql/privileges.sql, whose GRANTs rewrite every function's row
//! (as CREATE and DROP EXTENSION add and remove them), so the first reaches every backend when it
//! commits; a new owner of the tables sends the second. Other relations' changes — temporary
//! tables, ANALYZE — leave it alone.
use std::cell::Cell;

use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

use crate::core::errors;
use crate::core::schema;
use crate::core::spi::{self, Statement};

/// The releases this library serves, oldest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Release {
    V0_1_0,
    V0_2_0,
    V0_3_0,
    V0_4_0,
}

impl Release {
    /// Every release served, with its `extversion`.
    pub const SERVED: [(Release, &'static str); 4] = [
        (Release::V0_1_0, "0.1.0"),
        (Release::V0_2_0, "0.2.0"),
        (Release::V0_3_0, "0.3.0"),
        (Release::V0_4_0, "0.4.0"),
    ];

    /// Whether this release's schema has 0.2.0's tables: per-queue grants, schedules, groups.
    pub fn has_0_2_0_tables(self) -> bool {
        self >= Release::V0_2_0
    }
}

/// The installed release and the owner of its tables (`leaseq.jobs`); no row: not installed.
pub(crate) const READ: Statement = Statement {
    name: "release.read",
    sql: "SELECT extension.extversion, jobs.relowner
            FROM pg_catalog.pg_extension AS extension
            LEFT JOIN pg_catalog.pg_class AS jobs ON jobs.oid = to_regclass('leaseq.jobs')
           WHERE extension.extname = 'leaseq'",
    params: &[],
};

/// What was read of this database.
#[derive(Clone, Copy)]
struct Read {
    /// None: leaseq is not installed here (the maintenance worker waits for it).
    release: Option<Release>,
    /// The role the functions act as: the tables' owner from 0.2.0 on; none (the caller's own
    /// rights) under 0.1.0, whose tables belong to whoever installed it.
    owner: Option<pg_sys::Oid>,
}

thread_local! {
    static KNOWN: Cell<Option<Read>> = const { Cell::new(None) };
    // leaseq.jobs, whose owner `KNOWN` holds; noted when it is read.
    static JOBS_TABLE: Cell<pg_sys::Oid> = const { Cell::new(pg_sys::InvalidOid) };
}

fn read(client: &mut SpiClient<'_>) -> Read {
    if let Some(known) = KNOWN.get() {
        return known;
    }
    JOBS_TABLE.set(schema::table_oid(c"jobs"));
    let found = spi::run_latest(client, &READ, &[]).first(|row| {
        let version: String = row.required(1);
        let release = Release::SERVED
            .iter()
            .find(|(_, label)| *label == version)
            .map(|(release, _)| *release)
            .unwrap_or_else(|| errors::release_not_served(&version));
        (release, row.get::<pg_sys::Oid>(2))
    });
    let known = match found {
        Some((release, owner)) => Read {
            release: Some(release),
            owner: owner.filter(|_| release >= Release::V0_2_0),
        },
        None => Read {
            release: None,
            owner: None,
        },
    };
    KNOWN.set(Some(known));
    known
}

/// The release this database runs; None when leaseq is not installed in it.
pub fn installed(client: &mut SpiClient<'_>) -> Option<Release> {
    read(client).release
}

/// The release this database runs (a leaseq function is running: it is installed).
pub fn current(client: &mut SpiClient<'_>) -> Release {
    installed(client).expect("a leaseq function runs where leaseq is installed")
}

/// The role whose rights leaseq's statements run with, when not the caller's (`connect`).
pub fn owner(client: &mut SpiClient<'_>) -> Option<pg_sys::Oid> {
    read(client).owner
}

/// Registers the invalidations that make `read` look again.
pub fn register() {
    #[pg_guard]
    unsafe extern "C-unwind" fn forget_relation(_arg: pg_sys::Datum, relation: pg_sys::Oid) {
        if schema::concerns(relation, JOBS_TABLE.get()) {
            KNOWN.set(None);
        }
    }
    #[pg_guard]
    unsafe extern "C-unwind" fn forget_function(_arg: pg_sys::Datum, _cache: i32, _hash: u32) {
        KNOWN.set(None);
    }
    // SAFETY: called once per backend, from _PG_init; the callbacks only clear a cell.
    unsafe {
        pg_sys::CacheRegisterRelcacheCallback(Some(forget_relation), pg_sys::Datum::from(0));
        pg_sys::CacheRegisterSyscacheCallback(
            pg_sys::SysCacheIdentifier::PROCOID as i32,
            Some(forget_function),
            pg_sys::Datum::from(0),
        );
    }
}
