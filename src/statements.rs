//! The one registry of every SQL statement leaseq runs, with the settings it is planned under
//! (`connect`): the job path's, whose generic plans the plan check below holds to a linear shape,
//! or a whole-queue read's. `spi::run` refuses a statement that is not here, and one registered
//! as a whole-queue read running under the job path's settings; a test fails when a `Statement`
//! is defined in the sources but not registered. The tests that need "every statement of a kind"
//! — fenced, closing an attempt, planned under the job path — derive it from this list, and check
//! that the markers in the sources agree.
use crate::core::release::Release::V0_4_0;
use crate::core::spi::Planning::{JobPath, WholeQueue};
#[cfg(any(test, feature = "pg_test"))]
use crate::core::spi::{Planning, Statement};
use crate::core::spi::{Registered, Twin};
use crate::{admin, compat, core, lifecycle, observe};

/// Every statement, by the folder that defines it.
pub const ALL: &[Registered] = &[
    // core
    (&core::release::READ, JobPath),
    (&core::access::LOAD, WholeQueue),
    (&core::access::QUEUES_OF_JOBS, JobPath),
    // lifecycle
    (&lifecycle::queue::UPSERT, JobPath),
    (&lifecycle::queue::LOAD, JobPath),
    (&lifecycle::queue::NAMES, JobPath),
    (&lifecycle::pause::LOCK, JobPath),
    (&lifecycle::pause::SET, JobPath),
    (&lifecycle::pause::PAUSED, JobPath),
    (&lifecycle::enqueue::INSERT, JobPath),
    (&lifecycle::enqueue::INSERT_DEDUPED, JobPath),
    (&lifecycle::enqueue::INSERT_GROUPED, JobPath),
    (&lifecycle::enqueue::FIND_LIVE_DUPLICATE, JobPath),
    (&lifecycle::enqueue::FIND_RECENT_DUPLICATE, JobPath),
    (&lifecycle::enqueue::FIND_PURGED_DUPLICATE, JobPath),
    (&lifecycle::enqueue::TAKE_BACK, JobPath),
    (&lifecycle::enqueue::REPLACE_PENDING, JobPath),
    (&lifecycle::enqueue::INSERT_BATCH, JobPath),
    (&lifecycle::enqueue::INSERT_BATCH_GROUPED, JobPath),
    (&lifecycle::enqueue::INSERT_BLOCKED, JobPath),
    (&lifecycle::enqueue::INSERT_BATCH_BLOCKED, JobPath),
    (&lifecycle::claim::SETTINGS_AND_EXPIRED, JobPath),
    (&lifecycle::claim::SETTINGS_AND_EXPIRED_IN, JobPath),
    (&lifecycle::claim::RECLAIM, JobPath),
    (&lifecycle::claim::KEEP_EXPIRED, JobPath),
    (&lifecycle::claim::CLAIM, JobPath),
    (&lifecycle::claim::CLAIM_AFTER, JobPath),
    (&lifecycle::claim::CLAIM_SWEEP, JobPath),
    (&lifecycle::claim::CLAIM_BELOW, JobPath),
    (&lifecycle::claim::ATTEMPT_NOS, JobPath),
    (&lifecycle::lease::RENEW, JobPath),
    (&lifecycle::lease::RENEW_BATCH, JobPath),
    (&lifecycle::complete::COMPLETE, JobPath),
    (&lifecycle::complete::COMPLETE_BATCH, JobPath),
    (&lifecycle::complete::COMPLETE_SHARED, JobPath),
    (&lifecycle::fail::LOCK, JobPath),
    (&lifecycle::fail::FAIL, JobPath),
    (&lifecycle::fail::LOCK_BATCH, JobPath),
    (&lifecycle::fail::FAIL_BATCH, JobPath),
    (&lifecycle::snooze::LOCK, JobPath),
    (&lifecycle::snooze::SNOOZE, JobPath),
    (&lifecycle::hand_back::HAND_BACK, JobPath),
    (&lifecycle::step::STEP, JobPath),
    (&lifecycle::step::STEPS, JobPath),
    (&lifecycle::progress::PROGRESS, JobPath),
    (&lifecycle::redrive::REDRIVE, JobPath),
    (&lifecycle::redrive::REDRIVE_ALL, JobPath),
    (&lifecycle::cancel::CANCEL, JobPath),
    (&lifecycle::purge::PURGE, WholeQueue),
    (&lifecycle::purge::PURGE_STEPS_AND_EDGES, WholeQueue),
    (&lifecycle::purge::REMEMBER_KEYS, WholeQueue),
    (&lifecycle::job::EXISTS, JobPath),
    (&lifecycle::job::MISSING, JobPath),
    (&lifecycle::group::LOCK, JobPath),
    (&lifecycle::group::ADMIT, JobPath),
    (&lifecycle::group::GROUPS_OF, JobPath),
    (&lifecycle::group::ENSURE, JobPath),
    (&lifecycle::group::TRY_LOCK, JobPath),
    (&lifecycle::group::UNADMIT, JobPath),
    (&lifecycle::group::WAITING, JobPath),
    (&lifecycle::flow::STATUS, WholeQueue),
    (&lifecycle::depend::READ_PARENTS, JobPath),
    (&lifecycle::depend::LOCK_PARENTS_AT_COMMIT, JobPath),
    (&lifecycle::depend::LINK, JobPath),
    (&lifecycle::depend::CHILDREN, JobPath),
    (&lifecycle::depend::HAND_OVER, JobPath),
    (&lifecycle::depend::HAND_OVER_FROM_OLDEST, JobPath),
    (&lifecycle::depend::LOCK_CHILDREN, JobPath),
    (&lifecycle::depend::RELEASE, JobPath),
    (&lifecycle::depend::END_CHILDREN, JobPath),
    (&lifecycle::depend::REBLOCK, JobPath),
    (&lifecycle::depend::HOLD_BACK_REDRIVEN, JobPath),
    (&lifecycle::schedule::UPSERT, JobPath),
    (&lifecycle::schedule::QUEUE_OF, JobPath),
    (&lifecycle::schedule::DELETE, JobPath),
    (&lifecycle::schedule::LIST, WholeQueue),
    (&lifecycle::schedule::EARLIEST, JobPath),
    (&lifecycle::schedule::DUE, JobPath),
    (&lifecycle::schedule::ENQUEUE_TICK, JobPath),
    (&lifecycle::schedule::ENQUEUE_TICK_BEFORE_0_3_0, JobPath),
    (&lifecycle::schedule::ADVANCE, JobPath),
    (&lifecycle::schedule::ADVANCE_BEFORE_0_3_0, JobPath),
    // observe
    (&observe::stats::STATS, WholeQueue),
    (&observe::stats::COUNTS, WholeQueue),
    (&observe::inspect::JOBS, JobPath),
    (&observe::inspect::PARENTS, JobPath),
    (&observe::inspect::CHILDREN, JobPath),
    (&observe::inspect::DEAD_JOBS, JobPath),
    (&observe::inspect::RUNNING_JOBS, JobPath),
    (&observe::inspect::JOBS_BY_PAYLOAD, JobPath),
    (&observe::inspect::PAYLOADS_INDEXED, JobPath),
    (&observe::inspect::SETTINGS, WholeQueue),
    (&observe::inspect::JOB, JobPath),
    (&observe::inspect::ATTEMPTS, JobPath),
    (&observe::inspect::RESULT, JobPath),
    (&observe::wait::UNFINISHED, JobPath),
    (&observe::metrics::GAUGES, JobPath),
    (&observe::metrics::PROGRESSED, JobPath),
    (&observe::occupancy::WORKERS, WholeQueue),
    (&observe::occupancy::GROUPS, WholeQueue),
    (&observe::horizon::SLOTS, JobPath),
    // admin
    (&admin::grant::GRANT, JobPath),
    (&admin::search::CREATE, WholeQueue),
    (&admin::search::DROP, WholeQueue),
    (&admin::grant::REVOKE, JobPath),
    (&admin::grant::LIST, WholeQueue),
    (&admin::maintenance::QUEUES, JobPath),
    (&admin::maintenance::CAME_DUE, JobPath),
    (&admin::maintenance::WAKE, JobPath),
    (&admin::maintenance::RETAINING, WholeQueue),
    // compat
    (&compat::COMPLETE_INTO_HISTORY, JobPath),
    (&compat::COMPLETE_BATCH_INTO_HISTORY, JobPath),
    (&compat::UPSERT_WITHOUT_RETENTION, JobPath),
    (&compat::JOB_WITHOUT_SNOOZES, JobPath),
    (&compat::JOB_WITHOUT_PROGRESS, JobPath),
    (&compat::STATS_WITHOUT_SNOOZES, WholeQueue),
    (&compat::JOBS_OF_ONE_QUEUE, WholeQueue),
    (&compat::SCHEDULES_WITHOUT_LAST_JOB, WholeQueue),
    (&compat::INSERT_UNTRACED, JobPath),
    (&compat::INSERT_DEDUPED_UNTRACED, JobPath),
    (&compat::INSERT_GROUPED_UNTRACED, JobPath),
    (&compat::INSERT_BATCH_UNTRACED, JobPath),
    (&compat::INSERT_BATCH_GROUPED_UNTRACED, JobPath),
    (&compat::UPSERT_SCHEDULE_UNTRACED, JobPath),
    (&compat::CLAIM_UNTRACED, JobPath),
    (&compat::CLAIM_AFTER_UNTRACED, JobPath),
    (&compat::CLAIM_SWEEP_UNTRACED, JobPath),
    (&compat::CLAIM_BELOW_UNTRACED, JobPath),
    (&compat::before_0_4_0::CLAIM_0_3_0, JobPath),
    (&compat::before_0_4_0::CLAIM_AFTER_0_3_0, JobPath),
    (&compat::before_0_4_0::CLAIM_SWEEP_0_3_0, JobPath),
    (&compat::before_0_4_0::CLAIM_BELOW_0_3_0, JobPath),
    (&compat::before_0_4_0::SETTINGS_AND_EXPIRED_0_3_0, JobPath),
    (
        &compat::before_0_4_0::SETTINGS_AND_EXPIRED_IN_0_3_0,
        JobPath,
    ),
    (&compat::before_0_4_0::KEEP_EXPIRED_0_3_0, JobPath),
    (&compat::before_0_4_0::CAME_DUE_0_3_0, JobPath),
    (&compat::before_0_4_0::INSERT_DEDUPED_0_3_0, JobPath),
    (&compat::before_0_4_0::INSERT_GROUPED_0_3_0, JobPath),
    (&compat::before_0_4_0::FIND_LIVE_DUPLICATE_0_3_0, JobPath),
    (&compat::before_0_4_0::FIND_RECENT_DUPLICATE_0_3_0, JobPath),
    (&compat::before_0_4_0::INSERT_BATCH_GROUPED_0_3_0, JobPath),
    (&compat::before_0_4_0::ADMIT_0_3_0, JobPath),
    (&compat::before_0_4_0::WAITING_0_3_0, JobPath),
    (&compat::before_0_4_0::REDRIVE_ALL_0_3_0, JobPath),
    (&compat::before_0_4_0::DEAD_JOBS_0_3_0, JobPath),
    (&compat::before_0_4_0::GROUPS_0_3_0, WholeQueue),
    (&compat::before_0_4_0::RENEW_0_3_0, JobPath),
    (&compat::before_0_4_0::RENEW_BATCH_0_3_0, JobPath),
    (&compat::before_0_4_0::RUNNING_JOBS_0_3_0, JobPath),
    (&compat::before_0_4_0::GAUGES_0_3_0, JobPath),
    (&compat::before_0_4_0::PROGRESSED_0_3_0, JobPath),
    (&compat::before_0_4_0::WORKERS_0_3_0, WholeQueue),
    // the tests' own
    #[cfg(any(test, feature = "pg_test"))]
    (&core::connect::tests::TWO_COLUMNS, JobPath),
    #[cfg(any(test, feature = "pg_test"))]
    (&core::connect::tests::WHOLE_QUEUE_READ, WholeQueue),
];

