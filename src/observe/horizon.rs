//! Horizon: what holds this database's xmin horizon back, for `metrics()`. While a snapshot
//! lives, VACUUM keeps every row version it could see, and every claim walks the entries of the
//! jobs claimed since (docs/design.md, "Where the claim starts"): operators need to see it coming.
//!
//! Three kinds of holder keep the horizon of this database's tables: a transaction in this
//! database (a backend), a standby's `hot_standby_feedback` (a WAL sender), and a replication
//! slot. Backends are read from the server's backend status array, as `pg_stat_activity` reads
//! it but without its per-role masking: only an age leaves this module, never who or what.
//! Slots are read from `pg_replication_slots`, which every role may read.
use pgrx::prelude::*;

use crate::core::majors;
use crate::core::spi::{self, OID, Statement};

/// The oldest `xmin` of the slots that hold this database's horizon: physical slots (no
/// database) and the logical ones of `$1`, this database. NULL: none holds one. (The function
/// behind `pg_replication_slots`, which every role may call, without the view's join.)
pub(crate) const SLOTS: Statement = Statement {
    name: "metrics.slots",
    sql: "SELECT pg_catalog.max(pg_catalog.age(slot.xmin))::int8
            FROM pg_catalog.pg_get_replication_slots() AS slot
           WHERE slot.xmin IS NOT NULL AND (slot.datoid IS NULL OR slot.datoid = $1)",
    params: &[OID],
};

/// Who holds the horizon, and for how long.
pub struct Horizon {
    /// Seconds since the start of the oldest transaction of this database holding a snapshot
    /// (this call's own excepted); `None`: no backend holds one.
    pub oldest_snapshot_seconds: Option<f64>,
    /// Transactions since the oldest xmin each kind of holder keeps: a backend of this
    /// database, a standby's feedback, a replication slot; `None` where none is held.
    pub backend_xids: Option<i64>,
    pub standby_xids: Option<i64>,
    pub slot_xids: Option<i64>,
}

/// Reads the holders now, on the server's own clock (as transactions' starts are kept).
pub fn read(client: &mut pgrx::spi::SpiClient<'_>) -> Horizon {
    let mut horizon = Horizon {
        oldest_snapshot_seconds: None,
        backend_xids: None,
        standby_xids: None,
        // SAFETY: reads this backend's database.
        slot_xids: spi::run(client, &SLOTS, &[unsafe { pg_sys::MyDatabaseId }.into()])
            .single(|row| row.get::<i64>(1)),
    };
    // SAFETY: the backend status array is copied into this transaction's memory by the first
    // call (as pg_stat_activity does); entries are read by value, 1-based.
    unsafe {
        let now = pg_sys::GetCurrentTimestamp();
        let next = pg_sys::ReadNextTransactionId().into_inner();
        let me = pg_sys::MyProcPid;
        let database = pg_sys::MyDatabaseId;
        for i in 1..=pg_sys::pgstat_fetch_stat_numbackends() {
            let entry = majors::local_backend_status(i);
            if entry.is_null() || (*entry).backend_xmin == pg_sys::TransactionId::INVALID {
                continue;
            }
            let status = &(*entry).backendStatus;
            // Transactions since this xmin, as age() counts them (modulo 2^32).
            let xids = Some(i64::from(
                next.wrapping_sub((*entry).backend_xmin.into_inner()),
            ));
            if status.st_backendType == pg_sys::BackendType::B_WAL_SENDER {
                horizon.standby_xids = horizon.standby_xids.max(xids);
            } else if status.st_databaseid == database && status.st_procpid != me {
                horizon.backend_xids = horizon.backend_xids.max(xids);
                if status.st_xact_start_timestamp != 0 {
                    let seconds = (now - status.st_xact_start_timestamp) as f64 / 1e6;
                    horizon.oldest_snapshot_seconds = Some(
                        horizon
                            .oldest_snapshot_seconds
                            .map_or(seconds, |s: f64| s.max(seconds)),
                    );
                }
            }
        }
    }
    horizon
}
