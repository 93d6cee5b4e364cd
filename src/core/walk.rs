//! Walks of leaseq's indexes' entries by key alone — dead entries included (but for those a scan
//! marked killed: dead to every snapshot), the heap never read (`SnapshotAny`, the keys from the
//! index tuples). A claim cannot tell a dead entry from a live one without visiting its row; a
//! walk only measures where the next `n` entries of an index end, so that the statement that does
//! visit the rows reads a bounded range (lifecycle/claim.rs, "Where the claim starts").
use pgrx::pg_sys;

use crate::core::majors;

/// A key of `jobs_due_idx` after its queue, in the index's order (priority descending, then
/// `run_at` and id ascending): `run_at` as the server stores it, µs since 2000-01-01.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DueKey {
    pub priority: i32,
    pub run_at: i64,
    pub id: i64,
}

impl DueKey {
    /// As `counters` keeps it.
    pub fn raw(self) -> [i64; 3] {
        [self.priority.into(), self.run_at, self.id]
    }

    pub fn from_raw([priority, run_at, id]: [i64; 3]) -> DueKey {
        DueKey {
            priority: priority as i32,
            run_at,
            id,
        }
    }
}

impl Ord for DueKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other
            .priority
            .cmp(&self.priority)
            .then(self.run_at.cmp(&other.run_at))
            .then(self.id.cmp(&other.id))
    }
}

impl PartialOrd for DueKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Where a walk of `jobs_due_idx` from `from` ended: the first entry past the walk — the
/// `n + 1`-th entry from `from`, the first of the next priority, or the first at or after
/// `before`, whichever comes first — or `None` when the queue's entries end before any.
pub struct Walked {
    /// The first of the queue's entries at or after `from` (`None`: there is none).
    pub first: Option<DueKey>,
    pub stop: Option<DueKey>,
}

/// Walks at most `n` of `queue`'s entries of `jobs_due_idx`, from `from` (`None`: from the head),
/// staying within the first entry's priority and before `before`. `None` without the index.
pub fn due(queue: &str, from: Option<DueKey>, before: DueKey, n: usize) -> Option<Walked> {
    let mut walk = Walk::open(c"jobs", c"jobs_due_idx")?;
    let mut from = from;
    loop {
        match from {
            Some(f) => walk.rescan(queue, &[(2, EQ, f.priority.into()), (3, GE, f.run_at)]),
            None => walk.rescan(queue, &[]),
        }
        let (mut first, mut seen) = (None, 0);
        while let Some(key) = walk.next() {
            if from.is_some_and(|f| (key.run_at, key.id) < (f.run_at, f.id)) {
                continue;
            }
            match first {
                None if key >= before => {
                    return Some(Walked {
                        first: Some(key),
                        stop: Some(key),
                    });
                }
                None => first = Some(key),
                Some(f) if key.priority != f.priority || seen == n || key >= before => {
                    return Some(Walked {
                        first,
                        stop: Some(key),
                    });
                }
                Some(_) => {}
            }
            seen += 1;
        }
        // From a key, the scan stays within its priority: the next one starts after it.
        let Some(f) = from else {
            return Some(Walked { first, stop: None });
        };
        walk.rescan(queue, &[(2, LT, f.priority.into())]);
        let next = walk.next();
        if first.is_some() || next.is_none() {
            return Some(Walked { first, stop: next });
        }
        from = next;
    }
}

/// The index of lease ends this schema has, and its table: `leases_expiry_idx`, a lease row per
/// claim call (0.4.0); `jobs_lease_expiry_idx`, an entry per running job, before.
const LEASE_INDEXES: [(&std::ffi::CStr, &std::ffi::CStr); 2] = [
    (c"leases", c"leases_expiry_idx"),
    (c"jobs", c"jobs_lease_expiry_idx"),
];

/// The name of the index of lease ends this schema has ([`LEASE_INDEXES`]).
pub fn lease_index() -> &'static std::ffi::CStr {
    LEASE_INDEXES
        .iter()
        .map(|(_, index)| *index)
        .find(|index| relation_exists(index))
        .unwrap_or(LEASE_INDEXES[0].1)
}

