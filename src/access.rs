//! Access: who may call what, on which queue.
//!
//! Two layers. PostgreSQL's `EXECUTE` grants decide who may call a function at all: four group
//! roles, never `PUBLIC` (sql/privileges.sql). Per-queue grants narrow that for the queues that
//! have any: a queue with no grant is open to every role allowed the function (one team, one
//! database); once it has one, a call needs a grant covering it — `work` covers `produce`,
//! `admin` covers everything — held by the caller directly or through membership, unless the
//! caller has `leaseq_admin`'s rights or is a superuser.
//!
//! Every check runs before the function's own statements, with the caller's identity (`spi`
//! switches to the owner's only around those statements): a refusal is `42501`, naming the queue
//! and the privilege, and changes nothing. A function that names jobs by id checks each job's
//! queue. Grants are read once per backend and again after any change to them (the table's
//! trigger sends the invalidation), so a database without grants pays no statement for them.
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use pgrx::prelude::*;

use crate::args;
use crate::datum::{QueuePrivilege, Role};
use crate::errors;
use crate::queue;
use crate::spi::{self, INT8_ARRAY, JOB_PATH, OID, Statement, TEXT, WHOLE_QUEUE};

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

pub(crate) const LOAD: Statement = Statement {
    name: "access.load",
    sql: "SELECT granted.queue, granted.role::oid, granted.privilege::text
            FROM leaseq.queue_grants AS granted",
    params: &[],
};

pub(crate) const QUEUES_OF_JOBS: Statement = Statement {
    name: "access.queues_of_jobs",
    sql: "SELECT DISTINCT job.queue FROM leaseq.jobs AS job WHERE job.id = ANY ($1)",
    params: &[INT8_ARRAY],
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
    require_queue(F, queue, QueuePrivilege::Admin);
    spi::connect(&JOB_PATH, |client| {
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
    require_queue(F, queue, QueuePrivilege::Admin);
    spi::connect(&JOB_PATH, |client| {
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
    let rows = spi::connect(&WHOLE_QUEUE, |client| {
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

type Grants = HashMap<String, Vec<(pg_sys::Oid, QueuePrivilege)>>;

thread_local! {
    // Per backend: the queues that have grants, with them. Forgotten on every relcache
    // invalidation (the trigger sends one for leaseq.queue_grants).
    static GRANTS: RefCell<Option<Rc<Grants>>> = const { RefCell::new(None) };
}

fn grants() -> Rc<Grants> {
    if let Some(known) = GRANTS.with_borrow(|g| g.clone()) {
        return known;
    }
    let mut read = Grants::new();
    spi::connect(&WHOLE_QUEUE, |client| {
        if !crate::schema::has_queue_grants(client) {
            return;
        }
        for (queue, role, privilege) in spi::run(client, &LOAD, &[]).map(|row| {
            let privilege: String = row.required(3);
            (
                row.required::<String>(1),
                row.required::<pg_sys::Oid>(2),
                QueuePrivilege::from_label(&privilege).expect("a queue_privilege label"),
            )
        }) {
            read.entry(queue).or_default().push((role, privilege));
        }
    });
    let read = Rc::new(read);
    GRANTS.set(Some(read.clone()));
    read
}

/// Registers the invalidation that makes `grants` read the table again.
pub fn register() {
    #[pg_guard]
    unsafe extern "C-unwind" fn forget(_arg: pg_sys::Datum, _relation: pg_sys::Oid) {
        GRANTS.set(None);
    }
    // SAFETY: called once per backend, from _PG_init; the callback only clears a cell.
    unsafe { pg_sys::CacheRegisterRelcacheCallback(Some(forget), pg_sys::Datum::from(0)) };
}

/// Whether `granted` allows a call that needs `needed`.
fn covers(granted: QueuePrivilege, needed: QueuePrivilege) -> bool {
    use QueuePrivilege::*;
    granted == needed || granted == Admin || (granted == Work && needed == Produce)
}

/// Whether the current user may act with `needed` on `queue`.
pub fn allowed(queue: &str, needed: QueuePrivilege) -> bool {
    let grants = grants();
    let Some(held) = grants.get(queue) else {
        return true;
    };
    // SAFETY: reads the current user; has_privs_of_role follows membership (and is true for a
    // superuser), from PostgreSQL's own cache.
    unsafe {
        let caller = pg_sys::GetUserId();
        held.iter().any(|&(role, granted)| {
            covers(granted, needed) && pg_sys::has_privs_of_role(caller, role)
        }) || pg_sys::has_privs_of_role(caller, admin_role())
    }
}

/// Refuses (`42501`) unless the current user may act with `needed` on `queue`.
pub fn require_queue(function: &str, queue: &str, needed: QueuePrivilege) {
    if !allowed(queue, needed) {
        errors::not_permitted(function, &role_name(current_user()), queue, needed.label());
    }
}

/// `require_queue` for the queue of each of `job_ids` (jobs that do not exist are left to the
/// function). Reads the jobs only when some queue has grants.
pub fn require_jobs(function: &str, job_ids: &[i64], needed: QueuePrivilege) {
    if grants().is_empty() {
        return;
    }
    let queues = spi::connect(&JOB_PATH, |client| {
        spi::run(client, &QUEUES_OF_JOBS, &[job_ids.to_vec().into()])
            .map(|row| row.required::<String>(1))
    });
    for queue in &queues {
        require_queue(function, queue, needed);
    }
}

fn current_user() -> pg_sys::Oid {
    // SAFETY: reads the current user.
    unsafe { pg_sys::GetUserId() }
}

/// `leaseq_admin`, or no role when it is gone (then nobody is an admin but superusers).
fn admin_role() -> pg_sys::Oid {
    // SAFETY: a syscache lookup by name; missing_ok.
    unsafe { pg_sys::get_role_oid(c"leaseq_admin".as_ptr(), true) }
}

/// A role's name, or its OID in digits when it no longer exists.
fn role_name(role: pg_sys::Oid) -> String {
    // SAFETY: noerr: NULL for an unknown role; the name is copied out at once.
    unsafe {
        let name = pg_sys::GetUserNameFromId(role, true);
        if name.is_null() {
            role.to_u32().to_string()
        } else {
            std::ffi::CStr::from_ptr(name)
                .to_string_lossy()
                .into_owned()
        }
    }
}

#[cfg(test)]
mod unit_tests {
    use super::covers;
    use crate::datum::QueuePrivilege::*;

    #[test]
    fn work_covers_produce_and_admin_covers_everything() {
        let all = [Produce, Work, Observe, Admin];
        let covered =
            |granted| -> Vec<_> { all.into_iter().filter(|&n| covers(granted, n)).collect() };
        assert_eq!(covered(Produce), vec![Produce]);
        assert_eq!(covered(Work), vec![Produce, Work]);
        assert_eq!(covered(Observe), vec![Observe]);
        assert_eq!(covered(Admin), all.to_vec());
    }
}
