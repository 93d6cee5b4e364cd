//! The texts of 0.3.0's schema (0.1.0's and 0.2.0's too) for the statements whose text 0.4.0
//! changed: its jobs carry their leases in `jobs_lease_expiry_idx`, an entry per running job,
//! where 0.4.0 writes a lease row per claim call (docs/design.md, "0.4.0's job path"). Each runs
//! in place of its 0.4.0 twin on a database not yet updated (src/statements.rs, `TWINS`), with
//! the same parameters and columns.
use crate::core::spi::{
    BOOL, INT4, INT8, INT8_ARRAY, INTERVAL, JSONB, JSONB_ARRAY, Statement, TEXT, TEXT_ARRAY,
    TIMESTAMPTZ, UUID, UUID_ARRAY,
};
use crate::observe::inspect;

/// [`crate::lifecycle::claim::CLAIM`] under the older schema.
pub(crate) const CLAIM_0_3_0: Statement = Statement {
    name: "claim.0_3_0",
    sql: "WITH chosen AS (
              SELECT job.ctid AS row_address, job.started_at IS NULL AS first_claim
                FROM leaseq.jobs AS job
               WHERE job.queue = $1 AND job.status = 'pending' AND job.run_at <= $2
               ORDER BY job.priority DESC, job.run_at, job.id
               LIMIT $3
                 FOR UPDATE SKIP LOCKED)
          UPDATE leaseq.jobs AS job
             SET status = 'running',
                 attempts = job.attempts + 1,
                 lease_token = $6,
                 lease_expires_at = $2 + $4,
                 worker = $5,
                 started_at = $2,
                 updated_at = $2
            FROM chosen
           WHERE job.ctid = chosen.row_address AND job.status = 'pending' AND job.run_at <= $2
          RETURNING job.id, job.lease_token, job.payload, job.lease_expires_at, job.priority,
                    job.run_at, job.created_at, chosen.first_claim, job.trace_context",
    params: &[TEXT, TIMESTAMPTZ, INT4, INTERVAL, TEXT, UUID],
};

/// [`crate::lifecycle::claim::CLAIM_AFTER`] under the older schema.
pub(crate) const CLAIM_AFTER_0_3_0: Statement = Statement {
    name: "claim.after.0_3_0",
    sql: "WITH chosen AS (
              SELECT job.ctid AS row_address, job.started_at IS NULL AS first_claim
                FROM leaseq.jobs AS job
               WHERE job.queue = $1 AND job.status = 'pending' AND job.run_at <= $2
                 AND job.priority = $7 AND (job.run_at, job.id) > ($8, $9)
               ORDER BY job.priority DESC, job.run_at, job.id
               LIMIT $3
                 FOR UPDATE SKIP LOCKED)
          UPDATE leaseq.jobs AS job
             SET status = 'running',
                 attempts = job.attempts + 1,
                 lease_token = $6,
                 lease_expires_at = $2 + $4,
                 worker = $5,
                 started_at = $2,
                 updated_at = $2
            FROM chosen
           WHERE job.ctid = chosen.row_address AND job.status = 'pending' AND job.run_at <= $2
          RETURNING job.id, job.lease_token, job.payload, job.lease_expires_at, job.priority,
                    job.run_at, job.created_at, chosen.first_claim, job.trace_context",
    params: &[
        TEXT,
        TIMESTAMPTZ,
        INT4,
        INTERVAL,
        TEXT,
        UUID,
        INT4,
        TIMESTAMPTZ,
        INT8,
    ],
};

/// [`crate::lifecycle::claim::CLAIM_SWEEP`] under the older schema.
pub(crate) const CLAIM_SWEEP_0_3_0: Statement = Statement {
    name: "claim.sweep.0_3_0",
    sql: "WITH chosen AS (
              SELECT job.ctid AS row_address, job.started_at IS NULL AS first_claim
                FROM leaseq.jobs AS job
               WHERE job.queue = $1 AND job.status = 'pending' AND job.run_at <= $2
                 AND job.priority = $7 AND (job.run_at, job.id) >= ($8, $9)
                 AND (job.run_at, job.id) < ($10, $11)
               ORDER BY job.priority DESC, job.run_at, job.id
               LIMIT $3
                 FOR UPDATE SKIP LOCKED)
          UPDATE leaseq.jobs AS job
             SET status = 'running',
                 attempts = job.attempts + 1,
                 lease_token = $6,
                 lease_expires_at = $2 + $4,
                 worker = $5,
                 started_at = $2,
                 updated_at = $2
            FROM chosen
           WHERE job.ctid = chosen.row_address AND job.status = 'pending' AND job.run_at <= $2
          RETURNING job.id, job.lease_token, job.payload, job.lease_expires_at, job.priority,
                    job.run_at, job.created_at, chosen.first_claim, job.trace_context",
    params: &[
        TEXT,
        TIMESTAMPTZ,
        INT4,
        INTERVAL,
        TEXT,
        UUID,
        INT4,
        TIMESTAMPTZ,
        INT8,
        TIMESTAMPTZ,
        INT8,
    ],
};

