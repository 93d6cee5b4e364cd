//! What every scenario runs: the database it creates, the clients (producers enqueueing beside
//! a business row, library `Worker` processes, a `leaseq work` process), and the waits the
//! scenarios share. Every client logs its operations (ops.rs).
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use leaseq_client::client::{EnqueueOptions, QueueSettings};
use leaseq_client::{
    CancellationToken, Client, Job, Outcome, Worker, WorkerConfig, complete_tx, enqueue_tx,
};
use serde_json::json;
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

use crate::cluster::{Error, signal};
use crate::ops::{self, OpLog};

pub const DATABASE: &str = "leaseq_faults";
/// Library workers' queue: a short lease, so that a failover outlives the leases it breaks.
pub const TX_QUEUE: &str = "faults_tx";
pub const TX_LEASE: Duration = Duration::from_secs(4);
/// `leaseq work`'s queue: a lease that outlives a failover, renewed on the new primary.
pub const CMD_QUEUE: &str = "faults_cmd";
pub const CMD_LEASE: Duration = Duration::from_secs(30);
/// Idle workers' poll: long, so that jobs enqueued after the last fault are claimed because a
/// notification woke a worker (its LISTEN re-established after the failover), not by the poll.
pub const POLL: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------------
// The clients.

pub async fn worker(queue: &str, name: &str, log: &std::path::Path, url: &str) {
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
        "kind": "finish", "op": payload["op"], "job_id": job.id, "job_key": job.key,
        "lease_token": job.lease_token.to_string(), "attempt_no": job.attempt_no,
        "outcome": outcome, "worker": name, "error": error,
    }));
    Outcome::Finished
}

async fn finish(
    url: &str,
    name: &str,
    job: &Job,
) -> Result<&'static str, (&'static str, leaseq_client::Error)> {
    let mut client = Client::connect(url).await.map_err(|e| ("error", e))?;
    finish_on(client.pg(), name, job).await
}

/// The handler's finish on a connection of the caller's: the effect row and the completion in
/// one transaction. `ok`: the commit was acknowledged; `refused`: the lease was no longer ours,
/// rolled back; `error`: failed before the commit was sent (nothing committed); `unknown`: the
/// commit was sent and no answer came.
pub async fn finish_on(
    pg: &mut tokio_postgres::Client,
    name: &str,
    job: &Job,
) -> Result<&'static str, (&'static str, leaseq_client::Error)> {
    let error = |e| ("error", e);
    let tx = pg.transaction().await.map_err(error)?;
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

pub async fn effect(url: &str) -> i32 {
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
        let enqueued = enqueue(c, queue, &op, 20 + (seq % 5) * 20).await;
        enqueued.log(&log, &op, queue);
        if enqueued.error.is_some() && c.pg().is_closed() {
            client = None;
        }
        tokio::time::sleep(pace).await;
    }
}

/// One transactional enqueue as its producer saw it: `ok` (acknowledged), `error` (failed
/// before the commit was sent), `unknown` (the commit was sent and no answer came); the job's id
/// and key once the enqueue answered (the ones it would have, when unknown).
struct Enqueued {
    outcome: &'static str,
    job: Option<(i64, String)>,
    error: Option<leaseq_client::Error>,
}

impl Enqueued {
    fn log(&self, log: &OpLog, op: &str, queue: &str) {
        let (id, key) = self.job.clone().unzip();
        log.write(json!({
            "kind": "enqueue", "op": op, "queue": queue, "outcome": self.outcome,
            "job_id": id, "job_key": key,
            "error": self.error.as_ref().map(leaseq_client::client::describe),
        }));
    }
}

