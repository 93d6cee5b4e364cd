//! `leaseq-chaos`: tries hard to break leaseq's promises, then proves from the database that they
//! held. `scripts/chaos` builds and runs it; `leaseq-chaos run --help` lists the knobs.
//!
//! `run` enqueues N jobs in one transaction and starts W worker processes (`leaseq-chaos worker`,
//! the library's `Worker`) whose handler writes an effect row and completes the job in one
//! transaction (`complete_tx`) — and, on a job's first attempt, may crash at a named point
//! chosen by the seed: `after_claim_before_effect`, `after_effect_before_finalize`,
//! `during_finalize`. Meanwhile a seeded fault driver kill -9s workers, SIGSTOPs them for 2–3
//! leases, terminates their sessions, crash-restarts the server (`pg_ctl restart -m immediate`),
//! replays stale lease tokens, cancels and redrives jobs while they are claimed, and holds a
//! long open transaction. A quarter of the jobs belong to one of `GROUPS` ordered groups
//! (group_concurrency 1): the driver samples, all along, that no group has two live admitted
//! jobs. Beside them, `--flows` diamonds (a root, two branches, a fan-in join; every node a job
//! like the others, crash points and failures included) enqueued with `queue_flow` in the same
//! transaction. When every job is final, the checker reads the database and counts each
//! invariant's violations; any non-zero count fails the run.
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use clap::{Args, Parser, Subcommand};
use leaseq_client::client::QueueSettings;
use leaseq_client::{CancellationToken, Client, Job, Outcome, Worker, WorkerConfig, complete_tx};
use tokio::process::{Child, Command};

const LEASE: Duration = Duration::from_secs(2);
/// Ordered groups the grouped jobs are spread over (the queue's group_concurrency is 1).
const GROUPS: u64 = 16;
const MAX_ATTEMPTS: i32 = 8;
const CRASH_POINTS: [&str; 3] = [
    "after_claim_before_effect",
    "after_effect_before_finalize",
    "during_finalize",
];

#[derive(Parser)]
#[command(
    name = "leaseq-chaos",
    about = "Fault injection and invariant checks for leaseq"
)]
struct Cli {
    #[command(subcommand)]
    command: Mode,
}

#[derive(Subcommand)]
enum Mode {
    /// Run the whole experiment and check the invariants.
    Run(RunArgs),
    /// Re-run the checker on an earlier run's queue (`jobs`: how many were enqueued).
    Check {
        #[arg(long)]
        queue: String,
        #[arg(long)]
        jobs: i64,
        #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
        database_url: String,
    },
    /// One worker process (started by `run`).
    Worker {
        #[arg(long)]
        queue: String,
        #[arg(long)]
        name: String,
        #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
        database_url: String,
    },
}

#[derive(Args, Clone)]
struct RunArgs {
    #[arg(long, default_value_t = 2000)]
    jobs: usize,
    /// Diamond flows (4 jobs each: root, two branches, a fan-in join), beside `jobs`.
    #[arg(long, default_value_t = 50)]
    flows: usize,
    #[arg(long, default_value_t = 4)]
    workers: usize,
    /// Slots per worker.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Seeds the payloads (crash points, failures) and the fault schedule.
    #[arg(long)]
    seed: Option<u64>,
    /// Give up (and fail) if the jobs have not settled by then.
    #[arg(long, default_value_t = 5.0)]
    minutes: f64,
    /// Server crash-restarts during the run.
    #[arg(long, default_value_t = 2)]
    restarts: usize,
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: String,
    /// The cluster's data directory, for pg_ctl.
    #[arg(long, env = "LEASEQ_PGDATA")]
    pgdata: PathBuf,
    /// The OS user that runs the server (when we are root).
    #[arg(long, env = "LEASEQ_RUN_AS")]
    run_as: Option<String>,
    #[arg(long, default_value = "target/chaos")]
    report_dir: PathBuf,
}

/// xorshift64: a seeded, dependency-free generator; the same seed gives the same payloads and
/// the same sequence of fault choices.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let code = match Cli::parse().command {
        Mode::Worker {
            queue,
            name,
            database_url,
        } => {
            worker(&queue, &name, &database_url).await;
            0
        }
        Mode::Check {
            queue,
            jobs,
            database_url,
        } => {
            let admin = connect(&database_url).await;
            let faults = Faults::default(); // none injected, no samples: the database alone
            match check(&admin, &queue, jobs, &faults, true).await {
                Ok(report) => {
                    print_checks(&report);
                    i32::from(!report.iter().all(|(_, v, z)| !z || *v == 0))
                }
                Err(e) => {
                    eprintln!("leaseq-chaos: {e}");
                    2
                }
            }
        }
        Mode::Run(args) => match run(args).await {
            Ok(true) => 0,
            Ok(false) => 1,
            Err(e) => {
                eprintln!("leaseq-chaos: {e}");
                2
            }
        },
    };
    std::process::exit(code);
}

// ---------------------------------------------------------------------------------------------
// The worker process and its handler.

