//! Access: who may call what, on which queue — the check every function makes before its
//! statements. The grants themselves are given and taken by `admin::grant`.
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
//! queue, and its refusal names the job, never that queue (whose name the caller may not know). Grants are read once per backend and again after any change to them (the table's
//! trigger sends the invalidation), so a database without grants pays no statement for them.
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use pgrx::prelude::*;

use crate::core::connect::{self, JOB_PATH, WHOLE_QUEUE};
use crate::core::datum::QueuePrivilege;
use crate::core::errors;
use crate::core::release;
use crate::core::schema;
use crate::core::spi::{self, INT8_ARRAY, Statement};

pub(crate) const LOAD: Statement = Statement {
    name: "access.load",
    sql: "SELECT granted.queue, granted.role::oid, granted.privilege::text
            FROM leaseq.queue_grants AS granted",
    params: &[],
};

/// The queues of the jobs `$1`, each with its first job of them (the one a refusal names).
pub(crate) const QUEUES_OF_JOBS: Statement = Statement {
    name: "access.queues_of_jobs",
    sql: "SELECT job.queue, min(job.id) FROM leaseq.jobs AS job
           WHERE job.id = ANY ($1)
           GROUP BY job.queue
           ORDER BY 2",
    params: &[INT8_ARRAY],
};

type Grants = HashMap<String, Vec<(pg_sys::Oid, QueuePrivilege)>>;

thread_local! {
    // Per backend: the queues that have grants, with them. Forgotten on a relcache invalidation
    // of leaseq.queue_grants (its trigger sends one), whose OID is noted when it is read.
    static GRANTS: RefCell<Option<Rc<Grants>>> = const { RefCell::new(None) };
    static GRANTS_TABLE: Cell<pg_sys::Oid> = const { Cell::new(pg_sys::InvalidOid) };
}

fn grants() -> Rc<Grants> {
    // A grant or revoke committed before this call counts, whatever the caller's transaction
    // has seen: its invalidation is taken in now (a flag read when there is none), and the
    // grants are read again under a snapshot taken now (`spi::run_latest`).
    // SAFETY: processes pending catalog invalidations, as any lock acquisition does.
    unsafe { pg_sys::AcceptInvalidationMessages() };
    if let Some(known) = GRANTS.with_borrow(|g| g.clone()) {
        return known;
    }
    let mut read = Grants::new();
    GRANTS_TABLE.set(schema::table_oid(c"queue_grants"));
    connect::connect(&WHOLE_QUEUE, |client| {
        // 0.1.0's schema has no per-queue grants (served through 0.3.x: docs/design.md).
        if !release::current(client).has_0_2_0_tables() {
            return;
        }
        for (queue, role, privilege) in spi::run_latest(client, &LOAD, &[]).map(|row| {
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
    unsafe extern "C-unwind" fn forget(_arg: pg_sys::Datum, relation: pg_sys::Oid) {
        if schema::concerns(relation, GRANTS_TABLE.get()) {
            GRANTS.set(None);
        }
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

/// Whether the current user holds the group role whose functions act with `privilege`
/// (sql/privileges.sql: produce — leaseq_producer, work — leaseq_worker, observe —
/// leaseq_observer, admin — leaseq_admin), directly or through membership; a superuser holds
/// them all.
pub fn holds_group_role(privilege: QueuePrivilege) -> bool {
    let role = match privilege {
        QueuePrivilege::Produce => c"leaseq_producer",
        QueuePrivilege::Work => c"leaseq_worker",
        QueuePrivilege::Observe => c"leaseq_observer",
        QueuePrivilege::Admin => c"leaseq_admin",
    };
    // SAFETY: a syscache lookup by name (missing_ok: InvalidOid, which nobody has the privileges
    // of, but a superuser), then PostgreSQL's own membership cache.
    unsafe {
        let role = pg_sys::get_role_oid(role.as_ptr(), true);
        pg_sys::has_privs_of_role(current_user(), role)
    }
}

/// The queues the current user may not act on with `needed`: of those with grants, the ones
/// none of which covers it (a queue without grants is open). Read from the grants alone, so a
/// listing over every queue can leave them out in its statement.
pub fn hidden_queues(needed: QueuePrivilege) -> Vec<String> {
    grants()
        .keys()
        .filter(|queue| !allowed(queue, needed))
        .cloned()
        .collect()
}

/// Whether the current user may see `queue`'s jobs from a related job (parents, children, a
/// flow): it may observe or work the queue.
pub fn sees_related(queue: &str) -> bool {
    allowed(queue, QueuePrivilege::Observe) || allowed(queue, QueuePrivilege::Work)
}

/// The queues whose jobs the current user may not see from a related job (`sees_related`).
pub fn hidden_related() -> Vec<String> {
    grants()
        .keys()
        .filter(|queue| !sees_related(queue))
        .cloned()
        .collect()
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
    require_jobs_any(function, job_ids, &[needed]);
}

/// `require_jobs`, passing when the caller holds any one of `needed` on each job's queue; the
/// refusal names the first privilege and the job, not its queue (`errors::job_not_visible`).
pub fn require_jobs_any(function: &str, job_ids: &[i64], needed: &[QueuePrivilege]) {
    if job_ids.is_empty() || grants().is_empty() {
        return;
    }
    let queues = connect::connect(&JOB_PATH, |client| {
        spi::run(client, &QUEUES_OF_JOBS, &[job_ids.to_vec().into()])
            .map(|row| (row.required::<String>(1), row.required::<i64>(2)))
    });
    for (queue, job_id) in &queues {
        if !needed.iter().any(|&privilege| allowed(queue, privilege)) {
            errors::job_not_visible(
                function,
                &role_name(current_user()),
                *job_id,
                needed[0].label(),
            );
        }
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
    use crate::core::datum::QueuePrivilege::*;

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