async fn enqueue(client: &mut Client, queue: &str, op: &str, ms: u64) -> Enqueued {
    let failed = |outcome, job, error| Enqueued {
        outcome,
        job,
        error: Some(error),
    };
    let payload = json!({"op": op, "ms": ms}).to_string();
    let tx = match client.pg().transaction().await {
        Ok(tx) => tx,
        Err(e) => return failed("error", None, e),
    };
    if let Err(e) = tx
        .execute("INSERT INTO faults.orders (op) VALUES ($1)", &[&op])
        .await
    {
        return failed("error", None, e);
    }
    let job = match enqueue_tx(&tx, queue, &payload, &EnqueueOptions::default()).await {
        Ok(id) => tx
            .query_one(
                "SELECT id || '-' || (extract(epoch FROM created_at) * 1000000)::bigint
                   FROM leaseq.jobs WHERE id = $1",
                &[&id],
            )
            .await
            .map(|row| (id, row.get::<_, String>(0))),
        Err(e) => Err(e),
    };
    let job = match job {
        Ok(job) => job,
        Err(e) => return failed("error", None, e),
    };
    match tx.commit().await {
        Ok(()) => Enqueued {
            outcome: "ok",
            job: Some(job),
            error: None,
        },
        Err(e) => failed("unknown", Some(job), e),
    }
}

/// The worker processes of a run: Rust library workers `w1…`, `cmd1` (a `leaseq work`), and
/// `py1` (the Python client's Worker, tools/faults/worker.py).
pub struct Workers {
    pub library: Vec<(String, Child)>,
    pub command: (String, Child),
    pub python: (String, Child),
}

impl Workers {
    /// Starts `n` library workers, one `leaseq work` (the CLI at `leaseq`) and one Python
    /// worker (`python`: an interpreter with the client installed) on `url`; their op logs go
    /// to `dir/ops`, their stderr to `dir/<name>.log`.
    pub fn start(
        url: &str,
        dir: &Path,
        n: usize,
        leaseq: &Path,
        python: &Path,
    ) -> std::io::Result<Workers> {
        let logs = dir.join("ops");
        std::fs::create_dir_all(&logs)?;
        let library = (1..=n)
            .map(|n| {
                let name = format!("w{n}");
                let child = Command::new(std::env::current_exe()?)
                    .args(["worker", "--queue", TX_QUEUE, "--name", &name, "--log"])
                    .arg(logs.join(format!("{name}.jsonl")))
                    .env("DATABASE_URL", url)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(std::fs::File::create(dir.join(format!("{name}.log")))?)
                    .kill_on_drop(true)
                    .spawn()?;
                Ok((name, child))
            })
            .collect::<std::io::Result<_>>()?;
        let poll = format!("{}s", POLL.as_secs());
        let command = Command::new(leaseq)
            .args(["work", "--queue", CMD_QUEUE, "--concurrency", "2"])
            .args(["--worker-id", "cmd1", "--poll", &poll, "--json-logs", "--"])
            .arg(std::env::current_exe()?)
            .arg("effect")
            .env("DATABASE_URL", url)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("cmd1.log"))?)
            .kill_on_drop(true)
            .spawn()?;
        let program = concat!(env!("CARGO_MANIFEST_DIR"), "/faults/worker.py");
        let python = Command::new(python)
            .args([program, "py1"])
            .env("DATABASE_URL", url)
            .env("QUEUE", TX_QUEUE)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("py1.log"))?)
            .kill_on_drop(true)
            .spawn()?;
        Ok(Workers {
            library,
            command: ("cmd1".into(), command),
            python: ("py1".into(), python),
        })
    }

    fn all(&mut self) -> impl Iterator<Item = &mut (String, Child)> {
        let others = [&mut self.command, &mut self.python];
        self.library.iter_mut().chain(others)
    }

    pub fn names(&self) -> Vec<String> {
        let others = [&self.command, &self.python];
        self.library
            .iter()
            .chain(others)
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// SIGTERM to every worker, and their exit awaited; how many had exited before (none may:
    /// they reconnect on their own).
    pub async fn stop(&mut self) -> std::io::Result<i64> {
        let mut exited = 0;
        for (_, child) in self.all() {
            if child.try_wait()?.is_some() {
                exited += 1;
            } else if let Some(pid) = child.id() {
                signal(pid, libc::SIGTERM);
            }
        }
        for (_, child) in self.all() {
            let _ = tokio::time::timeout(Duration::from_secs(30), child.wait()).await;
        }
        Ok(exited)
    }
}

