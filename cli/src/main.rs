//! `leaseq`: the command line for leaseq queues. See `leaseq --help`. Built on the library
//! `leaseq_client` (client/), which holds every call of the extension's functions but the
//! console's and the Worker itself; this crate holds what only the command needs:
//!
//! - `command`: `leaseq work`'s handler, any program run once per job; `log`: its log on stderr.
//! - `present`: the tables and fields the commands print.
//! - `ui`: `leaseq ui`, the admin console; `scrape`: `leaseq metrics --listen`.
//! - `https`: TLS for those two servers; `credentials`: their `--auth`.
//!
//! Exit codes: 0 done; 1 error (connection, refused call); 2 usage; 3 nothing changed (redrive
//! of a job that is not dead, cancel of a finished job).
mod command;
mod credentials;
mod https;
mod log;
mod present;
mod scrape;
mod ui;

use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use leaseq_client::client::{OnDuplicate, QueueSettings};
use leaseq_client::worker::default_worker_id;
use leaseq_client::{
    Client, EnqueueOptions, JobStatus, ParentFailure, QueuePrivilege, Worker, WorkerConfig,
};

use command::{CommandHandler, parse_duration};

const EXIT_UNCHANGED: u8 = 3;

#[derive(Parser)]
#[command(
    name = "leaseq",
    version,
    about = "Run and manage leaseq job queues in PostgreSQL"
)]
struct Cli {
    /// libpq-style URL or key=value connection string.
    #[arg(long, env = "DATABASE_URL", global = true, hide_env_values = true)]
    database_url: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run CMD once per job: payload on stdin, exit code as outcome.
    #[command(after_help = WORK_HELP)]
    Work(WorkArgs),
    /// Enqueue one job (--json), or one per line of NDJSON (--file F, or - for stdin).
    #[command(
        after_help = "Examples:\n  leaseq enqueue --queue emails --json '{\"to\": \"ada@example.com\"}'\n  leaseq enqueue --queue emails --run-at '2026-12-01 09:00+00' --json '{}'\n  jq -c '.[]' orders.json | leaseq enqueue --queue orders -"
    )]
    Enqueue(EnqueueArgs),
    /// Periodic jobs: a job at every tick of a cron expression.
    #[command(subcommand)]
    Schedule(ScheduleCommand),
    /// Queue management.
    #[command(subcommand)]
    Queue(QueueCommand),
    /// Prometheus metrics of every queue (leaseq.metrics()): printed once, or served over HTTP
    /// (HTTPS with --tls-cert) at /metrics for scraping.
    #[command(
        after_help = "Examples:\n  leaseq metrics\n  leaseq metrics --listen 127.0.0.1:9187\n  LEASEQ_METRICS_AUTH=bearer:s3cret leaseq metrics --listen 0.0.0.0:9187 --tls-cert metrics.crt --tls-key metrics.key"
    )]
    Metrics {
        /// Serve GET /metrics on this address until interrupted (a non-loopback address needs
        /// --auth).
        #[arg(long)]
        listen: Option<std::net::SocketAddr>,
        /// With --listen: bearer:TOKEN or basic:USER:PASSWORD, required on every scrape.
        #[arg(
            long,
            env = "LEASEQ_METRICS_AUTH",
            hide_env_values = true,
            requires = "listen"
        )]
        auth: Option<credentials::Auth>,
        #[command(flatten)]
        tls: https::TlsArgs,
    },
    /// Jobs per status, for every queue.
    ///
    /// A column per status of leaseq.job_status, in its order (pending counts the scheduled
    /// ones too), then the scheduled jobs, the expired leases and the oldest pending age.
    #[command(after_help = "Examples:\n  leaseq stats\n  leaseq stats --watch 2s")]
    Stats {
        /// Redraw every DUR until interrupted.
        #[arg(long, value_parser = parse_duration)]
        watch: Option<Duration>,
    },
    /// A queue's most recent jobs.
    #[command(after_help = "Example:\n  leaseq jobs --queue emails --status dead")]
    Jobs {
        #[arg(long)]
        queue: String,
        /// pending, running, succeeded, dead, cancelled, waiting or blocked.
        #[arg(long)]
        status: Option<JobStatus>,
        #[arg(long, default_value_t = 50)]
        limit: i32,
    },
    /// A job, its attempt history, and the jobs it depends on and that depend on it.
    #[command(after_help = "Example:\n  leaseq show 42")]
    Show { job: i64 },
    /// Enqueue a graph of jobs at once from a JSON file (- for stdin): an array of nodes
    /// {"key", "queue", "payload", "depends_on": [keys], "on_parent_failure", "priority",
    /// "max_attempts"}, checked whole before anything is inserted. Prints each key's job id.
    #[command(
        after_help = "Example:\n  echo '[{\"key\": \"fetch\", \"queue\": \"images\"},\n        {\"key\": \"report\", \"queue\": \"reports\", \"depends_on\": [\"fetch\"]}]' | leaseq flow -"
    )]
    Flow { file: String },
    /// Wait until every job is final (succeeded, dead or cancelled), or the timeout passes —
    /// woken by the jobs' finishes, holding no snapshot meanwhile (`CALL queue_await`). Prints
    /// the jobs not final yet, one per line; exits 0 when all are, 3 when the timeout passed.
    #[command(
        after_help = "Example:\n  id=$(leaseq enqueue --queue thumbnails --json '{\"image\": 7}') && leaseq await $id --timeout 1m && leaseq show $id"
    )]
    Await {
        #[arg(required = true)]
        jobs: Vec<i64>,
        /// At most 1 day.
        #[arg(long, default_value = "30s", value_parser = parse_duration)]
        timeout: Duration,
    },
    /// Bring a dead job (or all of a queue's) back to pending with a fresh budget.
    #[command(after_help = "Examples:\n  leaseq redrive 42\n  leaseq redrive --queue emails --all")]
    Redrive {
        #[arg(required_unless_present = "all")]
        job: Option<i64>,
        #[arg(long, requires = "all")]
        queue: Option<String>,
        #[arg(long, requires = "queue", conflicts_with = "job")]
        all: bool,
    },
    /// Cancel a pending, running or dead job.
    #[command(after_help = "Example:\n  leaseq cancel 42")]
    Cancel { job: i64 },
    /// The admin web console: queues, jobs, schedules, groups and workers, and the actions the
    /// database role may take on them.
    #[command(after_help = UI_HELP)]
    Ui(UiArgs),
}

