//! Dependencies: `blocked` → `pending` in the transaction that finishes the last parent.
//!
//! A job enqueued with parents is `blocked` (in none of the indexes a claim walks) and has one
//! edge per parent in `leaseq.job_parents`. Edges are written once, at enqueue, and never
//! updated: whether a parent still holds its child back is read from the parent's own row (live,
//! or final and how). So a finishing parent writes nothing for its children but what it decides.
//! Enqueue reads the parents without a lock: one already final counts at once. A transaction
//! that links a child and stays open must not hold its parents' workers (their renew and
//! complete) — the parents may be anyone's. So the parents are read again *when it commits*
//! ([`parents_read_at_commit`], a deferred constraint trigger), under a share lock held only for
//! the commit: a finish under way is waited for and counts; one not begun waits for that commit,
//! and then sees the edges.
//!
//! **Exactly once, without a hot row** (docs/design.md has the argument). For each child, a
//! finishing parent either hands the release over or takes it:
//! - it locks the row of another live parent of the child that no transaction holds
//!   ([`HAND_OVER`], `SKIP LOCKED`): that parent's own finish must wait for this transaction to
//!   end, so it will see this one final, and decide in turn;
//! - when none is left (every other live parent is being finished right now), it locks the
//!   child's row and looks again in a new statement, whose snapshot is taken after the lock: the
//!   last of these to lock sees every other finish committed, and releases.
//!
//! Only the last few finishers of a fan-in, as many as finish at once, take the child's lock.
//!
//! **A parent that fails** (dead or cancelled) applies its children's `on_parent_failure`:
//! `cancel` and `dead` end the child — and, through its own edges, its descendants — at once;
//! `run` counts the parent as final. A purged parent was final and its failure, if any, already
//! applied: it holds nothing back. Redriving a dead parent brings back to `blocked` the children
//! that went dead only because of it; redriving such a child first makes it `blocked`, not
//! `pending`, while the parent stays failed.
use std::cell::RefCell;

use pgrx::prelude::*;
use pgrx::spi::SpiClient;

use crate::core::clock;
use crate::core::connect::{self, JOB_PATH};
use crate::core::counters::{self, Event};
use crate::core::datum::{JobStatus, ParentFailure};
use crate::core::errors;
use crate::core::release::{self, Release};
use crate::core::schema;
use crate::core::settings;
use crate::core::spi::{self, BOOL, INT8_ARRAY, Statement, TEXT, TIMESTAMPTZ};
use crate::core::wake;
use crate::lifecycle::job;

/// The parents `$1` that exist, in id order, each with whether it is final, and whether it
/// failed; read without a lock (see the module comment).
pub(crate) const READ_PARENTS: Statement = Statement {
    name: "depend.read_parents",
    sql: "SELECT job.id, job.finished_at IS NOT NULL,
                 job.finished_at IS NOT NULL AND job.status <> 'succeeded'
            FROM leaseq.jobs AS job
           WHERE job.id = ANY ($1)
           ORDER BY job.id",
    params: &[INT8_ARRAY],
};

/// The parents of the children `$1` (enqueued in this transaction, now committing), under a share
/// lock in id order: a finish under way is waited for, and one not begun waits for this commit.
pub(crate) const LOCK_PARENTS_AT_COMMIT: Statement = Statement {
    name: "depend.lock_parents_at_commit",
    sql: "SELECT parent.id
            FROM leaseq.jobs AS parent
           WHERE parent.id = ANY (ARRAY(SELECT edge.parent_id FROM leaseq.job_parents AS edge
                                         WHERE edge.child_id = ANY ($1)))
           ORDER BY parent.id
             FOR SHARE OF parent",
    params: &[INT8_ARRAY],
};

/// The edges `($1[i], $2[i])` of new children, under the policy `$3`.
pub(crate) const LINK: Statement = Statement {
    name: "depend.link",
    sql: "INSERT INTO leaseq.job_parents (child_id, parent_id, on_parent_failure)
          SELECT edge.child_id, edge.parent_id, $3::leaseq.parent_failure
            FROM unnest($1::bigint[], $2::bigint[]) AS edge (child_id, parent_id)",
    params: &[INT8_ARRAY, INT8_ARRAY, TEXT],
};

