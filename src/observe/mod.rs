//! Looking at it. Observe uses lifecycle and core.
pub mod stats; // queue_stats
pub mod inspect; // queue_jobs, queue_job, queue_attempts
pub mod metrics; // metrics(): Prometheus text
pub mod horizon; // what holds the xmin horizon back, for metrics