/// [`crate::lifecycle::claim::CLAIM_BELOW`] under the older schema.
pub(crate) const CLAIM_BELOW_0_3_0: Statement = Statement {
    name: "claim.below.0_3_0",
    sql: "WITH chosen AS (
              SELECT job.ctid AS row_address, job.started_at IS NULL AS first_claim
                FROM leaseq.jobs AS job
               WHERE job.queue = $1 AND job.status = 'pending' AND job.run_at <= $2
                 AND job.priority < $7
               ORDER BY job.priority DESC, job.run_at, job.id
               LIMIT $3
                 FOR UPDATE SKIP LOCKED)
          UPDATE leaseq.jobs AS job
             SET status = 'running',
                 attempts = job.attempts + 1,
                 lease_token = $6,
                 lease_expires_at = $2 + $4,
                 worker = $5,
                 started_at = $2,
                 updated_at = $2
            FROM chosen
           WHERE job.ctid = chosen.row_address AND job.status = 'pending' AND job.run_at <= $2
          RETURNING job.id, job.lease_token, job.payload, job.lease_expires_at, job.priority,
                    job.run_at, job.created_at, chosen.first_claim, job.trace_context",
    params: &[TEXT, TIMESTAMPTZ, INT4, INTERVAL, TEXT, UUID, INT4],
};

/// [`crate::lifecycle::claim::SETTINGS_AND_EXPIRED`] under the older schema.
pub(crate) const SETTINGS_AND_EXPIRED_0_3_0: Statement = Statement {
    name: "claim.settings_and_expired.0_3_0",
    sql: "SELECT queue.lease, queue.backoff_base, queue.backoff_cap,
                 expired.id, expired.attempts, expired.max_attempts, expired.lease_expires_at,
                 expired.lease_token
            FROM leaseq.queues AS queue
            LEFT JOIN LATERAL (
                SELECT job.id, job.attempts, job.max_attempts, job.lease_expires_at,
                       job.lease_token
                  FROM leaseq.jobs AS job
                 WHERE job.queue = queue.name AND job.status = 'running'
                   AND job.lease_expires_at <= $2
                 ORDER BY job.lease_expires_at
                 LIMIT $3
                   FOR UPDATE SKIP LOCKED) AS expired ON true
           WHERE queue.name = $1",
    params: &[TEXT, TIMESTAMPTZ, INT4],
};

/// [`crate::lifecycle::claim::SETTINGS_AND_EXPIRED_IN`] under the older schema.
pub(crate) const SETTINGS_AND_EXPIRED_IN_0_3_0: Statement = Statement {
    name: "claim.settings_and_expired_in.0_3_0",
    sql: "SELECT queue.lease, queue.backoff_base, queue.backoff_cap,
                 expired.id, expired.attempts, expired.max_attempts, expired.lease_expires_at,
                 expired.lease_token
            FROM leaseq.queues AS queue
            LEFT JOIN LATERAL (
                SELECT job.id, job.attempts, job.max_attempts, job.lease_expires_at,
                       job.lease_token
                  FROM leaseq.jobs AS job
                 WHERE job.queue = queue.name AND job.status = 'running'
                   AND job.lease_expires_at <= $2
                   AND job.lease_expires_at >= $4 AND job.lease_expires_at < $5
                 ORDER BY job.lease_expires_at
                 LIMIT $3
                   FOR UPDATE SKIP LOCKED) AS expired ON true
           WHERE queue.name = $1",
    params: &[TEXT, TIMESTAMPTZ, INT4, TIMESTAMPTZ, TIMESTAMPTZ],
};

