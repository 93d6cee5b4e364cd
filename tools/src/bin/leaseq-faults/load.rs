//! What every scenario runs: the database it creates, the clients (producers enqueueing beside
//! a business row, library `Worker` processes, a `leaseq work` process), and the waits the
//! scenarios share. Every client logs its operations (ops.rs).
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::ValueEnum;
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
/// Library workers' queue, and its lease where a scenario does not choose one (`setup`): short,
/// so that a failover outlives the leases it breaks.
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

/// How a library worker's handler finishes its jobs.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq)]
pub enum Handler {
    /// Works, then writes the effect row and completes in one transaction; a finish that fails
    /// is not retried (the job is left to its lease).
    Transactional,
    /// Odd job ids: works, then returns `Outcome::Complete` with a result naming the attempt —
    /// the worker finishes the job, and must never once it has stopped the handler. Even ids:
    /// connects, works while connected (a partition finds it mid-job), then effect and completion
    /// in one transaction, retried while it failed before its commit and the stop token has not
    /// fired.
    Mixed,
}

pub async fn worker(queue: &str, name: &str, log: &std::path::Path, url: &str, style: Handler) {
    // The Worker's events on stderr (its `{name}.log`), as `leaseq work` prints them: the
    // checks read them (walfull.rs: its claim retries while the server is down).
    tracing_subscriber::fmt()
        .with_max_level(tracing_subscriber::filter::LevelFilter::INFO)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
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
            move |job, stop| {
                handle(
                    handler_url.clone(),
                    name.clone(),
                    log.clone(),
                    style,
                    job,
                    stop,
                )
            },
            shutdown,
        )
        .await;
}

