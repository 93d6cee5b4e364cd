//! `leaseq work`'s log: the Worker's `tracing` events (their fields and levels are the library's
//! `leaseq_client::log`), printed on stderr with tracing-subscriber — the CLI's, not the
//! library's: a library user brings a subscriber of their own.
use std::io::IsTerminal;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

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
