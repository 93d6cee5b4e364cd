//! What the `leaseq` binary gives away to whoever reaches it, against a live cluster, with real
//! processes (docs/security.md, "Low findings"): the console's and the metrics' credentials
//! (never echoed, guesses throttled), the console's live-update streams (capped), the metrics
//! endpoint (loopback unless `--auth`, a 503 that names nothing, one count per 5 s), and
//! `leaseq work` (no secrets in the handler's environment, no forged log lines). Needs
//! `LEASEQ_TEST_DATABASE_URL` (a superuser's).
#![cfg(feature = "live-tests")]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
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

fn unique(prefix: &str) -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{prefix}_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

fn new_queue(db: &mut Client) -> String {
    let name = unique("exposure");
    db.execute("SELECT leaseq.queue_create($1)", &[&name])
        .unwrap();
    name
}

/// `leaseq ARGS` with `DATABASE_URL` = `database` and `env`, stdout and stderr piped; the
/// console's and the metrics' credentials of the test's own environment removed.
fn leaseq(database: &str, args: &[&str], env: &[(&str, &str)]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_leaseq"))
        .args(args)
        .env("DATABASE_URL", database)
        .env_remove("LEASEQ_UI_AUTH")
        .env_remove("LEASEQ_METRICS_AUTH")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start leaseq")
}

/// A `leaseq` that must refuse to start: its exit code and stderr. One that starts anyway is
/// killed after 15 s and fails the test (rather than hanging it).
fn refusal(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut child = leaseq(&url(), args, env);
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("leaseq {args:?} started instead of refusing");
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

/// A serving `leaseq` (ui or metrics), killed when dropped; `address` is `host:port`.
struct Server {
    child: Child,
    address: String,
    /// The rest of stderr, read by a thread of its own (so the server never blocks on it).
    stderr: std::sync::mpsc::Receiver<String>,
}

impl Server {
    fn ui(args: &[&str]) -> Server {
        let mut child = leaseq(&url(), &[&["ui"], args].concat(), &[]);
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let address = line
            .trim()
            .strip_prefix("leaseq ui: listening on http://")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .trim_end_matches('/')
            .to_string();
        Server::with(child, address)
    }

    fn metrics(database: &str, args: &[&str]) -> Server {
        let mut child = leaseq(database, &[&["metrics"], args].concat(), &[]);
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        stderr.read_line(&mut line).unwrap();
        let address = line
            .trim()
            .strip_prefix("leaseq: serving metrics on http://")
            .and_then(|a| a.strip_suffix("/metrics"))
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .replace("0.0.0.0", "127.0.0.1");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in stderr.lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Server {
            child,
            address,
            stderr: rx,
        }
    }

    fn with(mut child: Child, address: String) -> Server {
        let stderr = BufReader::new(child.stderr.take().unwrap());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in stderr.lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Server {
            child,
            address,
            stderr: rx,
        }
    }

    /// `GET path` with `headers`: (status, headers and body as one text).
    fn get(&self, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
        let mut stream = TcpStream::connect(&self.address).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut head = format!(
            "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n",
            self.address
        );
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        write!(stream, "{head}\r\n").unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        (status_of(&response), response)
    }

    /// What the server said on stderr so far.
    fn said(&self) -> String {
        self.stderr.try_iter().collect::<Vec<_>>().join("\n")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn status_of(response: &str) -> u16 {
    response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {response:?}"))
}

fn body_of(response: &str) -> &str {
    response.split_once("\r\n\r\n").map_or("", |(_, body)| body)
}

#[test]
fn a_malformed_auth_value_is_refused_without_being_repeated() {
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)]);
    let cases: [Case; 4] = [
        (&["ui", "--auth", "token:s3cret-arg"], &[]),
        (&["ui"], &[("LEASEQ_UI_AUTH", "basic:s3cret-env")]),
        (
            &["metrics", "--listen", "127.0.0.1:0", "--auth", "bearer"],
            &[],
        ),
        (
            &["metrics", "--listen", "127.0.0.1:0"],
            &[("LEASEQ_METRICS_AUTH", "tok:s3cret-metrics")],
        ),
    ];
    for (args, env) in cases {
        let (code, said) = refusal(args, env);
        assert_eq!(code, Some(2), "{args:?}: {said}");
        assert!(!said.contains("s3cret"), "{args:?} repeated it: {said}");
        assert!(
            said.contains("invalid value for '--auth <AUTH>' (not shown"),
            "{args:?}: {said}"
        );
    }
}