const UI_HELP: &str = "\
The console acts as the database role it connects as (or, with --role-header, as the role a
trusted proxy names per request) and shows only what that role may do; the database refuses
the rest. It listens on loopback unless --auth is given, and answers only requests addressed to
it: Host localhost, 127.0.0.1, [::1], its listen address, or a name given with --allowed-host
(others get 421, so that no other site's page can reach it by rebinding its name).

Examples:
  leaseq ui
  leaseq ui --listen 127.0.0.1:0
  LEASEQ_UI_AUTH=bearer:s3cret leaseq ui --listen 0.0.0.0:9188 --allowed-host queues.example.com
  (the same over HTTPS: add --tls-cert queues.crt --tls-key queues.key)
  leaseq ui --role-header X-Leaseq-Role --trusted-proxy 127.0.0.1 --hide-payloads";

#[derive(Args)]
struct UiArgs {
    /// Address to serve on (port 0: any free port; the line printed says which).
    #[arg(long, default_value = "127.0.0.1:9188")]
    listen: std::net::SocketAddr,
    /// basic:USER:PASSWORD or bearer:TOKEN, required on every request; needed to listen on a
    /// non-loopback address.
    #[arg(long, env = "LEASEQ_UI_AUTH", hide_env_values = true)]
    auth: Option<credentials::Auth>,
    /// A host name (or address) users open the console with, besides localhost, 127.0.0.1,
    /// [::1] and the listen address; repeat it, or separate names with commas.
    #[arg(
        long,
        value_name = "NAME",
        env = "LEASEQ_UI_ALLOWED_HOSTS",
        value_delimiter = ','
    )]
    allowed_host: Vec<ui::AllowedHost>,
    /// Run each request as the role this header names (SET ROLE for its transaction); requests
    /// without it are refused. Only behind a proxy that sets it (and strips a client's own).
    #[arg(long, value_name = "HEADER")]
    role_header: Option<String>,
    /// Where the proxy that sets --role-header connects from (ADDR or ADDR/BITS; repeat it, or
    /// separate them with commas): nobody else reaches the console.
    #[arg(long, value_name = "ADDR[/BITS]", value_delimiter = ',', value_parser = ui::trusted_proxy)]
    trusted_proxy: Vec<ipnet::IpNet>,
    /// Never show payloads, results or errors.
    #[arg(long)]
    hide_payloads: bool,
    #[command(flatten)]
    tls: https::TlsArgs,
}

