//! The Worker's events go through `tracing` (target `leaseq_client::worker`): a library user's
//! subscriber gets them, and `leaseq work` prints them on stderr (the CLI's `log::init`). A job's
//! events carry `queue`, `worker`, `job_id`, `attempt` and `key` — never the payload, which may
//! hold secrets; the worker's own (`started`, `draining`, `stopped`, `db_error`, `refused`)
//! `queue` and `worker`. The message is the event's name. Levels: a job's routine transitions at
//! DEBUG, the run's at INFO, a retried failure, a lost lease, a fenced outcome and database
//! trouble at WARN, a job gone dead and a refused claim at ERROR.

/// An event about one job: `$job` is a `Job`, or `(id, attempt, key)`.
macro_rules! job_event {
    ($level:ident, $shared:expr, ($id:expr, $attempt:expr, $key:expr), $event:literal $(, $($field:tt)+)?) => {
        tracing::event!(
            tracing::Level::$level,
            queue = $shared.config.queue.as_str(),
            worker = $shared.config.worker_id.as_str(),
            job_id = $id,
            attempt = $attempt,
            key = $key,
            $($($field)+,)?
            $event
        )
    };
    ($level:ident, $shared:expr, $job:expr, $event:literal $(, $($field:tt)+)?) => {
        job_event!(
            $level, $shared, ($job.id, $job.attempt_no, $job.key.as_str()), $event $(, $($field)+)?
        )
    };
}

/// An event about the worker itself.
macro_rules! worker_event {
    ($level:ident, $shared:expr, $event:literal $(, $($field:tt)+)?) => {
        tracing::event!(
            tracing::Level::$level,
            queue = $shared.config.queue.as_str(),
            worker = $shared.config.worker_id.as_str(),
            $($($field)+,)?
            $event
        )
    };
}

pub(crate) use {job_event, worker_event};
