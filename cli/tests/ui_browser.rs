//! `leaseq ui` in a real browser: Debian's chromium, driven through chromedriver (WebDriver, the
//! fantoccini crate, plain HTTP on loopback), walking what a person does — the overview, a
//! payload filter, a bulk cancel, a job whose lease expired redriven after confirming, a queue
//! paused under a live worker, and the same pages as an observer, who finds no button. Every
//! step checks what the page shows and, after an action, what the database holds. Screenshots go
//! to `target/ui-shots/` (overview.png is the README's, both are docs/console.md's).
//!
//! Needs `LEASEQ_TEST_DATABASE_URL` (a superuser on a cluster with leaseq preloaded; skipped
//! without it) and `chromedriver` on the PATH (a failure without it: scripts/setup installs
//! chromium and chromium-driver). The walk runs in a database of its own, created and dropped
//! here, whose clock (`leaseq.clock_offset`, the superuser test hook) runs an hour ahead, so that
//! the last 45 minutes can be played minute by minute for the throughput chart; the console and
//! the worker read that same clock.
use std::future::Future;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::elements::Element;
use fantoccini::{Client as Browser, ClientBuilder, Locator};
use serde_json::{Value, json};
use tokio_postgres::{Client as Db, NoTls};

/// The walk's own database and the observer's login role (both dropped and made anew).
const DATABASE: &str = "leaseq_ui_browser_walk";
const OBSERVER: &str = "leaseq_ui_browser_observer";
/// How far ahead the walk's clock runs, in seconds: the history is played in the hour before.
const AHEAD: i64 = 3600;
/// The longest any element or state is waited for.
const PATIENCE: Duration = Duration::from_secs(15);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_walked_in_a_real_browser() {
    let Ok(url) = std::env::var("LEASEQ_TEST_DATABASE_URL") else {
        eprintln!("skipped: LEASEQ_TEST_DATABASE_URL is not set (scripts/test sets it)");
        return;
    };
    let started = Instant::now();
    let scene = Scene::build(&url).await;
    let shots = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/ui-shots");
    std::fs::create_dir_all(&shots).expect("create target/ui-shots");
    let driver = ChromeDriver::start();
    let admin_console = Console::start(&scene.admin_url, "admin");
    let browser = driver.browser().await;
    let page = Page {
        browser,
        base: admin_console.base.clone(),
        shots,
    };

    overview_shows_every_queue_by_state_and_the_last_hour(&page, &scene).await;
    jobs_are_filtered_by_payload(&page, &scene).await;
    bulk_cancel_cancels_the_selected_jobs_after_confirming(&page, &scene).await;
    a_job_whose_lease_expired_is_redriven_after_confirming(&page, &scene).await;
    a_paused_queue_leaves_its_worker_idle(&page, &scene).await;
    let observer_console = Console::start(&scene.observer_url, "observer");
    let observer = Page {
        base: observer_console.base.clone(),
        ..page
    };
    an_observer_sees_the_queues_and_no_button(&observer, &scene).await;

    observer
        .browser
        .clone()
        .close()
        .await
        .expect("end the browser session");
    drop(observer_console);
    drop(admin_console);
    scene.drop_database().await;
    eprintln!(
        "ui_browser: walked in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

// ---------------------------------------------------------------------------------------------
// The steps.

async fn overview_shows_every_queue_by_state_and_the_last_hour(page: &Page, scene: &Scene) {
    page.visit("/").await;
    page.wait_for("[data-testid=queues-table]").await;
    assert_eq!(page.title().await, "Queues");
    let rows = page.all("tr[data-testid=queue-row]").await;
    let mut shown = Vec::new();
    for row in &rows {
        shown.push(row.attr("data-queue").await.unwrap().unwrap_or_default());
    }
    assert_eq!(
        shown,
        ["billing", "emails", "reports", "thumbnails", "webhooks"]
    );
    // Each number a person reads is the database's.
    let overview = scene
        .db
        .query(
            "SELECT queue, pending, running, expired_leases, dead, waiting, paused
               FROM leaseq.queue_overview() ORDER BY queue",
            &[],
        )
        .await
        .unwrap();
    for r in &overview {
        let queue: String = r.get(0);
        let cell = |testid: &str| format!("tr[data-queue={queue}] [data-testid={testid}]");
        for (i, testid) in ["pending", "running", "expired-leases", "dead", "waiting"]
            .iter()
            .enumerate()
        {
            let expected: i64 = r.get(i + 1);
            assert_eq!(
                page.text(&cell(testid)).await,
                expected.to_string(),
                "{queue}: {testid}"
            );
        }
        assert_eq!(page.text(&cell("paused")).await, "active", "{queue}");
    }
    // The scenario's states, as the overview shows them.
    assert_eq!(
        page.text("tr[data-queue=emails] [data-testid=expired-leases]")
            .await,
        "1"
    );
    assert_eq!(
        page.text("tr[data-queue=billing] [data-testid=waiting]")
            .await,
        "2"
    );
    assert_eq!(
        page.text("tr[data-queue=webhooks] [data-testid=dead]")
            .await,
        "1"
    );
    assert_eq!(
        page.text("tr[data-queue=reports] [data-testid=dead]").await,
        "1"
    );
    assert_ne!(
        page.text("tr[data-queue=reports] [data-testid=scheduled]")
            .await,
        "0"
    );
    // The chart: the last hour's completions and failures, the database's totals.
    let totals = scene
        .db
        .query_one(
            "SELECT sum(completed)::bigint, sum(failed)::bigint, count(DISTINCT minute)
               FROM leaseq.queue_throughput(60)",
            &[],
        )
        .await
        .unwrap();
    let (completed, failed, minutes): (i64, i64, i64) =
        (totals.get(0), totals.get(1), totals.get(2));
    assert!(
        completed > 300,
        "the played hour completed {completed} jobs"
    );
    assert!(failed > 0);
    let caption = page.text("[data-testid=throughput-chart] figcaption").await;
    assert_eq!(
        caption,
        format!("completed {completed} · failed {failed} · per minute, last {minutes} min")
    );
    let points = page
        .attr(
            "[data-testid=throughput-chart] polyline.completed",
            "points",
        )
        .await;
    let heights: Vec<f64> = points
        .split_whitespace()
        .filter_map(|p| p.split_once(',')?.1.parse().ok())
        .collect();
    assert_eq!(heights.len() as i64, minutes, "a point per minute");
    assert!(
        heights.iter().filter(|&&y| y < 100.0).count() > 30,
        "the completed line rises over most of the hour: {points}"
    );
    page.shot_full("overview").await;
}

async fn jobs_are_filtered_by_payload(page: &Page, scene: &Scene) {
    page.click_through("[data-testid=nav-jobs]", "[data-testid=jobs-table]")
        .await;
    assert_eq!(page.title().await, "Jobs");
    assert_eq!(
        page.all("tr[data-testid=job-row]").await.len(),
        50,
        "a page of 50"
    );
    page.type_into("#filter-payload", r#"{"campaign": "spring-sale"}"#)
        .await;
    page.click_through("[data-testid=filter-apply]", "[data-testid=jobs-table]")
        .await;
    assert!(
        page.url().await.contains("payload="),
        "the filter is in the URL"
    );
    let expected = scene
        .db
        .query(
            "SELECT job_id, status::text FROM leaseq.queue_jobs(
                 payload_contains => '{\"campaign\": \"spring-sale\"}')",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get::<_, i64>(0), r.get::<_, String>(1)))
        .collect::<Vec<_>>();
    assert_eq!(expected.len(), 5, "the scenario's spring-sale jobs");
    assert_eq!(page.job_rows().await, expected);
    page.shot("jobs-filtered").await;
}

async fn bulk_cancel_cancels_the_selected_jobs_after_confirming(page: &Page, scene: &Scene) {
    // Still on the payload-filtered list: the two newest pending spring-sale jobs.
    let rows = page.job_rows().await;
    let chosen: Vec<i64> = rows
        .iter()
        .filter(|(_, s)| s == "pending")
        .map(|(id, _)| *id)
        .take(2)
        .collect();
    assert_eq!(chosen.len(), 2, "{rows:?}");
    let kept: Vec<i64> = rows
        .iter()
        .filter(|(id, s)| s == "pending" && !chosen.contains(id))
        .map(|(id, _)| *id)
        .collect();
    assert_eq!(kept.len(), 1);
    for id in &chosen {
        page.click(&format!("#select-{id}")).await;
    }
    page.click_through("#bulk-cancel", "[data-testid=confirm-question]")
        .await;
    let question = page.text("[data-testid=confirm-question]").await;
    assert_eq!(
        question,
        format!("Cancel 2 job(s): {}, {}?", chosen[0], chosen[1])
    );
    page.shot("bulk-confirm").await;
    assert_eq!(
        scene.statuses(&chosen).await,
        ["pending", "pending"],
        "not before confirming"
    );
    page.click_through("#confirm", "[data-testid=flash]").await;
    assert_eq!(
        page.text("[data-testid=flash]").await,
        "cancelled 2 of 2 selected job(s); the others were left as they were"
    );
    assert!(
        page.url().await.contains("payload="),
        "back on the filtered list"
    );
    let after = page.job_rows().await;
    for id in &chosen {
        assert!(after.contains(&(*id, "cancelled".into())), "{after:?}");
    }
    assert!(after.contains(&(kept[0], "pending".into())), "{after:?}");
    assert_eq!(scene.statuses(&chosen).await, ["cancelled", "cancelled"]);
    assert_eq!(scene.statuses(&kept).await, ["pending"]);
    page.shot("bulk-cancelled").await;
}

async fn a_job_whose_lease_expired_is_redriven_after_confirming(page: &Page, scene: &Scene) {
    page.visit("/").await;
    page.click_through(
        "tr[data-queue=webhooks] [data-testid=dead] a",
        "[data-testid=jobs-table]",
    )
    .await;
    let rows = page.job_rows().await;
    assert_eq!(rows, [(scene.expired_job, "dead".to_string())]);
    page.click_through(
        &format!("#job-{} [data-testid=job-link]", scene.expired_job),
        "[data-testid=job-fields]",
    )
    .await;
    let id = scene.expired_job;
    assert_eq!(page.title().await, format!("Job {id}"));
    assert_eq!(page.text("td[data-testid=job-status]").await, "dead");
    assert_eq!(page.text("[data-testid=job-attempts]").await, "3 of 3");
    assert!(
        page.text("[data-testid=job-payload]")
            .await
            .contains("order.paid")
    );
    let mut outcomes = Vec::new();
    for li in page.all("#attempts li").await {
        outcomes.push(li.attr("data-outcome").await.unwrap().unwrap_or_default());
    }
    assert_eq!(outcomes, ["failed", "lease_expired", "lease_expired"]);
    let expired = page.text("#attempt-2").await;
    assert!(
        expired.contains(
            "#2 lease_expired — lease expired: its worker stopped renewing and the job was reclaimed"
        ) && expired.contains("worker hooks-2"),
        "{expired}"
    );
    assert!(
        page.text("#attempt-1")
            .await
            .contains("connection reset by peer")
    );
    assert_eq!(
        page.count("#job-redrive").await,
        1,
        "a dead job offers Redrive"
    );
    page.shot_full("job").await;
    page.click_through("#job-redrive", "[data-testid=confirm-question]")
        .await;
    assert_eq!(
        page.text("[data-testid=confirm-question]").await,
        format!("Redrive job {id}? It goes back to pending with a fresh budget.")
    );
    page.shot("redrive-confirm").await;
    assert_eq!(
        scene.statuses(&[id]).await,
        ["dead"],
        "not before confirming"
    );
    page.click_through("#confirm", "[data-testid=flash]").await;
    assert_eq!(
        page.text("[data-testid=flash]").await,
        format!("job {id} is pending again")
    );
    assert_eq!(page.text("td[data-testid=job-status]").await, "pending");
    assert_eq!(
        page.count("#job-redrive").await,
        0,
        "only a dead job offers Redrive"
    );
    assert_eq!(page.count("#job-cancel").await, 1);
    assert_eq!(scene.statuses(&[id]).await, ["pending"]);
    page.shot("job-redriven").await;
}

async fn a_paused_queue_leaves_its_worker_idle(page: &Page, scene: &Scene) {
    let _worker = Worker::start(&scene.admin_url, "thumbnails", "thumbs-1");
    // The worker runs the queue's jobs while it is active.
    let warm_up = scene
        .enqueue("thumbnails", json!({"image": "cat.jpg"}))
        .await;
    scene.wait_status(warm_up, "succeeded").await;

    page.visit("/queues/thumbnails").await;
    assert_eq!(page.title().await, "Queue thumbnails");
    assert!(
        page.text("[data-testid=queue-state]")
            .await
            .starts_with("active")
    );
    page.click_through("#queue-pause", "[data-testid=confirm-question]")
        .await;
    assert!(
        page.text("[data-testid=confirm-question]")
            .await
            .starts_with("Pause queue thumbnails?")
    );
    assert!(!scene.paused("thumbnails").await, "not before confirming");
    page.click_through("#confirm", "[data-testid=flash]").await;
    assert_eq!(
        page.text("[data-testid=flash]").await,
        "queue thumbnails paused"
    );
    assert_eq!(
        page.attr("[data-testid=queue-state]", "data-paused").await,
        "true"
    );
    assert!(
        page.text("[data-testid=queue-state]")
            .await
            .starts_with("paused")
    );
    assert_eq!(page.count("#queue-resume").await, 1);
    assert_eq!(page.count("#queue-pause").await, 0);
    assert!(scene.paused("thumbnails").await);

    // A job enqueued now waits: the worker polls every 200 ms and is woken by the enqueue's
    // notification, so 2 s without a claim is its idling, not its slowness.
    let waiting = scene
        .enqueue("thumbnails", json!({"image": "dog.jpg"}))
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    page.visit("/queues/thumbnails").await;
    let numbers = page.text("[data-testid=queue-numbers]").await;
    assert!(
        numbers.starts_with("pending 1 · scheduled 0 · running 0"),
        "{numbers}"
    );
    page.shot("queue-paused").await;
    page.click_through("[data-testid=nav-workers]", "[data-testid=workers-table]")
        .await;
    assert_eq!(
        page.count("tr[data-worker=thumbs-1]").await,
        0,
        "no lease held"
    );
    assert_eq!(
        page.count("tr[data-worker=mailer-1]").await,
        1,
        "emails' worker is listed"
    );
    page.shot("workers").await;
    let row = scene
        .db
        .query_one(
            "SELECT status::text, attempts FROM leaseq.queue_job($1)",
            &[&waiting],
        )
        .await
        .unwrap();
    assert_eq!(
        (row.get::<_, String>(0), row.get::<_, i32>(1)),
        ("pending".into(), 0)
    );
    let leases: i64 = scene
        .db
        .query_one(
            "SELECT count(*) FROM leaseq.queue_workers() WHERE queue = 'thumbnails'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(leases, 0);

    // Resumed (no confirmation: nothing is stopped), the same worker takes the job.
    page.visit("/queues/thumbnails").await;
    page.click_through("#queue-resume", "[data-testid=flash]")
        .await;
    assert_eq!(
        page.text("[data-testid=flash]").await,
        "queue thumbnails resumed"
    );
    assert!(!scene.paused("thumbnails").await);
    scene.wait_status(waiting, "succeeded").await;
}

async fn an_observer_sees_the_queues_and_no_button(page: &Page, scene: &Scene) {
    let no_button = "form[method=post] button";
    page.visit("/").await;
    page.wait_for("[data-testid=queues-table]").await;
    assert_eq!(page.all("tr[data-testid=queue-row]").await.len(), 5);
    assert_eq!(page.count("[data-testid=new-queue]").await, 0);
    assert_eq!(page.count("[data-testid=nav-enqueue]").await, 0);
    assert_eq!(page.count("[data-testid=nav-jobs]").await, 1);

    page.visit("/jobs?queue=emails").await;
    page.wait_for("[data-testid=jobs-table]").await;
    assert!(!page.job_rows().await.is_empty());
    assert_eq!(page.count("[data-testid=job-select]").await, 0);
    assert_eq!(page.count(no_button).await, 0);
    page.shot("observer-jobs").await;

    // The reports queue's dead job: an administrator would see Redrive and Cancel.
    page.visit(&format!("/jobs/{}", scene.dead_report)).await;
    page.wait_for("[data-testid=job-fields]").await;
    assert_eq!(page.text("td[data-testid=job-status]").await, "dead");
    assert!(
        page.text("[data-testid=job-last-error]")
            .await
            .contains("warehouse timeout")
    );
    assert_eq!(page.count(no_button).await, 0);
    page.shot("observer-job").await;

    page.visit("/queues/thumbnails").await;
    page.wait_for("[data-testid=queue-settings]").await;
    assert_eq!(page.count("[data-testid=queue-form]").await, 0);
    assert_eq!(page.count(no_button).await, 0);
    assert_eq!(page.text("[data-testid=setting-lease]").await, "00:00:30");
}

// ---------------------------------------------------------------------------------------------
// The scenario, played through SQL as the superuser.

struct Scene {
    /// The superuser's connection to the walk's database, on the walk's clock.
    db: Db,
    /// The server, to drop the database afterwards.
    server: Db,
    admin_url: String,
    observer_url: String,
    /// webhooks: failed, then two leases expired; dead.
    expired_job: i64,
    /// reports: failed for good; dead.
    dead_report: i64,
}

async fn connect(url: &str) -> Db {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e:?}"));
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// `url` (a URL or key=value string) with another database and, optionally, user and password,
/// as a key=value string.
fn retarget(url: &str, dbname: &str, user: Option<(&str, &str)>) -> String {
    let config: tokio_postgres::Config = url.parse().expect("LEASEQ_TEST_DATABASE_URL parses");
    let quote = |v: &str| format!("'{}'", v.replace('\\', "\\\\").replace('\'', "\\'"));
    let mut parts = Vec::new();
    if let Some(host) = config.get_hosts().first() {
        let host = match host {
            tokio_postgres::config::Host::Tcp(h) => h.clone(),
            tokio_postgres::config::Host::Unix(p) => p.display().to_string(),
        };
        parts.push(format!("host={}", quote(&host)));
    }
    if let Some(port) = config.get_ports().first() {
        parts.push(format!("port={port}"));
    }
    match user {
        Some((user, password)) => {
            parts.push(format!("user={}", quote(user)));
            parts.push(format!("password={}", quote(password)));
        }
        None => {
            if let Some(user) = config.get_user() {
                parts.push(format!("user={}", quote(user)));
            }
            if let Some(password) = config.get_password() {
                parts.push(format!(
                    "password={}",
                    quote(&String::from_utf8_lossy(password))
                ));
            }
        }
    }
    parts.push(format!("dbname={}", quote(dbname)));
    parts.join(" ")
}

impl Scene {
    async fn build(url: &str) -> Scene {
        let server = connect(url).await;
        for statement in [
            format!("DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)"),
            format!("DROP ROLE IF EXISTS {OBSERVER}"),
            format!("CREATE DATABASE {DATABASE}"),
        ] {
            server.batch_execute(&statement).await.unwrap_or_else(|e| {
                panic!("{statement} (LEASEQ_TEST_DATABASE_URL must be a superuser's): {e}")
            });
        }
        let admin_url = retarget(url, DATABASE, None);
        let setup = connect(&admin_url).await;
        setup
            .batch_execute(&format!(
                "CREATE EXTENSION leaseq;
                 ALTER DATABASE {DATABASE} SET leaseq.clock_offset = {AHEAD};
                 CREATE ROLE {OBSERVER} LOGIN PASSWORD 'observer' IN ROLE leaseq_observer;"
            ))
            .await
            .expect("install leaseq in the walk's database");
        drop(setup);
        let observer_url = retarget(url, DATABASE, Some((OBSERVER, "observer")));
        let (expired_job, dead_report) = play(&connect(&admin_url).await).await;
        Scene {
            db: connect(&admin_url).await,
            server,
            admin_url,
            observer_url,
            expired_job,
            dead_report,
        }
    }

    async fn statuses(&self, ids: &[i64]) -> Vec<String> {
        let mut out = Vec::new();
        for id in ids {
            let row = self
                .db
                .query_one("SELECT status::text FROM leaseq.queue_job($1)", &[id])
                .await
                .unwrap();
            out.push(row.get(0));
        }
        out
    }

    async fn paused(&self, queue: &str) -> bool {
        self.db
            .query_one(
                "SELECT paused FROM leaseq.queue_settings() WHERE queue = $1",
                &[&queue],
            )
            .await
            .unwrap()
            .get(0)
    }

    async fn enqueue(&self, queue: &str, payload: Value) -> i64 {
        self.db
            .query_one(
                "SELECT leaseq.queue_enqueue($1, $2::text::jsonb)",
                &[&queue, &payload.to_string()],
            )
            .await
            .unwrap()
            .get(0)
    }

    async fn wait_status(&self, id: i64, status: &str) {
        until(&format!("job {id} {status}"), || async {
            (self.statuses(&[id]).await[0] == status).then_some(())
        })
        .await;
    }

    async fn drop_database(self) {
        drop(self.db);
        for statement in [
            format!("DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)"),
            format!("DROP ROLE IF EXISTS {OBSERVER}"),
        ] {
            self.server
                .batch_execute(&statement)
                .await
                .unwrap_or_else(|e| panic!("{statement}: {e}"));
        }
    }
}

/// Plays the last 45 minutes, minute by minute on the walk's clock (moved back from its hour
/// ahead), then leaves the queues as the walk finds them. Returns the webhooks job whose leases
/// expired and the dead report.
async fn play(db: &Db) -> (i64, i64) {
    // Every claim here probes for expired leases (no hold-off after a slow probe).
    db.batch_execute(
        "SET leaseq.claim_rescan_interval = 0;
         SELECT leaseq.queue_create('emails', lease => '5 minutes');
         SELECT leaseq.queue_create('billing', group_concurrency => 1);
         SELECT leaseq.queue_create('reports', lease => '10 minutes', max_attempts => 1);
         SELECT leaseq.queue_create('webhooks', lease => '30 seconds', max_attempts => 3);
         SELECT leaseq.queue_create('thumbnails', lease => '30 seconds');",
    )
    .await
    .unwrap();
    let at = |minutes_ago: i64| async move {
        db.batch_execute(&format!(
            "SET leaseq.clock_offset = {}",
            AHEAD - minutes_ago * 60
        ))
        .await
        .unwrap();
    };
    let enqueue = |queue: &'static str, payload: Value| async move {
        db.query_one(
            "SELECT leaseq.queue_enqueue($1, $2::text::jsonb)",
            &[&queue, &payload.to_string()],
        )
        .await
        .unwrap()
        .get::<_, i64>(0)
    };
    let claim = |queue: &'static str, worker: &'static str, batch: i32, lease: &'static str| async move {
        db.query(
            "SELECT job_id, lease_token::text
               FROM leaseq.queue_claim($1, $2, $3, lease => $4::text::interval)",
            &[&queue, &worker, &batch, &lease],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get::<_, i64>(0), r.get::<_, String>(1)))
        .collect::<Vec<_>>()
    };
    let complete = |id: i64, token: String| async move {
        db.execute(
            "SELECT leaseq.queue_complete($1, $2::text::uuid, '{\"ok\": true}')",
            &[&id, &token],
        )
        .await
        .unwrap();
    };
    let fail = |id: i64, token: String, error: Value, retry: bool| async move {
        db.execute(
            "SELECT leaseq.queue_fail($1, $2::text::uuid, $3::text::jsonb, retry => $4)",
            &[&id, &token, &error.to_string(), &retry],
        )
        .await
        .unwrap();
    };

    let mut order = 1000;
    let mut expired_job = 0;
    let mut dead_report = 0;
    for minutes_ago in (1..=45i64).rev() {
        at(minutes_ago).await;
        // emails: a busy, uneven stream; a retried failure every fourth minute.
        let burst = if (18..=24).contains(&minutes_ago) {
            9
        } else {
            0
        };
        for _ in 0..(4 + (minutes_ago * 7) % 6 + burst) {
            order += 1;
            let campaign = if minutes_ago == 30 && order % 2 == 0 {
                "spring-sale"
            } else {
                "receipts"
            };
            enqueue(
                "emails",
                json!({"to": format!("customer-{}@example.com", order % 97), "order": order,
                       "campaign": campaign}),
            )
            .await;
        }
        let claimed = claim("emails", "mailer-1", 40, "5 minutes").await;
        for (i, (id, token)) in claimed.into_iter().enumerate() {
            if i == 0 && minutes_ago % 4 == 0 {
                fail(id, token, json!({"error": "smtp timeout"}), true).await;
            } else {
                complete(id, token).await;
            }
        }
        // billing: invoices, one customer at a time.
        for n in 0..2 {
            enqueue_grouped(
                db,
                "billing",
                json!({"invoice": order * 10 + n}),
                minutes_ago % 5,
            )
            .await;
        }
        for (id, token) in claim("billing", "billing-1", 10, "1 minute").await {
            complete(id, token).await;
        }
        // reports: one every ten minutes; the one of 30 minutes ago fails for good.
        if minutes_ago % 10 == 0 {
            let id = enqueue(
                "reports",
                json!({"report": "monthly", "month": format!("2026-{:02}", 12 - minutes_ago / 10)}),
            )
            .await;
            for (claimed, token) in claim("reports", "reporter-1", 1, "10 minutes").await {
                if minutes_ago == 30 {
                    fail(
                        claimed,
                        token,
                        json!({"error": "warehouse timeout", "after_s": 600}),
                        true,
                    )
                    .await;
                    dead_report = id;
                } else {
                    complete(claimed, token).await;
                }
            }
        }
        // webhooks: a delivery that fails, then whose worker stalls twice past its lease.
        match minutes_ago {
            14 => {
                expired_job = enqueue(
                    "webhooks",
                    json!({"url": "https://hooks.example.com/orders", "event": "order.paid",
                           "order": 4711}),
                )
                .await;
                let (id, token) = claim("webhooks", "hooks-1", 1, "30 seconds")
                    .await
                    .remove(0);
                fail(
                    id,
                    token,
                    json!({"error": "connection reset by peer", "status": 502}),
                    true,
                )
                .await;
            }
            12 => assert_eq!(claim("webhooks", "hooks-2", 1, "30 seconds").await.len(), 1),
            // Reclaims attempt 2 (the job waits out its backoff), then takes it: attempt 3.
            10 => assert!(
                claim("webhooks", "hooks-3", 1, "30 seconds")
                    .await
                    .is_empty()
            ),
            9 => assert_eq!(claim("webhooks", "hooks-3", 1, "30 seconds").await.len(), 1),
            // Reclaims attempt 3, the last: the job goes dead.
            7 => assert!(
                claim("webhooks", "hooks-1", 1, "30 seconds")
                    .await
                    .is_empty()
            ),
            // Held by a worker that is still at it, and one that stalled (an expired lease).
            3 => {
                for n in 0..3 {
                    enqueue("emails", json!({"to": "ops@example.com", "digest": n})).await;
                }
                assert_eq!(claim("emails", "mailer-1", 3, "30 minutes").await.len(), 3);
            }
            // After this minute's claims: nobody reclaims it before the walk looks.
            1 => {
                enqueue("emails", json!({"to": "ops@example.com", "digest": 9})).await;
                assert_eq!(claim("emails", "mailer-2", 1, "30 seconds").await.len(), 1);
            }
            _ => {}
        }
    }
    // Now: what waits.
    at(0).await;
    for n in 0..3 {
        enqueue(
            "emails",
            json!({"to": format!("lead-{n}@example.com"), "campaign": "spring-sale"}),
        )
        .await;
    }
    for n in 0..4 {
        enqueue(
            "emails",
            json!({"to": format!("user-{n}@example.com"), "campaign": "newsletter"}),
        )
        .await;
    }
    enqueue_grouped(db, "billing", json!({"invoice": 1}), 42).await;
    enqueue_grouped(db, "billing", json!({"invoice": 2}), 42).await;
    enqueue_grouped(db, "billing", json!({"invoice": 3}), 42).await;
    enqueue_grouped(db, "billing", json!({"invoice": 4}), 7).await;
    db.batch_execute(
        "SELECT leaseq.queue_enqueue('reports', '{\"report\": \"daily\"}',
                                     run_at => now() + interval '3 hours');
         SELECT leaseq.queue_enqueue('reports', '{\"report\": \"weekly\"}',
                                     run_at => now() + interval '4 hours');
         SELECT leaseq.queue_enqueue('webhooks', '{\"url\": \"https://hooks.example.com/crm\"}');",
    )
    .await
    .unwrap();
    assert!(expired_job > 0 && dead_report > 0);
    (expired_job, dead_report)
}

