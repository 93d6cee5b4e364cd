//! tools/bench/paired_drain.sh's Rust Worker: as section 15 runs it (16 slots on a
//! single-threaded runtime of its own, a no-op handler), draining JOBS jobs of the queue `bench`
//! with claims of BATCH and PREFETCH held beyond the slots; prints the jobs it completed and its
//! CPU time, as drain.py and drain.mjs do. Built against any tree's client, a baseline's too;
//! LEASEQ_BENCH_LOG=INFO prints the Worker's events at INFO, and with the feature `sdk`
//! LEASEQ_BENCH_OTEL=1 sets OpenTelemetry's SDK, its spans exported to nowhere.
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use leaseq_client::{CancellationToken, Outcome, Worker, WorkerConfig};

fn setting(name: &str, default: usize) -> usize {
    std::env::var(name).map_or(default, |v| v.parse().expect(name))
}

fn main() {
    if let Ok(level) = std::env::var("LEASEQ_BENCH_LOG") {
        let level: tracing_subscriber::filter::LevelFilter = level.parse().expect("a level");
        tracing_subscriber::fmt()
            .with_max_level(level)
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .init();
    }
    #[cfg(feature = "sdk")]
    if std::env::var("LEASEQ_BENCH_OTEL").as_deref() == Ok("1") {
        #[derive(Debug)]
        struct Nowhere;
        impl opentelemetry_sdk::trace::SpanExporter for Nowhere {
            async fn export(
                &self,
                _: Vec<opentelemetry_sdk::trace::SpanData>,
            ) -> opentelemetry_sdk::error::OTelSdkResult {
                Ok(())
            }
        }
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
            .with_batch_exporter(Nowhere)
            .build();
        opentelemetry::global::set_tracer_provider(provider);
    }
    let url = std::env::var("DATABASE_URL").expect("DATABASE_URL");
    let jobs = setting("JOBS", 100_000);
    let mut config = WorkerConfig::new("bench");
    config.concurrency = setting("CONCURRENCY", 16);
    config.batch = setting("BATCH", config.concurrency);
    config.prefetch = setting("PREFETCH", 0);
    #[cfg(feature = "quiet")] // a baseline's Worker that logs every transition unless told
    {
        config.quiet = true;
    }
    // Every job handed to the handler, then the Worker's shutdown records the last ones.
    let shutdown = CancellationToken::new();
    let handled = Arc::new(AtomicUsize::new(0));
    let stop = shutdown.clone();
    let handler = move |_job, _stop| {
        if handled.fetch_add(1, Ordering::SeqCst) + 1 == jobs {
            stop.cancel();
        }
        async { Outcome::Complete { result: None } }
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let summary = runtime
        .block_on(Worker::new(&url, config).run(handler, shutdown))
        .expect("the Worker's run");
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let cpu = seconds(usage.ru_utime) + seconds(usage.ru_stime);
    println!(
        r#"{{"completed": {}, "cpu_seconds": {cpu}}}"#,
        summary.completed
    );
}
