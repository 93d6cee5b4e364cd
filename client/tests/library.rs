//! The library against a live cluster: the Rust `Worker` (a lost lease fires the handler's
//! token, decisions that arrive together are finished in one call per kind, an outcome the server
//! refuses fails only its own job, leases held together are renewed together, one slot, prefetch,
//! a group's jobs in order), the enums against the extension's, and `job` on a database not yet
//! updated from 0.2.0. Needs `LEASEQ_TEST_DATABASE_URL` (a superuser's). `leaseq work`, the
//! command built on this Worker, has its own tests: cli/tests/worker.rs.
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use postgres::{Client, NoTls};

fn url() -> String {
    std::env::var("LEASEQ_TEST_DATABASE_URL")
        .expect("LEASEQ_TEST_DATABASE_URL must name a database with leaseq installed")
}

fn db() -> Client {
    Client::connect(&url(), NoTls).expect("connect to the test cluster")
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

/// A new queue holding `jobs` jobs `{"n": 1}` … (for the Rust `Worker`'s async tests), and the
/// connection that made it.
async fn queue_of_jobs(
    prefix: &'static str,
    settings: &'static str,
    jobs: i32,
) -> (Client, String) {
    tokio::task::spawn_blocking(move || {
        let mut db = db();
        let queue = new_queue(&mut db, prefix, settings);
        db.execute(
            "SELECT leaseq.queue_enqueue_batch($1, ARRAY(
                 SELECT jsonb_build_object('n', n) FROM generate_series(1, $2) n))",
            &[&queue, &jobs],
        )
        .unwrap();
        (db, queue)
    })
    .await
    .unwrap()
}

