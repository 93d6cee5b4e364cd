//! M-9: PostgreSQL roles are cluster-wide, and so are leaseq's four group roles. A role made a
//! `leaseq_observer` for tenant A's database may connect to tenant B's (`CONNECT` is `PUBLIC`'s
//! by default) and read B's queues there; a `leaseq_admin` member may cancel B's jobs. leaseq
//! cannot tell "granted for A" from "granted for B": the membership is one row of
//! `pg_auth_members`, and no database is named in it. These tests pin the finding, then the two
//! mitigations docs/security.md gives ("Cluster-wide roles and other databases"): `CONNECT`
//! taken from `PUBLIC`, and per-queue grants, with what each leaves open.
mod common;

use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use postgres::Config;
use postgres::error::SqlState;

/// Two tenants' databases with leaseq, the roles the tests connect as, and one job of tenant B.
/// Dropping it drops the databases (ending their sessions) and the roles, whether the test
/// passed or not.
struct Tenants {
    config: Config,
    /// Tenant A's database: the one `alice` and `a_admin` were made for.
    a_db: String,
    /// Tenant B's database, with `b_queue` and `b_job` in it.
    b_db: String,
    /// Tenant A's observer: `GRANT leaseq_observer TO alice`, meant for `a_db`.
    alice: String,
    /// Tenant A's administrator: `GRANT leaseq_admin TO a_admin`, meant for `a_db`.
    a_admin: String,
    /// Tenant B's own observer, named for its tenant (mitigation 3).
    b_ops: String,
    b_queue: String,
    b_job: i64,
}

