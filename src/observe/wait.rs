//! Await: `CALL leaseq.queue_await(job_ids, timeout)` returns once every job is final (succeeded,
//! dead or cancelled), or when the timeout passes — whichever comes first — and says which are
//! not final yet.
//!
//! A function runs inside its caller's statement, under that statement's snapshot, for as long
//! as it runs: waiting there would hold the database's xmin horizon back (vacuum could remove
//! nothing newer) for the whole wait. So this is a procedure: between its reads of the jobs it
//! commits, and it sleeps holding neither a snapshot nor a transaction id (`pg_stat_activity`
//! shows `backend_xmin` and `backend_xid` NULL), woken by the finishing transactions' commits
//! (core/wake.rs). A procedure may commit only when called by `CALL` outside a transaction
//! block; anywhere else it refuses (25001) rather than wait under a snapshot. It runs with its
//! caller's rights (PostgreSQL forbids transaction control in a `SECURITY DEFINER` procedure):
//! its reads take the owner's rights as every function's statements do (`connect`).
use pgrx::prelude::*;

use crate::core::access;
use crate::core::args;
use crate::core::clock;
use crate::core::connect::{self, JOB_PATH};
use crate::core::datum::{IdArray, QueuePrivilege};
use crate::core::errors;
use crate::core::spi::{self, INT8_ARRAY, Statement};
use crate::core::wake;

/// Of jobs `$1`: those that do not exist (purged, or never), and those not final yet.
pub(crate) const UNFINISHED: Statement = Statement {
    name: "await.unfinished",
    sql: "SELECT coalesce(array_agg(given.id ORDER BY given.id)
                             FILTER (WHERE job.id IS NULL), '{}'),
                 coalesce(array_agg(given.id ORDER BY given.id)
                             FILTER (WHERE job.finished_at IS NULL AND job.id IS NOT NULL), '{}')
            FROM unnest($1::bigint[]) AS given (id)
            LEFT JOIN leaseq.jobs AS job ON job.id = given.id",
    params: &[INT8_ARRAY],
};

extension_sql!(
    r#"
-- Waits until jobs job_ids are all final or timeout passes (src/observe/wait.rs).
CREATE PROCEDURE leaseq."queue_await"(
	"job_ids" bigint[],
	"timeout" interval,
	INOUT "all_final" bool DEFAULT NULL,
	INOUT "unfinished" bigint[] DEFAULT NULL
)
LANGUAGE c
AS 'MODULE_PATHNAME', 'queue_await_wrapper';
"#,
    name = "queue_await",
);

/// The longest wait one call may ask for: a day.
const MAX_TIMEOUT_MICROS: i128 = 86_400 * 1_000_000;

#[unsafe(no_mangle)]
#[doc(hidden)]
pub extern "C" fn pg_finfo_queue_await_wrapper() -> &'static pg_sys::Pg_finfo_record {
    const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1
}

/// `queue_await(job_ids bigint[], timeout interval)`: waits until every one of `job_ids` (at
/// most 10000, none twice; one purged while it waits counts as final) is final, or until `timeout`
/// (0 to 1 day) passes on the server's clock. Returns `all_final`, and the ids not final yet
/// (`unfinished`, ascending; empty when all are).
///
/// Errors: `22004` NULL job_ids/timeout or a NULL element, `22023` timeout out of range, too many
/// ids or one twice, `42704` no such job (when the call starts), `42501` a job's queue neither
/// observable nor workable by the caller, `25001` not called by `CALL` on its own (in a
/// transaction block, or from a function).
#[pg_guard]
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn queue_await_wrapper(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    const F: &str = "queue_await";
    // SAFETY: PostgreSQL calls this with the procedure's two input arguments (the INOUT ones are
    // outputs here); `context` is a CallContext when called by CALL.
    let (job_ids, timeout, atomic) = unsafe {
        let context = (*fcinfo).context;
        let atomic = context.is_null()
            || (*context).type_ != pg_sys::NodeTag::T_CallContext
            || (*context.cast::<pg_sys::CallContext>()).atomic;
        (
            pgrx::fcinfo::pg_getarg::<IdArray>(fcinfo, 0),
            pgrx::fcinfo::pg_getarg::<Interval>(fcinfo, 1),
            atomic,
        )
    };
    let job_ids = args::job_ids(F, job_ids);
    let timeout = args::required(F, "timeout", timeout);
    let timeout_us =
        args::interval_in_range(F, "timeout", timeout, true, MAX_TIMEOUT_MICROS, "1 day");
    access::require_jobs_any(
        F,
        &job_ids,
        &[QueuePrivilege::Observe, QueuePrivilege::Work],
    );
    if atomic {
        errors::needs_own_transactions(F);
    }
    let deadline = now_micros().saturating_add(timeout_us as i64);
    let unfinished = wait_for(F, &job_ids, deadline);
    // SAFETY: the result row of the procedure's output arguments, as `get_call_result_type`
    // describes it, built in the caller's memory context (SPI is finished).
    unsafe {
        let mut tupdesc: pg_sys::TupleDesc = std::ptr::null_mut();
        if pg_sys::get_call_result_type(fcinfo, std::ptr::null_mut(), &mut tupdesc)
            != pg_sys::TypeFuncClass::TYPEFUNC_COMPOSITE
        {
            errors::internal(F, "its output arguments are not a row");
        }
        let tupdesc = pg_sys::BlessTupleDesc(tupdesc);
        let all_final = unfinished.is_empty();
        let mut values = [
            all_final.into_datum().expect("a bool"),
            unfinished.into_datum().expect("an array"),
        ];
        let mut nulls = [false, false];
        let tuple = pg_sys::heap_form_tuple(tupdesc, values.as_mut_ptr(), nulls.as_mut_ptr());
        pg_sys::HeapTupleHeaderGetDatum((*tuple).t_data)
    }
}

/// Reads `job_ids` until all are final or `deadline` passes, committing after each read and
/// sleeping between them with no snapshot: the ids not final at the last read.
fn wait_for(function: &str, job_ids: &[i64], deadline: i64) -> Vec<i64> {
    // SAFETY: a non-atomic connection, as the caller is a CALL allowed to commit; finished on
    // every way out (an error aborts the transaction, which ends SPI).
    unsafe { pg_sys::SPI_connect_ext(pg_sys::SPI_OPT_NONATOMIC as i32) };
    let waiter = wake::wait(job_ids);
    let mut first = true;
    let unfinished = loop {
        let seen = waiter.announced();
        let (unknown, unfinished): (Vec<i64>, Vec<i64>) = connect::connect(&JOB_PATH, |client| {
            spi::run(client, &UNFINISHED, &[job_ids.to_vec().into()])
                .single(|row| (row.required(1), row.required(2)))
        });
        if first {
            if let Some(&job_id) = unknown.first() {
                errors::unknown_job(function, job_id);
            }
            first = false;
        }
        // SAFETY: ends the transaction of the read (and its snapshot) and starts a new one,
        // which takes no snapshot until the next read.
        unsafe { pg_sys::SPI_commit() };
        let left = deadline - now_micros();
        if unfinished.is_empty() || left <= 0 {
            break unfinished;
        }
        waiter.sleep(seen, (left + 999) / 1000);
    };
    drop(waiter);
    // SAFETY: the connection made above.
    unsafe { pg_sys::SPI_finish() };
    unfinished
}

/// The server's clock (`clock::now`), in µs.
fn now_micros() -> i64 {
    clock::now().into()
}
