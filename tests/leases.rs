//! Leases, fencing, retries and transactions against a live cluster, with real time passing.
mod common;

use std::thread;
use std::time::Duration;

use common::*;
use postgres::fallible_iterator::FallibleIterator;

/// Claims on `queue` until `worker` gets a job (the reclaim's backoff may be a few ms).
fn claim_one(db: &mut Client, queue: &str, worker: &str) -> Claimed {
    for _ in 0..200 {
        if let Some(job) = claim(db, queue, worker, 1).pop() {
            return job;
        }
        thread::sleep(Duration::from_millis(5));
    }
    panic!("{worker} could not claim a job from {queue}");
}

#[test]
fn a_stale_worker_can_neither_renew_nor_complete_nor_fail_after_its_lease_expires() {
    let mut db = connect();
    // The paused worker's lease is short (100 ms); every other lease is an hour, so that only
    // the lease meant to expire can.
    let queue = new_queue(
        &mut db,
        "stale",
        "lease => '1 hour', backoff_base => '1 ms', backoff_cap => '1 ms'",
    );
    let id = enqueue(&mut db, &queue, "{}");
    let mut paused = connect();
    let stale = claim_with_lease(&mut paused, &queue, "paused", "100 ms");

    // The paused worker sleeps past its lease: before anyone reclaims, it is already fenced.
    thread::sleep(Duration::from_millis(400));
    assert!(
        !renew(&mut paused, &stale),
        "an expired lease is never revived"
    );
    assert!(!complete(&mut paused, &stale));

    let fresh = claim_one(&mut db, &queue, "fresh");
    assert_eq!((fresh.job_id, fresh.attempt_no), (id, 2));
    assert_ne!(fresh.token, stale.token);
    // The stale worker comes back: every call is refused and changes nothing.
    let before = db
        .query_one("SELECT j::text FROM leaseq.jobs j WHERE id = $1", &[&id])
        .unwrap()
        .get::<_, String>(0);
    assert!(!renew(&mut paused, &stale));
    assert!(!complete(&mut paused, &stale));
    assert_eq!(fail(&mut paused, &stale), None);
    let after = db
        .query_one("SELECT j::text FROM leaseq.jobs j WHERE id = $1", &[&id])
        .unwrap()
        .get::<_, String>(0);
    assert_eq!(before, after, "stale calls left the job row as it was");

    assert!(renew(&mut db, &fresh));
    assert!(complete(&mut db, &fresh));
    assert_eq!(history(&mut db, id), vec!["1:lease_expired", "2:succeeded"]);
}

#[test]
fn retry_delays_follow_capped_exponential_backoff_with_full_jitter() {
    let mut db = connect();
    // base 1 s, cap 4 s: attempt 1 waits up to 1 s, attempt 2 up to 2 s, then 4 s at most.
    let queue = new_queue(
        &mut db,
        "backoff",
        "max_attempts => 10, backoff_base => '1 second', backoff_cap => '4 seconds'",
    );
    db.execute(
        "SELECT leaseq.queue_enqueue_batch($1, ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 60)))",
        &[&queue],
    )
    .unwrap();
    for (attempt, ceiling) in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 4.0)] {
        let jobs = claim(&mut db, &queue, "w", 100);
        assert_eq!(jobs.len(), 60);
        for job in &jobs {
            assert_eq!(job.attempt_no, attempt);
            assert_eq!(fail(&mut db, job).as_deref(), Some("pending"));
        }
        // The delay each job got: its run_at minus the end of the failed attempt (one clock read).
        let delays: Vec<f64> = db
            .query(
                "SELECT extract(epoch FROM j.run_at - a.ended_at)::float8
                   FROM leaseq.jobs j JOIN leaseq.attempts a ON a.job_id = j.id
                  WHERE j.queue = $1 AND a.attempt_no = $2",
                &[&queue, &attempt],
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(delays.len(), 60);
        assert!(
            delays.iter().all(|d| (0.0..=ceiling).contains(d)),
            "{delays:?} within [0, {ceiling}]"
        );
        let mut distinct = delays.clone();
        distinct.sort_by(f64::total_cmp);
        distinct.dedup();
        assert!(distinct.len() > 50, "jittered delays differ: {distinct:?}");
        assert!(
            delays.iter().any(|d| *d > ceiling / 2.0),
            "the range is used up to the ceiling"
        );
        db.execute(
            "UPDATE leaseq.jobs SET run_at = clock_timestamp() WHERE queue = $1",
            &[&queue],
        )
        .unwrap();
    }
}

