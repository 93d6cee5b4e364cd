//! Per-queue grants: `queue_grant`, `queue_revoke` and `queue_grants`, which only members of
//! `leaseq_admin` may call (see docs/reference.md, "Permissions").
use chrono::{DateTime, Utc};

use crate::client::{Client, Error};
use crate::enums::sql_enum;

const GRANT: &str = "SELECT leaseq.queue_grant($1, $2::text::regrole, $3)";
const REVOKE: &str = "SELECT leaseq.queue_revoke($1, $2::text::regrole, $3)";
const GRANTS: &str = "SELECT queue, role::text AS role, privilege::text AS privilege, granted_at
                        FROM leaseq.queue_grants()";

sql_enum!(
    /// `leaseq.queue_privilege`: what a per-queue grant allows. `work` covers `produce`, `admin`
    /// covers all.
    QueuePrivilege, "queue privilege", {
        Produce => "produce",
        Work => "work",
        Observe => "observe",
        Admin => "admin",
    }
);

/// A row of `queue_grants()`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueGrant {
    pub queue: String,
    /// The role's name (its OID in digits if it was dropped since).
    pub role: String,
    pub privilege: QueuePrivilege,
    pub granted_at: DateTime<Utc>,
}

impl Client {
    /// Gives `role` (and its members) `privilege` on `queue`; false when it held it already.
    pub async fn grant(
        &self,
        queue: &str,
        role: &str,
        privilege: QueuePrivilege,
    ) -> Result<bool, Error> {
        let row = self
            .raw()
            .query_one(GRANT, &[&queue, &role, &privilege.label()])
            .await?;
        row.try_get(0)
    }

    /// Takes back a grant; false when `role` did not hold it.
    pub async fn revoke(
        &self,
        queue: &str,
        role: &str,
        privilege: QueuePrivilege,
    ) -> Result<bool, Error> {
        let row = self
            .raw()
            .query_one(REVOKE, &[&queue, &role, &privilege.label()])
            .await?;
        row.try_get(0)
    }

    /// Every per-queue grant, by queue, role and privilege.
    pub async fn grants(&self) -> Result<Vec<QueueGrant>, Error> {
        let rows = self.raw().query(GRANTS, &[]).await?;
        rows.iter()
            .map(|r| {
                Ok(QueueGrant {
                    queue: r.try_get("queue")?,
                    role: r.try_get("role")?,
                    privilege: r.try_get("privilege")?,
                    granted_at: r.try_get("granted_at")?,
                })
            })
            .collect()
    }
}