/// The children of the parents `$1`, which just ended with status `$2`, each once, in id order:
/// those this ends (the parent failed, and the child does not run anyway), and the others.
/// Grouped before they are gathered: a fan-in's batch of parents has one child, and sorting it
/// a hundred times over for `DISTINCT` was a third of this statement's time.
pub(crate) const CHILDREN: Statement = Statement {
    name: "depend.children",
    sql: "SELECT coalesce(array_agg(found.child_id ORDER BY found.child_id)
                              FILTER (WHERE NOT found.goes_on),
                          '{}'),
                 coalesce(array_agg(found.child_id ORDER BY found.child_id)
                              FILTER (WHERE found.goes_on),
                          '{}')
            FROM (SELECT edge.child_id,
                         $2 = 'succeeded' OR edge.on_parent_failure = 'run' AS goes_on
                    FROM leaseq.job_parents AS edge
                   WHERE edge.parent_id = ANY ($1)
                   GROUP BY edge.child_id, goes_on) AS found",
    params: &[INT8_ARRAY, TEXT],
};

/// Of the children `$1`, those this transaction hands over: for each, the row of another live
/// parent that no transaction holds, locked — that parent's finish will wait for this
/// transaction, then decide (see the module comment). A running one too (a fleet with prefetch
/// claims every parent before the first finishes): one being finished holds its row and is
/// skipped; one not begun waits, at most this transaction's end. The newest first: parents are
/// claimed oldest first, so it is the one furthest from finishing. When at least 250 of the
/// 1,000 ids up to the child's newest parent are its parents (a fan-in's parents are mostly
/// enqueued together), it is looked for by one walk of `jobs_pkey` down those ids that looks up
/// the edge of a live job only: at a fan-in's end every parent is final, and a lookup per parent
/// was 2.7 µs, as much as the rest of the last completion. Otherwise (a child of a few parents,
/// or of scattered ones), among its newest 1,000 parents, edge by edge. `OFFSET 0` keeps an
/// edge check a lookup by key: pulled up into a semi-join, it was planned as a scan of the
/// child's edges for each job walked.
pub(crate) const HAND_OVER: Statement = Statement {
    name: "depend.hand_over",
    sql: "SELECT child.id
            FROM unnest($1::bigint[]) AS child (id)
           CROSS JOIN LATERAL (
                 SELECT edge.parent_id AS id FROM leaseq.job_parents AS edge
                  WHERE edge.child_id = child.id
                  ORDER BY edge.child_id DESC, edge.parent_id DESC
                  LIMIT 1) AS newest
            LEFT JOIN LATERAL (
                 SELECT edge.parent_id AS id FROM leaseq.job_parents AS edge
                  WHERE edge.child_id = child.id
                  ORDER BY edge.child_id DESC, edge.parent_id DESC
                 OFFSET 249
                  LIMIT 1) AS quarter ON true
           CROSS JOIN LATERAL (
                 SELECT near.id
                   FROM (SELECT parent.id
                           FROM leaseq.jobs AS parent
                          WHERE quarter.id > newest.id - 1000
                            AND parent.id BETWEEN newest.id - 999 AND newest.id
                            AND parent.finished_at IS NULL
                            AND EXISTS (SELECT FROM leaseq.job_parents AS edge
                                         WHERE edge.child_id = child.id
                                           AND edge.parent_id = parent.id
                                        OFFSET 0)
                          ORDER BY parent.id DESC
                          LIMIT 1
                            FOR NO KEY UPDATE OF parent SKIP LOCKED) AS near
                 UNION ALL
                 SELECT far.id
                   FROM (SELECT parent.id
                           FROM (SELECT edge.parent_id FROM leaseq.job_parents AS edge
                                  WHERE edge.child_id = child.id
                                  ORDER BY edge.child_id DESC, edge.parent_id DESC
                                  LIMIT 1000) AS candidate
                           JOIN leaseq.jobs AS parent ON parent.id = candidate.parent_id
                          WHERE parent.finished_at IS NULL
                            AND (quarter.id > newest.id - 1000) IS NOT TRUE
                          LIMIT 1
                            FOR NO KEY UPDATE OF parent SKIP LOCKED) AS far
                 LIMIT 1) AS handed",
    params: &[INT8_ARRAY],
};

