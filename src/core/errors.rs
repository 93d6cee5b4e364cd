//! Every refusal leaseq raises, with its SQLSTATE, in one place. Each aborts the statement (and
//! so changes nothing); the message names the argument and what is allowed.
//!
//! A stale lease token is *not* an error: renew, complete and fail answer NULL/false for it.
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;

#[track_caller]
fn raise(code: PgSqlErrorCode, message: String, hint: Option<String>) -> ! {
    let mut report = ErrorReport::new(code, message, "leaseq");
    if let Some(hint) = hint {
        report = report.set_hint(hint);
    }
    report.report(PgLogLevel::ERROR);
    unreachable!("an ERROR report does not return")
}

/// `22004`: a required argument was NULL. The functions are not STRICT on purpose: a silent NULL
/// result would look like "fenced" or "nothing to do" to the caller.
#[track_caller]
pub fn null_argument(function: &str, argument: &str) -> ! {
    raise(
        PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
        format!("leaseq.{function}: argument \"{argument}\" must not be NULL"),
        None,
    )
}

/// `22023`: a value outside its allowed range; `allowed` says what is.
#[track_caller]
pub fn invalid_argument(function: &str, argument: &str, allowed: &str) -> ! {
    raise(
        PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
        format!("leaseq.{function}: argument \"{argument}\" {allowed}"),
        None,
    )
}

/// `42704`: the queue does not exist.
#[track_caller]
pub fn unknown_queue(function: &str, queue: &str) -> ! {
    raise(
        PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT,
        format!("leaseq.{function}: queue \"{queue}\" does not exist"),
        Some("create it first with leaseq.queue_create(queue => ...)".into()),
    )
}

/// `42704`: no job has this id (only for operations that name a job without a lease token).
#[track_caller]
pub fn unknown_job(function: &str, job_id: i64) -> ! {
    raise(
        PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT,
        format!("leaseq.{function}: job {job_id} does not exist"),
        None,
    )
}

/// `42704`: a job named as a parent (`argument`: `depends_on`, `depends_on_each`) does not exist
/// — not yet, or not any more.
#[track_caller]
pub fn unknown_parent(function: &str, argument: &str, job_id: i64) -> ! {
    raise(
        PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT,
        format!(
            "leaseq.{function}: argument \"{argument}\" names job {job_id}, which does not exist"
        ),
        Some("a job may depend only on jobs enqueued before it".into()),
    )
}

/// `42501`: the queue has grants and none of the caller's covers the call.
#[track_caller]
pub fn not_permitted(function: &str, role: &str, queue: &str, privilege: &str) -> ! {
    raise(
        PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
        format!(
            "leaseq.{function}: role \"{role}\" lacks privilege \"{privilege}\" on queue \"{queue}\""
        ),
        Some(format!(
            "an admin gives it with leaseq.queue_grant('{queue}', '{role}', '{privilege}')"
        )),
    )
}

/// `42501`: a job named by id is in a queue whose grants none of the caller's covers. Neither the
/// message nor a hint names that queue: a caller who may not see it learns no queue's name by
/// trying ids.
#[track_caller]
pub fn job_not_visible(function: &str, role: &str, job_id: i64, privilege: &str) -> ! {
    raise(
        PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
        format!(
            "leaseq.{function}: job {job_id} does not exist or is not visible to role \"{role}\" (privilege \"{privilege}\")"
        ),
        None,
    )
}

/// `54000`: a JSON document over `leaseq.max_payload_bytes`. The document itself never appears in
/// a message: it may hold secrets.
#[track_caller]
pub fn document_too_large(function: &str, argument: &str, size: usize, limit: i32) -> ! {
    too_large(
        function,
        argument,
        size,
        limit as usize,
        "raise the setting leaseq.max_payload_bytes, or store large data elsewhere and enqueue \
         a reference to it",
    )
}

/// `54000`: an argument over a size limit, with what to do instead.
#[track_caller]
pub fn too_large(function: &str, argument: &str, size: usize, limit: usize, hint: &str) -> ! {
    raise(
        PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED,
        format!(
            "leaseq.{function}: argument \"{argument}\" is {size} bytes, over the limit of \
             {limit} bytes"
        ),
        Some(hint.into()),
    )
}

/// `0A000`: lease operations need a fresh snapshot per statement. Under REPEATABLE READ or
/// SERIALIZABLE a claim misses jobs committed after the snapshot and fails with `40001` on rows
/// changed since; a finish fails the same way after a concurrent reclaim.
#[track_caller]
pub fn needs_read_committed(function: &str) -> ! {
    raise(
        PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
        format!(
            "leaseq.{function} must run in a READ COMMITTED transaction, not REPEATABLE READ or \
             SERIALIZABLE"
        ),
        Some(
            "call it in its own transaction, or SET TRANSACTION ISOLATION LEVEL READ COMMITTED"
                .into(),
        ),
    )
}

