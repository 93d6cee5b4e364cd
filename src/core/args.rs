//! Argument checks shared by every function. Each runs before any row is touched, so a refused
//! call changes nothing.
use std::ops::RangeInclusive;

use pgrx::prelude::*;

use crate::core::datum::{Jsonb, JsonbArray, ParentFailure};
use crate::core::errors;
use crate::core::settings;

pub const MICROS_PER_DAY: i128 = 86_400_000_000;
/// The longest lease: a job that needs more should renew.
pub const MAX_LEASE_MICROS: i128 = MICROS_PER_DAY;
/// The longest backoff or explicit retry delay.
pub const MAX_DELAY_MICROS: i128 = 30 * MICROS_PER_DAY;
/// The most jobs one claim may take.
pub const MAX_BATCH: i32 = 10_000;
/// Queue names are identifiers short enough that `leaseq_<name>` fits a NOTIFY channel (63 bytes).
pub const MAX_QUEUE_NAME: usize = 48;
/// Dedupe keys and worker names live in index entries and logs: keep them short.
pub const MAX_KEY_BYTES: usize = 512;

#[track_caller]
pub fn required<T>(function: &str, argument: &str, value: Option<T>) -> T {
    value.unwrap_or_else(|| errors::null_argument(function, argument))
}

/// `^[a-z][a-z0-9_]{0,47}$`, the same rule as the `queues_name_is_identifier` constraint.
#[track_caller]
pub fn is_queue_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some('a'..='z'))
        && name.len() <= MAX_QUEUE_NAME
        && chars.all(|c| matches!(c, 'a'..='z' | '0'..='9' | '_'))
}

/// A required, well-formed queue name (whether the queue exists is the caller's lookup).
#[track_caller]
pub fn queue_name<'a>(function: &str, queue: Option<&'a str>) -> &'a str {
    let queue = required(function, "queue", queue);
    if !is_queue_name(queue) {
        errors::invalid_argument(
            function,
            "queue",
            "must match ^[a-z][a-z0-9_]{0,47}$ (a lowercase letter, then up to 47 lowercase \
             letters, digits or underscores)",
        );
    }
    queue
}

/// A non-empty text of at most `MAX_KEY_BYTES` bytes (worker names, dedupe keys).
#[track_caller]
pub fn short_text(function: &str, argument: &str, value: &str) {
    if value.is_empty() || value.len() > MAX_KEY_BYTES {
        errors::invalid_argument(function, argument, "must be between 1 and 512 bytes long");
    }
}

/// An interval's length in microseconds, with PostgreSQL's own equivalences for comparison
/// (a month is 30 days, a day 24 hours), so `'1 mon'` and `'30 days'` agree with SQL's `<=`.
#[track_caller]
pub fn interval_micros(interval: Interval) -> i128 {
    interval.months() as i128 * 30 * MICROS_PER_DAY
        + interval.days() as i128 * MICROS_PER_DAY
        + interval.micros() as i128
}

/// `value` must be in `(0, max]`, or `[0, max]` when `zero_allowed`.
#[track_caller]
pub fn interval_in_range(
    function: &str,
    argument: &str,
    value: Interval,
    zero_allowed: bool,
    max: i128,
    max_text: &str,
) -> i128 {
    let micros = interval_micros(value);
    let low_ok = if zero_allowed {
        micros >= 0
    } else {
        micros > 0
    };
    if !low_ok || micros > max {
        let low = if zero_allowed {
            "at least 0"
        } else {
            "greater than 0"
        };
        errors::invalid_argument(
            function,
            argument,
            &format!("must be {low} and at most {max_text}"),
        );
    }
    micros
}

#[track_caller]
pub fn lease(function: &str, value: Interval) -> i128 {
    interval_in_range(function, "lease", value, false, MAX_LEASE_MICROS, "1 day")
}

/// A timestamp a job is scheduled at: `infinity` would never run and `-infinity` would jump
/// every queue, so both are refused.
#[track_caller]
pub fn finite_time(function: &str, argument: &str, value: TimestampWithTimeZone) {
    if !value.is_finite() {
        errors::invalid_argument(function, argument, "must be a finite timestamp");
    }
}