/// [`HAND_OVER`] from the oldest parents: for the children whose newest parents were all final
/// or held — parents finishing newest first.
pub(crate) const HAND_OVER_FROM_OLDEST: Statement = Statement {
    name: "depend.hand_over_from_oldest",
    sql: "SELECT child.id
            FROM unnest($1::bigint[]) AS child (id)
           CROSS JOIN LATERAL (
                 SELECT edge.parent_id AS id FROM leaseq.job_parents AS edge
                  WHERE edge.child_id = child.id
                  ORDER BY edge.child_id, edge.parent_id
                  LIMIT 1) AS oldest
            LEFT JOIN LATERAL (
                 SELECT edge.parent_id AS id FROM leaseq.job_parents AS edge
                  WHERE edge.child_id = child.id
                  ORDER BY edge.child_id, edge.parent_id
                 OFFSET 249
                  LIMIT 1) AS quarter ON true
           CROSS JOIN LATERAL (
                 SELECT near.id
                   FROM (SELECT parent.id
                           FROM leaseq.jobs AS parent
                          WHERE quarter.id < oldest.id + 1000
                            AND parent.id BETWEEN oldest.id AND oldest.id + 999
                            AND parent.finished_at IS NULL
                            AND EXISTS (SELECT FROM leaseq.job_parents AS edge
                                         WHERE edge.child_id = child.id
                                           AND edge.parent_id = parent.id
                                        OFFSET 0)
                          ORDER BY parent.id
                          LIMIT 1
                            FOR NO KEY UPDATE OF parent SKIP LOCKED) AS near
                 UNION ALL
                 SELECT far.id
                   FROM (SELECT parent.id
                           FROM (SELECT edge.parent_id FROM leaseq.job_parents AS edge
                                  WHERE edge.child_id = child.id
                                  ORDER BY edge.child_id, edge.parent_id
                                  LIMIT 1000) AS candidate
                           JOIN leaseq.jobs AS parent ON parent.id = candidate.parent_id
                          WHERE parent.finished_at IS NULL
                            AND (quarter.id < oldest.id + 1000) IS NOT TRUE
                          LIMIT 1
                            FOR NO KEY UPDATE OF parent SKIP LOCKED) AS far
                 LIMIT 1) AS handed",
    params: &[INT8_ARRAY],
};

/// Locks the children `$1` that are still blocked, in id order (the lock order of children).
pub(crate) const LOCK_CHILDREN: Statement = Statement {
    name: "depend.lock_children",
    sql: "SELECT job.id FROM leaseq.jobs AS job
           WHERE job.id = ANY ($1) AND job.status = 'blocked'
           ORDER BY job.id
             FOR NO KEY UPDATE",
    params: &[INT8_ARRAY],
};

/// The locked children `$1` whose parents are all final and succeeded (or that run anyway)
/// become pending: in a statement of their own, whose snapshot sees every finish committed
/// before the locks. A purged parent holds nothing back. A child whose parents' ids are dense (a
/// fan-in's parents are mostly enqueued together) is checked by one walk of `jobs_pkey` over
/// their range, looking up the edge of an unsettled job only: a lookup per parent cost 2 µs, the
/// bulk of a 10,000-parent fan-in's last completion (`OFFSET 0`: as in [`HAND_OVER`]). Sparse
/// ones are looked up parent by parent.
pub(crate) const RELEASE: Statement = Statement {
    name: "depend.release",
    sql: "WITH released AS (
              UPDATE leaseq.jobs AS job
                 SET status = 'pending', updated_at = $2
                FROM unnest($1::bigint[]) AS child (id)
               CROSS JOIN LATERAL (
                     SELECT min(edge.parent_id) AS low, max(edge.parent_id) AS high,
                            count(*) AS parents
                       FROM leaseq.job_parents AS edge
                      WHERE edge.child_id = child.id) AS span
               WHERE job.id = child.id AND job.status = 'blocked'
                 AND CASE WHEN span.high - span.low < 4 * span.parents THEN
                     NOT EXISTS (
                         SELECT FROM leaseq.jobs AS parent
                          WHERE parent.id BETWEEN span.low AND span.high
                            AND (parent.finished_at IS NULL OR parent.status <> 'succeeded')
                            AND EXISTS (
                                SELECT FROM leaseq.job_parents AS edge
                                 WHERE edge.child_id = child.id AND edge.parent_id = parent.id
                                   AND (parent.finished_at IS NULL
                                        OR edge.on_parent_failure <> 'run')
                                OFFSET 0))
                 ELSE
                     NOT EXISTS (
                         SELECT FROM leaseq.job_parents AS edge
                          WHERE edge.child_id = child.id
                            AND (SELECT parent.finished_at IS NULL
                                        OR (parent.status <> 'succeeded'
                                            AND edge.on_parent_failure <> 'run')
                                   FROM leaseq.jobs AS parent
                                  WHERE parent.id = edge.parent_id))
                 END
              RETURNING job.id, job.queue)
          SELECT released.id,
                 CASE WHEN $3 THEN pg_catalog.pg_notify('leaseq_' || released.queue, '') END
            FROM released",
    params: &[INT8_ARRAY, TIMESTAMPTZ, BOOL],
};