/// How many of `queue`'s jobs have succeeded.
async fn succeeded(mut db: Client, queue: String) -> i64 {
    tokio::task::spawn_blocking(move || {
        db.query_one(
            "SELECT count(*) FROM leaseq.jobs WHERE queue = $1 AND status = 'succeeded'",
            &[&queue],
        )
        .unwrap()
        .get(0)
    })
    .await
    .unwrap()
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

const LONG: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_worker_fires_the_handlers_token_when_the_lease_is_lost() {
    use leaseq_client::client::QueueSettings;
    use leaseq_client::{
        CancellationToken, Client as Leaseq, EnqueueOptions, JobStatus, Outcome, Worker,
        WorkerConfig,
    };

    let client = Leaseq::connect(&url()).await.unwrap();
    let queue = format!("rust_worker_{}", std::process::id());
    let settings = QueueSettings {
        lease: Some(Duration::from_secs(1)),
        ..Default::default()
    };
    client.queue_create(&queue, &settings).await.unwrap();
    let none = EnqueueOptions::default();
    let ok = client
        .enqueue(&queue, r#"{"do": "ok"}"#, &none)
        .await
        .unwrap();
    let bad = client
        .enqueue(&queue, r#"{"do": "reject"}"#, &none)
        .await
        .unwrap();
    let hang = client
        .enqueue(&queue, r#"{"do": "hang"}"#, &none)
        .await
        .unwrap();

    let mut config = WorkerConfig::new(&queue);
    config.concurrency = 3;
    let shutdown = CancellationToken::new();
    let worker = tokio::spawn(Worker::new(&url(), config).run(
        |job, lost| async move {
            if job.payload.contains("reject") {
                return Outcome::Fail {
                    error: Some(r#"{"error": "invalid"}"#.into()),
                    retry: false,
                    retry_in: None,
                };
            }
            if job.payload.contains("hang") {
                lost.cancelled().await; // works until told to stop
            }
            Outcome::Complete {
                result: Some(format!(r#"{{"attempt": {}}}"#, job.attempt_no)),
            }
        },
        shutdown.clone(),
    ));

    let job_status = |id: i64| {
        let client = &client;
        async move { client.job(id).await.unwrap().status }
    };
    let until = Instant::now() + LONG;
    while job_status(hang).await != JobStatus::Running && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        client.cancel(hang).await.unwrap(),
        "cancelled while running"
    );
    while (job_status(ok).await != JobStatus::Succeeded || job_status(bad).await != JobStatus::Dead)
        && Instant::now() < until
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The cancelled job's next renew (within a third of the lease) fires its token.
    tokio::time::sleep(Duration::from_millis(800)).await;
    shutdown.cancel();
    let summary = worker.await.unwrap().unwrap();
    assert_eq!(
        (
            summary.claimed,
            summary.completed,
            summary.failed,
            summary.lease_lost
        ),
        (3, 1, 1, 1),
        "{summary:?}"
    );
    assert_eq!(
        job_status(hang).await,
        JobStatus::Cancelled,
        "the handler's late Complete was never sent"
    );
    // What the handler returned, readable by id; nothing for a job that did not succeed.
    let returned = client.result(ok).await.unwrap();
    assert_eq!(
        returned.map(|r| r.get().to_string()),
        Some(r#"{"attempt": 1}"#.into())
    );
    assert!(client.result(bad).await.unwrap().is_none());
}

#[test]
fn the_clients_enums_have_the_extensions_labels_in_order() {
    use leaseq_client::{AttemptOutcome, JobStatus, QueuePrivilege};
    let mut db = db();
    let labels = |db: &mut Client, ty: &str| -> Vec<String> {
        db.query_one(&format!("SELECT enum_range(NULL::{ty})::text[]"), &[])
            .expect("enum labels")
            .get(0)
    };
    let statuses: Vec<String> = JobStatus::ALL.iter().map(|s| s.label().into()).collect();
    assert_eq!(labels(&mut db, "leaseq.job_status"), statuses);
    let outcomes: Vec<String> = AttemptOutcome::ALL
        .iter()
        .map(|o| o.label().into())
        .collect();
    assert_eq!(labels(&mut db, "leaseq.attempt_outcome"), outcomes);
    let privileges: Vec<String> = QueuePrivilege::ALL
        .iter()
        .map(|p| p.label().into())
        .collect();
    assert_eq!(labels(&mut db, "leaseq.queue_privilege"), privileges);
}

/// Jobs whose handlers decide in the same instant are finished together, each kind of outcome
/// as it would be alone: one finishing call per kind (all share the call's end time), every
/// outcome recorded with its status, and the Worker's summary agrees with the database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_worker_finishes_decisions_that_arrive_together_in_one_call_per_kind() {
    use leaseq_client::{CancellationToken, Outcome, Worker, WorkerConfig};

    let mut db = tokio::task::spawn_blocking(db).await.unwrap();
    let (db, queue) = tokio::task::spawn_blocking(move || {
        let queue = new_queue(&mut db, "finish_together", "max_attempts => 3");
        db.execute(
            "SELECT leaseq.queue_enqueue_batch($1, ARRAY(
                 SELECT jsonb_build_object('do', d) FROM generate_series(1, 20) n,
                        unnest(ARRAY['complete', 'retry', 'bury', 'later']) d))",
            &[&queue],
        )
        .unwrap();
        (db, queue)
    })
    .await
    .unwrap();

    let mut config = WorkerConfig::new(&queue);
    config.concurrency = 80;
    config.batch = 80;
    let handled = std::sync::Arc::new(AtomicUsize::new(0));
    let shutdown = CancellationToken::new();
    let worker = {
        let (handled, all_decided) = (handled.clone(), shutdown.clone());
        tokio::spawn(Worker::new(&url(), config).run(
            move |job, _lost| {
                if handled.fetch_add(1, Ordering::SeqCst) + 1 == 80 {
                    all_decided.cancel(); // drain, which finishes them
                }
                let error = Some(r#"{"error": "x"}"#.to_string());
                let outcome = if job.payload.contains("complete") {
                    Outcome::Complete {
                        result: Some(r#"{"ok": true}"#.into()),
                    }
                } else if job.payload.contains("retry") {
                    Outcome::Fail {
                        error,
                        retry: true,
                        retry_in: None,
                    }
                } else if job.payload.contains("bury") {
                    Outcome::Fail {
                        error,
                        retry: false,
                        retry_in: None,
                    }
                } else {
                    Outcome::Fail {
                        error,
                        retry: true,
                        retry_in: Some(Duration::from_secs(3600)),
                    }
                };
                async move { outcome }
            },
            shutdown.clone(),
        ))
    };
    let summary = tokio::time::timeout(LONG, worker)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        (summary.claimed, summary.completed, summary.failed),
        (80, 20, 60)
    );

    let mut db = db;
    let rows = tokio::task::spawn_blocking(move || {
        db.query(
            "SELECT j.payload->>'do', j.status::text, count(*),
                    count(DISTINCT a.ended_at), bool_and(j.run_at > now() + interval '50 minutes')
               FROM leaseq.jobs j JOIN leaseq.attempts a ON a.job_id = j.id
              WHERE j.queue = $1
              GROUP BY 1, 2 ORDER BY 1",
            &[&queue],
        )
        .unwrap()
    })
    .await
    .unwrap();
    let got: Vec<(String, String, i64)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        got,
        vec![
            ("bury".into(), "dead".into(), 20),
            ("complete".into(), "succeeded".into(), 20),
            ("later".into(), "pending".into(), 20),
            ("retry".into(), "pending".into(), 20),
        ]
    );
    let distinct_ends: std::collections::HashMap<String, i64> =
        rows.iter().map(|r| (r.get(0), r.get(3))).collect();
    // Twenty decisions of a kind, finished together: a handful of calls at most, not twenty.
    for kind in ["bury", "complete", "retry"] {
        assert!(
            distinct_ends[kind] <= 3,
            "{kind}: {} finishing calls",
            distinct_ends[kind]
        );
    }
    // A failure with its own delay keeps it (it goes alone, through queue_fail).
    assert!(
        rows.iter()
            .any(|r| r.get::<_, String>(0) == "later" && r.get::<_, bool>(4))
    );
}

/// What the worker's `tracing` events said, as JSON objects, for the tests that read them: one
/// global subscriber for this test binary (its tests run at once; each reads its own queue's).
fn worker_events(queue: &str) -> Vec<serde_json::Value> {
    use std::sync::{Mutex, OnceLock};
    static EVENTS: OnceLock<&'static Mutex<Vec<u8>>> = OnceLock::new();
    let events = *EVENTS.get_or_init(|| {
        let events: &'static Mutex<Vec<u8>> = Box::leak(Box::new(Mutex::new(Vec::new())));
        struct Sink(&'static Mutex<Vec<u8>>);
        impl std::io::Write for Sink {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let subscriber = tracing_subscriber::fmt()
            .json()
            .flatten_event(true)
            .with_max_level(tracing::Level::DEBUG)
            .with_writer(move || Sink(events))
            .finish();
        tracing::subscriber::set_global_default(subscriber).unwrap();
        events
    });
    let text = String::from_utf8(events.lock().unwrap().clone()).unwrap();
    text.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|e| e["queue"] == queue)
        .collect()
}

/// An outcome the server refuses for its document — a result that is not JSON or over
/// `leaseq.max_payload_bytes`, a `Dead` error that is not JSON, a snooze out of range — would be
/// refused again: that job alone fails, dead with the reason as its error (a retried failure
/// stays retried), and the others of its round complete. Every transition is a `tracing` event
/// with the job's fields, the dead one at ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_outcome_fails_only_its_own_job_dead_with_the_reason_and_is_logged() {
    use leaseq_client::{CancellationToken, Outcome, Worker, WorkerConfig};

    let _ = worker_events(""); // the subscriber, before the worker runs
    let (db, queue) = queue_of_jobs("poison", "max_attempts => 3", 20).await;
    let mut config = WorkerConfig::new(&queue);
    config.concurrency = 20;
    config.batch = 20;
    let shutdown = CancellationToken::new();
    let handled = std::sync::Arc::new(AtomicUsize::new(0));
    let worker = {
        let (handled, all_decided) = (handled.clone(), shutdown.clone());
        tokio::spawn(Worker::new(&url(), config).run(
            move |job, _lost| {
                if handled.fetch_add(1, Ordering::SeqCst) + 1 == 20 {
                    all_decided.cancel();
                }
                let n: serde_json::Value = serde_json::from_str(&job.payload).unwrap();
                let outcome = match n["n"].as_i64().unwrap() {
                    1 => Outcome::Complete {
                        result: Some("not json".into()),
                    },
                    2 => Outcome::Complete {
                        result: Some(format!(r#"{{"big": "{}"}}"#, "x".repeat(1_100_000))),
                    },
                    3 => Outcome::Fail {
                        error: Some("{bad".into()),
                        retry: false,
                        retry_in: None,
                    },
                    4 => Outcome::Snooze {
                        delay: Duration::from_secs(400 * 86_400),
                    },
                    5 => Outcome::Fail {
                        error: Some("{bad".into()),
                        retry: true,
                        retry_in: None,
                    },
                    _ => Outcome::Complete {
                        result: Some(r#"{"ok": true}"#.into()),
                    },
                };
                async move { outcome }
            },
            shutdown.clone(),
        ))
    };
    let summary = tokio::time::timeout(LONG, worker)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        (summary.claimed, summary.completed, summary.failed),
        (20, 15, 5)
    );

    let mut db = db;
    let q = queue.clone();
    let rows = tokio::task::spawn_blocking(move || {
        db.query(
            "SELECT (payload->>'n')::int, status::text, last_error->>'error',
                    last_error->>'outcome', last_error->>'sqlstate'
               FROM leaseq.jobs WHERE queue = $1 AND (payload->>'n')::int <= 6 ORDER BY 1",
            &[&q],
        )
        .unwrap()
    })
    .await
    .unwrap();
    // n, status, and the error's `error`, `outcome` and `sqlstate`
    type Row = (i32, String, Option<String>, Option<String>, Option<String>);
    let got: Vec<Row> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
        .collect();
    let refused = |n, status: &str, outcome: &str, sqlstate: &str| {
        (
            n,
            status.to_string(),
            Some("outcome_refused".to_string()),
            Some(outcome.to_string()),
            Some(sqlstate.to_string()),
        )
    };
    assert_eq!(
        got,
        vec![
            refused(1, "dead", "complete", "22P02"),
            refused(2, "dead", "complete", "54000"),
            refused(3, "dead", "dead", "22P02"),
            refused(4, "dead", "snooze", "22023"),
            refused(5, "pending", "fail", "22P02"),
            (6, "succeeded".into(), None, None, None),
        ]
    );

    let events = worker_events(&queue);
    let said = |message: &str, level: &str| -> Vec<i64> {
        let mut ids: Vec<i64> = events
            .iter()
            .filter(|e| e["message"] == message && e["level"] == level)
            .map(|e| e["job_id"].as_i64().unwrap())
            .collect();
        ids.sort();
        ids
    };
    assert_eq!(said("outcome_refused", "WARN").len(), 5, "{events:#?}");
    assert_eq!(said("failed", "ERROR").len(), 4, "{events:#?}");
    assert_eq!(said("failed", "WARN").len(), 1, "{events:#?}");
    assert_eq!(said("completed", "DEBUG").len(), 15, "{events:#?}");
    assert_eq!(said("claimed", "DEBUG").len(), 20, "{events:#?}");
    let dead = events
        .iter()
        .find(|e| e["message"] == "failed" && e["level"] == "ERROR")
        .unwrap();
    for field in ["worker", "job_id", "attempt", "key", "error"] {
        assert!(!dead[field].is_null(), "{field} missing: {dead}");
    }
    assert!(
        events
            .iter()
            .any(|e| e["message"] == "stopped" && e["level"] == "INFO")
    );
}

/// The leases of jobs claimed together are renewed together: one `queue_renew_batch` per
/// heartbeat (every renewed row carries that statement's `updated_at`), each lease extended, and
/// the jobs, held across several lease lengths, still complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_worker_renews_the_leases_it_holds_together() {
    use leaseq_client::{CancellationToken, Outcome, Worker, WorkerConfig};

    let (db, queue) = queue_of_jobs("renew_together", "lease => '1 second'", 8).await;

    let mut config = WorkerConfig::new(&queue);
    config.concurrency = 8;
    config.batch = 8;
    let release = CancellationToken::new();
    let shutdown = CancellationToken::new();
    let worker = {
        let release = release.clone();
        tokio::spawn(Worker::new(&url(), config).run(
            move |_job, lost| {
                let release = release.clone();
                async move {
                    tokio::select! {
                        _ = release.cancelled() => Outcome::Complete { result: None },
                        _ = lost.cancelled() => Outcome::Finished,
                    }
                }
            },
            shutdown.clone(),
        ))
    };

    // Held for three lease lengths, then read: all eight renewed, by one statement.
    tokio::time::sleep(Duration::from_millis(3000)).await;
    let mut db = db;
    let (db, row) = tokio::task::spawn_blocking(move || {
        let row = db
            .query_one(
                "SELECT count(*),
                        count(*) FILTER (WHERE updated_at > started_at
                                          AND lease_expires_at > clock_timestamp()),
                        count(DISTINCT updated_at)
                   FROM leaseq.jobs WHERE queue = $1 AND status = 'running'",
                &[&queue],
            )
            .unwrap();
        (
            db,
            (
                row.get::<_, i64>(0),
                row.get::<_, i64>(1),
                row.get::<_, i64>(2),
                queue,
            ),
        )
    })
    .await
    .unwrap();
    let (running, renewed, renewing_statements, queue) = row;
    assert_eq!((running, renewed), (8, 8), "every lease renewed and alive");
    assert_eq!(
        renewing_statements, 1,
        "the last renewal of all eight was one statement"
    );

    release.cancel();
    shutdown.cancel();
    let summary = tokio::time::timeout(LONG, worker)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        (summary.completed, summary.lease_lost),
        (8, 0),
        "{summary:?}"
    );
    assert_eq!(succeeded(db, queue).await, 8);
}

/// A single-slot Worker finishes each job in the job's own task, with no finisher (whose
/// connections it does not open): its jobs succeed and its run ends cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_slot_worker_finishes_each_job_itself_and_ends_cleanly() {
    use leaseq_client::{CancellationToken, Outcome, Worker, WorkerConfig};

    let (db, queue) = queue_of_jobs("single_slot", "", 5).await;

    let mut config = WorkerConfig::new(&queue);
    config.concurrency = 1;
    let handled = std::sync::Arc::new(AtomicUsize::new(0));
    let shutdown = CancellationToken::new();
    let worker = {
        let (handled, all_handled) = (handled.clone(), shutdown.clone());
        tokio::spawn(Worker::new(&url(), config).run(
            move |_job, _lost| {
                if handled.fetch_add(1, Ordering::SeqCst) + 1 == 5 {
                    all_handled.cancel();
                }
                async { Outcome::Complete { result: None } }
            },
            shutdown.clone(),
        ))
    };
    let summary = tokio::time::timeout(LONG, worker)
        .await
        .expect("the worker ends")
        .expect("the worker's run does not panic")
        .expect("the worker's run succeeds");
    assert_eq!((summary.claimed, summary.completed), (5, 5), "{summary:?}");
    assert_eq!(succeeded(db, queue).await, 5);
}

/// Prefetch holds claimed jobs beyond the slots, never runs more handlers than slots, and at
/// shutdown hands back what it never started: pending at once, no attempt spent, the hand-back
/// in history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefetching_worker_runs_only_its_slots_and_hands_back_what_it_never_started() {
    use leaseq_client::{CancellationToken, Outcome, Worker, WorkerConfig};

    let (db, queue) = queue_of_jobs("prefetch", "", 20).await;
    let mut config = WorkerConfig::new(&queue);
    (config.concurrency, config.prefetch, config.batch) = (2, 5, 10);
    let (running, most) = (
        std::sync::Arc::new(AtomicUsize::new(0)),
        std::sync::Arc::new(AtomicUsize::new(0)),
    );
    // Handlers run until the gate opens, after the shutdown.
    let (gate, shutdown) = (CancellationToken::new(), CancellationToken::new());
    let worker = {
        let (running, most, gate) = (running.clone(), most.clone(), gate.clone());
        tokio::spawn(Worker::new(&url(), config).run(
            move |_job, _stop| {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                let (running, gate) = (running.clone(), gate.clone());
                async move {
                    gate.cancelled().await;
                    running.fetch_sub(1, Ordering::SeqCst);
                    Outcome::Complete { result: None }
                }
            },
            shutdown.clone(),
        ))
    };
    let state = {
        let queue = queue.clone();
        move |db: &mut Client| -> String {
            db.query_one(
                "SELECT concat_ws(' ', count(*) FILTER (WHERE status = 'running'),
                                       count(*) FILTER (WHERE status = 'pending'),
                                       count(*) FILTER (WHERE status = 'succeeded'))
                   FROM leaseq.jobs WHERE queue = $1",
                &[&queue],
            )
            .unwrap()
            .get(0)
        }
    };
    // Claimed (the database's count) and started (the handlers' own): both, then look.
    let started = most.clone();
    let (db, held) = tokio::task::spawn_blocking(move || {
        let mut db = db;
        let until = Instant::now() + LONG;
        while (state(&mut db) != "7 13 0" || started.load(Ordering::SeqCst) < 2)
            && Instant::now() < until
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        let held = state(&mut db);
        (db, held)
    })
    .await
    .unwrap();
    assert_eq!(
        held, "7 13 0",
        "2 running and 5 prefetched (running, pending, succeeded)"
    );
    assert_eq!(
        most.load(Ordering::SeqCst),
        2,
        "handlers at once with 2 slots"
    );

    shutdown.cancel();
    let (db, handed) = tokio::task::spawn_blocking({
        let queue = queue.clone();
        move || {
            let mut db = db;
            let handed = eventually(
                &mut db,
                LONG,
                "SELECT count(*) = 5 FROM leaseq.attempts a JOIN leaseq.jobs j ON j.id = a.job_id
                  WHERE j.queue = $1 AND a.outcome = 'handed_back' AND a.attempt_no = 1
                    AND j.status = 'pending' AND j.attempts = 0 AND j.lease_token IS NULL",
                &[&queue],
            );
            (db, handed)
        }
    })
    .await
    .unwrap();
    assert!(
        handed,
        "the 5 prefetched jobs are handed back while the 2 still run"
    );
    gate.cancel();
    let summary = tokio::time::timeout(LONG, worker)
        .await
        .expect("the worker ends")
        .expect("the worker's run does not panic")
        .expect("the worker's run succeeds");
    assert_eq!(
        (summary.claimed, summary.completed, summary.handed_back),
        (7, 2, 5),
        "{summary:?}"
    );
    assert_eq!(most.load(Ordering::SeqCst), 2);
    assert_eq!(succeeded(db, queue).await, 2);
}

/// Under a Worker with many slots, the jobs of one group (group_concurrency 1) run one at a time
/// and in enqueue order, while other groups run beside them: the handler sees it happen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_worker_runs_each_group_one_at_a_time_in_enqueue_order() {
    use leaseq_client::{CancellationToken, Outcome, Worker, WorkerConfig};
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};

    const GROUPS: i64 = 4;
    const PER_GROUP: i64 = 6;
    let mut db = tokio::task::spawn_blocking(db).await.unwrap();
    let queue = tokio::task::spawn_blocking(move || {
        let queue = new_queue(&mut db, "groups", "");
        db.execute(
            "SELECT leaseq.queue_enqueue_batch($1,
                 ARRAY(SELECT jsonb_build_object('g', g, 'n', n)
                         FROM generate_series(1, $3) n, generate_series(1, $2) g ORDER BY n, g),
                 group_keys => ARRAY(SELECT 'g' || g
                         FROM generate_series(1, $3) n, generate_series(1, $2) g ORDER BY n, g))",
            &[&queue, &(GROUPS as i32), &(PER_GROUP as i32)],
        )
        .unwrap();
        queue
    })
    .await
    .unwrap();

    #[derive(Default)]
    struct Seen {
        running: HashMap<i64, usize>,
        most_in_a_group: usize,
        running_at_once: usize,
        most_at_once: usize,
        order: HashMap<i64, Vec<i64>>,
        done: i64,
    }
    let seen = Arc::new(Mutex::new(Seen::default()));
    let mut config = WorkerConfig::new(&queue);
    config.concurrency = 8;
    config.batch = 8;
    let shutdown = CancellationToken::new();
    let worker = {
        let (seen, all_done) = (seen.clone(), shutdown.clone());
        tokio::spawn(Worker::new(&url(), config).run(
            move |job, _lost| {
                let (seen, all_done) = (seen.clone(), all_done.clone());
                async move {
                    let doc: serde_json::Value = serde_json::from_str(&job.payload).unwrap();
                    let (g, n) = (doc["g"].as_i64().unwrap(), doc["n"].as_i64().unwrap());
                    {
                        let mut s = seen.lock().unwrap();
                        let in_group = s.running.entry(g).or_default();
                        *in_group += 1;
                        let in_group = *in_group;
                        s.most_in_a_group = s.most_in_a_group.max(in_group);
                        s.running_at_once += 1;
                        s.most_at_once = s.most_at_once.max(s.running_at_once);
                        s.order.entry(g).or_default().push(n);
                    }
                    tokio::time::sleep(Duration::from_millis(30)).await;
                    let mut s = seen.lock().unwrap();
                    *s.running.get_mut(&g).unwrap() -= 1;
                    s.running_at_once -= 1;
                    s.done += 1;
                    if s.done == GROUPS * PER_GROUP {
                        all_done.cancel();
                    }
                    Outcome::Complete { result: None }
                }
            },
            shutdown.clone(),
        ))
    };
    let summary = tokio::time::timeout(LONG, worker)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(summary.completed as i64, GROUPS * PER_GROUP);
    let seen = seen.lock().unwrap();
    assert_eq!(seen.most_in_a_group, 1, "never two jobs of a group at once");
    for g in 1..=GROUPS {
        assert_eq!(
            seen.order[&g],
            (1..=PER_GROUP).collect::<Vec<_>>(),
            "group {g}"
        );
    }
    assert!(seen.most_at_once >= 2, "groups run beside each other");
}

