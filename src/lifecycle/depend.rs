//! Dependencies: `blocked` → `pending` in the transaction that finishes the last parent.
//!
//! A job enqueued with parents is `blocked` (in none of the indexes a claim walks) and has one
//! edge per parent in `leaseq.job_parents`, whose `outcome` is NULL while that parent is live.
//! Enqueue locks the parents' rows (`FOR SHARE`) while it reads them, so a parent cannot finish
//! between that read and the edge's commit: a parent already final counts at once; any other
//! finishes after the edge exists, and its finishing transaction writes the edge's outcome.
//!
//! **Exactly once, without a hot row** (docs/design.md has the argument). A finishing parent
//! writes its own edges, then for each child either hands the release over or takes it:
//! - it locks another waiting edge of the child that nobody holds ([`HAND_OVER`], `SKIP
//!   LOCKED`): that edge's parent has not begun to finish, and its finish must wait for this
//!   transaction to end (its edge update waits for the lock) — so it will see this edge
//!   written, and decide in turn;
//! - when no such edge is left (the child's remaining edges are all being finished right now),
//!   it locks the child's row and looks again in a new statement, whose snapshot is taken after
//!   the lock: the last of these to lock sees every other finish committed, and releases.
//!
//! Only the last few finishers of a fan-in, as many as finish at once, take the child's lock.
//!
//! **A parent that fails** (dead or cancelled) applies its children's `on_parent_failure`:
//! `cancel` and `dead` end the child — and, through its own edges, its descendants — at once;
//! `run` counts the edge as final. Redriving a dead parent sets its failed edges waiting again
//! and brings back to `blocked` the children that went dead only because of it.
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

use crate::core::counters::{self, Event};
use crate::core::datum::ParentFailure;
use crate::core::errors;
use crate::core::release::{self, Release};
use crate::core::settings;
use crate::core::spi::{self, BOOL, INT8, INT8_ARRAY, Statement, TEXT, TEXT_ARRAY, TIMESTAMPTZ};
use crate::lifecycle::job;

/// The parents `$1` that exist, in id order under a share lock (the lock order of finishing
/// parents), each with its outcome if it is final: the lock holds a parent that is not from
/// finishing until the edges commit, so its finish will see them.
pub(crate) const LOCK_PARENTS: Statement = Statement {
    name: "depend.lock_parents",
    sql: "SELECT job.id, CASE WHEN job.finished_at IS NOT NULL THEN job.status::text END
            FROM leaseq.jobs AS job
           WHERE job.id = ANY ($1)
           ORDER BY job.id
             FOR SHARE OF job",
    params: &[INT8_ARRAY],
};

/// An edge from each of the new children `$1` to each parent `$2`, with its outcome `$3` (NULL:
/// the parent is live).
pub(crate) const LINK: Statement = Statement {
    name: "depend.link",
    sql: "INSERT INTO leaseq.job_parents (child_id, parent_id, on_parent_failure, outcome)
          SELECT child.id, parent.id, $4::leaseq.parent_failure,
                 parent.outcome::leaseq.job_status
            FROM unnest($1::bigint[]) AS child (id),
                 unnest($2::bigint[], $3::text[]) AS parent (id, outcome)",
    params: &[INT8_ARRAY, INT8_ARRAY, TEXT_ARRAY, TEXT],
};

/// The finished parents `$1` write their outcome (their own final status) on their waiting
/// edges. One row per edge: the child, and whether this ends it (the parent failed, and the
/// child does not run anyway).
pub(crate) const FINISH_EDGES: Statement = Statement {
    name: "depend.finish_edges",
    sql: "UPDATE leaseq.job_parents AS edge
             SET outcome = parent.status
            FROM leaseq.jobs AS parent
           WHERE edge.parent_id = ANY ($1) AND edge.outcome IS NULL
             AND parent.id = edge.parent_id AND parent.finished_at IS NOT NULL
          RETURNING edge.child_id,
                    edge.outcome <> 'succeeded' AND edge.on_parent_failure <> 'run'",
    params: &[INT8_ARRAY],
};

/// Another waiting edge of the child `$1` that no transaction holds: its parent's finish will
/// wait for this transaction, then decide (see the module comment). The newest parent first:
/// parents are claimed oldest first, so it is the one furthest from finishing.
pub(crate) const HAND_OVER: Statement = Statement {
    name: "depend.hand_over",
    sql: "SELECT edge.parent_id FROM leaseq.job_parents AS edge
           WHERE edge.child_id = $1 AND edge.outcome IS NULL
           ORDER BY edge.parent_id DESC
           LIMIT 1
             FOR NO KEY UPDATE SKIP LOCKED",
    params: &[INT8],
};