const WORK_HELP: &str = "\
Exit codes of CMD:
  0          complete (stdout is the result when it is JSON)
  65         fail without retry: the job goes dead (EX_DATAERR)
  75, other  fail and retry per the queue's backoff (EX_TEMPFAIL); also when killed by a signal
CMD gets the payload JSON on stdin and LEASEQ_JOB_ID, LEASEQ_JOB_KEY (the job's key, which no
other job has even after a failover to an asynchronous standby reissued its id: key idempotency
on it), LEASEQ_ATTEMPT (the fencing generation: pass it downstream), LEASEQ_QUEUE in its
environment, which is the worker's without DATABASE_URL, LEASEQ_UI_AUTH and LEASEQ_METRICS_AUTH
(--pass-env gives one back).

SIGTERM/SIGINT: stop claiming, let running jobs finish for --grace, then exit, leaving
unfinished jobs to their leases. A second signal exits at once. --timeout bounds each run of CMD:
past it, CMD is stopped and the job fails with {\"error\": \"timeout\"}, retried.

Examples:
  leaseq work --queue emails --concurrency 4 -- ./send-email.sh
  leaseq work --queue reports --lease 5m --grace 1m -- python3 report.py";

#[derive(Args)]
struct WorkArgs {
    #[arg(long)]
    queue: String,
    /// Most jobs running at once.
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
    /// Most jobs taken per claim.
    #[arg(long, default_value_t = 10)]
    batch: usize,
    /// Jobs claimed beyond the free slots, waiting for one; handed back unstarted on SIGTERM.
    #[arg(long, default_value_t = 0)]
    prefetch: usize,
    /// Lease per claim (default: the queue's), e.g. 30s, 5m.
    #[arg(long, value_parser = parse_duration)]
    lease: Option<Duration>,
    /// How long running jobs may finish after SIGTERM.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    grace: Duration,
    /// Poll interval when no notification arrives.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    poll: Duration,
    /// Between SIGTERM and SIGKILL when CMD must stop.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    kill_grace: Duration,
    /// How long CMD may run per job (default: no limit), e.g. 10m: past it, it is stopped
    /// (SIGTERM, SIGKILL after --kill-grace) and the job fails with {"error": "timeout"},
    /// retried per the queue's policy.
    #[arg(long, value_parser = parse_duration)]
    timeout: Option<Duration>,
    /// Recorded on each attempt (default: host/pid).
    #[arg(long)]
    worker_id: Option<String>,
    /// One JSON object per log line.
    #[arg(long)]
    json_logs: bool,
    /// Give CMD this secret of the worker's all the same (withheld by default, so that a
    /// program a payload takes over holds no credentials); repeat it for more.
    #[arg(
        long,
        value_name = "NAME",
        value_parser = clap::builder::PossibleValuesParser::new(command::WITHHELD_ENV)
    )]
    pass_env: Vec<String>,
    /// The program to run per job, and its arguments.
    #[arg(last = true, required = true)]
    cmd: Vec<String>,
}