/// The statements whose text 0.4.0 changed, each with the text that a database still at an older
/// schema runs in its place (`spi::run`).
pub const TWINS: &[Twin] = &[
    (
        &lifecycle::claim::CLAIM,
        V0_4_0,
        &compat::before_0_4_0::CLAIM_0_3_0,
    ),
    (
        &lifecycle::claim::CLAIM_AFTER,
        V0_4_0,
        &compat::before_0_4_0::CLAIM_AFTER_0_3_0,
    ),
    (
        &lifecycle::claim::CLAIM_SWEEP,
        V0_4_0,
        &compat::before_0_4_0::CLAIM_SWEEP_0_3_0,
    ),
    (
        &lifecycle::claim::CLAIM_BELOW,
        V0_4_0,
        &compat::before_0_4_0::CLAIM_BELOW_0_3_0,
    ),
    (
        &lifecycle::claim::SETTINGS_AND_EXPIRED,
        V0_4_0,
        &compat::before_0_4_0::SETTINGS_AND_EXPIRED_0_3_0,
    ),
    (
        &lifecycle::claim::SETTINGS_AND_EXPIRED_IN,
        V0_4_0,
        &compat::before_0_4_0::SETTINGS_AND_EXPIRED_IN_0_3_0,
    ),
    (
        &lifecycle::claim::KEEP_EXPIRED,
        V0_4_0,
        &compat::before_0_4_0::KEEP_EXPIRED_0_3_0,
    ),
    (
        &lifecycle::lease::RENEW,
        V0_4_0,
        &compat::before_0_4_0::RENEW_0_3_0,
    ),
    (
        &lifecycle::lease::RENEW_BATCH,
        V0_4_0,
        &compat::before_0_4_0::RENEW_BATCH_0_3_0,
    ),
    (
        &observe::inspect::RUNNING_JOBS,
        V0_4_0,
        &compat::before_0_4_0::RUNNING_JOBS_0_3_0,
    ),
    (
        &observe::metrics::GAUGES,
        V0_4_0,
        &compat::before_0_4_0::GAUGES_0_3_0,
    ),
    (
        &observe::metrics::PROGRESSED,
        V0_4_0,
        &compat::before_0_4_0::PROGRESSED_0_3_0,
    ),
    (
        &observe::occupancy::WORKERS,
        V0_4_0,
        &compat::before_0_4_0::WORKERS_0_3_0,
    ),
    (
        &admin::maintenance::CAME_DUE,
        V0_4_0,
        &compat::before_0_4_0::CAME_DUE_0_3_0,
    ),
    (
        &lifecycle::enqueue::INSERT_DEDUPED,
        V0_4_0,
        &compat::before_0_4_0::INSERT_DEDUPED_0_3_0,
    ),
    (
        &lifecycle::enqueue::INSERT_GROUPED,
        V0_4_0,
        &compat::before_0_4_0::INSERT_GROUPED_0_3_0,
    ),
    (
        &lifecycle::enqueue::FIND_LIVE_DUPLICATE,
        V0_4_0,
        &compat::before_0_4_0::FIND_LIVE_DUPLICATE_0_3_0,
    ),
    (
        &lifecycle::enqueue::FIND_RECENT_DUPLICATE,
        V0_4_0,
        &compat::before_0_4_0::FIND_RECENT_DUPLICATE_0_3_0,
    ),
    (
        &lifecycle::enqueue::INSERT_BATCH_GROUPED,
        V0_4_0,
        &compat::before_0_4_0::INSERT_BATCH_GROUPED_0_3_0,
    ),
    (
        &lifecycle::group::ADMIT,
        V0_4_0,
        &compat::before_0_4_0::ADMIT_0_3_0,
    ),
    (
        &lifecycle::group::WAITING,
        V0_4_0,
        &compat::before_0_4_0::WAITING_0_3_0,
    ),
    (
        &lifecycle::redrive::REDRIVE_ALL,
        V0_4_0,
        &compat::before_0_4_0::REDRIVE_ALL_0_3_0,
    ),
    (
        &observe::inspect::DEAD_JOBS,
        V0_4_0,
        &compat::before_0_4_0::DEAD_JOBS_0_3_0,
    ),
    (
        &observe::occupancy::GROUPS,
        V0_4_0,
        &compat::before_0_4_0::GROUPS_0_3_0,
    ),
];