#[test]
fn wrong_credentials_are_throttled_per_peer_and_then_even_the_right_ones_wait() {
    let ui = Server::ui(&["--listen", "127.0.0.1:0", "--auth", "bearer:right-token"]);
    let right = [("authorization", "Bearer right-token")];
    let wrong = [("authorization", "Bearer wrong-token")];
    assert_eq!(ui.get("/", &right).0, 200);
    for guess in 1..=10 {
        assert_eq!(ui.get("/", &wrong).0, 401, "guess {guess}");
    }
    let (status, response) = ui.get("/", &wrong);
    assert_eq!(status, 429, "the 11th guess in a row: {response}");
    assert!(
        response.to_ascii_lowercase().contains("retry-after: 2"),
        "{response}"
    );
    assert_eq!(ui.get("/", &right).0, 429, "nothing is checked meanwhile");
    std::thread::sleep(Duration::from_millis(2100));
    assert_eq!(ui.get("/", &right).0, 200, "one guess back after 2 s");
}

#[test]
fn events_admit_at_most_64_subscribers_and_free_a_place_when_one_leaves() {
    let ui = Server::ui(&["--listen", "127.0.0.1:0"]);
    let subscribe = || {
        let mut stream = TcpStream::connect(&ui.address).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        write!(
            stream,
            "GET /events HTTP/1.1\r\nHost: {}\r\n\r\n",
            ui.address
        )
        .unwrap();
        let mut status_line = String::new();
        BufReader::new(stream.try_clone().unwrap())
            .read_line(&mut status_line)
            .unwrap();
        (status_of(&status_line), stream)
    };
    let mut open = Vec::new();
    for n in 1..=64 {
        let (status, stream) = subscribe();
        assert_eq!(status, 200, "subscriber {n}");
        open.push(stream);
    }
    let (status, _refused) = subscribe();
    assert_eq!(status, 503, "the 65th subscriber");
    assert_eq!(ui.get("/", &[]).0, 200, "pages are still served");
    // A page closed: its place is free once the server notices (at once, or at the stream's
    // next keep-alive, 15 s on).
    drop(open.pop());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, stream) = subscribe();
        if status == 200 {
            open.push(stream);
            break;
        }
        assert!(Instant::now() < deadline, "no place freed within 20 s");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn metrics_on_an_address_other_hosts_reach_need_auth() {
    let (code, said) = refusal(&["metrics", "--listen", "0.0.0.0:0"], &[]);
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains("refusing to serve metrics on 0.0.0.0:0 without --auth"),
        "{said}"
    );
    let metrics = Server::metrics(
        &url(),
        &["--listen", "0.0.0.0:0", "--auth", "bearer:scrape-token"],
    );
    let (status, response) = metrics.get("/metrics", &[]);
    assert_eq!(status, 401, "{response}");
    assert!(
        response
            .to_ascii_lowercase()
            .contains("www-authenticate: bearer"),
        "{response}"
    );
    let (status, response) = metrics.get("/metrics", &[("authorization", "Bearer scrape-token")]);
    assert_eq!(status, 200, "{response}");
    assert!(body_of(&response).contains("leaseq_jobs"), "{response}");
}

#[test]
fn a_scrape_the_database_cannot_answer_is_a_503_naming_no_server_database_or_role() {
    // Nothing listens on port 1.
    let metrics = Server::metrics(
        "postgres://secret_role@127.0.0.1:1/secret_db?connect_timeout=2",
        &["--listen", "127.0.0.1:0"],
    );
    let (status, response) = metrics.get("/metrics", &[]);
    assert_eq!(status, 503, "{response}");
    let body = body_of(&response);
    for named in ["secret_role", "secret_db", ":1"] {
        assert!(!body.contains(named), "the body names {named}: {body}");
    }
    // Why goes to the exporter's log.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut said = String::new();
    while !said.contains("secret_db") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        said.push_str(&metrics.said());
    }
    assert!(
        said.contains("cannot connect to 127.0.0.1:1/secret_db as secret_role"),
        "{said}"
    );
}