/// Whether leaseq's schema has a relation of that name.
fn relation_exists(name: &std::ffi::CStr) -> bool {
    // SAFETY: catalog look-ups by name (missing_ok).
    unsafe {
        let schema = pg_sys::get_namespace_oid(c"leaseq".as_ptr(), true);
        pg_sys::get_relname_relid(name.as_ptr(), schema) != pg_sys::InvalidOid
    }
}

/// Walks at most `n` of `queue`'s entries of the lease-end index ([`lease_index`]), from
/// `from` (`None`: the earliest) up to `up_to`: the first lease end at or after `from` (`None`:
/// none up to `up_to`), and the first after the walk — after `n` entries and past the lease end
/// of the `n`-th, which the jobs of one claim share, or past `up_to` — or `None` when the entries
/// end first. `None` without the index.
pub fn expiry(
    queue: &str,
    from: Option<i64>,
    up_to: i64,
    n: usize,
) -> Option<(Option<i64>, Option<i64>)> {
    let (table, index) = LEASE_INDEXES
        .into_iter()
        .find(|(_, index)| relation_exists(index))?;
    let mut walk = Walk::open(table, index)?;
    match from {
        Some(from) => walk.rescan(queue, &[(2, GE, from)]),
        None => walk.rescan(queue, &[]),
    }
    let (mut first, mut last, mut seen) = (None, None, 0);
    while let Some([ends, ..]) = walk.next_values() {
        if (seen >= n && last != Some(ends)) || ends > up_to {
            return Some((first, Some(ends)));
        }
        first.get_or_insert(ends);
        last = Some(ends);
        seen += 1;
    }
    Some((first, None))
}

const EQ: u32 = pg_sys::BTEqualStrategyNumber;
const GE: u32 = pg_sys::BTGreaterEqualStrategyNumber;
const LT: u32 = pg_sys::BTLessStrategyNumber;

/// One of leaseq's indexes on `leaseq.jobs`, open, and its scan by `SnapshotAny` (null before
/// the first `rescan`).
struct Walk {
    heap: pg_sys::Relation,
    index: pg_sys::Relation,
    scan: pg_sys::IndexScanDesc,
}

impl Walk {
    fn open(table: &std::ffi::CStr, name: &std::ffi::CStr) -> Option<Walk> {
        // SAFETY: catalog look-ups by name; both relations are opened with the lock every
        // statement of the job path already holds, and closed in `drop`.
        unsafe {
            let schema = pg_sys::get_namespace_oid(c"leaseq".as_ptr(), true);
            let table = pg_sys::get_relname_relid(table.as_ptr(), schema);
            let index = pg_sys::get_relname_relid(name.as_ptr(), schema);
            if table == pg_sys::InvalidOid || index == pg_sys::InvalidOid {
                return None;
            }
            let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
            let walk = Walk {
                heap: pg_sys::table_open(table, lock),
                index: pg_sys::index_open(index, lock),
                scan: std::ptr::null_mut(),
            };
            // An index a failed CREATE INDEX CONCURRENTLY left invalid may lack entries: a walk
            // of it would tell nothing (claim.rs trusts an absent entry).
            (*(*walk.index).rd_index).indisvalid.then_some(walk)
        }
    }

