//! Failover under load on a three-node Patroni cluster (cluster.rs): the primary node killed,
//! a switchover, and the primary killed again while a worker is paused past its lease — with
//! producers and workers on one multi-host URL throughout (load.rs), every operation logged and
//! then checked on the last primary (checks.rs).
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use leaseq_client::Client;
use serde_json::json;

use crate::checks::{self, Check};
use crate::cluster::{Cluster, Error, signal};
use crate::load::{
    self, DATABASE, LoadArgs, Seen, TX_LEASE, TX_QUEUE, Workers, connect, record_fault, writable,
};
use crate::ops;

#[derive(Args, Clone)]
pub struct FailoverArgs {
    /// Where the cluster, the logs and report.json go (emptied first).
    #[arg(long, default_value = "target/faults/failover")]
    dir: PathBuf,
    /// How many times the three faults are repeated.
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// Asynchronous replication: each round, the primary's WAL senders stall `--stall-ms`
    /// under load, then the primary node dies — what the failover loses is measured, not refused.
    #[arg(long)]
    asynchronous: bool,
    #[arg(long, default_value_t = 3000)]
    stall_ms: u64,
    #[command(flatten)]
    load: LoadArgs,
}

pub async fn run(args: FailoverArgs) -> Result<bool, Error> {
    let started = Instant::now();
    let dir = crate::server::emptied(&args.dir)?;
    let say = |what: &str| eprintln!("[{:6.1}s] {what}", started.elapsed().as_secs_f64());
    let synchronous = !args.asynchronous;
    say(if synchronous {
        "starting etcd and three Patroni nodes (synchronous mode, strict)"
    } else {
        "starting etcd and three Patroni nodes (asynchronous replication)"
    });
    let mut cluster = Cluster::start(&dir, args.load.run_as.as_deref(), synchronous).await?;
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
    let mut workers = args.load.start_workers(&url, &dir)?;
    let producers = args.load.start_producers(&url, &dir)?;
    let mut seen = Seen::default();
    tokio::time::sleep(Duration::from_secs(5)).await;

    for round in 1..=args.rounds {
        if synchronous {
            sync_round(&mut cluster, &mut workers, &url, round, &mut seen, &say).await?;
        } else {
            async_round(&mut cluster, &url, round, args.stall_ms, &mut seen, &say).await?;
        }
    }

    load::wind_down(&url, producers, &mut workers, &mut seen, &say).await?;

    say("loading every client's log into the primary; checking");
    let admin = connect(&url, Duration::from_secs(60)).await?;
    let loaded = ops::load(&admin, &dir.join("ops")).await?;
    // With an asynchronous standby, what was acknowledged is measured, not required.
    let (groups, measured): (Vec<_>, Vec<_>) = if synchronous {
        (
            vec![checks::ACKNOWLEDGED, checks::COMMON, checks::PAUSED],
            vec![],
        )
    } else {
        (
            vec![checks::COMMON, checks::PAUSED],
            vec![checks::ACKNOWLEDGED],
        )
    };
    let names = workers.names();
    let mut report = checks::run(&admin, &names, &seen, &groups, &measured).await?;
    report.push(Check::figure(
        "leases the paused worker held",
        checks::count(&admin, "SELECT count(*) FROM faults.paused").await?,
    ));
    let ok = checks::print("checked on the last primary", &report);
    let json = json!({
        "synchronous": synchronous,
        "ops_loaded": loaded,
        "failover_seconds": seen.failovers,
        "switchover_seconds": seen.switchovers,
        "postmaster_kill_seconds": seen.restarts,
        "burst_seconds": seen.burst_seconds,
    });
    let path = checks::write_report(&dir, json, &report, ok, started.elapsed().as_secs_f64())?;
    say(&format!("report: {}", path.display()));
    cluster.stop().await;
    Ok(ok)
}