#[derive(Args)]
struct EnqueueArgs {
    #[arg(long)]
    queue: String,
    /// One job with this payload.
    #[arg(long, conflicts_with = "file")]
    json: Option<String>,
    /// NDJSON: one job per line.
    #[arg(long)]
    file: Option<std::path::PathBuf>,
    /// `-`: NDJSON from stdin.
    #[arg(conflicts_with_all = ["json", "file"])]
    stdin: Option<String>,
    /// When the jobs become due (a timestamptz, e.g. '2026-12-01 09:00+00').
    #[arg(long)]
    run_at: Option<String>,
    #[arg(long, default_value_t = 0)]
    priority: i32,
    /// Only with --json: no second live job with this key.
    #[arg(long, requires = "json")]
    dedupe_key: Option<String>,
    #[arg(long, requires = "json")]
    max_attempts: Option<i32>,
    /// Only with --dedupe-key: the key stays taken this long after its job succeeded or went
    /// dead (e.g. 1h; 3650000d for ever).
    #[arg(long, requires = "dedupe_key", value_parser = parse_duration)]
    dedupe_for: Option<Duration>,
    /// Only with --dedupe-key: ignore (the default) or replace — a pending duplicate takes this
    /// payload and --run-at (debounce).
    #[arg(long, requires = "dedupe_key", default_value = "ignore")]
    on_duplicate: OnDuplicate,
    /// Every job's group: at most the queue's --group-concurrency of its jobs run at once, with
    /// 1 in enqueue order (e.g. customer-42).
    #[arg(long)]
    group_key: Option<String>,
    /// Every job waits for these jobs (ids, comma-separated): blocked until all succeeded.
    #[arg(long, value_delimiter = ',', conflicts_with_all = ["dedupe_key", "group_key"])]
    depends_on: Vec<i64>,
    /// With --depends-on: what a job does when a parent goes dead or is cancelled — cancel (the
    /// default), dead, or run anyway.
    #[arg(long, requires = "depends_on", default_value = "cancel")]
    on_parent_failure: ParentFailure,
    /// Only with --json: the producer's W3C traceparent (00-<trace id>-<span id>-<flags>), which
    /// the worker's span for the job joins.
    #[arg(long, requires = "json")]
    trace_context: Option<String>,
}

#[derive(Subcommand)]
enum ScheduleCommand {
    /// Enqueue a job at every tick of a five-field cron expression; replaces NAME if it exists.
    #[command(
        after_help = "Example:\n  leaseq schedule add rollup --queue reports --every '*/5 * * * *' --json '{\"report\": \"rollup\"}'"
    )]
    Add {
        name: String,
        #[arg(long)]
        queue: String,
        /// minute hour day-of-month month day-of-week, e.g. '0 9 * * 1-5'.
        #[arg(long)]
        every: String,
        /// The payload of each tick's job.
        #[arg(long)]
        json: String,
        /// An IANA time zone the expression is read in.
        #[arg(long, default_value = "UTC")]
        timezone: String,
        /// After downtime, enqueue every missed tick, not only the latest.
        #[arg(long)]
        catch_up: bool,
    },
    /// Remove a schedule (jobs already enqueued stay).
    Rm { name: String },
    /// List the schedules, with each one's next tick.
    Ls,
}