#[test]
fn scrapes_within_five_seconds_share_one_count() {
    let mut db = db();
    let queue = new_queue(&mut db);
    let metrics = Server::metrics(&url(), &["--listen", "127.0.0.1:0"]);
    // `leaseq_jobs{queue="…",state="pending"} N` (whatever the label's name).
    let pending = |body: &str| {
        let queue_label = format!("leaseq_jobs{{queue=\"{queue}\",");
        body.lines()
            .find(|l| l.starts_with(&queue_label) && l.contains("=\"pending\"} "))
            .and_then(|l| l.rsplit(' ').next())
            .unwrap_or_else(|| panic!("no pending sample of {queue} in\n{body}"))
            .to_string()
    };
    let started = Instant::now();
    let (status, first) = metrics.get("/metrics", &[]);
    assert_eq!(status, 200);
    assert_eq!(pending(body_of(&first)), "0");
    db.execute("SELECT leaseq.queue_enqueue($1, '{}')", &[&queue])
        .unwrap();
    let (_, again) = metrics.get("/metrics", &[]);
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "too slow to test"
    );
    assert_eq!(
        pending(body_of(&again)),
        "0",
        "the same scrape, served again"
    );
    assert!(
        body_of(&again) == body_of(&first),
        "the same text, ages and all"
    );
    std::thread::sleep(
        Duration::from_secs(5).saturating_sub(started.elapsed()) + Duration::from_millis(300),
    );
    let (_, later) = metrics.get("/metrics", &[]);
    assert_eq!(pending(body_of(&later)), "1", "a new count after 5 s");
}

/// A scratch directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "leaseq-exposure-test-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Runs one job of a new queue with `leaseq work ARGS -- sh -c 'env > DIR/env'`, the worker's
/// environment holding every secret the binary reads: the handler's environment.
fn handler_environment(args: &[&str]) -> String {
    let mut db = db();
    let queue = new_queue(&mut db);
    db.execute("SELECT leaseq.queue_enqueue($1, '{}')", &[&queue])
        .unwrap();
    let dir = scratch(&queue);
    let out = dir.join("env");
    let handler = format!("env > {}", out.display());
    let work = [
        &["work", "--queue", &queue, "--poll", "100ms"],
        args,
        &["--", "sh", "-c", &handler],
    ]
    .concat();
    let mut worker = leaseq(
        &url(),
        &work,
        &[
            ("LEASEQ_UI_AUTH", "bearer:ui-secret"),
            ("LEASEQ_METRICS_AUTH", "bearer:metrics-secret"),
            ("UNRELATED_SETTING", "kept"),
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while !out.exists() && Instant::now() < deadline {
        if let Some(status) = worker.try_wait().unwrap() {
            let mut said = String::new();
            worker
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut said)
                .unwrap();
            panic!("leaseq work {args:?} exited {status}: {said}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = worker.kill();
    let _ = worker.wait();
    std::thread::sleep(Duration::from_millis(200));
    std::fs::read_to_string(&out).expect("the handler ran within 20 s")
}

#[test]
fn the_handler_gets_no_database_url_nor_credentials_unless_passed() {
    let env = handler_environment(&[]);
    let names: Vec<&str> = env
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(n, _)| n)
        .collect();
    for withheld in ["DATABASE_URL", "LEASEQ_UI_AUTH", "LEASEQ_METRICS_AUTH"] {
        assert!(
            !names.contains(&withheld),
            "{withheld} reached the handler:\n{env}"
        );
    }
    for kept in ["UNRELATED_SETTING", "LEASEQ_JOB_ID", "LEASEQ_QUEUE", "PATH"] {
        assert!(names.contains(&kept), "{kept} missing:\n{env}");
    }

    let env = handler_environment(&["--pass-env", "DATABASE_URL"]);
    assert!(env.contains(&format!("DATABASE_URL={}\n", url())), "{env}");
    assert!(
        !env.contains("ui-secret") && !env.contains("metrics-secret"),
        "{env}"
    );
}

#[test]
fn a_worker_name_with_a_newline_cannot_forge_a_log_line() {
    let mut db = db();
    let queue = new_queue(&mut db);
    let forged = "w\n2026-11-29T07:45:01.123Z completed  queue=billing job=1 worker=FORGED";
    let mut worker = leaseq(
        &url(),
        &[
            "work",
            "--queue",
            &queue,
            "--worker-id",
            forged,
            "--",
            "true",
        ],
        &[],
    );
    let stderr = BufReader::new(worker.stderr.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let started = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("a first log line");
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(worker.id() as i32, libc::SIGTERM) };
    let _ = worker.wait();
    let lines: Vec<String> = std::iter::once(started).chain(rx.try_iter()).collect();
    for line in &lines {
        assert!(
            !line.contains("worker=FORGED") || line.contains("\\n"),
            "{lines:#?}"
        );
        assert!(
            !line.starts_with("2026-11-29T07:45:01.123Z"),
            "a forged line: {lines:#?}"
        );
    }
    assert!(
        lines[0].contains(r#"worker="w\n2026-11-29T07:45:01.123Z completed"#),
        "{lines:#?}"
    );
}
