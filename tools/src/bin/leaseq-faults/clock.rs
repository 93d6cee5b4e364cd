//! The server's clock stepped under load (load.rs on one server, server.rs), with libfaketime:
//! preloaded into every server process, its offset read from a file at every clock call
//! (`FAKETIME_NO_CACHE`), so that writing the file steps the clock of running backends and of
//! the maintenance worker at once. The monotonic clock stays real
//! (`FAKETIME_DONT_FAKE_MONOTONIC`): PostgreSQL times its waits with it.
//!
//! 1. **The step is real.** Before any load, one backend reads `clock_timestamp()` on both sides
//!    of a step while its statement waits on a lock across it: the wall clock moves by the step,
//!    EXPLAIN ANALYZE's timer (the monotonic clock) only by the real wait.
//! 2. **Forward** by more than every lease of the run: each lease held expires at once on the
//!    server's clock, is reclaimed, and its holder's finish is refused — a probe lease taken by
//!    the driver just before is refused at once, reclaimed or not.
//! 3. **Back** to the real time: leases granted meanwhile last the step longer (a probe lease is
//!    measured), nothing finalizes twice, and every job still ends final.
//!
//! Then the common checks (checks.rs) and the clock's own. The common "overlapping live leases"
//! compares attempt times across the steps and still holds: an attempt starts only once the
//! server's clock has passed its job's `run_at`, which is never before the last attempt's end.
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Args;
use leaseq_client::client::{EnqueueOptions, QueueSettings};
use leaseq_client::{Client, Job};
use serde_json::json;
use tokio_postgres::SimpleQueryMessage;

use crate::checks::{self, Check};
use crate::cluster::Error;
use crate::load::{self, CMD_QUEUE, DATABASE, LoadArgs, Seen, TX_QUEUE, connect, record_fault};
use crate::ops;
use crate::server::{Options, Server, emptied, owned_dir};

const FAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
/// The driver's probe leases, in a queue no worker claims.
const PROBE_QUEUE: &str = "faults_probe";
const PROBE_LEASE: Duration = load::TX_LEASE;

#[derive(Args, Clone)]
pub struct ClockArgs {
    /// Where the server, the logs and report.json go (emptied first).
    #[arg(long, default_value = "target/faults/clock")]
    dir: PathBuf,
    /// The step, in seconds: forward by it, then back. More than every lease of the run (4 s
    /// and 30 s), so that every lease held at the forward step expires.
    #[arg(long, default_value_t = 35)]
    step_secs: u64,
    /// Seconds of load at the stepped clock before stepping back.
    #[arg(long, default_value_t = 5)]
    hold_secs: u64,
    #[command(flatten)]
    load: LoadArgs,
}

