//! leaseq: a job queue inside PostgreSQL, with leases, fenced completion and attempt history.
//!
//! The modules follow a job through its life; each one reads contract → SQL → function → tests.
// `#[pg_extern]` must see `RETURNS TABLE` column lists spelled out (it rejects type aliases).
#![allow(clippy::type_complexity)]

use pgrx::prelude::*;

::pgrx::pg_module_magic!();

// The install DDL (types, tables, indexes) and the values shared by every step.
mod args;
mod backoff;
mod datum;
mod errors;
#[macro_use]
mod history;
mod schema;
mod settings;
mod spi;

// The lifecycle, in order.
mod cancel;
mod claim;
mod complete;
mod enqueue;
mod fail;
mod inspect;
mod lease;
mod purge;
mod queue;
mod redrive;
mod stats;

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    settings::register();
}

/// Required by `cargo pgrx test`.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec![]
    }
}