impl Tenants {
    /// Creates both databases with leaseq and the three `LOGIN` roles. The cluster's `pg_hba`
    /// trusts 127.0.0.1 (scripts/lib.sh `start_cluster`), so a role connects without a password.
    fn new() -> Tenants {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let tag = format!(
            "xdb_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let url = std::env::var(URL_VAR)
            .unwrap_or_else(|_| panic!("{URL_VAR} must name a database with leaseq installed"));
        let mut tenants = Tenants {
            config: Config::from_str(&url).expect("a connection URL"),
            a_db: format!("{tag}_tenant_a"),
            b_db: format!("{tag}_tenant_b"),
            alice: format!("{tag}_alice"),
            a_admin: format!("{tag}_tenant_a_admin"),
            b_ops: format!("{tag}_tenant_b_ops"),
            b_queue: String::new(),
            b_job: 0,
        };
        let mut superuser = connect();
        for db in [&tenants.a_db, &tenants.b_db] {
            // One statement per call: CREATE DATABASE refuses to run in a transaction block.
            superuser
                .batch_execute(&format!("CREATE DATABASE {db}"))
                .expect("create a tenant's database");
            tenants
                .superuser_in(db)
                .batch_execute("CREATE EXTENSION leaseq")
                .expect("leaseq in a tenant's database; its group roles exist already");
        }
        superuser
            .batch_execute(&format!(
                "CREATE ROLE {alice} LOGIN;   GRANT leaseq_observer TO {alice};
                 CREATE ROLE {a_admin} LOGIN; GRANT leaseq_admin TO {a_admin};
                 CREATE ROLE {b_ops} LOGIN;   GRANT leaseq_observer TO {b_ops};",
                alice = tenants.alice,
                a_admin = tenants.a_admin,
                b_ops = tenants.b_ops,
            ))
            .expect("the tenants' roles");
        let mut b = tenants.superuser_in(&tenants.b_db);
        tenants.b_queue = new_queue(&mut b, "billing", "");
        tenants.b_job = enqueue(&mut b, &tenants.b_queue, r#"{"card": "tenant B's secret"}"#);
        tenants
    }

    /// A session in `db` as `role`, or the server's refusal.
    fn connect_as(&self, role: &str, db: &str) -> Result<Client, postgres::Error> {
        self.config.clone().user(role).dbname(db).connect(NoTls)
    }

    /// A session in `db` as the test's own (superuser) role.
    fn superuser_in(&self, db: &str) -> Client {
        self.config
            .clone()
            .dbname(db)
            .connect(NoTls)
            .expect("connect as the test's role")
    }

    /// In `b_db`, as the superuser.
    fn in_b(&self, sql: &str) {
        self.superuser_in(&self.b_db)
            .batch_execute(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
}

impl Drop for Tenants {
    fn drop(&mut self) {
        // Databases first: WITH (FORCE) ends the sessions a failed test left open, and takes the
        // CONNECT grants that would keep a role from being dropped.
        let statements = [&self.a_db, &self.b_db]
            .map(|db| format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"))
            .into_iter()
            .chain(
                [&self.alice, &self.a_admin, &self.b_ops]
                    .map(|role| format!("DROP ROLE IF EXISTS {role}")),
            );
        let mut failures = Vec::new();
        match Client::connect(&std::env::var(URL_VAR).unwrap_or_default(), NoTls) {
            Ok(mut superuser) => {
                for sql in statements {
                    if let Err(e) = superuser.batch_execute(&sql) {
                        failures.push(format!("{sql}: {e}"));
                    }
                }
            }
            Err(e) => failures.push(format!("connect to clean up: {e}")),
        }
        if failures.is_empty() {
            return;
        }
        // A second panic while the test's own unwinds would abort and hide the first.
        if std::thread::panicking() {
            eprintln!("cleanup failed: {failures:?}");
        } else {
            panic!("cleanup failed: {failures:?}");
        }
    }
}

/// The SQLSTATE of `result`'s error; panics if it succeeded or the session was lost.
fn sqlstate<T>(result: Result<T, postgres::Error>, what: &str) -> SqlState {
    match result {
        Ok(_) => panic!("{what}: allowed, expected a refusal"),
        Err(e) => e
            .code()
            .unwrap_or_else(|| panic!("{what}: not a refusal from the server: {e}"))
            .clone(),
    }
}

/// The ids `queue_jobs(queue)` shows `db`'s session.
fn job_ids(db: &mut Client, queue: &str) -> Result<Vec<i64>, postgres::Error> {
    let rows = db.query("SELECT job_id FROM leaseq.queue_jobs($1)", &[&queue])?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// The queues `queue_stats()` lists for `db`'s session.
fn stats_queues(db: &mut Client) -> Vec<String> {
    db.query("SELECT queue FROM leaseq.queue_stats()", &[])
        .expect("queue_stats")
        .iter()
        .map(|r| r.get(0))
        .collect()
}

#[test]
fn a_group_role_granted_for_one_database_acts_in_every_database_with_leaseq() {
    let tenants = Tenants::new();

    let mut alice = tenants
        .connect_as(&tenants.alice, &tenants.b_db)
        .expect("CONNECT is PUBLIC's by default");
    assert_eq!(
        job_ids(&mut alice, &tenants.b_queue).expect("tenant A's observer reads B's queue"),
        vec![tenants.b_job]
    );
    assert!(stats_queues(&mut alice).contains(&tenants.b_queue));
    let payload: String = alice
        .query_one(
            "SELECT payload->>'card' FROM leaseq.queue_job($1)",
            &[&tenants.b_job],
        )
        .expect("queue_job")
        .get(0);
    assert_eq!(payload, "tenant B's secret");

    let mut a_admin = tenants
        .connect_as(&tenants.a_admin, &tenants.b_db)
        .expect("CONNECT is PUBLIC's by default");
    let cancelled: bool = a_admin
        .query_one("SELECT leaseq.queue_cancel($1)", &[&tenants.b_job])
        .expect("tenant A's admin cancels B's job")
        .get(0);
    assert!(cancelled);
}

#[test]
fn connect_revoked_from_public_keeps_other_tenants_roles_out_of_a_database() {
    let tenants = Tenants::new();
    tenants.in_b(&format!(
        "REVOKE CONNECT ON DATABASE {b} FROM PUBLIC;
         GRANT CONNECT ON DATABASE {b} TO {b_ops};",
        b = tenants.b_db,
        b_ops = tenants.b_ops,
    ));

    // The refusal comes at connection time, before any leaseq function could be called.
    for role in [&tenants.alice, &tenants.a_admin] {
        let refused = tenants.connect_as(role, &tenants.b_db);
        assert_eq!(
            sqlstate(refused, &format!("{role} connects to tenant B's database")),
            SqlState::INSUFFICIENT_PRIVILEGE
        );
        tenants
            .connect_as(role, &tenants.a_db)
            .expect("its own tenant's database still takes it");
    }
    let mut b_ops = tenants
        .connect_as(&tenants.b_ops, &tenants.b_db)
        .expect("tenant B's role holds CONNECT");
    assert_eq!(
        job_ids(&mut b_ops, &tenants.b_queue).expect("tenant B's observer reads its queue"),
        vec![tenants.b_job]
    );
}

#[test]
fn a_queue_with_grants_refuses_a_group_member_it_does_not_name() {
    let tenants = Tenants::new();
    tenants.in_b(&format!(
        "SELECT leaseq.queue_grant('{queue}', '{b_ops}', 'observe')",
        queue = tenants.b_queue,
        b_ops = tenants.b_ops,
    ));

    let mut alice = tenants
        .connect_as(&tenants.alice, &tenants.b_db)
        .expect("CONNECT is still PUBLIC's");
    assert_eq!(
        sqlstate(
            job_ids(&mut alice, &tenants.b_queue),
            "alice's queue_jobs on B's granted queue"
        ),
        SqlState::INSUFFICIENT_PRIVILEGE
    );
    assert_eq!(
        sqlstate(
            alice.query("SELECT * FROM leaseq.queue_job($1)", &[&tenants.b_job]),
            "alice's queue_job on a job of B's granted queue"
        ),
        SqlState::INSUFFICIENT_PRIVILEGE
    );
    assert!(!stats_queues(&mut alice).contains(&tenants.b_queue));

    let mut b_ops = tenants
        .connect_as(&tenants.b_ops, &tenants.b_db)
        .expect("tenant B's role");
    assert_eq!(
        job_ids(&mut b_ops, &tenants.b_queue).expect("the named role reads it"),
        vec![tenants.b_job]
    );
    assert!(stats_queues(&mut b_ops).contains(&tenants.b_queue));
}

/// What grants leave open, and why docs/security.md puts CONNECT first: a queue is narrowed
/// only once it has a grant, and `leaseq_admin`'s members pass every grant.
#[test]
fn grants_narrow_neither_a_queue_without_grants_nor_leaseq_admin() {
    let tenants = Tenants::new();
    tenants.in_b(&format!(
        "SELECT leaseq.queue_grant('{queue}', '{b_ops}', 'observe')",
        queue = tenants.b_queue,
        b_ops = tenants.b_ops,
    ));
    let mut b = tenants.superuser_in(&tenants.b_db);
    let open_queue = new_queue(&mut b, "ungranted", "");
    let open_job = enqueue(&mut b, &open_queue, "{}");

    let mut alice = tenants
        .connect_as(&tenants.alice, &tenants.b_db)
        .expect("CONNECT is still PUBLIC's");
    assert_eq!(
        job_ids(&mut alice, &open_queue).expect("a queue without grants is open to the group"),
        vec![open_job]
    );

    let mut a_admin = tenants
        .connect_as(&tenants.a_admin, &tenants.b_db)
        .expect("CONNECT is still PUBLIC's");
    let cancelled: bool = a_admin
        .query_one("SELECT leaseq.queue_cancel($1)", &[&tenants.b_job])
        .expect("leaseq_admin passes the queue's grants")
        .get(0);
    assert!(cancelled);
}
