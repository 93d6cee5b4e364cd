//! `leaseq ui` over HTTP against a live cluster: every page, every action, and who may do what.
//! Each test starts the real binary (`--listen 127.0.0.1:0`) as a role of its own and reads the
//! database back over a separate connection. Needs `LEASEQ_TEST_DATABASE_URL` (a superuser's).
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
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

/// The test database's URL, logging in as `role`.
fn url_as(role: &str) -> String {
    let url = url();
    let (scheme, rest) = url.split_once("://").unwrap();
    let host = rest.split_once('@').map_or(rest, |(_, host)| host);
    format!("{scheme}://{role}@{host}")
}

fn unique(prefix: &str) -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{prefix}_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A new LOGIN role, member of `groups`.
fn role(db: &mut Client, prefix: &str, groups: &str) -> String {
    let name = unique(&format!("ui_{prefix}"));
    db.batch_execute(&format!(
        "DROP ROLE IF EXISTS {name}; CREATE ROLE {name} LOGIN IN ROLE {groups}"
    ))
    .unwrap();
    name
}

fn queue(db: &mut Client, prefix: &str, settings: &str) -> String {
    let name = unique(prefix);
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

/// Claims the queue's next job as `worker` for `lease_ms`: (job, token).
fn claim(db: &mut Client, queue: &str, worker: &str, lease_ms: i32) -> (i64, uuid::Uuid) {
    let row = db
        .query_one(
            "SELECT job_id, lease_token FROM leaseq.queue_claim($1, $2, 1,
                                                              $3::int * interval '1 millisecond')",
            &[&queue, &worker, &lease_ms],
        )
        .unwrap();
    (row.get(0), row.get(1))
}

/// A dead job of `queue` (which must have max_attempts => 1) with error `{"boom": true}`.
fn dead_job(db: &mut Client, queue: &str, payload: &str) -> i64 {
    enqueue(db, queue, payload);
    let (job, token) = claim(db, queue, "w-dead", 30_000);
    db.execute(
        "SELECT leaseq.queue_fail($1, $2, '{\"boom\": true}', retry => false)",
        &[&job, &token],
    )
    .unwrap();
    assert_eq!(status(db, job), "dead");
    job
}

fn status(db: &mut Client, job: i64) -> String {
    db.query_one("SELECT status::text FROM leaseq.queue_job($1)", &[&job])
        .unwrap()
        .get(0)
}

fn paused(db: &mut Client, queue: &str) -> bool {
    db.query_one(
        "SELECT paused FROM leaseq.queue_settings() WHERE queue = $1",
        &[&queue],
    )
    .unwrap()
    .get(0)
}

fn jobs_of(db: &mut Client, queue: &str) -> i64 {
    db.query_one(
        "SELECT count(*) FROM leaseq.queue_jobs($1, max_rows => 10000)",
        &[&queue],
    )
    .unwrap()
    .get(0)
}

/// A running `leaseq ui`.
struct Ui {
    child: Child,
    base: String,
}

impl Ui {
    fn start(database: &str, args: &[&str]) -> Ui {
        Ui::start_with_env(database, args, &[])
    }

    fn start_with_env(database: &str, args: &[&str], env: &[(&str, &str)]) -> Ui {
        let mut child = Command::new(env!("CARGO_BIN_EXE_leaseq"))
            .args(["ui", "--listen", "127.0.0.1:0"])
            .args(args)
            .env("DATABASE_URL", database)
            .env_remove("LEASEQ_UI_AUTH")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start leaseq ui");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let base = line
            .trim()
            .strip_prefix("leaseq ui: listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .trim_end_matches('/')
            .to_string();
        Ui { child, base }
    }

    fn browser(&self) -> Browser {
        Browser::new(&self.base)
    }
}

impl Drop for Ui {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP client that keeps cookies, sends the console's own Origin and the CSRF field with
/// every POST, and never follows redirects.
struct Browser {
    base: String,
    agent: ureq::Agent,
    cookies: HashMap<String, String>,
    headers: Vec<(String, String)>,
}

struct Page {
    status: u16,
    body: String,
    headers: ureq::http::HeaderMap,
}

impl Page {
    fn location(&self) -> String {
        self.headers
            .get("location")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default()
    }

    fn has(&self, needle: &str) -> bool {
        self.body.contains(needle)
    }

    fn testid(&self, id: &str) -> bool {
        self.has(&format!("data-testid=\"{id}\""))
    }
}

impl Browser {
    fn new(base: &str) -> Browser {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_global(Some(Duration::from_secs(30)))
            .build()
            .into();
        Browser {
            base: base.to_string(),
            agent,
            cookies: HashMap::new(),
            headers: Vec::new(),
        }
    }

    fn with_header(mut self, name: &str, value: &str) -> Browser {
        self.headers.push((name.into(), value.into()));
        self
    }