/// The locked children `$1` that have a failed parent and do not run anyway end `cancelled` or
/// `dead`, as their policy says (the same on all of a child's edges), naming the failed parents.
pub(crate) const END_CHILDREN: Statement = Statement {
    name: "depend.end_children",
    sql: "UPDATE leaseq.jobs AS job
             SET status = CASE (SELECT edge.on_parent_failure FROM leaseq.job_parents AS edge
                                 WHERE edge.child_id = child.id LIMIT 1)
                              WHEN 'dead' THEN 'dead' ELSE 'cancelled' END::leaseq.job_status,
                 last_error = pg_catalog.jsonb_build_object(
                     'error', 'a parent failed',
                     'failed_parents',
                     (SELECT pg_catalog.jsonb_agg(edge.parent_id ORDER BY edge.parent_id)
                        FROM leaseq.job_parents AS edge
                       WHERE edge.child_id = child.id
                         AND (SELECT parent.finished_at IS NOT NULL
                                     AND parent.status <> 'succeeded'
                                FROM leaseq.jobs AS parent
                               WHERE parent.id = edge.parent_id))),
                 updated_at = $2,
                 finished_at = $2
            FROM unnest($1::bigint[]) AS child (id)
           WHERE job.id = child.id AND job.status = 'blocked'
             AND EXISTS (
                 SELECT FROM leaseq.job_parents AS edge
                  WHERE edge.child_id = child.id AND edge.on_parent_failure <> 'run'
                    AND (SELECT parent.finished_at IS NOT NULL AND parent.status <> 'succeeded'
                           FROM leaseq.jobs AS parent
                          WHERE parent.id = edge.parent_id))
          RETURNING job.id, job.queue, job.status::text",
    params: &[INT8_ARRAY, TIMESTAMPTZ],
};

/// The redriven parents `$1`' children that went dead because a parent failed, never having run,
/// and that no other failed parent holds dead: `blocked` again, locked in id order.
pub(crate) const REBLOCK: Statement = Statement {
    name: "depend.reblock",
    sql: "WITH chosen AS (
              SELECT child.id
                FROM leaseq.jobs AS child
               WHERE child.id = ANY (ARRAY(
                         SELECT edge.child_id FROM leaseq.job_parents AS edge
                          WHERE edge.parent_id = ANY ($1) AND edge.on_parent_failure = 'dead'))
                 AND child.status = 'dead' AND child.started_at IS NULL
                 AND NOT EXISTS (
                     SELECT FROM leaseq.job_parents AS edge
                      WHERE edge.child_id = child.id
                        AND (SELECT parent.finished_at IS NOT NULL
                                    AND parent.status <> 'succeeded'
                               FROM leaseq.jobs AS parent
                              WHERE parent.id = edge.parent_id))
               ORDER BY child.id
                 FOR NO KEY UPDATE OF child)
          UPDATE leaseq.jobs AS job
             SET status = 'blocked', updated_at = $2, finished_at = NULL
            FROM chosen
           WHERE job.id = chosen.id AND job.status = 'dead'
          RETURNING job.id",
    params: &[INT8_ARRAY, TIMESTAMPTZ],
};

