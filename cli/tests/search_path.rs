//! No statement of the Rust client, its `Worker` or the `leaseq` command runs an operator someone
//! else planted in schema public, on the default search_path (the CVE-2018-1058 class;
//! docs/security.md, "The clients' own statements"). The trojans are
//! clients/conformance/public_trojans.sql, shared with the Python and Node clients' tests: each
//! records the role it ran as in public.trojan_calls. Needs `LEASEQ_TEST_DATABASE_URL` (a
//! superuser's: the test makes a database of its own and a role).
#![cfg(feature = "live-tests")]

use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use leaseq_client::client::QueueSettings;
use leaseq_client::{
    CancellationToken, Client, EnqueueOptions, JobStatus, Outcome, Worker, WorkerConfig,
};

const TROJANS: &str = include_str!("../../clients/conformance/public_trojans.sql");
const QUEUE: &str = "trojans";
const LONG: Duration = Duration::from_secs(30);

fn url() -> String {
    std::env::var("LEASEQ_TEST_DATABASE_URL")
        .expect("LEASEQ_TEST_DATABASE_URL must name a database with leaseq installed")
}

/// `leaseq ARGS` against `database`, to its end.
fn leaseq(database: &str, args: &[&str]) -> Output {
    let output = Command::new(env!("CARGO_BIN_EXE_leaseq"))
        .args(args)
        .env("DATABASE_URL", database)
        .stdin(Stdio::null())
        .output()
        .expect("run leaseq");
    assert!(
        output.status.success(),
        "leaseq {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_statement_of_the_client_worker_or_cli_runs_an_operator_planted_in_public() {
    // A database of its own, leaseq installed and the trojans planted.
    let database = format!("leaseq_trojans_rust_{}", std::process::id());
    let admin = Client::connect(&url()).await.unwrap();
    // Each alone: DROP DATABASE refuses to run in a transaction, even an implicit one.
    let drop_them = [
        format!("DROP DATABASE IF EXISTS {database} WITH (FORCE)"),
        format!("DROP ROLE IF EXISTS {database}_author"),
    ];
    for statement in &drop_them {
        admin.raw().batch_execute(statement).await.unwrap();
    }
    admin
        .raw()
        .batch_execute(&format!("CREATE DATABASE {database}"))
        .await
        .unwrap();
    let planted = format!("{}/{database}", url().rsplit_once('/').unwrap().0);
    let setup = Client::connect(&planted).await.unwrap();
    setup
        .raw()
        .batch_execute("CREATE EXTENSION leaseq")
        .await
        .unwrap();
    setup.raw().batch_execute(TROJANS).await.unwrap();
    let trojans: i64 = setup
        .raw()
        .query_one(
            "SELECT count(*) FROM pg_catalog.pg_operator
              WHERE oprnamespace OPERATOR(pg_catalog.=) 'public'::regnamespace",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(trojans > 100, "the trojans are planted");

    // The command, as ops would: the queue with every duration.
    leaseq(
        &planted,
        &[
            "queue",
            "create",
            QUEUE,
            "--lease",
            "30s",
            "--backoff-base",
            "1h",
            "--backoff-cap",
            "1h",
            "--retain",
            "1d",
        ],
    );
    let client = Client::connect(&planted).await.unwrap();
    client
        .queue_create(
            QUEUE,
            &QueueSettings {
                lease: Some(Duration::from_secs(30)),
                backoff_base: Some(Duration::from_secs(3600)),
                backoff_cap: Some(Duration::from_secs(3600)),
                retain: Some(Duration::from_secs(86400)),
                ..QueueSettings::default()
            },
        )
        .await
        .unwrap();
    let payloads: Vec<String> = (0..4).map(|n| format!(r#"{{"n": {n}}}"#)).collect();
    let mut ids = client
        .enqueue_batch(QUEUE, &payloads, None, 0)
        .await
        .unwrap();
    let once = EnqueueOptions {
        dedupe_key: Some("once".into()),
        dedupe_for: Some(Duration::from_secs(3600)),
        ..EnqueueOptions::default()
    };
    ids.push(client.enqueue(QUEUE, r#"{"n": 4}"#, &once).await.unwrap());
    let after = EnqueueOptions {
        depends_on: vec![ids[0]],
        ..EnqueueOptions::default()
    };
    ids.push(client.enqueue(QUEUE, r#"{"n": 5}"#, &after).await.unwrap());

    // By hand: every call on a claimed job.
    let mut claimed = client
        .claim(QUEUE, "by-hand", 4, Some(Duration::from_secs(30)))
        .await
        .unwrap();
    claimed.sort_by_key(|job| job.id);
    assert_eq!(claimed.iter().map(|j| j.id).collect::<Vec<_>>(), ids[..4]);
    for job in &claimed {
        assert!(job.key.starts_with(&format!("{}-", job.id)), "{}", job.key);
    }
    let lease = Some(Duration::from_secs(30));
    assert!(client.renew(&claimed[0], lease).await.unwrap().is_some());
    let leases: Vec<_> = claimed.iter().map(|j| (j.id, j.lease_token)).collect();
    let renewed = client.renew_batch(&leases, lease).await.unwrap();
    assert!(renewed.iter().all(Option::is_some));
    assert!(
        client
            .progress(&claimed[0], r#"{"half": true}"#)
            .await
            .unwrap()
    );
    let step = || async { Ok::<_, ()>(Some(r#"{"s": 1}"#.to_string())) };
    client.run_step(&claimed[0], "one", step).await.unwrap();
    assert!(client.complete(&claimed[0], None).await.unwrap());
    let snoozed = client.snooze(&claimed[1], Duration::ZERO).await.unwrap();
    assert_eq!(snoozed.as_deref(), Some("pending"));
    let failed = client
        .fail(&claimed[2], None, true, Some(Duration::ZERO))
        .await
        .unwrap();
    assert_eq!(failed.as_deref(), Some("pending"));
    assert_eq!(client.hand_back(&[&claimed[3]]).await.unwrap(), [true]);

    // The Worker: claims, a heartbeat (one job outlives two thirds of its 3 s lease), the
    // finishes.
    let mut config = WorkerConfig::new(QUEUE);
    config.concurrency = 4;
    config.lease = Some(Duration::from_secs(3));
    let handled = Arc::new(AtomicUsize::new(0));
    let shutdown = CancellationToken::new();
    let worker = {
        let (handled, all_handled) = (handled.clone(), shutdown.clone());
        Worker::new(&planted, config).run(
            move |job, _lost| {
                let (handled, all_handled) = (handled.clone(), all_handled.clone());
                async move {
                    if job.payload.contains("2}") {
                        tokio::time::sleep(Duration::from_millis(2500)).await;
                    }
                    if handled.fetch_add(1, Ordering::SeqCst) + 1 == 5 {
                        all_handled.cancel(); // drain, which finishes them
                    }
                    Outcome::Complete { result: None }
                }
            },
            shutdown,
        )
    };
    let summary = tokio::time::timeout(LONG, worker).await.unwrap().unwrap();
    assert_eq!(summary.completed, 5);

    // `leaseq enqueue`, `leaseq work`, `leaseq await`, and the read commands.
    let enqueued = leaseq(
        &planted,
        &["enqueue", "--queue", QUEUE, "--json", r#"{"n": 6}"#],
    );
    let id = String::from_utf8(enqueued.stdout)
        .unwrap()
        .trim()
        .to_string();
    ids.push(id.parse().unwrap());
    let mut work = Command::new(env!("CARGO_BIN_EXE_leaseq"))
        .args(["work", "--queue", QUEUE, "--lease", "30s", "--"])
        .args(["sh", "-c", "cat >/dev/null"])
        .env("DATABASE_URL", &planted)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start leaseq work");
    leaseq(&planted, &["await", &id, "--timeout", "30s"]);
    // SAFETY: signals our own child process.
    assert_eq!(unsafe { libc::kill(work.id() as i32, libc::SIGTERM) }, 0);
    assert!(work.wait().unwrap().success());
    for read in [
        &["stats"][..],
        &["jobs", "--queue", QUEUE],
        &["show", &id],
        &["metrics"],
    ] {
        leaseq(&planted, read);
    }
    assert!(
        client
            .stats()
            .await
            .unwrap()
            .iter()
            .any(|s| s.queue == QUEUE)
    );
    assert_eq!(client.jobs(QUEUE, None, 100).await.unwrap().len(), 7);
    for id in &ids {
        let status = client.job(*id).await.unwrap().status;
        assert_eq!(status, JobStatus::Succeeded, "job {id}");
    }

    let calls: Vec<(String, String)> = setup
        .raw()
        .query(
            "SELECT DISTINCT operator, called_by::text FROM public.trojan_calls ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    assert!(
        calls.is_empty(),
        "a client statement ran operators planted in public: {calls:?}"
    );
    drop((client, setup));
    for statement in &drop_them {
        admin.raw().batch_execute(statement).await.unwrap();
    }
}
