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
mod checks;
mod clock;
mod cluster;
mod failover;
mod load;
mod ops;
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
    /// One library worker process (started by the scenarios).
    Worker {
        #[arg(long)]
        queue: String,
        #[arg(long)]
        name: String,
        #[arg(long)]
        log: PathBuf,
        #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
        database_url: String,
    },
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
            database_url,
        } => {
            load::worker(&queue, &name, &log, &database_url).await;
            0
        }
        Mode::Effect { database_url } => load::effect(&database_url).await,
        Mode::Failover(args) => verdict(failover::run(args).await),
        Mode::WalFull(args) => verdict(walfull::run(args).await),
        Mode::Clock(args) => verdict(clock::run(args).await),
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

// The clients.
