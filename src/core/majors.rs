//! What differs between the PostgreSQL majors leaseq supports (15 to 18), in one place: each
//! function here is the one spot that names a server API which moved between them, so that no
//! `cfg` reaches the lifecycle code. Behaviour that differs (what the catalogs or a cast accept)
//! is pinned by the tests of the code that meets it, on every major.
use pgrx::pg_sys;

/// The backend status of the `index`-th backend (1-based) of this transaction's copy of the
/// status array, or NULL. Renamed in 16 (it counted by position, not by backend id, already).
///
/// # Safety
/// `pgstat_fetch_stat_numbackends` was called in this transaction and `index` is within it.
pub unsafe fn local_backend_status(index: i32) -> *mut pg_sys::LocalPgBackendStatus {
    #[cfg(feature = "pg15")]
    // SAFETY: by the caller.
    return unsafe { pg_sys::pgstat_fetch_stat_local_beentry(index) };
    #[cfg(not(feature = "pg15"))]
    // SAFETY: by the caller.
    return unsafe { pg_sys::pgstat_get_local_beentry_by_index(index) };
}

/// Index entries this backend has returned from `relation` in this transaction and not yet
/// sent to the statistics system; 0 when there is no pending entry. The counts' struct and its
/// fields were renamed in 16 (`t_counts.t_tuples_returned` → `counts.tuples_returned`).
pub fn pending_tuples_returned(relation: pg_sys::Oid) -> i64 {
    // SAFETY: the pending entry of a relation, or NULL (from 17 a copy in the current memory
    // context); read by value.
    unsafe {
        let pending = pg_sys::find_tabstat_entry(relation);
        if pending.is_null() {
            return 0;
        }
        #[cfg(feature = "pg15")]
        return (*pending).t_counts.t_tuples_returned;
        #[cfg(not(feature = "pg15"))]
        return (*pending).counts.tuples_returned;
    }
}

/// The attributes of a tuple descriptor. From 18 a descriptor starts with its compact
/// attributes, the full ones following them.
///
/// # Safety
/// `descriptor` is valid for the lifetime `'a`.
pub unsafe fn attributes<'a>(descriptor: pg_sys::TupleDesc) -> &'a [pg_sys::FormData_pg_attribute] {
    // SAFETY: by the caller; `natts` attributes follow the descriptor.
    unsafe {
        let columns = usize::try_from((*descriptor).natts).expect("natts ≥ 0");
        #[cfg(not(feature = "pg18"))]
        return (*descriptor).attrs.as_slice(columns);
        #[cfg(feature = "pg18")]
        return std::slice::from_raw_parts(
            (*descriptor)
                .compact_attrs
                .as_ptr()
                .add(columns)
                .cast::<pg_sys::FormData_pg_attribute>(),
            columns,
        );
    }
}

/// `index_beginscan` without instrumentation: 18 added the argument that takes it.
///
/// # Safety
/// As `index_beginscan`: open relations, a valid snapshot.
pub unsafe fn index_beginscan(
    heap: pg_sys::Relation,
    index: pg_sys::Relation,
    snapshot: pg_sys::Snapshot,
    keys: i32,
) -> pg_sys::IndexScanDesc {
    #[cfg(not(feature = "pg18"))]
    // SAFETY: by the caller.
    return unsafe { pg_sys::index_beginscan(heap, index, snapshot, keys, 0) };
    #[cfg(feature = "pg18")]
    // SAFETY: by the caller; no instrumentation.
    return unsafe {
        pg_sys::index_beginscan(heap, index, snapshot, std::ptr::null_mut(), keys, 0)
    };
}