/// An integer in `range` — the one form of every integer range check; the message names the
/// range ("between 1 and 1000", or "at least 1" when it has no upper end) and, where a NULL is
/// allowed, `when_null` says what a NULL means.
#[track_caller]
pub fn int_in_range(
    function: &str,
    argument: &str,
    value: i32,
    range: RangeInclusive<i32>,
    when_null: Option<&str>,
) {
    if range.contains(&value) {
        return;
    }
    let (low, high) = range.into_inner();
    let allowed = if high == i32::MAX {
        format!("must be at least {low}")
    } else {
        format!("must be between {low} and {high}")
    };
    errors::invalid_argument(function, argument, &(allowed + when_null.unwrap_or("")))
}

#[track_caller]
pub fn max_attempts(function: &str, value: i32) {
    int_in_range(function, "max_attempts", value, 1..=i32::MAX, None)
}

/// The elements of a required array argument, none of them NULL (`22004` names the position).
pub fn elements<T>(function: &str, argument: &str, values: Vec<Option<T>>) -> Vec<T> {
    values
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            v.unwrap_or_else(|| errors::null_argument(function, &format!("{argument}[{}]", i + 1)))
        })
        .collect()
}

/// The lease tokens of a batch call: one per job, or one for all of them — a claim call's token
/// is shared by the jobs it claimed (lifecycle/claim.rs), so a batch from one claim can send it
/// once. Each job is fenced by its own id with its token either way.
pub enum LeaseTokens {
    Shared(pgrx::Uuid),
    PerJob(Vec<pgrx::Uuid>),
}

impl LeaseTokens {
    /// One token per job of `jobs`.
    pub fn per_job(self, jobs: usize) -> Vec<pgrx::Uuid> {
        match self {
            LeaseTokens::Shared(token) => vec![token; jobs],
            LeaseTokens::PerJob(tokens) => tokens,
        }
    }
}

/// The `(job_ids, lease_tokens)` of a batch call: both required, no NULL element, one token per
/// id or one for all, at most `MAX_BATCH` jobs, no job twice.
pub fn job_batch(
    function: &str,
    job_ids: Option<Vec<Option<i64>>>,
    lease_tokens: Option<Vec<Option<pgrx::Uuid>>>,
) -> (Vec<i64>, LeaseTokens) {
    let ids = elements(function, "job_ids", required(function, "job_ids", job_ids));
    let mut tokens = elements(
        function,
        "lease_tokens",
        required(function, "lease_tokens", lease_tokens),
    );
    let tokens = if tokens.len() == 1 {
        LeaseTokens::Shared(tokens.remove(0))
    } else if tokens.len() == ids.len() {
        LeaseTokens::PerJob(tokens)
    } else {
        errors::invalid_argument(
            function,
            "lease_tokens",
            "must have one element per job id, or one for all of them",
        )
    };
    distinct_ids(function, "job_ids", &ids);
    (ids, tokens)
}

/// The `job_ids` of a call that acts on jobs by id alone (bulk redrive, cancel): required, no
/// NULL element, at most `MAX_BATCH`, no job twice.
pub fn job_ids(function: &str, job_ids: Option<Vec<Option<i64>>>) -> Vec<i64> {
    let ids = elements(function, "job_ids", required(function, "job_ids", job_ids));
    distinct_ids(function, "job_ids", &ids);
    ids
}

/// The parents a job depends on (`depends_on`): no NULL element, at most `MAX_BATCH`, no job
/// twice. NULL or empty: none.
pub fn parent_ids(function: &str, depends_on: Option<Vec<Option<i64>>>) -> Vec<i64> {
    let ids = elements(function, "depends_on", depends_on.unwrap_or_default());
    distinct_ids(function, "depends_on", &ids);
    ids
}

