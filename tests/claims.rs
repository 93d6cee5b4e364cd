//! Claims against a live cluster with real connections: concurrency, locks, order. The
//! deterministic interleavings (a locked row, a rolled-back claim, two enqueues with one dedupe
//! key) are isolation specs under pg_test/specs/.
mod common;

use std::collections::HashMap;
use std::sync::{Arc, Barrier};
use std::thread;

use common::*;

#[test]
fn four_workers_claiming_1000_jobs_never_share_a_job_and_miss_none() {
    let mut db = connect();
    let queue = new_queue(&mut db, "contended", "");
    db.execute(
        "SELECT leaseq.queue_enqueue_batch($1,
             ARRAY(SELECT jsonb_build_object('n', n) FROM generate_series(1, 1000) n))",
        &[&queue],
    )
    .unwrap();

    let start = Arc::new(Barrier::new(4));
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let (queue, start) = (queue.clone(), start.clone());
            thread::spawn(move || {
                let mut db = connect();
                start.wait();
                let mut mine = Vec::new();
                // Mixed batch sizes make the claimers' windows overlap in every way.
                for round in 0.. {
                    let batch = 1 + (round * 7 + w * 3) % 10;
                    let jobs = claim(&mut db, &queue, &format!("w{w}"), batch);
                    if jobs.is_empty() {
                        break;
                    }
                    for job in jobs {
                        assert!(complete(&mut db, &job), "the owner completes its job");
                        mine.push(job);
                    }
                }
                mine
            })
        })
        .collect();

    let mut owners: HashMap<i64, usize> = HashMap::new();
    for (w, handle) in workers.into_iter().enumerate() {
        let mine = handle.join().expect("worker thread");
        assert!(
            !mine.is_empty(),
            "worker {w} got no job: the claims did not run concurrently"
        );
        for job in mine {
            assert_eq!(job.attempt_no, 1);
            if let Some(other) = owners.insert(job.job_id, w) {
                panic!("job {} claimed by workers {other} and {w}", job.job_id);
            }
        }
    }
    assert_eq!(owners.len(), 1000, "every job claimed exactly once");

    let row = db
        .query_one(
            "SELECT count(*) FILTER (WHERE status = 'succeeded'),
                    count(*),
                    (SELECT count(*) FROM leaseq.attempts a JOIN leaseq.jobs j ON j.id = a.job_id
                      WHERE j.queue = $1),
                    (SELECT count(*) FROM leaseq.attempts a JOIN leaseq.jobs j ON j.id = a.job_id
                      WHERE j.queue = $1 AND a.outcome = 'succeeded' AND a.attempt_no = 1)
               FROM leaseq.jobs WHERE queue = $1",
            &[&queue],
        )
        .unwrap();
    let (succeeded, jobs, attempts, first_attempts_succeeded): (i64, i64, i64, i64) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    assert_eq!((succeeded, jobs), (1000, 1000));
    assert_eq!(
        (attempts, first_attempts_succeeded),
        (1000, 1000),
        "one attempt per job"
    );
}

#[test]
fn a_job_locked_by_another_transaction_is_skipped_without_waiting() {
    let mut db = connect();
    let queue = new_queue(&mut db, "skiplocked", "");
    let first = enqueue(&mut db, &queue, r#"{"n": 1}"#);
    let second = enqueue(&mut db, &queue, r#"{"n": 2}"#);

    let mut holder = connect();
    let mut tx = holder.transaction().unwrap();
    tx.execute(
        "SELECT 1 FROM leaseq.jobs WHERE id = $1 FOR UPDATE",
        &[&first],
    )
    .unwrap();

    // Waiting for the lock would hit lock_timeout and fail the claim: it must not wait at all.
    db.batch_execute("SET lock_timeout = '5s'").unwrap();
    let got = claim(&mut db, &queue, "w", 10);
    assert_eq!(
        got.iter().map(|j| j.job_id).collect::<Vec<_>>(),
        vec![second]
    );
    tx.rollback().unwrap();

    let got = claim(&mut db, &queue, "w", 10);
    assert_eq!(
        got.iter().map(|j| j.job_id).collect::<Vec<_>>(),
        vec![first],
        "released by rollback"
    );
}

#[test]
fn a_rolled_back_claim_releases_its_jobs_and_keeps_no_attempt() {
    let mut db = connect();
    let queue = new_queue(&mut db, "claimrollback", "");
    let id = enqueue(&mut db, &queue, "{}");
    let mut tx = db.transaction().unwrap();
    let got = tx
        .query("SELECT job_id FROM leaseq.queue_claim($1, 'w')", &[&queue])
        .unwrap();
    assert_eq!(got.len(), 1);
    tx.rollback().unwrap();
    assert_eq!(status(&mut db, id), "pending");
    assert!(history(&mut db, id).is_empty());
    let again = claim(&mut db, &queue, "w", 1);
    assert_eq!((again[0].job_id, again[0].attempt_no), (id, 1));
}

#[test]
fn claims_follow_priority_then_run_at_then_id() {
    let mut db = connect();
    let queue = new_queue(&mut db, "ordered", "");
    let ids: Vec<i64> = [
        ("0", "3 seconds"), // old, default priority
        ("0", "5 seconds"), // older
        ("0", "5 seconds"), // as old, later id
        ("7", "1 second"),  // high priority, newest
        ("-1", "1 hour"),   // oldest, lowest priority
    ]
    .iter()
    .map(|(priority, age)| {
        db.query_one(
            &format!(
                "SELECT leaseq.queue_enqueue($1, '{{}}', clock_timestamp() - interval '{age}',
                                             priority => {priority})"
            ),
            &[&queue],
        )
        .unwrap()
        .get(0)
    })
    .collect();
    // Same-age jobs need the same run_at to test the id tie-break.
    db.execute(
        "UPDATE leaseq.jobs SET run_at = (SELECT run_at FROM leaseq.jobs WHERE id = $1) WHERE id = $2",
        &[&ids[1], &ids[2]],
    )
    .unwrap();
    // Not yet due: never claimed, whatever its priority.
    db.query_one(
        "SELECT leaseq.queue_enqueue($1, '{}', clock_timestamp() + interval '1 hour', priority => 100)",
        &[&queue],
    )
    .unwrap();

    let in_one_batch: Vec<i64> = claim(&mut db, &queue, "w", 10)
        .iter()
        .map(|j| j.job_id)
        .collect();
    assert_eq!(in_one_batch, vec![ids[3], ids[1], ids[2], ids[0], ids[4]]);
}
