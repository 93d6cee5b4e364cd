//! Ordered groups: the jobs of one `group_key` in a queue run at most `group_concurrency` at a
//! time (the queue's setting, 1 by default) and, with 1, strictly in enqueue order.
//!
//! A grouped job is *admitted* (`pending` or `running`) while its group has room, and `waiting`
//! otherwise. Claim never sees the difference: waiting jobs are not in the index it walks, so a
//! claim costs the same however many busy groups the queue holds. A job waiting out a retry or a
//! snooze stays `pending` and keeps its place; its group gets room back only when an admitted job
//! ends — succeeded, dead or cancelled — and then the group's oldest waiting jobs (by id: enqueue
//! order; priority orders between groups, not inside one) are admitted in that transaction.
//!
//! Who may change a group's admitted set takes the group's row in `leaseq.groups` first
//! ([`LOCK`]: a row lock, so that a transaction may hold thousands), and decides in a later
//! statement, whose fresh snapshot sees every change made under that lock before. Lock order, so
//! that this does not deadlock (one rare interleaving aside: docs/design.md): a job's own row (its
//! worker finishing it, a cancel, a redrive) before its group's; groups by (queue, key); a
//! group's before its waiting jobs'. Renewals never
//! take a group, and a claim never waits for one: the claim that ends a job whose lease expired on
//! its last attempt takes its group only if nobody holds it ([`try_lock`]), and otherwise leaves
//! the job for a later claim. An empty group's row is deleted by whoever empties it.
use std::collections::HashMap;

use pgrx::datum::TimestampWithTimeZone;
use pgrx::spi::SpiClient;

use crate::core::release;
use crate::core::spi::{self, BOOL, INT8_ARRAY, Statement, TEXT, TEXT_ARRAY, TIMESTAMPTZ};

/// Locks the groups `($1[i], $2[i])`, creating their rows when missing, in (queue, key) order. A
/// conflict only locks the row (`WHERE false`: it is not updated).
pub(crate) const LOCK: Statement = Statement {
    name: "group.lock",
    sql: "INSERT INTO leaseq.groups AS taken (queue, group_key)
          SELECT DISTINCT given.queue, given.group_key
            FROM unnest($1::text[], $2::text[]) AS given (queue, group_key)
           ORDER BY given.queue, given.group_key
          ON CONFLICT (queue, group_key) DO UPDATE SET queue = EXCLUDED.queue WHERE false",
    params: &[TEXT_ARRAY, TEXT_ARRAY],
};

/// Under [`LOCK`]: admits each locked group's oldest waiting jobs while it has room, wakes the
/// queues that got some, and deletes the rows of groups left without live jobs. Room: the
/// queue's `group_concurrency` less the group's pending and running jobs (counted up to it).
pub(crate) const ADMIT: Statement = Statement {
    name: "group.admit",
    sql: "WITH given AS (
              -- The queue's setting looked up per group (a key lookup whatever the planner
              -- thinks of either side's size); no queue, no room.
              SELECT DISTINCT given.queue, given.group_key,
                     coalesce((SELECT queue.group_concurrency FROM leaseq.queues AS queue
                                WHERE queue.name = given.queue), 0) AS room
                FROM unnest($1::text[], $2::text[]) AS given (queue, group_key)),
          chosen AS (
              SELECT waiting.row_address
                FROM given
               CROSS JOIN LATERAL (
                   SELECT job.ctid AS row_address
                     FROM leaseq.jobs AS job
                    WHERE job.queue = given.queue AND job.group_key = given.group_key
                      AND job.keyed_finished_at IS NULL AND job.lane = 'waiting'
                    ORDER BY job.id
                    LIMIT given.room
                          - (SELECT count(*)
                               FROM (SELECT FROM leaseq.jobs AS admitted
                                      WHERE admitted.queue = given.queue
                                        AND admitted.group_key = given.group_key
                                        AND admitted.keyed_finished_at IS NULL
                                        AND admitted.lane IN ('pending', 'running')
                                      LIMIT given.room) AS admitted)
                      FOR UPDATE) AS waiting),
          admitted AS (
              UPDATE leaseq.jobs AS job
                 SET status = 'pending', updated_at = $3
                FROM chosen
               WHERE job.ctid = chosen.row_address AND job.status = 'waiting'
              RETURNING job.queue),
          emptied AS (
              DELETE FROM leaseq.groups AS taken
               USING given
               WHERE taken.queue = given.queue AND taken.group_key = given.group_key
                 AND NOT EXISTS (SELECT FROM leaseq.jobs AS live
                                  WHERE live.queue = given.queue
                                    AND live.group_key = given.group_key
                                    AND live.keyed_finished_at IS NULL))
          SELECT admitted.queue, count(*),
                 CASE WHEN $4 THEN pg_catalog.pg_notify('leaseq_' || admitted.queue, '') END
            FROM admitted
           GROUP BY admitted.queue",
    params: &[TEXT_ARRAY, TEXT_ARRAY, TIMESTAMPTZ, BOOL],
};

