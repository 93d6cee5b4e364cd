//! OpenTelemetry (feature `otel`), end to end through the server: an enqueue in a span keeps that
//! span's context (the job's `trace_context`), and the Worker runs each attempt in a consumer
//! span that is its child — same trace, the producer's span its parent — with the job's
//! attributes and the outcome as its status. Read back through the SDK's in-memory exporter.
//! Needs `LEASEQ_TEST_DATABASE_URL` (a superuser's).
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use leaseq_client::{CancellationToken, Client, EnqueueOptions, Outcome, Worker, WorkerConfig};
use opentelemetry::trace::{FutureExt, Span, SpanKind, Status, TraceContextExt, Tracer};
use opentelemetry::{Context, KeyValue, Value};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};

fn url() -> String {
    std::env::var("LEASEQ_TEST_DATABASE_URL")
        .expect("LEASEQ_TEST_DATABASE_URL must name a database with leaseq installed")
}

/// The spans ended so far: one provider for the test binary (the global one is set once).
fn exporter() -> &'static InMemorySpanExporter {
    static EXPORTER: OnceLock<InMemorySpanExporter> = OnceLock::new();
    EXPORTER.get_or_init(|| {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        opentelemetry::global::set_tracer_provider(provider);
        exporter
    })
}

/// The consumer span of the attempt of `queue`'s job `job_id`.
fn attempt_of(queue: &str, job_id: i64) -> SpanData {
    let spans = exporter().get_finished_spans().unwrap();
    let mut found: Vec<SpanData> = spans
        .into_iter()
        .filter(|s| {
            s.span_kind == SpanKind::Consumer
                && s.attributes
                    .contains(&KeyValue::new("leaseq.job_id", job_id))
                && s.attributes
                    .contains(&KeyValue::new("leaseq.queue", queue.to_string()))
        })
        .collect();
    assert_eq!(found.len(), 1, "{found:#?}");
    found.remove(0)
}

fn attribute(span: &SpanData, key: &str) -> Option<Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.clone())
}

async fn new_queue(client: &Client, settings: &str) -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let name = format!(
        "tracing_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let comma = if settings.is_empty() { "" } else { ", " };
    client
        .raw()
        .batch_execute(&format!(
            "SELECT leaseq.queue_create('{name}'{comma}{settings})"
        ))
        .await
        .unwrap();
    name
}