    fn cookie_header(&self) -> String {
        self.cookies
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    fn keep_cookies(&mut self, headers: &ureq::http::HeaderMap) {
        for set in headers.get_all("set-cookie") {
            let set = set.to_str().unwrap();
            let (pair, attributes) = set.split_once(';').unwrap_or((set, ""));
            let (name, value) = pair.split_once('=').unwrap();
            if attributes.contains("Max-Age=0") {
                self.cookies.remove(name);
            } else {
                self.cookies.insert(name.into(), value.into());
            }
        }
    }

    fn finish(&mut self, response: ureq::http::Response<ureq::Body>) -> Page {
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        self.keep_cookies(&headers);
        let body = response.into_body().read_to_string().unwrap();
        Page {
            status,
            body,
            headers,
        }
    }

    fn get(&mut self, path: &str) -> Page {
        let mut request = self.agent.get(format!("{}{path}", self.base));
        for (k, v) in &self.headers {
            request = request.header(k, v);
        }
        if !self.cookies.is_empty() {
            request = request.header("cookie", self.cookie_header());
        }
        let response = request.call().unwrap();
        self.finish(response)
    }

    fn csrf(&mut self) -> String {
        if !self.cookies.contains_key("leaseq_csrf") {
            self.get("/workers");
        }
        self.cookies["leaseq_csrf"].clone()
    }

    /// A POST as the console's own form would send it.
    fn post(&mut self, path: &str, fields: &[(&str, &str)]) -> Page {
        let token = self.csrf();
        let mut all = vec![("csrf", token.as_str())];
        all.extend_from_slice(fields);
        let origin = self.base.clone();
        self.post_raw(path, &all, &[("origin", &origin)])
    }

    fn post_raw(&mut self, path: &str, fields: &[(&str, &str)], extra: &[(&str, &str)]) -> Page {
        let mut request = self.agent.post(format!("{}{path}", self.base));
        for (k, v) in &self.headers {
            request = request.header(k, v);
        }
        for (k, v) in extra {
            request = request.header(*k, *v);
        }
        if !self.cookies.is_empty() {
            request = request.header("cookie", self.cookie_header());
        }
        let response = request.send_form(fields.iter().copied()).unwrap();
        self.finish(response)
    }
}

/// `head` (request line and headers, without the blank line) and `body` sent as written over a
/// connection of their own — ureq writes its own Host, and these requests name another: (status,
/// whole response).
fn raw_request(base: &str, head: &str, body: &str) -> (u16, String) {
    let address = base.strip_prefix("http://").unwrap();
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "{head}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response.split(' ').nth(1).unwrap().parse().unwrap();
    (status, response)
}

/// `leaseq ui --listen 127.0.0.1:0 ARGS`, which must refuse to start: its exit code and stderr.
/// One that starts anyway is killed after 15 s and fails the test (rather than hanging it).
fn ui_refusing(args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_leaseq"))
        .args(["ui", "--listen", "127.0.0.1:0"])
        .args(args)
        .env("DATABASE_URL", url())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("leaseq ui {args:?} started instead of refusing");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut said = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut said)
        .unwrap();
    (status.code(), said)
}

/// Markers that appear only where the role may act.
const ACTION_MARKERS: &[&str] = &[
    "method=\"post\"",
    "data-testid=\"job-redrive\"",
    "data-testid=\"job-cancel\"",
    "data-testid=\"job-select\"",
    "data-testid=\"bulk-redrive\"",
    "data-testid=\"queue-pause\"",
    "data-testid=\"queue-resume\"",
    "data-testid=\"schedule-delete\"",
    "data-testid=\"new-queue\"",
    "data-testid=\"nav-enqueue\"",
];

fn assert_no_actions(page: &Page, what: &str) {
    for marker in ACTION_MARKERS {
        assert!(!page.has(marker), "{what} shows {marker}:\n{}", page.body);
    }
}

/// A queue holding one job of each kind: pending (grouped), running, dead, succeeded.
struct Fixture {
    queue: String,
    pending: i64,
    running: i64,
    dead: i64,
    succeeded: i64,
}

fn fixture(db: &mut Client) -> Fixture {
    let queue = queue(db, "uifix", "max_attempts => 1");
    let succeeded = enqueue(db, &queue, r#"{"kind": "done"}"#);
    let (job, token) = claim(db, &queue, "w-done", 30_000);
    assert_eq!(job, succeeded);
    db.execute(
        "SELECT leaseq.queue_complete($1, $2, '{\"answer\": 42}')",
        &[&job, &token],
    )
    .unwrap();
    let dead = dead_job(db, &queue, r#"{"kind": "dead"}"#);
    let running = enqueue(db, &queue, r#"{"kind": "running"}"#);
    let (job, token) = claim(db, &queue, "w-run", 60_000);
    assert_eq!(job, running);
    // The running job has reported how far it got.
    db.execute(
        "SELECT leaseq.queue_progress($1, $2, '{\"done\": 17}')",
        &[&job, &token],
    )
    .unwrap();
    db.execute(
        "SELECT leaseq.queue_step($1, $2, 'charge', '{\"charge\": 1}')",
        &[&job, &token],
    )
    .unwrap();
    let pending: i64 = db
        .query_one(
            "SELECT leaseq.queue_enqueue($1, '{\"kind\": \"pending\", \"customer\": 42}',
                                         group_key => 'cust-42')",
            &[&queue],
        )
        .unwrap()
        .get(0);
    Fixture {
        queue,
        pending,
        running,
        dead,
        succeeded,
    }
}

#[test]
fn every_page_renders_for_an_admin_with_its_key_content_and_a_server_timing() {
    let mut db = db();
    let f = fixture(&mut db);
    let schedule = unique("uisched");
    db.execute(
        "SELECT leaseq.queue_schedule($1, $2, '*/5 * * * *', '{\"tick\": 1}')",
        &[&schedule, &f.queue],
    )
    .unwrap();
    // A schedule whose tick came (moved back, then a claim materialises it): its last job.
    let ticked_queue = unique("uitickq");
    db.execute("SELECT leaseq.queue_create($1)", &[&ticked_queue])
        .unwrap();
    let ticked = unique("uitick");
    db.execute(
        "SELECT leaseq.queue_schedule($1, $2, '*/5 * * * *', '{}')",
        &[&ticked, &ticked_queue],
    )
    .unwrap();
    db.execute(
        "UPDATE leaseq.schedules SET next_at = now() - interval '1 minute' WHERE name = $1",
        &[&ticked],
    )
    .unwrap();
    let tick_job: i64 = db
        .query_one(
            "SELECT job_id FROM leaseq.queue_claim($1, 'w-tick')",
            &[&ticked_queue],
        )
        .unwrap()
        .get(0);
    let admin = role(&mut db, "admin", "leaseq_admin");
    let ui = Ui::start(&url_as(&admin), &[]);
    let mut b = ui.browser();

    let overview = b.get("/");
    assert_eq!(overview.status, 200, "{}", overview.body);
    assert!(
        overview.has(&format!("data-queue=\"{}\"", f.queue)),
        "{}",
        overview.body
    );
    assert!(overview.testid("throughput-chart") && overview.has("<svg"));
    assert!(overview.testid("new-queue"));
    // How old its numbers are (queue_overview keeps them for leaseq.overview_max_age).
    assert!(
        overview.testid("counted-ago") && overview.has("Live jobs counted "),
        "{}",
        overview.body
    );

    let jobs = b.get(&format!("/jobs?queue={}", f.queue));
    assert_eq!(jobs.status, 200);
    for id in [f.pending, f.running, f.dead, f.succeeded] {
        assert!(
            jobs.has(&format!("data-job-id=\"{id}\"")),
            "job {id}:\n{}",
            jobs.body
        );
    }
    assert!(jobs.testid("bulk-redrive") && jobs.testid("bulk-cancel") && jobs.testid("job-select"));

    let dead = b.get(&format!("/jobs/{}", f.dead));
    assert_eq!(dead.status, 200);
    assert!(dead.has("boom") && dead.testid("job-redrive") && dead.testid("attempt-failed"));
    let running = b.get(&format!("/jobs/{}", f.running));
    assert!(
        running.has("w-run") && running.testid("running-lease") && running.testid("job-cancel")
    );
    assert!(
        running.testid("attempt-steps") && running.has("<code>charge</code>"),
        "{}",
        running.body
    );
    assert!(
        running.testid("job-progress")
            && (running.has("&quot;done&quot;: 17") || running.has("\"done\": 17")),
        "{}",
        running.body
    );
    let done = b.get(&format!("/jobs/{}", f.succeeded));
    assert!(
        done.has("&quot;answer&quot;: 42") || done.has("\"answer\": 42"),
        "{}",
        done.body
    );

    let settings = b.get(&format!("/queues/{}", f.queue));
    assert_eq!(settings.status, 200);
    assert!(settings.testid("queue-pause") && settings.testid("queue-form"));
    assert!(settings.has("id=\"setting-max_attempts\"") && settings.has("value=\"1\""));
    assert_eq!(b.get("/queues/new").status, 200);
    let enqueue_form = b.get("/enqueue");
    assert!(enqueue_form.testid("enqueue-form") && enqueue_form.has(&f.queue));
    let schedules = b.get("/schedules");
    assert!(
        schedules.has(&format!("data-schedule=\"{schedule}\""))
            && schedules.testid("schedule-next")
    );
    assert!(
        schedules.testid("schedule-last-job")
            && schedules.has("none yet")
            && schedules.has(&format!("href=\"/jobs/{tick_job}\"")),
        "{}",
        schedules.body
    );
    let groups = b.get(&format!("/groups?queue={}", f.queue));
    assert!(groups.has("data-group=\"cust-42\""), "{}", groups.body);
    let workers = b.get("/workers");
    assert!(workers.has("data-worker=\"w-run\""), "{}", workers.body);

    for page in [
        &overview, &jobs, &dead, &settings, &schedules, &groups, &workers,
    ] {
        let timing = page.headers.get("server-timing").unwrap().to_str().unwrap();
        assert!(
            timing.starts_with("db;dur=") && timing.contains(", total;dur="),
            "{timing}"
        );
    }
    let css = b.get("/assets/leaseq.css");
    assert_eq!(css.status, 200);
    assert!(
        css.headers["cache-control"]
            .to_str()
            .unwrap()
            .contains("immutable")
    );
    assert_eq!(b.get("/assets/leaseq.js").status, 200);
    assert_eq!(b.get("/jobs/999999999").status, 404);
    db.execute("SELECT leaseq.queue_unschedule($1)", &[&schedule])
        .unwrap();
}

#[test]
fn admin_actions_change_the_database_and_leave_a_flash() {
    let mut db = db();
    let f = fixture(&mut db);
    let admin = role(&mut db, "admin", "leaseq_admin");
    let ui = Ui::start(&url_as(&admin), &[]);
    let mut b = ui.browser();

    // Enqueue, with a group key; the redirect lands on the new job and says so.
    let posted = b.post(
        "/enqueue",
        &[
            ("queue", &f.queue),
            ("payload", r#"{"to": "ada", "n": 12345678901234567890}"#),
            ("priority", "3"),
            ("group_key", "g-ui"),
            ("on_duplicate", "ignore"),
        ],
    );
    assert_eq!(posted.status, 303, "{}", posted.body);
    let id: i64 = posted
        .location()
        .strip_prefix("/jobs/")
        .unwrap()
        .parse()
        .unwrap();
    let row = db
        .query_one(
            "SELECT queue, payload::text, priority, group_key FROM leaseq.queue_job($1)",
            &[&id],
        )
        .unwrap();
    assert_eq!(row.get::<_, String>(0), f.queue);
    assert_eq!(
        row.get::<_, String>(1),
        r#"{"n": 12345678901234567890, "to": "ada"}"#
    );
    assert_eq!(
        (row.get::<_, i32>(2), row.get::<_, String>(3)),
        (3, "g-ui".into())
    );
    let landed = b.get(&posted.location());
    assert!(
        landed.testid("flash") && landed.has(&format!("enqueued job {id}")),
        "{}",
        landed.body
    );
    assert!(!b.get("/").testid("flash"), "a flash is shown once");

    // Redrive the dead job; cancel the running one (its worker is fenced out).
    let r = b.post(&format!("/jobs/{}/redrive", f.dead), &[("confirm", "yes")]);
    assert_eq!((r.status, r.location()), (303, format!("/jobs/{}", f.dead)));
    assert_eq!(status(&mut db, f.dead), "pending");
    let r = b.post(
        &format!("/jobs/{}/cancel", f.running),
        &[("confirm", "yes")],
    );
    assert_eq!(r.status, 303);
    assert_eq!(status(&mut db, f.running), "cancelled");
    assert!(
        b.get(&r.location())
            .has(&format!("job {} cancelled", f.running))
    );

    // Bulk: cancel two pending jobs, then redrive nothing that is not dead.
    let (a, c) = (f.pending, f.dead);
    let (a_s, c_s) = (a.to_string(), c.to_string());
    let back = format!("queue={}", f.queue);
    let r = b.post(
        "/jobs/bulk",
        &[
            ("action", "cancel"),
            ("id", &a_s),
            ("id", &c_s),
            ("back", &back),
            ("confirm", "yes"),
        ],
    );
    assert_eq!((r.status, r.location()), (303, format!("/jobs?{back}")));
    assert_eq!(
        (status(&mut db, a), status(&mut db, c)),
        ("cancelled".into(), "cancelled".into())
    );
    assert!(b.get(&r.location()).has("cancelled 2 of 2 selected job(s)"));
    let dead2 = dead_job(&mut db, &f.queue, "{}");
    let d_s = dead2.to_string();
    let r = b.post(
        "/jobs/bulk",
        &[
            ("action", "redrive"),
            ("id", &d_s),
            ("id", &a_s),
            ("confirm", "yes"),
        ],
    );
    assert_eq!(r.status, 303, "{}", r.body);
    assert_eq!(status(&mut db, dead2), "pending");
    assert!(b.get(&r.location()).has("redrove 1 of 2 selected job(s)"));

    // Pause and resume.
    let r = b.post(&format!("/queues/{}/pause", f.queue), &[("confirm", "yes")]);
    assert_eq!(r.status, 303);
    assert!(paused(&mut db, &f.queue));
    let page = b.get(&r.location());
    assert!(
        page.testid("queue-resume") && !page.testid("queue-pause"),
        "{}",
        page.body
    );
    let r = b.post(&format!("/queues/{}/resume", f.queue), &[]);
    assert_eq!(r.status, 303);
    assert!(!paused(&mut db, &f.queue));

    // Create a queue, then edit it: the edit replaces every setting with the form's.
    let created = unique("uinew");
    let r = b.post(
        "/queues",
        &[
            ("queue", &created),
            ("lease", "45 seconds"),
            ("max_attempts", "7"),
        ],
    );
    assert_eq!(
        (r.status, r.location()),
        (303, format!("/queues/{created}")),
        "{}",
        r.body
    );
    let settings = |db: &mut Client| -> (String, i32, Option<i32>) {
        let row = db
            .query_one(
                "SELECT lease::text, max_attempts, max_snoozes FROM leaseq.queue_settings()
                  WHERE queue = $1",
                &[&created],
            )
            .unwrap();
        (row.get(0), row.get(1), row.get(2))
    };
    assert_eq!(settings(&mut db), ("00:00:45".into(), 7, None));
    let form = b.get(&format!("/queues/{created}"));
    assert!(
        form.has("value=\"00:00:45\"") && form.has("value=\"7\""),
        "{}",
        form.body
    );
    let r = b.post(
        "/queues",
        &[
            ("queue", &created),
            ("lease", "00:00:45"),
            ("max_attempts", "9"),
            ("max_snoozes", "3"),
        ],
    );
    assert_eq!(r.status, 303, "{}", r.body);
    assert_eq!(settings(&mut db), ("00:00:45".into(), 9, Some(3)));

    // Add a schedule, then remove it.
    let name = unique("uisch");
    let r = b.post(
        "/schedules",
        &[
            ("name", &name),
            ("queue", &created),
            ("every", "0 9 * * 1-5"),
            ("payload", r#"{"report": "daily"}"#),
            ("timezone", "Europe/Paris"),
        ],
    );
    assert_eq!(r.status, 303, "{}", r.body);
    let scheduled = |db: &mut Client| -> i64 {
        db.query_one(
            "SELECT count(*) FROM leaseq.queue_schedules() WHERE name = $1 AND timezone = 'Europe/Paris'",
            &[&name],
        )
        .unwrap()
        .get(0)
    };
    assert_eq!(scheduled(&mut db), 1);
    assert!(
        b.get("/schedules")
            .has(&format!("schedule {name}: first tick"))
    );
    let r = b.post(&format!("/schedules/{name}/delete"), &[("confirm", "yes")]);
    assert_eq!(r.status, 303, "{}", r.body);
    assert_eq!(scheduled(&mut db), 0);
}

#[test]
fn destructive_actions_ask_for_confirmation_first_and_change_nothing_until_confirmed() {
    let mut db = db();
    let f = fixture(&mut db);
    let name = unique("uiconf");
    db.execute(
        "SELECT leaseq.queue_schedule($1, $2, '*/5 * * * *', '{}')",
        &[&name, &f.queue],
    )
    .unwrap();
    let admin = role(&mut db, "admin", "leaseq_admin");
    let ui = Ui::start(&url_as(&admin), &[]);
    let mut b = ui.browser();
    let pending = f.pending.to_string();
    let cases: Vec<(String, Vec<(&str, &str)>)> = vec![
        (format!("/jobs/{}/redrive", f.dead), vec![]),
        (format!("/jobs/{}/cancel", f.running), vec![]),
        (
            "/jobs/bulk".into(),
            vec![("action", "cancel"), ("id", &pending)],
        ),
        (format!("/queues/{}/pause", f.queue), vec![]),
        (format!("/schedules/{name}/delete"), vec![]),
    ];
    for (path, fields) in &cases {
        let page = b.post(path, fields);
        assert_eq!(page.status, 200, "{path}: {}", page.body);
        assert!(
            page.testid("confirm") && page.testid("confirm-question"),
            "{path}: {}",
            page.body
        );
        assert!(
            page.has(&format!("action=\"{path}\"")),
            "{path}: {}",
            page.body
        );
        assert!(page.has("name=\"confirm\" value=\"yes\""), "{path}");
        for (k, v) in fields {
            assert!(
                page.has(&format!("name=\"{k}\" value=\"{v}\"")),
                "{path} keeps {k}"
            );
        }
    }
    assert_eq!(status(&mut db, f.dead), "dead");
    assert_eq!(status(&mut db, f.running), "running");
    assert_eq!(status(&mut db, f.pending), "pending");
    assert!(!paused(&mut db, &f.queue));
    let left: i64 = db
        .query_one(
            "SELECT count(*) FROM leaseq.queue_schedules() WHERE name = $1",
            &[&name],
        )
        .unwrap()
        .get(0);
    assert_eq!(left, 1);
    db.execute("SELECT leaseq.queue_unschedule($1)", &[&name])
        .unwrap();
}

#[test]
fn an_observer_sees_no_buttons_and_its_forged_posts_are_refused_by_the_database() {
    let mut db = db();
    let f = fixture(&mut db);
    let name = unique("uiobs");
    db.execute(
        "SELECT leaseq.queue_schedule($1, $2, '*/5 * * * *', '{}')",
        &[&name, &f.queue],
    )
    .unwrap();
    let observer = role(&mut db, "observer", "leaseq_observer");
    let ui = Ui::start(&url_as(&observer), &[]);
    let mut b = ui.browser();
    for path in [
        "/".to_string(),
        format!("/jobs?queue={}", f.queue),
        format!("/jobs/{}", f.dead),
        format!("/jobs/{}", f.running),
        format!("/queues/{}", f.queue),
        "/schedules".into(),
        format!("/groups?queue={}", f.queue),
        "/workers".into(),
        "/enqueue".into(),
        "/queues/new".into(),
    ] {
        let page = b.get(&path);
        assert_eq!(page.status, 200, "{path}: {}", page.body);
        assert_no_actions(&page, &path);
    }
    assert!(
        b.get("/").has(&format!("data-queue=\"{}\"", f.queue)),
        "the observer reads"
    );

    let before = jobs_of(&mut db, &f.queue);
    let pending = f.pending.to_string();
    let forged: Vec<(String, Vec<(&str, &str)>)> = vec![
        (
            format!("/jobs/{}/redrive", f.dead),
            vec![("confirm", "yes")],
        ),
        (
            format!("/jobs/{}/cancel", f.running),
            vec![("confirm", "yes")],
        ),
        (
            "/jobs/bulk".into(),
            vec![("action", "cancel"), ("id", &pending), ("confirm", "yes")],
        ),
        (
            format!("/queues/{}/pause", f.queue),
            vec![("confirm", "yes")],
        ),
        (
            "/enqueue".into(),
            vec![("queue", &f.queue), ("payload", "{}")],
        ),
        (
            "/queues".into(),
            vec![("queue", &f.queue), ("max_attempts", "9")],
        ),
        (
            "/schedules".into(),
            vec![
                ("name", "forged"),
                ("queue", &f.queue),
                ("every", "* * * * *"),
                ("payload", "{}"),
            ],
        ),
        (
            format!("/schedules/{name}/delete"),
            vec![("confirm", "yes")],
        ),
    ];
    for (path, fields) in &forged {
        let page = b.post(path, fields);
        assert_eq!(page.status, 403, "{path}: {}", page.body);
        assert!(
            page.testid("error") && page.has("(SQLSTATE 42501)"),
            "{path}: {}",
            page.body
        );
    }
    assert_eq!(status(&mut db, f.dead), "dead");
    assert_eq!(status(&mut db, f.running), "running");
    assert_eq!(status(&mut db, f.pending), "pending");
    assert!(!paused(&mut db, &f.queue));
    assert_eq!(jobs_of(&mut db, &f.queue), before);
    let max: i32 = db
        .query_one(
            "SELECT max_attempts FROM leaseq.queue_settings() WHERE queue = $1",
            &[&f.queue],
        )
        .unwrap()
        .get(0);
    assert_eq!(max, 1);
    let left: i64 = db
        .query_one(
            "SELECT count(*) FROM leaseq.queue_schedules() WHERE name = $1",
            &[&name],
        )
        .unwrap()
        .get(0);
    assert_eq!(left, 1);
    db.execute("SELECT leaseq.queue_unschedule($1)", &[&name])
        .unwrap();
}

#[test]
fn a_worker_may_enqueue_but_is_refused_administration() {
    let mut db = db();
    let f = fixture(&mut db);
    let worker = role(&mut db, "worker", "leaseq_worker, leaseq_observer");
    let ui = Ui::start(&url_as(&worker), &[]);
    let mut b = ui.browser();
    let overview = b.get("/");
    assert!(overview.testid("nav-enqueue") && !overview.testid("new-queue"));
    let job = b.get(&format!("/jobs/{}", f.dead));
    assert!(
        !job.testid("job-redrive") && !job.testid("job-cancel"),
        "{}",
        job.body
    );
    assert!(
        !b.get(&format!("/jobs?queue={}", f.queue))
            .testid("job-select")
    );
    let r = b.post(
        "/enqueue",
        &[("queue", &f.queue), ("payload", r#"{"by": "worker"}"#)],
    );
    assert_eq!(r.status, 303, "{}", r.body);
    let r = b.post(&format!("/jobs/{}/redrive", f.dead), &[("confirm", "yes")]);
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(r.has("(SQLSTATE 42501)"));
    assert_eq!(status(&mut db, f.dead), "dead");
}

#[test]
fn a_role_granted_one_queue_sees_and_acts_on_that_queue_only() {
    let mut db = db();
    let mine = queue(&mut db, "uimine", "");
    let theirs = queue(&mut db, "uitheirs", "");
    let team = role(&mut db, "team", "leaseq_worker, leaseq_observer");
    let other = role(&mut db, "other", "leaseq_observer");
    // A grant closes a queue to roles without one: `theirs` is `other`'s only.
    db.execute(
        "SELECT leaseq.queue_grant($1, $2::text::regrole, 'admin')",
        &[&mine, &team],
    )
    .unwrap();
    db.execute(
        "SELECT leaseq.queue_grant($1, $2::text::regrole, 'observe')",
        &[&theirs, &other],
    )
    .unwrap();
    let their_job = enqueue(&mut db, &theirs, r#"{"secret": "theirs"}"#);
    let ui = Ui::start(&url_as(&team), &[]);
    let mut b = ui.browser();
    let overview = b.get("/");
    assert!(
        overview.has(&format!("data-queue=\"{mine}\"")),
        "{}",
        overview.body
    );
    assert!(!overview.has(&theirs), "{}", overview.body);
    let form = b.get("/enqueue");
    assert!(form.has(&format!("<option value=\"{mine}\"")) && !form.has(&theirs));

    let r = b.post("/enqueue", &[("queue", &mine), ("payload", "{}")]);
    assert_eq!(r.status, 303, "{}", r.body);
    assert_eq!(jobs_of(&mut db, &mine), 1);
    let r = b.post("/enqueue", &[("queue", &theirs), ("payload", "{}")]);
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(r.has("(SQLSTATE 42501)"), "{}", r.body);
    assert_eq!(jobs_of(&mut db, &theirs), 1);
    let page = b.get(&format!("/jobs/{their_job}"));
    assert_eq!(page.status, 403, "{}", page.body);
    assert!(!page.has("secret"));
    let page = b.get(&format!("/jobs?queue={theirs}"));
    assert_eq!(page.status, 403, "{}", page.body);
}

#[test]
fn a_post_without_or_with_a_mismatched_csrf_token_is_refused() {
    let mut db = db();
    let q = queue(&mut db, "uicsrf", "");
    let admin = role(&mut db, "admin", "leaseq_admin");
    let ui = Ui::start(&url_as(&admin), &[]);
    let mut b = ui.browser();
    let token = b.csrf();
    let origin = ui.base.clone();
    let path = format!("/queues/{q}/pause");
    let missing = b.post_raw(&path, &[("confirm", "yes")], &[("origin", &origin)]);
    assert_eq!(missing.status, 403);
    assert!(missing.has("CSRF token missing"), "{}", missing.body);
    let wrong = b.post_raw(
        &path,
        &[("csrf", &format!("{token}x")), ("confirm", "yes")],
        &[("origin", &origin)],
    );
    assert_eq!(wrong.status, 403);
    assert!(wrong.has("CSRF token mismatch"), "{}", wrong.body);
    // The field without the cookie (another site can forge the field, not the cookie).
    let mut stranger = ui.browser();
    let no_cookie = stranger.post_raw(
        &path,
        &[("csrf", &token), ("confirm", "yes")],
        &[("origin", &origin)],
    );
    assert_eq!(no_cookie.status, 403);
    assert!(!paused(&mut db, &q));
    let right = b.post(&path, &[("confirm", "yes")]);
    assert_eq!(
        right.status, 303,
        "the same POST with the token passes: {}",
        right.body
    );
    assert!(paused(&mut db, &q));
}

#[test]
fn a_cross_origin_post_is_refused() {
    let mut db = db();
    let q = queue(&mut db, "uiorigin", "");
    let admin = role(&mut db, "admin", "leaseq_admin");
    let ui = Ui::start(&url_as(&admin), &[]);
    let mut b = ui.browser();
    let token = b.csrf();
    let path = format!("/queues/{q}/pause");
    let fields = [("csrf", token.as_str()), ("confirm", "yes")];
    let evil = b.post_raw(&path, &fields, &[("origin", "http://evil.example")]);
    assert_eq!(evil.status, 403);
    assert!(evil.has("cross-origin POST refused"), "{}", evil.body);
    let port_off = format!("{}1", ui.base);
    assert_eq!(
        b.post_raw(&path, &fields, &[("origin", &port_off)]).status,
        403
    );
    let referer = b.post_raw(&path, &fields, &[("referer", "http://evil.example/jobs")]);
    assert_eq!(referer.status, 403);
    assert_eq!(
        b.post_raw(&path, &fields, &[]).status,
        403,
        "neither Origin nor Referer"
    );
    assert!(!paused(&mut db, &q));
    let own_referer = format!("{}/queues/{q}", ui.base);
    let ok = b.post_raw(&path, &fields, &[("referer", &own_referer)]);
    assert_eq!(ok.status, 303, "{}", ok.body);
    assert!(paused(&mut db, &q));
}

#[test]
fn a_non_loopback_listen_without_auth_exits_with_a_clear_message() {
    let out = Command::new(env!("CARGO_BIN_EXE_leaseq"))
        .args(["ui", "--listen", "0.0.0.0:0"])
        .env("DATABASE_URL", url())
        .env_remove("LEASEQ_UI_AUTH")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(
        said.contains("refusing to listen on 0.0.0.0:0 without --auth"),
        "{said}"
    );
    assert!(out.stdout.is_empty());
    // With --auth it listens.
    let mut ui = Command::new(env!("CARGO_BIN_EXE_leaseq"))
        .args(["ui", "--listen", "0.0.0.0:0", "--auth", "bearer:t0ken"])
        .env("DATABASE_URL", url())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(ui.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let _ = ui.kill();
    let _ = ui.wait();
    assert!(
        line.starts_with("leaseq ui: listening on http://0.0.0.0:"),
        "{line}"
    );
}

#[test]
fn a_request_for_another_host_is_answered_421_and_changes_nothing() {
    // DNS rebinding: a page of evil.example, whose name now resolves to the console's address,
    // reads with its own Host and posts with its own Origin, cookie and CSRF field included.
    let mut db = db();
    let q = queue(&mut db, "uihost", "");
    let job = enqueue(&mut db, &q, r#"{"secret": "s3cr3t"}"#);
    let admin = role(&mut db, "admin", "leaseq_admin");
    let ui = Ui::start(&url_as(&admin), &[]);
    let port = ui.base.rsplit(':').next().unwrap().to_string();
    let mut b = ui.browser();
    let token = b.csrf();
    let cookie = b.cookie_header();
    let form = format!("csrf={token}&confirm=yes");
    let cancel = |host: &str| {
        raw_request(
            &ui.base,
            &format!(
                "POST /jobs/{job}/cancel HTTP/1.1\r\nHost: {host}\r\nOrigin: http://{host}\r\n\
                 Cookie: {cookie}\r\nContent-Type: application/x-www-form-urlencoded"
            ),
            &form,
        )
    };
    let evil = format!("evil.example:{port}");
    let (code, response) = raw_request(
        &ui.base,
        &format!("GET /jobs/{job} HTTP/1.1\r\nHost: {evil}"),
        "",
    );
    assert_eq!(code, 421, "{response}");
    assert!(!response.contains("s3cr3t"), "{response}");
    assert!(response.contains("--allowed-host"), "{response}");
    let (code, response) = cancel(&evil);
    assert_eq!(code, 421, "{response}");
    assert_eq!(status(&mut db, job), "pending");
    // The same requests addressed to the console's own names pass.
    for host in [format!("127.0.0.1:{port}"), format!("localhost:{port}")] {
        let (code, response) = raw_request(
            &ui.base,
            &format!("GET /jobs/{job} HTTP/1.1\r\nHost: {host}"),
            "",
        );
        assert_eq!(code, 200, "{host}: {response}");
        assert!(response.contains("s3cr3t"), "{response}");
    }
    let (code, response) = cancel(&format!("localhost:{port}"));
    assert_eq!(code, 303, "{response}");
    assert_eq!(status(&mut db, job), "cancelled");
}

#[test]
fn an_allowed_host_is_answered_and_its_posts_must_come_from_it() {
    let mut db = db();
    let q = queue(&mut db, "uiallowed", "");
    let admin = role(&mut db, "admin", "leaseq_admin");
    let ui = Ui::start(&url_as(&admin), &["--allowed-host", "Queues.Example.com"]);
    let port = ui.base.rsplit(':').next().unwrap().to_string();
    let host = format!("queues.example.com:{port}");
    let (code, response) = raw_request(
        &ui.base,
        &format!("GET /queues/{q} HTTP/1.1\r\nHost: {host}"),
        "",
    );
    assert_eq!(code, 200, "{response}");
    let mut b = ui.browser();
    let token = b.csrf();
    let cookie = b.cookie_header();
    let pause = |origin: &str| {
        raw_request(
            &ui.base,
            &format!(
                "POST /queues/{q}/pause HTTP/1.1\r\nHost: {host}\r\nOrigin: {origin}\r\n\
                 Cookie: {cookie}\r\nContent-Type: application/x-www-form-urlencoded"
            ),
            &format!("csrf={token}&confirm=yes"),
        )
    };
    let (code, response) = pause(&format!("http://other.example:{port}"));
    assert_eq!(code, 403, "{response}");
    assert!(!paused(&mut db, &q));
    let (code, response) = pause(&format!("http://{host}"));
    assert_eq!(code, 303, "{response}");
    assert!(paused(&mut db, &q));
    // A name that is not one is refused before the console starts.
    let (code, said) = ui_refusing(&["--allowed-host", "http://queues.example.com"]);
    assert_eq!(code, Some(2), "{said}");
    assert!(said.contains("--allowed-host"), "{said}");
    assert!(
        said.contains("without a scheme, a port or a path"),
        "{said}"
    );
}

#[test]
fn pages_are_never_framed_nor_cached_and_the_assets_are() {
    let mut db = db();
    let q = queue(&mut db, "uiheaders", "");
    let job = enqueue(&mut db, &q, r#"{"k": 1}"#);
    let admin = role(&mut db, "admin", "leaseq_admin");
    let ui = Ui::start(&url_as(&admin), &[]);
    let mut b = ui.browser();
    for path in ["/".to_string(), format!("/jobs/{job}"), "/jobs".into()] {
        let page = b.get(&path);
        assert_eq!(page.status, 200, "{path}");
        let header = |name: &str| page.headers[name].to_str().unwrap().to_string();
        assert_eq!(header("x-frame-options"), "DENY", "{path}");
        assert_eq!(header("content-security-policy"), "frame-ancestors 'none'");
        assert_eq!(header("cache-control"), "no-store", "{path}");
        assert_eq!(header("x-content-type-options"), "nosniff");
    }
    let css = b.get("/assets/leaseq.css");
    assert_eq!(css.status, 200);
    assert!(
        css.headers["cache-control"]
            .to_str()
            .unwrap()
            .contains("immutable")
    );
}

#[test]
fn bearer_and_basic_auth_are_required_on_every_request_when_given() {
    let ui = Ui::start(&url(), &["--auth", "bearer:s3cret-token"]);
    let page = ui.browser().get("/");
    assert_eq!(page.status, 401);
    assert!(
        page.headers["www-authenticate"]
            .to_str()
            .unwrap()
            .starts_with("Bearer")
    );
    assert_eq!(ui.browser().get("/assets/leaseq.css").status, 401);
    let wrong = ui
        .browser()
        .with_header("authorization", "Bearer s3cret-tokeN");
    assert_eq!({ wrong }.get("/").status, 401);
    let mut right = ui
        .browser()
        .with_header("authorization", "Bearer s3cret-token");
    assert_eq!(right.get("/").status, 200);
    drop(ui);

    let ui = Ui::start_with_env(&url(), &[], &[("LEASEQ_UI_AUTH", "basic:ada:pa55:word")]);
    let page = ui.browser().get("/jobs");
    assert_eq!(page.status, 401);
    assert!(
        page.headers["www-authenticate"]
            .to_str()
            .unwrap()
            .starts_with("Basic")
    );
    // ada:pa55:word and ada:pa55:worD in base64.
    let mut right = ui
        .browser()
        .with_header("authorization", "Basic YWRhOnBhNTU6d29yZA==");
    assert_eq!(right.get("/jobs").status, 200);
    let mut wrong = ui
        .browser()
        .with_header("authorization", "Basic YWRhOnBhNTU6d29yRA==");
    assert_eq!(wrong.get("/jobs").status, 401);
}

#[test]
fn hide_payloads_masks_payloads_results_and_errors_everywhere() {
    let mut db = db();
    let q = queue(&mut db, "uihide", "max_attempts => 1");
    let job = enqueue(&mut db, &q, r#"{"card": "4111-secret-payload"}"#);
    let (_, token) = claim(&mut db, &q, "w", 30_000);
    db.execute(
        "SELECT leaseq.queue_complete($1, $2, '{\"pin\": \"secret-result\"}')",
        &[&job, &token],
    )
    .unwrap();
    let failed = enqueue(&mut db, &q, "{}");
    let (_, token) = claim(&mut db, &q, "w", 30_000);
    db.execute(
        "SELECT leaseq.queue_fail($1, $2, '{\"why\": \"secret-error\"}', retry => false)",
        &[&failed, &token],
    )
    .unwrap();
    let name = unique("uihidesched");
    db.execute(
        "SELECT leaseq.queue_schedule($1, $2, '*/5 * * * *', '{\"k\": \"secret-schedule\"}')",
        &[&name, &q],
    )
    .unwrap();
    let ui = Ui::start(&url(), &["--hide-payloads"]);
    let mut b = ui.browser();
    for path in [
        format!("/jobs/{job}"),
        format!("/jobs/{failed}"),
        format!("/jobs?queue={q}"),
        "/schedules".into(),
    ] {
        let page = b.get(&path);
        assert_eq!(page.status, 200, "{path}");
        assert!(!page.has("secret"), "{path} shows a secret:\n{}", page.body);
    }
    assert!(
        b.get(&format!("/jobs/{job}"))
            .has("hidden (--hide-payloads)")
    );
    let filter = b.get(&format!("/jobs?queue={q}&payload=%7B%22card%22%3A1%7D"));
    assert_eq!(filter.status, 400, "no payload oracle either");
    drop(ui);
    // Without the flag, the same page shows them: the assertions above can fail.
    let ui = Ui::start(&url(), &[]);
    assert!(
        ui.browser()
            .get(&format!("/jobs/{job}"))
            .has("4111-secret-payload")
    );
    db.execute("SELECT leaseq.queue_unschedule($1)", &[&name])
        .unwrap();
}

#[test]
fn the_role_header_runs_each_request_as_the_named_role() {
    let mut db = db();
    let f = fixture(&mut db);
    let observer = role(&mut db, "hobserver", "leaseq_observer");
    let admin = role(&mut db, "hadmin", "leaseq_admin");
    // The console connects as a role that may become both (the test's superuser).
    let ui = Ui::start(
        &url(),
        &[
            "--role-header",
            "X-Leaseq-Role",
            "--trusted-proxy",
            "127.0.0.1",
        ],
    );
    let mut as_observer = ui.browser().with_header("X-Leaseq-Role", &observer);
    let job = as_observer.get(&format!("/jobs/{}", f.dead));
    assert_eq!(job.status, 200);
    assert_no_actions(&job, "observer via header");
    let r = as_observer.post(&format!("/queues/{}/pause", f.queue), &[("confirm", "yes")]);
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(r.has("(SQLSTATE 42501)"));
    assert!(!paused(&mut db, &f.queue));

    let mut as_admin = ui.browser().with_header("X-Leaseq-Role", &admin);
    assert!(
        as_admin
            .get(&format!("/jobs/{}", f.dead))
            .testid("job-redrive")
    );
    let r = as_admin.post(&format!("/queues/{}/pause", f.queue), &[("confirm", "yes")]);
    assert_eq!(r.status, 303, "{}", r.body);
    assert!(paused(&mut db, &f.queue));

    let missing = ui.browser().get("/");
    assert_eq!(missing.status, 403);
    assert!(
        missing.has("missing X-Leaseq-Role header"),
        "{}",
        missing.body
    );
    // The value is a parameter, never SQL text: a name that is no role is refused as such.
    let mut odd = ui
        .browser()
        .with_header("X-Leaseq-Role", "x'; DROP TABLE t; --");
    let page = odd.get("/");
    assert_eq!(page.status, 400, "{}", page.body);
    assert!(page.has("(SQLSTATE 22023)"), "{}", page.body);
}

#[test]
fn the_role_header_comes_only_from_a_trusted_proxy_and_never_resets_the_role() {
    let mut db = db();
    let observer = role(&mut db, "pobserver", "leaseq_observer");
    let exits = |args: &[&str]| {
        let (code, said) = ui_refusing(args);
        assert_eq!(code, Some(2), "{args:?}: {said}");
        said
    };
    let said = exits(&["--role-header", "X-Leaseq-Role"]);
    assert!(said.contains("needs --trusted-proxy"), "{said}");
    let said = exits(&["--trusted-proxy", "127.0.0.1"]);
    assert!(said.contains("give both or neither"), "{said}");
    let said = exits(&[
        "--role-header",
        "X-Leaseq-Role",
        "--trusted-proxy",
        "10.0.0.0/33",
    ]);
    assert!(said.contains("not an address or a network"), "{said}");

    // From a peer outside the trusted networks: refused, whatever it names.
    let elsewhere = Ui::start(
        &url(),
        &[
            "--role-header",
            "X-Leaseq-Role",
            "--trusted-proxy",
            "10.0.0.0/8,192.168.0.1",
        ],
    );
    let page = elsewhere
        .browser()
        .with_header("X-Leaseq-Role", &observer)
        .get("/");
    assert_eq!(page.status, 403, "{}", page.body);
    assert!(page.has("is not a trusted proxy"), "{}", page.body);

    // From the proxy: a name that would reset the role to the console's own is refused.
    let ui = Ui::start(
        &url(),
        &[
            "--role-header",
            "X-Leaseq-Role",
            "--trusted-proxy",
            "127.0.0.0/8",
        ],
    );
    for value in ["none", "NONE", "default", "Default"] {
        let page = ui.browser().with_header("X-Leaseq-Role", value).get("/");
        assert_eq!(page.status, 403, "{value}: {}", page.body);
        assert!(page.has("names no role"), "{}", page.body);
        assert_no_actions(&page, value);
    }
    let page = ui
        .browser()
        .with_header("X-Leaseq-Role", &observer)
        .get("/");
    assert_eq!(page.status, 200, "{}", page.body);
    assert_no_actions(&page, "observer via the proxy");
}

#[test]
fn bad_input_is_refused_with_the_field_or_the_databases_sqlstate() {
    let mut db = db();
    let q = queue(&mut db, "uibad", "");
    let admin = role(&mut db, "admin", "leaseq_admin");
    let ui = Ui::start(&url_as(&admin), &[]);
    let mut b = ui.browser();
    let before = jobs_of(&mut db, &q);

    let r = b.post("/enqueue", &[("queue", &q), ("payload", "{\"a\": ")]);
    assert_eq!(r.status, 400);
    assert!(r.has("payload: not valid JSON"), "{}", r.body);
    let r = b.post(
        "/enqueue",
        &[("queue", &q), ("payload", "{}"), ("priority", "high")],
    );
    assert_eq!(r.status, 400);
    assert!(
        r.has("priority: &quot;high&quot; is not an integer"),
        "{}",
        r.body
    );
    let r = b.post(
        "/enqueue",
        &[("queue", &q), ("payload", "{}"), ("run_at", "tomorrowish")],
    );
    assert_eq!(r.status, 400);
    assert!(r.has("(SQLSTATE 22007)"), "{}", r.body);
    let r = b.post(
        "/enqueue",
        &[
            ("queue", &q),
            ("payload", "{}"),
            ("dedupe_key", "k"),
            ("dedupe_for", "a while"),
        ],
    );
    assert_eq!(r.status, 400);
    assert!(r.has("(SQLSTATE 22007)"), "{}", r.body);
    let r = b.post(
        "/enqueue",
        &[("queue", "no_such_queue_ui"), ("payload", "{}")],
    );
    assert_eq!(r.status, 404, "{}", r.body);
    assert!(
        r.has("(SQLSTATE 42704)") && r.testid("error-hint"),
        "{}",
        r.body
    );
    assert_eq!(jobs_of(&mut db, &q), before);

    let r = b.post("/queues", &[("queue", &q), ("lease", "soon")]);
    assert_eq!(r.status, 400);
    assert!(r.has("(SQLSTATE 22007)"), "{}", r.body);
    let r = b.post("/queues", &[("queue", &q), ("max_attempts", "0")]);
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.has("(SQLSTATE 22023)"), "{}", r.body);
    let r = b.post("/queues", &[("queue", "Bad Name")]);
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.has("(SQLSTATE 22"), "{}", r.body);
    let r = b.post(
        "/schedules",
        &[
            ("name", "bad_cron_ui"),
            ("queue", &q),
            ("every", "every day"),
            ("payload", "{}"),
        ],
    );
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.has("(SQLSTATE 22"), "{}", r.body);

    let page = b.get("/jobs?created_after=last+tuesday-ish");
    assert_eq!(page.status, 400);
    assert!(page.has("(SQLSTATE 22007)"), "{}", page.body);
    let page = b.get("/jobs?before=ten");
    assert_eq!(page.status, 400);
    assert!(
        page.has("before: &quot;ten&quot; is not an integer"),
        "{}",
        page.body
    );
    assert_eq!(b.get("/jobs/abc").status, 400);
    let r = b.post(
        "/jobs/bulk",
        &[("action", "explode"), ("id", "1"), ("confirm", "yes")],
    );
    assert_eq!(r.status, 400);
    assert!(r.has("action: expected redrive or cancel"));
}

#[test]
fn jobs_are_filtered_and_paged_newest_first_by_keyset() {
    let mut db = db();
    let q = queue(&mut db, "uipage", "");
    let ids: Vec<i64> = (0..60)
        .map(|n| {
            let customer = if n % 10 == 0 { 42 } else { 1000 + n };
            enqueue(
                &mut db,
                &q,
                &format!(r#"{{"n": {n}, "customer": {customer}}}"#),
            )
        })
        .collect();
    let ui = Ui::start(&url(), &[]);
    let mut b = ui.browser();
    let rows = |page: &Page| -> Vec<i64> {
        page.body
            .split("data-testid=\"job-row\" data-job-id=\"")
            .skip(1)
            .map(|s| s.split('"').next().unwrap().parse().unwrap())
            .collect()
    };
    let first = b.get(&format!("/jobs?queue={q}"));
    let newest: Vec<i64> = ids.iter().rev().copied().collect();
    assert_eq!(rows(&first), newest[..50]);
    let older = first
        .body
        .split("data-testid=\"older\"")
        .next()
        .unwrap()
        .rsplit("href=\"")
        .next()
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .replace("&amp;", "&");
    assert!(
        older.ends_with(&format!("before={}", newest[49])),
        "{older}"
    );
    let second = b.get(&older);
    assert_eq!(rows(&second), newest[50..]);
    assert!(!second.testid("older"));

    let customer = b.get(&format!(
        "/jobs?queue={q}&payload=%7B%22customer%22%3A+42%7D"
    ));
    assert_eq!(rows(&customer).len(), 6, "{}", customer.body);
    for id in rows(&customer) {
        let i = ids.iter().position(|x| *x == id).unwrap();
        assert_eq!(i % 10, 0, "job {id} matched {{\"customer\": 42}}");
    }
    assert!(customer.testid("payload-unindexed"), "{}", customer.body);
    // Once payloads are indexed, the same matches from the index, and no note.
    db.execute("SELECT leaseq.queue_index_payloads(true)", &[])
        .unwrap();
    let indexed = b.get(&format!(
        "/jobs?queue={q}&payload=%7B%22customer%22%3A+42%7D"
    ));
    db.execute("SELECT leaseq.queue_index_payloads(false)", &[])
        .unwrap();
    assert_eq!(rows(&indexed), rows(&customer));
    assert!(!indexed.testid("payload-unindexed"), "{}", indexed.body);
    let (job, _) = claim(&mut db, &q, "w-filter", 60_000);
    let running = b.get(&format!("/jobs?queue={q}&status=running&worker=w-filter"));
    assert_eq!(rows(&running), [job]);
    let none = b.get(&format!("/jobs?queue={q}&status=running&worker=nobody"));
    assert!(rows(&none).is_empty() && none.testid("no-jobs"));
}

#[test]
fn the_timeline_shows_a_lease_expiry_as_the_attempt_it_ended() {
    let mut db = db();
    let q = queue(&mut db, "uilease", "");
    let job = enqueue(&mut db, &q, "{}");
    claim(&mut db, &q, "w-lost", 10);
    // The expired lease is reclaimed by the next claim or by the maintenance worker: claim
    // until the job comes back.
    let until = Instant::now() + Duration::from_secs(20);
    let again = loop {
        std::thread::sleep(Duration::from_millis(50));
        let rows = db
            .query(
                "SELECT job_id FROM leaseq.queue_claim($1, 'w-second', 1, interval '1 minute')",
                &[&q],
            )
            .unwrap();
        if let Some(row) = rows.first() {
            break row.get::<_, i64>(0);
        }
        assert!(Instant::now() < until, "the expired job never came back");
    };
    assert_eq!(again, job);
    let ui = Ui::start(&url(), &[]);
    let page = ui.browser().get(&format!("/jobs/{job}"));
    assert_eq!(page.status, 200);
    let expired = page
        .body
        .find("data-testid=\"attempt-lease-expired\"")
        .expect(&page.body);
    let running = page
        .body
        .find("data-testid=\"attempt-running\"")
        .expect(&page.body);
    assert!(expired < running, "attempt 1 before attempt 2");
    assert!(page.has("w-lost") && page.has("w-second") && page.testid("running-lease"));
}

#[test]
fn events_announce_an_enqueue_on_an_observed_queue() {
    let mut db = db();
    let q = queue(&mut db, "uievents", "");
    let ui = Ui::start(&url(), &[]);
    let response = ureq::get(format!("{}/events", ui.base)).call().unwrap();
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let reader = BufReader::new(response.into_body().into_reader());
        for line in reader.lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    // The listener subscribes shortly after start: enqueue until an event arrives.
    let until = Instant::now() + Duration::from_secs(10);
    let mut heard = false;
    while Instant::now() < until && !heard {
        enqueue(&mut db, &q, "{}");
        while let Ok(line) = rx.recv_timeout(Duration::from_millis(500)) {
            if line == "event: change" {
                heard = true;
                break;
            }
        }
    }
    assert!(heard, "no change event within 10 s of enqueues");
}

#[test]
fn queue_pause_and_resume_from_the_command_line_say_whether_anything_changed() {
    let mut db = db();
    let q = queue(&mut db, "uicli", "");
    let leaseq = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_leaseq"))
            .args(args)
            .env("DATABASE_URL", url())
            .output()
            .unwrap();
        (out.status.code(), String::from_utf8(out.stdout).unwrap())
    };
    assert_eq!(
        leaseq(&["queue", "pause", &q]),
        (Some(0), format!("queue {q} paused\n"))
    );
    assert!(paused(&mut db, &q));
    assert_eq!(
        leaseq(&["queue", "pause", &q]),
        (
            Some(3),
            format!("queue {q} was already paused: nothing changed\n")
        )
    );
    assert_eq!(
        leaseq(&["queue", "resume", &q]),
        (Some(0), format!("queue {q} resumed\n"))
    );
    assert!(!paused(&mut db, &q));
    assert_eq!(
        leaseq(&["queue", "resume", &q]),
        (
            Some(3),
            format!("queue {q} was not paused: nothing changed\n")
        )
    );
}

/// The text of the cell `data-testid="{testid}"` in `html`, its tags stripped.
fn cell(html: &str, testid: &str) -> Option<String> {
    let at = html.find(&format!("data-testid=\"{testid}\""))?;
    let rest = &html[at..];
    let inner = &rest[rest.find('>')? + 1..rest.find("</td>")?];
    let mut text = String::new();
    let mut in_tag = false;
    for c in inner.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => text.push(c),
            _ => {}
        }
    }
    Some(text.trim().to_string())
}

/// Statuses are data: a job in every status the database lists (`enum_range`), then each is
/// counted by `leaseq stats`, shown by the overview (the live ones: succeeded and cancelled jobs
/// only history holds), offered by the jobs page's filter (which finds its job), and offered a
/// Cancel button exactly where `queue_cancel` acts — the blocked job's cancels it. A status added
/// to the enum and forgotten by one of them fails here; every surface's misses are listed at once.
#[test]
fn every_status_the_database_lists_is_counted_shown_filtered_and_cancelled_where_it_may_be() {
    let mut db = db();
    let q = queue(&mut db, "uistatus", "group_concurrency => 1");
    let mut made: Vec<(&str, i64)> = Vec::new();
    let succeeded = enqueue(&mut db, &q, "{}");
    let (job, token) = claim(&mut db, &q, "w-status", 60_000);
    assert_eq!(job, succeeded);
    db.execute("SELECT leaseq.queue_complete($1, $2)", &[&job, &token])
        .unwrap();
    made.push(("succeeded", succeeded));
    made.push(("dead", dead_job(&mut db, &q, "{}")));
    let running = enqueue(&mut db, &q, "{}");
    assert_eq!(claim(&mut db, &q, "w-status", 60_000).0, running);
    made.push(("running", running));
    let cancelled = enqueue(&mut db, &q, "{}");
    db.execute("SELECT leaseq.queue_cancel($1)", &[&cancelled])
        .unwrap();
    made.push(("cancelled", cancelled));
    // The group admits one job at a time (group_concurrency 1): the second waits for room.
    let grouped = |db: &mut Client| -> i64 {
        db.query_one(
            "SELECT leaseq.queue_enqueue($1, '{}', group_key => 'g')",
            &[&q],
        )
        .unwrap()
        .get(0)
    };
    let pending = grouped(&mut db);
    made.push(("pending", pending));
    made.push(("waiting", grouped(&mut db)));
    let blocked: i64 = db
        .query_one(
            "SELECT leaseq.queue_enqueue($1, '{}', depends_on => ARRAY[$2::bigint])",
            &[&q, &pending],
        )
        .unwrap()
        .get(0);
    made.push(("blocked", blocked));
    for (expected, job) in &made {
        assert_eq!(status(&mut db, *job), *expected, "job {job}");
    }

    let statuses: Vec<String> = db
        .query(
            "SELECT unnest(enum_range(NULL::leaseq.job_status))::text",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let job_in = |status: &str| {
        made.iter()
            .find(|(s, _)| *s == status)
            .map(|(_, job)| *job)
            .unwrap_or_else(|| panic!("no job in status {status}: make one above"))
    };
    // Finished for good: the overview counts live jobs only, and queue_cancel leaves these as
    // they are (a dead job may still be redriven, so it may be cancelled).
    let live = |status: &str| !matches!(status, "succeeded" | "cancelled");
    let mut missed: Vec<String> = Vec::new();

    // `leaseq stats`: a column per status, the queue's row 1 in each.
    let out = Command::new(env!("CARGO_BIN_EXE_leaseq"))
        .arg("stats")
        .env("DATABASE_URL", url())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    let row: Vec<&str> = lines
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|r| r.first() == Some(&q.as_str()))
        .unwrap_or_else(|| panic!("no row for {q} in:\n{text}"));
    for status in &statuses {
        let value = header.iter().position(|c| c == status).map(|i| row[i]);
        if value != Some("1") {
            missed.push(format!("leaseq stats: {status} is {value:?}, not 1"));
        }
    }

    let admin = role(&mut db, "admin", "leaseq_admin");
    let ui = Ui::start(&url_as(&admin), &[]);
    let mut b = ui.browser();

    // The overview: its counts are kept for leaseq.overview_max_age, so it is read until the
    // new queue's are in (or 10 s passed).
    let deadline = Instant::now() + Duration::from_secs(10);
    let overview_misses = loop {
        let page = b.get("/");
        assert_eq!(page.status, 200, "{}", page.body);
        let row = page
            .body
            .split(&format!("data-queue=\"{q}\""))
            .nth(1)
            .and_then(|rest| rest.split("</tr>").next())
            .unwrap_or_else(|| panic!("no row for {q} in:\n{}", page.body))
            .to_string();
        let misses: Vec<String> = statuses
            .iter()
            .filter(|s| live(s))
            .filter_map(|s| {
                let value = cell(&row, s);
                (value.as_deref() != Some("1"))
                    .then(|| format!("overview: {s} is {value:?}, not 1"))
            })
            .collect();
        if misses.is_empty() || Instant::now() > deadline {
            break misses;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    missed.extend(overview_misses);

    // The jobs page: its status filter offers each status, and finds that status's job.
    let jobs = b.get(&format!("/jobs?queue={q}"));
    assert_eq!(jobs.status, 200, "{}", jobs.body);
    let filter = jobs
        .body
        .split("data-testid=\"filter-status\"")
        .nth(1)
        .and_then(|rest| rest.split("</select>").next())
        .unwrap_or_else(|| panic!("no status filter in:\n{}", jobs.body))
        .to_string();
    for status in &statuses {
        if !filter.contains(&format!("<option value=\"{status}\"")) {
            missed.push(format!("jobs page: the status filter lacks {status}"));
        }
        let found = b.get(&format!("/jobs?queue={q}&status={status}"));
        let job = job_in(status);
        if !found.has(&format!("data-job-id=\"{job}\"")) {
            missed.push(format!(
                "jobs page: status={status} does not list job {job}"
            ));
        } else if !found.has(&format!("id=\"select-{job}\"")) {
            missed.push(format!(
                "jobs page: job {job} ({status}) cannot be selected"
            ));
        }
    }

    // Each job's page offers Cancel where queue_cancel acts: all but the finished for good.
    for status in &statuses {
        let job = job_in(status);
        let page = b.get(&format!("/jobs/{job}"));
        let offered = page.testid("job-cancel");
        if offered != live(status) {
            missed.push(format!(
                "job page: {status} job {job} {} Cancel",
                if offered { "offers" } else { "lacks" }
            ));
        }
    }
    let cancel = b.post(&format!("/jobs/{blocked}/cancel"), &[("confirm", "yes")]);
    assert_eq!(cancel.status, 303, "{}", cancel.body);
    if status(&mut db, blocked) != "cancelled" {
        missed.push(format!(
            "job page: Cancel left blocked job {blocked} as it was"
        ));
    }
    assert!(missed.is_empty(), "statuses missed:\n{}", missed.join("\n"));
}
