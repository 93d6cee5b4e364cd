//! leaseq: a job queue inside PostgreSQL, with leases, fenced completion and attempt history.
//!
//! The modules follow a job through its life; each one reads contract → SQL → function → tests.
use pgrx::prelude::*;

::pgrx::pg_module_magic!();

// The install DDL (types, tables, indexes) and the values shared by every step.
mod schema;
mod errors;
mod args;
mod datum;
mod spi;
mod settings;
mod backoff;

// The lifecycle, in order.
mod queue;
mod enqueue;
mod claim;
mod lease;
mod complete;
mod fail;
mod redrive;
mod cancel;
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