/// Of the redriven jobs `$1`, those a failed parent holds back (one that went dead or was
/// cancelled, under a policy that does not run anyway): `blocked` again, not `pending` — they
/// run when that parent is redriven and succeeds. A failed parent changes only by its own
/// redrive, whose [`REBLOCK`] waits for this one's lock on the child: no finish is missed.
pub(crate) const HOLD_BACK_REDRIVEN: Statement = Statement {
    name: "depend.hold_back_redriven",
    sql: "UPDATE leaseq.jobs AS job
             SET status = 'blocked'
           WHERE job.id = ANY ($1) AND job.status = 'pending'
             AND EXISTS (
                 SELECT FROM leaseq.job_parents AS edge
                  WHERE edge.child_id = job.id AND edge.on_parent_failure <> 'run'
                    AND (SELECT parent.finished_at IS NOT NULL AND parent.status <> 'succeeded'
                           FROM leaseq.jobs AS parent
                          WHERE parent.id = edge.parent_id))",
    params: &[INT8_ARRAY],
};

/// A parent of a job about to be enqueued ([`read_parents`], or [`unseen`]).
#[derive(Clone)]
pub(crate) struct Parent {
    id: i64,
    finished: bool,
    failed: bool,
    /// Committed by another transaction: it may finish before this one commits.
    committed: bool,
}

impl Parent {
    pub(crate) fn id(&self) -> i64 {
        self.id
    }
}

/// The parents of a job about to be enqueued. `42704` names the first of `parents` that no job
/// has — before anything is inserted. A parent must exist before its child, so every edge points
/// back in time and no cycle can be built, not even a job on itself: a parent's id was given
/// before its commit, which this read saw, and the child's is given after.
pub(crate) fn read_parents(
    client: &mut SpiClient<'_>,
    function: &str,
    argument: &str,
    parents: &[i64],
) -> Vec<Parent> {
    let found = spi::run(client, &READ_PARENTS, &[parents.to_vec().into()]).map(|row| Parent {
        id: row.required(1),
        finished: row.required(2),
        failed: row.required(3),
        committed: true,
    });
    if found.len() != parents.len() {
        match job::first_missing(client, parents) {
            Some(missing) => errors::unknown_parent(function, argument, missing),
            None => errors::internal(function, "a parent was seen but not read"),
        }
    }
    found
}

/// Parents enqueued earlier in this same transaction (a flow's): live, and seen by no other
/// transaction until it commits, so none can finish before their edges exist — nothing to read
/// again.
pub(crate) fn unseen(ids: Vec<i64>) -> Vec<Parent> {
    ids.into_iter()
        .map(|id| Parent {
            id,
            finished: false,
            failed: false,
            committed: false,
        })
        .collect()
}

thread_local! {
    // The children this transaction (by its top-level id) linked to committed live parents:
    // their parents are read again when it commits.
    static READ_AT_COMMIT: RefCell<(pg_sys::TransactionId, Vec<i64>)> =
        const { RefCell::new((pg_sys::InvalidTransactionId, Vec::new())) };
}

/// A job inserted `blocked` is about to commit (the deferred constraint trigger
/// `jobs_parents_read_at_commit`, once per such job): the first call of a transaction reads the
/// parents of every child it linked to committed parents again, under a share lock, and settles
/// those whose parents allow (see the module comment); the others find nothing left to do.
#[pg_trigger]
fn parents_read_at_commit<'a>(
    _trigger: &'a PgTrigger<'a>,
) -> Result<Option<PgHeapTuple<'a, AllocatedByRust>>, PgTriggerError> {
    // SAFETY: reads this backend's transaction state.
    let xact = unsafe { pg_sys::GetTopTransactionIdIfAny() };
    let children = READ_AT_COMMIT.with_borrow_mut(|(linked_in, children)| {
        if *linked_in == xact {
            std::mem::take(children)
        } else {
            Vec::new()
        }
    });
    if children.is_empty() {
        return Ok(None);
    }
    let now = clock::now();
    connect::connect(&JOB_PATH, |client| {
        spi::run(client, &LOCK_PARENTS_AT_COMMIT, &[children.clone().into()]);
        let mut ended = Ended::default();
        decide(client, &mut ended, children, now);
        ended.settle(client, now);
    });
    Ok(None)
}

