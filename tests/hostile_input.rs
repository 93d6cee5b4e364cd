//! A low-privilege role's calls, sized to hurt, against a backend whose address space is limited
//! as a small server's memory would be: each is refused with `22023` or `54000` before any work
//! proportional to its size, and the server goes on. A backend that aborts (Rust's answer to a
//! failed allocation) or is killed makes the postmaster end every connection: the witness,
//! opened before, proves that none was.
mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

/// The role the calls run as: a producer and nothing else.
const PRODUCER: &str = "hostile_input_producer";

/// Headroom given to the attacking backend over what it uses once connected.
const HEADROOM_BYTES: u64 = 512 << 20;

/// The producer role, created once per cluster (the tests run at once: the first creates it,
/// under a lock the other waits for).
fn producer(db: &mut Client) {
    db.batch_execute(&format!(
        "DO $$ BEGIN
             PERFORM pg_advisory_xact_lock(hashtext('{PRODUCER}'));
             IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{PRODUCER}') THEN
                 CREATE ROLE {PRODUCER};
             END IF;
         END $$;
         GRANT leaseq_producer TO {PRODUCER};"
    ))
    .expect("the producer role");
}

/// A field of /proc/PID/status (`VmSize`, `Uid`, `Gid`): its first number.
fn proc_status(pid: i32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .expect("the backend runs on this machine (the test cluster is local)");
    status
        .lines()
        .find_map(|line| line.strip_prefix(&format!("{field}:")))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// Limits backend `pid`'s address space to what it uses now plus `HEADROOM_BYTES`, as the
/// backend's own OS user (root drops to it first): any larger allocation fails.
fn limit_address_space(pid: i32) {
    let limit = proc_status(pid, "VmSize") * 1024 + HEADROOM_BYTES;
    let (uid, gid) = (proc_status(pid, "Uid"), proc_status(pid, "Gid"));
    let as_root = proc_status(std::process::id() as i32, "Uid") == 0;
    let prlimit = [
        "prlimit",
        "--pid",
        &pid.to_string(),
        &format!("--as={limit}"),
    ];
    let status = if as_root {
        Command::new("setpriv")
            .args(["--reuid", &uid.to_string(), "--regid", &gid.to_string()])
            .arg("--clear-groups")
            .args(prlimit)
            .status()
    } else {
        Command::new(prlimit[0]).args(&prlimit[1..]).status()
    }
    .expect("prlimit (util-linux) runs");
    assert!(status.success(), "prlimit on backend {pid}: {status}");
    let soft = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    assert!(
        soft.lines()
            .any(|l| l.starts_with("Max address space") && l.contains(&limit.to_string())),
        "the limit is in place:\n{soft}"
    );
}

/// The SQLSTATE of `sql`'s error, run on `db`, and how long it took; panics if it succeeded.
fn refused(db: &mut Client, sql: &str) -> (String, Duration) {
    let began = Instant::now();
    let error = db
        .batch_execute(sql)
        .expect_err("a call over the limits must be refused");
    let code = error
        .code()
        .unwrap_or_else(|| panic!("a refusal, not a lost session: {error}"))
        .code()
        .to_owned();
    (code, began.elapsed())
}

#[test]
fn a_producer_call_sized_to_exhaust_memory_is_refused_and_every_session_lives_on() {
    let mut admin = connect();
    producer(&mut admin);
    let queue = new_queue(&mut admin, "hostile", "");
    let parent = enqueue(&mut admin, &queue, "{}");
    let mut witness = connect();
    let witness_pid: i32 = witness
        .query_one("SELECT pg_backend_pid()", &[])
        .unwrap()
        .get(0);

    let mut attacker = connect();
    attacker
        .batch_execute(&format!("SET ROLE {PRODUCER}"))
        .unwrap();
    let pid: i32 = attacker
        .query_one("SELECT pg_backend_pid()", &[])
        .unwrap()
        .get(0);
    limit_address_space(pid);

    // Every call below names queue `q` and, for its parents, ids that may not exist: a call
    // over the limits is refused before it looks at either.
    let attacks = [
        // H-1: 200,000 payloads, each given the same 10,000 parents.
        (
            "a batch of 200,000 payloads",
            format!(
                "SELECT leaseq.queue_enqueue_batch('{queue}', array_fill('{{}}'::jsonb, ARRAY[200000]),
                     depends_on => ARRAY(SELECT generate_series(1, 10000)::bigint))"
            ),
        ),
        (
            "10,000 payloads × 10,000 parents",
            format!(
                "SELECT leaseq.queue_enqueue_batch('{queue}', array_fill('{{}}'::jsonb, ARRAY[10000]),
                     depends_on => ARRAY(SELECT {parent} + generate_series(0, 9999)::bigint))"
            ),
        ),
        // Arrays of NULLs are small on the server (a bitmap), not once copied element by element.
        (
            "a depends_on of 50 million NULLs",
            format!(
                "SELECT leaseq.queue_enqueue('{queue}', '{{}}',
                     depends_on => array_fill(NULL::bigint, ARRAY[50000000]))"
            ),
        ),
        (
            "a batch of 50 million NULL payloads",
            format!(
                "SELECT leaseq.queue_enqueue_batch('{queue}', array_fill(NULL::jsonb, ARRAY[50000000]))"
            ),
        ),
        // M-7: per-job parents as one document of 1,000 × 2,000 ids.
        (
            "depends_on_each of 2 million ids",
            format!(
                "SELECT leaseq.queue_enqueue_batch('{queue}', array_fill('{{}}'::jsonb, ARRAY[1000]),
                     depends_on_each => (SELECT jsonb_agg(ids) FROM generate_series(1, 1000),
                         LATERAL (SELECT jsonb_agg(i) AS ids FROM generate_series(1, 2000) AS i) AS each))"
            ),
        ),
        // M-7: a flow of 2,000 nodes, each depending on the 2,000 others' keys.
        (
            "a flow of 2,000 × 2,000 edges",
            format!(
                "SELECT leaseq.queue_flow((
                     SELECT jsonb_agg(jsonb_build_object('key', 'k' || n, 'queue', '{queue}',
                                'depends_on', keys))
                       FROM generate_series(1, 2000) AS n,
                            LATERAL (SELECT coalesce(jsonb_agg('k' || m), '[]') AS keys
                                       FROM generate_series(1, 2000) AS m WHERE m < n) AS before))"
            ),
        ),
    ];
    for (what, sql) in &attacks {
        let (code, took) = refused(&mut attacker, sql);
        assert!(
            code == "22023" || code == "54000",
            "{what}: refused with {code}, not as input over a limit"
        );
        assert!(
            took < Duration::from_secs(30),
            "{what}: refused after {took:?}"
        );
    }

    // Nothing of it was kept, and both sessions are the ones opened before.
    let jobs: i64 = admin
        .query_one(
            "SELECT count(*) FROM leaseq.jobs WHERE queue = $1",
            &[&queue],
        )
        .unwrap()
        .get(0);
    assert_eq!(jobs, 1, "only the parent");
    let still: i32 = witness
        .query_one("SELECT pg_backend_pid()", &[])
        .expect("the witness's session outlived every call")
        .get(0);
    assert_eq!(still, witness_pid);
    let still: i32 = attacker
        .query_one("SELECT pg_backend_pid()", &[])
        .expect("the attacker's own session outlived its calls")
        .get(0);
    assert_eq!(still, pid);
}