async fn worker(queue: &str, name: &str, url: &str) {
    let mut config = WorkerConfig::new(queue);
    config.worker_id = name.to_string();
    config.concurrency = std::env::var("CHAOS_CONCURRENCY")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(4);
    config.poll = Duration::from_millis(200);
    config.grace = Duration::from_secs(5);
    let shutdown = CancellationToken::new();
    let on_term = shutdown.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        on_term.cancel();
    });
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    let on_sigterm = shutdown.clone();
    tokio::spawn(async move {
        term.recv().await;
        on_sigterm.cancel();
    });
    let url = url.to_string();
    let handler_url = url.clone();
    let _ = Worker::new(&url, config)
        .run(
            move |job, stop| handle(handler_url.clone(), job, stop),
            shutdown,
        )
        .await;
}

/// Simulates a worker crash: no cleanup, no unwinding, like kill -9.
fn die() -> ! {
    // SAFETY: signals this very process.
    unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

async fn handle(url: String, job: Job, stop: CancellationToken) -> Outcome {
    let payload: serde_json::Value =
        serde_json::from_str(&job.payload).expect("chaos payloads are JSON");
    let first = job.attempt_no == 1;
    let crash = payload["crash"].as_str().filter(|_| first);
    let ms = payload["ms"].as_u64().unwrap_or(50);
    tokio::select! {
        _ = tokio::time::sleep(Duration::from_millis(ms)) => {}
        _ = stop.cancelled() => return Outcome::Finished, // lease lost: give the job up
    }
    if crash == Some("after_claim_before_effect") {
        die();
    }
    if u64::try_from(job.attempt_no).is_ok_and(|n| n <= payload["snooze"].as_u64().unwrap_or(0)) {
        return Outcome::Snooze {
            delay: Duration::from_millis(10),
        };
    }
    match payload["fail"].as_str() {
        Some("transient") if job.attempt_no < 3 => {
            return Outcome::Fail {
                error: Some(r#"{"transient": true}"#.into()),
                retry: true,
                retry_in: None,
            };
        }
        Some("permanent") => {
            return Outcome::Fail {
                error: Some(r#"{"permanent": true}"#.into()),
                retry: false,
                retry_in: None,
            };
        }
        _ => {}
    }
    // The effect and the completion commit together, or not at all.
    let Ok(mut effects) = Client::connect(&url).await else {
        return Outcome::Finished; // the database is away: the lease will bring the job back
    };
    let done = async {
        let tx = effects.pg().transaction().await?;
        tx.execute(
            "INSERT INTO leaseq_chaos.effects (job_id, attempt_no) VALUES ($1, $2)",
            &[&job.id, &job.attempt_no],
        )
        .await?;
        if crash == Some("after_effect_before_finalize") {
            die();
        }
        let completed = complete_tx(&tx, &job, Some(r#"{"ok": true}"#)).await?;
        if crash == Some("during_finalize") {
            die();
        }
        if completed {
            tx.commit().await
        } else {
            tx.rollback().await
        }
    };
    let _: Result<(), leaseq_client::Error> = done.await;
    Outcome::Finished
}

// ---------------------------------------------------------------------------------------------
// The experiment.

#[derive(Default)]
struct Faults {
    counts: BTreeMap<&'static str, u64>,
    stale_replays_accepted: u64,
    /// Samples of the groups taken during the run, and groups seen with more than one job
    /// pending or running in them, summed over the samples.
    group_samples: u64,
    group_overflows_seen: i64,
}

impl Faults {
    fn add(&mut self, kind: &'static str) {
        *self.counts.entry(kind).or_default() += 1;
    }
}

async fn run(args: RunArgs) -> Result<bool, Box<dyn std::error::Error>> {
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    });
    let mut rng = Rng::new(seed);
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(args.minutes * 60.0);
    std::fs::create_dir_all(&args.report_dir)?;
    let queue = format!("chaos_{}", seed % 1_000_000_000_000);
    println!(
        "chaos: seed {seed}, {} jobs, {} workers × {} slots, {} restarts, queue {queue}",
        args.jobs, args.workers, args.concurrency, args.restarts
    );

    let admin = connect(&args.database_url).await;
    admin
        .pg_batch(
            "CREATE SCHEMA IF NOT EXISTS leaseq_chaos;
             CREATE TABLE IF NOT EXISTS leaseq_chaos.effects (
                 job_id bigint NOT NULL, attempt_no int NOT NULL,
                 committed_at timestamptz NOT NULL DEFAULT clock_timestamp());
             CREATE INDEX IF NOT EXISTS effects_job ON leaseq_chaos.effects (job_id);",
        )
        .await?;
    let settings = QueueSettings {
        lease: Some(LEASE),
        max_attempts: Some(MAX_ATTEMPTS),
        backoff_base: Some(Duration::from_millis(50)),
        backoff_cap: Some(Duration::from_millis(500)),
        ..Default::default()
    };
    admin.queue_create(&queue, &settings).await?;
    // A schedule ticking every minute into a queue of its own, two hours behind with catch-up:
    // claims of that queue, three at a time each fault round, materialise its ticks through the
    // faults; the checker counts its jobs per tick.
    let ticks = format!("{queue}_ticks");
    admin
        .queue_create(&ticks, &QueueSettings::default())
        .await?;
    admin
        .pg_batch(&format!(
            "SELECT leaseq.queue_schedule('{ticks}', '{ticks}', '* * * * *', '{{}}',
                                          catch_up => true);
             UPDATE leaseq.schedules
                SET next_at = date_trunc('minute', clock_timestamp()) - interval '2 hours'
              WHERE name = '{ticks}';"
        ))
        .await?;

    // All jobs in one transaction: they commit together, and are all there or none are.
    let mut payload = |n: usize| {
        let ms = 20 + rng.below(180);
        let crash = match rng.below(100) {
            0..=2 => Some(CRASH_POINTS[rng.below(3) as usize]),
            _ => None,
        };
        let fail = match rng.below(100) {
            0..=4 => Some("transient"),
            5..=6 => Some("permanent"),
            _ => None,
        };
        // Not ready the first one or two times it is claimed: snoozed, its budget kept.
        let snooze = match rng.below(100) {
            0..=4 => 1 + rng.below(2),
            _ => 0,
        };
        serde_json::json!({"n": n, "ms": ms, "crash": crash, "fail": fail, "snooze": snooze})
    };
    let payloads: Vec<String> = (0..args.jobs).map(|n| payload(n).to_string()).collect();
    // The flows: each a diamond, its join running anyway after a failed branch in every other
    // flow (`run`), cancelled with it in the others (`cancel`, the default).
    let flows = serde_json::Value::Array(
        (0..args.flows)
            .flat_map(|f| {
                let node = |key: &str, depends_on: &[&str], n: usize| {
                    serde_json::json!({
                        "key": format!("f{f}-{key}"),
                        "queue": queue,
                        "payload": n,
                        "depends_on": depends_on.iter().map(|k| format!("f{f}-{k}")).collect::<Vec<_>>(),
                        "on_parent_failure": if f % 2 == 0 { "run" } else { "cancel" },
                    })
                };
                [
                    node("root", &[], 0),
                    node("left", &["root"], 1),
                    node("right", &["root"], 2),
                    node("join", &["left", "right"], 3),
                ]
            })
            .collect(),
    );
    let flows = match flows {
        serde_json::Value::Array(nodes) => serde_json::Value::Array(
            nodes
                .into_iter()
                .enumerate()
                .map(|(i, mut node)| {
                    node["payload"] = payload(args.jobs + i);
                    node
                })
                .collect(),
        ),
        other => other,
    };
    let enqueued = args.jobs + 4 * args.flows;
    // A quarter of the jobs run in ordered groups: one at a time per group, in enqueue order.
    let group_keys: Vec<Option<String>> = (0..args.jobs)
        .map(|_| (rng.below(4) == 0).then(|| format!("g{}", rng.below(GROUPS))))
        .collect();
    let mut enqueuer = Client::connect(&args.database_url).await?;
    let tx = enqueuer.pg().transaction().await?;
    for (chunk, groups) in payloads.chunks(1000).zip(group_keys.chunks(1000)) {
        tx.execute(
            "SELECT leaseq.queue_enqueue_batch($1, $2::text[]::jsonb[], group_keys => $3)",
            &[&queue, &chunk, &groups],
        )
        .await?;
    }
    if args.flows > 0 {
        tx.execute(
            "SELECT count(*) FROM leaseq.queue_flow($1::text::jsonb)",
            &[&flows.to_string()],
        )
        .await?;
    }
    tx.commit().await?;
    drop(enqueuer);

    let worker_url = with_application_name(&args.database_url, "leaseq-chaos-worker");
    let mut workers: Vec<Child> = Vec::new();
    let mut next_worker = 0;
    for slot in 0..args.workers {
        workers.push(spawn_worker(
            &args,
            &queue,
            &worker_url,
            slot,
            &mut next_worker,
        )?);
    }

    let mut faults = Faults::default();
    let mut stopped: Vec<(Instant, u32)> = Vec::new();
    let mut restarts_done = 0;
    let mut long_tx_started = false;
    let mut round: Vec<u64> = Vec::new();
    let mut next_fault = Instant::now() + Duration::from_millis(500);
    let mut admin = admin;
    let settled = loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let Ok(finished) = admin
            .count_in("SELECT count(*) FROM leaseq.jobs WHERE queue = $1 AND status IN ('succeeded', 'dead', 'cancelled')", &queue)
            .await
        else {
            admin = connect(&args.database_url).await;
            continue;
        };
        // Each sample is one snapshot: no group may show two admitted jobs in it.
        if let Ok(overflows) = admin
            .count_in(
                "SELECT count(*) FROM (
                     SELECT job.group_key FROM leaseq.jobs AS job
                      WHERE job.queue = $1 AND job.group_key IS NOT NULL
                        AND job.status IN ('pending', 'running')
                      GROUP BY job.group_key HAVING count(*) > 1) AS overflowing",
                &queue,
            )
            .await
        {
            faults.group_samples += 1;
            faults.group_overflows_seen += overflows;
        }
        stopped.retain(|(until, _)| Instant::now() < *until);
        // A worker that crashed at one of its crash points is replaced, as a supervisor would.
        for (slot, w) in workers.iter_mut().enumerate() {
            if let Ok(Some(_)) = w.try_wait() {
                *w = spawn_worker(&args, &queue, &worker_url, slot, &mut next_worker)?;
                faults.add("worker_crash_point");
            }
        }
        if finished as usize >= enqueued {
            break true;
        }
        if Instant::now() > deadline {
            break false;
        }
        // Restarts at even fractions of the run.
        if restarts_done < args.restarts
            && finished as usize * (args.restarts + 1) >= enqueued * (restarts_done + 1)
        {
            restart_server(&args).await?;
            restarts_done += 1;
            faults.add("server_restart");
            admin = connect(&args.database_url).await;
            continue;
        }
        if !long_tx_started && finished as usize * 10 >= enqueued {
            long_tx_started = true;
            faults.add("long_open_transaction");
            tokio::spawn(hold_snapshot(
                args.database_url.clone(),
                Duration::from_secs(15),
            ));
        }
        if Instant::now() < next_fault {
            continue;
        }
        next_fault = Instant::now() + Duration::from_millis(300 + rng.below(700));
        for _ in 0..3 {
            tokio::spawn(claim_ticks(args.database_url.clone(), ticks.clone()));
        }
        // Every kind comes once per round, in a seeded order: no kind is left out by chance.
        if round.is_empty() {
            round = (0..6).collect();
            for i in (1..round.len()).rev() {
                round.swap(i, rng.below(i as u64 + 1) as usize);
            }
        }
        match round.pop().expect("a round has six faults") {
            0 => {
                let i = rng.below(workers.len() as u64) as usize;
                if let Some(pid) = workers[i].id() {
                    stopped.retain(|(_, p)| *p != pid);
                    signal(pid, libc::SIGKILL);
                }
                let _ = workers[i].wait().await;
                workers[i] = spawn_worker(&args, &queue, &worker_url, i, &mut next_worker)?;
                faults.add("worker_kill_9");
            }
            1 => {
                let i = rng.below(workers.len() as u64) as usize;
                if let Some(pid) = workers[i]
                    .id()
                    .filter(|pid| stopped.iter().all(|(_, p)| p != pid))
                {
                    signal(pid, libc::SIGSTOP);
                    let pause =
                        LEASE * 2 + Duration::from_millis(rng.below(LEASE.as_millis() as u64));
                    stopped.push((Instant::now() + pause, pid));
                    // Resumed by a timer of its own: the driver's own calls may wait meanwhile.
                    tokio::spawn(async move {
                        tokio::time::sleep(pause).await;
                        signal(pid, libc::SIGCONT);
                    });
                    faults.add("worker_sigstop");
                }
            }
            2 => {
                let n = admin
                    .count("SELECT count(pg_terminate_backend(pid)) FROM (SELECT pid FROM pg_stat_activity
                             WHERE application_name = 'leaseq-chaos-worker' ORDER BY random() LIMIT 1) s")
                    .await
                    .unwrap_or(0);
                if n > 0 {
                    faults.add("terminate_backend");
                }
            }
            3 => {
                let accepted = replay_stale_tokens(&admin, &queue).await.unwrap_or(0);
                faults.stale_replays_accepted += accepted;
                faults.add("stale_token_replay");
            }
            4 => {
                let cancelled = admin
                    .count_in(
                        "SELECT count(*) FILTER (WHERE leaseq.queue_cancel(job_id)) FROM (
                             SELECT job_id FROM leaseq.queue_jobs($1, 'running', 200)
                              ORDER BY random() LIMIT 1) r",
                        &queue,
                    )
                    .await
                    .unwrap_or(0);
                if cancelled > 0 {
                    faults.add("cancel_while_claimed");
                }
            }
            _ => {
                if let Ok(n) = admin.redrive_all(&queue).await
                    && n > 0
                {
                    faults.add("redrive_while_claiming");
                }
            }
        }
    };
    for (_, pid) in stopped.drain(..) {
        signal(pid, libc::SIGCONT);
    }
    for w in &mut workers {
        if let Some(pid) = w.id() {
            signal(pid, libc::SIGTERM);
        }
    }
    for w in &mut workers {
        let _ = tokio::time::timeout(Duration::from_secs(15), w.wait()).await;
        let _ = w.start_kill();
    }
    let elapsed = started.elapsed();

    let admin = connect(&args.database_url).await;
    let report = check(&admin, &queue, enqueued as i64, &faults, settled).await?;
    let ok = report
        .iter()
        .all(|(_, v, must_be_zero)| !must_be_zero || *v == 0);
    println!(
        "\nchaos: {} in {:.1} s — {}",
        if settled { "settled" } else { "NOT settled" },
        elapsed.as_secs_f64(),
        if ok {
            "every invariant held"
        } else {
            "INVARIANTS VIOLATED"
        }
    );
    println!("\n{:<72} {:>8}", "faults injected", "count");
    for (kind, n) in &faults.counts {
        println!("{kind:<72} {n:>8}");
    }
    print_checks(&report);
    let json = serde_json::json!({
        "seed": seed,
        "jobs": args.jobs,
        "flows": args.flows,
        "workers": args.workers,
        "concurrency": args.concurrency,
        "restarts": args.restarts,
        "settled": settled,
        "seconds": elapsed.as_secs_f64(),
        "faults": faults.counts,
        "checks": report.iter().map(|(k, v, z)| (k.to_string(), serde_json::json!({"count": v, "must_be_zero": z}))).collect::<serde_json::Map<_, _>>(),
        "ok": ok,
    });
    let path = args.report_dir.join(format!("report-{seed}.json"));
    std::fs::write(&path, serde_json::to_string_pretty(&json)?)?;
    std::fs::write(
        args.report_dir.join("latest.json"),
        serde_json::to_string_pretty(&json)?,
    )?;
    println!("\nreport: {}", path.display());
    // Each must-be-zero count is one check; the closing line says how many held.
    let held = report.iter().filter(|(_, v, z)| *z && *v == 0).count();
    let violated = report.iter().filter(|(_, v, z)| *z && *v != 0).count();
    println!("chaos: {held} passed, {violated} failed");
    Ok(ok)
}