/// The statements registered as planned under `planning`, but compat's, which `ALL` lists last:
/// they run on older schemas only, and may not even prepare on this release's.
#[cfg(any(test, feature = "pg_test"))]
fn planned_under(planning: Planning) -> impl Iterator<Item = &'static Statement> {
    let compat = ALL
        .iter()
        .position(|(s, _)| s.name == compat::COMPLETE_INTO_HISTORY.name)
        .expect("compat's first statement");
    ALL[..compat]
        .iter()
        .filter(move |(_, p)| *p == planning)
        .map(|(s, _)| *s)
}

/// The statements whose text carries `marker`.
#[cfg(test)]
fn marked(marker: &str) -> Vec<&'static Statement> {
    ALL.iter()
        .map(|(s, _)| *s)
        .filter(|s| s.sql.contains(marker))
        .collect()
}

#[cfg(test)]
mod unit_tests {
    use std::collections::BTreeSet;

    use super::{ALL, marked};
    use crate::rules::{non_test_code, sources};

    /// Whitespace collapsed, so that layout does not matter.
    fn normalized(sql: &str) -> String {
        sql.split_whitespace().collect::<Vec<_>>().join(" ")
    }

    /// Each `Statement` the sources define outside their tests, by its `name`.
    fn defined() -> BTreeSet<String> {
        let mut names = BTreeSet::new();
        for (path, source) in sources() {
            let code = non_test_code(&source);
            for piece in code.split(": Statement = Statement {").skip(1) {
                let name = piece
                    .split_once("name: \"")
                    .and_then(|(_, rest)| rest.split_once('"'))
                    .unwrap_or_else(|| panic!("{path}: a Statement without a name"))
                    .0;
                assert!(
                    names.insert(name.to_string()),
                    "{path}: statement {name} twice"
                );
            }
        }
        names
    }