/// Each job's parents in a batch (`depends_on_each`): a JSON array with one array of job ids
/// per payload (`[[1, 2], [], [3]]`), none twice in one job's list, at most `MAX_BATCH` parents
/// in all. Each refusal names the element.
pub fn parents_each(function: &str, depends_on_each: &Jsonb, jobs: usize) -> Vec<Vec<i64>> {
    const A: &str = "depends_on_each";
    let outer: Vec<serde_json::Value> = serde_json::from_str(&depends_on_each.to_text())
        .unwrap_or_else(|_| {
            errors::invalid_argument(function, A, "must be a JSON array of arrays of job ids")
        });
    if outer.len() != jobs {
        errors::invalid_argument(function, A, "must have one array of job ids per payload");
    }
    let each: Vec<Vec<i64>> = outer
        .into_iter()
        .enumerate()
        .map(|(i, parents)| {
            let name = format!("{A}[{}]", i + 1);
            let ids: Vec<i64> = serde_json::from_value(parents).unwrap_or_else(|_| {
                errors::invalid_argument(function, &name, "must be an array of job ids")
            });
            distinct_ids(function, &name, &ids);
            ids
        })
        .collect();
    let all: std::collections::HashSet<i64> = each.iter().flatten().copied().collect();
    if all.len() > MAX_BATCH as usize {
        errors::invalid_argument(function, A, "must name at most 10000 distinct parents");
    }
    each
}

/// `on_parent_failure`: what a job does when a parent fails (lifecycle/depend.rs).
pub fn parent_failure(function: &str, value: Option<&str>) -> ParentFailure {
    let value = required(function, "on_parent_failure", value);
    ParentFailure::from_label(value).unwrap_or_else(|| {
        errors::invalid_argument(function, "on_parent_failure", "must be cancel, dead or run")
    })
}

fn distinct_ids(function: &str, argument: &str, ids: &[i64]) {
    if ids.len() > MAX_BATCH as usize {
        errors::invalid_argument(function, argument, "must have at most 10000 elements");
    }
    let mut seen = std::collections::HashSet::with_capacity(ids.len());
    if !ids.iter().all(|id| seen.insert(*id)) {
        errors::invalid_argument(function, argument, "must not name a job twice");
    }
}

/// An optional array of documents with one element (or NULL) per job, each within the limit.
pub fn documents_per_job(function: &str, argument: &str, docs: Option<&JsonbArray>, jobs: usize) {
    let Some(docs) = docs else { return };
    let docs = docs.elements();
    if docs.len() != jobs {
        errors::invalid_argument(
            function,
            argument,
            "must have one element per job id, or be NULL",
        );
    }
    for (i, doc) in docs.iter().enumerate() {
        if let Some(doc) = doc {
            document(function, &format!("{argument}[{}]", i + 1), doc);
        }
    }
}

/// A JSON document no larger than `leaseq.max_payload_bytes` (its jsonb size, uncompressed).
#[track_caller]
pub fn document(function: &str, argument: &str, value: &Jsonb) {
    let limit = settings::max_payload_bytes();
    let size = value.size();
    if size > limit as usize {
        errors::document_too_large(function, argument, size, limit);
    }
}

/// Lease operations must see every statement's own fresh snapshot; see `errors::needs_read_committed`.
#[track_caller]
pub fn read_committed(function: &str) {
    // SAFETY: a backend-local global that PostgreSQL sets at transaction start.
    let level = unsafe { pg_sys::XactIsoLevel };
    if level >= pg_sys::XACT_REPEATABLE_READ as i32 {
        errors::needs_read_committed(function);
    }
}

#[cfg(test)]
mod unit_tests {
    use super::*;

    #[test]
    fn queue_names_follow_the_identifier_rule() {
        for good in [
            "a",
            "emails",
            "q_1",
            "a23456789012345678901234567890123456789012345678",
        ] {
            assert!(is_queue_name(good), "{good} should be accepted");
        }
        for bad in [
            "",
            "1q",
            "_q",
            "Emails",
            "e-mails",
            "q;drop",
            "q'",
            "é",
            "a234567890123456789012345678901234567890123456789",
        ] {
            assert!(!is_queue_name(bad), "{bad} should be refused");
        }
    }
}
