//! Looking at it. Observe uses lifecycle and core.
pub mod stats; // queue_stats
pub mod inspect; // queue_jobs, queue_job, queue_attempts, queue_settings
pub mod overview; // queue_overview, queue_throughput: the console's first page
pub mod occupancy; // queue_workers, queue_groups: who holds what now
pub mod wait; // queue_await: until jobs are final, holding no snapshot while it sleeps
pub mod metrics; // metrics(): Prometheus text
pub mod horizon; // what holds the xmin horizon back, for metrics