/// The primary's postmaster killed (Patroni brings it back); the primary node killed; a switchover; the primary killed while a worker is paused past its
/// lease, which resumes once its leases were reclaimed.
async fn sync_round(
    cluster: &mut Cluster,
    workers: &mut Workers,
    url: &str,
    round: usize,
    seen: &mut Seen,
    say: &impl Fn(&str),
) -> Result<(), Error> {
    let leader = cluster.wait_healthy(Duration::from_secs(120)).await?;
    say(&format!(
        "round {round}: kill -9 the primary's postmaster alone ({})",
        cluster.nodes[leader].name
    ));
    let t0 = Instant::now();
    cluster.kill_postmaster(leader);
    writable(url, Duration::from_secs(120)).await?;
    seen.restarts.push(t0.elapsed().as_secs_f64());
    record_fault(url, "postmaster killed").await?;
    let now = cluster.wait_healthy(Duration::from_secs(120)).await?;
    say(&format!(
        "writes again after {:.1}s; leader {} ({})",
        t0.elapsed().as_secs_f64(),
        cluster.nodes[now].name,
        if now == leader {
            "restarted in place by Patroni"
        } else {
            "failed over"
        }
    ));
    tokio::time::sleep(Duration::from_secs(3)).await;

    let leader = cluster.wait_healthy(Duration::from_secs(120)).await?;
    say(&format!(
        "kill -9 the primary node {}",
        cluster.nodes[leader].name
    ));
    let t = kill_and_fail_over(cluster, leader, url).await?;
    say(&format!("a new primary took writes {t:.1}s after the kill"));
    seen.failovers.push(t);
    record_fault(url, "primary killed").await?;
    rejoin(cluster, leader).await?;
    say("the old primary rejoined as a standby");
    tokio::time::sleep(Duration::from_secs(3)).await;

    say("switchover through Patroni's REST API");
    let t0 = Instant::now();
    cluster.switchover().await?;
    writable(url, Duration::from_secs(60)).await?;
    seen.switchovers.push(t0.elapsed().as_secs_f64());
    record_fault(url, "switchover").await?;
    cluster.wait_healthy(Duration::from_secs(120)).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;

    let (paused_name, paused) = pause_holding_leases(workers, url).await?;
    let leader = cluster.wait_healthy(Duration::from_secs(120)).await?;
    say(&format!(
        "{paused_name} paused holding {paused} leases; kill -9 the primary node {}",
        cluster.nodes[leader].name
    ));
    let t = kill_and_fail_over(cluster, leader, url).await?;
    seen.failovers.push(t);
    say(&format!(
        "a new primary took writes {t:.1}s after the kill; waiting for the paused leases to be reclaimed"
    ));
    wait_reclaimed(url, Duration::from_secs(60)).await?;
    let pid = workers
        .library
        .iter()
        .find(|(n, _)| *n == paused_name)
        .and_then(|(_, c)| c.id());
    signal(pid.expect("the paused worker runs"), libc::SIGCONT);
    record_fault(url, "failover with a paused worker").await?;
    say(&format!(
        "{paused_name} resumed after its leases were reclaimed"
    ));
    rejoin(cluster, leader).await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    Ok(())
}

/// Asynchronous replication: the primary's WAL senders stall under load, then the primary
/// node dies — whatever it acknowledged meanwhile is on no other node.
async fn async_round(
    cluster: &mut Cluster,
    url: &str,
    round: usize,
    stall_ms: u64,
    seen: &mut Seen,
    say: &impl Fn(&str),
) -> Result<(), Error> {
    let leader = cluster.wait_healthy(Duration::from_secs(120)).await?;
    say(&format!(
        "round {round}: replication stalls {stall_ms} ms, then kill -9 the primary node {}",
        cluster.nodes[leader].name
    ));
    cluster.stall_replication(leader, true);
    tokio::time::sleep(Duration::from_millis(stall_ms)).await;
    let t0 = Instant::now();
    cluster.kill_node(leader).await?;
    cluster
        .wait_for_leader(Some(leader), Duration::from_secs(60))
        .await?;
    writable(url, Duration::from_secs(60)).await?;
    seen.failovers.push(t0.elapsed().as_secs_f64());
    record_fault(url, "primary killed after its standbys stalled").await?;
    rejoin(cluster, leader).await?;
    say("the old primary rejoined as a standby (rewound)");
    tokio::time::sleep(Duration::from_secs(3)).await;
    Ok(())
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
/// die next), and names it. A lease whose finish was committing at the pause is not one the
/// paused worker holds: its job row is locked until the commit is acknowledged (the synchronous
/// standby's answer included), so SKIP LOCKED leaves it out — recorded, it would count as a
/// finalization after the failover when it came before.
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
                        AND lease_expires_at > clock_timestamp()
                        FOR UPDATE SKIP LOCKED",
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
