-- After upgrade_before.sql on 0.2.0: the update to the newest version keeps every job, lease
-- token, attempt, queue, grant and schedule, and the jobs go on living under it.
\pset pager off
-- This session first serves 0.2.0 (finishing no job), so the update must reach a backend that
-- has already looked at the schema.
SELECT leaseq.queue_complete(0, gen_random_uuid()) AS completed_nothing_under_0_2_0;
ALTER EXTENSION leaseq UPDATE;
SELECT extversion = default_version AS at_the_newest
  FROM pg_extension, pg_available_extensions WHERE extname = 'leaseq' AND name = 'leaseq';

-- Every row as it was (in the columns 0.2.0 had; 0.3.0's progress is NULL until a report).
CREATE TEMP VIEW jobs_as_in_0_2_0 AS
    SELECT id, created_at, run_at, priority, max_attempts, queue, dedupe_key, payload, status,
           attempts, started_at, lease_expires_at, updated_at, lease_token, worker, result,
           last_error, finished_at, snoozes, group_key
      FROM leaseq.jobs;
SELECT NOT EXISTS (SELECT FROM leaseq.jobs WHERE progress IS NOT NULL OR progress_at IS NOT NULL)
       AS no_progress_yet;
SELECT (SELECT count(*) FROM (SELECT * FROM upgrade_jobs EXCEPT ALL SELECT * FROM jobs_as_in_0_2_0) gone) AS jobs_changed,
       (SELECT count(*) FROM (SELECT * FROM jobs_as_in_0_2_0 EXCEPT ALL SELECT * FROM upgrade_jobs) new) AS jobs_new,
       (SELECT count(*) FROM (SELECT * FROM upgrade_attempts EXCEPT ALL SELECT * FROM leaseq.attempts) gone) AS attempts_changed,
       (SELECT count(*) FROM (SELECT * FROM leaseq.attempts EXCEPT ALL SELECT * FROM upgrade_attempts) new) AS attempts_new;
-- (Queues as 0.2.0 had them: 0.3.0 adds `paused`, false for every queue; schedules too: 0.3.0
-- adds `last_job_id`, unknown until their next tick.)
SELECT queues = (SELECT string_agg(row(q.name, q.lease, q.max_attempts, q.backoff_base, q.backoff_cap,
                                       q.created_at, q.updated_at, q.retain, q.max_snoozes,
                                       q.group_concurrency)::text, ',' ORDER BY name)
                   FROM leaseq.queues q) AS queues_kept,
       NOT EXISTS (SELECT FROM leaseq.queues WHERE paused) AS every_queue_runs,
       grants = (SELECT string_agg(g::text, ',' ORDER BY queue, role, privilege)
                   FROM leaseq.queue_grants g) AS grants_kept,
       schedules = (SELECT string_agg(row(s.name, s.queue, s.every, s.payload, s.timezone,
                                          s.catch_up, s.next_at, s.created_at, s.updated_at)::text,
                                      ',' ORDER BY name)
                      FROM leaseq.schedules s) AS schedules_kept,
       NOT EXISTS (SELECT FROM leaseq.schedules WHERE last_job_id IS NOT NULL) AS no_last_job_yet
  FROM upgrade_rest;

-- The running jobs are completed with the tokens 0.2.0 handed out, under the same attempt
-- numbers; one alone, one in a batch; the grouped one admits the job waiting behind it.
SELECT leaseq.queue_complete(l.job_id, l.lease_token, '{"after": "upgrade"}') AS completed_with_old_token
  FROM upgrade_leases l JOIN leaseq.jobs j ON j.id = l.job_id WHERE j.queue = 'up_main'
 ORDER BY l.job_id LIMIT 1;
SELECT leaseq.queue_complete_batch(ARRAY[l.job_id], ARRAY[l.lease_token]) AS completed_with_old_token
  FROM upgrade_leases l JOIN leaseq.jobs j ON j.id = l.job_id WHERE j.queue = 'up_main'
 ORDER BY l.job_id OFFSET 1;
SELECT leaseq.queue_complete(l.job_id, l.lease_token) AS group_job_completed_with_old_token
  FROM upgrade_leases l JOIN leaseq.jobs j ON j.id = l.job_id WHERE j.queue = 'up_groups';
SELECT bool_and(a.outcome = 'succeeded' AND a.lease_token = l.lease_token) AS closed_as_claimed
  FROM upgrade_leases l JOIN leaseq.attempts a ON a.job_id = l.job_id AND a.attempt_no = l.attempt_no;
SELECT payload->>'state' AS admitted, status FROM leaseq.jobs WHERE queue = 'up_groups' ORDER BY id;

-- The dedupe key still holds (the rebuilt index, finished_at IS NULL), and is free once its job
-- finished; the dead job comes back and is numbered after its history; the retrying and snoozed
-- jobs keep their delays.
SELECT leaseq.queue_enqueue('up_main', '{"state": "duplicate"}', dedupe_key => 'up-key')
       = (SELECT id FROM leaseq.jobs WHERE dedupe_key = 'up-key') AS deduped;
SELECT leaseq.queue_redrive(id) AS redriven FROM leaseq.jobs WHERE payload->>'state' = 'dead';
CREATE TEMP TABLE claimed AS
    SELECT job_id, lease_token, payload->>'state' AS state, attempt_no
      FROM leaseq.queue_claim('up_main', 'new-worker', 10);
SELECT state AS claimed, attempt_no FROM claimed ORDER BY job_id;
SELECT leaseq.queue_complete(job_id, lease_token) AS keyed_job_completed
  FROM claimed WHERE state = 'pending';
SELECT leaseq.queue_enqueue('up_main', '{"state": "keyed again"}', dedupe_key => 'up-key')
       <> (SELECT job_id FROM claimed WHERE state = 'pending') AS key_free_once_finished;
SELECT count(*) FILTER (WHERE run_at > clock_timestamp()) AS still_delayed
  FROM leaseq.jobs WHERE payload->>'state' IN ('retrying', 'snoozed');
-- The grant still closes its queue to a worker it does not name.
SET client_min_messages = warning;
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'upgrade_other') THEN
        CREATE ROLE upgrade_other NOLOGIN;
    END IF;
END $$;
GRANT leaseq_worker TO upgrade_other;
RESET client_min_messages;
SELECT queue, role, privilege FROM leaseq.queue_grants();
SET ROLE upgrade_other;
SELECT count(*) FROM leaseq.queue_claim('up_groups', 'other');
RESET ROLE;
SELECT string_agg(payload->>'state' || ':' || status, ', ' ORDER BY id) AS jobs FROM leaseq.jobs;
DROP TABLE upgrade_jobs, upgrade_attempts, upgrade_leases, upgrade_rest;
-- (what the suites that run next list for every queue)
SELECT leaseq.queue_unschedule('up_nightly');
SELECT leaseq.queue_revoke('up_groups', 'upgrade_team', 'work');
