//! leaseq: a job queue inside PostgreSQL, with leases, fenced completion and attempt history.
//!
//! The folders carry a rule, checked by `rules::each_folder_uses_only_what_its_rule_allows`:
//! - `core/` — what every step shares: statements, connections, the release being served, the
//!   clock, arguments, errors, the per-queue check. Core uses only core.
//! - `lifecycle/` — one file per step of a job's life. Lifecycle uses core.
//! - `observe/` (looking at it) uses lifecycle and core; `admin/` (grants, the background
//!   worker, which also counts ahead for the overview) uses observe too.
//! - `compat/` — what serves a database not yet updated to this release (the support window:
//!   docs/design.md). It may use everything; nothing uses it, so the main path never branches
//!   into an old schema's code.
//!
//! `statements.rs` is the one registry of every SQL statement; this file and it see everything.
// `#[pg_extern]` must see `RETURNS TABLE` column lists spelled out (it rejects type aliases).
#![allow(clippy::type_complexity)]

use pgrx::prelude::*;

::pgrx::pg_module_magic!();

mod core;
mod lifecycle;
mod observe;
mod admin;
mod compat;
mod statements;
#[cfg(test)]
mod rules;

extension_sql_file!("../sql/privileges.sql", name = "privileges", finalize);

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    core::spi::register(statements::ALL, statements::TWINS);
    core::settings::register();
    core::release::register();
    core::access::register();
    core::counters::init();
    lifecycle::schedule::register();
    lifecycle::queue::register();
    admin::maintenance::register();
}

/// Required by `cargo pgrx test`.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec![]
    }
}
