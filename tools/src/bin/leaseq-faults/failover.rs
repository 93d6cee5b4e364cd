//! Failover under load on a three-node Patroni cluster (cluster.rs): the primary node killed,
//! a switchover, and the primary killed again while a worker is paused past its lease — with
//! producers and workers on one multi-host URL throughout (load.rs), every operation logged and
//! then checked on the last primary (checks.rs).
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use leaseq_client::Client;
use serde_json::json;

use crate::checks;
use crate::cluster::{Cluster, Error, signal};
use crate::load::{
    self, DATABASE, Mix, Producers, Seen, TX_QUEUE, Workers, connect, record_fault, settle,
    writable,
};
use crate::ops;

/// The library workers' lease: short, so that a failover outlives the leases it breaks.
const TX_LEASE: Duration = Duration::from_secs(4);

#[derive(Args, Clone)]
pub struct FailoverArgs {
    /// Where the cluster, the logs and report.json go (emptied first).
    #[arg(long, default_value = "target/faults/failover")]
    dir: PathBuf,
    /// How many times the three faults are repeated.
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// Producers, each enqueueing one job per transaction.
    #[arg(long, default_value_t = 3)]
    producers: usize,
    /// Each producer's pause between transactions, in milliseconds.
    #[arg(long, default_value_t = 20)]
    pace_ms: u64,
    /// Library worker processes.
    #[arg(long, default_value_t = 3)]
    workers: usize,
    /// The `leaseq` CLI, for `leaseq work`.
    #[arg(long)]
    leaseq: PathBuf,
    /// The OS user that runs the servers (when we are root).
    #[arg(long, env = "LEASEQ_RUN_AS")]
    run_as: Option<String>,
}

pub async fn run(args: FailoverArgs) -> Result<bool, Error> {
    let started = Instant::now();
    std::fs::create_dir_all(&args.dir)?;
    let dir = std::fs::canonicalize(&args.dir)?;
    let say = |what: &str| eprintln!("[{:6.1}s] {what}", started.elapsed().as_secs_f64());
    say("starting etcd and three Patroni nodes (synchronous mode, strict)");
    let mut cluster = Cluster::start(&dir, args.run_as.as_deref(), true).await?;
    let leader = cluster.wait_healthy(Duration::from_secs(60)).await?;
    say(&format!(
        "leader {}; creating {DATABASE}",
        cluster.nodes[leader].name
    ));
    load::setup(
        &cluster.node_url(leader, "postgres"),
        &cluster.node_url(leader, DATABASE),
        TX_LEASE,
    )
    .await?;
    let url = cluster.url(DATABASE);
    let mut workers = Workers::start(&url, &dir, args.workers, &args.leaseq)?;
    let mix = Mix {
        pace: Duration::from_millis(args.pace_ms),
        short_ms: 20,
        long: None,
    };
    let producers = Producers::start(&url, &dir, args.producers, mix)?;
    let mut seen = Seen::default();
    tokio::time::sleep(Duration::from_secs(5)).await;

    for round in 1..=args.rounds {
        let leader = cluster.wait_healthy(Duration::from_secs(120)).await?;
        say(&format!(
            "round {round}: kill -9 the primary node {}",
            cluster.nodes[leader].name
        ));
        let t = kill_and_fail_over(&mut cluster, leader, &url).await?;
        say(&format!("a new primary took writes {t:.1}s after the kill"));
        seen.failovers.push(t);
        record_fault(&url, "primary killed").await?;
        rejoin(&mut cluster, leader).await?;
        say("the old primary rejoined as a standby");
        tokio::time::sleep(Duration::from_secs(3)).await;

        say("switchover through Patroni's REST API");
        let t0 = Instant::now();
        cluster.switchover().await?;
        writable(&url, Duration::from_secs(60)).await?;
        seen.switchovers.push(t0.elapsed().as_secs_f64());
        record_fault(&url, "switchover").await?;
        cluster.wait_healthy(Duration::from_secs(120)).await?;
        tokio::time::sleep(Duration::from_secs(3)).await;

        let (paused_name, paused) = pause_holding_leases(&mut workers, &url).await?;
        let leader = cluster.wait_healthy(Duration::from_secs(120)).await?;
        say(&format!(
            "{paused_name} paused holding {paused} leases; kill -9 the primary node {}",
            cluster.nodes[leader].name
        ));
        let t = kill_and_fail_over(&mut cluster, leader, &url).await?;
        seen.failovers.push(t);
        say(&format!(
            "a new primary took writes {t:.1}s after the kill; waiting for the paused leases to be reclaimed"
        ));
        wait_reclaimed(&url, Duration::from_secs(60)).await?;
        let pid = workers
            .library
            .iter()
            .find(|(n, _)| *n == paused_name)
            .and_then(|(_, c)| c.id());
        signal(pid.expect("the paused worker runs"), libc::SIGCONT);
        record_fault(&url, "failover with a paused worker").await?;
        say(&format!(
            "{paused_name} resumed after its leases were reclaimed"
        ));
        rejoin(&mut cluster, leader).await?;
        tokio::time::sleep(Duration::from_secs(5)).await;
    }

    say("stopping the producers; waiting for every job to be final");
    let log = producers.log.clone();
    producers.stop().await?;
    settle(&url, Duration::from_secs(180)).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    seen.burst_seconds = load::burst(&url, &log).await?;
    say(&format!(
        "jobs enqueued to idle workers were final after {:.2}s",
        seen.burst_seconds
    ));
    seen.workers_exited = workers.stop().await?;

    say("loading every client's log into the primary; checking");
    let admin = connect(&url, Duration::from_secs(60)).await?;
    let loaded = ops::load(&admin, &dir.join("ops")).await?;
    let report = checks::failover(&admin, &workers.names(), &seen).await?;
    let ok = checks::print(&report);
    let json = json!({
        "ops_loaded": loaded,
        "failover_seconds": seen.failovers,
        "switchover_seconds": seen.switchovers,
        "burst_seconds": seen.burst_seconds,
        "checks": checks::to_json(&report),
        "passed": ok,
        "seconds": started.elapsed().as_secs_f64(),
    });
    std::fs::write(
        dir.join("report.json"),
        serde_json::to_string_pretty(&json)?,
    )?;
    say(&format!("report: {}", dir.join("report.json").display()));
    cluster.stop().await;
    Ok(ok)
}