/// [`crate::lifecycle::lease::RENEW`] under the older schema.
pub(crate) const RENEW_0_3_0: Statement = Statement {
    name: "renew.0_3_0",
    sql: "UPDATE leaseq.jobs AS job
             SET lease_expires_at = $3 + coalesce(
                     $4, (SELECT queue.lease FROM leaseq.queues AS queue
                           WHERE queue.name = job.queue)),
                 updated_at = $3
           WHERE job.id = $1
             -- the fence (lease.rs)
             AND job.lease_token = $2 AND job.status = 'running' AND job.lease_expires_at > $3
          RETURNING job.lease_expires_at",
    params: &[INT8, UUID, TIMESTAMPTZ, INTERVAL],
};

/// [`crate::lifecycle::lease::RENEW_BATCH`] under the older schema.
pub(crate) const RENEW_BATCH_0_3_0: Statement = Statement {
    name: "renew_batch.0_3_0",
    sql: "WITH given AS (
              SELECT * FROM unnest($1::bigint[], $2::uuid[])
                            WITH ORDINALITY AS given (id, token, ord))
          UPDATE leaseq.jobs AS job
             SET lease_expires_at = $3 + coalesce(
                     $4, (SELECT queue.lease FROM leaseq.queues AS queue
                           WHERE queue.name = job.queue)),
                 updated_at = $3
            FROM given
           WHERE job.id = given.id
             -- the fence (lease.rs)
             AND job.lease_token = given.token AND job.status = 'running'
             AND job.lease_expires_at > $3
          RETURNING given.ord, job.lease_expires_at",
    params: &[INT8_ARRAY, UUID_ARRAY, TIMESTAMPTZ, INTERVAL],
};

/// [`crate::observe::inspect::RUNNING_JOBS`] under the older schema.
pub(crate) const RUNNING_JOBS_0_3_0: Statement = Statement {
    name: "jobs.running.0_3_0",
    sql: "SELECT job.id, job.status::text, job.priority, job.run_at, job.attempts,
                 job.max_attempts, job.worker, job.lease_expires_at, job.last_error,
                 job.created_at, job.finished_at, job.queue, job.group_key, job.dedupe_key
            FROM leaseq.queues AS queue
           CROSS JOIN LATERAL (
                SELECT job.*
                  FROM leaseq.jobs AS job
                 WHERE job.queue = queue.name AND job.status = 'running'
                   AND job.id < coalesce($11, 9223372036854775807)
                   AND job.id > coalesce($12, 0)
                   AND ($4::text IS NULL OR job.group_key = $4)
                   AND ($5::text IS NULL OR job.dedupe_key = $5)
                   AND ($6::text IS NULL OR job.worker = $6)
                   AND ($7::timestamptz IS NULL OR job.created_at >= $7)
                   AND ($8::timestamptz IS NULL OR job.created_at < $8)
                   AND ($9::jsonb IS NULL OR job.payload @> $9)
                 ORDER BY job.id DESC
                 LIMIT $10) AS job
           WHERE ($1::text IS NULL OR queue.name = $1)
             AND queue.name <> ALL ($2)
           ORDER BY job.id DESC
           LIMIT $10",
    params: inspect::JOBS.params,
};

/// [`crate::observe::metrics::GAUGES`] under the older schema.
pub(crate) const GAUGES_0_3_0: Statement = Statement {
    name: "metrics.gauges.0_3_0",
    sql: "SELECT queue.name,
                 pending.due, pending.scheduled, running.running, running.expired, dead.dead,
                 pending.oldest_due, waiting.waiting, blocked.blocked
            FROM leaseq.queues AS queue
           CROSS JOIN LATERAL (
                SELECT count(*) FILTER (WHERE job.run_at <= $1) AS due,
                       count(*) FILTER (WHERE job.run_at > $1) AS scheduled,
                       min(job.run_at) FILTER (WHERE job.run_at <= $1) AS oldest_due
                  FROM leaseq.jobs AS job
                 WHERE job.queue = queue.name AND job.status = 'pending') AS pending
           CROSS JOIN LATERAL (
                SELECT count(*) AS running,
                       count(*) FILTER (WHERE job.lease_expires_at <= $1) AS expired
                  FROM leaseq.jobs AS job
                 WHERE job.queue = queue.name AND job.status = 'running') AS running
           CROSS JOIN LATERAL (
                SELECT count(*) AS dead
                  FROM leaseq.jobs AS job
                 WHERE job.queue = queue.name AND job.status = 'dead') AS dead
           CROSS JOIN LATERAL (
                SELECT count(*) AS waiting
                  FROM leaseq.jobs AS job
                 WHERE job.queue = queue.name AND job.group_key IS NOT NULL
                   AND job.finished_at IS NULL AND job.status = 'waiting') AS waiting
           CROSS JOIN LATERAL (
                SELECT count(*) AS blocked
                  FROM leaseq.jobs AS job
                 WHERE job.queue = queue.name AND job.status > 'waiting') AS blocked
           ORDER BY queue.name",
    params: &[TIMESTAMPTZ],
};

