//! `leaseq-soak`: an hour of steady load with everything a production queue runs switched on,
//! to show that nothing grows — memory, tables, indexes, dead tuples, latency — and that no job
//! is lost while retention deletes rows all along. `scripts/soak` starts a private cluster
//! whose maintenance worker serves the soak database, runs `leaseq-soak run`, checks the row
//! invariants and plots the samples (docs/soak.md).
//!
//! `run`, in order:
//! 1. One queue, `soak`, keeping finished jobs for `RETAIN` (so the maintenance worker purges
//!    all along), ordered groups of one, and a schedule enqueueing into it every minute. Worker
//!    processes (`leaseq-soak worker`: the library `Worker`) are children of this one, so that
//!    their memory can be read from /proc.
//! 2. The peak: producers enqueue the job mix as fast as they can for `--ramp-seconds` while
//!    the workers drain; the peak is the rate at which jobs reached a final state over the
//!    ramp's last two thirds, read from the jobs' `finished_at` (the workers, not the
//!    producers, may be what limits it: the backlog is drained before the soak starts).
//! 3. The soak: producers enqueue at `--share` of the peak for `--minutes`. Every minute (the
//!    first at the start) a sample goes to `samples.csv`; then, as an operator would, dead jobs
//!    older than a minute are cancelled, so that retention purges them too — without that, dead
//!    jobs (which retention keeps for a redrive) would grow the table by design.
//! 4. The accounting: producers stop, the schedule is removed, the queue settles, retention is
//!    switched off so that the count holds still, and every job enqueued — counted by the
//!    producers, plus the schedule's ticks — must be a row of the queue (in any state) or one
//!    the maintenance worker logged as purged (its log is the only record of rows it deleted).
//! 5. Slopes of every sampled metric after the warm-up, and a verdict, printed and written to
//!    `report.md`. `leaseq-soak report` computes them again from a CSV.
use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use clap::{Parser, Subcommand};
use leaseq_client::client::{EnqueueOptions, QueueSettings, describe};
use leaseq_client::{CancellationToken, Client, Job, Outcome, Worker, WorkerConfig};
use tokio::process::{Child, Command};
use tokio::task::JoinSet;

const QUEUE: &str = "soak";
const SCHEDULE: &str = "soak_tick";
/// How long finished jobs are kept: short, so that purging runs all along.
const RETAIN: Duration = Duration::from_secs(120);
/// Ordered groups the grouped share of the mix is spread over.
const GROUPS: u64 = 16;
/// Dead jobs older than this are cancelled by the sweep (then purged by retention).
const DEAD_KEPT: &str = "1 minute";
/// A slope counts as growth when it exceeds this share of the metric's mean per hour (and
/// its 95 % interval excludes zero).
const GROWTH_PER_HOUR: f64 = 0.10;

#[derive(Parser)]
#[command(
    name = "leaseq-soak",
    about = "leaseq at a steady half of its peak for an hour: memory, sizes, latency, nothing lost"
)]
struct Cli {
    #[command(subcommand)]
    command: Mode,
}

#[derive(Subcommand)]
enum Mode {
    /// The peak, then the soak at a share of it, then the accounting and the slopes.
    Run(RunArgs),
    /// One worker process (started by `run`): the library `Worker` on the soak queue.
    Worker {
        #[arg(long, default_value_t = 16)]
        concurrency: usize,
        #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
        database_url: String,
    },
    /// The slopes and verdicts of a samples CSV written by `run`.
    Report {
        csv: PathBuf,
        #[arg(long, default_value_t = 5)]
        warmup_minutes: u32,
    },
}

#[derive(clap::Args)]
struct RunArgs {
    #[arg(long, default_value_t = 60)]
    minutes: u32,
    /// Minutes left out of the slopes: caches, shared buffers and the retained window fill up.
    #[arg(long, default_value_t = 5)]
    warmup_minutes: u32,
    #[arg(long, default_value_t = 30)]
    ramp_seconds: u64,
    /// The soak's rate as a share of the measured peak.
    #[arg(long, default_value_t = 0.5)]
    share: f64,
    #[arg(long, default_value_t = 4)]
    producers: usize,
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Slots of each worker process.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// The cluster's data directory (its postmaster.pid names the server's processes).
    #[arg(long)]
    pgdata: PathBuf,
    /// The server's log, where the maintenance worker logs each purge.
    #[arg(long)]
    server_log: PathBuf,
    /// samples.csv, report.md and the workers' logs go here.
    #[arg(long)]
    out: PathBuf,
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: String,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let code = match Cli::parse().command {
        Mode::Worker {
            concurrency,
            database_url,
        } => {
            work(&database_url, concurrency).await;
            0
        }
        Mode::Report {
            csv,
            warmup_minutes,
        } => match read_csv(&csv) {
            Ok((names, rows)) => {
                print!("{}", slope_table(&names, &rows, warmup_minutes).0);
                0
            }
            Err(e) => {
                eprintln!("leaseq-soak: {e}");
                2
            }
        },
        Mode::Run(args) => match run(args).await {
            Ok(true) => 0,
            Ok(false) => 1,
            Err(e) => {
                eprintln!("leaseq-soak: {e}");
                2
            }
        },
    };
    std::process::exit(code);
}

// ---------------------------------------------------------------------------------------------
// The job mix.

/// What a job asks its handler to do; the producers pick it from the job's sequence number, so
/// that the shares are exact.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    /// Completes at its first attempt (80 %).
    Plain,
    /// Fails, retried with the queue's backoff, once or twice, then completes (8 %).
    Transient,
    /// Fails without retry: dead (2 %).
    Permanent,
    /// Snoozes a second at its first attempt, then completes (5 %).
    Snooze,
    /// Completes, in one of `GROUPS` ordered groups (5 %).
    Grouped,
}