#[derive(Subcommand)]
enum QueueCommand {
    /// Create a queue, or replace its settings.
    #[command(
        after_help = "Example:\n  leaseq queue create emails --lease 1m --max-attempts 8 --backoff-base 2s --backoff-cap 10m"
    )]
    Create {
        queue: String,
        #[arg(long, value_parser = parse_duration)]
        lease: Option<Duration>,
        #[arg(long)]
        max_attempts: Option<i32>,
        #[arg(long, value_parser = parse_duration)]
        backoff_base: Option<Duration>,
        #[arg(long, value_parser = parse_duration)]
        backoff_cap: Option<Duration>,
        /// Keep succeeded and cancelled jobs this long (the maintenance worker purges them).
        #[arg(long, value_parser = parse_duration)]
        retain: Option<Duration>,
        /// How many times a job may snooze before it goes dead (default: unlimited).
        #[arg(long)]
        max_snoozes: Option<i32>,
        /// How many jobs of one group (enqueue --group-key) may run at once (default 1: one at a
        /// time, in enqueue order).
        #[arg(long)]
        group_concurrency: Option<i32>,
    },
    /// Give a role (and its members) a privilege on one queue: produce, work (covers produce),
    /// observe or admin (covers all). From its first grant on, the queue is closed to roles
    /// without one (leaseq_admin's members and superusers excepted).
    #[command(after_help = "Example:\n  leaseq queue grant billing billing_app work")]
    Grant {
        queue: String,
        role: String,
        privilege: QueuePrivilege,
    },
    /// Take back a grant. A queue without grants is open to every leaseq group member again.
    Revoke {
        queue: String,
        role: String,
        privilege: QueuePrivilege,
    },
    /// List every per-queue grant.
    Grants,
    /// Stop a queue's claims (they return no jobs) until it is resumed; enqueues still commit
    /// and running jobs finish.
    #[command(after_help = "Example:\n  leaseq queue pause emails")]
    Pause { queue: String },
    /// Let a paused queue's jobs be claimed again.
    #[command(after_help = "Example:\n  leaseq queue resume emails")]
    Resume { queue: String },
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let Some(url) = cli.database_url.clone() else {
        eprintln!("leaseq: set --database-url or DATABASE_URL");
        return ExitCode::from(2);
    };
    // An unknown sslmode or an unreadable sslrootcert, before anything connects.
    if let Err(e) = leaseq_client::tls::check(&url) {
        eprintln!("leaseq: {e}");
        return ExitCode::from(2);
    }
    match run(cli.command, &url).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("leaseq: {}", describe(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}

/// A connection for one command; a failure says where it tried and why (refused, timed out,
/// refused by the server: an unknown database or role, authentication).
async fn connect(url: &str) -> Result<Client, String> {
    Client::connect(url).await.map_err(|e| {
        format!(
            "cannot connect to {}: {}",
            leaseq_client::connect_target(url),
            leaseq_client::describe(&e)
        )
    })
}

/// The server's own message and SQLSTATE for database errors (tokio-postgres prints "db error").
fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    match e.downcast_ref::<tokio_postgres::Error>() {
        Some(e) => leaseq_client::describe(e),
        None => e.to_string(),
    }
}

