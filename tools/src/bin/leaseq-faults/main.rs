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
mod cluster;
mod ops;

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, Parser, Subcommand};
use leaseq_client::client::{EnqueueOptions, QueueSettings};
use leaseq_client::{
    CancellationToken, Client, Job, Outcome, Worker, WorkerConfig, complete_tx, enqueue_tx,
};
use serde_json::json;
use tokio::process::{Child, Command};

use cluster::{Cluster, Error, signal};
use ops::OpLog;

const DATABASE: &str = "leaseq_faults";
/// Library workers' queue: a short lease, so that a failover outlives the leases it breaks.
const TX_QUEUE: &str = "faults_tx";
const TX_LEASE: Duration = Duration::from_secs(4);
/// `leaseq work`'s queue: a lease that outlives a failover, renewed on the new primary.
const CMD_QUEUE: &str = "faults_cmd";
const CMD_LEASE: Duration = Duration::from_secs(30);
/// Idle workers' poll: long, so that jobs enqueued after the last fault are claimed because a
/// notification woke a worker (its LISTEN re-established after the failover), not by the poll.
const POLL: Duration = Duration::from_secs(60);

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
    Failover(FailoverArgs),
    /// One library worker process (started by `failover`).
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

#[derive(Args, Clone)]
struct FailoverArgs {
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

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let code = match Cli::parse().command {
        Mode::Worker {
            queue,
            name,
            log,
            database_url,
        } => {
            worker(&queue, &name, &log, &database_url).await;
            0
        }
        Mode::Effect { database_url } => effect(&database_url).await,
        Mode::Failover(args) => match failover(args).await {
            Ok(true) => 0,
            Ok(false) => 1,
            Err(e) => {
                eprintln!("leaseq-faults: {e}");
                2
            }
        },
    };
    std::process::exit(code);
}

// ---------------------------------------------------------------------------------------------
// The clients.

async fn worker(queue: &str, name: &str, log: &std::path::Path, url: &str) {
    let log = Arc::new(OpLog::create(log).expect("the worker's op log"));
    let mut config = WorkerConfig::new(queue);
    config.worker_id = name.to_string();
    config.concurrency = 4;
    config.poll = POLL;
    config.grace = Duration::from_secs(5);
    let shutdown = CancellationToken::new();
    let on_term = shutdown.clone();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::spawn(async move {
        term.recv().await;
        on_term.cancel();
    });
    let (url, name) = (url.to_string(), name.to_string());
    let handler_url = url.clone();
    let _ = Worker::new(&url, config)
        .run(
            move |job, _stop| handle(handler_url.clone(), name.clone(), log.clone(), job),
            shutdown,
        )
        .await;
}

/// Works for the payload's `ms`, then writes the effect row and completes the job in one
/// transaction. It ignores its stop token on purpose: fencing must hold against a handler that
/// does not listen.
async fn handle(url: String, name: String, log: Arc<OpLog>, job: Job) -> Outcome {
    let payload: serde_json::Value = serde_json::from_str(&job.payload).unwrap_or_default();
    tokio::time::sleep(Duration::from_millis(payload["ms"].as_u64().unwrap_or(20))).await;
    let (outcome, error) = match finish(&url, &name, &job).await {
        Ok(outcome) => (outcome, None),
        Err((outcome, e)) => (outcome, Some(leaseq_client::client::describe(&e))),
    };
    log.write(json!({
        "kind": "finish", "job_id": job.id, "lease_token": job.lease_token.to_string(),
        "attempt_no": job.attempt_no, "outcome": outcome, "worker": name, "error": error,
    }));
    Outcome::Finished
}

/// `ok`: the commit was acknowledged; `refused`: the lease was no longer ours, rolled back;
/// `error`: failed before the commit was sent (nothing committed); `unknown`: the commit was sent
/// and no answer came.
async fn finish(
    url: &str,
    name: &str,
    job: &Job,
) -> Result<&'static str, (&'static str, leaseq_client::Error)> {
    let error = |e| ("error", e);
    let mut client = Client::connect(url).await.map_err(error)?;
    let tx = client.pg().transaction().await.map_err(error)?;
    tx.execute(
        "INSERT INTO faults.effects (job_id, attempt_no, worker) VALUES ($1, $2, $3)",
        &[&job.id, &job.attempt_no, &name],
    )
    .await
    .map_err(error)?;
    if !complete_tx(&tx, job, None).await.map_err(error)? {
        tx.rollback().await.map_err(error)?;
        return Ok("refused");
    }
    tx.commit().await.map_err(|e| ("unknown", e))?;
    Ok("ok")
}