fn kind_of(seq: u64) -> Kind {
    match seq % 100 {
        0..80 => Kind::Plain,
        80..88 => Kind::Transient,
        88..90 => Kind::Permanent,
        90..95 => Kind::Snooze,
        _ => Kind::Grouped,
    }
}

/// The payload and the options of job `seq`. `ms` is the handler's work: 0–2 ms, so that slots
/// are held for a while, as real handlers hold them.
fn job_of(seq: u64) -> (String, EnqueueOptions) {
    let ms = seq % 3;
    let mut options = EnqueueOptions::default();
    let payload = match kind_of(seq) {
        Kind::Plain => format!(r#"{{"seq": {seq}, "kind": "plain", "ms": {ms}}}"#),
        Kind::Transient => {
            let fails = 1 + seq % 2;
            format!(r#"{{"seq": {seq}, "kind": "transient", "fails": {fails}, "ms": {ms}}}"#)
        }
        Kind::Permanent => format!(r#"{{"seq": {seq}, "kind": "permanent", "ms": {ms}}}"#),
        Kind::Snooze => format!(r#"{{"seq": {seq}, "kind": "snooze", "ms": {ms}}}"#),
        Kind::Grouped => {
            options.group_key = Some(format!("g{}", seq % GROUPS));
            format!(r#"{{"seq": {seq}, "kind": "grouped", "ms": {ms}}}"#)
        }
    };
    (payload, options)
}

fn queue_settings(retain: Option<Duration>) -> QueueSettings {
    QueueSettings {
        lease: Some(Duration::from_secs(30)),
        max_attempts: Some(5),
        // Short, so that retried jobs come back within seconds and the settling at the end is
        // quick; the maintenance worker wakes the workers when they come due.
        backoff_base: Some(Duration::from_millis(200)),
        backoff_cap: Some(Duration::from_secs(2)),
        retain,
        max_snoozes: None,
        group_concurrency: Some(1),
    }
}

// ---------------------------------------------------------------------------------------------
// A worker process.

async fn work(url: &str, concurrency: usize) {
    let mut config = WorkerConfig::new(QUEUE);
    config.concurrency = concurrency;
    config.grace = Duration::from_secs(5);
    let shutdown = CancellationToken::new();
    let on_term = shutdown.clone();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::spawn(async move {
        term.recv().await;
        on_term.cancel();
    });
    if let Err(e) = Worker::new(url, config)
        .run(|job, _stop| handle(job), shutdown)
        .await
    {
        eprintln!("leaseq-soak worker: {}", describe(&e));
        std::process::exit(1);
    }
}

/// Does what the payload's kind asks; the attempt number tells a first attempt from a retry
/// (a snooze closes its attempt too, so the snoozed job's next claim is attempt 2).
async fn handle(job: Job) -> Outcome {
    let payload: serde_json::Value =
        serde_json::from_str(&job.payload).expect("payloads are JSON objects");
    let ms = payload["ms"].as_u64().unwrap_or(0);
    if ms > 0 {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let attempt = i64::from(job.attempt_no);
    match payload["kind"].as_str() {
        Some("transient") if attempt <= payload["fails"].as_i64().unwrap_or(1) => Outcome::Fail {
            error: Some(r#"{"error": "transient"}"#.into()),
            retry: true,
            retry_in: None,
        },
        Some("permanent") => Outcome::Fail {
            error: Some(r#"{"error": "permanent"}"#.into()),
            retry: false,
            retry_in: None,
        },
        Some("snooze") if attempt == 1 => Outcome::Snooze {
            delay: Duration::from_secs(1),
        },
        _ => Outcome::Complete { result: None },
    }
}

// ---------------------------------------------------------------------------------------------
// Producers.

/// What the producers did, shared with the sampler.
#[derive(Default)]
struct Produced {
    /// Sequence numbers handed out: the next job's.
    next_seq: AtomicU64,
    /// Enqueues the server answered with an id.
    enqueued: AtomicU64,
    /// Enqueues that failed without an answer: committed or not, nobody knows.
    uncertain: AtomicU64,
    /// Each answered enqueue's call time, µs, since the sampler last took them.
    call_us: Mutex<Vec<u32>>,
}

/// One producer: single `queue_enqueue` calls on a connection of its own, at `rate` jobs/s
/// (as fast as it can without one) until `stop`.
async fn produce(url: String, rate: Option<f64>, produced: Arc<Produced>, stop: CancellationToken) {
    let mut client: Option<Client> = None;
    let period = rate.map(|r| Duration::from_secs_f64(1.0 / r));
    let mut next = tokio::time::Instant::now();
    while !stop.is_cancelled() {
        if let Some(period) = period {
            next += period;
            let now = tokio::time::Instant::now();
            // Behind by more than a second (a stall of the machine): start afresh rather than
            // send the missed jobs in one burst.
            if next + Duration::from_secs(1) < now {
                next = now;
            }
            tokio::select! {
                _ = tokio::time::sleep_until(next) => {}
                _ = stop.cancelled() => break,
            }
        }
        let Some(c) = client.as_ref().filter(|c| !c.is_closed()) else {
            match Client::connect(&url).await {
                Ok(c) => client = Some(c),
                Err(e) => {
                    eprintln!("leaseq-soak producer: {}", describe(&e));
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
            continue;
        };
        let seq = produced.next_seq.fetch_add(1, Ordering::Relaxed);
        let (payload, options) = job_of(seq);
        let called = Instant::now();
        match c.enqueue(QUEUE, &payload, &options).await {
            Ok(_) => {
                let us = called.elapsed().as_micros().min(u128::from(u32::MAX)) as u32;
                produced.enqueued.fetch_add(1, Ordering::Relaxed);
                produced.call_us.lock().expect("call times").push(us);
            }
            Err(e) => {
                produced.uncertain.fetch_add(1, Ordering::Relaxed);
                eprintln!("leaseq-soak producer: {}", describe(&e));
            }
        }
    }
}

fn start_producers(
    url: &str,
    n: usize,
    rate: Option<f64>,
    produced: &Arc<Produced>,
) -> (JoinSet<()>, CancellationToken) {
    let stop = CancellationToken::new();
    let mut set = JoinSet::new();
    for _ in 0..n {
        set.spawn(produce(
            url.to_string(),
            rate.map(|r| r / n as f64),
            produced.clone(),
            stop.clone(),
        ));
    }
    (set, stop)
}

async fn stop_producers(mut set: JoinSet<()>, stop: CancellationToken) {
    stop.cancel();
    while set.join_next().await.is_some() {}
}

// ---------------------------------------------------------------------------------------------
// The run.

async fn run(args: RunArgs) -> Result<bool, String> {
    let db = |e: leaseq_client::Error| describe(&e);
    fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
    let mut client = Client::connect(&args.database_url).await.map_err(db)?;
    client
        .queue_create(QUEUE, &queue_settings(Some(RETAIN)))
        .await
        .map_err(db)?;
    // catch_up: a tick materialised late (by a claim or the maintenance worker) is enqueued all
    // the same, so that the ticks
    // enqueued are exactly the minutes from the first tick to the schedule's last next_at.
    let first_tick = client
        .schedule(
            SCHEDULE,
            QUEUE,
            "* * * * *",
            r#"{"kind": "tick"}"#,
            "UTC",
            true,
        )
        .await
        .map_err(db)?
        .timestamp_micros();
    let mut workers = Vec::new();
    for i in 0..args.workers {
        workers.push(spawn_worker(&args, i)?);
    }
    let produced = Arc::new(Produced::default());

    // The peak.
    say(&format!(
        "ramp: {} producers as fast as they can, {} worker processes × {} slots, {} s",
        args.producers, args.workers, args.concurrency, args.ramp_seconds
    ));
    let (set, stop) = start_producers(&args.database_url, args.producers, None, &produced);
    let ramp = Duration::from_secs(args.ramp_seconds);
    tokio::time::sleep(ramp / 3).await;
    let (from, enqueued_from) = (
        db_now(&client).await?,
        produced.enqueued.load(Ordering::Relaxed),
    );
    let measured = Instant::now();
    tokio::time::sleep(ramp - ramp / 3).await;
    let to = db_now(&client).await?;
    let enqueue_rate = (produced.enqueued.load(Ordering::Relaxed) - enqueued_from) as f64
        / measured.elapsed().as_secs_f64();
    stop_producers(set, stop).await;
    let finished: i64 = client
        .raw()
        .query_one(FINISHED_BETWEEN, &[&QUEUE, &from, &to])
        .await
        .map_err(db)?
        .get(0);
    let window = to.duration_since(from).unwrap_or_default().as_secs_f64();
    let peak = finished as f64 / window;
    let rate = peak * args.share;
    say(&format!(
        "peak: {peak:.0} jobs/s reached a final state ({enqueue_rate:.0} enqueued/s); the soak runs at {:.0} % of it: {rate:.0} jobs/s",
        args.share * 100.0
    ));
    say("draining the ramp's backlog");
    let left = settle(&client, Duration::from_secs(600)).await?;
    if left > 0 {
        return Err(format!(
            "{left} jobs still live 10 minutes after the ramp: the workers cannot keep up"
        ));
    }

    // The soak.
    say(&format!(
        "soak: {rate:.0} jobs/s for {} minutes, a sample every minute",
        args.minutes
    ));
    let csv_path = args.out.join("samples.csv");
    let mut csv = Csv::create(&csv_path)?;
    let mut sampler = Sampler::new(&args, &workers, produced.clone(), &client).await?;
    let (set, stop) = start_producers(&args.database_url, args.producers, Some(rate), &produced);
    let started = tokio::time::Instant::now();
    let mut cancelled_dead = 0;
    for minute in 0..=args.minutes {
        tokio::time::sleep_until(started + Duration::from_secs(60 * u64::from(minute))).await;
        let sample = sampler.sample(&client, minute).await?;
        println!("{}", summary_line(&sample));
        csv.write(&sample)?;
        cancelled_dead += sweep_dead(&client).await?;
    }
    stop_producers(set, stop).await;

    // The accounting.
    let next_tick = stop_ticks(&mut client).await?;
    say("producers and schedule stopped; waiting for the queue to settle");
    let left = settle(&client, Duration::from_secs(300)).await?;
    if left > 0 {
        say(&format!(
            "{left} jobs still live after 5 minutes (counted as claimable)"
        ));
    }
    // Retention off: the purges stop, so the rows and the log can be read at one moment.
    client
        .queue_create(QUEUE, &queue_settings(None))
        .await
        .map_err(db)?;
    let ticks = (next_tick - first_tick) / 60_000_000;
    let accounting = account(&mut client, &args.server_log, ticks, &produced).await?;
    for mut worker in workers {
        stop_child(&mut worker).await;
    }

    let (names, rows) = read_csv(&csv_path)?;
    let (table, flat) = slope_table(&names, &rows, args.warmup_minutes);
    let mut report = String::new();
    let _ = writeln!(
        report,
        "peak {peak:.0} jobs/s ({enqueue_rate:.0} enqueued/s during the ramp); soak at {:.0} %: {rate:.0} jobs/s for {} minutes; {cancelled_dead} dead jobs cancelled by the sweep\n",
        args.share * 100.0,
        args.minutes
    );
    report.push_str(&table);
    report.push('\n');
    report.push_str(&accounting.text);
    print!("\n{report}");
    fs::write(args.out.join("report.md"), &report)
        .map_err(|e| format!("{}: {e}", args.out.join("report.md").display()))?;
    Ok(flat && accounting.balanced)
}

fn say(text: &str) {
    println!("==> {text}");
}

const DB_NOW: &str = "SELECT clock_timestamp()";

async fn db_now(client: &Client) -> Result<SystemTime, String> {
    client
        .raw()
        .query_one(DB_NOW, &[])
        .await
        .map(|row| row.get(0))
        .map_err(|e| describe(&e))
}

/// Jobs of `$1` that reached a final state in `[$2, $3)`.
const FINISHED_BETWEEN: &str = "SELECT count(*) FROM leaseq.jobs AS job
                                  WHERE job.queue = $1
                                    AND job.finished_at >= $2 AND job.finished_at < $3";

/// The queue's jobs that are not final: pending (due or not), running or waiting.
const LIVE: &str = "SELECT count(*) FROM leaseq.jobs AS job
                     WHERE job.queue = $1 AND job.finished_at IS NULL";

/// Waits up to `limit` for every job of the queue to be final; returns how many are not.
async fn settle(client: &Client, limit: Duration) -> Result<i64, String> {
    let until = Instant::now() + limit;
    loop {
        let live: i64 = client
            .raw()
            .query_one(LIVE, &[&QUEUE])
            .await
            .map_err(|e| describe(&e))?
            .get(0);
        if live == 0 || Instant::now() > until {
            return Ok(live);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Dead jobs finished more than `DEAD_KEPT` ago, cancelled through the API an operator uses
/// (`queue_jobs`, `queue_cancel_batch`): how many.
const SWEEP_DEAD: &str = "SELECT count(*) FROM leaseq.queue_cancel_batch(ARRAY(
                              SELECT dead.job_id
                                FROM leaseq.queue_jobs($1, status => 'dead', max_rows => 10000)
                                     AS dead
                               WHERE dead.finished_at < clock_timestamp() - $2::text::interval))
                                     AS cancel(done)
                           WHERE cancel.done";

async fn sweep_dead(client: &Client) -> Result<i64, String> {
    client
        .raw()
        .query_one(SWEEP_DEAD, &[&QUEUE, &DEAD_KEPT])
        .await
        .map(|row| row.get(0))
        .map_err(|e| describe(&e))
}

fn spawn_worker(args: &RunArgs, i: usize) -> Result<Child, String> {
    let log_path = args.out.join(format!("worker-{i}.log"));
    let log = fs::File::create(&log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
    let exe = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
    Command::new(exe)
        .args(["worker", "--concurrency", &args.concurrency.to_string()])
        .env("DATABASE_URL", &args.database_url)
        .stdout(Stdio::from(
            log.try_clone().map_err(|e| format!("worker log: {e}"))?,
        ))
        .stderr(Stdio::from(log))
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("starting worker {i}: {e}"))
}

/// SIGTERM, then the worker's own grace to finish, then SIGKILL.
async fn stop_child(child: &mut Child) {
    if let Some(pid) = child.id() {
        // SAFETY: signals our own child, which has not been reaped (its id is still known).
        unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    }
    if tokio::time::timeout(Duration::from_secs(15), child.wait())
        .await
        .is_err()
    {
        let _ = child.kill().await;
    }
}

// ---------------------------------------------------------------------------------------------
// The accounting.

struct Accounting {
    /// Every job enqueued is a row or was purged, and no row is unexplained.
    balanced: bool,
    text: String,
}

/// The schedule's next tick, locked: a tick being enqueued commits first (and moves it).
const NEXT_TICK: &str = "SELECT schedule.next_at FROM leaseq.schedules AS schedule
                          WHERE schedule.name = $1
                            FOR UPDATE";
const UNSCHEDULE: &str = "SELECT leaseq.queue_unschedule($1)";

/// Removes the schedule, returning its next tick (µs since 1970) as it was removed: every tick
/// before it was enqueued, none after. One transaction, so no tick falls between the two.
async fn stop_ticks(client: &mut Client) -> Result<i64, String> {
    let db = |e: leaseq_client::Error| describe(&e);
    let tx = client.pg().transaction().await.map_err(db)?;
    let next_tick: SystemTime = tx
        .query_one(NEXT_TICK, &[&SCHEDULE])
        .await
        .map_err(db)?
        .get(0);
    tx.execute(UNSCHEDULE, &[&SCHEDULE]).await.map_err(db)?;
    tx.commit().await.map_err(db)?;
    Ok(next_tick
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("ticks after 1970")
        .as_micros() as i64)
}

/// The queue's rows by status.
const ROWS_BY_STATUS: &str = "SELECT job.status::text, count(*) FROM leaseq.jobs AS job
                               WHERE job.queue = $1
                               GROUP BY job.status ORDER BY job.status";

/// Every job enqueued is a row of the queue or was purged. Enqueued: what the producers got an
/// id for (plus those whose call failed unanswered: they may or may not exist), and the
/// schedule's `ticks`. Purged: the maintenance worker's log lines, read before and after the
/// rows until both readings agree, so that no purge falls between them. Nothing enqueues any
/// more: the producers and the schedule are stopped.
async fn account(
    client: &mut Client,
    server_log: &Path,
    ticks: i64,
    produced: &Produced,
) -> Result<Accounting, String> {
    let db = |e: leaseq_client::Error| describe(&e);
    let (rows, purged) = loop {
        // A purge already under way when retention went off finishes within its tick.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let before = purged_in_log(server_log)?;
        let rows: Vec<(String, i64)> = client
            .raw()
            .query(ROWS_BY_STATUS, &[&QUEUE])
            .await
            .map_err(db)?
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect();
        tokio::time::sleep(Duration::from_secs(2)).await;
        if purged_in_log(server_log)? == before {
            break (rows, before);
        }
    };
    let enqueued = produced.enqueued.load(Ordering::Relaxed) as i64;
    let uncertain = produced.uncertain.load(Ordering::Relaxed) as i64;
    let in_rows: i64 = rows.iter().map(|(_, n)| n).sum();
    let counter = enqueued_counter(client).await?;
    // More rows than answered enqueues is no loss as long as the unanswered calls explain them.
    let surplus = in_rows + purged - (enqueued + ticks);
    let balanced = (0..=uncertain).contains(&surplus);
    let mut text = String::new();
    let _ = writeln!(text, "| jobs | count |\n|---|---:|");
    let _ = writeln!(
        text,
        "| enqueued by the producers (answered) | {enqueued} |"
    );
    let _ = writeln!(
        text,
        "| enqueued by the producers (unanswered calls) | {uncertain} |"
    );
    let _ = writeln!(text, "| enqueued by the schedule (ticks) | {ticks} |");
    for (status, n) in &rows {
        let _ = writeln!(text, "| rows now `{status}` | {n} |");
    }
    let _ = writeln!(text, "| purged by retention (server log) | {purged} |");
    let _ = writeln!(
        text,
        "| **lost** (enqueued − rows − purged) | **{}** |",
        (-surplus).max(0)
    );
    if surplus > uncertain {
        let _ = writeln!(
            text,
            "\n{surplus} rows more than were enqueued, with {uncertain} calls unanswered"
        );
    }
    let _ = writeln!(
        text,
        "\n`leaseq_enqueued_total` of the queue (shared memory, since the server started): {}; \
         answered enqueues + ticks: {}",
        counter.map_or("not reported".into(), |n| n.to_string()),
        enqueued + ticks
    );
    Ok(Accounting { balanced, text })
}

/// The jobs of the queue the maintenance worker logged as purged (src/admin/maintenance.rs:
/// `purged N finished job(s) of queue "soak"`).
fn purged_in_log(path: &Path) -> Result<i64, String> {
    let log = fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let marker = format!(" finished job(s) of queue \"{QUEUE}\"");
    Ok(log
        .lines()
        .filter(|line| line.contains(&marker))
        .filter_map(|line| {
            let (head, _) = line.split_once(&marker)?;
            head.rsplit_once("leaseq maintenance: purged ")?
                .1
                .parse::<i64>()
                .ok()
        })
        .sum())
}

/// `leaseq_enqueued_total` of the queue, from `metrics()`.
async fn enqueued_counter(client: &Client) -> Result<Option<i64>, String> {
    let text = client.metrics().await.map_err(|e| describe(&e))?;
    let name = format!("leaseq_enqueued_total{{queue=\"{QUEUE}\"}} ");
    Ok(text
        .lines()
        .find_map(|line| line.strip_prefix(&name)?.trim().parse().ok()))
}

// ---------------------------------------------------------------------------------------------
// Samples.

/// One sample: metric names and values, in a fixed order (the CSV's columns).
type Sample = Vec<(String, Option<f64>)>;

struct Sampler {
    postmaster: u32,
    workers: Vec<u32>,
    produced: Arc<Produced>,
    /// The server's clock at the last sample, and the producers' count then.
    last: (SystemTime, u64),
}

/// The window's jobs that succeeded or went dead (not the cancelled: the sweep cancels dead jobs
/// counted in an earlier window), and latency: enqueue to completion on the server's clock
/// (`finished_at − created_at`) of the jobs that succeeded at their first attempt without a
/// snooze or a group (plain jobs and ticks) — the others wait out a backoff, a snooze or their
/// group's order by design. Also the jobs live now, and the dead ones.
const JOBS_SAMPLE: &str = "SELECT count(*) FILTER (WHERE job.in_window
                                                    AND job.status <> 'cancelled'),
                                  percentile_cont(0.5) WITHIN GROUP (ORDER BY job.latency_ms)
                                      FILTER (WHERE job.in_window AND job.straight),
                                  percentile_cont(0.99) WITHIN GROUP (ORDER BY job.latency_ms)
                                      FILTER (WHERE job.in_window AND job.straight),
                                  count(*) FILTER (WHERE job.finished_at IS NULL),
                                  count(*) FILTER (WHERE job.status = 'dead')
                             FROM (SELECT job.finished_at, job.status,
                                          job.finished_at >= $2 AND job.finished_at < $3
                                              AS in_window,
                                          job.status = 'succeeded' AND job.attempts = 1
                                              AND job.snoozes = 0 AND job.group_key IS NULL
                                              AS straight,
                                          extract(epoch FROM job.finished_at - job.created_at)::float8
                                              * 1000 AS latency_ms
                                     FROM leaseq.jobs AS job
                                    WHERE job.queue = $1) AS job";

/// Every table of the extension: its heap (with TOAST and maps), its indexes together, its
/// dead and live tuples as the statistics last counted them.
const TABLES_SAMPLE: &str = "SELECT t.relname::text, pg_table_size(t.relid),
                                    pg_indexes_size(t.relid), t.n_dead_tup, t.n_live_tup
                               FROM pg_stat_user_tables AS t
                              WHERE t.schemaname = 'leaseq'
                              ORDER BY t.relname";

const INDEXES_SAMPLE: &str = "SELECT i.indexrelname::text, pg_relation_size(i.indexrelid)
                                FROM pg_stat_user_indexes AS i
                               WHERE i.schemaname = 'leaseq'
                               ORDER BY i.indexrelname";

impl Sampler {
    async fn new(
        args: &RunArgs,
        workers: &[Child],
        produced: Arc<Produced>,
        client: &Client,
    ) -> Result<Sampler, String> {
        let pidfile = args.pgdata.join("postmaster.pid");
        let postmaster = fs::read_to_string(&pidfile)
            .map_err(|e| format!("{}: {e}", pidfile.display()))?
            .lines()
            .next()
            .and_then(|line| line.trim().parse().ok())
            .ok_or_else(|| format!("{}: no pid on its first line", pidfile.display()))?;
        let workers = workers.iter().filter_map(Child::id).collect();
        let last = (
            db_now(client).await?,
            produced.enqueued.load(Ordering::Relaxed),
        );
        Ok(Sampler {
            postmaster,
            workers,
            produced,
            last,
        })
    }

    async fn sample(&mut self, client: &Client, minute: u32) -> Result<Sample, String> {
        let db = |e: leaseq_client::Error| describe(&e);
        let now = db_now(client).await?;
        let enqueued = self.produced.enqueued.load(Ordering::Relaxed);
        let window = now
            .duration_since(self.last.0)
            .unwrap_or_default()
            .as_secs_f64();
        let mut calls = std::mem::take(&mut *self.produced.call_us.lock().expect("call times"));
        let jobs = client
            .raw()
            .query_one(JOBS_SAMPLE, &[&QUEUE, &self.last.0, &now])
            .await
            .map_err(db)?;
        // The first sample has no window behind it: its rates and latencies are left empty.
        let rate = |n: f64| (minute > 0 && window > 0.0).then(|| n / window);
        let mut sample: Sample = vec![
            ("minute".into(), Some(f64::from(minute))),
            ("jobs_per_s".into(), rate(jobs.get::<_, i64>(0) as f64)),
            (
                "enqueued_per_s".into(),
                rate((enqueued - self.last.1) as f64),
            ),
            (
                "latency_p50_ms".into(),
                jobs.get::<_, Option<f64>>(1).filter(|_| minute > 0),
            ),
            (
                "latency_p99_ms".into(),
                jobs.get::<_, Option<f64>>(2).filter(|_| minute > 0),
            ),
            (
                "enqueue_call_p50_ms".into(),
                percentile(&mut calls, 0.5).filter(|_| minute > 0),
            ),
            (
                "enqueue_call_p99_ms".into(),
                percentile(&mut calls, 0.99).filter(|_| minute > 0),
            ),
            ("live_jobs".into(), Some(jobs.get::<_, i64>(3) as f64)),
            ("dead_jobs".into(), Some(jobs.get::<_, i64>(4) as f64)),
        ];
        self.last = (now, enqueued);

        let server: Vec<Memory> = server_pids(self.postmaster)
            .into_iter()
            .filter_map(memory)
            .collect();
        let kb = |v: u64| Some(v as f64);
        sample.extend([
            ("server.processes".into(), Some(server.len() as f64)),
            (
                "server.pss_sum_kb".into(),
                kb(server.iter().map(|m| m.pss_kb).sum()),
            ),
            (
                "server.rss_sum_kb".into(),
                kb(server.iter().map(|m| m.rss_kb).sum()),
            ),
            (
                "server.rss_max_kb".into(),
                kb(server.iter().map(|m| m.rss_kb).max().unwrap_or(0)),
            ),
            (
                "server.private_sum_kb".into(),
                kb(server.iter().map(|m| m.private_kb).sum()),
            ),
            (
                "server.private_max_kb".into(),
                kb(server.iter().map(|m| m.private_kb).max().unwrap_or(0)),
            ),
        ]);
        let workers: Vec<Memory> = self.workers.iter().copied().filter_map(memory).collect();
        sample.extend([
            (
                "workers.rss_sum_kb".into(),
                kb(workers.iter().map(|m| m.rss_kb).sum()),
            ),
            (
                "workers.rss_max_kb".into(),
                kb(workers.iter().map(|m| m.rss_kb).max().unwrap_or(0)),
            ),
            (
                "driver.rss_kb".into(),
                memory(std::process::id()).map(|m| m.rss_kb as f64),
            ),
        ]);

        for row in client.raw().query(TABLES_SAMPLE, &[]).await.map_err(db)? {
            let name: String = row.get(0);
            sample.extend([
                (
                    format!("{name}.table_kb"),
                    Some(row.get::<_, i64>(1) as f64 / 1024.0),
                ),
                (
                    format!("{name}.indexes_kb"),
                    Some(row.get::<_, i64>(2) as f64 / 1024.0),
                ),
                (
                    format!("{name}.dead_tuples"),
                    Some(row.get::<_, i64>(3) as f64),
                ),
                (
                    format!("{name}.live_tuples"),
                    Some(row.get::<_, i64>(4) as f64),
                ),
            ]);
        }
        for row in client.raw().query(INDEXES_SAMPLE, &[]).await.map_err(db)? {
            let name: String = row.get(0);
            sample.push((
                format!("{name}.index_kb"),
                Some(row.get::<_, i64>(1) as f64 / 1024.0),
            ));
        }
        Ok(sample)
    }
}

/// Nearest rank, in ms, of call times in µs.
fn percentile(values: &mut [u32], q: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable();
    let rank = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
    Some(f64::from(values[rank - 1]) / 1000.0)
}

fn summary_line(sample: &Sample) -> String {
    let get = |name: &str| {
        sample
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| *v)
            .map_or("-".to_string(), |v| format!("{v:.1}"))
    };
    format!(
        "minute {:>3.0}: {} jobs/s, latency p50 {} ms p99 {} ms, live {}, server PSS {} kB, \
         workers RSS {} kB, jobs {} kB + {} kB indexes, {} dead tuples",
        sample[0].1.unwrap_or(0.0),
        get("jobs_per_s"),
        get("latency_p50_ms"),
        get("latency_p99_ms"),
        get("live_jobs"),
        get("server.pss_sum_kb"),
        get("workers.rss_sum_kb"),
        get("jobs.table_kb"),
        get("jobs.indexes_kb"),
        get("jobs.dead_tuples"),
    )
}

/// A process's memory from /proc/<pid>/smaps_rollup, kB. RSS counts every page it maps that
/// is resident, shared ones in full (a backend's share of shared_buffers grows with what it
/// touched); PSS divides each shared page among its mappers, so that the server's sum counts
/// shared_buffers once; private is what no other process maps (a leak shows there).
struct Memory {
    rss_kb: u64,
    pss_kb: u64,
    private_kb: u64,
}

fn memory(pid: u32) -> Option<Memory> {
    let text = fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    let field = |name: &str| -> u64 {
        text.lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kb| kb.parse().ok())
            .unwrap_or(0)
    };
    Some(Memory {
        rss_kb: field("Rss:"),
        pss_kb: field("Pss:"),
        private_kb: field("Private_Clean:") + field("Private_Dirty:"),
    })
}

/// The postmaster and its children (backends, background workers, autovacuum, the checkpointer…).
fn server_pids(postmaster: u32) -> Vec<u32> {
    let mut pids = vec![postmaster];
    let Ok(entries) = fs::read_dir("/proc") else {
        return pids;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        // The parent is the second field after the command, which is in parentheses and may
        // hold spaces and parentheses itself.
        let parent = fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| {
                let (_, rest) = stat.rsplit_once(')')?;
                rest.split_whitespace().nth(1)?.parse::<u32>().ok()
            });
        if parent == Some(postmaster) {
            pids.push(pid);
        }
    }
    pids
}

struct Csv {
    file: fs::File,
    path: PathBuf,
    columns: Option<Vec<String>>,
}

impl Csv {
    fn create(path: &Path) -> Result<Csv, String> {
        Ok(Csv {
            file: fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?,
            path: path.to_path_buf(),
            columns: None,
        })
    }

    /// The first sample's names are the columns; a later sample's values are put under them by
    /// name (empty where it has none).
    fn write(&mut self, sample: &Sample) -> Result<(), String> {
        use std::io::Write as _;
        let mut text = String::new();
        let columns = self.columns.get_or_insert_with(|| {
            let names: Vec<String> = sample.iter().map(|(n, _)| n.clone()).collect();
            text.push_str(&names.join(","));
            text.push('\n');
            names
        });
        let values: HashMap<&str, Option<f64>> =
            sample.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        let row: Vec<String> = columns
            .iter()
            .map(|c| {
                values
                    .get(c.as_str())
                    .copied()
                    .flatten()
                    .map_or(String::new(), |v| format!("{v}"))
            })
            .collect();
        text.push_str(&row.join(","));
        text.push('\n');
        self.file
            .write_all(text.as_bytes())
            .and_then(|()| self.file.flush())
            .map_err(|e| format!("{}: {e}", self.path.display()))
    }
}

/// A CSV's values, row by row in column order; `None` where empty.
type Rows = Vec<Vec<Option<f64>>>;

fn read_csv(path: &Path) -> Result<(Vec<String>, Rows), String> {
    let text = fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut lines = text.lines();
    let names: Vec<String> = lines
        .next()
        .ok_or_else(|| format!("{}: empty", path.display()))?
        .split(',')
        .map(str::to_string)
        .collect();
    let rows = lines
        .map(|line| line.split(',').map(|v| v.parse().ok()).collect())
        .collect();
    Ok((names, rows))
}

// ---------------------------------------------------------------------------------------------
// Slopes.

struct Fit {
    mean: f64,
    /// Least squares, per hour.
    slope_h: f64,
    /// Half the 95 % interval of the slope, per hour (two standard errors).
    margin_h: f64,
}

/// Least squares of `(minute, value)` points.
fn fit(points: &[(f64, f64)]) -> Option<Fit> {
    let n = points.len() as f64;
    if points.len() < 3 {
        return None;
    }
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean)).sum();
    let slope = sxy / sxx;
    let sse: f64 = points
        .iter()
        .map(|p| (p.1 - (mean + slope * (p.0 - mean_x))).powi(2))
        .sum();
    let se = (sse / (n - 2.0) / sxx).sqrt();
    Some(Fit {
        mean,
        slope_h: slope * 60.0,
        margin_h: 2.0 * se * 60.0,
    })
}

/// Growing (or shrinking) when the slope exceeds `GROWTH_PER_HOUR` of the mean per hour and
/// its 95 % interval excludes zero: a steady trend, not the noise of a sawtooth.
fn verdict(fit: &Fit) -> &'static str {
    let relative = if fit.mean.abs() > 0.0 {
        fit.slope_h / fit.mean.abs()
    } else {
        0.0
    };
    if relative > GROWTH_PER_HOUR && fit.slope_h - fit.margin_h > 0.0 {
        "growing"
    } else if relative < -GROWTH_PER_HOUR && fit.slope_h + fit.margin_h < 0.0 {
        "shrinking"
    } else {
        "flat"
    }
}

/// The verdict over every minute after the warm-up, checked against the second half of them
/// (`late`): a metric that grew while a slow part of the warm-up finished (an index reaching the
/// size of the retained window) and then held still has "levelled off"; one that still grows
/// over the second half is growing — unless it changed at one or two of the second half's
/// samples only: a page-sized step (a free space map made, an index page split) is not a trend
/// an hour can tell, and is called "stepped".
fn trend(all: &Fit, late: &[(f64, f64)]) -> &'static str {
    let changes = late.windows(2).filter(|w| w[1].1 != w[0].1).count();
    match (verdict(all), fit(late).as_ref().map(verdict)) {
        ("flat", _) => "flat",
        (whole, Some(late)) if late == whole && changes <= 2 => "stepped",
        (whole, Some(late)) if late == whole => whole,
        (_, Some(_)) => "levelled off",
        (whole, None) => whole,
    }
}

fn relative(fit: &Fit) -> String {
    if fit.mean != 0.0 {
        format!("{:+.1} %", 100.0 * fit.slope_h / fit.mean.abs())
    } else {
        String::new()
    }
}

/// The Markdown table of every metric's slope over minutes ≥ `warmup` and over their second
/// half, and whether all are flat (or levelled off, or stepped). Metrics that did not move at all are
/// named in one line below it.
fn slope_table(names: &[String], rows: &Rows, warmup: u32) -> (String, bool) {
    let minute = names.iter().position(|n| n == "minute");
    let last = rows
        .iter()
        .filter_map(|row| row.get(minute?).copied().flatten())
        .fold(f64::from(warmup), f64::max);
    let half = (f64::from(warmup) + last) / 2.0;
    let mut out = format!(
        "Slopes over minutes ≥ {warmup} and over their second half (minutes ≥ {half:.0}), by \
         least squares; ± is the 95 % interval. Growing: over {:.0} % of the mean per hour with \
         an interval that excludes zero, over both, changing at three samples of the second half \
         or more (fewer: stepped).\n\n\
         | metric | mean | slope per hour | per hour ÷ mean | second half, per hour ÷ mean | verdict |\n\
         |---|---:|---:|---:|---:|---|\n",
        GROWTH_PER_HOUR * 100.0
    );
    let mut constant = Vec::new();
    let mut all_flat = true;
    for (col, name) in names.iter().enumerate() {
        if Some(col) == minute {
            continue;
        }
        let points: Vec<(f64, f64)> = rows
            .iter()
            .filter_map(|row| {
                let m = row.get(minute?).copied().flatten()?;
                let v = row.get(col).copied().flatten()?;
                (m >= f64::from(warmup)).then_some((m, v))
            })
            .collect();
        if points.len() >= 3 && points.iter().all(|p| p.1 == points[0].1) {
            constant.push(format!("{name} = {}", points[0].1));
            continue;
        }
        let Some(whole) = fit(&points) else {
            let _ = writeln!(out, "| {name} | | | | | too few samples |");
            continue;
        };
        let late: Vec<(f64, f64)> = points.iter().copied().filter(|p| p.0 >= half).collect();
        let second_half = fit(&late);
        let verdict = trend(&whole, &late);
        all_flat &= matches!(verdict, "flat" | "levelled off" | "stepped");
        let _ = writeln!(
            out,
            "| {name} | {} | {} ± {} | {} | {} | {verdict} |",
            figure(whole.mean),
            figure(whole.slope_h),
            figure(whole.margin_h),
            relative(&whole),
            second_half.as_ref().map_or(String::new(), relative),
        );
    }
    if !constant.is_empty() {
        let _ = writeln!(out, "\nConstant throughout: {}.", constant.join(", "));
    }
    let _ = writeln!(
        out,
        "\nVerdict: {}",
        if all_flat {
            "flat"
        } else {
            "not flat (see the rows above)"
        }
    );
    (out, all_flat)
}

/// Three significant figures or so, readable in a table.
fn figure(v: f64) -> String {
    match v.abs() {
        a if a >= 100.0 => format!("{v:.0}"),
        a if a >= 1.0 => format!("{v:.1}"),
        _ => format!("{v:.3}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mix_shares_are_exact_per_hundred() {
        let count = |kind| (0..1000).filter(|&s| kind_of(s) == kind).count();
        assert_eq!(count(Kind::Plain), 800);
        assert_eq!(count(Kind::Transient), 80);
        assert_eq!(count(Kind::Permanent), 20);
        assert_eq!(count(Kind::Snooze), 50);
        assert_eq!(count(Kind::Grouped), 50);
    }

    #[test]
    fn a_steady_rise_is_growing_and_a_sawtooth_is_flat() {
        let rise: Vec<(f64, f64)> = (5..60).map(|m| (m as f64, 100.0 + m as f64)).collect();
        assert_eq!(verdict(&fit(&rise).expect("enough points")), "growing");
        let saw: Vec<(f64, f64)> = (5..60)
            .map(|m| (m as f64, 100.0 + (m % 5) as f64 * 10.0))
            .collect();
        assert_eq!(verdict(&fit(&saw).expect("enough points")), "flat");
    }

    #[test]
    fn a_rise_that_stops_halfway_has_levelled_off() {
        let step: Vec<(f64, f64)> = (5..60)
            .map(|m| (m as f64, 100.0 + (m.min(30) as f64)))
            .collect();
        let late: Vec<(f64, f64)> = step.iter().copied().filter(|p| p.0 >= 32.5).collect();
        assert_eq!(trend(&fit(&step).expect("enough"), &late), "levelled off");
    }

    #[test]
    fn one_step_late_in_the_hour_is_a_step_and_a_staircase_is_growing() {
        let late = |points: &[(f64, f64)]| -> Vec<(f64, f64)> {
            points.iter().copied().filter(|p| p.0 >= 32.5).collect()
        };
        // schedules.table_kb in the hour's run: a free space map and a visibility map at 51.
        let step: Vec<(f64, f64)> = (5..60)
            .map(|m| (m as f64, if m < 51 { 16.0 } else { 48.0 }))
            .collect();
        assert_eq!(trend(&fit(&step).expect("enough"), &late(&step)), "stepped");
        // A page every 6 minutes: four steps in the second half.
        let stairs: Vec<(f64, f64)> = (5..60)
            .map(|m| (m as f64, 40.0 + 8.0 * (m / 6) as f64))
            .collect();
        assert_eq!(
            trend(&fit(&stairs).expect("enough"), &late(&stairs)),
            "growing"
        );
    }

    #[test]
    fn purges_are_read_from_the_maintenance_log_lines() {
        let dir = std::env::temp_dir().join(format!("leaseq-soak-{}", std::process::id()));
        fs::create_dir_all(&dir).expect("temp dir");
        let log = dir.join("server.log");
        fs::write(
            &log,
            "2026-12-02 10:00:00 UTC [1] LOG:  leaseq maintenance: purged 1000 finished job(s) of queue \"soak\" (retain 00:02:00)\n\
             2026-12-02 10:00:01 UTC [1] LOG:  leaseq maintenance: purged 7 finished job(s) of queue \"other\" (retain 00:02:00)\n\
             2026-12-02 10:00:02 UTC [1] LOG:  leaseq maintenance: purged 42 finished job(s) of queue \"soak\" (retain 00:02:00)\n",
        )
        .expect("log written");
        assert_eq!(purged_in_log(&log).expect("log read"), 1042);
        fs::remove_dir_all(&dir).expect("temp dir removed");
    }
}