async fn run(command: Command, url: &str) -> Result<ExitCode, Box<dyn std::error::Error>> {
    match command {
        Command::Work(args) => work(args, url).await,
        Command::Enqueue(args) => enqueue(args, url).await,
        Command::Queue(QueueCommand::Create {
            queue,
            lease,
            max_attempts,
            backoff_base,
            backoff_cap,
            retain,
            max_snoozes,
            group_concurrency,
        }) => {
            let client = connect(url).await?;
            client
                .queue_create(
                    &queue,
                    &QueueSettings {
                        lease,
                        max_attempts,
                        backoff_base,
                        backoff_cap,
                        retain,
                        max_snoozes,
                        group_concurrency,
                    },
                )
                .await?;
            println!("queue {queue} ready");
            Ok(ExitCode::SUCCESS)
        }
        Command::Queue(QueueCommand::Grant {
            queue,
            role,
            privilege,
        }) => {
            let client = connect(url).await?;
            if client.grant(&queue, &role, privilege).await? {
                println!("{role} may now {privilege} on {queue}");
                Ok(ExitCode::SUCCESS)
            } else {
                println!("{role} already held {privilege} on {queue}: nothing changed");
                Ok(ExitCode::from(EXIT_UNCHANGED))
            }
        }
        Command::Queue(QueueCommand::Revoke {
            queue,
            role,
            privilege,
        }) => {
            let client = connect(url).await?;
            if client.revoke(&queue, &role, privilege).await? {
                println!("{role} no longer holds {privilege} on {queue}");
                Ok(ExitCode::SUCCESS)
            } else {
                println!("{role} did not hold {privilege} on {queue}: nothing changed");
                Ok(ExitCode::from(EXIT_UNCHANGED))
            }
        }
        Command::Queue(QueueCommand::Grants) => {
            let client = connect(url).await?;
            print!("{}", present::grants_table(&client.grants().await?));
            Ok(ExitCode::SUCCESS)
        }
        Command::Queue(QueueCommand::Pause { queue }) => {
            let client = connect(url).await?;
            let row = client
                .raw()
                .query_one("SELECT leaseq.queue_pause($1)", &[&queue])
                .await?;
            if row.try_get(0)? {
                println!("queue {queue} paused");
                Ok(ExitCode::SUCCESS)
            } else {
                println!("queue {queue} was already paused: nothing changed");
                Ok(ExitCode::from(EXIT_UNCHANGED))
            }
        }
        Command::Queue(QueueCommand::Resume { queue }) => {
            let client = connect(url).await?;
            let row = client
                .raw()
                .query_one("SELECT leaseq.queue_resume($1)", &[&queue])
                .await?;
            if row.try_get(0)? {
                println!("queue {queue} resumed");
                Ok(ExitCode::SUCCESS)
            } else {
                println!("queue {queue} was not paused: nothing changed");
                Ok(ExitCode::from(EXIT_UNCHANGED))
            }
        }
        Command::Ui(args) => {
            let tls = match args.tls.server_config() {
                Ok(tls) => tls,
                Err(e) => {
                    eprintln!("leaseq ui: {e}");
                    return Ok(ExitCode::from(2));
                }
            };
            let options = ui::Options {
                listen: args.listen,
                auth: args.auth,
                allowed_hosts: args.allowed_host,
                role_header: args.role_header,
                trusted_proxies: args.trusted_proxy,
                hide_payloads: args.hide_payloads,
                tls,
            };
            if let Err(e) = ui::serve(url, options).await {
                eprintln!("leaseq ui: {e}");
                return Ok(ExitCode::from(2));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Metrics {
            listen: None, tls, ..
        } => {
            if tls.tls_cert.is_some() {
                eprintln!("leaseq: --tls-cert and --tls-key serve HTTPS: they need --listen");
                return Ok(ExitCode::from(2));
            }
            print!("{}", connect(url).await?.metrics().await?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Metrics {
            listen: Some(address),
            auth,
            tls,
        } => {
            let tls = match tls.server_config() {
                Ok(tls) => tls,
                Err(e) => {
                    eprintln!("leaseq: {e}");
                    return Ok(ExitCode::from(2));
                }
            };
            scrape::serve(url, address, auth, tls).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Schedule(ScheduleCommand::Add {
            name,
            queue,
            every,
            json,
            timezone,
            catch_up,
        }) => {
            let client = connect(url).await?;
            let first = client
                .schedule(&name, &queue, &every, &json, &timezone, catch_up)
                .await?;
            println!(
                "schedule {name}: first tick {}",
                first.format("%Y-%m-%d %H:%M:%S UTC")
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Schedule(ScheduleCommand::Rm { name }) => {
            let client = connect(url).await?;
            if client.unschedule(&name).await? {
                println!("schedule {name} removed");
                Ok(ExitCode::SUCCESS)
            } else {
                println!("no schedule {name}: nothing changed");
                Ok(ExitCode::from(EXIT_UNCHANGED))
            }
        }
        Command::Schedule(ScheduleCommand::Ls) => {
            let client = connect(url).await?;
            print!("{}", present::schedules_table(&client.schedules().await?));
            Ok(ExitCode::SUCCESS)
        }
        Command::Stats { watch } => {
            let client = connect(url).await?;
            let Some(every) = watch else {
                print!("{}", stats_table(&client).await?);
                return Ok(ExitCode::SUCCESS);
            };
            loop {
                let table = stats_table(&client).await?;
                print!(
                    "\x1b[2J\x1b[H{}  (every {:.1}s; Ctrl-C to stop)\n\n{table}",
                    chrono::DateTime::<chrono::Utc>::from(std::time::SystemTime::now())
                        .format("%Y-%m-%dT%H:%M:%S%.3fZ"),
                    every.as_secs_f64()
                );
                std::io::stdout().flush()?;
                tokio::select! {
                    _ = tokio::time::sleep(every) => {}
                    _ = tokio::signal::ctrl_c() => return Ok(ExitCode::SUCCESS),
                }
            }
        }
        Command::Jobs {
            queue,
            status,
            limit,
        } => {
            let client = connect(url).await?;
            let jobs = client.jobs(&queue, status, limit).await?;
            print!("{}", present::jobs_table(&jobs));
            Ok(ExitCode::SUCCESS)
        }
        Command::Show { job } => {
            let client = connect(url).await?;
            let detail = client.job(job).await?;
            let attempts = client.attempts(job).await?;
            let parents = client.parents(job).await?;
            let children = client.children(job).await?;
            let steps = client.steps(job).await?;
            print!(
                "{}\n{}{}{}",
                present::job_fields(&detail),
                present::attempts_table(&attempts),
                present::family(&parents, &children),
                present::steps_table(&steps)
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Await { jobs, timeout } => {
            let client = connect(url).await?;
            let awaited = client.await_jobs(&jobs, timeout).await?;
            for id in &awaited.unfinished {
                println!("{id}");
            }
            Ok(if awaited.all_final {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(EXIT_UNCHANGED)
            })
        }
        Command::Flow { file } => {
            let text = if file == "-" {
                std::io::read_to_string(std::io::stdin().lock())?
            } else {
                std::fs::read_to_string(&file)?
            };
            let client = connect(url).await?;
            for (key, id) in client.flow_text(&text).await? {
                println!("{key}\t{id}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Redrive { job, queue, all: _ } => {
            let client = connect(url).await?;
            if let Some(queue) = queue {
                let n = client.redrive_all(&queue).await?;
                println!("redrove {n} dead job(s) of {queue}");
                return Ok(if n > 0 {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::from(EXIT_UNCHANGED)
                });
            }
            let job = job.expect("clap requires a job without --all");
            if client.redrive(job).await? {
                println!("job {job} is pending again");
                Ok(ExitCode::SUCCESS)
            } else {
                println!("job {job} is not dead: nothing changed");
                Ok(ExitCode::from(EXIT_UNCHANGED))
            }
        }
        Command::Cancel { job } => {
            let client = connect(url).await?;
            if client.cancel(job).await? {
                println!("job {job} cancelled");
                Ok(ExitCode::SUCCESS)
            } else {
                println!("job {job} had already finished: nothing changed");
                Ok(ExitCode::from(EXIT_UNCHANGED))
            }
        }
    }
}

/// `leaseq stats`' table: the statuses and their counts, read together each time (an
/// `ALTER EXTENSION leaseq UPDATE` during `--watch` may add a status).
async fn stats_table(client: &Client) -> Result<present::Table, Box<dyn std::error::Error>> {
    let counts = match client.counts().await {
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_FUNCTION) => {
            return Err(format!(
                "{}; leaseq stats reads queue_counts(), new in 0.3.0: run ALTER EXTENSION \
                 leaseq UPDATE in this database",
                leaseq_client::describe(&e)
            )
            .into());
        }
        counts => counts?,
    };
    Ok(present::stats_table(&client.statuses().await?, &counts))
}

async fn work(args: WorkArgs, url: &str) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let config = WorkerConfig {
        queue: args.queue,
        worker_id: args.worker_id.unwrap_or_else(default_worker_id),
        concurrency: args.concurrency.max(1),
        batch: args.batch.max(1),
        prefetch: args.prefetch,
        lease: args.lease,
        poll: args.poll,
        grace: args.grace,
        // Room for the programs, told to stop at the end of the grace, to be killed.
        stop_wait: args.kill_grace + Duration::from_secs(1),
        // The handler keeps its own (`--timeout`): it stops the program's whole group, which a
        // dropped handler could not.
        timeout: None,
    };
    log::init(args.json_logs);
    let handler = CommandHandler {
        program: args.cmd[0].clone(),
        args: args.cmd[1..].to_vec(),
        kill_grace: args.kill_grace,
        pass_env: args.pass_env,
        timeout: args.timeout,
    };
    let shutdown = leaseq_client::shutdown_on_signals()?;
    let summary = Worker::new(url, config)
        .run(
            move |job, stop| {
                let handler = handler.clone();
                async move { handler.run(job, stop).await }
            },
            shutdown,
        )
        .await?;
    let _ = summary;
    Ok(ExitCode::SUCCESS)
}

async fn enqueue(args: EnqueueArgs, url: &str) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let client = connect(url).await?;
    if let Some(doc) = args.json {
        let options = EnqueueOptions {
            run_at: args.run_at,
            priority: args.priority,
            dedupe_key: args.dedupe_key,
            max_attempts: args.max_attempts,
            dedupe_for: args.dedupe_for,
            on_duplicate: args.on_duplicate,
            group_key: args.group_key,
            depends_on: args.depends_on,
            on_parent_failure: args.on_parent_failure,
            trace_context: args.trace_context,
        };
        println!("{}", client.enqueue(&args.queue, &doc, &options).await?);
        return Ok(ExitCode::SUCCESS);
    }
    let reader: Box<dyn BufRead> = match (&args.file, args.stdin.as_deref()) {
        (Some(path), _) => Box::new(std::io::BufReader::new(std::fs::File::open(path)?)),
        (None, Some("-")) => Box::new(std::io::stdin().lock()),
        _ => return Err("give --json DOC, --file F or - (NDJSON on stdin)".into()),
    };
    const BATCH: usize = 1000;
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} {pos} jobs enqueued ({per_sec})")
            .expect("valid template"),
    );
    let group_keys = vec![args.group_key.clone(); BATCH];
    // One statement per batch; how many it enqueued.
    let send = async |batch: &[String]| -> Result<u64, leaseq_client::Error> {
        let keys = args.group_key.is_some().then(|| &group_keys[..batch.len()]);
        let ids = if args.depends_on.is_empty() {
            client
                .enqueue_batch_grouped(
                    &args.queue,
                    batch,
                    keys,
                    args.run_at.as_deref(),
                    args.priority,
                )
                .await?
        } else {
            client
                .enqueue_batch_after(
                    &args.queue,
                    batch,
                    &args.depends_on,
                    args.on_parent_failure,
                    args.run_at.as_deref(),
                    args.priority,
                )
                .await?
        };
        Ok(ids.len() as u64)
    };
    let mut batch = Vec::with_capacity(BATCH);
    let mut total = 0u64;
    for line in reader.lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        batch.push(line);
        if batch.len() == BATCH {
            total += send(&batch).await?;
            bar.set_position(total);
            batch.clear();
        }
    }
    if !batch.is_empty() {
        total += send(&batch).await?;
        bar.set_position(total);
    }
    bar.finish_and_clear();
    println!("enqueued {total} job(s) on {}", args.queue);
    Ok(ExitCode::SUCCESS)
}
