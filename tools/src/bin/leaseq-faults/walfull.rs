//! pg_wal on a small filesystem, under the load of load.rs on one server (server.rs):
//!
//! 1. **Full.** A filler file takes every free byte of pg_wal's tmpfs while a ballast writer
//!    drives WAL faster than checkpoints recycle segments: the backend that needs a new segment
//!    PANICs, the crash recovery that follows fails on the same write, and the server stays
//!    down; an operator's start while still full fails the same way. Space returns (the filler
//!    removed), the server is started, and the clients come back on their own.
//! 2. **An abandoned slot.** A physical replication slot nobody consumes holds WAL back: pg_wal
//!    grows with every byte written. With `max_slot_wal_keep_size` (the documented guard) a
//!    checkpoint invalidates the slot (`wal_status = 'lost'`) and pg_wal stays bounded.
//! 3. **A cancelled synchronous commit.** A synchronous standby stalls; a worker's finish (effect
//!    and completion in one transaction) waits for it at commit. `pg_cancel_backend` ends the
//!    wait and the client gets success, `pg_terminate_backend` drops its connection — both
//!    committed on the primary only; a failover then loses them, and the job runs again.
//!
//! Parts 1 and 2 end with the common checks (checks.rs) on the server; part 3 adds its own.
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;
use leaseq_client::client::{EnqueueOptions, QueueSettings};
use leaseq_client::{CancellationToken, Client, Job};
use serde_json::json;
use tokio::task::JoinHandle;
use tokio_postgres::{AsyncMessage, NoTls};

use crate::checks::{self, Check};
use crate::cluster::{Error, lookup_user, signal};
use crate::load::{self, DATABASE, LoadArgs, Seen, Workers, connect, record_fault, writable};
use crate::ops;
use crate::server::{Options, Server, emptied, is_root, owned_dir};

/// pg_wal's filesystem, its segments and the server's WAL settings, in MB: small enough to fill
/// in seconds, large enough for the slot of part 2 to hold `SLOT_HELD_MB` back with room left.
const WAL_FS_MB: u64 = 64;
const SEGMENT_MB: u32 = 1;
const MAX_WAL_MB: i64 = 8;
const MIN_WAL_MB: i64 = 4;
/// Part 2: WAL the slot holds back unguarded, then WAL written under the guard, and the guard;
/// the ballast's pause between its 1 MB statements, so that pg_wal is sampled as it grows
/// (flat out it writes 50 MB/s here, faster than 100 ms samples follow).
const SLOT_HELD_MB: i64 = 32;
const SLOT_BALLAST_PAUSE: Duration = Duration::from_millis(100);
const SLOT_KEEP_MB: i64 = 8;
const SLOT: &str = "faults_abandoned";
/// Part 3's queue: a lease that outlives both interruptions, so that only the failover ends it.
const SYNC_QUEUE: &str = "faults_sync";
const SYNC_LEASE: Duration = Duration::from_secs(8);
const STANDBY: &str = "faults_standby";
const MB: f64 = 1048576.0;

#[derive(Args, Clone)]
pub struct WalFullArgs {
    /// Where the servers, pg_wal's mount, the logs and report.json go (emptied first).
    #[arg(long, default_value = "target/faults/wal-full")]
    dir: PathBuf,
    /// Seconds the filesystem stays full once the server is down (the clients keep trying).
    #[arg(long, default_value_t = 10)]
    full_secs: u64,
    #[command(flatten)]
    load: LoadArgs,
}

