-- After upgrade_before.sql on 0.3.0: the update to the newest version keeps every job, lease
-- token, attempt, queue, grant, schedule, edge, step, progress report and trace context, and the
-- jobs go on living under it.
\pset pager off
-- This session first serves 0.3.0 (finishing no job), so the update must reach a backend that
-- has already looked at the schema.
SELECT leaseq.queue_complete(0, gen_random_uuid()) AS completed_nothing_under_0_3_0;
ALTER EXTENSION leaseq UPDATE;
SELECT extversion = default_version AS at_the_newest
  FROM pg_extension, pg_available_extensions WHERE extname = 'leaseq' AND name = 'leaseq';

-- Every row as it was, column by column (0.4.0 rewrote the table with its columns in another
-- order, and two more that derive from the others: lane, keyed_finished_at).
SELECT (SELECT count(*) FROM (SELECT to_jsonb(j) FROM upgrade_jobs j
                              EXCEPT ALL SELECT to_jsonb(j) - 'lane' - 'keyed_finished_at' FROM leaseq.jobs j) gone) AS jobs_changed,
       (SELECT count(*) FROM (SELECT to_jsonb(j) - 'lane' - 'keyed_finished_at' FROM leaseq.jobs j
                              EXCEPT ALL SELECT to_jsonb(j) FROM upgrade_jobs j) new) AS jobs_new,
       (SELECT count(*) FROM (SELECT * FROM upgrade_attempts EXCEPT ALL SELECT * FROM leaseq.attempts) gone) AS attempts_changed,
       (SELECT count(*) FROM (SELECT * FROM leaseq.attempts EXCEPT ALL SELECT * FROM upgrade_attempts) new) AS attempts_new;
SELECT queues = (SELECT string_agg(q::text, ',' ORDER BY name) FROM leaseq.queues q) AS queues_kept,
       grants = (SELECT string_agg(g::text, ',' ORDER BY queue, role, privilege)
                   FROM leaseq.queue_grants g) AS grants_kept,
       schedules = (SELECT string_agg(s::text, ',' ORDER BY name) FROM leaseq.schedules s)
         AS schedules_kept,
       edges = (SELECT string_agg(e::text, ',' ORDER BY child_id, parent_id)
                  FROM leaseq.job_parents e) AS edges_kept,
       steps = (SELECT string_agg(s::text, ',' ORDER BY job_id, name) FROM leaseq.job_steps s)
         AS steps_kept
  FROM upgrade_rest;

-- The running jobs are completed with the tokens 0.3.0 handed out, under the same attempt
-- numbers; the grouped one admits the job waiting behind it; the flow's parent releases its
-- child, which claims with its progress and steps where they were.
SELECT leaseq.queue_complete(l.job_id, l.lease_token, '{"after": "upgrade"}') AS completed_with_old_token
  FROM upgrade_leases l JOIN leaseq.jobs j ON j.id = l.job_id WHERE j.queue = 'up_main'
 ORDER BY l.job_id LIMIT 1;
SELECT leaseq.queue_complete_batch(ARRAY[l.job_id], ARRAY[l.lease_token]) AS completed_with_old_token
  FROM upgrade_leases l JOIN leaseq.jobs j ON j.id = l.job_id WHERE j.queue = 'up_main'
 ORDER BY l.job_id OFFSET 1;
SELECT leaseq.queue_complete(l.job_id, l.lease_token) AS group_job_completed_with_old_token
  FROM upgrade_leases l JOIN leaseq.jobs j ON j.id = l.job_id WHERE j.queue = 'up_groups';
SELECT j.progress, (SELECT count(*) FROM leaseq.queue_steps(j.id)) AS steps
  FROM leaseq.jobs j WHERE j.queue = 'up_flow' AND j.status = 'running';
SELECT leaseq.queue_complete(l.job_id, l.lease_token) AS parent_completed_with_old_token
  FROM upgrade_leases l JOIN leaseq.jobs j ON j.id = l.job_id WHERE j.queue = 'up_flow';
SELECT bool_and(a.outcome = 'succeeded' AND a.lease_token = l.lease_token) AS closed_as_claimed
  FROM upgrade_leases l JOIN leaseq.attempts a ON a.job_id = l.job_id AND a.attempt_no = l.attempt_no;
SELECT payload->>'state' AS admitted, status FROM leaseq.jobs
 WHERE queue IN ('up_groups', 'up_flow') ORDER BY id;

-- The dedupe key still holds; the dead job comes back and is numbered after its history; the
-- retrying and snoozed jobs keep their delays; the paused queue stays paused until resumed.
SELECT leaseq.queue_enqueue('up_main', '{"state": "duplicate"}', dedupe_key => 'up-key')
       = (SELECT id FROM leaseq.jobs WHERE dedupe_key = 'up-key') AS deduped;
SELECT leaseq.queue_redrive(id) AS redriven FROM leaseq.jobs WHERE payload->>'state' = 'dead';
CREATE TEMP TABLE claimed AS
    SELECT job_id, lease_token, payload->>'state' AS state, attempt_no, trace_context
      FROM leaseq.queue_claim('up_main', 'new-worker', 10);
SELECT state AS claimed, attempt_no FROM claimed ORDER BY job_id;
SELECT count(*) FILTER (WHERE run_at > clock_timestamp()) AS still_delayed
  FROM leaseq.jobs WHERE payload->>'state' IN ('retrying', 'snoozed');
SELECT count(*) AS claimed_while_paused FROM leaseq.queue_claim('up_paused', 'w');
SELECT leaseq.queue_resume('up_paused') AS resumed;
SELECT payload->>'state' AS claimed_once_resumed FROM leaseq.queue_claim('up_paused', 'w');
-- A traced enqueue and claim still work.
SELECT leaseq.queue_enqueue('up_flow', '{"state": "traced after"}',
       trace_context => '00-11111111111111111111111111111111-2222222222222222-01') > 0 AS enqueued;
SELECT payload->>'state' AS state, trace_context FROM leaseq.queue_claim('up_flow', 'w', 10)
 ORDER BY job_id;
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