    /// Restarts at the first of `queue`'s entries that satisfies `conditions` (attribute
    /// number, btree strategy, and the int4 or timestamptz argument as an i64).
    fn rescan(&mut self, queue: &str, conditions: &[(i16, u32, i64)]) {
        // SAFETY: a scan takes as many keys as it began with (btree copies them), hence a new
        // scan per set of conditions. Each key takes the collation of its index column, so that
        // positioning follows the index's own order.
        unsafe {
            let mut keys: [pg_sys::ScanKeyData; 3] = std::mem::zeroed();
            let queue = pgrx::IntoDatum::into_datum(queue).expect("a text datum");
            let collations = (*self.index).rd_indcollation;
            pg_sys::ScanKeyInit(
                &mut keys[0],
                1,
                EQ as u16,
                pg_sys::RegProcedure::from(pg_sys::F_TEXTEQ),
                queue,
            );
            keys[0].sk_collation = *collations;
            for (i, &(attno, strategy, value)) in conditions.iter().enumerate() {
                let procedure = match (attno, strategy) {
                    (2, EQ) => pg_sys::F_INT4EQ,
                    (2, LT) => pg_sys::F_INT4LT,
                    (_, GE) => pg_sys::F_TIMESTAMPTZ_GE,
                    _ => unreachable!("a condition no walk makes"),
                };
                pg_sys::ScanKeyInit(
                    &mut keys[i + 1],
                    attno,
                    strategy as u16,
                    pg_sys::RegProcedure::from(procedure),
                    pg_sys::Datum::from(value),
                );
                keys[i + 1].sk_collation = *collations.add(attno as usize - 1);
            }
            if !self.scan.is_null() {
                pg_sys::index_endscan(self.scan);
            }
            let n = 1 + conditions.len() as i32;
            self.scan =
                majors::index_beginscan(self.heap, self.index, &raw mut pg_sys::SnapshotAnyData, n);
            // The keys come from the index tuples: asked for before the rescan, which
            // allocates their buffer.
            (*self.scan).xs_want_itup = true;
            pg_sys::index_rescan(self.scan, keys.as_mut_ptr(), n, std::ptr::null_mut(), 0);
        }
    }

    /// The key of the next entry of `jobs_due_idx`, dead or alive.
    fn next(&mut self) -> Option<DueKey> {
        self.next_values().map(DueKey::from_raw)
    }

    /// The columns after the queue of the next entry, dead or alive (as many as the index has;
    /// 0 past them): int4, timestamptz and int8 columns, none of them NULL.
    fn next_values(&mut self) -> Option<[i64; 3]> {
        // SAFETY: the scan was positioned by `rescan`; the tuple it returns has the index's
        // columns, at most four.
        unsafe {
            let tid =
                pg_sys::index_getnext_tid(self.scan, pg_sys::ScanDirection::ForwardScanDirection);
            if tid.is_null() {
                return None;
            }
            let mut values = [pg_sys::Datum::from(0); pg_sys::INDEX_MAX_KEYS as usize];
            let mut nulls = [false; pg_sys::INDEX_MAX_KEYS as usize];
            pg_sys::index_deform_tuple(
                (*self.scan).xs_itup,
                (*self.scan).xs_itupdesc,
                values.as_mut_ptr(),
                nulls.as_mut_ptr(),
            );
            Some([1, 2, 3].map(|i| values[i].value() as i64))
        }
    }
}

impl Drop for Walk {
    fn drop(&mut self) {
        // SAFETY: opened in `open`, closed once.
        unsafe {
            let lock = pg_sys::AccessShareLock as pg_sys::LOCKMODE;
            if !self.scan.is_null() {
                pg_sys::index_endscan(self.scan);
            }
            pg_sys::index_close(self.index, lock);
            pg_sys::table_close(self.heap, lock);
        }
    }
}

#[cfg(any(test, feature = "pg_test"))]
#[pgrx::pg_schema]
mod tests {
    use super::{DueKey, due, expiry};
    use pgrx::prelude::*;

    /// The key of job `id` in `jobs_due_idx`.
    fn key(id: i64) -> DueKey {
        let (priority, run_at) = Spi::get_two_with_args::<i32, TimestampWithTimeZone>(
            "SELECT priority, run_at FROM leaseq.jobs WHERE id = $1",
            &[id.into()],
        )
        .unwrap();
        DueKey {
            priority: priority.unwrap(),
            run_at: run_at.unwrap().into(),
            id,
        }
    }