/// Locks the child `$1` if it is still blocked, before [`RELEASE`] looks again.
pub(crate) const LOCK_CHILD: Statement = Statement {
    name: "depend.lock_child",
    sql: "SELECT 1 FROM leaseq.jobs AS job
           WHERE job.id = $1 AND job.status = 'blocked'
             FOR NO KEY UPDATE",
    params: &[INT8],
};

/// The locked child `$1` becomes pending if every parent is final and none failed (or it runs
/// anyway): in a statement of its own, whose snapshot sees every finish committed before the lock.
pub(crate) const RELEASE: Statement = Statement {
    name: "depend.release",
    sql: "UPDATE leaseq.jobs AS job
             SET status = 'pending', updated_at = $2
           WHERE job.id = $1 AND job.status = 'blocked'
             AND NOT EXISTS (
                 SELECT FROM leaseq.job_parents AS edge
                  WHERE edge.child_id = $1
                    AND (edge.outcome IS NULL
                         OR (edge.outcome <> 'succeeded' AND edge.on_parent_failure <> 'run')))
          RETURNING CASE WHEN $3 THEN pg_catalog.pg_notify('leaseq_' || job.queue, '') END",
    params: &[INT8, TIMESTAMPTZ, BOOL],
};

/// The blocked child `$1` has a failed parent and does not run anyway: it ends `cancelled` or
/// `dead`, as its policy says (the same on all its edges), naming the failed parents.
pub(crate) const END_CHILD: Statement = Statement {
    name: "depend.end_child",
    sql: "UPDATE leaseq.jobs AS job
             SET status = CASE failed.policy WHEN 'dead' THEN 'dead' ELSE 'cancelled' END
                              ::leaseq.job_status,
                 last_error = pg_catalog.jsonb_build_object('error', 'a parent failed',
                                                            'failed_parents', failed.parents),
                 updated_at = $2,
                 finished_at = $2
            FROM (SELECT edge.on_parent_failure AS policy,
                         pg_catalog.jsonb_agg(edge.parent_id ORDER BY edge.parent_id) AS parents
                    FROM leaseq.job_parents AS edge
                   WHERE edge.child_id = $1 AND edge.outcome <> 'succeeded'
                     AND edge.on_parent_failure <> 'run'
                   GROUP BY edge.on_parent_failure) AS failed
           WHERE job.id = $1 AND job.status = 'blocked'
          RETURNING job.queue, job.status = 'dead'",
    params: &[INT8, TIMESTAMPTZ],
};

/// Redriven parents `$1`: their failed edges wait again. One row per edge whose child went
/// `dead` or is still blocked — the children that may wait for them again.
pub(crate) const REOPEN_EDGES: Statement = Statement {
    name: "depend.reopen_edges",
    sql: "UPDATE leaseq.job_parents AS edge
             SET outcome = NULL
            FROM leaseq.jobs AS child
           WHERE edge.parent_id = ANY ($1) AND edge.outcome = 'dead'
             AND child.id = edge.child_id
             AND (child.status = 'blocked'
                  OR (child.status = 'dead' AND edge.on_parent_failure = 'dead'))
          RETURNING edge.child_id",
    params: &[INT8_ARRAY],
};

/// The dead children `$1` that no other failed parent holds dead: `blocked` again.
pub(crate) const REBLOCK: Statement = Statement {
    name: "depend.reblock",
    sql: "UPDATE leaseq.jobs AS job
             SET status = 'blocked', updated_at = $2, finished_at = NULL
           WHERE job.id = ANY ($1) AND job.status = 'dead'
             AND NOT EXISTS (
                 SELECT FROM leaseq.job_parents AS edge
                  WHERE edge.child_id = job.id AND edge.outcome <> 'succeeded'
                    AND edge.on_parent_failure <> 'run')
          RETURNING job.id",
    params: &[INT8_ARRAY, TIMESTAMPTZ],
};

/// The parents of a job about to be enqueued, read under their share locks (see
/// [`LOCK_PARENTS`]): each with its outcome if it is final. `42704` names the first of `parents`
/// that no job has — before anything is inserted. A parent must exist before its child, so
/// every edge points back in time and no cycle can be built, not even a job on itself: a
/// parent's id was given before its commit, which this read saw, and the child's is given after.
pub(crate) fn lock_parents(
    client: &mut SpiClient<'_>,
    function: &str,
    parents: &[i64],
) -> Vec<(i64, Option<String>)> {
    let found: Vec<(i64, Option<String>)> =
        spi::run(client, &LOCK_PARENTS, &[parents.to_vec().into()])
            .map(|row| (row.required(1), row.get(2)));
    if found.len() != parents.len() {
        match job::first_missing(client, parents) {
            Some(missing) => errors::unknown_parent(function, missing),
            None => errors::internal(function, "a parent was seen but not locked"),
        }
    }
    found
}