/// Works for the payload's `ms` and finishes as `style` says. It ignores its stop token on
/// purpose — fencing must hold against a handler that does not listen — but logs when it fired
/// while the handler ran (`stop`, with the wall clock: the checks compare it with the lease's end
/// on the server's, on the same machine).
async fn handle(
    url: String,
    name: String,
    log: Arc<OpLog>,
    style: Handler,
    job: Job,
    stop: CancellationToken,
) -> Outcome {
    let payload: serde_json::Value = serde_json::from_str(&job.payload).unwrap_or_default();
    let record = |kind: &str| {
        json!({
            "kind": kind, "op": payload["op"], "job_id": job.id, "job_key": job.key,
            "lease_token": job.lease_token.to_string(), "attempt_no": job.attempt_no,
            "worker": name, "at": ops::now(),
        })
    };
    let stopped = {
        let (log, stop, mut stopped) = (log.clone(), stop.clone(), record("stop"));
        tokio::spawn(async move {
            stop.cancelled().await;
            stopped["at"] = json!(ops::now());
            log.write(stopped);
        })
    };
    let work = Duration::from_millis(payload["ms"].as_u64().unwrap_or(20));
    let outcome = match style {
        Handler::Mixed if job.id % 2 == 1 => {
            tokio::time::sleep(work).await;
            log.write(record("returned"));
            Outcome::Complete {
                result: Some(json!({"attempt_no": job.attempt_no, "worker": name}).to_string()),
            }
        }
        Handler::Mixed => loop {
            let (outcome, error) = finish(&url, &name, &job, work).await;
            log.write(with_outcome(record("finish"), outcome, error.as_ref()));
            // Nothing was committed: try again (work and all) while the lease is ours.
            if outcome != "error" || stop.is_cancelled() {
                break Outcome::Finished;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        },
        Handler::Transactional => {
            tokio::time::sleep(work).await;
            let (outcome, error) = finish(&url, &name, &job, Duration::ZERO).await;
            log.write(with_outcome(record("finish"), outcome, error.as_ref()));
            Outcome::Finished
        }
    };
    // A token that fired while the handler ran is logged before it returns; one that fires
    // later (the shutdown's) is not the handler's business.
    if stop.is_cancelled() {
        let _ = stopped.await;
    } else {
        stopped.abort();
    }
    outcome
}

fn with_outcome(
    mut record: serde_json::Value,
    outcome: &str,
    error: Option<&leaseq_client::Error>,
) -> serde_json::Value {
    record["outcome"] = json!(outcome);
    record["error"] = json!(error.map(leaseq_client::client::describe));
    record
}

/// Connects, works for `work`, then writes the effect row and completes in one transaction.
/// `ok`: the commit was acknowledged; `refused`: the lease was no longer ours, rolled back;
/// `error`: failed before the commit was sent (nothing committed); `unknown`: the commit was sent
/// and no answer came.
async fn finish(
    url: &str,
    name: &str,
    job: &Job,
    work: Duration,
) -> (&'static str, Option<leaseq_client::Error>) {
    match finish_once(url, name, job, work).await {
        Ok(outcome) => (outcome, None),
        Err((outcome, e)) => (outcome, Some(e)),
    }
}

async fn finish_once(
    url: &str,
    name: &str,
    job: &Job,
    work: Duration,
) -> Result<&'static str, (&'static str, leaseq_client::Error)> {
    let mut client = Client::connect(url).await.map_err(|e| ("error", e))?;
    tokio::time::sleep(work).await;
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

/// What producers enqueue, and how fast.
#[derive(Clone, Copy)]
pub struct Mix {
    /// Each producer's pause between transactions.
    pub pace: Duration,
    /// Jobs work for one to five times this many milliseconds …
    pub short_ms: u64,
    /// … except every `n`th job of a producer, which works for `ms` (long enough to need
    /// renewals); `None`: no long jobs.
    pub long: Option<(u64, u64)>,
}

/// The load of the scenarios on one server or cluster (failover, wal-full, clock), and where its
/// programs are.
#[derive(clap::Args, Clone)]
pub struct LoadArgs {
    /// Producers, each enqueueing one job per transaction.
    #[arg(long, default_value_t = 3)]
    pub producers: usize,
    /// Each producer's pause between transactions, in milliseconds.
    #[arg(long, default_value_t = 20)]
    pub pace_ms: u64,
    /// Library worker processes.
    #[arg(long, default_value_t = 3)]
    pub workers: usize,
    /// The `leaseq` CLI, for `leaseq work`.
    #[arg(long)]
    pub leaseq: std::path::PathBuf,
    /// A Python interpreter with the leaseq client installed, for the Python worker.
    #[arg(long)]
    pub python: std::path::PathBuf,
    /// The OS user that runs the servers (when we are root).
    #[arg(long, env = "LEASEQ_RUN_AS")]
    pub run_as: Option<String>,
}

impl LoadArgs {
    /// The workers: `workers` Rust ones, `leaseq work`, the Python one.
    pub fn start_workers(&self, url: &str, dir: &Path) -> std::io::Result<Workers> {
        Workers::start(url, dir, self.workers, &self.leaseq, &self.python)
    }

    /// The producers, short jobs at `pace_ms`.
    pub fn start_producers(&self, url: &str, dir: &Path) -> std::io::Result<Producers> {
        let mix = Mix {
            pace: Duration::from_millis(self.pace_ms),
            short_ms: 20,
            long: None,
        };
        Producers::start(url, dir, self.producers, mix)
    }
}

/// One producer: a transaction per job, the business row and the job together, each logged.
async fn produce(url: String, n: usize, mix: Mix, log: Arc<OpLog>, stop: CancellationToken) {
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
        let ms = match mix.long {
            Some((every, ms)) if seq.is_multiple_of(every) => ms,
            _ => mix.short_ms * (1 + seq % 5),
        };
        let enqueued = enqueue(c, queue, &op, ms).await;
        enqueued.log(&log, &op, queue);
        if enqueued.error.is_some() && c.pg().is_closed() {
            client = None;
        }
        tokio::time::sleep(mix.pace).await;
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

/// The worker processes of a run: Rust library workers (`w1…`), `cmd1` (a `leaseq work`), and
/// where a scenario starts them, the other clients' Workers (`clients`): `py1` (Python,
/// tools/faults/worker.py), `nd1` (Node, tools/faults/worker.mjs).
pub struct Workers {
    pub library: Vec<(String, Child)>,
    pub command: (String, Child),
    pub clients: Vec<(String, Child)>,
}

/// The other clients' fault workers: the interpreter that runs one, and its program.
pub enum Script {
    Python,
    Node,
}

/// Where a worker process runs: its name, the URL it connects to, and the network namespace it
/// is started in (`None`: ours).
pub struct Placement {
    pub name: String,
    pub url: String,
    pub netns: Option<String>,
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
        let here = |name: String| Placement {
            name,
            url: url.to_string(),
            netns: None,
        };
        let library: Vec<Placement> = (1..=n).map(|n| here(format!("w{n}"))).collect();
        let command = here("cmd1".into());
        let mut workers = Workers::spawn(dir, leaseq, &library, &command, Handler::Transactional)?;
        workers.spawn_script(dir, Script::Python, python, &here("py1".into()))?;
        Ok(workers)
    }

    /// Starts a Python or Node worker (`interpreter`: one with that client installed, or built)
    /// at `at`; its op log goes to `dir/ops`, its stderr to `dir/<name>.log`.
    pub fn spawn_script(
        &mut self,
        dir: &Path,
        script: Script,
        interpreter: &Path,
        at: &Placement,
    ) -> std::io::Result<()> {
        let program = match script {
            Script::Python => concat!(env!("CARGO_MANIFEST_DIR"), "/faults/worker.py"),
            Script::Node => concat!(env!("CARGO_MANIFEST_DIR"), "/faults/worker.mjs"),
        };
        let child = in_netns(at.netns.as_deref(), interpreter)
            .args([program, &at.name])
            .env("DATABASE_URL", &at.url)
            .env("QUEUE", TX_QUEUE)
            .env(
                "OPS_LOG",
                dir.join("ops").join(format!("{}.jsonl", at.name)),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join(format!("{}.log", at.name)))?)
            .kill_on_drop(true)
            .spawn()?;
        self.clients.push((at.name.clone(), child));
        Ok(())
    }

    /// Starts a library worker per `library` placement, with handlers of `style`, and a `leaseq
    /// work` at `command`.
    pub fn spawn(
        dir: &Path,
        leaseq: &Path,
        library: &[Placement],
        command: &Placement,
        style: Handler,
    ) -> std::io::Result<Workers> {
        let logs = dir.join("ops");
        std::fs::create_dir_all(&logs)?;
        let style = style.to_possible_value().expect("no variant is skipped");
        let library = library
            .iter()
            .map(|at| {
                let child = in_netns(at.netns.as_deref(), &std::env::current_exe()?)
                    .args(["worker", "--queue", TX_QUEUE, "--name", &at.name])
                    .args(["--handler", style.get_name(), "--log"])
                    .arg(logs.join(format!("{}.jsonl", at.name)))
                    .env("DATABASE_URL", &at.url)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(std::fs::File::create(dir.join(format!("{}.log", at.name)))?)
                    .kill_on_drop(true)
                    .spawn()?;
                Ok((at.name.clone(), child))
            })
            .collect::<std::io::Result<_>>()?;
        let poll = format!("{}s", POLL.as_secs());
        let child = in_netns(command.netns.as_deref(), leaseq)
            .args(["work", "--queue", CMD_QUEUE, "--concurrency", "2"])
            .args([
                "--worker-id",
                &command.name,
                "--poll",
                &poll,
                "--json-logs",
                // The effect handler writes its business row through the worker's database.
                "--pass-env",
                "DATABASE_URL",
                "--",
            ])
            .arg(std::env::current_exe()?)
            .arg("effect")
            .env("DATABASE_URL", &command.url)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(
                dir.join(format!("{}.log", command.name)),
            )?)
            .kill_on_drop(true)
            .spawn()?;
        Ok(Workers {
            library,
            command: (command.name.clone(), child),
            clients: Vec::new(),
        })
    }

    fn all(&mut self) -> impl Iterator<Item = &mut (String, Child)> {
        let others = std::iter::once(&mut self.command).chain(self.clients.iter_mut());
        self.library.iter_mut().chain(others)
    }

    pub fn names(&self) -> Vec<String> {
        let others = std::iter::once(&self.command).chain(self.clients.iter());
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
    pub fn start(url: &str, dir: &Path, n: usize, mix: Mix) -> std::io::Result<Producers> {
        let logs = dir.join("ops");
        std::fs::create_dir_all(&logs)?;
        let log = Arc::new(OpLog::create(&logs.join("producers.jsonl"))?);
        let stop = CancellationToken::new();
        let tasks = (1..=n)
            .map(|n| tokio::spawn(produce(url.to_string(), n, mix, log.clone(), stop.clone())))
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

/// Producers as a process of their own (a scenario that runs them in another network
/// namespace): enqueue until SIGTERM, then stop after the transaction in flight.
pub async fn producers(url: &str, dir: &Path, n: usize, mix: Mix) -> Result<(), Error> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let producers = Producers::start(url, dir, n, mix)?;
    term.recv().await;
    producers.stop().await
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

/// `program`, started in network namespace `netns` (`ip netns exec`, which execs it: the child's
/// pid is the program's, for signals) or in ours.
pub fn in_netns(netns: Option<&str>, program: &Path) -> Command {
    match netns {
        Some(ns) => {
            let mut command = Command::new("ip");
            command.args(["netns", "exec", ns]).arg(program);
            command
        }
        None => Command::new(program),
    }
}

/// Creates the run's database on the primary: the extension, the `faults` schema, both queues
/// (the library workers' with a lease of `tx_lease`).
pub async fn setup(postgres_url: &str, url: &str, tx_lease: Duration) -> Result<(), Error> {
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
             -- Each fault, numbered in order, when it was over on the server's clock (and when
             -- it began, where a scenario's checks need its window).
             CREATE TABLE faults.faults (n bigint GENERATED ALWAYS AS IDENTITY,
                                         kind text NOT NULL, began_at timestamptz,
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
    admin.queue_create(TX_QUEUE, &settings(tx_lease)).await?;
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

/// The end of a scenario's load: the producers stopped, every job final, a burst of jobs to
/// the idle workers (only a notification wakes them in time), the workers stopped — into `seen`.
pub async fn wind_down(
    url: &str,
    producers: Producers,
    workers: &mut Workers,
    seen: &mut Seen,
    say: &impl Fn(&str),
) -> Result<(), Error> {
    say("stopping the producers; waiting for every job to be final");
    let log = producers.log.clone();
    producers.stop().await?;
    settle(url, Duration::from_secs(180)).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    seen.burst_seconds = burst(url, &log).await?;
    say(&format!(
        "jobs enqueued to idle workers were final after {:.2}s",
        seen.burst_seconds
    ));
    seen.workers_exited = workers.stop().await?;
    Ok(())
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