/// Kills the leader's node and waits until the multi-host URL reaches a primary that commits;
/// the seconds that took.
async fn kill_and_fail_over(cluster: &mut Cluster, leader: usize, url: &str) -> Result<f64, Error> {
    let t0 = Instant::now();
    cluster.kill_node(leader).await?;
    cluster
        .wait_for_leader(Some(leader), Duration::from_secs(60))
        .await?;
    writable(url, Duration::from_secs(60)).await?;
    Ok(t0.elapsed().as_secs_f64())
}

/// Starts the killed node's Patroni again: it rewinds if it must and follows the new primary.
async fn rejoin(cluster: &mut Cluster, node: usize) -> Result<(), Error> {
    cluster.start_node(node)?;
    cluster.wait_healthy(Duration::from_secs(120)).await?;
    Ok(())
}

/// SIGSTOPs a library worker while it holds leases, records them (on the primary, which will
/// die next), and names it.
async fn pause_holding_leases(workers: &mut Workers, url: &str) -> Result<(String, i64), Error> {
    let admin = connect(url, Duration::from_secs(60)).await?;
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        for (name, child) in &workers.library {
            let pid = child.id().ok_or("a worker exited")?;
            signal(pid, libc::SIGSTOP);
            let held = admin
                .raw()
                .execute(
                    "INSERT INTO faults.paused (job_id, lease_token, worker)
                     SELECT id, lease_token, worker FROM leaseq.jobs
                      WHERE queue = $1 AND status = 'running' AND worker = $2
                        AND lease_expires_at > clock_timestamp()",
                    &[&TX_QUEUE, &name],
                )
                .await?;
            if held > 0 {
                return Ok((name.clone(), held as i64));
            }
            signal(pid, libc::SIGCONT);
        }
        if Instant::now() > end {
            return Err("no worker held a lease within 60 s".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until no lease the paused worker held is still its job's live lease.
async fn wait_reclaimed(url: &str, limit: Duration) -> Result<(), Error> {
    let end = Instant::now() + limit;
    loop {
        if let Ok(admin) = Client::connect(url).await {
            let live: i64 = admin
                .raw()
                .query_one(
                    "SELECT count(*) FROM faults.paused p JOIN leaseq.jobs j
                        ON j.id = p.job_id AND j.lease_token = p.lease_token AND j.status = 'running'",
                    &[],
                )
                .await?
                .get(0);
            if live == 0 {
                return Ok(());
            }
        }
        if Instant::now() > end {
            return Err(
                format!("the paused worker's leases were not reclaimed in {limit:?}").into(),
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