/// Runs a Worker on `queue` until `jobs` of its handlers have decided, with `decide`.
async fn work(queue: &str, jobs: usize, decide: fn(&str) -> Outcome) {
    let mut config = WorkerConfig::new(queue);
    config.concurrency = 4;
    let shutdown = CancellationToken::new();
    let handled = std::sync::Arc::new(AtomicUsize::new(0));
    let (all, stop) = (handled.clone(), shutdown.clone());
    let worker = Worker::new(&url(), config).run(
        move |job, _lost| {
            if all.fetch_add(1, Ordering::SeqCst) + 1 == jobs {
                stop.cancel();
            }
            // The handler's own span: a child of the attempt's.
            let inner = opentelemetry::global::tracer("the handler").start("send email");
            drop(inner);
            let outcome = decide(&job.payload);
            async move { outcome }
        },
        shutdown,
    );
    tokio::time::timeout(Duration::from_secs(60), worker)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_workers_span_is_a_child_of_the_producers_with_the_jobs_attributes() {
    exporter();
    let client = Client::connect(&url()).await.unwrap();
    let queue = new_queue(&client, "max_attempts => 1").await;
    let producer = opentelemetry::global::tracer("the producer").start("POST /orders");
    let produced = producer.span_context().clone();
    let context = Context::current_with_span(producer);
    let (fine, dying) = async {
        let options = EnqueueOptions::default();
        let fine = client.enqueue(&queue, r#"{"do": "ok"}"#, &options).await;
        let dying = client.enqueue(&queue, r#"{"do": "die"}"#, &options).await;
        (fine.unwrap(), dying.unwrap())
    }
    .with_context(context.clone())
    .await;
    context.span().end();
    let untraced = client
        .enqueue(&queue, r#"{"do": "ok"}"#, &EnqueueOptions::default())
        .await
        .unwrap();

    work(&queue, 3, |payload| {
        if payload.contains("die") {
            Outcome::Fail {
                error: Some(r#"{"error": "the upstream said no"}"#.into()),
                retry: true,
                retry_in: None,
            }
        } else {
            Outcome::Complete { result: None }
        }
    })
    .await;

    let span = attempt_of(&queue, fine);
    assert_eq!(span.span_context.trace_id(), produced.trace_id());
    assert_eq!(span.parent_span_id, produced.span_id());
    assert_eq!(span.name, format!("{queue} process"));
    for (key, value) in [
        ("messaging.system", Value::from("leaseq")),
        ("messaging.operation.type", Value::from("process")),
        ("messaging.destination.name", Value::from(queue.clone())),
        ("messaging.message.id", Value::from(fine.to_string())),
        ("leaseq.job_id", Value::from(fine)),
        ("leaseq.queue", Value::from(queue.clone())),
        ("leaseq.attempt", Value::from(1i64)),
        ("leaseq.outcome", Value::from("complete")),
    ] {
        assert_eq!(attribute(&span, key), Some(value), "{key}: {span:#?}");
    }
    assert_eq!(span.status, Status::Unset);
    let inner: Vec<SpanData> = exporter()
        .get_finished_spans()
        .unwrap()
        .into_iter()
        .filter(|s| s.name == "send email" && s.parent_span_id == span.span_context.span_id())
        .collect();
    assert_eq!(inner.len(), 1, "the handler's span is the attempt's child");

    let failed = attempt_of(&queue, dying);
    assert_eq!(failed.span_context.trace_id(), produced.trace_id());
    assert_eq!(attribute(&failed, "leaseq.outcome"), Some("dead".into()));
    assert!(matches!(failed.status, Status::Error { .. }), "{failed:#?}");

    let root = attempt_of(&queue, untraced);
    assert_eq!(
        root.parent_span_id,
        opentelemetry::trace::SpanId::INVALID,
        "a root span: no producer context"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_explicit_trace_context_is_kept_exactly_and_a_malformed_one_refused() {
    let client = Client::connect(&url()).await.unwrap();
    let queue = new_queue(&client, "").await;
    let given = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let options = EnqueueOptions {
        trace_context: Some(given.into()),
        ..EnqueueOptions::default()
    };
    let id = client.enqueue(&queue, "{}", &options).await.unwrap();
    let claimed = client.claim(&queue, "w", 1, None).await.unwrap();
    assert_eq!(
        (claimed[0].id, claimed[0].trace_context.as_deref()),
        (id, Some(given))
    );
    let bad = EnqueueOptions {
        trace_context: Some("00-0af7651916cd43dd8448eb211c80319c".into()),
        ..EnqueueOptions::default()
    };
    let refused = client.enqueue(&queue, "{}", &bad).await.unwrap_err();
    assert_eq!(refused.code().map(|c| c.code()), Some("22023"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_span_a_database_not_yet_updated_still_enqueues_and_works_untraced() {
    exporter();
    // 0.2.0's definitions know no trace context: the span's is left out, never an error.
    let admin = Client::connect(&url()).await.unwrap();
    let old = format!("rs_traced_at_020_{}", std::process::id());
    let raw = admin.raw();
    raw.batch_execute(&format!("DROP DATABASE IF EXISTS {old}"))
        .await
        .unwrap();
    raw.batch_execute(&format!("CREATE DATABASE {old}"))
        .await
        .unwrap();
    let old_url = {
        let url = url();
        let (base, _) = url.rsplit_once('/').unwrap();
        format!("{base}/{old}")
    };
    let mut client = Client::connect(&old_url).await.unwrap();
    client
        .raw()
        .batch_execute(
            "CREATE EXTENSION leaseq VERSION '0.2.0'; SELECT leaseq.queue_create('rs_old')",
        )
        .await
        .unwrap();
    let span = opentelemetry::global::tracer("the producer").start("old");
    let context = Context::current_with_span(span);
    let ids = async {
        let options = EnqueueOptions::default();
        let one = client.enqueue("rs_old", "{}", &options).await.unwrap();
        let tx = client.pg().transaction().await.unwrap();
        let two = leaseq_client::enqueue_tx(&tx, "rs_old", "{}", &options)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        [one, two]
    }
    .with_context(context)
    .await;
    drop(client);
    let mut config = WorkerConfig::new("rs_old");
    config.concurrency = 2;
    let shutdown = CancellationToken::new();
    let handled = std::sync::Arc::new(AtomicUsize::new(0));
    let (all, stop) = (handled.clone(), shutdown.clone());
    let summary = tokio::time::timeout(
        Duration::from_secs(60),
        Worker::new(&old_url, config).run(
            move |_job, _lost| {
                if all.fetch_add(1, Ordering::SeqCst) + 1 == 2 {
                    stop.cancel();
                }
                async { Outcome::Complete { result: None } }
            },
            shutdown,
        ),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(summary.completed, 2);
    for id in ids {
        assert_eq!(
            attempt_of("rs_old", id).parent_span_id,
            opentelemetry::trace::SpanId::INVALID
        );
    }
    raw.batch_execute(&format!("DROP DATABASE {old} WITH (FORCE)"))
        .await
        .unwrap();
}