fn print_checks(report: &[(&str, i64, bool)]) {
    println!("\n{:<72} {:>8}", "checked from the database", "count");
    for (name, value, must_be_zero) in report {
        let mark = match (must_be_zero, *value == 0) {
            (false, _) => "",
            (true, true) => "ok",
            (true, false) => "VIOLATED",
        };
        println!("{name:<72} {value:>8}  {mark}");
    }
}

/// The invariants, each as a count read from the database: `(name, count, must be zero)`.
async fn check(
    admin: &Client,
    queue: &str,
    enqueued: i64,
    faults: &Faults,
    settled: bool,
) -> Result<Vec<(&'static str, i64, bool)>, leaseq_client::Error> {
    let jobs = "(SELECT * FROM leaseq.jobs WHERE queue = $1)".to_string();
    let attempts = "(SELECT a.* FROM leaseq.attempts a JOIN leaseq.jobs j ON j.id = a.job_id WHERE j.queue = $1)".to_string();
    let mut out = Vec::new();
    let total = admin
        .count_in(&format!("SELECT count(*) FROM {jobs} j"), queue)
        .await?;
    let counts = |status: &str| format!("SELECT count(*) FROM {jobs} j WHERE status = '{status}'");
    out.push(("jobs enqueued", enqueued, false));
    out.push((
        "  succeeded",
        admin.count_in(&counts("succeeded"), queue).await?,
        false,
    ));
    out.push((
        "  dead",
        admin.count_in(&counts("dead"), queue).await?,
        false,
    ));
    out.push((
        "  cancelled",
        admin.count_in(&counts("cancelled"), queue).await?,
        false,
    ));
    out.push((
        "attempts recorded",
        admin
            .count_in(&format!("SELECT count(*) FROM {attempts} a"), queue)
            .await?,
        false,
    ));
    let not_final = admin.count_in(&format!("SELECT count(*) FROM {jobs} j WHERE status NOT IN ('succeeded', 'dead', 'cancelled')"), queue).await?;
    out.push((
        "lost jobs (missing, or not final once settled)",
        (enqueued - total) + if settled { not_final } else { not_final.max(1) },
        true,
    ));
    out.push((
        "double claims (overlapping live leases)",
        admin
            .count_in(
                // Each attempt against the latest end of the job's earlier ones: one pass over
                // the view, where a self-join planned on the stale statistics of a run that has
                // just ended can loop over it once per attempt.
                &format!(
                    "SELECT count(*) FROM (
                         SELECT a.started_at < max(coalesce(a.ended_at, 'infinity')) OVER (
                                    PARTITION BY a.job_id ORDER BY a.attempt_no
                                    ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS overlaps
                           FROM {attempts} a) w
                      WHERE w.overlaps"
                ),
                queue,
            )
            .await?,
        true,
    ));
    let invariants = include_str!("../../../pg_test/invariants.sql");
    out.push((
        "job rows breaking a row invariant (pg_test/invariants.sql)",
        admin
            .count_in(
                &format!(
                    "SELECT count(*) FROM ({}) broken WHERE broken.queue = $1",
                    invariants.trim_end().trim_end_matches(';')
                ),
                queue,
            )
            .await?,
        true,
    ));
    out.push((
        "stale-token replays accepted",
        faults.stale_replays_accepted as i64,
        true,
    ));
    out.push((
        "stale finalizations (success not on the last attempt, or twice)",
        admin
            .count_in(&format!(
                "SELECT count(*) FROM {jobs} j WHERE
                    (j.status = 'succeeded') <> EXISTS (SELECT 1 FROM {attempts} a WHERE a.job_id = j.id AND a.outcome = 'succeeded')
                 OR (SELECT count(*) FROM {attempts} a WHERE a.job_id = j.id AND a.outcome = 'succeeded') > 1
                 OR (j.status = 'succeeded' AND (SELECT max(attempt_no) FROM {attempts} a WHERE a.job_id = j.id)
                        <> (SELECT attempt_no FROM {attempts} a WHERE a.job_id = j.id AND a.outcome = 'succeeded'))"
            ), queue)
            .await?,
        true,
    ));
    out.push((
        "attempt numbers not unique and gap-free from 1",
        admin
            .count_in(
                &format!(
                    "SELECT count(*) FROM (SELECT job_id FROM {attempts} a GROUP BY job_id
                  HAVING min(attempt_no) <> 1 OR max(attempt_no) <> count(*)
                      OR count(DISTINCT attempt_no) <> count(*)) g"
                ),
                queue,
            )
            .await?,
        true,
    ));
    out.push((
        "history rows not closed (outcome running, or ending before they start)",
        admin
            .count_in(
                "SELECT count(*) FROM leaseq.closed_attempts c JOIN leaseq.jobs j ON j.id = c.job_id
                  WHERE j.queue = $1 AND (c.outcome = 'running' OR c.ended_at < c.started_at)",
                queue,
            )
            .await?,
        true,
    ));
    out.push((
        "snoozes miscounted (a job's count against its snoozed attempts)",
        admin
            .count_in(
                &format!(
                    "SELECT count(*) FROM {jobs} j
                      WHERE j.snoozes <> (SELECT count(*) FROM leaseq.attempts a
                                           WHERE a.job_id = j.id AND a.outcome = 'snoozed')"
                ),
                queue,
            )
            .await?,
        true,
    ));
    out.push((
        "attempts missing from history (fewer rows than the budget used)",
        admin
            .count_in(
                &format!(
                    "SELECT count(*) FROM {jobs} j
                  WHERE (SELECT count(*) FROM leaseq.attempts a WHERE a.job_id = j.id)
                        < j.attempts"
                ),
                queue,
            )
            .await?,
        true,
    ));
    out.push((
        "budget violations (over budget, or dead with budget left)",
        admin
            .count_in(
                &format!(
                    "SELECT count(*) FROM {jobs} j WHERE j.attempts > j.max_attempts
                    OR (j.status = 'dead' AND j.attempts < j.max_attempts
                        AND coalesce(j.last_error->>'permanent', '') <> 'true')"
                ),
                queue,
            )
            .await?,
        true,
    ));
    out.push((
        "samples of the groups taken during the run",
        faults.group_samples as i64,
        false,
    ));
    out.push((
        "groups seen with two live admitted jobs (summed over the samples)",
        faults.group_overflows_seen,
        true,
    ));
    out.push((
        "grouped jobs",
        admin
            .count_in(
                &format!("SELECT count(*) FROM {jobs} j WHERE j.group_key IS NOT NULL"),
                queue,
            )
            .await?,
        false,
    ));
    out.push((
        // Leases, not processes: a job's attempt spans its lease (a reclaimed one ends when its
        // lease ended). A claim reads its clock one statement before its snapshot, so the start
        // of a job claimed the instant its predecessor ended may read up to that much earlier
        // than the end: overlaps of 10 ms or less are not counted (handlers run 20 ms or more).
        "attempts of two jobs of one group overlapping (group_concurrency 1)",
        admin
            .count_in(
                &format!(
                    "SELECT count(*) FROM (
                         SELECT j.group_key, a.job_id, a.started_at,
                                coalesce(a.ended_at, 'infinity') AS ended_at
                           FROM {jobs} j JOIN leaseq.attempts a ON a.job_id = j.id
                          WHERE j.group_key IS NOT NULL) AS one,
                        (SELECT j.group_key, a.job_id, a.started_at,
                                coalesce(a.ended_at, 'infinity') AS ended_at
                           FROM {jobs} j JOIN leaseq.attempts a ON a.job_id = j.id
                          WHERE j.group_key IS NOT NULL) AS other
                      WHERE one.group_key = other.group_key AND one.job_id < other.job_id
                        AND one.started_at < other.ended_at - interval '10 milliseconds'
                        AND other.started_at < one.ended_at - interval '10 milliseconds'"
                ),
                queue,
            )
            .await?,
        true,
    ));
    out.push((
        "grouped jobs first claimed out of enqueue order (group_concurrency 1)",
        admin
            .count_in(
                &format!(
                    "SELECT count(*) FROM (
                         SELECT first.started_at,
                                lag(first.started_at) OVER (PARTITION BY j.group_key
                                                            ORDER BY j.id) AS previous
                           FROM {jobs} j
                          CROSS JOIN LATERAL (SELECT min(a.started_at) AS started_at
                                                FROM leaseq.attempts a
                                               WHERE a.job_id = j.id) AS first
                          WHERE j.group_key IS NOT NULL) AS ordered
                      WHERE ordered.started_at <= ordered.previous"
                ),
                queue,
            )
            .await?,
        true,
    ));
    let ticks = format!("{queue}_ticks");
    let tick_jobs = "(SELECT * FROM leaseq.jobs WHERE queue = $1)";
    out.push((
        "ticks enqueued (every minute, from two hours back, catching up)",
        admin
            .count_in(&format!("SELECT count(*) FROM {tick_jobs} t"), &ticks)
            .await?,
        false,
    ));
    out.push((
        "duplicate ticks (two jobs for one tick of the schedule)",
        admin
            .count_in(
                &format!("SELECT count(*) - count(DISTINCT t.run_at) FROM {tick_jobs} t"),
                &ticks,
            )
            .await?,
        true,
    ));
    out.push((
        "missed ticks (minutes before the schedule's next one without their job)",
        admin
            .count_in(
                &format!(
                    "SELECT coalesce(
                         (SELECT (extract(epoch FROM s.next_at - min(t.run_at)) / 60)::bigint
                                 - count(DISTINCT t.run_at)
                            FROM {tick_jobs} t, leaseq.schedules s
                           WHERE s.name = $1
                           GROUP BY s.next_at),
                         1)"
                ),
                &ticks,
            )
            .await?,
        true,
    ));
    out.push((
        "flow joins that succeeded",
        admin
            .count_in(
                &format!(
                    "SELECT count(*) FROM {jobs} j
                      WHERE j.status = 'succeeded'
                        AND EXISTS (SELECT 1 FROM leaseq.job_parents e WHERE e.child_id = j.id)
                        AND NOT EXISTS (SELECT 1 FROM leaseq.job_parents e WHERE e.parent_id = j.id)"
                ),
                queue,
            )
            .await?,
        false,
    ));
    out.push((
        "flow jobs ended by a failed parent (cancelled or run anyway)",
        admin
            .count_in(
                &format!(
                    "SELECT count(*) FROM {jobs} j
                      WHERE EXISTS (SELECT 1 FROM leaseq.job_parents e
                                      JOIN leaseq.jobs p ON p.id = e.parent_id
                                     WHERE e.child_id = j.id AND p.status <> 'succeeded')"
                ),
                queue,
            )
            .await?,
        false,
    ));
    out.push((
        // A child whose policy is `cancel` runs only once every parent succeeded: each of its
        // attempts starts after each parent's end. (A `run` child's dead parent may be redriven
        // by the fault driver after the child ran, and end again later.)
        "flow children (cancel) that ran before a parent succeeded",
        admin
            .count_in(
                &format!(
                    "SELECT count(*) FROM leaseq.job_parents e
                       JOIN {jobs} c ON c.id = e.child_id
                       JOIN leaseq.jobs p ON p.id = e.parent_id
                      WHERE e.on_parent_failure = 'cancel'
                        AND EXISTS (SELECT 1 FROM leaseq.attempts a WHERE a.job_id = c.id
                                       AND (p.status <> 'succeeded'
                                            OR a.started_at < p.finished_at))"
                ),
                queue,
            )
            .await?,
        true,
    ));
    out.push((
        "effects not exactly once per succeeded job",
        admin
            .count_in(&format!(
                "SELECT count(*) FROM {jobs} j WHERE
                   (j.status = 'succeeded' AND (
                        (SELECT count(*) FROM leaseq_chaos.effects e WHERE e.job_id = j.id) <> 1
                     OR (SELECT e.attempt_no FROM leaseq_chaos.effects e WHERE e.job_id = j.id LIMIT 1)
                        <> (SELECT attempt_no FROM {attempts} a WHERE a.job_id = j.id AND a.outcome = 'succeeded')))
                OR (j.status <> 'succeeded' AND EXISTS (SELECT 1 FROM leaseq_chaos.effects e WHERE e.job_id = j.id))"
            ), queue)
            .await?,
        true,
    ));
    Ok(out)
}