async fn enqueue_grouped(db: &Db, queue: &str, payload: Value, customer: i64) {
    db.execute(
        "SELECT leaseq.queue_enqueue($1, $2::text::jsonb, group_key => $3)",
        &[
            &queue,
            &payload.to_string(),
            &format!("customer-{customer}"),
        ],
    )
    .await
    .unwrap();
}

// ---------------------------------------------------------------------------------------------
// Processes: chromedriver (and the browsers it starts), the consoles, a worker.

/// A child process killed (with its process group: chromedriver's browsers too) when dropped.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let pid = self.0.id() as i32;
        // SAFETY: signals the process group this test started (its leader is our child).
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(command: &mut Command, what: &str) -> Guard {
    use std::os::unix::process::CommandExt;
    match command.process_group(0).spawn() {
        Ok(child) => Guard(child),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && what == "chromedriver" => panic!(
            "chromedriver is not installed: the browser tests need Debian's chromium and \
             chromium-driver (scripts/setup installs them: apt-get install chromium chromium-driver)"
        ),
        Err(e) => panic!("start {what}: {e}"),
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

struct ChromeDriver {
    _process: Guard,
    url: String,
    profile: PathBuf,
}

impl ChromeDriver {
    fn start() -> ChromeDriver {
        let port = free_port();
        let process = spawn(
            Command::new("chromedriver")
                .arg(format!("--port={port}"))
                .arg("--allowed-ips=127.0.0.1")
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
            "chromedriver",
        );
        let deadline = Instant::now() + PATIENCE;
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "chromedriver did not listen on {port}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let profile =
            std::env::temp_dir().join(format!("leaseq-ui-browser-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&profile);
        ChromeDriver {
            _process: process,
            url: format!("http://127.0.0.1:{port}"),
            profile,
        }
    }

    async fn browser(&self) -> Browser {
        let args = [
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--disable-default-apps",
            "--no-default-browser-check",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
            "--window-size=1280,900",
            &format!("--user-data-dir={}", self.profile.display()),
        ];
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".into(),
            json!({"binary": "/usr/bin/chromium", "args": args}),
        );
        ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(capabilities)
            .connect(&self.url)
            .await
            .expect("start chromium through chromedriver")
    }
}

impl Drop for ChromeDriver {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// `leaseq ui` on a free loopback port.
struct Console {
    _process: Guard,
    base: String,
}

impl Console {
    fn start(url: &str, who: &str) -> Console {
        let mut process = spawn(
            Command::new(env!("CARGO_BIN_EXE_leaseq"))
                .args(["ui", "--listen", "127.0.0.1:0", "--database-url", url])
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit()),
            "leaseq ui",
        );
        let stdout = process.0.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let line = rx
            .recv_timeout(PATIENCE)
            .unwrap_or_else(|_| panic!("leaseq ui ({who}) printed no listening line"));
        let base = line
            .strip_prefix("leaseq ui: listening on ")
            .unwrap_or_else(|| panic!("unexpected first line of leaseq ui: {line:?}"))
            .trim_end_matches('/')
            .to_string();
        assert!(base.starts_with("http://127.0.0.1:"), "{base}");
        Console {
            _process: process,
            base,
        }
    }
}

/// `leaseq work` on `queue`, each job a `sh` that reads its payload and succeeds.
struct Worker(#[allow(dead_code)] Guard);

impl Worker {
    fn start(url: &str, queue: &str, id: &str) -> Worker {
        Worker(spawn(
            Command::new(env!("CARGO_BIN_EXE_leaseq"))
                .args([
                    "work",
                    "--queue",
                    queue,
                    "--worker-id",
                    id,
                    "--poll",
                    "200ms",
                ])
                .args(["--database-url", url, "--", "sh", "-c", "cat >/dev/null"])
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
            "leaseq work",
        ))
    }
}

// ---------------------------------------------------------------------------------------------
// The browser, as a person uses it.

struct Page {
    browser: Browser,
    base: String,
    shots: PathBuf,
}

/// Polls `probe` every 50 ms until it returns something, for at most `PATIENCE`.
async fn until<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

impl Page {
    async fn visit(&self, path: &str) {
        let url = format!("{}{path}", self.base);
        self.browser
            .goto(&url)
            .await
            .unwrap_or_else(|e| panic!("open {url}: {e}"));
    }

    async fn url(&self) -> String {
        self.browser.current_url().await.unwrap().to_string()
    }

    async fn wait_for(&self, css: &str) -> Element {
        match self
            .browser
            .wait()
            .at_most(PATIENCE)
            .for_element(Locator::Css(css))
            .await
        {
            Ok(element) => element,
            Err(e) => panic!("no {css} on {}: {e}", self.url_or_unknown().await),
        }
    }

    async fn url_or_unknown(&self) -> String {
        self.browser
            .current_url()
            .await
            .map(|u| u.to_string())
            .unwrap_or_else(|_| "?".into())
    }

    async fn all(&self, css: &str) -> Vec<Element> {
        self.browser.find_all(Locator::Css(css)).await.unwrap()
    }

    async fn count(&self, css: &str) -> usize {
        self.all(css).await.len()
    }

    async fn text(&self, css: &str) -> String {
        self.wait_for(css)
            .await
            .text()
            .await
            .unwrap()
            .trim()
            .to_string()
    }

    async fn attr(&self, css: &str, name: &str) -> String {
        self.wait_for(css)
            .await
            .attr(name)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{css} has no {name}"))
    }

    async fn title(&self) -> String {
        self.text("main h1").await
    }

    async fn click(&self, css: &str) {
        self.wait_for(css).await.click().await.unwrap();
    }

    async fn type_into(&self, css: &str, text: &str) {
        let field = self.wait_for(css).await;
        field.clear().await.unwrap();
        field.send_keys(text).await.unwrap();
    }

    /// Clicks `css`, waits for the next page to load, and for `then` on it.
    async fn click_through(&self, css: &str, then: &str) {
        self.browser
            .execute("window.__leaseqOld = true;", vec![])
            .await
            .unwrap();
        self.click(css).await;
        until(&format!("the page after clicking {css}"), || async {
            let fresh = self
                .browser
                .execute(
                    "return window.__leaseqOld === undefined && document.readyState === 'complete';",
                    vec![],
                )
                .await
                .ok()?;
            (fresh == Value::Bool(true)).then_some(())
        })
        .await;
        self.wait_for(then).await;
    }

    /// The job list's rows: (id, status), as shown.
    async fn job_rows(&self) -> Vec<(i64, String)> {
        let mut rows = Vec::new();
        for row in self.all("tr[data-testid=job-row]").await {
            let id = row.attr("data-job-id").await.unwrap().unwrap_or_default();
            let status = row
                .find(Locator::Css("[data-testid=job-status]"))
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            rows.push((id.parse().unwrap(), status));
        }
        rows
    }

    async fn shot(&self, name: &str) {
        let png = self.browser.screenshot().await.unwrap();
        let path = self.shots.join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    }

    /// The page's content, however long or short: the window fitted to it for the picture.
    async fn shot_full(&self, name: &str) {
        let sizes = self
            .browser
            .execute(
                "return [Math.ceil(document.querySelector('main').getBoundingClientRect().bottom)
                         + 24, window.outerHeight - window.innerHeight];",
                vec![],
            )
            .await
            .unwrap();
        let size = |i: usize| sizes[i].as_u64().unwrap_or(0) as u32;
        let height = size(0).clamp(400, 2400) + size(1);
        self.browser.set_window_size(1280, height).await.unwrap();
        self.shot(name).await;
        self.browser.set_window_size(1280, 900).await.unwrap();
    }
}
