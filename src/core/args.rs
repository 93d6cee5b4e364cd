//! Argument checks shared by every function. Each runs before any row is touched, so a refused
//! call changes nothing.
use std::ops::RangeInclusive;

use pgrx::prelude::*;

use crate::core::datum::{IdArray, Jsonb, JsonbArray, ParentFailure, TextArray, UuidArray};
use crate::core::errors;
use crate::core::settings;

pub const MICROS_PER_DAY: i128 = 86_400_000_000;
/// The longest lease: a job that needs more should renew.
pub const MAX_LEASE_MICROS: i128 = MICROS_PER_DAY;
/// The longest backoff or explicit retry delay.
pub const MAX_DELAY_MICROS: i128 = 30 * MICROS_PER_DAY;
/// The most jobs one call may take, enqueue, finish or name (and the most parents of one job).
pub const MAX_BATCH: i32 = 10_000;
/// The most dependency edges (child, parent) one call may create: the work a call does on them
/// is linear in this, and so is the memory.
pub const MAX_EDGES: usize = 100_000;
/// The largest `queue_flow` document (its jsonb size): it is parsed whole before any check.
pub const MAX_FLOW_BYTES: usize = 64 << 20;
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

/// A W3C Trace Context `traceparent` (https://www.w3.org/TR/trace-context/#traceparent-header),
/// version 00, as OpenTelemetry propagates a span's context: `00-<trace id: 32 lowercase hex>-
/// <parent id: 16 lowercase hex>-<flags: 2 lowercase hex>`, neither id all zeros.
pub fn trace_context(function: &str, argument: &str, value: &str) {
    let hex = |part: &str, len: usize| {
        part.len() == len
            && part
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let parts: Vec<&str> = value.split('-').collect();
    let valid = matches!(parts[..], [version, trace, parent, flags]
        if version == "00" && hex(trace, 32) && hex(parent, 16) && hex(flags, 2)
            && trace.bytes().any(|b| b != b'0') && parent.bytes().any(|b| b != b'0'));
    if !valid {
        errors::invalid_argument(
            function,
            argument,
            "must be a W3C traceparent, version 00: 00-<32 hex digits, not all 0>-<16 hex digits, \
             not all 0>-<2 hex digits>, lowercase",
        );
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

/// `value` must be in `(0, max]`, or `[0, max]` when `zero_allowed`, its months, days and time
/// all of one sign: `'-1 mon +30 days 1 sec'` measures 1 s here, but added to a timestamp in SQL
/// (a lease's expiry) it is a day in the past on March 31 and days ahead elsewhere.
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
    // After the range check, so that a negative duration sent as `-1 days +86399 seconds` (as
    // psycopg sends timedelta(seconds=-1)) is still refused for its sign.
    let parts = [
        i64::from(value.months()),
        i64::from(value.days()),
        value.micros(),
    ];
    if parts.iter().any(|&part| part < 0) {
        errors::invalid_argument(
            function,
            argument,
            "must not mix positive and negative months, days and time: a month is not always 30 days",
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

/// At most `MAX_BATCH` elements in an array of `len`: checked from its header, before anything is
/// copied or looked at.
#[track_caller]
pub fn at_most_a_batch(function: &str, argument: &str, len: usize) {
    if len > MAX_BATCH as usize {
        errors::invalid_argument(function, argument, "must have at most 10000 elements");
    }
}

/// At most `MAX_EDGES` dependency edges made by one call.
#[track_caller]
pub fn at_most_edges(function: &str, argument: &str, edges: usize) {
    if edges > MAX_EDGES {
        errors::invalid_argument(
            function,
            argument,
            &format!(
                "makes {edges} parent links (one per job and parent); at most 100000 per call"
            ),
        );
    }
}

/// The elements of a required array of ids: at most `MAX_BATCH`, none NULL, none twice.
fn ids(function: &str, argument: &str, array: IdArray) -> Vec<i64> {
    at_most_a_batch(function, argument, array.len());
    let ids = elements(function, argument, array.elements());
    distinct_ids(function, argument, &ids);
    ids
}

/// The `(job_ids, lease_tokens)` of a batch call: both required, no NULL element, one token per
/// id or one for all, at most `MAX_BATCH` jobs, no job twice.
pub fn job_batch(
    function: &str,
    job_ids: Option<IdArray>,
    lease_tokens: Option<UuidArray>,
) -> (Vec<i64>, LeaseTokens) {
    let ids = ids(function, "job_ids", required(function, "job_ids", job_ids));
    let lease_tokens = required(function, "lease_tokens", lease_tokens);
    at_most_a_batch(function, "lease_tokens", lease_tokens.len());
    let mut tokens = elements(function, "lease_tokens", lease_tokens.elements());
    // One claim's jobs sent back with a token each (as a client returns a claim's rows) are a
    // batch that shares one: the cheaper statement (lifecycle/complete.rs).
    let one_token = tokens.len() == 1
        || (tokens.len() == ids.len()
            && !tokens.is_empty()
            && tokens.iter().all(|t| *t == tokens[0]));
    if one_token {
        (ids, LeaseTokens::Shared(tokens.remove(0)))
    } else if tokens.len() == ids.len() {
        (ids, LeaseTokens::PerJob(tokens))
    } else {
        errors::invalid_argument(
            function,
            "lease_tokens",
            "must have one element per job id, or one for all of them",
        )
    }
}

/// The `job_ids` of a call that acts on jobs by id alone (bulk redrive, cancel): required, no
/// NULL element, at most `MAX_BATCH`, no job twice.
pub fn job_ids(function: &str, job_ids: Option<IdArray>) -> Vec<i64> {
    ids(function, "job_ids", required(function, "job_ids", job_ids))
}

/// The parents a job depends on (`depends_on`): no NULL element, at most `MAX_BATCH`, no job
/// twice. NULL or empty: none.
pub fn parent_ids(function: &str, depends_on: Option<IdArray>) -> Vec<i64> {
    depends_on.map_or_else(Vec::new, |array| ids(function, "depends_on", array))
}

/// A batch's `group_keys`: one per job (NULL: none), each a short text; its size is checked
/// from its header before any key is copied.
pub fn group_keys(
    function: &str,
    group_keys: Option<TextArray>,
    jobs: usize,
) -> Option<Vec<Option<String>>> {
    const A: &str = "group_keys";
    let array = group_keys?;
    if array.len() != jobs {
        errors::invalid_argument(function, A, "must have one element per payload");
    }
    // Each element: its text, a length word, alignment; at most MAX_KEY_BYTES of text.
    if array.bytes() > 64 + jobs * (MAX_KEY_BYTES + 8) {
        errors::invalid_argument(function, A, "elements must be between 1 and 512 bytes long");
    }
    let keys = array.elements();
    for (i, key) in keys.iter().enumerate() {
        if let Some(key) = key {
            short_text(function, &format!("{A}[{}]", i + 1), key);
        }
    }
    Some(keys)
}

/// Each job's parents in a batch (`depends_on_each`): a JSON array with one array of job ids
/// per payload (`[[1, 2], [], [3]]`), none twice in one job's list, at most `MAX_BATCH` parents
/// in all and `MAX_EDGES` links. Its size is checked before it is parsed; each refusal names the
/// element.
pub fn parents_each(function: &str, depends_on_each: &Jsonb, jobs: usize) -> Vec<Vec<i64>> {
    const A: &str = "depends_on_each";
    document(function, A, depends_on_each);
    match depends_on_each.array_len() {
        None => errors::invalid_argument(function, A, "must be a JSON array of arrays of job ids"),
        Some(n) if n != jobs => {
            errors::invalid_argument(function, A, "must have one array of job ids per payload")
        }
        Some(_) => {}
    }
    let text = depends_on_each.to_text();
    let outer: Vec<&serde_json::value::RawValue> =
        serde_json::from_str(&text).unwrap_or_else(|_| {
            errors::invalid_argument(function, A, "must be a JSON array of arrays of job ids")
        });
    let mut edges = 0;
    let mut all = std::collections::HashSet::new();
    let each: Vec<Vec<i64>> = outer
        .iter()
        .enumerate()
        .map(|(i, parents)| {
            check_for_interrupts!();
            let name = format!("{A}[{}]", i + 1);
            let ids: Vec<i64> = serde_json::from_str(parents.get()).unwrap_or_else(|_| {
                errors::invalid_argument(function, &name, "must be an array of job ids")
            });
            distinct_ids(function, &name, &ids);
            edges += ids.len();
            at_most_edges(function, A, edges);
            all.extend(ids.iter().copied());
            ids
        })
        .collect();
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
    at_most_a_batch(function, argument, ids.len());
    let mut seen = std::collections::HashSet::with_capacity(ids.len());
    if !ids.iter().all(|id| seen.insert(*id)) {
        errors::invalid_argument(function, argument, "must not name a job twice");
    }
}

/// An optional array of documents with one element (or NULL) per job, each within the limit.
pub fn documents_per_job(function: &str, argument: &str, docs: Option<&JsonbArray>, jobs: usize) {
    let Some(docs) = docs else { return };
    if docs.len() != jobs {
        errors::invalid_argument(
            function,
            argument,
            "must have one element per job id, or be NULL",
        );
    }
    for (i, doc) in docs.elements().iter().enumerate() {
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
