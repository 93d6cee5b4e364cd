//! The GET pages, one module each. Every page reads what the role may do once
//! (`queue_privileges()`) and shows a button only where the database would allow it; the
//! actions themselves never look (see `actions`).
pub mod enqueue;
pub mod groups;
pub mod job;
pub mod jobs;
pub mod overview;
pub mod queues;
pub mod schedules;
pub mod workers;

use super::app::UiError;
use super::db::Db;

const PRIVILEGES: &str = "SELECT queue, produce, work, observe, admin
                            FROM leaseq.queue_privileges()
                           ORDER BY queue";
/// `queue_create` has no queue to ask `queue_privileges()` about: whether the role may execute
/// it at all (it is leaseq_admin's).
const MAY_CREATE: &str = "SELECT coalesce(pg_catalog.bool_or(
                                              pg_catalog.has_function_privilege(p.oid, 'EXECUTE')),
                                          false)
                            FROM pg_catalog.pg_proc AS p
                           WHERE p.proname OPERATOR(pg_catalog.=) 'queue_create'
                             AND p.pronamespace OPERATOR(pg_catalog.=)
                                 'leaseq'::pg_catalog.regnamespace";

/// Every status of `leaseq.job_status`, in the enum's order: the pages list the database's
/// statuses, so one added to the enum later is offered without a change here.
const STATUSES: &str =
    "SELECT pg_catalog.unnest(pg_catalog.enum_range(NULL::leaseq.job_status))::text";

pub async fn statuses(db: &Db) -> Result<Vec<String>, UiError> {
    let rows = db.query(STATUSES, &[]).await?;
    Ok(rows
        .iter()
        .map(|r| r.try_get(0))
        .collect::<Result<_, tokio_postgres::Error>>()?)
}

/// One queue's row of `queue_privileges()`.
pub struct QueuePrivileges {
    pub queue: String,
    pub produce: bool,
    pub observe: bool,
    pub admin: bool,
}

/// What the role may do, per queue, as the database says.
#[derive(Default)]
pub struct Privileges {
    pub queues: Vec<QueuePrivileges>,
    pub may_create: bool,
}

impl Privileges {
    pub async fn load(db: &Db) -> Result<Privileges, UiError> {
        let rows = db.query(PRIVILEGES, &[]).await?;
        let queues = rows
            .iter()
            .map(|r| {
                Ok(QueuePrivileges {
                    queue: r.try_get(0)?,
                    produce: r.try_get(1)?,
                    observe: r.try_get(3)?,
                    admin: r.try_get(4)?,
                })
            })
            .collect::<Result<_, tokio_postgres::Error>>()?;
        let may_create = db.query_one(MAY_CREATE, &[]).await?.try_get(0)?;
        Ok(Privileges { queues, may_create })
    }

    fn find(&self, queue: &str) -> Option<&QueuePrivileges> {
        self.queues.iter().find(|q| q.queue == queue)
    }

    pub fn admin(&self, queue: &str) -> bool {
        self.find(queue).is_some_and(|q| q.admin)
    }

    pub fn any_admin(&self) -> bool {
        self.queues.iter().any(|q| q.admin)
    }

    pub fn any_produce(&self) -> bool {
        self.queues.iter().any(|q| q.produce)
    }

    pub fn observable(&self) -> impl Iterator<Item = &str> {
        self.queues
            .iter()
            .filter(|q| q.observe)
            .map(|q| q.queue.as_str())
    }

    pub fn producible(&self) -> impl Iterator<Item = &str> {
        self.queues
            .iter()
            .filter(|q| q.produce)
            .map(|q| q.queue.as_str())
    }

    pub fn administrable(&self) -> impl Iterator<Item = &str> {
        self.queues
            .iter()
            .filter(|q| q.admin)
            .map(|q| q.queue.as_str())
    }
}