    #[test]
    fn every_statement_the_sources_define_is_registered_once() {
        let registered: Vec<&str> = ALL
            .iter()
            .map(|(s, _)| s.name)
            .filter(|name| !name.starts_with("test "))
            .collect();
        let unique: BTreeSet<String> = registered.iter().map(|n| n.to_string()).collect();
        assert_eq!(
            unique.len(),
            registered.len(),
            "a statement registered twice"
        );
        assert_eq!(unique, defined(), "src/statements.rs against the sources");
    }

    const FENCE: &str = "-- the fence (lease.rs)";
    const CLOSES: &str = "-- the attempt closes (history.rs)";
    const CLOSES_ON_ROW: &str = "-- the attempt closes on the job's row (history.rs)";

    /// SQL lines of the sources that open with `marker` (not the prose or these tests).
    fn marker_lines(marker: &str) -> usize {
        sources()
            .values()
            .map(|source| {
                source
                    .lines()
                    .filter(|line| line.trim_start().starts_with(marker))
                    .count()
            })
            .sum()
    }

    #[test]
    fn every_marked_statement_is_registered() {
        for marker in [FENCE, CLOSES, CLOSES_ON_ROW] {
            assert_eq!(marker_lines(marker), marked(marker).len(), "{marker}");
        }
        assert!(marked(FENCE).len() >= 12 && marked(CLOSES).len() >= 7);
    }

