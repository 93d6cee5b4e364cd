//! Per-queue grants: `queue_grant`, `queue_revoke`, `queue_grants` (leaseq_admin's). What they
//! mean and how every function checks them: `core::access`.
use pgrx::prelude::*;

use crate::core::access;
use crate::core::args;
use crate::core::connect::{self, JOB_PATH, WHOLE_QUEUE};
use crate::core::datum::{QueuePrivilege, Role};
use crate::core::errors;
use crate::core::spi::{self, OID, Statement, TEXT};
use crate::lifecycle::queue;

pub(crate) const GRANT: Statement = Statement {
    name: "queue_grant",
    sql: "INSERT INTO leaseq.queue_grants AS granted (queue, role, privilege)
          VALUES ($1, $2::regrole, $3::leaseq.queue_privilege)
          ON CONFLICT (queue, role, privilege) DO NOTHING
          RETURNING true",
    params: &[TEXT, OID, TEXT],
};

pub(crate) const REVOKE: Statement = Statement {
    name: "queue_revoke",
    sql: "DELETE FROM leaseq.queue_grants AS granted
           WHERE granted.queue = $1
             AND granted.role = $2::regrole
             AND granted.privilege = $3::leaseq.queue_privilege
          RETURNING true",
    params: &[TEXT, OID, TEXT],
};

pub(crate) const LIST: Statement = Statement {
    name: "queue_grants",
    sql: "SELECT granted.queue, granted.role::oid, granted.privilege::text,
                 granted.granted_at
            FROM leaseq.queue_grants AS granted
           ORDER BY granted.queue, granted.role::text, granted.privilege",
    params: &[],
};

/// Gives `role` (and its members) `privilege` on `queue`: `produce`, `work` (covers produce),
/// `observe` or `admin` (covers all). From its first grant on, a queue is closed to every role
/// without one, but `leaseq_admin`'s members and superusers. Returns false when `role` held it.
///
/// Errors: `22004` NULL argument, `22023` invalid name or privilege, `42704` unknown queue,
/// `42501` the caller may not administer the queue.
#[pg_extern]
pub fn queue_grant(queue: Option<&str>, role: Option<Role>, privilege: Option<&str>) -> bool {
    const F: &str = "queue_grant";
    let (queue, role, privilege) = grant_args(F, queue, role, privilege);
    access::require_queue(F, queue, QueuePrivilege::Admin);
    connect::connect(&JOB_PATH, |client| {
        queue::load(client, F, queue);
        !spi::run(
            client,
            &GRANT,
            &[queue.into(), role.into(), privilege.into()],
        )
        .is_empty()
    })
}

/// Takes back a grant of `queue_grant`. Returns false when `role` did not hold it. Revoking a
/// queue's last grant opens it again to every role allowed the functions.
///
/// Errors: as `queue_grant`.
#[pg_extern]
pub fn queue_revoke(queue: Option<&str>, role: Option<Role>, privilege: Option<&str>) -> bool {
    const F: &str = "queue_revoke";
    let (queue, role, privilege) = grant_args(F, queue, role, privilege);
    access::require_queue(F, queue, QueuePrivilege::Admin);
    connect::connect(&JOB_PATH, |client| {
        queue::load(client, F, queue);
        !spi::run(
            client,
            &REVOKE,
            &[queue.into(), role.into(), privilege.into()],
        )
        .is_empty()
    })
}

/// Every per-queue grant. A role dropped since it was granted shows as its OID, and its grant
/// allows nothing.
#[pg_extern]
pub fn queue_grants() -> TableIterator<
    'static,
    (
        name!(queue, String),
        name!(role, Role),
        name!(privilege, QueuePrivilege),
        name!(granted_at, TimestampWithTimeZone),
    ),
> {
    let rows = connect::connect(&WHOLE_QUEUE, |client| {
        spi::run(client, &LIST, &[]).map(|row| {
            let privilege: String = row.required(3);
            (
                row.required(1),
                Role(row.required(2)),
                QueuePrivilege::from_label(&privilege).expect("a queue_privilege label"),
                row.required(4),
            )
        })
    });
    TableIterator::new(rows)
}

