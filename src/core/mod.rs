//! What every step shares. Core uses only core.
pub mod access; // the per-queue check every function makes before its statements
pub mod args; // argument checks, before any row is touched
pub mod backoff; // the retry policy, pure
pub mod clock; // the server's clock, and the hook tests move it with
pub mod connect; // settings and the owner's rights around a function's statements
pub mod counters; // what happened to each queue since the server started (shared memory)
pub mod datum; // raw jsonb, the SQL enums as Rust types
pub mod errors; // every SQLSTATE leaseq raises
pub mod majors; // the server APIs that differ between PostgreSQL 15, 16, 17 and 18
pub mod release; // which release's schema this database runs
pub mod schema; // sql/schema.sql: types, tables, indexes
pub mod settings; // leaseq.* GUCs
pub mod snapshots; // each queue's last counted gauges, for the overview (shared memory)
pub mod spi; // named statements prepared once, loud results
pub mod wake; // finishes wake the backends waiting for them (shared memory)
pub mod walk; // where the next entries of an index end, read from the index alone