/// `job` (and so `leaseq show`) reads a database the library still serves at 0.2.0, whose jobs
/// have no progress yet.
#[tokio::test]
async fn job_reads_a_database_not_yet_updated_from_0_2_0() {
    use leaseq_client::client::QueueSettings;
    use leaseq_client::{Client as Leaseq, EnqueueOptions, JobStatus};

    let database = format!("leaseq_at_020_{}", std::process::id());
    let admin = Leaseq::connect(&url()).await.unwrap();
    for statement in [
        format!("DROP DATABASE IF EXISTS {database}"),
        format!("CREATE DATABASE {database}"),
    ] {
        admin.raw().batch_execute(&statement).await.unwrap();
    }
    let base = url();
    let at_020 = format!("{}/{database}", base.rsplit_once('/').unwrap().0);
    let old = Leaseq::connect(&at_020).await.unwrap();
    old.raw()
        .batch_execute("CREATE EXTENSION leaseq VERSION '0.2.0'")
        .await
        .unwrap();
    old.queue_create("old", &QueueSettings::default())
        .await
        .unwrap();
    let id = old
        .enqueue("old", r#"{"n": 1}"#, &EnqueueOptions::default())
        .await
        .unwrap();
    let job = old.job(id).await.unwrap();
    assert_eq!((job.id, job.status), (id, JobStatus::Pending));
    assert!(job.progress.is_none() && job.progress_at.is_none());
    drop(old);
    admin
        .raw()
        .batch_execute(&format!("DROP DATABASE {database} WITH (FORCE)"))
        .await
        .unwrap();
}

/// A handler past the Worker's `timeout` is told (its token fires) and dropped, and its job fails
/// with `{"error": "timeout"}`, retried by the queue's policy; the others are untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_past_the_timeout_is_told_and_its_job_fails_with_a_timeout_error() {
    use leaseq_client::{CancellationToken, Outcome, Worker, WorkerConfig};

    let (mut db, queue) = queue_of_jobs(
        "timeout",
        "backoff_base => '1 hour', backoff_cap => '1 hour'",
        2,
    )
    .await;
    let mut config = WorkerConfig::new(&queue);
    config.concurrency = 2;
    config.timeout = Some(Duration::from_millis(300));
    let shutdown = CancellationToken::new();
    let told = std::sync::Arc::new(AtomicUsize::new(0));
    let handled = std::sync::Arc::new(AtomicUsize::new(0));
    let worker = {
        let (told, handled, stop) = (told.clone(), handled.clone(), shutdown.clone());
        tokio::spawn(Worker::new(&url(), config).run(
            move |job, token| {
                let (told, handled, stop) = (told.clone(), handled.clone(), stop.clone());
                async move {
                    let slow = job.payload.contains("1");
                    let outcome = if slow {
                        let watch = told.clone();
                        // Told at the timeout: the token fires before the future is dropped.
                        tokio::spawn(async move {
                            token.cancelled().await;
                            watch.fetch_add(1, Ordering::SeqCst);
                        });
                        tokio::time::sleep(Duration::from_secs(30)).await;
                        Outcome::Complete { result: None }
                    } else {
                        Outcome::Complete { result: None }
                    };
                    if handled.fetch_add(1, Ordering::SeqCst) + 1 == 1 {
                        stop.cancel();
                    }
                    outcome
                }
            },
            shutdown.clone(),
        ))
    };
    let summary = tokio::time::timeout(LONG, worker)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        (summary.completed, summary.failed, summary.timed_out),
        (1, 1, 1)
    );
    assert_eq!(
        told.load(Ordering::SeqCst),
        1,
        "the slow handler's token fired"
    );
    let q = queue.clone();
    let row = tokio::task::spawn_blocking(move || {
        db.query_one(
            "SELECT status::text, last_error->>'error', attempts FROM leaseq.jobs
              WHERE queue = $1 AND payload = '{\"n\": 1}'",
            &[&q],
        )
        .unwrap()
    })
    .await
    .unwrap();
    let got: (String, String, i32) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(got, ("pending".into(), "timeout".into(), 1));
}