pub async fn run(args: WalFullArgs) -> Result<bool, Error> {
    let started = Instant::now();
    let say = |what: &str| eprintln!("[{:6.1}s] {what}", started.elapsed().as_secs_f64());
    let run_as = args.load.run_as.as_deref();
    std::fs::create_dir_all(&args.dir)?;
    let dir = std::fs::canonicalize(&args.dir)?;
    SmallFs::unmount_stale(&dir.join("wal"))?;
    let dir = owned_dir(&emptied(&dir)?, run_as)?;
    let fs = SmallFs::mount(&dir.join("wal"), WAL_FS_MB, run_as)?;
    let server = Server::init(
        &owned_dir(&dir.join("primary"), run_as)?,
        Options {
            run_as: args.load.run_as.clone(),
            wal_dir: Some(fs.path.join("pg_wal")),
            wal_segment_mb: Some(SEGMENT_MB),
            settings: vec![
                format!("max_wal_size={MAX_WAL_MB}MB"),
                format!("min_wal_size={MIN_WAL_MB}MB"),
            ],
            ..Options::default()
        },
    )
    .await?;
    server.start().await?;
    say(&format!(
        "server on 127.0.0.1:{} with pg_wal on a {WAL_FS_MB} MB tmpfs ({SEGMENT_MB} MB segments, \
         max_wal_size {MAX_WAL_MB} MB); producers and workers starting",
        server.port
    ));
    let url = server.url(DATABASE);
    load::setup(&server.url("postgres"), &url, load::TX_LEASE).await?;
    connect(&url, Duration::from_secs(10))
        .await?
        .raw()
        .batch_execute(
            "-- What the ballast writer inserts: WAL faster than the load makes it.
             CREATE TABLE faults.ballast (filler text NOT NULL);",
        )
        .await?;
    let mut workers = args.load.start_workers(&url, &dir)?;
    let producers = args.load.start_producers(&url, &dir)?;
    let mut seen = Seen::default();
    tokio::time::sleep(Duration::from_secs(5)).await;

    say(
        "part 1: a filler takes every free byte of pg_wal's filesystem; a ballast writer drives WAL",
    );
    let full = fill_until_down(
        &server,
        &fs,
        &url,
        Duration::from_secs(args.full_secs),
        &say,
    )
    .await?;
    record_fault(&url, "pg_wal full").await?;
    tokio::time::sleep(Duration::from_secs(5)).await;

    say(&format!(
        "part 2: an abandoned physical slot holds WAL back; {SLOT_HELD_MB} MB written without a guard"
    ));
    let slot = abandoned_slot(&url).await?;
    say(&format!(
        "without a guard pg_wal reached {:.0} MB (slot {}); with max_slot_wal_keep_size = \
         {SLOT_KEEP_MB} MB the slot was lost after {:.1}s and pg_wal peaked at {:.0} MB after",
        slot.unguarded_peak_mb, slot.unguarded_status, slot.seconds_to_lost, slot.guarded_peak_mb
    ));

    load::wind_down(&url, producers, &mut workers, &mut seen, &say).await?;
    let admin = connect(&url, Duration::from_secs(60)).await?;
    let loaded = ops::load(&admin, &dir.join("ops")).await?;
    let mut report = checks::run(
        &admin,
        &workers.names(),
        &seen,
        &[checks::ACKNOWLEDGED, checks::COMMON],
        &[],
    )
    .await?;
    let retries = claim_retries(&admin, &dir, &workers).await?;
    report.extend(full.checks(&retries));
    report.extend(slot.checks());

    say("part 3: a synchronous standby stalls while a worker's finish waits for it");
    let sync = cancelled_sync_commit(&dir, &server, run_as, &say).await?;
    report.extend(sync.checks);

    let ok = checks::print("checked on the server", &report);
    let json = json!({
        "ops_loaded": loaded,
        "full": {
            "filler_mb": full.filler_mb,
            "seconds_to_down": full.seconds_to_down,
            "panic": full.panic,
            "recovery_failed": full.recovery_failed,
            "start_while_full": full.start_while_full,
            "seconds_down": full.seconds_down,
            "seconds_to_start": full.seconds_to_start,
            "worker_claim_retries": retries.count,
            "shortest_longest_retry_pause_s": retries.shortest_longest_pause_s,
        },
        "slot": {
            "max_wal_size_mb": MAX_WAL_MB,
            "max_slot_wal_keep_size_mb": SLOT_KEEP_MB,
            "unguarded_held_mb": slot.unguarded_held_mb,
            "unguarded_pg_wal_peak_mb": slot.unguarded_peak_mb,
            "unguarded_wal_status": slot.unguarded_status,
            "guarded_statuses": slot.guarded_statuses,
            "seconds_to_lost": slot.seconds_to_lost,
            "guarded_pg_wal_peak_after_lost_mb": slot.guarded_peak_mb,
            "samples": "[seconds, MB written since, pg_wal MB, wal_status]",
            "unguarded_samples": slot.unguarded_samples,
            "guarded_samples": slot.guarded_samples,
        },
        "sync": sync.seen,
        "burst_seconds": seen.burst_seconds,
    });
    let path = checks::write_report(&dir, json, &report, ok, started.elapsed().as_secs_f64())?;
    say(&format!("report: {}", path.display()));
    sync.standby.stop().await?;
    drop(server);
    drop(fs);
    Ok(ok)
}

// ---------------------------------------------------------------------------------------------
// Part 1: pg_wal full.

struct Full {
    filler_mb: f64,
    seconds_to_down: f64,
    /// The server log's PANIC and the failed crash recovery's FATAL, as said.
    panic: Option<String>,
    recovery_failed: Option<String>,
    /// What the start attempt while full said (None: it started).
    start_while_full: Option<String>,
    seconds_down: f64,
    seconds_to_start: f64,
}

impl Full {
    fn checks(&self, retries: &Retries) -> Vec<Check> {
        vec![
            Check::figure(
                "pg_wal full: ms from the fill until the server was down",
                (self.seconds_to_down * 1000.0) as i64,
            ),
            Check::figure(
                "pg_wal full: ms the server stayed down",
                (self.seconds_down * 1000.0) as i64,
            ),
            Check::figure(
                "claims the library workers retried while it was down",
                retries.count,
            ),
            Check::zero(
                "server logs without a PANIC on the WAL write",
                i64::from(self.panic.is_none()),
            ),
            Check::zero(
                "server logs without crash recovery failing on the full disk",
                i64::from(self.recovery_failed.is_none()),
            ),
            Check::zero(
                "starts that succeeded while pg_wal was full",
                i64::from(self.start_while_full.is_none()),
            ),
            Check::zero(
                "library workers whose claim retries never backed off to 1 s",
                retries.not_backing_off,
            ),
        ]
    }
}