    #[test]
    fn every_fenced_statement_spells_the_fence_whole() {
        for statement in marked(FENCE) {
            let sql = normalized(statement.sql);
            let (before, after) = sql.split_once(FENCE).expect("marked");
            // `job.id = <job>`, or `job.id = ANY (<jobs>)` where the jobs share their token.
            let job: Vec<&str> = before.trim_end().rsplit(' ').take(4).collect();
            assert!(
                job[1..3] == ["=", "job.id"] || job[1..] == ["ANY", "=", "job.id"],
                "{}: job.id = <job>",
                statement.name
            );
            let words: Vec<&str> = after.split(' ').collect();
            let shape = [
                "AND",
                "job.lease_token",
                "=",
                "_",
                "AND",
                "job.status",
                "=",
                "'running'",
                "AND",
                "job.lease_expires_at",
                ">",
                "_",
            ];
            assert!(
                words.len() > shape.len()
                    && shape
                        .iter()
                        .zip(&words[1..])
                        .all(|(s, w)| *s == "_" || s == w),
                "{}: the fence, whole: {after}",
                statement.name
            );
        }
    }

    const NUMBERING: &str = "coalesce((SELECT max(earlier.attempt_no) FROM \
                             leaseq.closed_attempts AS earlier WHERE earlier.job_id = ";

    #[test]
    fn every_closing_statement_writes_the_same_history_columns_and_numbering() {
        let insert = "INSERT INTO leaseq.closed_attempts (job_id, attempt_no, lease_token, \
                      worker, started_at, ended_at, outcome, error) SELECT ";
        for statement in marked(CLOSES) {
            let sql = normalized(statement.sql);
            let (_, rest) = sql
                .split_once(insert)
                .unwrap_or_else(|| panic!("{}: the closing INSERT, whole", statement.name));
            let (closing, rest) = rest
                .split_once(".id, ")
                .unwrap_or_else(|| panic!("{}: job_id from the closing rows", statement.name));
            let numbered = format!("{NUMBERING}{closing}.id), 0) + 1, ");
            assert!(
                rest.starts_with(&numbered),
                "{}: attempt_no numbered as claim numbers it: {rest}",
                statement.name
            );
            let worker = format!("{closing}.worker, {closing}.started_at, ");
            assert!(
                rest.contains(&worker),
                "{}: worker and started_at from the job's row",
                statement.name
            );
        }
    }

