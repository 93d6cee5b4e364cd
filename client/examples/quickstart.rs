//! leaseq in five minutes, in Rust: an order and the job that emails its confirmation, committed
//! in one transaction, then a Worker that runs the job, stopped once the job is final.
//!
//! `DATABASE_URL=postgresql://localhost/app cargo run -p leaseq-client --example quickstart`
use std::time::Duration;

use leaseq_client::client::QueueSettings;
use leaseq_client::{
    CancellationToken, Client, EnqueueOptions, Outcome, Uuid, Worker, WorkerConfig, enqueue_tx,
};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("DATABASE_URL")?;
    let mut client = Client::connect(&url).await?;
    // Creates the queue, or updates its settings; those left out take the extension's defaults.
    let settings = QueueSettings {
        max_attempts: Some(5),
        ..QueueSettings::default()
    };
    client.queue_create("emails", &settings).await?;

    // Your row and its job in one transaction: both are committed, or neither is.
    let tx = client.pg().transaction().await?;
    tx.execute(
        "CREATE TABLE IF NOT EXISTS orders (id uuid PRIMARY KEY, email text NOT NULL)",
        &[],
    )
    .await?;
    let order: Uuid = tx
        .query_one(
            "INSERT INTO orders (id, email) VALUES (gen_random_uuid(), $1) RETURNING id",
            &[&"ada@example.com"],
        )
        .await?
        .get(0);
    let payload = serde_json::json!({"order": order.to_string(), "email": "ada@example.com"});
    let job_id = enqueue_tx(
        &tx,
        "emails",
        &payload.to_string(),
        &EnqueueOptions::default(),
    )
    .await?;
    tx.commit().await?;

    // The handler: `Complete` with the job's result, or `Fail` / `Snooze`. `_lost` fires when the
    // lease is lost: stop then, what the handler returns afterwards is not sent.
    let handler = |job: leaseq_client::Job, _lost: CancellationToken| async move {
        let payload: serde_json::Value =
            serde_json::from_str(&job.payload).expect("the server stores JSON");
        let email = payload["email"].as_str().unwrap_or_default();
        let order = payload["order"].as_str().unwrap_or_default();
        println!("emailing {email} about order {order}");
        let result = serde_json::json!({"sent_to": email});
        Outcome::Complete {
            result: Some(result.to_string()),
        }
    };
    // The Worker runs until `shutdown` is cancelled, then drains: a service cancels it on
    // SIGTERM; here, once the job is final.
    let shutdown = CancellationToken::new();
    let watcher = Client::connect(&url).await?;
    let (summary, awaited) = tokio::join!(
        Worker::new(&url, WorkerConfig::new("emails")).run(handler, shutdown.clone()),
        async {
            let awaited = watcher.await_jobs(&[job_id], Duration::from_secs(30)).await;
            shutdown.cancel();
            awaited
        }
    );
    summary?;
    awaited?;

    let job = client.job(job_id).await?;
    let result = job.result.map(|r| r.get().to_string()).unwrap_or_default();
    println!("job {job_id}: {}, result {result}", job.status);
    Ok(())
}