/// Fills pg_wal's filesystem under load until the server is down, keeps it full for `full`,
/// tries a start, then frees the space and starts the server.
async fn fill_until_down(
    server: &Server,
    fs: &SmallFs,
    url: &str,
    full: Duration,
    say: &impl Fn(&str),
) -> Result<Full, Error> {
    let mark = std::fs::metadata(&server.log)?.len();
    let filling = Arc::new(AtomicBool::new(true));
    let filler = fill(fs.path.join("filler"), filling.clone());
    // Flat out: WAL must outrun the checkpoints that recycle segments.
    let ballast = Ballast::start(url, Duration::ZERO);
    let t0 = Instant::now();
    while server.running().await {
        if t0.elapsed() > Duration::from_secs(120) {
            return Err("the server still ran 120 s after pg_wal's filesystem was filled".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let seconds_to_down = t0.elapsed().as_secs_f64();
    ballast.stop().await;
    let said = said_since(&server.log, mark)?;
    let panic = first_line(&said, "PANIC:", "No space left on device");
    // The crash recovery's own write (its end-of-recovery checkpoint) fails the same way.
    let recovery_failed = said
        .split_once("automatic recovery in progress")
        .and_then(|(_, after)| first_line(after, "FATAL:", "No space left on device"));
    say(&format!(
        "server down {seconds_to_down:.1}s after the fill: {}",
        panic.as_deref().unwrap_or("no PANIC in its log")
    ));
    say(&format!(
        "crash recovery: {}",
        recovery_failed.as_deref().unwrap_or("did not fail")
    ));
    tokio::time::sleep(full).await;

    let mark = std::fs::metadata(&server.log)?.len();
    let start_while_full = match server.start().await {
        Ok(()) => None,
        Err(e) => Some(
            first_line(
                &said_since(&server.log, mark)?,
                "FATAL:",
                "No space left on device",
            )
            .unwrap_or_else(|| e.to_string()),
        ),
    };
    say(&format!(
        "a start while still full: {}",
        start_while_full.as_deref().unwrap_or("started")
    ));
    filling.store(false, Ordering::Relaxed);
    let filled = filler.await??;
    std::fs::remove_file(fs.path.join("filler"))?;
    let seconds_down = t0.elapsed().as_secs_f64() - seconds_to_down;
    let t1 = Instant::now();
    if start_while_full.is_some() {
        server.start().await?;
    }
    writable(url, Duration::from_secs(60)).await?;
    let seconds_to_start = t1.elapsed().as_secs_f64();
    say(&format!(
        "filler removed ({:.0} MB); started, taking writes after {seconds_to_start:.1}s",
        filled as f64 / MB
    ));
    Ok(Full {
        filler_mb: filled as f64 / MB,
        seconds_to_down,
        panic,
        recovery_failed,
        start_while_full,
        seconds_down,
        seconds_to_start,
    })
}

/// Takes every free byte of the filesystem, and every byte freed later (a checkpoint removing
/// segments), until `filling` is cleared; the bytes written. Written, not allocated: tmpfs
/// counts only pages that hold data.
fn fill(path: PathBuf, filling: Arc<AtomicBool>) -> JoinHandle<std::io::Result<u64>> {
    tokio::task::spawn_blocking(move || {
        let mut file = std::fs::File::create(path)?;
        let chunk = vec![0u8; 64 * 1024];
        let mut written = 0u64;
        while filling.load(Ordering::Relaxed) {
            match file.write(&chunk) {
                Ok(n) => written += n as u64,
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(e),
            }
        }
        Ok(written)
    })
}

/// One session inserting 1 MB of rows per statement, `pause` between statements, until stopped
/// or refused, emptying its table now and then so that only WAL grows.
struct Ballast {
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl Ballast {
    fn start(url: &str, pause: Duration) -> Ballast {
        let stop = CancellationToken::new();
        let (url, until) = (url.to_string(), stop.clone());
        let task = tokio::spawn(async move {
            let Ok(client) = Client::connect(&url).await else {
                return;
            };
            for n in 1u64.. {
                let sql = if n.is_multiple_of(16) {
                    "TRUNCATE faults.ballast"
                } else {
                    "INSERT INTO faults.ballast (filler)
                     SELECT repeat('x', 1000) FROM generate_series(1, 1000)"
                };
                if until.is_cancelled() || client.raw().batch_execute(sql).await.is_err() {
                    return;
                }
                tokio::time::sleep(pause).await;
            }
        });
        Ballast { stop, task }
    }

    async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

/// How the library workers retried their claims while the server was down, from their logs
/// (`<time>  WARN leaseq_client::worker: db_error … during="claim"`, one line per failed claim).
struct Retries {
    count: i64,
    /// Of each worker's longest pause between two retries, the shortest, in seconds.
    shortest_longest_pause_s: Option<f64>,
    /// Workers whose longest pause stayed under a second (or that never retried).
    not_backing_off: i64,
}

async fn claim_retries(admin: &Client, dir: &Path, workers: &Workers) -> Result<Retries, Error> {
    let (mut names, mut times) = (Vec::new(), Vec::new());
    for (name, _) in &workers.library {
        for line in std::fs::read_to_string(dir.join(format!("{name}.log")))?.lines() {
            let mut fields = line.split_whitespace();
            if let (Some(at), Some("db_error")) = (fields.next(), fields.nth(2))
                && line.contains(" during=\"claim\" ")
            {
                names.push(name.clone());
                times.push(at.to_string());
            }
        }
    }
    let library: Vec<String> = workers.library.iter().map(|(n, _)| n.clone()).collect();
    // The server does the arithmetic on the workers' own timestamps.
    let row = admin
        .raw()
        .query_one(
            "WITH retry AS (SELECT r.worker, r.at FROM unnest($1::text[], $2::text[]::timestamptz[])
                                                   AS r(worker, at)),
                  pause AS (SELECT retry.worker,
                                   retry.at - lag(retry.at) OVER (PARTITION BY retry.worker
                                                                 ORDER BY retry.at) AS pause
                              FROM retry),
                  longest AS (SELECT w.worker, max(pause.pause) AS pause
                                FROM unnest($3::text[]) AS w(worker)
                                LEFT JOIN pause ON pause.worker = w.worker
                               GROUP BY w.worker)
             SELECT (SELECT count(*) FROM retry),
                    extract(epoch FROM (SELECT min(longest.pause) FROM longest))::float8,
                    (SELECT count(*) FROM longest
                      WHERE longest.pause IS NULL OR longest.pause < interval '1 second')",
            &[&names, &times, &library],
        )
        .await?;
    Ok(Retries {
        count: row.get(0),
        shortest_longest_pause_s: row.get(1),
        not_backing_off: row.get(2),
    })
}

// ---------------------------------------------------------------------------------------------
// Part 2: an abandoned slot.

struct Slot {
    unguarded_held_mb: f64,
    unguarded_peak_mb: f64,
    unguarded_status: String,
    guarded_statuses: Vec<String>,
    seconds_to_lost: f64,
    guarded_peak_mb: f64,
    /// Samples of pg_wal over max_wal_size + max_slot_wal_keep_size once the slot was lost and
    /// max_wal_size more was written.
    guarded_over_bound: i64,
    lost: bool,
    /// Every sample: seconds into its phase, MB written since, pg_wal's MB, the slot's status.
    unguarded_samples: Vec<serde_json::Value>,
    guarded_samples: Vec<serde_json::Value>,
}

impl Slot {
    fn checks(&self) -> Vec<Check> {
        vec![
            Check::figure(
                "slot: pg_wal peak without a guard (MB)",
                self.unguarded_peak_mb.round() as i64,
            ),
            Check::figure(
                "slot: pg_wal peak with the guard, once lost and a checkpoint later (MB)",
                self.guarded_peak_mb.round() as i64,
            ),
            Check::zero(
                "slot held no WAL back without a guard (pg_wal ≤ max_wal_size)",
                i64::from(self.unguarded_peak_mb <= MAX_WAL_MB as f64),
            ),
            Check::zero(
                "slot not lost under max_slot_wal_keep_size",
                i64::from(!self.lost),
            ),
            Check::zero(
                "pg_wal samples over max_wal_size + keep size, a checkpoint after the loss",
                self.guarded_over_bound,
            ),
        ]
    }
}

/// One look at pg_wal and the slot.
struct Sample {
    pg_wal_mb: f64,
    /// WAL written since `since`, in MB.
    written_mb: f64,
    status: String,
}

impl Sample {
    fn json(&self, t0: Instant) -> serde_json::Value {
        let round = |x: f64| (x * 10.0).round() / 10.0;
        json!([
            round(t0.elapsed().as_secs_f64()),
            round(self.written_mb),
            round(self.pg_wal_mb),
            self.status
        ])
    }
}

async fn sample(admin: &Client, since: &str) -> Result<Sample, Error> {
    let row = admin
        .raw()
        .query_one(
            "SELECT (SELECT sum(w.size) FROM pg_ls_waldir() w)::float8 / 1048576,
                    pg_wal_lsn_diff(pg_current_wal_lsn(), $1::text::pg_lsn)::float8 / 1048576,
                    (SELECT s.wal_status FROM pg_replication_slots s WHERE s.slot_name = $2)",
            &[&since, &SLOT],
        )
        .await?;
    Ok(Sample {
        pg_wal_mb: row.get(0),
        written_mb: row.get(1),
        status: row.get(2),
    })
}

/// A slot created with its WAL reserved and never consumed; `SLOT_HELD_MB` written without a
/// guard, then as much with `max_slot_wal_keep_size`, pg_wal sampled every 100 ms throughout.
async fn abandoned_slot(url: &str) -> Result<Slot, Error> {
    let admin = connect(url, Duration::from_secs(10)).await?;
    let created: String = admin
        .raw()
        .query_one(
            "SELECT lsn::text FROM pg_create_physical_replication_slot($1, true)",
            &[&SLOT],
        )
        .await?
        .get(0);
    let ballast = Ballast::start(url, SLOT_BALLAST_PAUSE);
    let t0 = Instant::now();
    let (mut peak, mut last) = (0f64, sample(&admin, &created).await?);
    let mut unguarded_samples = vec![last.json(t0)];
    while last.written_mb < SLOT_HELD_MB as f64 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        last = sample(&admin, &created).await?;
        peak = peak.max(last.pg_wal_mb);
        unguarded_samples.push(last.json(t0));
    }
    ballast.stop().await;
    let (unguarded_held_mb, unguarded_status) = (last.written_mb, last.status.clone());

    // ALTER SYSTEM runs alone: a multi-statement query is one transaction.
    admin
        .raw()
        .batch_execute(&format!(
            "ALTER SYSTEM SET max_slot_wal_keep_size = '{SLOT_KEEP_MB}MB'"
        ))
        .await?;
    admin.raw().batch_execute("SELECT pg_reload_conf()").await?;
    let guarded: String = admin
        .raw()
        .query_one("SELECT pg_current_wal_lsn()::text", &[])
        .await?
        .get(0);
    let ballast = Ballast::start(url, SLOT_BALLAST_PAUSE);
    let t0 = Instant::now();
    let (mut statuses, mut lost_after, mut guarded_peak, mut over) = (Vec::new(), None, 0f64, 0);
    let (mut lost_at_mb, mut guarded_samples) = (None, Vec::new());
    loop {
        let s = sample(&admin, &guarded).await?;
        guarded_samples.push(s.json(t0));
        if statuses.last() != Some(&s.status) {
            statuses.push(s.status.clone());
        }
        if s.status == "lost" {
            lost_after.get_or_insert(t0.elapsed().as_secs_f64());
            // The checkpoint that invalidates the slot removes what it held as it ends: the
            // bound holds from one max_wal_size of WAL on (a checkpoint later).
            let settled = *lost_at_mb.get_or_insert(s.written_mb) + MAX_WAL_MB as f64;
            if s.written_mb >= settled {
                guarded_peak = guarded_peak.max(s.pg_wal_mb);
                over += i64::from(s.pg_wal_mb > (MAX_WAL_MB + SLOT_KEEP_MB) as f64);
            }
        }
        if lost_at_mb.is_some_and(|at| {
            s.written_mb >= (at + 2.0 * MAX_WAL_MB as f64).max(SLOT_HELD_MB as f64)
        }) {
            break;
        }
        if t0.elapsed() > Duration::from_secs(120) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    ballast.stop().await;
    admin
        .raw()
        .batch_execute("ALTER SYSTEM RESET max_slot_wal_keep_size")
        .await?;
    admin
        .raw()
        .batch_execute("SELECT pg_reload_conf(); TRUNCATE faults.ballast")
        .await?;
    admin
        .raw()
        .execute("SELECT pg_drop_replication_slot($1)", &[&SLOT])
        .await?;
    Ok(Slot {
        unguarded_held_mb,
        unguarded_peak_mb: peak,
        unguarded_status,
        guarded_statuses: statuses,
        seconds_to_lost: lost_after.unwrap_or(f64::NAN),
        guarded_peak_mb: guarded_peak,
        guarded_over_bound: over,
        lost: lost_after.is_some(),
        unguarded_samples,
        guarded_samples,
    })
}

// ---------------------------------------------------------------------------------------------
// Part 3: a cancelled synchronous commit.

struct Sync {
    standby: Server,
    checks: Vec<Check>,
    seen: serde_json::Value,
}

/// What a client saw of one finish whose wait for the standby was interrupted.
struct Interrupted {
    job: Job,
    /// load::finish_on's label: `ok`, `unknown`…
    outcome: &'static str,
    error: Option<String>,
    /// Every notice the server sent on the connection (the leaseq client drops them).
    notices: Vec<String>,
    closed: bool,
}

impl Interrupted {
    fn json(&self, how: &str) -> serde_json::Value {
        json!({"interrupted_by": how, "job_id": self.job.id, "client_saw": self.outcome,
               "error": self.error, "notices": self.notices, "connection_closed": self.closed})
    }
}

/// A standby of `primary`, made synchronous; two jobs claimed; the standby's walreceiver
/// stopped; one finish's wait cancelled, another's backend terminated; both checked on each
/// server; then a failover to the standby and each job run again.
async fn cancelled_sync_commit(
    dir: &Path,
    primary: &Server,
    run_as: Option<&str>,
    say: &impl Fn(&str),
) -> Result<Sync, Error> {
    let standby = Server::standby(
        &owned_dir(&dir.join("standby"), run_as)?,
        primary,
        Options {
            run_as: run_as.map(String::from),
            settings: vec![format!("cluster_name={STANDBY}")],
            ..Options::default()
        },
    )
    .await?;
    standby.start().await?;
    let url = primary.url(DATABASE);
    let admin = connect(&url, Duration::from_secs(10)).await?;
    // Named after the copy: the standby's own configuration must not wait for itself.
    admin
        .raw()
        .batch_execute(&format!(
            "ALTER SYSTEM SET synchronous_standby_names = '{STANDBY}'"
        ))
        .await?;
    admin.raw().batch_execute("SELECT pg_reload_conf()").await?;
    let on = &admin;
    wait_for(
        Duration::from_secs(60),
        "the standby to be synchronous",
        move || async move {
            let row = on
                .raw()
                .query_one(
                    "SELECT count(*) FROM pg_stat_replication
                  WHERE application_name = $1 AND state = 'streaming' AND sync_state = 'sync'",
                    &[&STANDBY],
                )
                .await?;
            Ok(row.get::<_, i64>(0) == 1)
        },
    )
    .await?;
    let settings = QueueSettings {
        lease: Some(SYNC_LEASE),
        backoff_base: Some(Duration::from_millis(100)),
        backoff_cap: Some(Duration::from_secs(1)),
        ..QueueSettings::default()
    };
    admin.queue_create(SYNC_QUEUE, &settings).await?;
    for op in ["sync-cancel", "sync-terminate"] {
        let payload = json!({ "op": op }).to_string();
        admin
            .enqueue(SYNC_QUEUE, &payload, &EnqueueOptions::default())
            .await?;
    }
    let mut claimed = admin.claim(SYNC_QUEUE, "driver", 2, None).await?;
    claimed.sort_by_key(|j| j.id);
    let [first, second]: [Job; 2] = claimed
        .try_into()
        .map_err(|_| "the two jobs of part 3 were not both claimed")?;

    let standby_url = standby.url(DATABASE);
    let on_standby = connect(&standby_url, Duration::from_secs(10)).await?;
    let receiver: i32 = on_standby
        .raw()
        .query_one("SELECT pid FROM pg_stat_wal_receiver", &[])
        .await?
        .get(0);
    signal(receiver as u32, libc::SIGSTOP);
    say(&format!(
        "standby synchronous; its walreceiver (pid {receiver}) stopped; two finishes wait for it"
    ));
    let cancelled = interrupt(&url, &admin, first, Interruption::Cancel).await?;
    say(&format!(
        "pg_cancel_backend: the client saw {} ({}); notices: {:?}",
        cancelled.outcome,
        cancelled.error.as_deref().unwrap_or("no error"),
        cancelled.notices
    ));
    let terminated = interrupt(&url, &admin, second, Interruption::Terminate).await?;
    say(&format!(
        "pg_terminate_backend: the client saw {} ({}); notices: {:?}",
        terminated.outcome,
        terminated.error.as_deref().unwrap_or("no error"),
        terminated.notices
    ));
    let tokens = [&cancelled.job, &terminated.job];
    let on_primary = finalized(&admin, &tokens).await?;
    // What the standby has, replayed to the last byte it wrote before it stopped.
    let on = &on_standby;
    wait_for(
        Duration::from_secs(30),
        "the standby to replay what it received",
        move || async move {
            let row = on
                .raw()
                .query_one(
                    "SELECT pg_last_wal_replay_lsn() = pg_last_wal_receive_lsn()",
                    &[],
                )
                .await?;
            Ok(row.get::<_, Option<bool>>(0) == Some(true))
        },
    )
    .await?;
    let before_failover = finalized(&on_standby, &tokens).await?;
    say(&format!(
        "finalized on the primary: {on_primary} of 2; on the standby: {before_failover} of 2"
    ));

    // The failover: the primary dies; what the stalled walreceiver had not written dies with it.
    primary.crash().await?;
    signal(receiver as u32, libc::SIGKILL);
    let target = standby_url.as_str();
    wait_for(
        Duration::from_secs(60),
        "the standby to take queries again",
        move || async move { Ok(Client::connect(target).await.is_ok()) },
    )
    .await?;
    standby.promote().await?;
    writable(&standby_url, Duration::from_secs(60)).await?;
    let promoted = connect(&standby_url, Duration::from_secs(10)).await?;
    let after_failover = finalized(&promoted, &tokens).await?;
    let acknowledged: Vec<&Job> = [&cancelled, &terminated]
        .into_iter()
        .filter(|i| i.outcome == "ok")
        .map(|i| &i.job)
        .collect();
    let acknowledged_lost = acknowledged.len() as i64 - finalized(&promoted, &acknowledged).await?;
    say(&format!(
        "failover: the standby promoted; {after_failover} of the 2 finishes on it; the jobs run again after their lease"
    ));
    let t0 = Instant::now();
    let mut rerun = 0;
    let mut pg = connect(&standby_url, Duration::from_secs(10)).await?;
    while rerun < 2 {
        if t0.elapsed() > SYNC_LEASE + Duration::from_secs(30) {
            return Err("part 3's jobs did not come back after their lease".into());
        }
        for job in pg.claim(SYNC_QUEUE, "driver", 2, None).await? {
            load::finish_on(pg.pg(), "driver", &job)
                .await
                .map_err(|(_, e)| e)?;
            rerun += 1;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let (run_again, effects) = rerun_checks(&promoted).await?;
    let checks = vec![
        Check::figure(
            "sync: finishes the client saw succeed, lost by the failover",
            acknowledged_lost,
        ),
        Check::zero(
            "sync: cancelled waits the client saw fail",
            i64::from(cancelled.outcome != "ok"),
        ),
        Check::zero(
            "sync: cancelled waits without the server's warning",
            i64::from(
                !cancelled
                    .notices
                    .iter()
                    .any(|n| n.contains("canceling wait for synchronous replication")),
            ),
        ),
        Check::zero(
            "sync: terminated waits the client saw acknowledged",
            i64::from(terminated.outcome == "ok"),
        ),
        Check::zero(
            "sync: interrupted finishes not committed on the primary",
            2 - on_primary,
        ),
        Check::zero(
            "sync: interrupted finishes on the standby before the failover",
            before_failover,
        ),
        Check::zero(
            "sync: interrupted finishes kept by the failover",
            after_failover,
        ),
        Check::zero(
            "sync: their jobs not run again to success after the lease",
            2 - run_again,
        ),
        Check::zero(
            "sync: their jobs without exactly one effect, the rerun's",
            2 - effects,
        ),
    ];
    Ok(Sync {
        standby,
        checks,
        seen: json!([
            cancelled.json("pg_cancel_backend"),
            terminated.json("pg_terminate_backend")
        ]),
    })
}

#[derive(Clone, Copy)]
enum Interruption {
    Cancel,
    Terminate,
}

/// Runs the Worker handler's finish (load::finish_on) for `job` on a connection of its own that
/// keeps the server's notices, interrupts it while it waits for the standby, and says what the
/// client got.
async fn interrupt(
    url: &str,
    admin: &Client,
    job: Job,
    how: Interruption,
) -> Result<Interrupted, Error> {
    let application = format!("faults_finish_{}", job.id);
    let mut config: tokio_postgres::Config = url.parse()?;
    config.application_name(&application);
    let (mut pg, mut connection) = config.connect(NoTls).await?;
    let notices = Arc::new(Mutex::new(Vec::new()));
    let heard = notices.clone();
    tokio::spawn(async move {
        while let Some(Ok(message)) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            if let AsyncMessage::Notice(n) = message {
                heard.lock().expect("notices").push(format!(
                    "{}: {} ({})",
                    n.severity(),
                    n.message(),
                    n.detail().unwrap_or("")
                ));
            }
        }
    });
    let finishing = tokio::spawn(async move {
        let finished = load::finish_on(&mut pg, "driver", &job).await;
        (finished, pg.is_closed(), job)
    });
    let end = Instant::now() + Duration::from_secs(10);
    let pid = loop {
        let row = admin
            .raw()
            .query_opt(
                "SELECT pid FROM pg_stat_activity
                  WHERE application_name = $1 AND wait_event = 'SyncRep'",
                &[&application],
            )
            .await?;
        if let Some(row) = row {
            break row.get::<_, i32>(0);
        }
        if Instant::now() > end {
            return Err("the finish did not wait for the standby within 10 s".into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let sql = match how {
        Interruption::Cancel => "SELECT pg_cancel_backend($1)",
        Interruption::Terminate => "SELECT pg_terminate_backend($1)",
    };
    admin.raw().execute(sql, &[&pid]).await?;
    let (finished, closed, job) = tokio::time::timeout(Duration::from_secs(10), finishing)
        .await
        .map_err(|_| "the interrupted finish never answered")??;
    // The notices came before the answer on the connection, and were taken off it first.
    let (outcome, error) = match finished {
        Ok(outcome) => (outcome, None),
        Err((outcome, e)) => (outcome, Some(leaseq_client::client::describe(&e))),
    };
    let notices = notices.lock().expect("notices").clone();
    Ok(Interrupted {
        job,
        outcome,
        error,
        notices,
        closed,
    })
}

/// How many of `jobs` this server holds as finished by their claim: the attempt succeeded under
/// its token, with its effect.
async fn finalized(on: &Client, jobs: &[&Job]) -> Result<i64, Error> {
    let (ids, tokens): (Vec<i64>, Vec<_>) = jobs.iter().map(|j| (j.id, j.lease_token)).unzip();
    let row = on
        .raw()
        .query_one(
            "SELECT count(*) FROM unnest($1::bigint[], $2::uuid[]) AS claimed(job_id, lease_token)
               JOIN leaseq.attempts a
                 ON a.job_id = claimed.job_id AND a.lease_token = claimed.lease_token
              WHERE a.outcome = 'succeeded'
                AND EXISTS (SELECT FROM faults.effects e
                             WHERE e.job_id = a.job_id AND e.attempt_no = a.attempt_no)",
            &[&ids, &tokens],
        )
        .await?;
    Ok(row.get(0))
}

/// Of part 3's jobs on the promoted standby: how many succeeded on a later attempt after their
/// first ended by its lease, and how many have exactly one effect, that attempt's.
async fn rerun_checks(promoted: &Client) -> Result<(i64, i64), Error> {
    let row = promoted
        .raw()
        .query_one(
            "SELECT count(*) FILTER (WHERE j.status = 'succeeded' AND EXISTS (
                        SELECT FROM leaseq.attempts a
                         WHERE a.job_id = j.id AND a.attempt_no = 1
                           AND a.outcome = 'lease_expired')),
                    count(*) FILTER (WHERE (SELECT count(*) FROM faults.effects e
                                             WHERE e.job_id = j.id) = 1
                                       AND EXISTS (SELECT FROM faults.effects e
                                                     JOIN leaseq.attempts a
                                                       ON a.job_id = e.job_id
                                                      AND a.attempt_no = e.attempt_no
                                                    WHERE e.job_id = j.id
                                                      AND a.outcome = 'succeeded'))
               FROM leaseq.jobs j WHERE j.queue = $1",
            &[&SYNC_QUEUE],
        )
        .await?;
    Ok((row.get(0), row.get(1)))
}

// ---------------------------------------------------------------------------------------------
// The small filesystem, and helpers.

/// A tmpfs of `mb` MB at `path`, the servers' user's; unmounted when dropped — after a failed
/// run too, so that no mount outlives the run.
struct SmallFs {
    path: PathBuf,
}

impl SmallFs {
    fn mount(path: &Path, mb: u64, run_as: Option<&str>) -> Result<SmallFs, Error> {
        std::fs::create_dir_all(path)?;
        let mut options = format!("size={mb}M,mode=0700");
        if let Some(user) = run_as.filter(|u| !u.is_empty() && is_root()) {
            let (uid, gid) = lookup_user(user)?;
            options.push_str(&format!(",uid={uid},gid={gid}"));
        }
        run_command(
            "mount",
            &["-t", "tmpfs", "-o", &options, "leaseq-faults-wal"],
            path,
        )?;
        Ok(SmallFs {
            path: path.to_path_buf(),
        })
    }

    /// A mount left at `path` by a run that was killed: detached, so the directory can go.
    fn unmount_stale(path: &Path) -> Result<(), Error> {
        let mounts = std::fs::read_to_string("/proc/self/mounts")?;
        let wanted = path.display().to_string();
        if mounts
            .lines()
            .any(|m| m.split_whitespace().nth(1) == Some(wanted.as_str()))
        {
            run_command("umount", &["-l"], path)?;
        }
        Ok(())
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        // A server sent SIGQUIT a moment ago may still hold files here: a few tries, then a
        // lazy unmount (detached now, freed when the last file closes).
        for _ in 0..50 {
            if run_command("umount", &[], &self.path).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        if let Err(e) = run_command("umount", &["-l"], &self.path) {
            eprintln!(
                "leaseq-faults: could not unmount {}: {e}",
                self.path.display()
            );
        }
    }
}

fn run_command(program: &str, args: &[&str], path: &Path) -> Result<(), Error> {
    let output = std::process::Command::new(program)
        .args(args)
        .arg(path)
        .output()?;
    if !output.status.success() {
        return Err(format!(
            "{program} {} {}: {}",
            args.join(" "),
            path.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        )
        .into());
    }
    Ok(())
}

/// What the server logged after byte `mark` of its log.
fn said_since(log: &Path, mark: u64) -> Result<String, Error> {
    let all = std::fs::read(log)?;
    Ok(String::from_utf8_lossy(&all[(mark as usize).min(all.len())..]).into_owned())
}

/// The first line of `text` with `severity` and `containing`, from its severity on.
fn first_line(text: &str, severity: &str, containing: &str) -> Option<String> {
    text.lines()
        .find(|l| l.contains(severity) && l.contains(containing))
        .map(|l| l[l.find(severity).unwrap_or(0)..].to_string())
}

/// Polls `done` every 100 ms until it answers true; `what` names it in the error after `limit`.
async fn wait_for<F, Fut>(limit: Duration, what: &str, mut done: F) -> Result<(), Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool, Error>>,
{
    let end = Instant::now() + limit;
    loop {
        if done().await? {
            return Ok(());
        }
        if Instant::now() > end {
            return Err(format!("timed out after {limit:?} waiting for {what}").into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