/// `25001`: a procedure that commits between its waits, called where it may not commit (in a
/// transaction block, or from a function).
#[track_caller]
pub fn needs_own_transactions(function: &str) -> ! {
    raise(
        PgSqlErrorCode::ERRCODE_ACTIVE_SQL_TRANSACTION,
        format!(
            "leaseq.{function} must be called by CALL on its own, outside a transaction block \
             and outside a function: it commits between its waits, so that it never holds a \
             snapshot while it waits"
        ),
        Some("CALL it in autocommit mode, not between BEGIN and COMMIT".into()),
    )
}

/// `55000`: the database runs a release of leaseq this library does not serve (a newer one, or
/// one past the support window).
pub fn release_not_served(version: &str) -> ! {
    raise(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!(
            "leaseq: this database runs leaseq {version}, which the installed library (leaseq \
             {}) does not serve",
            env!("CARGO_PKG_VERSION")
        ),
        Some(
            "install the leaseq package of that release, or run ALTER EXTENSION leaseq UPDATE"
                .into(),
        ),
    )
}

/// `55000`: a function definition of a release past the support window called the library
/// (`compat::unserved!`; no symbol is retired in 0.3.x, so only its test calls it).
#[cfg_attr(not(any(test, feature = "pg_test")), allow(dead_code))]
pub fn needs_update(symbol: &str) -> ! {
    raise(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!(
            "leaseq: this database's definition of {symbol} is from a release the installed \
             library no longer serves"
        ),
        Some("run ALTER EXTENSION leaseq UPDATE".into()),
    )
}

/// `XX000`: an invariant of leaseq's own tables did not hold. Raising aborts the transaction, so
/// the broken state is never committed.
#[track_caller]
pub fn internal(function: &str, what: &str) -> ! {
    raise(
        PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
        format!("leaseq.{function}: {what}"),
        None,
    )
}

/// `XX000`: a statement's result broke what its text guarantees (a NULL in a NOT NULL column, a
/// value of another type, a row count): a bug in leaseq or a schema changed under it. Raised
/// rather than read as "fenced" or "nothing happened".
#[track_caller]
pub fn internal_statement(statement: &str, what: &str) -> ! {
    raise(
        PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
        format!("leaseq statement {statement}: {what}"),
        None,
    )
}

#[cfg(test)]
mod reference_tests {
    use std::collections::BTreeSet;

    /// SQLSTATEs raised in the error tests' expected output: the first word of each result cell
    /// (the text after a row's last `|`, or a whole line), when it looks like a SQLSTATE.
    fn raised(expected: &str) -> BTreeSet<String> {
        expected
            .lines()
            .filter_map(|line| line.rsplit('|').next()?.split_whitespace().next())
            .filter(|w| {
                w.len() == 5
                    && w.starts_with(|c: char| c.is_ascii_digit())
                    && w.chars()
                        .all(|c| c.is_ascii_digit() || c.is_ascii_uppercase())
            })
            .map(String::from)
            .collect()
    }

    /// SQLSTATEs in docs/reference.md's error table (its "## Errors" section): rows that start
    /// with "| `XXXXX`", several codes separated by ", ".
    fn documented(reference: &str) -> BTreeSet<String> {
        let section = reference
            .split("\n## Errors")
            .nth(1)
            .expect("docs/reference.md has an Errors section");
        let section = section.split("\n## ").next().unwrap_or(section);
        section
            .lines()
            .filter_map(|line| line.strip_prefix("| `"))
            .flat_map(|rest| rest.split(" |").next())
            .flat_map(|cell| cell.split(", "))
            .map(|code| code.trim_matches('`').to_string())
            .filter(|code| code.len() == 5)
            .collect()
    }

    #[test]
    fn the_reference_error_table_lists_exactly_the_sqlstates_the_error_tests_raise() {
        // queue_await is CALLed, so its refusals are pinned in a file of their own, one
        // `\echo :LAST_ERROR_SQLSTATE` line per refusal.
        let mut raised = raised(include_str!("../../pg_test/expected/errors.out"));
        raised.extend(self::raised(include_str!(
            "../../pg_test/expected/await.out"
        )));
        let documented = documented(include_str!("../../docs/reference.md"));
        assert!(
            raised.len() >= 6,
            "the parser found the SQLSTATEs: {raised:?}"
        );
        assert_eq!(
            documented, raised,
            "docs/reference.md error table vs pg_test/expected/errors.out"
        );
    }
}
