//! leaseq-client: a Rust client for the leaseq extension, the worker loop every queue user needs
//! (claim, heartbeat, finish, back off, shut down cleanly), and the `leaseq` command built on it.
//!
//! It talks to the database only through the extension's SQL functions: every guarantee (fencing,
//! attempt numbering, backoff) stays enforced in one place, inside PostgreSQL.
pub mod access;
pub mod client;
pub mod command;
pub mod inspect;
pub mod log;
pub mod schedule;
pub mod tls;
pub mod worker;

pub use access::{QueueGrant, QueuePrivilege};
pub use client::{
    Client, EnqueueOptions, Error, Job, StepError, Uuid, complete_tx, connect_target, describe,
    enqueue_tx, run_step, step_tx,
};
pub use inspect::{
    Attempt, AttemptOutcome, Awaited, Child, FlowNode, FlowStatus, JobDetail, JobStatus,
    JobSummary, Parent, ParentFailure, Step,
};
pub use schedule::Schedule;
pub use tokio_util::sync::CancellationToken;
pub use worker::{Outcome, Worker, WorkerConfig, shutdown_on_signals};