/// [`crate::observe::metrics::PROGRESSED`] under the older schema.
pub(crate) const PROGRESSED_0_3_0: Statement = Statement {
    name: "metrics.progressed.0_3_0",
    sql: "SELECT job.queue, min(greatest(job.started_at, job.progress_at))
            FROM leaseq.jobs AS job
           WHERE job.status = 'running'
           GROUP BY job.queue",
    params: &[],
};

/// [`crate::observe::occupancy::WORKERS`] under the older schema.
pub(crate) const WORKERS_0_3_0: Statement = Statement {
    name: "occupancy.workers.0_3_0",
    sql: "SELECT job.worker, job.queue, count(*), min(job.started_at), min(job.lease_expires_at),
                 count(*) FILTER (WHERE job.lease_expires_at <= $1)
            FROM leaseq.jobs AS job
           WHERE job.status = 'running' AND job.queue IS NOT NULL
           GROUP BY job.worker, job.queue
           ORDER BY job.worker, job.queue",
    params: &[TIMESTAMPTZ],
};

/// [`crate::lifecycle::claim::KEEP_EXPIRED`]: nothing to do, as this schema keeps an expired job in the lease-expiry
/// index until a claim reclaims it.
pub(crate) const KEEP_EXPIRED_0_3_0: Statement = Statement {
    name: "claim.keep_expired.0_3_0",
    sql: "SELECT WHERE $1::text IS NULL AND $2::timestamptz IS NULL
                   AND $3::bigint[] IS NULL AND $4::uuid[] IS NULL",
    params: &[TEXT, TIMESTAMPTZ, INT8_ARRAY, UUID_ARRAY],
};

/// [`crate::admin::maintenance::CAME_DUE`] under the older schema.
pub(crate) const CAME_DUE_0_3_0: Statement = Statement {
    name: "maintenance.came_due.0_3_0",
    sql: "SELECT queue.name FROM leaseq.queues AS queue
           WHERE EXISTS (SELECT FROM leaseq.jobs AS job
                          WHERE job.queue = queue.name AND job.status = 'pending'
                            AND job.run_at > job.created_at
                            AND job.run_at > $1 AND job.run_at <= $2)
           ORDER BY queue.name",
    params: &[TIMESTAMPTZ, TIMESTAMPTZ],
};

/// [`crate::lifecycle::enqueue::INSERT_DEDUPED`] under the older schema.
pub(crate) const INSERT_DEDUPED_0_3_0: Statement = Statement {
    name: "enqueue.deduped.0_3_0",
    sql: "WITH inserted AS (
              INSERT INTO leaseq.jobs
                     (queue, payload, priority, run_at, max_attempts, created_at, updated_at,
                      dedupe_key, trace_context)
              SELECT queue.name, $2, $3, coalesce($4, $6), coalesce($5, queue.max_attempts), $6,
                     $6, $8, $9
                FROM leaseq.queues AS queue
               WHERE queue.name = $1
              ON CONFLICT (queue, dedupe_key)
                 WHERE dedupe_key IS NOT NULL AND finished_at IS NULL
                       AND status IN ('pending', 'running')
                 DO NOTHING
              RETURNING id)
          SELECT inserted.id,
                 CASE WHEN $7 THEN pg_catalog.pg_notify('leaseq_' || $1, '') END
            FROM inserted",
    params: &[
        TEXT,
        JSONB,
        INT4,
        TIMESTAMPTZ,
        INT4,
        TIMESTAMPTZ,
        BOOL,
        TEXT,
        TEXT,
    ],
};