/// What the caller may do on each queue: a privilege holds when the caller holds its group
/// role (`leaseq_producer`, `leaseq_worker`, `leaseq_observer`, `leaseq_admin`: who may call
/// the functions) and the queue's grants allow it (`queue_grant`). Queues on which it may do
/// nothing are left out. A console shows only the actions this allows; the functions check
/// the same on every call.
#[pg_extern]
pub fn queue_privileges() -> TableIterator<
    'static,
    (
        name!(queue, String),
        name!(produce, bool),
        name!(work, bool),
        name!(observe, bool),
        name!(admin, bool),
    ),
> {
    use QueuePrivilege::*;
    let all = [Produce, Work, Observe, Admin];
    let held = all.map(access::holds_group_role);
    let names = connect::connect(&JOB_PATH, |client| {
        spi::run(client, &queue::NAMES, &[]).map(|row| row.required::<String>(1))
    });
    let rows = names.into_iter().filter_map(|name| {
        let may: [bool; 4] = std::array::from_fn(|i| held[i] && access::allowed(&name, all[i]));
        may.iter()
            .any(|&m| m)
            .then(|| (name, may[0], may[1], may[2], may[3]))
    });
    TableIterator::new(rows.collect::<Vec<_>>())
}

/// The checked arguments of `queue_grant` and `queue_revoke`.
fn grant_args<'a>(
    function: &str,
    queue: Option<&'a str>,
    role: Option<Role>,
    privilege: Option<&str>,
) -> (&'a str, pg_sys::Oid, &'static str) {
    let queue = args::queue_name(function, queue);
    let role = args::required(function, "role", role);
    let privilege = args::required(function, "privilege", privilege);
    let privilege = QueuePrivilege::from_label(privilege).unwrap_or_else(|| {
        errors::invalid_argument(
            function,
            "privilege",
            "must be one of produce, work, observe, admin",
        )
    });
    (queue, role.0, privilege.label())
}

#[cfg(test)]
mod reference_tests {
    use std::collections::{BTreeMap, BTreeSet};

    /// The routines `sql/privileges.sql` grants to each group role directly: each `GRANT
    /// EXECUTE ON FUNCTION leaseq.f(…), … TO role, …;` (or `ON PROCEDURE`).
    fn granted(privileges: &str) -> BTreeMap<String, BTreeSet<String>> {
        let mut granted = BTreeMap::<String, BTreeSet<String>>::new();
        for grant in privileges.split("GRANT EXECUTE ON ").skip(1) {
            let grant = grant.split_once(';').expect("a GRANT ends").0;
            let (functions, roles) = grant.rsplit_once(" TO ").expect("a grantee");
            // `leaseq.name(`: a function (not a type such as `leaseq.job_status` in a signature).
            let names = functions.split("leaseq.").skip(1).filter_map(|f| {
                let name = f
                    .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .next()?;
                f[name.len()..].starts_with('(').then(|| name.to_string())
            });
            let names: BTreeSet<String> = names.collect();
            for role in roles.split(',') {
                granted
                    .entry(role.trim().to_string())
                    .or_default()
                    .extend(names.iter().cloned());
            }
        }
        granted
    }

    /// The functions each role's row of docs/reference.md's Permissions table names (what it
    /// gets through another group, "a producer's functions", is prose, not names).
    fn documented(reference: &str) -> BTreeMap<String, BTreeSet<String>> {
        let table = reference
            .split("| role | may call |")
            .nth(1)
            .expect("docs/reference.md has the Permissions table")
            .split("\n\n")
            .next()
            .unwrap();
        table
            .lines()
            .filter_map(|line| line.strip_prefix("| `"))
            .map(|row| {
                let (role, calls) = row.split_once("` | ").expect("two cells");
                let names = calls
                    .split('`')
                    .skip(1)
                    .step_by(2)
                    .map(str::to_string)
                    .collect();
                (role.to_string(), names)
            })
            .collect()
    }

    #[test]
    fn the_reference_permissions_table_lists_exactly_what_privileges_sql_grants() {
        let granted = granted(include_str!("../../sql/privileges.sql"));
        assert_eq!(granted.len(), 4, "four group roles: {granted:?}");
        assert!(granted.values().map(BTreeSet::len).sum::<usize>() >= 26);
        assert_eq!(
            documented(include_str!("../../docs/reference.md")),
            granted,
            "docs/reference.md Permissions table vs sql/privileges.sql"
        );
    }
}