#[test]
fn an_exhausted_budget_makes_the_job_dead_and_redrive_revives_it() {
    let mut db = connect();
    let queue = new_queue(
        &mut db,
        "budget",
        "max_attempts => 3, backoff_base => '1 ms', backoff_cap => '1 ms'",
    );
    let id = enqueue(&mut db, &queue, "{}");
    for attempt in 1..=3 {
        let job = claim_one(&mut db, &queue, "w");
        assert_eq!(job.attempt_no, attempt);
        let expected = if attempt < 3 { "pending" } else { "dead" };
        assert_eq!(fail(&mut db, &job).as_deref(), Some(expected));
    }
    assert!(
        claim(&mut db, &queue, "w", 10).is_empty(),
        "a dead job is never claimed"
    );
    let redriven: bool = db
        .query_one("SELECT leaseq.queue_redrive($1)", &[&id])
        .unwrap()
        .get(0);
    assert!(redriven);
    for attempt in 4..=6 {
        let job = claim_one(&mut db, &queue, "w");
        assert_eq!(job.attempt_no, attempt, "numbering continues after redrive");
        let expected = if attempt < 6 { "pending" } else { "dead" };
        assert_eq!(
            fail(&mut db, &job).as_deref(),
            Some(expected),
            "a full new budget"
        );
    }
}

#[test]
fn an_enqueue_commits_or_rolls_back_with_the_callers_transaction_and_notifies_at_commit() {
    let mut db = connect();
    let queue = new_queue(&mut db, "txn", "");
    db.batch_execute("CREATE TABLE IF NOT EXISTS public.test_orders (id bigint PRIMARY KEY)")
        .unwrap();
    let mut listener = connect();
    listener
        .batch_execute(&format!("LISTEN leaseq_{queue}"))
        .unwrap();
    let pending_notifications = |listener: &mut Client| {
        listener.batch_execute("SELECT 1").unwrap(); // let the client read what arrived
        listener
            .notifications()
            .iter()
            .count()
            .expect("read notifications")
    };

    let order_id = std::process::id() as i64;
    let mut tx = db.transaction().unwrap();
    tx.execute("INSERT INTO public.test_orders VALUES ($1)", &[&order_id])
        .unwrap();
    tx.query_one(
        "SELECT leaseq.queue_enqueue($1, '{\"order\": 1}')",
        &[&queue],
    )
    .unwrap();
    thread::sleep(Duration::from_millis(100));
    assert_eq!(
        pending_notifications(&mut listener),
        0,
        "nothing is announced before commit"
    );
    tx.rollback().unwrap();
    thread::sleep(Duration::from_millis(100));
    assert_eq!(
        pending_notifications(&mut listener),
        0,
        "a rolled-back enqueue announces nothing"
    );
    let jobs: i64 = db
        .query_one(
            "SELECT count(*) FROM leaseq.jobs WHERE queue = $1",
            &[&queue],
        )
        .unwrap()
        .get(0);
    let orders: i64 = db
        .query_one(
            "SELECT count(*) FROM public.test_orders WHERE id = $1",
            &[&order_id],
        )
        .unwrap()
        .get(0);
    assert_eq!((jobs, orders), (0, 0), "the job went with the business row");

    let mut tx = db.transaction().unwrap();
    tx.execute("INSERT INTO public.test_orders VALUES ($1)", &[&order_id])
        .unwrap();
    tx.query_one(
        "SELECT leaseq.queue_enqueue($1, '{\"order\": 1}')",
        &[&queue],
    )
    .unwrap();
    tx.query_one(
        "SELECT leaseq.queue_enqueue($1, '{\"order\": 2}')",
        &[&queue],
    )
    .unwrap();
    tx.commit().unwrap();
    let mut got = 0;
    for _ in 0..50 {
        got += pending_notifications(&mut listener);
        if got > 0 {
            break;
        }
        thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        got, 1,
        "one notification per committed transaction and queue"
    );
    assert_eq!(claim(&mut db, &queue, "w", 10).len(), 2);
    db.execute("DELETE FROM public.test_orders WHERE id = $1", &[&order_id])
        .unwrap();
}

#[test]
fn a_cancelled_running_job_fences_its_worker() {
    let mut db = connect();
    let queue = new_queue(&mut db, "cancel", "");
    let id = enqueue(&mut db, &queue, "{}");
    let mut worker = connect();
    let job = claim_one(&mut worker, &queue, "w");
    let cancelled: bool = db
        .query_one("SELECT leaseq.queue_cancel($1)", &[&id])
        .unwrap()
        .get(0);
    assert!(cancelled);
    assert!(
        !renew(&mut worker, &job),
        "the worker learns at its next renew"
    );
    assert!(!complete(&mut worker, &job));
    assert_eq!(fail(&mut worker, &job), None);
    assert_eq!(status(&mut db, id), "cancelled");
    assert_eq!(history(&mut db, id), vec!["1:cancelled"]);
}