/// [`crate::lifecycle::enqueue::INSERT_GROUPED`] under the older schema.
pub(crate) const INSERT_GROUPED_0_3_0: Statement = Statement {
    name: "enqueue.grouped.0_3_0",
    sql: "WITH inserted AS (
              INSERT INTO leaseq.jobs
                     (queue, payload, priority, run_at, max_attempts, created_at, updated_at,
                      dedupe_key, group_key, trace_context, status)
              SELECT queue.name, $2, $3, coalesce($4, $6), coalesce($5, queue.max_attempts), $6,
                     $6, $8, $9, $10,
                     CASE WHEN (SELECT count(*)
                                  FROM (SELECT FROM leaseq.jobs AS live
                                         WHERE live.queue = $1 AND live.group_key = $9
                                           AND live.finished_at IS NULL
                                         LIMIT queue.group_concurrency) AS live)
                               < queue.group_concurrency
                          THEN 'pending' ELSE 'waiting' END::leaseq.job_status
                FROM leaseq.queues AS queue
               WHERE queue.name = $1
              ON CONFLICT (queue, dedupe_key)
                 WHERE dedupe_key IS NOT NULL AND finished_at IS NULL
                       AND status IN ('pending', 'running')
                 DO NOTHING
              RETURNING id, status)
          SELECT inserted.id,
                 CASE WHEN $7 AND inserted.status = 'pending'
                      THEN pg_catalog.pg_notify('leaseq_' || $1, '') END
            FROM inserted",
    params: &[
        TEXT,
        JSONB,
        INT4,
        TIMESTAMPTZ,
        INT4,
        TIMESTAMPTZ,
        BOOL,
        TEXT,
        TEXT,
        TEXT,
    ],
};

/// [`crate::lifecycle::enqueue::FIND_LIVE_DUPLICATE`] under the older schema.
pub(crate) const FIND_LIVE_DUPLICATE_0_3_0: Statement = Statement {
    name: "enqueue.find_live_duplicate.0_3_0",
    sql: "SELECT job.id FROM leaseq.jobs AS job
           WHERE job.queue = $1 AND job.dedupe_key = $2 AND job.finished_at IS NULL",
    params: &[TEXT, TEXT],
};

/// [`crate::lifecycle::enqueue::FIND_RECENT_DUPLICATE`] under the older schema.
pub(crate) const FIND_RECENT_DUPLICATE_0_3_0: Statement = Statement {
    name: "enqueue.find_recent_duplicate.0_3_0",
    sql: "SELECT job.id FROM leaseq.jobs AS job
           WHERE job.queue = $1 AND job.dedupe_key = $2
             AND (job.status = 'succeeded' OR job.status = 'dead')
             AND job.finished_at >= $3
           ORDER BY job.finished_at DESC
           LIMIT 1",
    params: &[TEXT, TEXT, TIMESTAMPTZ],
};

/// [`crate::lifecycle::enqueue::INSERT_BATCH_GROUPED`] under the older schema.
pub(crate) const INSERT_BATCH_GROUPED_0_3_0: Statement = Statement {
    name: "enqueue_batch.grouped.0_3_0",
    sql: "WITH given AS (
              SELECT given.payload, given.group_key, given.ord,
                     row_number() OVER (PARTITION BY given.group_key ORDER BY given.ord) AS nth
                FROM unnest($2, $7::text[]) WITH ORDINALITY AS given (payload, group_key, ord)),
          inserted AS (
              INSERT INTO leaseq.jobs
                     (queue, payload, priority, run_at, max_attempts, created_at, updated_at,
                      group_key, trace_context, status)
              SELECT queue.name, given.payload, $3, coalesce($4, $5), queue.max_attempts, $5, $5,
                     given.group_key, $8,
                     CASE WHEN given.group_key IS NULL
                            OR (SELECT count(*)
                                  FROM (SELECT FROM leaseq.jobs AS live
                                         WHERE live.queue = $1
                                           AND live.group_key = given.group_key
                                           AND live.finished_at IS NULL
                                         LIMIT queue.group_concurrency) AS live)
                               + given.nth <= queue.group_concurrency
                          THEN 'pending' ELSE 'waiting' END::leaseq.job_status
                FROM leaseq.queues AS queue, given
               WHERE queue.name = $1
               ORDER BY given.ord
              RETURNING id, status)
          SELECT array_agg(inserted.id ORDER BY inserted.id),
                 CASE WHEN $6 AND bool_or(inserted.status = 'pending')
                      THEN pg_catalog.pg_notify('leaseq_' || $1, '') END
            FROM inserted",
    params: &[
        TEXT,
        JSONB_ARRAY,
        INT4,
        TIMESTAMPTZ,
        TIMESTAMPTZ,
        BOOL,
        TEXT_ARRAY,
        TEXT,
    ],
};