/// Each of the jobs `$1` that has a group, with it.
pub(crate) const GROUPS_OF: Statement = Statement {
    name: "group.groups_of",
    sql: "SELECT job.id, job.queue, job.group_key
            FROM leaseq.jobs AS job
           WHERE job.id = ANY ($1) AND job.group_key IS NOT NULL",
    params: &[INT8_ARRAY],
};

/// Gives the groups `($1[i], $2[i])` their rows where missing (rows are not dumped, so a restored
/// database has none), locking nothing and waiting for nobody but an insert of the same row.
pub(crate) const ENSURE: Statement = Statement {
    name: "group.ensure",
    sql: "INSERT INTO leaseq.groups AS taken (queue, group_key)
          SELECT DISTINCT given.queue, given.group_key
            FROM unnest($1::text[], $2::text[]) AS given (queue, group_key)
          ON CONFLICT (queue, group_key) DO NOTHING",
    params: &[TEXT_ARRAY, TEXT_ARRAY],
};

/// Locks those of the groups `($1[i], $2[i])` that nobody holds, and names them: how a claim ends
/// a grouped job without waiting (see `try_lock`).
pub(crate) const TRY_LOCK: Statement = Statement {
    name: "group.try_lock",
    sql: "SELECT taken.queue, taken.group_key
            FROM leaseq.groups AS taken
            JOIN unnest($1::text[], $2::text[]) AS given (queue, group_key)
              ON taken.queue = given.queue AND taken.group_key = given.group_key
           ORDER BY taken.queue, taken.group_key
             FOR UPDATE OF taken SKIP LOCKED",
    params: &[TEXT_ARRAY, TEXT_ARRAY],
};

/// Redriven jobs `$1` of a group go back to waiting: [`ADMIT`] then decides, as for any other.
pub(crate) const UNADMIT: Statement = Statement {
    name: "group.unadmit",
    sql: "UPDATE leaseq.jobs AS job
             SET status = 'waiting'
           WHERE job.id = ANY ($1) AND job.group_key IS NOT NULL AND job.status = 'pending'",
    params: &[INT8_ARRAY],
};

/// The groups of `$1` with waiting jobs.
pub(crate) const WAITING: Statement = Statement {
    name: "group.waiting",
    sql: "SELECT DISTINCT job.queue, job.group_key
            FROM leaseq.jobs AS job
           WHERE job.queue = $1 AND job.group_key IS NOT NULL AND job.keyed_finished_at IS NULL
             AND job.lane = 'waiting'",
    params: &[TEXT],
};

/// Groups, as `(queue, key)` pairs.
pub(crate) type Groups = Vec<(String, String)>;

/// The statements' first two arguments: the groups' queues and keys.
fn columns(groups: &[(String, String)]) -> (Vec<&str>, Vec<&str>) {
    groups.iter().map(|(q, k)| (q.as_str(), k.as_str())).unzip()
}

/// Each group once, in lock order.
fn distinct<'a>(groups: impl Iterator<Item = &'a (String, String)>) -> Groups {
    let mut groups: Groups = groups.cloned().collect();
    groups.sort();
    groups.dedup();
    groups
}