async fn effect(url: &str) -> i32 {
    let read = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<i64>().ok());
    let (Some(job_id), Some(attempt)) = (read("LEASEQ_JOB_ID"), read("LEASEQ_ATTEMPT")) else {
        eprintln!("leaseq-faults effect: LEASEQ_JOB_ID and LEASEQ_ATTEMPT must be set");
        return 64;
    };
    let attempt = attempt as i32;
    let done = async {
        let client = Client::connect(url).await?;
        client
            .raw()
            .execute(
                "INSERT INTO faults.command_effects (job_id, attempt_no) VALUES ($1, $2)",
                &[&job_id, &attempt],
            )
            .await
    };
    match done.await {
        Ok(_) => 0,
        Err(e) => {
            eprintln!(
                "leaseq-faults effect: {}",
                leaseq_client::client::describe(&e)
            );
            75
        }
    }
}

/// One producer: a transaction per job, the business row and the job together, each logged.
async fn produce(url: String, n: usize, pace: Duration, log: Arc<OpLog>, stop: CancellationToken) {
    let mut client: Option<Client> = None;
    let mut seq = 0u64;
    while !stop.is_cancelled() {
        let Some(c) = client.as_mut() else {
            match Client::connect(&url).await {
                Ok(c) => client = Some(c),
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
            continue;
        };
        seq += 1;
        let op = format!("p{n}-{seq}");
        let queue = if seq.is_multiple_of(4) {
            CMD_QUEUE
        } else {
            TX_QUEUE
        };
        let (outcome, job_id, error) = enqueue(c, queue, &op, 20 + (seq % 5) * 20).await;
        log.write(json!({
            "kind": "enqueue", "op": op, "queue": queue, "outcome": outcome, "job_id": job_id,
            "error": error.as_ref().map(leaseq_client::client::describe),
        }));
        if error.is_some() && c.pg().is_closed() {
            client = None;
        }
        tokio::time::sleep(pace).await;
    }
}

/// `ok` with the job's id: acknowledged; `error`: failed before the commit was sent;
/// `unknown`: the commit was sent and no answer came (the id it would have).
async fn enqueue(
    client: &mut Client,
    queue: &str,
    op: &str,
    ms: u64,
) -> (&'static str, Option<i64>, Option<leaseq_client::Error>) {
    let payload = json!({"op": op, "ms": ms}).to_string();
    let tx = match client.pg().transaction().await {
        Ok(tx) => tx,
        Err(e) => return ("error", None, Some(e)),
    };
    if let Err(e) = tx
        .execute("INSERT INTO faults.orders (op) VALUES ($1)", &[&op])
        .await
    {
        return ("error", None, Some(e));
    }
    let id = match enqueue_tx(&tx, queue, &payload, &EnqueueOptions::default()).await {
        Ok(id) => id,
        Err(e) => return ("error", None, Some(e)),
    };
    match tx.commit().await {
        Ok(()) => ("ok", Some(id), None),
        Err(e) => ("unknown", Some(id), Some(e)),
    }
}

// ---------------------------------------------------------------------------------------------
// The experiment.

struct Workers {
    library: Vec<(String, Child)>,
    command: (String, Child),
}

impl Workers {
    fn all(&mut self) -> impl Iterator<Item = &mut (String, Child)> {
        self.library
            .iter_mut()
            .chain(std::iter::once(&mut self.command))
    }
}

/// What the driver saw, beside what the database holds.
#[derive(Default)]
pub struct Seen {
    /// Seconds from each kill to a leader accepting writes.
    pub failovers: Vec<f64>,
    pub switchovers: Vec<f64>,
    /// Worker processes that had exited before the end (none may: they reconnect).
    pub workers_exited: i64,
    /// Jobs enqueued after the last fault, while every worker idled, and how long until all were
    /// final (the poll is a minute: a notification must have woken the workers).
    pub burst_seconds: f64,
}

async fn failover(args: FailoverArgs) -> Result<bool, Error> {
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
    setup(
        &cluster.node_url(leader, "postgres"),
        &cluster.node_url(leader, DATABASE),
    )
    .await?;
    let url = cluster.url(DATABASE);
    let logs = dir.join("ops");
    std::fs::create_dir_all(&logs)?;

    let mut workers = Workers {
        library: (1..=args.workers)
            .map(|n| {
                let name = format!("w{n}");
                let child = Command::new(std::env::current_exe()?)
                    .args(["worker", "--queue", TX_QUEUE, "--name", &name, "--log"])
                    .arg(logs.join(format!("{name}.jsonl")))
                    .env("DATABASE_URL", &url)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(std::fs::File::create(dir.join(format!("{name}.log")))?)
                    .kill_on_drop(true)
                    .spawn()?;
                Ok((name, child))
            })
            .collect::<std::io::Result<_>>()?,
        command: (
            "cmd1".into(),
            Command::new(&args.leaseq)
                .args([
                    "work",
                    "--queue",
                    CMD_QUEUE,
                    "--concurrency",
                    "2",
                    "--worker-id",
                    "cmd1",
                ])
                .args([
                    "--poll",
                    &format!("{}s", POLL.as_secs()),
                    "--json-logs",
                    "--",
                ])
                .arg(std::env::current_exe()?)
                .arg("effect")
                .env("DATABASE_URL", &url)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(dir.join("cmd1.log"))?)
                .kill_on_drop(true)
                .spawn()?,
        ),
    };
    let producer_log = Arc::new(OpLog::create(&logs.join("producers.jsonl"))?);
    let stop = CancellationToken::new();
    let producers: Vec<_> = (1..=args.producers)
        .map(|n| {
            tokio::spawn(produce(
                url.clone(),
                n,
                Duration::from_millis(args.pace_ms),
                producer_log.clone(),
                stop.clone(),
            ))
        })
        .collect();
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
    stop.cancel();
    for p in producers {
        p.await?;
    }
    settle(&url, Duration::from_secs(180)).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    seen.burst_seconds = burst(&url, &producer_log).await?;
    say(&format!(
        "jobs enqueued to idle workers were final after {:.2}s",
        seen.burst_seconds
    ));
    for (_, child) in workers.all() {
        if child.try_wait()?.is_some() {
            seen.workers_exited += 1;
        } else if let Some(pid) = child.id() {
            signal(pid, libc::SIGTERM);
        }
    }
    for (_, child) in workers.all() {
        let _ = tokio::time::timeout(Duration::from_secs(30), child.wait()).await;
    }
    let names: Vec<String> = workers.all().map(|(n, _)| n.clone()).collect();

    say("loading every client's log into the primary; checking");
    let admin = connect(&url, Duration::from_secs(60)).await?;
    let loaded = ops::load(&admin, &logs).await?;
    let report = checks::failover(&admin, &names, &seen).await?;
    let ok = checks::print(&report);
    let json = json!({
        "ops_loaded": loaded,
        "failover_seconds": seen.failovers,
        "switchover_seconds": seen.switchovers,
        "burst_seconds": seen.burst_seconds,
        "checks": report.iter().map(|c| json!({"check": c.name, "value": c.value, "must_be_zero": c.must_be_zero})).collect::<Vec<_>>(),
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

async fn setup(postgres_url: &str, url: &str) -> Result<(), Error> {
    let admin = Client::connect(postgres_url).await?;
    admin
        .raw()
        .batch_execute(&format!("CREATE DATABASE {DATABASE}"))
        .await?;
    let admin = Client::connect(url).await?;
    admin
        .raw()
        .batch_execute(
            "CREATE EXTENSION leaseq;
             CREATE SCHEMA faults;
             -- The business rows the producers commit with their jobs.
             CREATE TABLE faults.orders (op text PRIMARY KEY);
             -- The library workers' effects, written in the completing transaction (no unique
             -- key: a double effect must be countable, not refused).
             CREATE TABLE faults.effects (job_id bigint NOT NULL, attempt_no int NOT NULL,
                                          worker text NOT NULL,
                                          at timestamptz NOT NULL DEFAULT clock_timestamp());
             -- The commands' effects, written before `leaseq work` completes the job.
             CREATE TABLE faults.command_effects (job_id bigint NOT NULL, attempt_no int NOT NULL,
                                                  at timestamptz NOT NULL DEFAULT clock_timestamp());
             -- Each fault, when it was over, on the server's clock.
             CREATE TABLE faults.faults (kind text NOT NULL,
                                         at timestamptz NOT NULL DEFAULT clock_timestamp());
             -- The leases a paused worker held when its primary was killed.
             CREATE TABLE faults.paused (job_id bigint NOT NULL, lease_token uuid NOT NULL,
                                         worker text NOT NULL);",
        )
        .await?;
    ops::create_table(&admin).await?;
    let settings = |lease| QueueSettings {
        lease: Some(lease),
        max_attempts: Some(1000),
        backoff_base: Some(Duration::from_millis(100)),
        backoff_cap: Some(Duration::from_secs(1)),
        ..QueueSettings::default()
    };
    admin.queue_create(TX_QUEUE, &settings(TX_LEASE)).await?;
    admin.queue_create(CMD_QUEUE, &settings(CMD_LEASE)).await?;
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

/// Waits until a transaction commits through the multi-host URL.
async fn writable(url: &str, limit: Duration) -> Result<(), Error> {
    let end = Instant::now() + limit;
    loop {
        let attempt = async {
            let client = Client::connect(url).await?;
            client
                .raw()
                .batch_execute("BEGIN; SELECT txid_current(); COMMIT")
                .await
        };
        match tokio::time::timeout(Duration::from_secs(5), attempt).await {
            Ok(Ok(())) => return Ok(()),
            _ if Instant::now() > end => {
                return Err(format!("no write committed in {limit:?}").into());
            }
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Connects through the multi-host URL, retrying while no primary answers.
async fn connect(url: &str, limit: Duration) -> Result<Client, Error> {
    let end = Instant::now() + limit;
    loop {
        match Client::connect(url).await {
            Ok(c) => return Ok(c),
            Err(e) if Instant::now() > end => return Err(e.into()),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

async fn record_fault(url: &str, kind: &str) -> Result<(), Error> {
    let admin = connect(url, Duration::from_secs(60)).await?;
    admin
        .raw()
        .execute("INSERT INTO faults.faults (kind) VALUES ($1)", &[&kind])
        .await?;
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

/// Waits until every job of both queues is final.
async fn settle(url: &str, limit: Duration) -> Result<(), Error> {
    let end = Instant::now() + limit;
    loop {
        if let Ok(admin) = Client::connect(url).await
            && let Ok(row) = admin
                .raw()
                .query_one(
                    "SELECT count(*) FROM leaseq.jobs WHERE queue IN ($1, $2)
                        AND status NOT IN ('succeeded', 'dead', 'cancelled')",
                    &[&TX_QUEUE, &CMD_QUEUE],
                )
                .await
            && row.get::<_, i64>(0) == 0
        {
            return Ok(());
        }
        if Instant::now() > end {
            return Err(format!("jobs were still not final after {limit:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Ten jobs per queue while every worker idles; the seconds until all are final.
async fn burst(url: &str, log: &OpLog) -> Result<f64, Error> {
    let mut client = connect(url, Duration::from_secs(60)).await?;
    let t0 = Instant::now();
    for n in 0..20 {
        let op = format!("burst-{n}");
        let queue = if n % 2 == 0 { TX_QUEUE } else { CMD_QUEUE };
        let (outcome, job_id, error) = enqueue(&mut client, queue, &op, 20).await;
        log.write(json!({"kind": "enqueue", "op": op, "queue": queue, "outcome": outcome, "job_id": job_id}));
        if let Some(e) = error {
            return Err(e.into());
        }
    }
    settle(url, POLL / 2).await?;
    Ok(t0.elapsed().as_secs_f64())
}