/// [`crate::lifecycle::group::ADMIT`] under the older schema.
pub(crate) const ADMIT_0_3_0: Statement = Statement {
    name: "group.admit.0_3_0",
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
                      AND job.finished_at IS NULL AND job.status = 'waiting'
                    ORDER BY job.id
                    LIMIT given.room
                          - (SELECT count(*)
                               FROM (SELECT FROM leaseq.jobs AS admitted
                                      WHERE admitted.queue = given.queue
                                        AND admitted.group_key = given.group_key
                                        AND admitted.finished_at IS NULL
                                        AND admitted.status IN ('pending', 'running')
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
                                    AND live.finished_at IS NULL))
          SELECT admitted.queue, count(*),
                 CASE WHEN $4 THEN pg_catalog.pg_notify('leaseq_' || admitted.queue, '') END
            FROM admitted
           GROUP BY admitted.queue",
    params: &[TEXT_ARRAY, TEXT_ARRAY, TIMESTAMPTZ, BOOL],
};

/// [`crate::lifecycle::group::WAITING`] under the older schema.
pub(crate) const WAITING_0_3_0: Statement = Statement {
    name: "group.waiting.0_3_0",
    sql: "SELECT DISTINCT job.queue, job.group_key
            FROM leaseq.jobs AS job
           WHERE job.queue = $1 AND job.group_key IS NOT NULL AND job.finished_at IS NULL
             AND job.status = 'waiting'",
    params: &[TEXT],
};

/// [`crate::lifecycle::redrive::REDRIVE_ALL`] under the older schema.
pub(crate) const REDRIVE_ALL_0_3_0: Statement = Statement {
    name: "redrive_all.0_3_0",
    sql: "WITH chosen AS (
              SELECT job.id FROM leaseq.jobs AS job
               WHERE job.queue = $1 AND job.status = 'dead'
               ORDER BY job.id
               LIMIT $3
                 FOR UPDATE SKIP LOCKED),
          redriven AS (
              UPDATE leaseq.jobs AS job
                 SET status = 'pending', attempts = 0, run_at = $2, updated_at = $2,
                     finished_at = NULL
                FROM chosen
               WHERE job.id = chosen.id AND job.status = 'dead'
              RETURNING job.id)
          SELECT coalesce(array_agg(redriven.id), '{}') FROM redriven",
    params: &[TEXT, TIMESTAMPTZ, INT4],
};

/// [`crate::observe::inspect::DEAD_JOBS`] under the older schema.
pub(crate) const DEAD_JOBS_0_3_0: Statement = Statement {
    name: "jobs.dead.0_3_0",
    sql: "SELECT job.id, job.status::text, job.priority, job.run_at, job.attempts,
                 job.max_attempts, job.worker, job.lease_expires_at, job.last_error,
                 job.created_at, job.finished_at, job.queue, job.group_key, job.dedupe_key
            FROM (SELECT dead.id
                    FROM leaseq.queues AS queue
                   CROSS JOIN LATERAL (
                        SELECT job.id
                          FROM leaseq.jobs AS job
                         WHERE job.queue = queue.name AND job.status = 'dead'
                           AND job.id < coalesce($11, 9223372036854775807)
                           AND job.id > coalesce($12, 0)
                         ORDER BY job.id DESC
                         LIMIT $10) AS dead
                   WHERE ($1::text IS NULL OR queue.name = $1)
                     AND queue.name <> ALL ($2)
                   ORDER BY dead.id DESC
                   LIMIT $10) AS page
            JOIN leaseq.jobs AS job ON job.id = page.id
           ORDER BY job.id DESC",
    params: inspect::JOBS.params,
};

/// [`crate::observe::occupancy::GROUPS`] under the older schema.
pub(crate) const GROUPS_0_3_0: Statement = Statement {
    name: "occupancy.groups.0_3_0",
    sql: "SELECT live.group_key,
                 count(*) FILTER (WHERE live.status <> 'waiting'),
                 count(*) FILTER (WHERE live.status = 'waiting'),
                 min(live.id) FILTER (WHERE live.status = 'waiting')
            FROM leaseq.jobs AS live
           WHERE live.queue = $1 AND live.group_key IS NOT NULL AND live.finished_at IS NULL
           GROUP BY live.group_key
           ORDER BY 3 DESC, 1
           LIMIT $2",
    params: &[TEXT, INT4],
};