#[test]
fn a_flow_at_its_limits_is_cancelled_at_once() {
    let mut db = connect();
    producer(&mut db);
    let queue = new_queue(&mut db, "hostile_flow", "");
    db.batch_execute(&format!("SET ROLE {PRODUCER}")).unwrap();
    // 10,000 nodes, each on the 10 before it: 99,945 edges, about a second of work here.
    let flow = format!(
        "SELECT count(*) FROM leaseq.queue_flow((
             SELECT jsonb_agg(jsonb_build_object('key', 'k' || n, 'queue', '{queue}',
                        'depends_on', (SELECT coalesce(jsonb_agg('k' || m), '[]')
                                         FROM generate_series(greatest(1, n - 10), n - 1) AS m)))
               FROM generate_series(1, 10000) AS n))"
    );
    db.batch_execute("SET statement_timeout = '100ms'").unwrap();
    let (code, took) = refused(&mut db, &flow);
    assert_eq!(code, "57014", "cancelled by statement_timeout");
    assert!(took < Duration::from_secs(1), "cancelled after {took:?}");
    db.batch_execute("RESET statement_timeout; RESET ROLE")
        .unwrap();
    let jobs: i64 = db
        .query_one(
            "SELECT count(*) FROM leaseq.jobs WHERE queue = $1",
            &[&queue],
        )
        .unwrap()
        .get(0);
    assert_eq!(jobs, 0, "nothing of the flow was kept");
}