pub async fn run(args: ClockArgs) -> Result<bool, Error> {
    let started = Instant::now();
    let say = |what: &str| eprintln!("[{:6.1}s] {what}", started.elapsed().as_secs_f64());
    let run_as = args.load.run_as.as_deref();
    let step = Duration::from_secs(args.step_secs);
    let dir = owned_dir(&emptied(&args.dir)?, run_as)?;
    let offset = Offset::create(&dir.join("faketime"))?;
    let offset_file = offset.path.display().to_string();
    let env = [
        ("LD_PRELOAD", FAKETIME),
        ("FAKETIME_TIMESTAMP_FILE", offset_file.as_str()),
        ("FAKETIME_NO_CACHE", "1"),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
    ];
    let server = Server::init(
        &owned_dir(&dir.join("server"), run_as)?,
        Options {
            run_as: args.load.run_as.clone(),
            env: env.map(|(k, v)| (k.to_string(), v.to_string())).to_vec(),
            ..Options::default()
        },
    )
    .await?;
    server.start().await?;
    say(&format!(
        "server on 127.0.0.1:{} under libfaketime, its offset in {}",
        server.port,
        offset.path.display()
    ));

    let seen_step = step_seen(&server.url("postgres"), &offset, step).await?;
    say(&format!(
        "a backend across a {}s step: clock_timestamp() moved {:.2}s in {:.2}s; EXPLAIN ANALYZE \
         (monotonic) timed its {:.2}s wait at {:.2}s",
        step.as_secs(),
        seen_step.wall_s,
        seen_step.real_s,
        seen_step.blocked_s,
        seen_step.monotonic_s
    ));

    let url = server.url(DATABASE);
    load::setup(&server.url("postgres"), &url, load::TX_LEASE).await?;
    let admin = connect(&url, Duration::from_secs(10)).await?;
    admin
        .raw()
        .batch_execute(
            "-- The leases held when the clock stepped forward, and until when they ran then.
             CREATE TABLE faults.held (job_id bigint NOT NULL, lease_token uuid NOT NULL,
                                       lease_expires_at timestamptz NOT NULL);",
        )
        .await?;
    let settings = QueueSettings {
        lease: Some(PROBE_LEASE),
        max_attempts: Some(1000),
        backoff_base: Some(Duration::from_millis(100)),
        backoff_cap: Some(Duration::from_millis(100)),
        ..QueueSettings::default()
    };
    admin.queue_create(PROBE_QUEUE, &settings).await?;
    admin
        .enqueue(PROBE_QUEUE, "{}", &EnqueueOptions::default())
        .await?;
    let mut workers = args.load.start_workers(&url, &dir)?;
    let producers = args.load.start_producers(&url, &dir)?;
    let mut seen = Seen::default();
    tokio::time::sleep(Duration::from_secs(5)).await;

    let probe = claim_probe(&admin).await?;
    let held: u64 = admin
        .raw()
        .execute(
            "INSERT INTO faults.held (job_id, lease_token, lease_expires_at)
             SELECT j.id, j.lease_token, j.lease_expires_at FROM leaseq.jobs j
              WHERE j.queue IN ($1, $2) AND j.status = 'running'",
            &[&TX_QUEUE, &CMD_QUEUE],
        )
        .await?;
    offset.set(step.as_secs() as i64)?;
    let t_forward = Instant::now();
    // At once, before the maintenance worker's next look: refused on the lease's end alone.
    let probe_accepted = admin.complete(&probe, None).await?;
    record_fault(&url, "clock stepped forward").await?;
    say(&format!(
        "clock +{}s while {held} leases were held; the probe's finish right after: {}",
        step.as_secs(),
        if probe_accepted {
            "ACCEPTED"
        } else {
            "refused"
        }
    ));
    wait_reclaimed(&admin, &probe, Duration::from_secs(30)).await?;
    let probe_reclaimed_s = t_forward.elapsed().as_secs_f64();
    wait_held_closed(&admin, Duration::from_secs(30)).await?;
    let held_closed_s = t_forward.elapsed().as_secs_f64();
    say(&format!(
        "the probe's lease reclaimed {probe_reclaimed_s:.2}s after the step, every held lease \
         closed after {held_closed_s:.2}s; holding the clock {}s",
        args.hold_secs
    ));
    tokio::time::sleep(Duration::from_secs(args.hold_secs)).await;

    let probe = claim_probe(&admin).await?;
    offset.set(0)?;
    let t_back = Instant::now();
    let left: f64 = admin
        .raw()
        .query_one(
            "SELECT extract(epoch FROM j.lease_expires_at - clock_timestamp())::float8
               FROM leaseq.jobs j WHERE j.id = $1 AND j.lease_token = $2",
            &[&probe.id, &probe.lease_token],
        )
        .await?
        .get(0);
    record_fault(&url, "clock stepped back").await?;
    say(&format!(
        "clock back {}s; a {}s lease granted just before has {left:.1}s left on the server's clock",
        step.as_secs(),
        PROBE_LEASE.as_secs()
    ));
    wait_reclaimed(&admin, &probe, step + PROBE_LEASE + Duration::from_secs(30)).await?;
    let lasted = t_back.elapsed().as_secs_f64();
    say(&format!(
        "it was reclaimed {lasted:.1}s after the step back"
    ));

    load::wind_down(&url, producers, &mut workers, &mut seen, &say).await?;
    let loaded = ops::load(&admin, &dir.join("ops")).await?;
    let mut report = checks::run(
        &admin,
        &workers.names(),
        &seen,
        &[checks::ACKNOWLEDGED, checks::COMMON],
        &[],
    )
    .await?;
    for (name, sql) in HELD {
        report.push(Check::figure(name, checks::count(&admin, sql).await?));
    }
    report.push(Check::figure(
        "ms from the forward step until every held lease was closed",
        (held_closed_s * 1000.0) as i64,
    ));
    report.push(Check::figure(
        "ms a 4 s lease granted before the back step lasted",
        (lasted * 1000.0) as i64,
    ));
    report.push(Check::zero(
        "backends that did not see the step (clock_timestamp)",
        i64::from((seen_step.wall_s - seen_step.real_s - step.as_secs_f64()).abs() > 0.5),
    ));
    report.push(Check::zero(
        "monotonic clocks stepped with the wall clock (EXPLAIN ANALYZE)",
        i64::from(seen_step.monotonic_s > seen_step.blocked_s + step.as_secs_f64() / 2.0),
    ));
    for (name, sql) in STEPPED {
        report.push(Check::zero(name, checks::count(&admin, sql).await?));
    }
    report.push(Check::zero(
        "probe finishes accepted after the forward step",
        i64::from(probe_accepted),
    ));
    // Reclaimed before the lease's end on the server's clock would be a second live owner.
    report.push(Check::zero(
        "probe leases reclaimed before their end on the server's clock",
        i64::from(lasted < left - 0.5),
    ));
    let ok = checks::print("checked on the server", &report);
    let json = json!({
        "ops_loaded": loaded,
        "step_seconds": step.as_secs(),
        "step_seen": {
            "clock_timestamp_moved_s": seen_step.wall_s,
            "real_s": seen_step.real_s,
            "blocked_s": seen_step.blocked_s,
            "explain_analyze_s": seen_step.monotonic_s,
        },
        "forward": {
            "leases_held": held,
            "probe_finish_accepted": probe_accepted,
            "probe_reclaimed_after_s": probe_reclaimed_s,
            "held_closed_after_s": held_closed_s,
        },
        "back": {"probe_lease_left_s": left, "probe_lease_lasted_s": lasted},
        "burst_seconds": seen.burst_seconds,
    });
    let path = checks::write_report(&dir, json, &report, ok, started.elapsed().as_secs_f64())?;
    say(&format!("report: {}", path.display()));
    server.stop().await?;
    Ok(ok)
}

