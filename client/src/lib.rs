//! leaseq-client: a Rust client for the leaseq extension, and the worker loop every queue user
//! needs (claim, heartbeat, finish, back off, shut down cleanly). The `leaseq` command (its CLI,
//! console and metrics) is built on it in its own crate, `leaseq-cli` (cli/), so that a library
//! user compiles no web server, templates or argument parser (tests/dependencies.rs).
//!
//! It talks to the database only through the extension's SQL functions: every guarantee (fencing,
//! attempt numbering, backoff) stays enforced in one place, inside PostgreSQL.
pub mod access;
pub mod client;
pub mod enums;
pub mod inspect;
pub mod log;
pub mod schedule;
pub mod tls;
mod trace;
pub mod worker;

pub use access::{QueueGrant, QueuePrivilege};
pub use client::{
    Client, EnqueueOptions, Error, Job, StepError, Uuid, complete_tx, connect_target, describe,
    enqueue_tx, run_step, step_tx,
};
pub use enums::{AttemptOutcome, JobStatus, ParentFailure};
pub use inspect::{
    Attempt, Awaited, Child, FlowNode, FlowStatus, JobDetail, JobSummary, Parent, Step,
};
pub use schedule::Schedule;
pub use tokio_util::sync::CancellationToken;
pub use worker::{Outcome, Worker, WorkerConfig, shutdown_on_signals};