/// The producers of a run, enqueueing until stopped; their op log is `dir/ops/producers.jsonl`.
pub struct Producers {
    pub log: Arc<OpLog>,
    stop: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl Producers {
    pub fn start(url: &str, dir: &Path, n: usize, pace: Duration) -> std::io::Result<Producers> {
        let logs = dir.join("ops");
        std::fs::create_dir_all(&logs)?;
        let log = Arc::new(OpLog::create(&logs.join("producers.jsonl"))?);
        let stop = CancellationToken::new();
        let tasks = (1..=n)
            .map(|n| tokio::spawn(produce(url.to_string(), n, pace, log.clone(), stop.clone())))
            .collect();
        Ok(Producers { log, stop, tasks })
    }

    pub async fn stop(self) -> Result<(), Error> {
        self.stop.cancel();
        for task in self.tasks {
            task.await?;
        }
        Ok(())
    }
}

/// What the driver saw, beside what the database holds.
#[derive(Default)]
pub struct Seen {
    /// Seconds from each kill to a leader accepting writes.
    pub failovers: Vec<f64>,
    pub switchovers: Vec<f64>,
    /// Seconds from a `kill -9` of the primary's postmaster alone to a commit.
    pub restarts: Vec<f64>,
    /// Worker processes that had exited before the end (none may: they reconnect).
    pub workers_exited: i64,
    /// Jobs enqueued after the last fault, while every worker idled, and how long until all were
    /// final (the poll is a minute: a notification must have woken the workers).
    pub burst_seconds: f64,
}

// ---------------------------------------------------------------------------------------------
// The database and the waits.

/// Creates the run's database on the primary: the extension, the `faults` schema, both queues.
pub async fn setup(postgres_url: &str, url: &str) -> Result<(), Error> {
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
             -- Each fault, when it was over, on the server's clock, numbered in order.
             CREATE TABLE faults.faults (n bigint GENERATED ALWAYS AS IDENTITY, kind text NOT NULL,
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

/// Waits until a transaction commits through the multi-host URL.
pub async fn writable(url: &str, limit: Duration) -> Result<(), Error> {
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
pub async fn connect(url: &str, limit: Duration) -> Result<Client, Error> {
    let end = Instant::now() + limit;
    loop {
        match Client::connect(url).await {
            Ok(c) => return Ok(c),
            Err(e) if Instant::now() > end => return Err(e.into()),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

pub async fn record_fault(url: &str, kind: &str) -> Result<(), Error> {
    let admin = connect(url, Duration::from_secs(60)).await?;
    admin
        .raw()
        .execute("INSERT INTO faults.faults (kind) VALUES ($1)", &[&kind])
        .await?;
    Ok(())
}

/// Waits until every job of both queues is final.
pub async fn settle(url: &str, limit: Duration) -> Result<(), Error> {
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
pub async fn burst(url: &str, log: &OpLog) -> Result<f64, Error> {
    let mut client = connect(url, Duration::from_secs(60)).await?;
    let t0 = Instant::now();
    for n in 0..20 {
        let op = format!("burst-{n}");
        let queue = if n % 2 == 0 { TX_QUEUE } else { CMD_QUEUE };
        let enqueued = enqueue(&mut client, queue, &op, 20).await;
        enqueued.log(log, &op, queue);
        if let Some(e) = enqueued.error {
            return Err(e.into());
        }
    }
    settle(url, POLL / 2).await?;
    Ok(t0.elapsed().as_secs_f64())
}
