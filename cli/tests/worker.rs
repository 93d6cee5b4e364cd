//! `leaseq work` as real processes against a live cluster: kills, pauses, signals, restarts; the
//! other commands, the metrics, and the maintenance worker (the library's own Worker:
//! client/tests/library.rs).
//! Needs `LEASEQ_TEST_DATABASE_URL`; the restart test also `LEASEQ_TEST_PGDATA` (and
//! `LEASEQ_TEST_RUN_AS` when the server runs as another OS user). scripts/test sets them all and
//! runs these tests one at a time (one of them restarts the server).
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use postgres::{Client, NoTls};

fn url() -> String {
    std::env::var("LEASEQ_TEST_DATABASE_URL")
        .expect("LEASEQ_TEST_DATABASE_URL must name a database with leaseq installed")
}

fn db() -> Client {
    Client::connect(&url(), NoTls).expect("connect to the test cluster")
}

/// A scratch directory for one test: handler scripts, effects, worker logs.
fn scratch(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("leaseq-worker-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn new_queue(db: &mut Client, prefix: &str, settings: &str) -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let name = format!(
        "{prefix}_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let comma = if settings.is_empty() { "" } else { ", " };
    db.batch_execute(&format!(
        "SELECT leaseq.queue_create('{name}'{comma}{settings})"
    ))
    .unwrap();
    name
}

fn enqueue(db: &mut Client, queue: &str, payload: &str) -> i64 {
    db.query_one(
        "SELECT leaseq.queue_enqueue($1, $2::text::jsonb)",
        &[&queue, &payload],
    )
    .unwrap()
    .get(0)
}

/// A bash handler script in `dir`.
fn script(dir: &Path, body: &str) -> PathBuf {
    let path = dir.join("handler.sh");
    std::fs::write(&path, format!("#!/usr/bin/env bash\nset -u\n{body}\n")).unwrap();
    Command::new("chmod").arg("+x").arg(&path).status().unwrap();
    path
}

/// A running `leaseq work` process, its stderr (the log) in a file.
struct WorkerProcess {
    child: Child,
    log: PathBuf,
}

impl WorkerProcess {
    fn start(queue: &str, dir: &Path, name: &str, args: &[&str], handler: &Path) -> WorkerProcess {
        WorkerProcess::start_on(&url(), queue, dir, name, args, handler)
    }

    fn start_on(
        database: &str,
        queue: &str,
        dir: &Path,
        name: &str,
        args: &[&str],
        handler: &Path,
    ) -> WorkerProcess {
        let log = dir.join(format!("{name}.log"));
        let child = Command::new(env!("CARGO_BIN_EXE_leaseq"))
            .args(["work", "--queue", queue, "--worker-id", name])
            .args(args)
            .arg("--")
            .arg(handler)
            .env("DATABASE_URL", database)
            .env("EFFECTS", dir.join("effects"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start leaseq work");
        WorkerProcess { child, log }
    }

    fn signal(&self, signal: i32) {
        // SAFETY: signals our own child process.
        assert_eq!(unsafe { libc::kill(self.child.id() as i32, signal) }, 0);
    }

    /// Waits for exit up to `limit`; the exit code, or `None` if it is still running.
    fn wait_for_exit(&mut self, limit: Duration) -> Option<i32> {
        let until = Instant::now() + limit;
        while Instant::now() < until {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status.code().unwrap_or(-1));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `query` (one boolean) until it is true, for at most `limit`.
fn eventually(
    db: &mut Client,
    limit: Duration,
    query: &str,
    params: &[&(dyn postgres::types::ToSql + Sync)],
) -> bool {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if db.query_one(query, params).unwrap().get::<_, bool>(0) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    false
}

fn history(db: &mut Client, job: i64) -> Vec<String> {
    db.query(
        "SELECT attempt_no || ':' || outcome || ':' || worker FROM leaseq.queue_attempts($1)",
        &[&job],
    )
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

fn effects(dir: &Path) -> Vec<String> {
    let mut lines: Vec<String> = std::fs::read_to_string(dir.join("effects"))
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect();
    lines.sort();
    lines
}

const LONG: Duration = Duration::from_secs(30);

#[test]
fn exit_codes_map_to_outcomes_as_documented() {
    let mut db = db();
    let queue = new_queue(
        &mut db,
        "exits",
        "max_attempts => 5, backoff_base => '1 hour', backoff_cap => '1 hour'",
    );
    let dir = scratch("exits");
    // The payload says how to exit; stdout echoes the job's environment.
    let handler = script(
        &dir,
        r#"payload=$(cat)
code=$(sed -E 's/.*"exit": *([0-9]+).*/\1/' <<<"$payload")
echo "something went wrong for $LEASEQ_JOB_ID" >&2
case "$payload" in
  *plain*) echo "not json"; exit 0 ;;
  *snooze*) echo "waiting for the upstream report"; echo 2h; exit 76 ;;
  *signal*) kill -9 $$ ;;
esac
printf '{"job": %s, "key": "%s", "attempt": %s, "queue": "%s"}\n' "$LEASEQ_JOB_ID" "$LEASEQ_JOB_KEY" "$LEASEQ_ATTEMPT" "$LEASEQ_QUEUE"
exit "$code""#,
    );
    let ok = enqueue(&mut db, &queue, r#"{"exit": 0}"#);
    let plain = enqueue(&mut db, &queue, r#"{"exit": 0, "plain": true}"#);
    let permanent = enqueue(&mut db, &queue, r#"{"exit": 65}"#);
    let tempfail = enqueue(&mut db, &queue, r#"{"exit": 75}"#);
    let other = enqueue(&mut db, &queue, r#"{"exit": 3}"#);
    let killed = enqueue(&mut db, &queue, r#"{"exit": 0, "signal": true}"#);
    let snoozed = enqueue(&mut db, &queue, r#"{"exit": 76, "snooze": true}"#);
    let mut worker = WorkerProcess::start(&queue, &dir, "w", &["--concurrency", "3"], &handler);
    assert!(
        eventually(
            &mut db,
            LONG,
            "SELECT count(*) = 7 FROM leaseq.attempts a JOIN leaseq.jobs j ON j.id = a.job_id WHERE j.queue = $1 AND a.outcome <> 'running'",
            &[&queue]
        ),
        "all seven jobs ran once; log:\n{}",
        worker.log()
    );
    worker.signal(libc::SIGTERM);
    assert_eq!(worker.wait_for_exit(LONG), Some(0));

    let row = |db: &mut Client, id: i64| {
        db.query_one(
            "SELECT status::text, result::text, last_error->>'exit_code', last_error->>'signal', last_error->>'stderr'
               FROM leaseq.queue_job($1)",
            &[&id],
        )
        .unwrap()
    };
    let r = row(&mut db, ok);
    assert_eq!(r.get::<_, String>(0), "succeeded");
    let enqueued_us: i64 = db
        .query_one(
            "SELECT (extract(epoch FROM created_at) * 1000000)::bigint FROM leaseq.jobs WHERE id = $1",
            &[&ok],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        r.get::<_, String>(1),
        format!(
            r#"{{"job": {ok}, "key": "{ok}-{enqueued_us}", "queue": "{queue}", "attempt": 1}}"#
        ),
        "stdout JSON is the result; the key is the id and the enqueue's microsecond"
    );
    let r = db
        .query_one(
            "SELECT status::text, attempts, snoozes,
                    run_at BETWEEN clock_timestamp() + interval '119 minutes'
                               AND clock_timestamp() + interval '2 hours'
               FROM leaseq.queue_job($1)",
            &[&snoozed],
        )
        .unwrap();
    assert_eq!(
        (
            r.get::<_, String>(0),
            r.get::<_, i32>(1),
            r.get::<_, i32>(2),
            r.get::<_, bool>(3)
        ),
        ("pending".into(), 0, 1, true),
        "exit 76 snoozes for the duration on stdout's last line, the budget kept"
    );
    let r = row(&mut db, plain);
    assert_eq!(
        (r.get::<_, String>(0), r.get::<_, Option<String>>(1)),
        ("succeeded".into(), None),
        "non-JSON stdout is no result"
    );
    let r = row(&mut db, permanent);
    assert_eq!(
        (r.get::<_, String>(0), r.get::<_, Option<String>>(2)),
        ("dead".into(), Some("65".into()))
    );
    assert_eq!(
        r.get::<_, Option<String>>(4),
        Some(format!("something went wrong for {permanent}")),
        "stderr's tail is the error"
    );
    for (id, code) in [(tempfail, "75"), (other, "3")] {
        let r = row(&mut db, id);
        assert_eq!(
            (r.get::<_, String>(0), r.get::<_, Option<String>>(2)),
            ("pending".into(), Some(code.into())),
            "retried later"
        );
    }
    let r = row(&mut db, killed);
    assert_eq!(
        (r.get::<_, String>(0), r.get::<_, Option<String>>(3)),
        ("pending".into(), Some("9".into())),
        "killed by a signal: retried"
    );
}

/// `--timeout` bounds each run of the program: past it the program's whole group is stopped
/// (SIGTERM, then SIGKILL after `--kill-grace` for one that ignores it), its job fails with
/// `{"error": "timeout"}` for a retry by the queue's policy, and the worker goes on.
#[test]
fn a_program_past_its_timeout_is_stopped_with_what_it_started_and_its_job_retried() {
    let mut db = db();
    let queue = new_queue(
        &mut db,
        "timeout",
        "backoff_base => '1 hour', backoff_cap => '1 hour'",
    );
    let dir = scratch("timeout");
    let handler = script(
        &dir,
        r#"case "$(cat)" in
  *hang*) trap '' TERM; sleep 600 & echo $! > "$EFFECTS.child"; wait ;;
esac"#,
    );
    let hung = enqueue(&mut db, &queue, r#"{"hang": true}"#);
    let started = Instant::now();
    let mut w = WorkerProcess::start(
        &queue,
        &dir,
        "w",
        &["--timeout", "1s", "--kill-grace", "1s"],
        &handler,
    );
    assert!(
        eventually(
            &mut db,
            LONG,
            "SELECT count(*) = 1 FROM leaseq.attempts WHERE job_id = $1 AND outcome = 'failed'",
            &[&hung]
        ),
        "log:\n{}",
        w.log()
    );
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "the program had its second, then its kill grace"
    );
    let r = db
        .query_one(
            "SELECT status::text, last_error->>'error', last_error->>'message', last_error->>'signal'
               FROM leaseq.queue_job($1)",
            &[&hung],
        )
        .unwrap();
    assert_eq!(
        (
            r.get::<_, String>(0),
            r.get::<_, Option<String>>(1),
            r.get::<_, Option<String>>(2),
            r.get::<_, Option<String>>(3),
        ),
        (
            "pending".into(),
            Some("timeout".into()),
            Some("the program ran past its timeout of 1.000 s".into()),
            Some("9".into())
        ),
        "failed for a retry, killed after ignoring SIGTERM"
    );
    let child: i32 = std::fs::read_to_string(dir.join("effects.child"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // Running: its /proc entry is there and not a zombie's (which waits for whoever reaps it).
    let running = || {
        std::fs::read_to_string(format!("/proc/{child}/stat")).is_ok_and(|stat| {
            stat.rsplit_once(") ")
                .is_some_and(|(_, rest)| !rest.starts_with('Z'))
        })
    };
    let deadline = Instant::now() + LONG;
    while running() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!running(), "what the program started was stopped with it");
    let next = enqueue(&mut db, &queue, "{}");
    assert!(
        eventually(
            &mut db,
            LONG,
            "SELECT status = 'succeeded' FROM leaseq.queue_job($1)",
            &[&next]
        ),
        "the worker went on; log:\n{}",
        w.log()
    );
    w.signal(libc::SIGTERM);
    assert_eq!(w.wait_for_exit(LONG), Some(0));
}

#[test]
fn a_worker_killed_mid_job_loses_nothing() {
    let mut db = db();
    let queue = new_queue(
        &mut db,
        "sigkill",
        "lease => '1 second', backoff_base => '10 ms', backoff_cap => '10 ms'",
    );
    let dir = scratch("sigkill");
    // The effect is written only after the work: a worker killed mid-job leaves none.
    let handler = script(
        &dir,
        r#"cat >/dev/null; sleep 2; echo "$LEASEQ_JOB_ID:$LEASEQ_ATTEMPT" >> "$EFFECTS""#,
    );
    let job = enqueue(&mut db, &queue, "{}");
    let mut a = WorkerProcess::start(&queue, &dir, "a", &[], &handler);
    assert!(eventually(
        &mut db,
        LONG,
        "SELECT status = 'running' FROM leaseq.queue_job($1)",
        &[&job]
    ));
    a.signal(libc::SIGKILL);
    a.wait_for_exit(LONG);

    let mut b = WorkerProcess::start(&queue, &dir, "b", &[], &handler);
    assert!(
        eventually(
            &mut db,
            LONG,
            "SELECT status = 'succeeded' FROM leaseq.queue_job($1)",
            &[&job]
        ),
        "reclaimed after its lease and finished; b's log:\n{}",
        b.log()
    );
    b.signal(libc::SIGTERM);
    assert_eq!(b.wait_for_exit(LONG), Some(0));
    assert_eq!(
        history(&mut db, job),
        vec!["1:lease_expired:a", "2:succeeded:b"]
    );
    std::thread::sleep(Duration::from_millis(2500)); // long enough for a surviving child to write
    assert_eq!(
        effects(&dir),
        vec![format!("{job}:2")],
        "the killed worker's program died with it"
    );
}

#[test]
fn a_paused_worker_cannot_finalize_and_its_program_is_stopped() {
    let mut db = db();
    let queue = new_queue(
        &mut db,
        "sigstop",
        "lease => '1 second', backoff_base => '10 ms', backoff_cap => '10 ms'",
    );
    let dir = scratch("sigstop");
    // Attempt 1 is slow (it will be stopped); later attempts are quick.
    let handler = script(
        &dir,
        r#"cat >/dev/null
if [ "$LEASEQ_ATTEMPT" = 1 ]; then sleep 8; else sleep 0.2; fi
echo "$LEASEQ_JOB_ID:$LEASEQ_ATTEMPT" >> "$EFFECTS""#,
    );
    let job = enqueue(&mut db, &queue, "{}");
    let mut a = WorkerProcess::start(&queue, &dir, "a", &[], &handler);
    assert!(eventually(
        &mut db,
        LONG,
        "SELECT status = 'running' FROM leaseq.queue_job($1)",
        &[&job]
    ));
    a.signal(libc::SIGSTOP); // a zombie worker: alive, holding a token, not renewing

    let mut b = WorkerProcess::start(&queue, &dir, "b", &[], &handler);
    assert!(
        eventually(
            &mut db,
            LONG,
            "SELECT status = 'succeeded' FROM leaseq.queue_job($1)",
            &[&job]
        ),
        "b reclaims and finishes; b's log:\n{}",
        b.log()
    );
    a.signal(libc::SIGCONT);
    let deadline = Instant::now() + LONG;
    while !a.log().contains("lease_lost") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        a.log().contains(&format!("lease_lost queue=\"{queue}\""))
            && a.log().contains(&format!("job_id={job} attempt=1")),
        "a learns it lost the lease:\n{}",
        a.log()
    );
    a.signal(libc::SIGTERM);
    b.signal(libc::SIGTERM);
    assert_eq!(a.wait_for_exit(LONG), Some(0));
    assert_eq!(b.wait_for_exit(LONG), Some(0));
    assert!(
        a.log()
            .contains("claimed=1 completed=0 failed=0 finished_by_handler=0 lease_lost=1"),
        "a never finalizes:\n{}",
        a.log()
    );
    assert_eq!(
        history(&mut db, job),
        vec!["1:lease_expired:a", "2:succeeded:b"]
    );
    std::thread::sleep(Duration::from_secs(8)); // past attempt 1's sleep: had it survived, it wrote
    assert_eq!(
        effects(&dir),
        vec![format!("{job}:2")],
        "a's program was stopped before its effect"
    );
}

#[test]
fn sigterm_drains_running_jobs_within_grace_and_claims_nothing_new() {
    let mut db = db();
    let queue = new_queue(&mut db, "drain", "");
    let dir = scratch("drain");
    let handler = script(&dir, r#"cat >/dev/null; sleep 1.5; echo done"#);
    let first = enqueue(&mut db, &queue, "{}");
    let second = enqueue(&mut db, &queue, "{}");
    let mut w = WorkerProcess::start(
        &queue,
        &dir,
        "w",
        &["--concurrency", "2", "--grace", "20s"],
        &handler,
    );
    assert!(eventually(
        &mut db,
        LONG,
        "SELECT count(*) = 2 FROM leaseq.queue_jobs($1, 'running')",
        &[&queue]
    ));
    w.signal(libc::SIGTERM);
    let late = enqueue(&mut db, &queue, "{}");
    assert_eq!(
        w.wait_for_exit(LONG),
        Some(0),
        "drained and exited; log:\n{}",
        w.log()
    );
    for id in [first, second] {
        let status: String = db
            .query_one("SELECT status::text FROM leaseq.queue_job($1)", &[&id])
            .unwrap()
            .get(0);
        assert_eq!(
            status, "succeeded",
            "a running job finished during the grace"
        );
    }
    let status: String = db
        .query_one("SELECT status::text FROM leaseq.queue_job($1)", &[&late])
        .unwrap()
        .get(0);
    assert_eq!(status, "pending", "nothing is claimed after SIGTERM");
}

#[test]
fn sigterm_past_the_grace_leaves_unfinished_jobs_to_their_lease() {
    let mut db = db();
    let queue = new_queue(&mut db, "grace", "lease => '1 minute'");
    let dir = scratch("grace");
    let handler = script(&dir, r#"cat >/dev/null; sleep 60"#);
    let job = enqueue(&mut db, &queue, "{}");
    let mut w = WorkerProcess::start(
        &queue,
        &dir,
        "w",
        &["--grace", "500ms", "--kill-grace", "500ms"],
        &handler,
    );
    assert!(eventually(
        &mut db,
        LONG,
        "SELECT status = 'running' FROM leaseq.queue_job($1)",
        &[&job]
    ));
    w.signal(libc::SIGTERM);
    assert_eq!(w.wait_for_exit(LONG), Some(0), "log:\n{}", w.log());
    assert!(
        w.log()
            .contains(&format!("abandoned queue=\"{queue}\" worker="))
            && w.log().contains(&format!("job_id={job}")),
        "log:\n{}",
        w.log()
    );
    let row = db
        .query_one("SELECT j.status::text, a.outcome::text FROM leaseq.queue_job($1) j, leaseq.queue_attempts($1) a", &[&job])
        .unwrap();
    assert_eq!(
        (row.get::<_, String>(0), row.get::<_, String>(1)),
        ("running".into(), "running".into()),
        "not finished to exit cleanly: its lease decides"
    );
}

#[test]
fn a_second_signal_exits_at_once() {
    let mut db = db();
    let queue = new_queue(&mut db, "twice", "");
    let dir = scratch("twice");
    let handler = script(&dir, r#"cat >/dev/null; sleep 60"#);
    let job = enqueue(&mut db, &queue, "{}");
    let mut w = WorkerProcess::start(&queue, &dir, "w", &["--grace", "5m"], &handler);
    assert!(eventually(
        &mut db,
        LONG,
        "SELECT status = 'running' FROM leaseq.queue_job($1)",
        &[&job]
    ));
    w.signal(libc::SIGTERM);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        w.wait_for_exit(Duration::from_millis(10)),
        None,
        "the first signal drains (grace 5 min)"
    );
    w.signal(libc::SIGINT);
    assert_eq!(w.wait_for_exit(LONG), Some(130));
}

/// `--concurrency 3`: at most three handlers run at once (each marks itself running in a file
/// while it works), and at most six jobs are held at once — three running, three being finished.
#[test]
fn handlers_never_exceed_the_concurrency_nor_held_jobs_twice_it() {
    let mut db = db();
    let queue = new_queue(&mut db, "slots", "");
    let dir = scratch("slots");
    let running = dir.join("running");
    std::fs::create_dir_all(&running).unwrap();
    let handler = script(
        &dir,
        &format!(
            r#"cat >/dev/null; touch {r}/$$; sleep 0.3; rm {r}/$$"#,
            r = running.display()
        ),
    );
    db.execute(
        "SELECT leaseq.queue_enqueue_batch($1, ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 24)))",
        &[&queue],
    )
    .unwrap();
    let mut w = WorkerProcess::start(
        &queue,
        &dir,
        "w",
        &["--concurrency", "3", "--batch", "10"],
        &handler,
    );
    let (mut most_handlers, mut most_held) = (0usize, 0i64);
    let until = Instant::now() + LONG;
    loop {
        let row = db
            .query_one(
                "SELECT running, succeeded FROM leaseq.queue_stats() WHERE queue = $1",
                &[&queue],
            )
            .unwrap();
        most_held = most_held.max(row.get(0));
        most_handlers = most_handlers.max(std::fs::read_dir(&running).unwrap().count());
        if row.get::<_, i64>(1) == 24 || Instant::now() > until {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    w.signal(libc::SIGTERM);
    assert_eq!(w.wait_for_exit(LONG), Some(0));
    let succeeded: i64 = db
        .query_one(
            "SELECT succeeded FROM leaseq.queue_stats() WHERE queue = $1",
            &[&queue],
        )
        .unwrap()
        .get(0);
    assert_eq!(succeeded, 24);
    assert!(
        most_handlers <= 3,
        "{most_handlers} handlers ran at once with --concurrency 3"
    );
    assert_eq!(most_handlers, 3, "the slots were all used");
    assert!(
        most_held <= 6,
        "{most_held} jobs were held at once with --concurrency 3"
    );
}

#[test]
fn a_notification_wakes_an_idle_worker_long_before_its_poll() {
    let mut db = db();
    let queue = new_queue(&mut db, "notify", "");
    let dir = scratch("notify");
    let handler = script(&dir, r#"cat >/dev/null"#);
    let mut w = WorkerProcess::start(&queue, &dir, "w", &["--poll", "10m"], &handler);
    let deadline = Instant::now() + LONG;
    while !w.log().contains("started") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500)); // its first claim found nothing: now idle
    let enqueued = Instant::now();
    let job = enqueue(&mut db, &queue, "{}");
    // With a 10-minute poll, only the NOTIFY can have woken it within 30 s.
    assert!(
        eventually(
            &mut db,
            LONG,
            "SELECT status = 'succeeded' FROM leaseq.queue_job($1)",
            &[&job]
        ),
        "log:\n{}",
        w.log()
    );
    eprintln!(
        "enqueue → completed took {:?} with a 10-minute poll",
        enqueued.elapsed()
    );
    w.signal(libc::SIGTERM);
    assert_eq!(w.wait_for_exit(LONG), Some(0));
}

#[test]
fn an_idle_worker_whose_connections_are_cut_listens_again_long_before_its_poll() {
    let mut db = db();
    let queue = new_queue(&mut db, "relisten", "");
    let dir = scratch("relisten");
    let handler = script(&dir, r#"cat >/dev/null"#);
    // Its own application_name: the sessions watched and cut are this worker's, never those
    // of an earlier test still closing.
    let url = format!("{}?application_name={queue}", url());
    let mut w = WorkerProcess::start_on(&url, &queue, &dir, "w", &["--poll", "10m"], &handler);
    // A session of the worker's, idle after a claim, but for those of `$2` (pids).
    let idle_after_a_claim = "SELECT count(*) > 0 FROM pg_stat_activity
                               WHERE application_name = $1 AND state = 'idle'
                                 AND query LIKE '%leaseq.queue_claim%' AND pid <> ALL ($2)";
    let none: Vec<i32> = Vec::new();
    assert!(
        eventually(&mut db, LONG, idle_after_a_claim, &[&queue, &none]),
        "log:\n{}",
        w.log()
    );
    // As a failover does: every session of the idle worker ends, and nothing tells it. (Told
    // apart by pid: it connects again within milliseconds, before this statement has ended.)
    let cut: Vec<i32> = db
        .query_one(
            "SELECT array_agg(pid) FILTER (WHERE pg_terminate_backend(pid))
               FROM pg_stat_activity WHERE application_name = $1",
            &[&queue],
        )
        .unwrap()
        .get(0);
    assert!(!cut.is_empty());
    assert!(
        eventually(&mut db, LONG, idle_after_a_claim, &[&queue, &cut]),
        "the worker connected and claimed again at once, not at its poll; log:\n{}",
        w.log()
    );
    let job = enqueue(&mut db, &queue, "{}");
    // With a 10-minute poll, only a NOTIFY on the new connection can have woken it.
    assert!(
        eventually(
            &mut db,
            LONG,
            "SELECT status = 'succeeded' FROM leaseq.queue_job($1)",
            &[&job]
        ),
        "log:\n{}",
        w.log()
    );
    w.signal(libc::SIGTERM);
    assert_eq!(w.wait_for_exit(LONG), Some(0));
}

#[test]
fn a_restarted_database_is_survived() {
    let mut db = db();
    let queue = new_queue(
        &mut db,
        "restart",
        "lease => '20 seconds', backoff_base => '10 ms', backoff_cap => '50 ms'",
    );
    let dir = scratch("restart");
    let handler = script(&dir, r#"cat >/dev/null; sleep 0.1"#);
    db.execute(
        "SELECT leaseq.queue_enqueue_batch($1, ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 60)))",
        &[&queue],
    )
    .unwrap();
    let mut w = WorkerProcess::start(
        &queue,
        &dir,
        "w",
        &["--concurrency", "2", "--poll", "200ms"],
        &handler,
    );
    assert!(eventually(
        &mut db,
        LONG,
        "SELECT succeeded >= 10 FROM leaseq.queue_stats() WHERE queue = $1",
        &[&queue]
    ));
    drop(db);
    restart_server();
    let mut db = reconnect();
    assert!(
        eventually(
            &mut db,
            Duration::from_secs(90),
            "SELECT succeeded = 60 FROM leaseq.queue_stats() WHERE queue = $1",
            &[&queue]
        ),
        "every job finished after the restart; log:\n{}",
        w.log()
    );
    assert!(
        w.log().contains("db_error"),
        "the worker did see the outage:\n{}",
        w.log()
    );
    w.signal(libc::SIGTERM);
    assert_eq!(w.wait_for_exit(LONG), Some(0));
    let dead: i64 = db
        .query_one(
            "SELECT dead FROM leaseq.queue_stats() WHERE queue = $1",
            &[&queue],
        )
        .unwrap()
        .get(0);
    assert_eq!(dead, 0);
}

/// `pg_ctl restart -m immediate`: a crash and recovery, as the server's own OS user.
fn restart_server() {
    let pgdata =
        std::env::var("LEASEQ_TEST_PGDATA").expect("LEASEQ_TEST_PGDATA names the test cluster");
    let pg_ctl = "/usr/lib/postgresql/15/bin/pg_ctl";
    let mut command = match std::env::var("LEASEQ_TEST_RUN_AS") {
        Ok(user) if !user.is_empty() => {
            let mut c = Command::new("sudo");
            c.args(["-u", &user, pg_ctl]);
            c
        }
        _ => Command::new(pg_ctl),
    };
    // The log goes where start_cluster sent it (pg_ctl forgets it across a restart).
    let log = format!("{pgdata}/../server.log");
    let status = command
        .args([
            "-D",
            &pgdata,
            "-l",
            &log,
            "-m",
            "immediate",
            "-w",
            "-t",
            "60",
            "restart",
        ])
        .stdout(Stdio::null())
        .status()
        .expect("run pg_ctl");
    assert!(status.success(), "pg_ctl restart");
}

fn reconnect() -> Client {
    reconnect_to(&url())
}

/// The read-only views decode every column into its type, and `leaseq jobs` and `leaseq show`
/// print them: a payload's 20-digit number keeps every digit on the way out.
#[tokio::test]
async fn jobs_and_show_decode_and_print_every_column() {
    use leaseq_client::client::QueueSettings;
    use leaseq_client::{AttemptOutcome, Client as Leaseq, EnqueueOptions, JobStatus};

    let client = Leaseq::connect(&url()).await.unwrap();
    let queue = format!("inspect_{}", std::process::id());
    let settings = QueueSettings {
        max_attempts: Some(1),
        ..Default::default()
    };
    client.queue_create(&queue, &settings).await.unwrap();
    let payload = r#"{"n": 12345678901234567890, "s": "é"}"#;
    let options = EnqueueOptions {
        priority: 2,
        dedupe_key: Some("inspect-1".into()),
        ..Default::default()
    };
    let id = client.enqueue(&queue, payload, &options).await.unwrap();
    let claimed = client.claim(&queue, "w-inspect", 1, None).await.unwrap();
    assert_eq!(claimed.len(), 1);
    let error = r#"{"error": "invalid"}"#;
    assert_eq!(
        client
            .fail(&claimed[0], Some(error), false, None)
            .await
            .unwrap()
            .as_deref(),
        Some("dead")
    );

    let job = client.job(id).await.unwrap();
    assert_eq!(
        (job.id, job.queue.as_str(), job.status, job.priority),
        (id, queue.as_str(), JobStatus::Dead, 2)
    );
    assert_eq!((job.attempts, job.max_attempts), (1, 1));
    assert_eq!(job.dedupe_key.as_deref(), Some("inspect-1"));
    assert_eq!(job.payload.get(), payload, "jsonb's own text, every digit");
    assert!(job.result.is_none());
    assert_eq!(job.last_error.as_ref().map(|e| e.get()), Some(error));
    assert!(job.lease_expires_at.is_none());
    assert!(job.finished_at.is_some_and(|f| f >= job.created_at));

    let dead = client
        .jobs(&queue, Some(JobStatus::Dead), 10)
        .await
        .unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!((dead[0].id, dead[0].status), (id, JobStatus::Dead));
    assert_eq!(dead[0].last_error.as_ref().map(|e| e.get()), Some(error));
    let pending = client.jobs(&queue, Some(JobStatus::Pending), 10);
    assert!(pending.await.unwrap().is_empty());

    let attempts = client.attempts(id).await.unwrap();
    assert_eq!(attempts.len(), 1);
    let attempt = &attempts[0];
    assert_eq!(
        (attempt.attempt_no, attempt.worker.as_str(), attempt.outcome),
        (1, "w-inspect", AttemptOutcome::Failed)
    );
    assert!(
        attempt
            .duration()
            .is_some_and(|d| d >= chrono::TimeDelta::zero())
    );
    assert_eq!(attempt.error.as_ref().map(|e| e.get()), Some(error));

    let cli = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_leaseq"))
            .args(args)
            .env("DATABASE_URL", url())
            .output()
            .unwrap()
    };
    let show = cli(&["show", &id.to_string()]);
    assert!(show.status.success(), "{show:?}");
    let show = String::from_utf8(show.stdout).unwrap();
    assert!(show.contains("\n          status  dead\n"), "{show}");
    assert!(
        show.contains(&format!("\n         payload  {payload}\n")),
        "{show}"
    );
    assert!(show.contains("\n      dedupe_key  inspect-1\n"), "{show}");
    assert!(show.contains("\n          result  -\n"), "{show}");
    assert!(
        show.contains("\nattempt_no  worker     outcome  started "),
        "{show}"
    );
    let jobs = cli(&["jobs", "--queue", &queue, "--status", "dead"]);
    assert!(jobs.status.success(), "{jobs:?}");
    let jobs = String::from_utf8(jobs.stdout).unwrap();
    let lines: Vec<&str> = jobs.lines().collect();
    assert_eq!(lines.len(), 2, "{jobs}");
    assert!(
        lines[0].starts_with("job_id  status  priority  run_at "),
        "{jobs}"
    );
    assert!(
        lines[1].contains(" dead  ") && lines[1].contains(" 1/1 "),
        "{jobs}"
    );
    assert!(lines[1].ends_with(error), "{jobs}");
    let unknown = cli(&["jobs", "--queue", &queue, "--status", "paused"]);
    assert_eq!(
        unknown.status.code(),
        Some(2),
        "an unknown status is a usage error"
    );
}

/// A worker whose role may not use leaseq stops at its first claim and says what the server
/// refused, with the SQLSTATE — not tokio-postgres's bare "db error".
#[test]
fn a_worker_without_privileges_says_what_the_server_refused() {
    let mut db = db();
    let queue = new_queue(&mut db, "unprivileged", "");
    let role = format!("leaseq_test_nobody_{}", std::process::id());
    db.batch_execute(&format!(
        "DROP ROLE IF EXISTS {role}; CREATE ROLE {role} LOGIN"
    ))
    .unwrap();
    let as_role = url_as(&role);

    let worker = Command::new(env!("CARGO_BIN_EXE_leaseq"))
        .args(["work", "--queue", &queue, "--", "true"])
        .env("DATABASE_URL", &as_role)
        .output()
        .unwrap();
    db.batch_execute(&format!("DROP ROLE {role}")).unwrap();

    assert!(!worker.status.success(), "{worker:?}");
    let log = String::from_utf8(worker.stderr).unwrap();
    let refused = log
        .lines()
        .find(|line| line.contains(" refused "))
        .unwrap_or_else(|| panic!("no refused event:\n{log}"));
    assert!(
        refused.contains("during=\"claim\"")
            && refused.contains("error=\"permission denied for schema leaseq (SQLSTATE 42501)\""),
        "{log}"
    );
    assert!(!log.contains("db error"), "{log}");
}

/// `leaseq stats` against `url`: its exit status and what it printed on stderr.
fn stats_at(url: &str) -> (std::process::ExitStatus, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_leaseq"))
        .arg("stats")
        .env("DATABASE_URL", url)
        .output()
        .unwrap();
    (out.status, String::from_utf8(out.stderr).unwrap())
}

/// A connection that fails says where it tried and why — refused, an unknown database — never
/// tokio-postgres's bare "error connecting to server"; a database without the extension says
/// how to install it.
#[test]
fn a_failed_connection_names_the_server_and_the_cause_and_a_missing_extension_says_what_to_run() {
    // Nothing listens on a port just released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (status, said) = stats_at(&format!("postgres://nobody@127.0.0.1:{port}/nowhere"));
    assert_eq!(status.code(), Some(1), "{said}");
    assert!(
        said.starts_with(&format!(
            "leaseq: cannot connect to 127.0.0.1:{port}/nowhere as nobody: "
        )) && said.contains("Connection refused"),
        "{said}"
    );

    // A server that accepts the connection and never answers: the kernel completes the TCP
    // handshake for a listening socket nobody accepts on.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    let asked = Instant::now();
    let (status, said) = stats_at(&format!(
        "postgres://nobody@127.0.0.1:{silent_port}/nowhere?connect_timeout=1"
    ));
    assert_eq!(status.code(), Some(1), "{said}");
    assert!(
        said.starts_with(&format!(
            "leaseq: cannot connect to 127.0.0.1:{silent_port}/nowhere as nobody: "
        )) && said.contains("timeout waiting for server"),
        "{said}"
    );
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "bounded by connect_timeout"
    );
    drop(silent);

    let url = url();
    let (server, _) = url.rsplit_once('/').unwrap();
    let (status, said) = stats_at(&format!("{server}/leaseq_no_such_database"));
    assert_eq!(status.code(), Some(1), "{said}");
    assert!(
        said.contains("cannot connect to ")
            && said
                .contains("database \"leaseq_no_such_database\" does not exist (SQLSTATE 3D000)"),
        "{said}"
    );

    let bare = format!("leaseq_test_bare_{}", std::process::id());
    let mut db = db();
    db.batch_execute(&format!("DROP DATABASE IF EXISTS {bare}"))
        .unwrap();
    db.batch_execute(&format!("CREATE DATABASE {bare}"))
        .unwrap();
    let (status, said) = stats_at(&format!("{server}/{bare}"));
    db.batch_execute(&format!("DROP DATABASE {bare}")).unwrap();
    assert_eq!(status.code(), Some(1), "{said}");
    assert!(
        said.contains("schema \"leaseq\" does not exist (SQLSTATE 3F000)")
            && said.contains("run CREATE EXTENSION leaseq in it"),
        "{said}"
    );

    // The worker says where it connects when it starts, and why each attempt fails.
    let mut worker = Command::new(env!("CARGO_BIN_EXE_leaseq"))
        .args(["work", "--queue", "q", "--", "true"])
        .env(
            "DATABASE_URL",
            format!("postgres://nobody@127.0.0.1:{port}/nowhere"),
        )
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(600));
    worker.kill().unwrap();
    let out = worker.wait_with_output().unwrap();
    let log = String::from_utf8(out.stderr).unwrap();
    assert!(
        log.contains(&format!("database=\"127.0.0.1:{port}/nowhere as nobody\""))
            && log.contains("Connection refused"),
        "{log}"
    );
}

/// The test database's URL, logging in as `role`.
fn url_as(role: &str) -> String {
    let url = url();
    let (scheme, rest) = url.split_once("://").unwrap();
    let host = rest.split_once('@').map_or(rest, |(_, host)| host);
    format!("{scheme}://{role}@{host}")
}

/// `leaseq queue grant|revoke|grants` as an admin decide who works a queue; a `leaseq work`
/// whose role holds no grant covering it is refused with the queue and the privilege named, and
/// works it once granted.
#[test]
fn queue_grants_decide_who_works_a_queue_and_a_refused_worker_names_the_privilege() {
    let mut db = db();
    let queue = new_queue(&mut db, "granted", "");
    let role = format!("leaseq_test_team_{}", std::process::id());
    db.batch_execute(&format!(
        "DROP ROLE IF EXISTS {role}; CREATE ROLE {role} LOGIN IN ROLE leaseq_worker"
    ))
    .unwrap();
    let leaseq = |url: &str, args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_leaseq"))
            .args(args)
            .env("DATABASE_URL", url)
            .output()
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap() + &String::from_utf8(out.stderr).unwrap();
        (out.status.code(), text)
    };

    // Closed to all but leaseq_admin's members; granting twice changes nothing (exit 3).
    let (code, said) = leaseq(&url(), &["queue", "grant", &queue, "leaseq_admin", "work"]);
    assert_eq!(
        (code, said.trim()),
        (
            Some(0),
            format!("leaseq_admin may now work on {queue}").as_str()
        )
    );
    let (code, _) = leaseq(&url(), &["queue", "grant", &queue, "leaseq_admin", "work"]);
    assert_eq!(code, Some(3));
    let (code, listed) = leaseq(&url(), &["queue", "grants"]);
    assert_eq!(code, Some(0));
    assert!(
        listed.lines().any(|l| l.split_whitespace().take(3).eq([
            queue.as_str(),
            "leaseq_admin",
            "work"
        ])),
        "{listed}"
    );
    let (code, said) = leaseq(&url(), &["queue", "grant", &queue, &role, "write"]);
    assert_eq!(
        code,
        Some(2),
        "an unknown privilege is a usage error: {said}"
    );

    let (code, log) = leaseq(&url_as(&role), &["work", "--queue", &queue, "--", "true"]);
    assert_eq!(code, Some(1), "{log}");
    let refused = log
        .lines()
        .find(|line| line.contains(" refused "))
        .unwrap_or_else(|| panic!("no refused event:\n{log}"));
    let named = format!(
        "error=\"leaseq.queue_claim: role \\\"{role}\\\" lacks privilege \\\"work\\\" on queue \\\"{queue}\\\" (SQLSTATE 42501)\""
    );
    assert!(
        refused.contains("during=\"claim\"") && refused.contains(&named),
        "{refused}\n{named}"
    );

    // Granted, the role claims; revoked again, the queue is open to every worker.
    let (code, _) = leaseq(&url(), &["queue", "grant", &queue, &role, "work"]);
    assert_eq!(code, Some(0));
    let mut team = Client::connect(&url_as(&role), NoTls).unwrap();
    let claim = format!("SELECT count(*) FROM leaseq.queue_claim('{queue}', 'team')");
    assert!(team.query_one(&claim, &[]).is_ok());
    for who in ["leaseq_admin", &role] {
        let (code, said) = leaseq(&url(), &["queue", "revoke", &queue, who, "work"]);
        assert_eq!(code, Some(0), "{said}");
    }
    let (code, _) = leaseq(&url(), &["queue", "revoke", &queue, &role, "work"]);
    assert_eq!(code, Some(3));
    drop(team);
    db.batch_execute(&format!("DROP ROLE {role}")).unwrap();
}

/// Every sample of `text` (the exposition format) for `queue`, parsed by a Prometheus parser,
/// by metric name and `state`/`le` label; and a check that no line went unparsed (the parser
/// skips lines it cannot read): each sample line is one counter or gauge, one bucket of a
/// histogram, or its sum or count (which this parser leaves untyped).
fn samples_of(text: &str, queue: &str) -> std::collections::HashMap<String, f64> {
    use prometheus_parse::{Scrape, Value};
    let scrape = Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).expect("parsed");
    let lines = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .count();
    let read: usize = scrape
        .samples
        .iter()
        .map(|s| match &s.value {
            Value::Histogram(buckets) => buckets.len(),
            _ => 1,
        })
        .sum();
    assert_eq!(read, lines, "every sample line parsed:\n{text}");
    for sample in &scrape.samples {
        let family = match &sample.value {
            Value::Untyped(_) => sample
                .metric
                .strip_suffix("_sum")
                .or(sample.metric.strip_suffix("_count"))
                .unwrap_or_else(|| panic!("{} is untyped", sample.metric)),
            _ => &sample.metric,
        };
        assert!(scrape.docs.contains_key(family), "{family} has a HELP line");
    }
    let mut out = std::collections::HashMap::new();
    for sample in scrape
        .samples
        .iter()
        .filter(|s| s.labels.get("queue") == Some(queue))
    {
        match &sample.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => {
                let key = match sample.labels.get("state") {
                    Some(state) => format!("{}{{{state}}}", sample.metric),
                    None => sample.metric.clone(),
                };
                out.insert(key, *v);
            }
            Value::Histogram(buckets) => {
                for b in buckets {
                    out.insert(format!("{}{{le={}}}", sample.metric, b.less_than), b.count);
                }
            }
            other => panic!("unexpected sample {other:?}"),
        }
    }
    out
}

/// The metric families of `text` as Prometheus's own Python client reads it (strict: it raises on
/// any line it cannot parse), each `name type`, sorted; the interpreter is LEASEQ_TEST_PYTHON
/// (scripts/setup installs the client in a venv).
fn families_by_prometheus_client(text: &str) -> Vec<String> {
    use std::io::Write;
    let python = std::env::var("LEASEQ_TEST_PYTHON")
        .expect("LEASEQ_TEST_PYTHON names a Python with prometheus-client");
    let mut child = Command::new(python)
        .args([
            "-c",
            "import sys\n\
             from prometheus_client.parser import text_string_to_metric_families as parse\n\
             for f in sorted(parse(sys.stdin.read()), key=lambda f: f.name):\n\
             \x20   print(f.name, f.type)",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "prometheus_client refused the text: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(String::from)
        .collect()
}

/// `leaseq metrics --listen` serves `leaseq.metrics()` for Prometheus: parsed with a Prometheus
/// parser, it counts what happened to a queue's jobs (enqueued, completed, failed, gone dead,
/// attempts per success) and shows its live jobs by state.
#[test]
fn metrics_are_served_for_scraping_and_count_what_happened_to_a_queue() {
    use std::io::{BufRead, BufReader};
    let mut db = db();
    let queue = new_queue(&mut db, "metrics", "max_attempts => 2");
    for n in 0..3 {
        enqueue(&mut db, &queue, &format!("{{\"n\": {n}}}"));
    }
    // One success at the first attempt, one dead job, one success at the second attempt; then a
    // job left pending.
    db.batch_execute(&format!(
        "SELECT leaseq.queue_complete(job_id, lease_token)
           FROM leaseq.queue_claim('{queue}', 'm', 1);
         SELECT leaseq.queue_fail(job_id, lease_token, retry => false)
           FROM leaseq.queue_claim('{queue}', 'm', 1);
         SELECT leaseq.queue_fail(job_id, lease_token, retry_in => '0')
           FROM leaseq.queue_claim('{queue}', 'm', 1);
         SELECT leaseq.queue_complete(job_id, lease_token)
           FROM leaseq.queue_claim('{queue}', 'm', 1)"
    ))
    .unwrap();
    enqueue(&mut db, &queue, "{\"n\": 3}");
    // Two jobs of one group: one pending, one waiting for it.
    db.batch_execute(&format!(
        "SELECT leaseq.queue_enqueue('{queue}', '{{}}', group_key => 'g') FROM generate_series(1, 2)"
    ))
    .unwrap();

    let mut server = Command::new(env!("CARGO_BIN_EXE_leaseq"))
        .args(["metrics", "--listen", "127.0.0.1:0"])
        .env("DATABASE_URL", url())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut said = String::new();
    BufReader::new(server.stderr.take().unwrap())
        .read_line(&mut said)
        .unwrap();
    let address = said
        .trim()
        .strip_prefix("leaseq: serving metrics on ")
        .unwrap_or_else(|| panic!("{said}"))
        .to_string();
    let mut response = ureq::get(&address).call().expect("a scrape");
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_string();
    let body = response.body_mut().read_to_string().unwrap();
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(server.id() as i32, libc::SIGTERM) };
    assert!(server.wait().unwrap().success(), "it stops on SIGTERM");
    assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");

    assert_eq!(
        families_by_prometheus_client(&body),
        [
            "leaseq_attempts_per_success histogram",
            "leaseq_claim_sweep_steps counter",
            "leaseq_claims_after_cursor counter",
            "leaseq_claims_from_head counter",
            "leaseq_completed counter",
            "leaseq_dead counter",
            "leaseq_enqueued counter",
            "leaseq_expired_leases gauge",
            "leaseq_failed counter",
            "leaseq_jobs gauge",
            "leaseq_lease_expired counter",
            "leaseq_oldest_pending_age_seconds gauge",
            "leaseq_oldest_snapshot_age_seconds gauge",
            "leaseq_progress_age_seconds gauge",
            "leaseq_queue_paused gauge",
            "leaseq_reclaim_probes_skipped counter",
            "leaseq_snoozed counter",
            "leaseq_xmin_horizon_age_transactions gauge",
        ]
    );
    let got = samples_of(&body, &queue);
    let expected = [
        ("leaseq_jobs{pending}", 2.0),
        ("leaseq_jobs{scheduled}", 0.0),
        ("leaseq_jobs{running}", 0.0),
        ("leaseq_jobs{dead}", 1.0),
        ("leaseq_jobs{waiting}", 1.0),
        ("leaseq_expired_leases", 0.0),
        ("leaseq_progress_age_seconds", 0.0),
        ("leaseq_enqueued_total", 6.0),
        ("leaseq_completed_total", 2.0),
        ("leaseq_failed_total", 2.0),
        ("leaseq_dead_total", 1.0),
        ("leaseq_lease_expired_total", 0.0),
        ("leaseq_snoozed_total", 0.0),
        ("leaseq_claims_after_cursor_total", 0.0),
        ("leaseq_reclaim_probes_skipped_total", 0.0),
        ("leaseq_claim_sweep_steps_total", 0.0),
        ("leaseq_attempts_per_success{le=1}", 1.0),
        ("leaseq_attempts_per_success{le=2}", 2.0),
        ("leaseq_attempts_per_success{le=inf}", 2.0),
        ("leaseq_attempts_per_success_sum", 3.0),
        ("leaseq_attempts_per_success_count", 2.0),
    ];
    for (name, value) in expected {
        assert_eq!(got.get(name), Some(&value), "{name} in\n{body}");
    }
    assert!(got["leaseq_oldest_pending_age_seconds"] > 0.0, "{body}");
    assert!(got["leaseq_claims_from_head_total"] >= 1.0, "{body}");
    for line in [
        "leaseq_oldest_snapshot_age_seconds ",
        "leaseq_xmin_horizon_age_transactions{holder=\"backend\"} ",
        "leaseq_xmin_horizon_age_transactions{holder=\"standby\"} ",
        "leaseq_xmin_horizon_age_transactions{holder=\"slot\"} ",
    ] {
        assert!(
            body.lines().any(|l| l.starts_with(line)),
            "{line} in\n{body}"
        );
    }

    // Printed once, the same text.
    let once = Command::new(env!("CARGO_BIN_EXE_leaseq"))
        .arg("metrics")
        .env("DATABASE_URL", url())
        .output()
        .unwrap();
    assert!(once.status.success());
    let printed = samples_of(&String::from_utf8(once.stdout).unwrap(), &queue);
    assert_eq!(printed["leaseq_completed_total"], 2.0);
}

// The maintenance worker (src/maintenance.rs) runs in one database of the test cluster,
// LEASEQ_TEST_MAINTENANCE_URL, started with the server (scripts/lib.sh's start_cluster).

fn maintenance_url() -> String {
    std::env::var("LEASEQ_TEST_MAINTENANCE_URL")
        .expect("LEASEQ_TEST_MAINTENANCE_URL must name the database the maintenance worker serves")
}

fn maintenance_db() -> Client {
    Client::connect(&maintenance_url(), NoTls).expect("connect to the maintenance database")
}

/// The maintenance worker's pid, waiting up to `limit` for one to run.
fn maintenance_pid(db: &mut Client, limit: Duration) -> Option<i32> {
    let until = Instant::now() + limit;
    loop {
        let pid: Option<i32> = db
            .query_one(
                "SELECT max(pid) FROM pg_stat_activity
                  WHERE backend_type = 'leaseq maintenance' AND datname = current_database()",
                &[],
            )
            .unwrap()
            .get(0);
        if pid.is_some() || Instant::now() > until {
            return pid;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A `leaseq work` killed with SIGKILL mid-job, and nobody else claiming: the maintenance worker
/// reclaims its job about one lease after the kill — within a second of the lease's end — and
/// writes the expiry into the history.
#[test]
fn the_maintenance_worker_reclaims_a_killed_workers_job_with_nobody_claiming() {
    let mut db = maintenance_db();
    let queue = new_queue(
        &mut db,
        "reaped",
        "lease => '2 seconds', backoff_base => '10 ms', backoff_cap => '10 ms'",
    );
    let dir = scratch("reaped");
    let handler = script(&dir, "cat >/dev/null; sleep 30");
    let job = enqueue(&mut db, &queue, "{}");
    let mut worker =
        WorkerProcess::start_on(&maintenance_url(), &queue, &dir, "doomed", &[], &handler);
    assert!(eventually(
        &mut db,
        LONG,
        "SELECT status = 'running' FROM leaseq.queue_job($1)",
        &[&job]
    ));
    worker.signal(libc::SIGKILL);
    worker.wait_for_exit(LONG);
    assert!(
        eventually(
            &mut db,
            Duration::from_secs(5),
            "SELECT status = 'pending' FROM leaseq.queue_job($1)",
            &[&job]
        ),
        "pending again without any claim"
    );
    // Server times: the job's row was rewritten when it was reclaimed, and the closed attempt
    // ended when its lease did.
    let late: f64 = db
        .query_one(
            "SELECT extract(epoch FROM job.updated_at - attempt.ended_at)::float8
               FROM leaseq.jobs AS job
               JOIN leaseq.closed_attempts AS attempt ON attempt.job_id = job.id
              WHERE job.id = $1 AND attempt.outcome = 'lease_expired'",
            &[&job],
        )
        .unwrap()
        .get(0);
    assert!(
        (0.0..1.0).contains(&late),
        "reclaimed {late} s after the lease ended"
    );
    assert_eq!(history(&mut db, job), vec!["1:lease_expired:doomed"]);
    let pgdata =
        std::env::var("LEASEQ_TEST_PGDATA").expect("LEASEQ_TEST_PGDATA names the test cluster");
    let log = std::fs::read_to_string(Path::new(&pgdata).join("../server.log")).unwrap();
    let said =
        format!("LOG:  leaseq maintenance: reclaimed 1 expired lease(s) in queue \"{queue}\"");
    assert!(log.contains(&said), "the server log says: {said}");
}

/// A job scheduled two seconds ahead wakes a worker whose poll is ten minutes: the maintenance
/// worker notifies the queue when it comes due.
#[test]
fn a_job_scheduled_ahead_wakes_a_worker_whose_poll_is_ten_minutes() {
    let mut db = maintenance_db();
    let queue = new_queue(&mut db, "woken", "");
    let dir = scratch("woken");
    let handler = script(&dir, "cat >/dev/null");
    let mut worker = WorkerProcess::start_on(
        &maintenance_url(),
        &queue,
        &dir,
        "sleepy",
        &["--poll", "10m"],
        &handler,
    );
    std::thread::sleep(Duration::from_millis(500)); // it has looked, found nothing, and waits
    let job: i64 = db
        .query_one(
            "SELECT leaseq.queue_enqueue($1, '{}', run_at => clock_timestamp() + interval '2 seconds')",
            &[&queue],
        )
        .unwrap()
        .get(0);
    assert!(
        eventually(
            &mut db,
            Duration::from_secs(6),
            "SELECT status = 'succeeded' FROM leaseq.queue_job($1)",
            &[&job]
        ),
        "woken and done; its log:\n{}",
        worker.log()
    );
    let late: f64 = db
        .query_one(
            "SELECT extract(epoch FROM started_at - run_at)::float8 FROM leaseq.jobs WHERE id = $1",
            &[&job],
        )
        .unwrap()
        .get(0);
    assert!(
        (0.0..1.0).contains(&late),
        "claimed {late} s after it came due"
    );
    worker.signal(libc::SIGTERM);
    assert_eq!(worker.wait_for_exit(LONG), Some(0));
}

/// While someone reads the overview, the maintenance worker counts ahead of the readers: a
/// reader that never counts itself (its `leaseq.overview_max_age` an hour) sees a job enqueued
/// after its first look within a few seconds, counted later than that look.
#[test]
fn the_maintenance_worker_counts_the_overview_ahead_of_its_readers() {
    let mut db = maintenance_db();
    let queue = new_queue(&mut db, "glanced", "");
    db.batch_execute("SET leaseq.overview_max_age = '1h'")
        .unwrap();
    let first: SystemTime = db
        .query_one(
            "SELECT counted_at FROM leaseq.queue_overview() WHERE queue = $1 AND pending = 0",
            &[&queue],
        )
        .unwrap()
        .get(0);
    enqueue(&mut db, &queue, "{}");
    assert!(
        eventually(
            &mut db,
            Duration::from_secs(5),
            "SELECT pending = 1 FROM leaseq.queue_overview() WHERE queue = $1",
            &[&queue]
        ),
        "the count never caught up"
    );
    let counted: SystemTime = db
        .query_one(
            "SELECT counted_at FROM leaseq.queue_overview() WHERE queue = $1",
            &[&queue],
        )
        .unwrap()
        .get(0);
    assert!(counted > first);
}

/// `retain` purges, in a queue that has it, the succeeded and cancelled jobs that finished longer
/// ago, with their history — and nothing else: not recent ones, not dead or pending ones, not
/// another queue's.
#[test]
fn retention_purges_only_what_finished_longer_ago_in_a_retaining_queue() {
    let mut db = maintenance_db();
    let kept_queue = new_queue(&mut db, "kept", "");
    let queue = new_queue(&mut db, "retained", "retain => '1 hour'");
    // Each job alone in its queue while it is taken through its states.
    let mut make = |q: &str, state: &str, steps: &str| -> i64 {
        let id: i64 = db
            .query_one(
                "SELECT leaseq.queue_enqueue($1, jsonb_build_object('state', $2::text))",
                &[&q, &state],
            )
            .unwrap()
            .get(0);
        db.batch_execute(&steps.replace("$Q", q).replace("$ID", &id.to_string()))
            .unwrap();
        id
    };
    let claim = "FROM leaseq.queue_claim('$Q', 'w', 1)";
    let succeed = format!("SELECT leaseq.queue_complete(job_id, lease_token) {claim};");
    let old_succeeded = make(
        &queue,
        "old succeeded",
        &format!(
            "SELECT leaseq.queue_fail(job_id, lease_token, retry_in => '0') {claim}; {succeed}"
        ),
    );
    let old_cancelled = make(&queue, "old cancelled", "SELECT leaseq.queue_cancel($ID);");
    let old_dead = make(
        &queue,
        "old dead",
        &format!("SELECT leaseq.queue_fail(job_id, lease_token, retry => false) {claim};"),
    );
    make(&queue, "recent succeeded", &succeed);
    make(&queue, "pending", "");
    let elsewhere = make(&kept_queue, "old succeeded elsewhere", &succeed);
    db.execute(
        "UPDATE leaseq.jobs SET finished_at = finished_at - interval '2 hours'
          WHERE id = ANY ($1)",
        &[&vec![old_succeeded, old_cancelled, old_dead, elsewhere]],
    )
    .unwrap();
    let states = |db: &mut Client| -> Vec<String> {
        db.query(
            "SELECT payload->>'state' || ':' || status FROM leaseq.jobs
              WHERE queue IN ($1, $2) ORDER BY id",
            &[&queue, &kept_queue],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
    };
    assert!(
        eventually(
            &mut db,
            Duration::from_secs(5),
            "SELECT NOT EXISTS (SELECT FROM leaseq.jobs WHERE id = $1)",
            &[&old_succeeded]
        ),
        "purged: {:?}",
        states(&mut db)
    );
    assert_eq!(
        states(&mut db),
        vec![
            "old dead:dead",
            "recent succeeded:succeeded",
            "pending:pending",
            "old succeeded elsewhere:succeeded",
        ]
    );
    let history_left: i64 = db
        .query_one(
            "SELECT count(*) FROM leaseq.closed_attempts WHERE job_id IN ($1, $2)",
            &[&old_succeeded, &old_cancelled],
        )
        .unwrap()
        .get(0);
    assert_eq!(history_left, 0, "their history went with them");
}

/// Terminated, the maintenance worker is started again; after a crash of the server too; and it
/// goes on reclaiming.
#[test]
fn the_maintenance_worker_comes_back_after_termination_and_a_server_crash() {
    let mut db = maintenance_db();
    let first = maintenance_pid(&mut db, LONG).expect("a maintenance worker runs");
    db.execute("SELECT pg_terminate_backend($1)", &[&first])
        .unwrap();
    let second = eventually_pid(first);
    // A crash: one backend killed, the postmaster restarts every process.
    let victim: i32 = db.query_one("SELECT pg_backend_pid()", &[]).unwrap().get(0);
    // SAFETY: a signal to a backend of the test cluster.
    assert_eq!(unsafe { libc::kill(victim, libc::SIGKILL) }, 0);
    let third = eventually_pid(second);
    assert_ne!(third, first);
    let mut db = reconnect_to(&maintenance_url());

    let queue = new_queue(&mut db, "after_crash", "lease => '1 second'");
    let job = enqueue(&mut db, &queue, "{}");
    db.batch_execute(&format!(
        "SELECT count(*) FROM leaseq.queue_claim('{queue}', 'gone')"
    ))
    .unwrap();
    assert!(eventually(
        &mut db,
        Duration::from_secs(5),
        "SELECT status = 'pending' FROM leaseq.queue_job($1)",
        &[&job]
    ));
}

/// The maintenance worker's pid once it is another than `old`, asked on new connections while
/// the server may still be going down or coming back from a crash.
fn eventually_pid(old: i32) -> i32 {
    let until = Instant::now() + LONG;
    loop {
        let pid = Client::connect(&maintenance_url(), NoTls)
            .ok()
            .and_then(|mut db| {
                db.query_one(
                    "SELECT max(pid) FROM pg_stat_activity
                      WHERE backend_type = 'leaseq maintenance' AND datname = current_database()",
                    &[],
                )
                .ok()?
                .get::<_, Option<i32>>(0)
            });
        if let Some(pid) = pid.filter(|&pid| pid != old) {
            return pid;
        }
        assert!(Instant::now() < until, "no maintenance worker came back");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn reconnect_to(database: &str) -> Client {
    let until = Instant::now() + LONG;
    loop {
        match Client::connect(database, NoTls) {
            Ok(c) => return c,
            Err(e) => {
                assert!(Instant::now() < until, "the server did not come back: {e}");
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
}

/// `leaseq enqueue --dedupe-key K --dedupe-for D` keeps the key taken after its job finished, and
/// `--on-duplicate replace` debounces a pending duplicate: the ids printed say which job stands.
#[test]
fn enqueue_with_a_dedupe_window_and_with_replace_from_the_command_line() {
    let mut db = db();
    let queue = new_queue(&mut db, "cli_dedupe", "");
    let enqueue = |json: &str, extra: &[&str]| -> String {
        let out = Command::new(env!("CARGO_BIN_EXE_leaseq"))
            .args([
                "enqueue",
                "--queue",
                &queue,
                "--json",
                json,
                "--dedupe-key",
                "k",
            ])
            .args(extra)
            .env("DATABASE_URL", url())
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    };
    let first = enqueue(r#"{"v": 1}"#, &["--run-at", "2100-01-01 00:00+00"]);
    let replaced = enqueue(r#"{"v": 2}"#, &["--on-duplicate", "replace"]);
    assert_eq!(replaced, first, "the pending duplicate stands");
    let (payload, due): (String, bool) = {
        let row = db
            .query_one(
                "SELECT payload::text, run_at <= clock_timestamp() FROM leaseq.jobs
                  WHERE id = $1::text::bigint",
                &[&first],
            )
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!((payload.as_str(), due), (r#"{"v": 2}"#, true), "debounced");
    db.batch_execute(&format!(
        "SELECT leaseq.queue_complete(job_id, lease_token) FROM leaseq.queue_claim('{queue}', 'w')"
    ))
    .unwrap();
    assert_eq!(
        enqueue(r#"{"v": 3}"#, &["--dedupe-for", "1h"]),
        first,
        "within the hour"
    );
    assert_ne!(
        enqueue(r#"{"v": 4}"#, &[]),
        first,
        "without a window the key is free"
    );
}

/// `leaseq queue create --group-concurrency` and `leaseq enqueue --group-key` (one job, and a
/// batch from stdin): a group's jobs beyond its concurrency wait, `leaseq job` shows the group,
/// `leaseq stats` the waiting.
#[test]
fn enqueue_into_a_group_from_the_command_line() {
    let queue = format!("cli_groups_{}", std::process::id());
    let leaseq = |args: &[&str], stdin: Option<&str>| -> String {
        use std::io::Write;
        let mut child = Command::new(env!("CARGO_BIN_EXE_leaseq"))
            .args(args)
            .env("DATABASE_URL", url())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut input = child.stdin.take().unwrap();
        input.write_all(stdin.unwrap_or("").as_bytes()).unwrap();
        drop(input);
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    leaseq(
        &["queue", "create", &queue, "--group-concurrency", "2"],
        None,
    );
    let first = leaseq(
        &[
            "enqueue",
            "--queue",
            &queue,
            "--json",
            "{}",
            "--group-key",
            "customer-42",
        ],
        None,
    );
    leaseq(
        &[
            "enqueue",
            "--queue",
            &queue,
            "--group-key",
            "customer-42",
            "-",
        ],
        Some("{\"n\": 1}\n{\"n\": 2}\n{\"n\": 3}\n"),
    );
    let mut db = db();
    let statuses: Vec<(String, String)> = db
        .query(
            "SELECT group_key, status::text FROM leaseq.jobs WHERE queue = $1 ORDER BY id",
            &[&queue],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let expected: Vec<(String, String)> = ["pending", "pending", "waiting", "waiting"]
        .iter()
        .map(|s| ("customer-42".to_string(), s.to_string()))
        .collect();
    assert_eq!(statuses, expected);
    let shown = leaseq(&["show", first.trim()], None);
    assert!(shown.contains("       group_key  customer-42\n"), "{shown}");
    let stats = leaseq(&["stats"], None);
    let header: Vec<&str> = stats.lines().next().unwrap().split_whitespace().collect();
    let row: Vec<&str> = stats
        .lines()
        .find(|l| l.starts_with(&format!("{queue} ")))
        .unwrap_or_else(|| panic!("{stats}"))
        .split_whitespace()
        .collect();
    let waiting = header.iter().position(|c| *c == "waiting").map(|i| row[i]);
    assert_eq!(waiting, Some("2"), "two waiting:\n{stats}");
}

/// With real time passing and nobody claiming: a schedule ticking every minute gets its job from
/// the maintenance worker within a second of the tick, one job for the tick, due at the tick;
/// `leaseq schedule add|ls|rm` from the command line.
#[test]
fn a_schedule_enqueues_one_job_per_tick_with_real_time_passing() {
    let mut db = maintenance_db();
    let queue = new_queue(&mut db, "ticking", "");
    let name = format!("tick_{queue}");
    let leaseq = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_leaseq"))
            .args(args)
            .env("DATABASE_URL", maintenance_url())
            .output()
            .unwrap()
    };
    let added = leaseq(&[
        "schedule",
        "add",
        &name,
        "--queue",
        &queue,
        "--every",
        "* * * * *",
        "--json",
        r#"{"tick": true}"#,
    ]);
    assert!(added.status.success(), "{added:?}");
    let listed = String::from_utf8(leaseq(&["schedule", "ls"]).stdout).unwrap();
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with(&format!("{name} ")) && l.contains(&queue)),
        "{listed}"
    );
    let first: i64 = db
        .query_one(
            "SELECT extract(epoch FROM next_at)::bigint FROM leaseq.schedules WHERE name = $1",
            &[&name],
        )
        .unwrap()
        .get(0);
    assert!(
        eventually(
            &mut db,
            Duration::from_secs(75),
            "SELECT EXISTS (SELECT FROM leaseq.jobs WHERE queue = $1)",
            &[&queue]
        ),
        "the minute's tick enqueued its job"
    );
    std::thread::sleep(Duration::from_millis(600)); // another look of the worker, at least
    let row = db
        .query_one(
            "SELECT count(*), min(extract(epoch FROM run_at))::bigint,
                    max(extract(epoch FROM created_at - run_at))::float8
               FROM leaseq.jobs WHERE queue = $1",
            &[&queue],
        )
        .unwrap();
    let (jobs, run_at, late): (i64, i64, f64) = (row.get(0), row.get(1), row.get(2));
    assert_eq!((jobs, run_at), (1, first), "one job, due at the tick");
    assert!(
        (0.0..1.0).contains(&late),
        "enqueued {late} s after the tick"
    );
    let next: i64 = db
        .query_one(
            "SELECT extract(epoch FROM next_at)::bigint FROM leaseq.schedules WHERE name = $1",
            &[&name],
        )
        .unwrap()
        .get(0);
    assert_eq!(next, first + 60, "the next tick is a minute later");
    assert!(leaseq(&["schedule", "rm", &name]).status.success());
    assert_eq!(leaseq(&["schedule", "rm", &name]).status.code(), Some(3));
}

/// Dependencies and flows through the library and the CLI: a child enqueued with
/// `depends_on` stays out of claims until its last parent completed, reads its parents'
/// results; `leaseq enqueue --depends-on`, `leaseq flow -` and `leaseq show` (parents and
/// children) do the same from a shell; a flow with a cycle is refused whole.
#[tokio::test]
async fn dependencies_and_flows_through_the_library_and_the_cli() {
    use leaseq_client::client::QueueSettings;
    use leaseq_client::{Client as Leaseq, EnqueueOptions, FlowNode, JobStatus, ParentFailure};

    let client = Leaseq::connect(&url()).await.unwrap();
    let queue = format!("deps_{}", std::process::id());
    client
        .queue_create(&queue, &QueueSettings::default())
        .await
        .unwrap();
    let plain = EnqueueOptions::default();
    let a = client
        .enqueue(&queue, r#"{"n": "a"}"#, &plain)
        .await
        .unwrap();
    let b = client
        .enqueue(&queue, r#"{"n": "b"}"#, &plain)
        .await
        .unwrap();
    let after = EnqueueOptions {
        depends_on: vec![a, b],
        on_parent_failure: ParentFailure::Run,
        ..Default::default()
    };
    let child = client
        .enqueue(&queue, r#"{"n": "c"}"#, &after)
        .await
        .unwrap();
    assert_eq!(client.job(child).await.unwrap().status, JobStatus::Blocked);
    // A batch (in a queue of its own) whose jobs each wait for their own parents.
    let other = format!("{queue}_each");
    client
        .queue_create(&other, &QueueSettings::default())
        .await
        .unwrap();
    let each = client
        .enqueue_batch_each_after(
            &other,
            &[
                (r#"{"n": "ab"}"#.into(), vec![a, b]),
                (r#"{"n": "free"}"#.into(), vec![]),
            ],
            ParentFailure::Cancel,
            None,
            0,
        )
        .await
        .unwrap();
    let mut statuses = Vec::new();
    for id in &each {
        statuses.push(client.job(*id).await.unwrap().status);
    }
    assert_eq!(statuses, vec![JobStatus::Blocked, JobStatus::Pending]);
    assert_eq!(client.parents(each[0]).await.unwrap().len(), 2);
    // Claims see the parents only; the child once both completed.
    let parents = client.claim(&queue, "w-deps", 10, None).await.unwrap();
    assert_eq!(parents.iter().map(|j| j.id).collect::<Vec<_>>(), vec![a, b]);
    assert!(
        client
            .complete(&parents[0], Some(r#"{"out": 1}"#))
            .await
            .unwrap()
    );
    assert!(
        client
            .claim(&queue, "w-deps", 10, None)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        client
            .complete(&parents[1], Some(r#"{"out": 2}"#))
            .await
            .unwrap()
    );
    let released = client.claim(&queue, "w-deps", 10, None).await.unwrap();
    assert_eq!(
        released.iter().map(|j| j.id).collect::<Vec<_>>(),
        vec![child]
    );
    // The batch's first job waited for both parents too: released with the child.
    assert_eq!(
        client.job(each[0]).await.unwrap().status,
        JobStatus::Pending
    );
    let read = client.parents(child).await.unwrap();
    assert_eq!(
        read.iter()
            .map(|p| (
                p.id,
                p.status,
                p.result.as_ref().map(|r| r.get().to_string())
            ))
            .collect::<Vec<_>>(),
        vec![
            (a, Some(JobStatus::Succeeded), Some(r#"{"out": 1}"#.into())),
            (b, Some(JobStatus::Succeeded), Some(r#"{"out": 2}"#.into())),
        ]
    );
    // A step recorded under the child's lease, read back with the attempt that made it; a
    // second record of the name changes nothing.
    assert!(
        client
            .step(&released[0], "charge", Some(r#"{"charge": 9}"#))
            .await
            .unwrap()
    );
    assert!(!client.step(&released[0], "charge", None).await.unwrap());
    let steps = client.steps(child).await.unwrap();
    assert_eq!(
        steps
            .iter()
            .map(|s| (
                s.name.as_str(),
                s.attempt_no,
                s.output.as_ref().map(|o| o.get())
            ))
            .collect::<Vec<_>>(),
        vec![("charge", 1, Some(r#"{"charge": 9}"#))]
    );
    // The step helper: a recorded step is not run again; a new one runs once and is recorded;
    // a stale lease records nothing.
    let recorded = client
        .run_step(&released[0], "charge", || async {
            Err::<Option<String>, &str>("ran a recorded step")
        })
        .await
        .unwrap();
    assert_eq!(recorded.as_deref(), Some(r#"{"charge": 9}"#));
    let ship = || async { Ok::<_, ()>(Some(r#"{"parcel": 1}"#.to_string())) };
    let shipped = client.run_step(&released[0], "ship", ship).await.unwrap();
    assert_eq!(shipped.as_deref(), Some(r#"{"parcel": 1}"#));
    let again = client
        .run_step(&released[0], "ship", || async {
            Err::<Option<String>, _>("ran twice")
        })
        .await
        .unwrap();
    assert_eq!(again.as_deref(), Some(r#"{"parcel": 1}"#));
    let mut stale = released[0].clone();
    stale.lease_token = leaseq_client::Uuid::from_u128(9);
    assert!(matches!(
        client.run_step(&stale, "pack", ship).await,
        Err(leaseq_client::StepError::LeaseLost)
    ));
    let children = client.children(a).await.unwrap();
    assert_eq!(
        children
            .iter()
            .map(|c| (c.id, c.status))
            .collect::<Vec<_>>(),
        vec![
            (child, Some(JobStatus::Running)),
            (each[0], Some(JobStatus::Pending))
        ]
    );

    // A flow: fan-out then fan-in, given children first; keys back in the order given.
    let node = |key: &str, depends_on: &[&str]| FlowNode {
        key: key.into(),
        queue: queue.clone(),
        payload: format!(r#"{{"node": "{key}", "big": 123456789012345678901234567890}}"#),
        depends_on: depends_on.iter().map(|k| k.to_string()).collect(),
        ..Default::default()
    };
    let flow = client
        .flow(&[
            node("join", &["left", "right"]),
            node("left", &["split"]),
            node("right", &["split"]),
            node("split", &[]),
        ])
        .await
        .unwrap();
    assert_eq!(
        flow.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
        vec!["join", "left", "right", "split"]
    );
    let root = flow[3].1;
    let status = client.flow_status(root).await.unwrap();
    assert_eq!((status.jobs, status.blocked, status.pending), (4, 3, 1));
    assert!(!status.finished);
    let split = client.claim(&queue, "w-flow", 10, None).await.unwrap();
    assert_eq!(split.len(), 1);
    assert!(split[0].payload.contains("123456789012345678901234567890"));

    // A cycle is refused whole, with the node named: nothing of it is inserted.
    let before = client.jobs(&queue, None, 1000).await.unwrap().len();
    let cycle = client
        .flow(&[node("x", &["y"]), node("y", &["x"])])
        .await
        .unwrap_err();
    let refusal = cycle.as_db_error().expect("a refusal of the server");
    assert_eq!(refusal.code().code(), "22023", "{refusal:?}");
    assert!(refusal.message().contains("cycle"), "{refusal:?}");
    assert_eq!(client.jobs(&queue, None, 1000).await.unwrap().len(), before);

    // The CLI: enqueue after a parent, a flow from stdin, show with parents and children.
    let cli = |args: &[&str], stdin: &str| {
        use std::io::Write as _;
        let mut child = Command::new(env!("CARGO_BIN_EXE_leaseq"))
            .args(args)
            .env("DATABASE_URL", url())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    };
    let out = cli(
        &[
            "enqueue",
            "--queue",
            &queue,
            "--depends-on",
            &format!("{a},{b}"),
            "--json",
            "{}",
        ],
        "",
    );
    assert!(out.status.success(), "{out:?}");
    let late: i64 = String::from_utf8(out.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(client.job(late).await.unwrap().status, JobStatus::Pending);
    let out = cli(
        &["flow", "-"],
        &format!(
            r#"[{{"key": "one", "queue": "{queue}"}}, {{"key": "two", "queue": "{queue}", "depends_on": ["one"]}}]"#
        ),
    );
    assert!(out.status.success(), "{out:?}");
    let printed = String::from_utf8(out.stdout).unwrap();
    let keys: Vec<&str> = printed
        .lines()
        .map(|l| l.split('\t').next().unwrap())
        .collect();
    assert_eq!(keys, vec!["one", "two"], "{printed}");
    let out = cli(&["show", &child.to_string()], "");
    assert!(out.status.success(), "{out:?}");
    let show = String::from_utf8(out.stdout).unwrap();
    assert!(show.contains("relation  job"), "{show}");
    assert!(show.contains("step    attempt_no"), "{show}");
    assert!(
        show.contains(&format!("parent    {a}")) && show.contains(r#"{"out": 1}"#),
        "{show}"
    );
    let out = cli(&["show", &a.to_string()], "");
    let show = String::from_utf8(out.stdout).unwrap();
    assert!(show.contains(&format!("child     {child}")), "{show}");
    let out = cli(&["flow", "-"], "[]");
    assert!(!out.status.success());
    assert!(
        String::from_utf8(out.stderr).unwrap().contains("22023"),
        "a refusal names its SQLSTATE"
    );
}

/// `queue_await` (src/observe/wait.rs) through the library: it sleeps holding no snapshot, no
/// transaction id and no lock, does not poll (its transaction stays the same while none of its
/// jobs finishes, another job's finish included), is woken by its jobs' finishes to look again,
/// and returns at the last one — long before its hour-long timeout. Progress reported under the
/// lease shows in `job` and in the metrics' age; a stale token's report changes nothing.
#[tokio::test]
async fn await_sleeps_holding_no_snapshot_and_wakes_at_each_finish() {
    use leaseq_client::client::QueueSettings;
    use leaseq_client::{Awaited, Client as Leaseq, EnqueueOptions};

    let worker = Leaseq::connect(&url()).await.unwrap();
    let queue = format!("await_{}", std::process::id());
    worker
        .queue_create(&queue, &QueueSettings::default())
        .await
        .unwrap();
    let mut ids = Vec::new();
    for n in 0..3 {
        let payload = format!(r#"{{"n": {n}}}"#);
        ids.push(
            worker
                .enqueue(&queue, &payload, &EnqueueOptions::default())
                .await
                .unwrap(),
        );
    }
    let jobs = worker.claim(&queue, "w-await", 3, None).await.unwrap();
    assert_eq!(jobs.len(), 3);
    // The waiter waits for the first two; the third is nobody's business.
    let (ids, other) = (ids[..2].to_vec(), &jobs[2]);

    let waiter = Leaseq::connect(&url()).await.unwrap();
    let pid: i32 = waiter
        .raw()
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let waiting = {
        let ids = ids.clone();
        tokio::spawn(async move { waiter.await_jobs(&ids, Duration::from_secs(3600)).await })
    };
    // The waiter asleep: what it holds, and the start of its current transaction.
    let asleep = |after: Option<SystemTime>| {
        let worker = &worker;
        async move {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let row = worker
                    .raw()
                    .query_opt(
                        "SELECT a.state, a.backend_xmin IS NULL, a.backend_xid IS NULL,
                                (SELECT count(*) FROM pg_locks AS l
                                  WHERE l.pid = a.pid AND l.locktype = 'relation'),
                                a.xact_start
                           FROM pg_stat_activity AS a
                          WHERE a.pid = $1 AND a.wait_event_type = 'Extension'",
                        &[&pid],
                    )
                    .await
                    .unwrap();
                if let Some(row) = row {
                    let since: SystemTime = row.get(4);
                    if after.is_none_or(|after| since > after) {
                        let held: (String, bool, bool, i64) =
                            (row.get(0), row.get(1), row.get(2), row.get(3));
                        return (held, since);
                    }
                }
                assert!(Instant::now() < deadline, "the waiter never slept (again)");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    let nothing_held = ("active".to_string(), true, true, 0);
    let (held, first_look) = asleep(None).await;
    assert_eq!(held, nothing_held, "state, no xmin, no xid, relation locks");
    // Quiet, but for the finish of a job it does not wait for: it does not look again.
    assert!(worker.complete(other, None).await.unwrap());
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (_, still) = asleep(None).await;
    assert_eq!(still, first_look, "a waiter nobody woke looked again");

    // Progress under the lease, and a stale token's report.
    assert!(worker.progress(&jobs[0], r#"{"done": 0.5}"#).await.unwrap());
    let mut stale = jobs[0].clone();
    stale.lease_token = leaseq_client::Uuid::from_u128(7);
    assert!(!worker.progress(&stale, r#"{"done": 0.9}"#).await.unwrap());
    let job = worker.job(jobs[0].id).await.unwrap();
    assert_eq!(
        job.progress.map(|p| p.get().to_string()),
        Some(r#"{"done": 0.5}"#.into())
    );
    assert!(job.progress_at.is_some());
    let metrics = worker.metrics().await.unwrap();
    let age: f64 = metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix(&format!(
                "leaseq_progress_age_seconds{{queue=\"{queue}\"}} "
            ))
        })
        .expect("the queue's progress age")
        .parse()
        .unwrap();
    // The older of the two running jobs never reported: its age runs from its claim.
    assert!((0.0..60.0).contains(&age), "{age}");

    // `leaseq await` with no time to wait: exit 3, the unfinished ids printed.
    let cli = |timeout: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_leaseq"))
            .args([
                "await",
                &ids[0].to_string(),
                &ids[1].to_string(),
                "--timeout",
                timeout,
            ])
            .env("DATABASE_URL", url())
            .output()
            .unwrap();
        (out.status.code(), String::from_utf8(out.stdout).unwrap())
    };
    assert_eq!(cli("0s"), (Some(3), format!("{}\n{}\n", ids[0], ids[1])));

    // The first finish wakes it: it looks again, and sleeps holding nothing.
    assert!(worker.complete(&jobs[0], None).await.unwrap());
    let (held, _) = asleep(Some(first_look)).await;
    assert_eq!(held, nothing_held);
    assert!(!waiting.is_finished());
    // The last finish ends the wait.
    assert!(worker.complete(&jobs[1], None).await.unwrap());
    let awaited = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("woken by the last finish, not by its hour-long timeout")
        .unwrap()
        .unwrap();
    assert_eq!(
        awaited,
        Awaited {
            all_final: true,
            unfinished: vec![]
        }
    );
    assert_eq!(cli("1m"), (Some(0), String::new()));
}