    #[test]
    fn every_success_keeps_its_attempt_on_the_job_row() {
        let succeeding = marked(CLOSES_ON_ROW);
        assert_eq!(
            succeeding.len(),
            3,
            "complete, complete_batch and its shared-token form"
        );
        for statement in succeeding {
            let sql = normalized(statement.sql);
            assert!(
                sql.contains("SET status = 'succeeded'"),
                "{}",
                statement.name
            );
            assert!(
                sql.contains("finished_at = $"),
                "{}: its end",
                statement.name
            );
            assert!(
                !sql.contains("lease_token = NULL"),
                "{}: keeps the token, the attempt's record",
                statement.name
            );
            assert!(!sql.contains("closed_attempts"), "{}", statement.name);
        }
    }

    #[test]
    fn only_closing_statements_write_history_and_all_number_alike() {
        let writing: Vec<&str> = ALL
            .iter()
            .filter(|(s, _)| normalized(s.sql).contains("INSERT INTO leaseq.closed_attempts"))
            .map(|(s, _)| s.name)
            .collect();
        let closing: Vec<&str> = marked(CLOSES).iter().map(|s| s.name).collect();
        assert_eq!(
            writing, closing,
            "a statement that writes history says it closes"
        );
        // The closing statements, claim's numbering and the attempts view: one expression.
        let numbering = |text: &str| normalized(text).matches(NUMBERING).count();
        let in_statements: usize = ALL.iter().map(|(s, _)| numbering(s.sql)).sum();
        assert_eq!(
            in_statements,
            closing.len() + 1,
            "closing statements and claim"
        );
        assert_eq!(
            numbering(include_str!("../sql/schema.sql")),
            1,
            "the attempts view"
        );
        for (_, source) in sources() {
            assert_eq!(source.matches(concat!("max(", "attempt_no)")).count(), 0);
        }
    }
}