/// Takes the groups' locks (see the module comment): before deciding which of their jobs run.
pub(crate) fn lock(client: &mut SpiClient<'_>, groups: &[(String, String)]) {
    if groups.is_empty() {
        return;
    }
    let (queues, keys) = columns(groups);
    spi::run(client, &LOCK, &[queues.into(), keys.into()]);
}

/// Jobs of these groups left the admitted set (or may now fit): lock the groups and admit their
/// oldest waiting jobs into the room there is.
pub(crate) fn release(
    client: &mut SpiClient<'_>,
    groups: &[(String, String)],
    now: TimestampWithTimeZone,
) {
    lock(client, groups);
    admit(client, groups, now);
}

/// [`ADMIT`], under the groups' locks.
pub(crate) fn admit(
    client: &mut SpiClient<'_>,
    groups: &[(String, String)],
    now: TimestampWithTimeZone,
) {
    if groups.is_empty() {
        return;
    }
    let (queues, keys) = columns(groups);
    spi::run(
        client,
        &ADMIT,
        &[
            queues.into(),
            keys.into(),
            now.into(),
            crate::core::settings::notify().into(),
        ],
    );
}

/// The groups of jobs `ids`, each once; none on a database whose schema predates groups.
pub(crate) fn groups_of(client: &mut SpiClient<'_>, ids: &[i64]) -> Groups {
    distinct(jobs_groups(client, ids).values())
}

/// Each of jobs `ids` that has a group, with it.
fn jobs_groups(client: &mut SpiClient<'_>, ids: &[i64]) -> HashMap<i64, (String, String)> {
    // 0.1.0's schema has no groups (served through 0.3.x: docs/design.md).
    if ids.is_empty() || !release::current(client).has_0_2_0_tables() {
        return HashMap::new();
    }
    spi::run(client, &GROUPS_OF, &[ids.to_vec().into()])
        .map(|row| (row.required(1), (row.required(2), row.required(3))))
        .into_iter()
        .collect()
}

/// For a claim about to end jobs `ids` (leases expired on their last attempt): locks the groups
/// of those that have one, but only groups nobody holds — a claim never waits for a group. Returns
/// the groups locked (for [`admit`] once the jobs ended) and the jobs to leave as they are for now,
/// whose group somebody holds: it cannot move before that transaction ends anyway, and a later
/// claim (or the maintenance worker) ends them then.
pub(crate) fn try_lock(client: &mut SpiClient<'_>, ids: &[i64]) -> (Groups, Vec<i64>) {
    let of_job = jobs_groups(client, ids);
    if of_job.is_empty() {
        return (Vec::new(), Vec::new());
    }
    let wanted = distinct(of_job.values());
    let (queues, keys) = columns(&wanted);
    spi::run(client, &ENSURE, &[queues.into(), keys.into()]);
    let (queues, keys) = columns(&wanted);
    let locked: Groups = spi::run(client, &TRY_LOCK, &[queues.into(), keys.into()])
        .map(|row| (row.required(1), row.required(2)));
    let held_by_others = of_job
        .into_iter()
        .filter(|(_, group)| !locked.contains(group))
        .map(|(id, _)| id)
        .collect();
    (locked, held_by_others)
}

/// `ids` ended (dead or cancelled): their groups get room.
pub(crate) fn ended(client: &mut SpiClient<'_>, ids: &[i64], now: TimestampWithTimeZone) {
    let groups = groups_of(client, ids);
    release(client, &groups, now);
}

/// `ids` were redriven to `pending`: those of a group wait for room like any other of its jobs.
pub(crate) fn redriven(client: &mut SpiClient<'_>, ids: &[i64], now: TimestampWithTimeZone) {
    let groups = groups_of(client, ids);
    if groups.is_empty() {
        return;
    }
    lock(client, &groups);
    spi::run(client, &UNADMIT, &[ids.to_vec().into()]);
    admit(client, &groups, now);
}

/// The queue's `group_concurrency` may have grown: its groups with waiting jobs get the room.
pub(crate) fn resized(client: &mut SpiClient<'_>, queue: &str, now: TimestampWithTimeZone) {
    let groups =
        spi::run(client, &WAITING, &[queue.into()]).map(|row| (row.required(1), row.required(2)));
    release(client, &groups, now);
}