extension_sql!(
    r#"
-- Reads a linked child's parents again when its transaction commits (src/lifecycle/depend.rs).
CREATE CONSTRAINT TRIGGER jobs_parents_read_at_commit
    AFTER INSERT ON leaseq.jobs DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.status::pg_catalog.text OPERATOR(pg_catalog.=) 'blocked')
    EXECUTE FUNCTION leaseq.parents_read_at_commit();
"#,
    name = "jobs_parents_read_at_commit",
    requires = [parents_read_at_commit]
);

/// Links each new `blocked` job to its parents (from [`read_parents`]) and settles at once the
/// ones whose parents allow: all final already (none at all included), or one failed.
/// Children of one call share their parents' slice when they share parents (a batch's
/// `depends_on`): nothing is copied per child but the edges themselves, at most
/// `args::MAX_EDGES`.
pub(crate) fn link(
    client: &mut SpiClient<'_>,
    children: &[(i64, &[Parent])],
    policy: ParentFailure,
    now: TimestampWithTimeZone,
) {
    let edges = children.iter().map(|(_, parents)| parents.len()).sum();
    let (mut child_ids, mut parent_ids) = (Vec::with_capacity(edges), Vec::with_capacity(edges));
    let (mut settled, mut read_at_commit) = (Vec::new(), Vec::new());
    for &(child, parents) in children {
        check_for_interrupts!();
        let waiting = parents.iter().any(|parent| !parent.finished);
        let failed = parents.iter().any(|parent| parent.failed);
        for parent in parents {
            child_ids.push(child);
            parent_ids.push(parent.id);
        }
        if !waiting || failed {
            settled.push(child);
        } else if parents.iter().any(|parent| parent.committed) {
            read_at_commit.push(child);
        }
    }
    if !read_at_commit.is_empty() {
        // SAFETY: reads this backend's transaction state; the inserts gave it an id.
        let xact = unsafe { pg_sys::GetTopTransactionIdIfAny() };
        READ_AT_COMMIT.with_borrow_mut(|(linked_in, children)| {
            if *linked_in != xact {
                *linked_in = xact;
                children.clear();
            }
            children.extend(read_at_commit);
        });
    }
    if !child_ids.is_empty() {
        spi::run(
            client,
            &LINK,
            &[child_ids.into(), parent_ids.into(), policy.label().into()],
        );
    }
    if settled.is_empty() {
        return;
    }
    let mut ended = Ended::default();
    decide(client, &mut ended, settled, now);
    ended.settle(client, now);
}

/// Jobs `ids` just ended with `status` (succeeded, dead or cancelled) in this transaction: their
/// children learn it, and the children this ends, theirs (nothing on a schema without
/// dependencies, before 0.3.0); whoever waits in `queue_await` is woken once it commits. Every
/// path to a final status comes through here.
pub(crate) fn finished(
    client: &mut SpiClient<'_>,
    ids: &[i64],
    status: JobStatus,
    now: TimestampWithTimeZone,
) {
    if ids.is_empty() {
        return;
    }
    wake::finished_here(ids);
    if release::current(client) < Release::V0_3_0 || no_edge_can_exist() {
        return;
    }
    let mut ended = Ended::default();
    ended.0.push((ids.to_vec(), status.label().to_owned()));
    ended.settle(client, now);
}