#[cfg(any(test, feature = "pg_test"))]
#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use super::Planning;
    use crate::core::connect::{self, JOB_PATH};

    /// The plan shape whose cost grows with the square of a batch: a nested loop that, for each
    /// of several outer rows, rescans a whole set (a CTE, a function's rows, a materialised
    /// result, a table) instead of looking up a key. The job path rules out hash and merge
    /// joins, so any join of two sets in a batch statement takes this shape. A primary-key
    /// lookup (the queue's settings row: an index condition) on either side is a constant, not
    /// a set — a walk of a whole index, its rows filtered, is a set; row estimates
    /// are not trusted (a CTE over `RETURNING`, or a partial index that statistics describe as
    /// empty, is guessed at one row). A LATERAL subquery with a LIMIT over an index (a group's
    /// oldest waiting jobs), or aggregating what an index condition finds (a child's edges), is
    /// a lookup per outer row, not a set.
    const QUADRATIC_LOOPS: &str = "
        SELECT coalesce(string_agg(outer_side->>'Node Type' || ' × '
                                   || (inner_side->>'Node Type'), '; '), '')
          FROM jsonb_path_query($1::jsonb, 'lax $.**') AS loop,
               LATERAL (SELECT loop->'Plans'->0 AS outer_side, loop->'Plans'->1 AS inner_side) AS s
         WHERE loop->>'Node Type' = 'Nested Loop'
           AND NOT (outer_side->>'Node Type' IN ('Index Scan', 'Index Only Scan')
                    AND outer_side->>'Index Name' LIKE '%\\_pkey'
                    AND outer_side ? 'Index Cond')
           AND (inner_side->>'Node Type' IN ('CTE Scan', 'Function Scan', 'Materialize',
                                             'Seq Scan', 'Values Scan', 'Subquery Scan',
                                             'WorkTable Scan')
                -- an index walked whole, its rows filtered, for each outer row
                OR (inner_side->>'Node Type' IN ('Index Scan', 'Index Only Scan')
                    AND NOT inner_side ? 'Index Cond'))
           -- the elements of the outer row's own array (a lease row's jobs): each once
           AND NOT (inner_side->>'Node Type' = 'Function Scan'
                    AND inner_side->>'Function Call' ~ '^unnest\\(\\w+\\.\\w+\\)$')
           AND NOT (inner_side->>'Node Type' = 'Materialize'
                    AND inner_side->'Plans'->0->>'Node Type' IN ('Index Scan', 'Index Only Scan')
                    AND inner_side->'Plans'->0->>'Index Name' LIKE '%\\_pkey')
           AND NOT (inner_side->>'Node Type' = 'Subquery Scan'
                    AND inner_side->'Plans'->0->>'Node Type' = 'Limit'
                    AND EXISTS (SELECT FROM jsonb_array_elements(inner_side->'Plans'->0->'Plans')
                                               AS below
                                 WHERE below->>'Parent Relationship' = 'Outer'
                                   AND below->>'Node Type'
                                       IN ('LockRows', 'Index Scan', 'Index Only Scan')))
           AND NOT (inner_side->>'Node Type' = 'Subquery Scan'
                    AND inner_side->'Plans'->0->>'Node Type' = 'Aggregate'
                    AND EXISTS (SELECT FROM jsonb_array_elements(inner_side->'Plans'->0->'Plans')
                                               AS below
                                 WHERE (below->>'Node Type' IN ('Index Scan', 'Index Only Scan')
                                        AND below ? 'Index Cond')
                                    OR (below->>'Node Type' = 'Bitmap Heap Scan'
                                        AND below ? 'Recheck Cond')))";

    /// Guards linear batch statements: every job-path statement's generic plan, made under
    /// the job path's settings, is free of [`QUADRATIC_LOOPS`] — planned once with the
    /// statistics of a queue where nothing has run yet (as after a deploy, before autovacuum
    /// analyses again: partial indexes look empty), and once with those of a busy queue (jobs
    /// pending, running, succeeded, dead, with history). (Whole-queue statements keep the
    /// planner's hash and merge joins, which adapt to the sizes it sees.)
    #[pg_test]
    fn no_statement_plans_a_loop_that_rescans_a_set_per_row() {
        // The TRUNCATE below, taken first: escalating to it from the row locks of this test's
        // enqueues deadlocked with a test running beside it that escalates the same way to build
        // an index (`console_pages_start_from_their_indexes`; CI on PostgreSQL 17).
        Spi::run(
            "LOCK TABLE leaseq.jobs, leaseq.closed_attempts, leaseq.groups, leaseq.job_parents
                 IN ACCESS EXCLUSIVE MODE",
        )
        .unwrap();
        Spi::run("SELECT leaseq.queue_create('plans', max_attempts => 2)").unwrap();
        Spi::run(
            "SELECT count(*) FROM leaseq.queue_enqueue_batch('plans',
                 ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 4000)))",
        )
        .unwrap();
        Spi::run("ANALYZE leaseq.jobs, leaseq.closed_attempts, leaseq.queues").unwrap();
        assert_no_quadratic_loops("nothing run yet");

        Spi::run(
            "CREATE TEMP TABLE claimed AS SELECT * FROM leaseq.queue_claim('plans', 'w', 3000)",
        )
        .unwrap();
        for finish in [
            "SELECT count(*) FROM leaseq.queue_complete_batch(
                 (SELECT array_agg(job_id) FROM claimed WHERE job_id % 3 = 0),
                 (SELECT array_agg(lease_token) FROM claimed WHERE job_id % 3 = 0))",
            "SELECT count(*) FROM leaseq.queue_fail_batch(
                 (SELECT array_agg(job_id) FROM claimed WHERE job_id % 3 = 1),
                 (SELECT array_agg(lease_token) FROM claimed WHERE job_id % 3 = 1),
                 retry => false)",
        ] {
            Spi::run(finish).unwrap();
        }
        // Dependencies: a fan-in of 500 parents, and 500 chains of one.
        Spi::run(
            "SELECT leaseq.queue_enqueue('plans', '{}', depends_on => ARRAY(
                 SELECT id FROM leaseq.jobs WHERE queue = 'plans' ORDER BY id LIMIT 500))",
        )
        .unwrap();
        Spi::run(
            "SELECT count(leaseq.queue_enqueue('plans', '{}', depends_on => ARRAY[id]))
               FROM leaseq.jobs WHERE queue = 'plans' AND id % 7 = 0",
        )
        .unwrap();
        Spi::run("ANALYZE leaseq.jobs, leaseq.closed_attempts, leaseq.queues, leaseq.job_parents")
            .unwrap();
        assert_no_quadratic_loops("a busy queue");

        // Emptied and filled again, not analysed since (a TRUNCATE, then a backlog, before
        // autovacuum comes by): the planner knows only the table's size. (The children linked
        // above are read again at commit, by a deferred trigger: run it now, or TRUNCATE refuses.)
        Spi::run("SET CONSTRAINTS ALL IMMEDIATE").unwrap();
        Spi::run("TRUNCATE leaseq.jobs, leaseq.closed_attempts, leaseq.groups, leaseq.job_parents")
            .unwrap();
        Spi::run(
            "SELECT count(*) FROM leaseq.queue_enqueue_batch('plans',
                 ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 4000)))",
        )
        .unwrap();
        assert_no_quadratic_loops("a table emptied and refilled since it was analysed");
    }

    /// `statement`'s generic plan under the job path's settings, as JSON (`EXPLAIN`).
    fn generic_plan(statement: &super::Statement) -> String {
        connect::connect(&JOB_PATH, |client| {
            let types: Vec<String> = statement
                .params
                .iter()
                .map(|oid| {
                    Spi::get_one_with_args::<String>(
                        "SELECT format_type($1, NULL)",
                        &[oid.value().into()],
                    )
                    .unwrap()
                    .unwrap()
                })
                .collect();
            // `name(…)` only with parameters: `PREPARE name() AS …` is a syntax error.
            let (types, nulls) = if types.is_empty() {
                (String::new(), String::new())
            } else {
                let nulls = vec!["NULL"; types.len()].join(", ");
                (format!("({})", types.join(", ")), format!("({nulls})"))
            };
            let prepare = format!("PREPARE plan_check{types} AS {}", statement.sql);
            client.update(prepare.as_str(), None, &[]).unwrap();
            let explain = format!("EXPLAIN (FORMAT JSON, VERBOSE) EXECUTE plan_check{nulls}");
            let plan = client
                .update(explain.as_str(), None, &[])
                .unwrap()
                .first()
                .get_one::<pgrx::datum::JsonString>()
                .unwrap()
                .unwrap();
            client.update("DEALLOCATE plan_check", None, &[]).unwrap();
            plan.0
        })
    }

    /// The console's pages of dead jobs and of payload matches start from their indexes, so
    /// that a page costs the same however long the history (docs/benchmarks.md, section 17):
    /// dead jobs' ids from `jobs_dead_idx` alone, backwards; payload matches from
    /// `jobs_payload_idx` once made, never ANDed with a walk of `jobs_pkey` below the cursor.
    #[pg_test]
    fn console_pages_start_from_their_indexes() {
        use crate::observe::inspect::{DEAD_JOBS, JOBS_BY_PAYLOAD};
        Spi::run("SELECT leaseq.queue_create('pages')").unwrap();
        Spi::run(
            "SELECT count(*) FROM leaseq.queue_enqueue_batch('pages',
                 ARRAY(SELECT jsonb_build_object('customer', i % 100)
                         FROM generate_series(1, 4000) AS i))",
        )
        .unwrap();
        Spi::run("SELECT leaseq.queue_index_payloads(true)").unwrap();
        Spi::run("ANALYZE leaseq.jobs, leaseq.queues").unwrap();
        let dead = generic_plan(&DEAD_JOBS);
        assert!(
            dead.contains(r#""Node Type": "Index Only Scan""#)
                && dead.contains(r#""Scan Direction": "Backward""#)
                && dead.contains(r#""Index Name": "jobs_dead_idx""#),
            "{dead}"
        );
        let by_payload = generic_plan(&JOBS_BY_PAYLOAD);
        assert!(
            by_payload.contains(r#""Index Name": "jobs_payload_idx""#)
                && !by_payload.contains(r#""Index Name": "jobs_pkey""#),
            "{by_payload}"
        );
    }

    fn assert_no_quadratic_loops(statistics: &str) {
        let mut found = Vec::new();
        for statement in super::planned_under(Planning::JobPath) {
            let plan = generic_plan(statement);
            let loops = Spi::get_one_with_args::<String>(QUADRATIC_LOOPS, &[plan.as_str().into()])
                .unwrap()
                .unwrap_or_default();
            if !loops.is_empty() {
                found.push(format!("{} ({loops}): {plan}", statement.name));
            }
        }
        // Every statement that fails, not only the first.
        assert!(
            found.is_empty(),
            "with the statistics of {statistics}:\n{}",
            found.join("\n")
        );
    }
}
