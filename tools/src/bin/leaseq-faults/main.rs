//! `leaseq-faults`: leaseq under the faults that break distributed systems, on real components,
//! proved from the database. `scripts/faults` builds and runs it; `--help` lists the knobs.
//!
//! `failover` starts etcd and three PostgreSQL nodes under Patroni (cluster.rs), producers that
//! enqueue in a transaction beside a business row, library `Worker` processes whose handler
//! writes an effect row and completes in one transaction, and a `leaseq work` process whose
//! command writes an effect row of its own — all connecting with one multi-host URL
//! (`target_session_attrs=read-write`). Under that load it kills the primary node, switches
//! over, and kills the primary again while a worker is paused past its lease. Every client
//! logs each operation as ok / error / unknown (ops.rs); when the jobs have settled the logs
//! are loaded into the last primary and SQL checks them there (checks.rs).
//!
//! `wal-full` and `clock` run one server (server.rs) under the same load: pg_wal filled up, an
//! abandoned slot, a cancelled synchronous commit (walfull.rs); the server's clock stepped
//! forward and back (clock.rs).
//!
//! `partition` runs one server, its clients and itself in network namespaces of their own
//! (partition.rs): the clients are cut off for less than a lease, then for longer, then their
//! link is made slow and lossy by a proxy (proxy.rs); the same logs and checks, and whether a
//! worker stopped its handlers before the server could reclaim their jobs.
mod checks;
mod clock;
mod cluster;
mod failover;
mod load;
mod ops;
mod partition;
mod proxy;
mod server;
mod walfull;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "leaseq-faults",
    about = "leaseq under failover and other real faults"
)]
struct Cli {
    #[command(subcommand)]
    command: Mode,
}

#[derive(Subcommand)]
enum Mode {
    /// Failover under load on a three-node Patroni cluster, then the checks.
    Failover(failover::FailoverArgs),
    /// pg_wal full, an abandoned slot, a cancelled synchronous commit — one server under load.
    WalFull(walfull::WalFullArgs),
    /// The server's clock stepped forward and back (libfaketime) while leases are held.
    Clock(clock::ClockArgs),
    /// Partitions and a slow, lossy link under load, in network namespaces (run as root).
    Partition(partition::PartitionArgs),
    /// The partition scenario itself, in the driver's namespace (started by `partition`).
    #[command(hide = true)]
    PartitionScenario {
        #[command(flatten)]
        namespaces: partition::Namespaces,
        #[command(flatten)]
        args: partition::PartitionArgs,
    },
    /// One library worker process (started by the scenarios).
    Worker {
        #[arg(long)]
        queue: String,
        #[arg(long)]
        name: String,
        #[arg(long)]
        log: PathBuf,
        #[arg(long, value_enum, default_value = "transactional")]
        handler: load::Handler,
        #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
        database_url: String,
    },
    /// Producers as a process, until SIGTERM; their log is DIR/ops/producers.jsonl (started
    /// by `partition`).
    Producers {
        #[arg(long)]
        dir: PathBuf,
        #[arg(long)]
        count: usize,
        #[arg(long)]
        pace_ms: u64,
        /// Jobs work for one to five times this.
        #[arg(long, default_value_t = 20)]
        short_ms: u64,
        /// Every Nth job of a producer works for --long-ms.
        #[arg(long)]
        long_every: Option<u64>,
        #[arg(long, default_value_t = 0)]
        long_ms: u64,
        #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
        database_url: String,
    },
    /// A TCP proxy that makes a link slow and lossy on SIGUSR1 (started by `partition`).
    Proxy(proxy::ProxyArgs),
    /// The command `leaseq work` runs per job: writes its effect row (LEASEQ_JOB_ID,
    /// LEASEQ_ATTEMPT); exit 75 (retry) when the database is away.
    Effect {
        #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
        database_url: String,
    },
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let code = match Cli::parse().command {
        Mode::Worker {
            queue,
            name,
            log,
            handler,
            database_url,
        } => {
            load::worker(&queue, &name, &log, &database_url, handler).await;
            0
        }
        Mode::Effect { database_url } => load::effect(&database_url).await,
        Mode::Failover(args) => verdict(failover::run(args).await),
        Mode::WalFull(args) => verdict(walfull::run(args).await),
        Mode::Clock(args) => verdict(clock::run(args).await),
        Mode::Producers {
            dir,
            count,
            pace_ms,
            short_ms,
            long_every,
            long_ms,
            database_url,
        } => {
            let mix = load::Mix {
                pace: std::time::Duration::from_millis(pace_ms),
                short_ms,
                long: long_every.map(|every| (every, long_ms)),
            };
            verdict(
                load::producers(&database_url, &dir, count, mix)
                    .await
                    .map(|()| true),
            )
        }
        Mode::Proxy(args) => verdict(proxy::run(args).await.map(|()| true)),
        // Its arguments are passed on to the scenario as given.
        Mode::Partition(_) => verdict(partition::run().await),
        Mode::PartitionScenario { namespaces, args } => {
            verdict(partition::scenario(args, namespaces).await)
        }
    };
    std::process::exit(code);
}

/// A scenario's exit status: 0 passed, 1 a check failed, 2 the run itself failed.
fn verdict(result: Result<bool, cluster::Error>) -> i32 {
    match result {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(e) => {
            // tokio-postgres says "db error"; the server's words are in the sources.
            let mut said = e.to_string();
            let mut cause = e.source();
            while let Some(c) = cause {
                said.push_str(&format!(": {c}"));
                cause = c.source();
            }
            eprintln!("leaseq-faults: {said}");
            2
        }
    }
}