/// Links the new `blocked` jobs `children` to their `parents` (from [`lock_parents`]), and
/// settles them at once if the parents allow.
pub(crate) fn link(
    client: &mut SpiClient<'_>,
    children: &[i64],
    parents: Vec<(i64, Option<String>)>,
    policy: ParentFailure,
    now: TimestampWithTimeZone,
) {
    let waiting = parents.iter().any(|(_, outcome)| outcome.is_none());
    let failed = parents
        .iter()
        .any(|(_, outcome)| outcome.as_deref().is_some_and(|o| o != "succeeded"));
    let (ids, outcomes): (Vec<i64>, Vec<Option<String>>) = parents.into_iter().unzip();
    spi::run(
        client,
        &LINK,
        &[
            children.to_vec().into(),
            ids.into(),
            outcomes.into(),
            policy.label().into(),
        ],
    );
    if waiting && !failed {
        return;
    }
    let mut ended = Vec::new();
    for &child in children {
        decide(client, &mut ended, child, now);
    }
    finished(client, &ended, now);
}

/// Jobs `ids` just became final (succeeded, dead or cancelled) in this transaction: their
/// children learn it, and the children this ends, theirs. Nothing on a schema without
/// dependencies (before 0.3.0).
pub(crate) fn finished(client: &mut SpiClient<'_>, ids: &[i64], now: TimestampWithTimeZone) {
    if ids.is_empty() || release::current(client) < Release::V0_3_0 {
        return;
    }
    let mut ended = ids.to_vec();
    while !ended.is_empty() {
        let mut edges: Vec<(i64, bool)> =
            spi::run(client, &FINISH_EDGES, &[std::mem::take(&mut ended).into()])
                .map(|row| (row.required(1), row.required(2)));
        // Children in id order (the lock order of children), a failed edge first.
        edges.sort_by_key(|&(child, ends)| (child, !ends));
        edges.dedup_by_key(|&mut (child, _)| child);
        for (child, ends) in edges {
            if ends {
                end_child(client, &mut ended, child, now);
            } else if spi::run(client, &HAND_OVER, &[child.into()]).is_empty() {
                decide(client, &mut ended, child, now);
            }
        }
    }
}

/// Under the child's lock, in statements whose snapshots see every finish committed before it:
/// releases the child if its parents allow, or ends it if a failed parent's policy says so.
fn decide(
    client: &mut SpiClient<'_>,
    ended: &mut Vec<i64>,
    child: i64,
    now: TimestampWithTimeZone,
) {
    if spi::run(client, &LOCK_CHILD, &[child.into()]).is_empty() {
        return;
    }
    let notify = settings::notify();
    if spi::run(client, &RELEASE, &[child.into(), now.into(), notify.into()]).is_empty() {
        end_child(client, ended, child, now);
    }
}

/// [`END_CHILD`]; an ended child joins `ended`, whose children learn it next.
fn end_child(
    client: &mut SpiClient<'_>,
    ended: &mut Vec<i64>,
    child: i64,
    now: TimestampWithTimeZone,
) {
    let dead = spi::run(client, &END_CHILD, &[child.into(), now.into()])
        .first(|row| (row.required::<String>(1), row.required::<bool>(2)));
    if let Some((queue, dead)) = dead {
        if dead {
            counters::count(&queue, Event::Dead, 1);
        }
        ended.push(child);
    }
}

/// Dead jobs `ids` were redriven: the children that went dead or wait because of them wait for
/// them again (and theirs, in turn).
pub(crate) fn redriven(client: &mut SpiClient<'_>, ids: &[i64], now: TimestampWithTimeZone) {
    if ids.is_empty() || release::current(client) < Release::V0_3_0 {
        return;
    }
    let mut redriven = ids.to_vec();
    while !redriven.is_empty() {
        let mut children: Vec<i64> =
            spi::run(client, &REOPEN_EDGES, &[redriven.into()]).map(|row| row.required(1));
        children.sort_unstable();
        children.dedup();
        redriven =
            spi::run(client, &REBLOCK, &[children.into(), now.into()]).map(|row| row.required(1));
    }
}
