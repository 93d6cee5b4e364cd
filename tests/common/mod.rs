//! Shared by the client-side tests: they run against a live cluster with the extension
//! installed, named by `LEASEQ_TEST_DATABASE_URL` (scripts/test starts one and sets it), and are
//! built only with the `client-tests` feature.
#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};

pub use postgres::{Client, NoTls};

pub const URL_VAR: &str = "LEASEQ_TEST_DATABASE_URL";

/// A new connection to the test cluster.
pub fn connect() -> Client {
    let url = std::env::var(URL_VAR)
        .unwrap_or_else(|_| panic!("{URL_VAR} must name a database with leaseq installed"));
    Client::connect(&url, NoTls).expect("connect to the test cluster")
}

/// A queue name no other test uses, created with `settings` (SQL named arguments, may be empty).
pub fn new_queue(db: &mut Client, prefix: &str, settings: &str) -> String {
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
    .expect("create queue");
    name
}

/// One claimed job: id, token (as text), attempt number.
#[derive(Clone, Debug)]
pub struct Claimed {
    pub job_id: i64,
    pub token: String,
    pub attempt_no: i32,
}

pub fn claim(db: &mut Client, queue: &str, worker: &str, batch: i32) -> Vec<Claimed> {
    db.query(
        "SELECT job_id, lease_token::text, attempt_no FROM leaseq.queue_claim($1, $2, $3)",
        &[&queue, &worker, &batch],
    )
    .expect("claim")
    .iter()
    .map(|r| Claimed {
        job_id: r.get(0),
        token: r.get(1),
        attempt_no: r.get(2),
    })
    .collect()
}

/// One job of `queue`, claimed with a lease of `lease` (an SQL interval) instead of the queue's.
pub fn claim_with_lease(db: &mut Client, queue: &str, worker: &str, lease: &str) -> Claimed {
    let row = db
        .query_one(
            "SELECT job_id, lease_token::text, attempt_no
               FROM leaseq.queue_claim($1, $2, 1, lease => $3::text::interval)",
            &[&queue, &worker, &lease],
        )
        .expect("claim one job");
    Claimed {
        job_id: row.get(0),
        token: row.get(1),
        attempt_no: row.get(2),
    }
}

pub fn complete(db: &mut Client, job: &Claimed) -> bool {
    db.query_one(
        "SELECT leaseq.queue_complete($1, $2::text::uuid)",
        &[&job.job_id, &job.token],
    )
    .expect("complete")
    .get(0)
}

pub fn renew(db: &mut Client, job: &Claimed) -> bool {
    db.query_one(
        "SELECT leaseq.queue_renew($1, $2::text::uuid) IS NOT NULL",
        &[&job.job_id, &job.token],
    )
    .expect("renew")
    .get(0)
}

/// The status `queue_fail` returns, or `None` when it was fenced.
pub fn fail(db: &mut Client, job: &Claimed) -> Option<String> {
    db.query_one(
        "SELECT leaseq.queue_fail($1, $2::text::uuid, '{\"error\": \"test\"}')::text",
        &[&job.job_id, &job.token],
    )
    .expect("fail")
    .get(0)
}

pub fn enqueue(db: &mut Client, queue: &str, payload: &str) -> i64 {
    db.query_one(
        "SELECT leaseq.queue_enqueue($1, $2::text::jsonb)",
        &[&queue, &payload],
    )
    .expect("enqueue")
    .get(0)
}

pub fn status(db: &mut Client, job_id: i64) -> String {
    db.query_one(
        "SELECT status::text FROM leaseq.jobs WHERE id = $1",
        &[&job_id],
    )
    .expect("status")
    .get(0)
}

/// `attempt_no:outcome` for each attempt of the job, in order.
pub fn history(db: &mut Client, job_id: i64) -> Vec<String> {
    db.query(
        "SELECT attempt_no || ':' || outcome FROM leaseq.attempts WHERE job_id = $1
          ORDER BY attempt_no",
        &[&job_id],
    )
    .expect("history")
    .iter()
    .map(|r| r.get(0))
    .collect()
}
