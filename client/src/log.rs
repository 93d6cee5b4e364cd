//! The Worker's events go through `tracing` (target `leaseq_client::worker`): a library user's
//! subscriber gets them, and `leaseq work` prints them on stderr (`init`). A job's events carry
//! `queue`, `worker`, `job_id`, `attempt` and `key` — never the payload, which may hold secrets;
//! the worker's own (`started`, `draining`, `stopped`, `db_error`, `refused`) `queue` and
//! `worker`. The message is the event's name. Levels: a job's routine transitions at DEBUG, the
//! run's at INFO, a retried failure, a lost lease, a fenced outcome and database trouble at WARN,
//! a job gone dead and a refused claim at ERROR.
use std::io::IsTerminal;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

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

/// `leaseq work`'s log: every worker event down to DEBUG, one line each on stderr — text, its
/// values quoted and escaped so that nothing in a name or a server's message can split a line
/// or forge one, or (`json`) one JSON object per line.
pub fn init(json: bool) {
    let filter = Targets::new()
        .with_target("leaseq_client", LevelFilter::DEBUG)
        .with_default(LevelFilter::WARN);
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let layer = if json {
        layer.json().flatten_event(true).boxed()
    } else {
        layer.boxed()
    };
    tracing_subscriber::registry()
        .with(layer.with_filter(filter))
        .init();
}