/// Figures on the leases held at the forward step (`faults.held`).
const HELD: &[(&str, &str)] = &[
    (
        "leases held at the forward step",
        "SELECT count(*) FROM faults.held",
    ),
    (
        "  of them reclaimed (expired by the step)",
        "SELECT count(*) FROM faults.held h JOIN leaseq.attempts a
             ON a.job_id = h.job_id AND a.lease_token = h.lease_token
          WHERE a.outcome = 'lease_expired'",
    ),
    (
        "  of them, finishes refused",
        "SELECT count(*) FROM faults.held h JOIN faults.ops o
             ON o.job_id = h.job_id AND o.lease_token = h.lease_token
          WHERE o.kind = 'finish' AND o.outcome = 'refused'",
    ),
];

/// Counts that must be zero under a stepped clock.
const STEPPED: &[(&str, &str)] = &[
    (
        "finishes accepted after their lease was reclaimed",
        "SELECT (SELECT count(*) FROM faults.effects e JOIN leaseq.attempts a
                     ON a.job_id = e.job_id AND a.attempt_no = e.attempt_no
                  WHERE a.outcome <> 'succeeded')
              + (SELECT count(*) FROM faults.ops o JOIN leaseq.attempts a
                     ON a.job_id = o.job_id AND a.lease_token = o.lease_token
                  WHERE o.kind = 'finish' AND o.outcome = 'ok' AND a.outcome = 'lease_expired')",
    ),
    (
        "finishes accepted after their lease ended on the server's clock",
        "SELECT count(*) FROM faults.held h JOIN leaseq.attempts a
             ON a.job_id = h.job_id AND a.lease_token = h.lease_token
          WHERE a.outcome = 'succeeded' AND a.ended_at > h.lease_expires_at",
    ),
];

/// The offset file libfaketime reads at every clock call.
struct Offset {
    path: PathBuf,
}

impl Offset {
    fn create(path: &Path) -> Result<Offset, Error> {
        let offset = Offset {
            path: path.to_path_buf(),
        };
        offset.set(0)?;
        Ok(offset)
    }