/// Whether `leaseq.job_parents` has no page: no job has, nor is being enqueued with, a parent.
/// Called after the caller locked the rows of the jobs it ended, so this is sound: a child linked
/// before the check extended the table first, and one linked after it reads its parents when it
/// commits, under a share lock that waits for this transaction (see the module comment). Saves the
/// finish of a database without dependencies its children look-up: a statement's start and end,
/// a fifth of a finish of one job.
fn no_edge_can_exist() -> bool {
    let edges = schema::table_oid(c"job_parents");
    if edges == pg_sys::InvalidOid {
        return false;
    }
    // SAFETY: opens an existing table under the lock any read of it takes, and closes it.
    unsafe {
        let relation = pg_sys::relation_open(edges, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        let pages =
            pg_sys::RelationGetNumberOfBlocksInFork(relation, pg_sys::ForkNumber::MAIN_FORKNUM);
        pg_sys::relation_close(relation, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        pages == 0
    }
}

/// Jobs ended in this transaction whose children have not learnt it yet, by final status.
#[derive(Default)]
struct Ended(Vec<(Vec<i64>, String)>);

impl Ended {
    fn settle(mut self, client: &mut SpiClient<'_>, now: TimestampWithTimeZone) {
        while let Some((ids, status)) = self.0.pop() {
            let (ends, mut others): (Vec<i64>, Vec<i64>) =
                spi::run(client, &CHILDREN, &[ids.into(), status.into()])
                    .single(|row| (row.required(1), row.required(2)));
            // A child ended by one parent is not released by another.
            others.retain(|child| ends.binary_search(child).is_err());
            if !ends.is_empty() {
                let locked = lock_children(client, &ends);
                self.end(client, locked, now);
            }
            if others.is_empty() {
                continue;
            }
            for hand_over in [&HAND_OVER, &HAND_OVER_FROM_OLDEST] {
                if others.is_empty() {
                    break;
                }
                let handed_over: std::collections::HashSet<i64> =
                    spi::run(client, hand_over, &[others.clone().into()])
                        .map(|row| row.required(1))
                        .into_iter()
                        .collect();
                others.retain(|child| !handed_over.contains(child));
            }
            decide(client, &mut self, others, now);
        }
    }

    /// [`END_CHILDREN`] on the locked `children`; those it ends join the jobs whose children
    /// learn it next.
    fn end(&mut self, client: &mut SpiClient<'_>, children: Vec<i64>, now: TimestampWithTimeZone) {
        if children.is_empty() {
            return;
        }
        let ended: Vec<(i64, String, String)> =
            spi::run(client, &END_CHILDREN, &[children.into(), now.into()])
                .map(|row| (row.required(1), row.required(2), row.required(3)));
        for (id, queue, status) in ended {
            if status == JobStatus::Dead.label() {
                counters::count(&queue, Event::Dead, 1);
            }
            match self.0.iter_mut().find(|(_, s)| *s == status) {
                Some((ids, _)) => ids.push(id),
                None => self.0.push((vec![id], status)),
            }
        }
    }
}

/// The blocked ones of `children`, locked in id order.
fn lock_children(client: &mut SpiClient<'_>, children: &[i64]) -> Vec<i64> {
    spi::run(client, &LOCK_CHILDREN, &[children.to_vec().into()]).map(|row| row.required(1))
}

/// Under the children's locks, in statements whose snapshots see every finish committed before
/// them: releases each child its parents allow to run, and ends each a failed parent's policy
/// ends.
fn decide(
    client: &mut SpiClient<'_>,
    ended: &mut Ended,
    children: Vec<i64>,
    now: TimestampWithTimeZone,
) {
    if children.is_empty() {
        return;
    }
    let mut locked = lock_children(client, &children);
    if locked.is_empty() {
        return;
    }
    let notify = settings::notify();
    let released: std::collections::HashSet<i64> = spi::run(
        client,
        &RELEASE,
        &[locked.clone().into(), now.into(), notify.into()],
    )
    .map(|row| row.required(1))
    .into_iter()
    .collect();
    locked.retain(|child| !released.contains(child));
    ended.end(client, locked, now);
}

/// Dead jobs `ids` were redriven: those a failed parent holds back are blocked again, not
/// pending; the children that went dead only because of them are blocked again (and theirs, in
/// turn).
pub(crate) fn redriven(client: &mut SpiClient<'_>, ids: &[i64], now: TimestampWithTimeZone) {
    if ids.is_empty() || release::current(client) < Release::V0_3_0 {
        return;
    }
    spi::run(client, &HOLD_BACK_REDRIVEN, &[ids.to_vec().into()]);
    let mut redriven = ids.to_vec();
    while !redriven.is_empty() {
        redriven =
            spi::run(client, &REBLOCK, &[redriven.into(), now.into()]).map(|row| row.required(1));
    }
}
