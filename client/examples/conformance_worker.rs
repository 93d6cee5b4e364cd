//! The conformance worker in Rust (clients/conformance/README.md says what it does): the
//! library `Worker`, configured from the environment, its handler logging to the test tables.
use std::sync::Arc;
use std::time::Duration;

use leaseq_client::{
    EnqueueOptions, Job, Outcome, Worker, WorkerConfig, complete_tx, enqueue_tx,
    shutdown_on_signals,
};
use tokio_postgres::NoTls;

fn env_ms(name: &str) -> Option<Duration> {
    std::env::var(name)
        .ok()
        .map(|v| Duration::from_millis(v.parse().expect("milliseconds")))
}

async fn log(db: &tokio_postgres::Client, job: &Job, event: &str) {
    db.execute(
        "INSERT INTO conformance_log (job_id, attempt, pid, event) VALUES ($1, $2, $3, $4)",
        &[
            &job.id,
            &job.attempt_no,
            &(std::process::id() as i32),
            &event,
        ],
    )
    .await
    .expect("log");
}

/// Sleeps `ms`, logs the end, and decides as the payload's `do` says.
async fn behave(db: &tokio_postgres::Client, job: &Job) -> Outcome {
    let payload: serde_json::Value = serde_json::from_str(&job.payload).expect("JSON");
    let ms = payload["ms"].as_u64().unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(ms)).await;
    log(db, job, "end").await;
    match payload["do"].as_str().unwrap_or("ok") {
        "throw" => Outcome::Fail {
            error: Some(r#"{"error": "asked to fail"}"#.into()),
            retry: true,
            retry_in: None,
        },
        "dead" => Outcome::Fail {
            error: Some(r#"{"error": "asked to die"}"#.into()),
            retry: false,
            retry_in: None,
        },
        "snooze" => Outcome::Snooze {
            delay: Duration::from_secs(3600),
        },
        // Over leaseq.max_payload_bytes: refused.
        "poison" => Outcome::Complete {
            result: Some(format!(r#"{{"big": "{}"}}"#, "x".repeat(1_100_000))),
        },
        _ => Outcome::Complete {
            result: Some(format!(r#"{{"pid": {}}}"#, std::process::id())),
        },
    }
}

async fn connect(url: &str) -> tokio_postgres::Client {
    let (db, connection) = tokio_postgres::connect(url, NoTls).await.expect("connect");
    tokio::spawn(connection);
    db
}

#[tokio::main]
async fn main() {
    let url = std::env::var("DATABASE_URL").expect("DATABASE_URL");
    if std::env::var("MODE").as_deref() == Ok("enqueue") {
        // A producer: one enqueue rolled back with its transaction, one committed.
        let queue = std::env::var("QUEUE").expect("QUEUE");
        let mut db = connect(&url).await;
        for (payload, commit) in [
            (r#"{"rolled_back": true}"#, false),
            (r#"{"committed": true}"#, true),
        ] {
            let tx = db.transaction().await.expect("begin");
            enqueue_tx(&tx, &queue, payload, &EnqueueOptions::default())
                .await
                .expect("enqueue");
            if commit {
                tx.commit().await.expect("commit");
            } else {
                tx.rollback().await.expect("rollback");
            }
        }
        return;
    }
    let transactional = std::env::var("TRANSACTIONAL").as_deref() == Ok("1");
    let mut config = WorkerConfig::new(&std::env::var("QUEUE").expect("QUEUE"));
    config.concurrency = std::env::var("CONCURRENCY").map_or(4, |c| c.parse().expect("a number"));
    config.prefetch = std::env::var("PREFETCH").map_or(0, |p| p.parse().expect("a number"));
    config.lease = env_ms("LEASE_MS");
    config.poll = env_ms("POLL_MS").unwrap_or(Duration::from_secs(1));
    config.grace = env_ms("GRACE_MS").unwrap_or(Duration::from_secs(5));
    let logs = Arc::new(connect(&url).await);
    let shutdown = shutdown_on_signals().expect("signal handlers");
    let handler_url = url.clone();
    let summary = Worker::new(&url, config)
        .run(
            move |job, _lost| {
                let logs = logs.clone();
                let url = handler_url.clone();
                async move {
                    log(&logs, &job, "start").await;
                    if !transactional {
                        return behave(&logs, &job).await;
                    }
                    // The effect and the completion in one transaction: committed only if the
                    // completion is accepted.
                    let mut db = connect(&url).await;
                    let tx = db.transaction().await.expect("begin");
                    tx.execute(
                        "INSERT INTO conformance_effects (job_id, attempt, pid) VALUES ($1, $2, $3)",
                        &[&job.id, &job.attempt_no, &(std::process::id() as i32)],
                    )
                    .await
                    .expect("effect");
                    match behave(&logs, &job).await {
                        Outcome::Complete { result } => {
                            if complete_tx(&tx, &job, result.as_deref()).await.unwrap_or(false) {
                                tx.commit().await.expect("commit");
                            }
                            Outcome::Finished
                        }
                        other => other, // the transaction rolls back when dropped
                    }
                }
            },
            shutdown,
        )
        .await;
    if let Err(refused) = summary {
        eprintln!("refused: {}", leaseq_client::describe(&refused));
        std::process::exit(1);
    }
}