    /// The server's clock `seconds` from the real time from now on. Renamed into place: a
    /// backend never reads a half-written offset.
    fn set(&self, seconds: i64) -> Result<(), Error> {
        let next = self.path.with_extension("next");
        std::fs::write(&next, format!("{seconds:+}\n"))?;
        std::fs::rename(&next, &self.path)?;
        Ok(())
    }
}

/// What one backend saw of a step taken while its statement waited on a lock.
struct StepSeen {
    /// clock_timestamp() after the statement minus before it.
    wall_s: f64,
    /// The real time between those two reads, on our clock.
    real_s: f64,
    /// How long the statement really waited, and how long EXPLAIN ANALYZE (the monotonic clock)
    /// says it ran.
    blocked_s: f64,
    monotonic_s: f64,
}

/// Steps the clock by `step` while a backend waits on an advisory lock, then back (no lease is
/// held yet).
async fn step_seen(url: &str, offset: &Offset, step: Duration) -> Result<StepSeen, Error> {
    let holder = Client::connect(url).await?;
    holder
        .raw()
        .batch_execute("SELECT pg_advisory_lock(25)")
        .await?;
    let waiter = Client::connect(url).await?;
    let epoch = "SELECT extract(epoch FROM clock_timestamp())::float8";
    let before: f64 = waiter.raw().query_one(epoch, &[]).await?.get(0);
    let t0 = Instant::now();
    let waiting = tokio::spawn(async move {
        let plan = waiter
            .raw()
            .simple_query("EXPLAIN (ANALYZE, FORMAT JSON) SELECT pg_advisory_lock(25)")
            .await?;
        let after: f64 = waiter.raw().query_one(epoch, &[]).await?.get(0);
        Ok::<_, Error>((plan, after))
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    offset.set(step.as_secs() as i64)?;
    tokio::time::sleep(Duration::from_millis(700)).await;
    let t1 = Instant::now();
    holder
        .raw()
        .batch_execute("SELECT pg_advisory_unlock(25)")
        .await?;
    let (plan, after) = waiting.await??;
    let real_s = t0.elapsed().as_secs_f64();
    offset.set(0)?;
    let plan = plan
        .iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(row) => row.get(0).map(String::from),
            _ => None,
        })
        .ok_or("EXPLAIN returned no plan")?;
    let plan: serde_json::Value = serde_json::from_str(&plan)?;
    let monotonic_ms = plan[0]["Execution Time"]
        .as_f64()
        .ok_or("EXPLAIN ANALYZE gave no execution time")?;
    Ok(StepSeen {
        wall_s: after - before,
        real_s,
        blocked_s: (t1 - t0).as_secs_f64(),
        monotonic_s: monotonic_ms / 1000.0,
    })
}

/// The probe job, claimed by the driver (a lease nobody renews).
async fn claim_probe(admin: &Client) -> Result<Job, Error> {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(job) = admin.claim(PROBE_QUEUE, "probe", 1, None).await?.pop() {
            return Ok(job);
        }
        if Instant::now() > end {
            return Err("the probe job was not claimable within 10 s".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until `probe`'s lease is no longer its job's live lease.
async fn wait_reclaimed(admin: &Client, probe: &Job, limit: Duration) -> Result<(), Error> {
    let end = Instant::now() + limit;
    loop {
        let live: bool = admin
            .raw()
            .query_one(
                "SELECT EXISTS (SELECT FROM leaseq.jobs j WHERE j.id = $1 AND j.lease_token = $2
                                   AND j.status = 'running')",
                &[&probe.id, &probe.lease_token],
            )
            .await?
            .get(0);
        if !live {
            return Ok(());
        }
        if Instant::now() > end {
            return Err(format!("the probe's lease was not reclaimed in {limit:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until no lease held at the forward step is still its job's live lease.
async fn wait_held_closed(admin: &Client, limit: Duration) -> Result<(), Error> {
    let end = Instant::now() + limit;
    loop {
        let live = checks::count(
            admin,
            "SELECT count(*) FROM faults.held h JOIN leaseq.jobs j
                ON j.id = h.job_id AND j.lease_token = h.lease_token AND j.status = 'running'",
        )
        .await?;
        if live == 0 {
            return Ok(());
        }
        if Instant::now() > end {
            return Err(
                format!("{live} leases held at the step were still live after {limit:?}").into(),
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