    /// A walk counts the entries of jobs claimed since (dead to this transaction, still in the
    /// index), stops after `n` of them or at the next priority, and from a key goes on into the
    /// lower priorities.
    #[pg_test]
    fn a_walk_of_the_due_index_counts_dead_entries_and_stops_at_the_next_priority() {
        Spi::run("SELECT leaseq.queue_create('walk_due')").unwrap();
        let ids = |sql: &str| -> Vec<i64> {
            Spi::connect(|client| {
                client
                    .select(sql, None, &[])
                    .unwrap()
                    .map(|row| row.get::<i64>(1).unwrap().unwrap())
                    .collect()
            })
        };
        let low = ids("SELECT * FROM leaseq.queue_enqueue_batch('walk_due',
                 ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 5)), run_at => '2026-01-01')");
        let high = ids("SELECT * FROM leaseq.queue_enqueue_batch('walk_due',
                 ARRAY['{}', '{}']::jsonb[], priority => 3, run_at => '2026-01-01')");
        let claimed = ids("SELECT job_id FROM leaseq.queue_claim('walk_due', 'w', 2)");
        assert_eq!(claimed.len(), 2);
        assert!(
            claimed.iter().all(|id| high.contains(id)),
            "the higher priority first"
        );

        let end_of_all = DueKey {
            priority: i32::MIN,
            run_at: i64::MAX,
            id: i64::MAX,
        };
        let due = |from, n| due("walk_due", from, end_of_all, n);
        let head = due(None, 10).unwrap();
        assert_eq!(
            head.first,
            Some(key(high[0])),
            "a claimed job's entry is still walked"
        );
        assert_eq!(
            head.stop,
            Some(key(low[0])),
            "the walk stops at the next priority"
        );
        let two = due(head.stop, 2).unwrap();
        assert_eq!(
            (two.first, two.stop),
            (Some(key(low[0])), Some(key(low[2])))
        );
        let after_high = DueKey {
            id: high[1] + 1,
            ..key(high[1])
        };
        let lower = due(Some(after_high), 10).unwrap();
        assert_eq!(
            (lower.first, lower.stop),
            (Some(key(low[0])), None),
            "past its priority, on in the next; past the last entry, no stop"
        );
        let past = DueKey {
            id: low[4] + 1,
            ..key(low[4])
        };
        let end = due(Some(past), 10).unwrap();
        assert_eq!((end.first, end.stop), (None, None));
        let short = super::due("walk_due", head.stop, key(low[1]), 10).unwrap();
        assert_eq!(
            (short.first, short.stop),
            (Some(key(low[0])), Some(key(low[1]))),
            "the walk stops at `before`"
        );
    }

    /// The jobs of one claim share their lease end (and, from 0.4.0, one lease row): a walk of
    /// the lease ends never stops between them, so that a range up to its stop takes all of them.
    #[pg_test]
    fn a_walk_of_the_lease_ends_stops_only_where_the_lease_end_changes() {
        Spi::run("SELECT leaseq.queue_create('walk_expiry')").unwrap();
        Spi::run(
            "SELECT leaseq.queue_enqueue_batch('walk_expiry',
                 ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 4)))",
        )
        .unwrap();
        let ends = |batch: i32| {
            Spi::get_one_with_args::<TimestampWithTimeZone>(
                "SELECT max(lease_expires_at) FROM leaseq.queue_claim('walk_expiry', 'w', $1)",
                &[batch.into()],
            )
            .unwrap()
            .unwrap()
            .into()
        };
        let (first, second): (i64, i64) = (ends(3), ends(1));
        assert!(first < second, "two claims, two lease ends");
        let walk = |from, up_to, n| expiry("walk_expiry", from, up_to, n);
        assert_eq!(walk(None, i64::MAX, 1), Some((Some(first), Some(second))));
        assert_eq!(walk(Some(second), i64::MAX, 1), Some((Some(second), None)));
        assert_eq!(walk(Some(second + 1), i64::MAX, 1), Some((None, None)));
        assert_eq!(
            walk(None, first, 10),
            Some((Some(first), Some(second))),
            "the walk stops past `up_to`"
        );
    }

    /// An index left invalid (here by hand, as a failed CREATE INDEX CONCURRENTLY leaves it) may
    /// lack entries: no walk reads it, and a claim looks for expired leases by statement.
    #[pg_test]
    fn an_invalid_index_is_not_walked() {
        Spi::run("SELECT leaseq.queue_create('walk_invalid')").unwrap();
        Spi::run(
            "UPDATE pg_catalog.pg_index SET indisvalid = false
              WHERE indexrelid = 'leaseq.leases_expiry_idx'::regclass",
        )
        .unwrap();
        assert_eq!(expiry("walk_invalid", None, i64::MAX, 1), None);
    }
}