/// Claims (which materialises the schedule's due ticks) and completes the tick queue's jobs;
/// errors are the faults' doing and ignored.
async fn claim_ticks(url: String, ticks: String) {
    let Ok(client) = Client::connect(&url).await else {
        return;
    };
    if let Ok(jobs) = client.claim(&ticks, "ticker", 100, None).await {
        for job in &jobs {
            let _ = client.complete(job, None).await;
        }
    }
}

/// Calls complete, renew, fail, progress and step with tokens of closed attempts; returns how many
/// were accepted.
async fn replay_stale_tokens(admin: &Client, queue: &str) -> Result<u64, leaseq_client::Error> {
    let rows = admin
        .pg_query(
            "SELECT a.job_id, a.lease_token, a.attempt_no FROM leaseq.attempts a
               JOIN leaseq.jobs j ON j.id = a.job_id
              WHERE j.queue = $1 AND a.outcome <> 'running' ORDER BY random() LIMIT 5",
            queue,
        )
        .await?;
    let mut accepted = 0;
    for (job_id, token, attempt_no) in rows {
        let job = Job {
            id: job_id,
            key: String::new(),
            queue: queue.to_string(),
            lease_token: token,
            attempt_no,
            payload: String::new(),
            priority: 0,
            lease_left: Duration::ZERO,
            trace_context: None,
        };
        accepted += admin.complete(&job, None).await? as u64;
        accepted += admin.renew(&job, None).await?.is_some() as u64;
        accepted += admin.fail(&job, None, true, None).await?.is_some() as u64;
        accepted += admin.progress(&job, r#"{"stale": true}"#).await? as u64;
        accepted += admin.step(&job, "stale", None).await? as u64;
    }
    Ok(accepted)
}

/// A REPEATABLE READ transaction that keeps its snapshot (and so the xmin horizon) for `hold`.
async fn hold_snapshot(url: String, hold: Duration) {
    if let Ok(mut c) = Client::connect(&url).await
        && let Ok(tx) = c
            .pg()
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .start()
            .await
    {
        let _ = tx
            .batch_execute("SELECT txid_current(); SELECT count(*) FROM leaseq.jobs")
            .await;
        tokio::time::sleep(hold).await;
        let _ = tx.commit().await;
    }
}

/// Starts worker number `next` (its id in the history) in `slot` (its log: one file per slot).
fn spawn_worker(
    args: &RunArgs,
    queue: &str,
    url: &str,
    slot: usize,
    next: &mut usize,
) -> std::io::Result<Child> {
    *next += 1;
    let name = format!("chaos-{next}");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(args.report_dir.join(format!("worker-slot-{slot}.log")))?;
    Command::new(std::env::current_exe()?)
        .args(["worker", "--queue", queue, "--name", &name])
        .env("DATABASE_URL", url)
        .env("CHAOS_CONCURRENCY", args.concurrency.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
}

fn signal(pid: u32, signal: i32) {
    // SAFETY: signals one of the worker processes this run started.
    unsafe { libc::kill(pid as i32, signal) };
}

/// `pg_ctl restart -m immediate`: the server crashes (no checkpoint) and recovers.
async fn restart_server(args: &RunArgs) -> Result<(), Box<dyn std::error::Error>> {
    let pg_ctl = "/usr/lib/postgresql/15/bin/pg_ctl";
    let mut command = match &args.run_as {
        Some(user) if !user.is_empty() => {
            let mut c = Command::new("sudo");
            c.args(["-u", user, pg_ctl]);
            c
        }
        _ => Command::new(pg_ctl),
    };
    let log = args.pgdata.with_file_name("server.log");
    let status = command
        .arg("-D")
        .arg(&args.pgdata)
        .args(["-m", "immediate", "-w", "-t", "120", "restart", "-l"])
        .arg(log)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await?;
    if !status.success() {
        return Err("pg_ctl restart failed".into());
    }
    Ok(())
}

fn with_application_name(url: &str, name: &str) -> String {
    if url.contains("://") {
        let sep = if url.contains('?') { '&' } else { '?' };
        format!("{url}{sep}application_name={name}")
    } else {
        format!("{url} application_name={name}")
    }
}

/// Connects, retrying while the server restarts. The driver never waits on a worker's row lock
/// for long (a paused worker may hold one for seconds): its statements give up after 1 s.
async fn connect(url: &str) -> Client {
    loop {
        match Client::connect(url).await {
            Ok(c)
                if c.raw()
                    .batch_execute("SET lock_timeout = '1s'")
                    .await
                    .is_ok() =>
            {
                return c;
            }
            Ok(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// Small conveniences for the driver's own SQL.
trait Admin {
    /// One bigint; `$1` in `sql`, when present, is the queue.
    async fn count(&self, sql: &str) -> Result<i64, leaseq_client::Error>;
    async fn count_in(&self, sql: &str, queue: &str) -> Result<i64, leaseq_client::Error>;
    async fn pg_batch(&self, sql: &str) -> Result<(), leaseq_client::Error>;
    async fn pg_query(
        &self,
        sql: &str,
        queue: &str,
    ) -> Result<Vec<(i64, leaseq_client::Uuid, i32)>, leaseq_client::Error>;
}

impl Admin for Client {
    async fn count(&self, sql: &str) -> Result<i64, leaseq_client::Error> {
        Ok(self.raw().query_one(sql, &[]).await?.get(0))
    }
    async fn count_in(&self, sql: &str, queue: &str) -> Result<i64, leaseq_client::Error> {
        Ok(self.raw().query_one(sql, &[&queue]).await?.get(0))
    }
    async fn pg_batch(&self, sql: &str) -> Result<(), leaseq_client::Error> {
        self.raw().batch_execute(sql).await
    }
    async fn pg_query(
        &self,
        sql: &str,
        queue: &str,
    ) -> Result<Vec<(i64, leaseq_client::Uuid, i32)>, leaseq_client::Error> {
        Ok(self
            .raw()
            .query(sql, &[&queue])
            .await?
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect())
    }
}
