-- After upgrade_before.sql on 0.1.0: the update to the newest version keeps every job, lease
-- token and attempt, and the jobs go on living under it.
\pset pager off
-- This session first serves 0.1.0 (finishing no job), so the update must reach a backend that
-- has already looked at the schema.
SELECT leaseq.queue_complete(0, gen_random_uuid()) AS completed_nothing_under_0_1_0;
ALTER EXTENSION leaseq UPDATE;
SELECT extversion = default_version AS at_the_newest
  FROM pg_extension, pg_available_extensions WHERE extname = 'leaseq' AND name = 'leaseq';

-- Every row as it was (in the columns 0.1.0 had; the new ones hold their defaults).
CREATE TEMP VIEW jobs_as_in_0_1_0 AS
    SELECT id, created_at, run_at, priority, max_attempts, queue, dedupe_key, payload, status,
           attempts, started_at, lease_expires_at, updated_at, lease_token, worker, result,
           last_error, finished_at
      FROM leaseq.jobs;
SELECT (SELECT count(*) FROM (SELECT * FROM upgrade_jobs EXCEPT ALL SELECT * FROM jobs_as_in_0_1_0) gone) AS jobs_changed,
       (SELECT count(*) FROM (SELECT * FROM jobs_as_in_0_1_0 EXCEPT ALL SELECT * FROM upgrade_jobs) new) AS jobs_new,
       (SELECT count(*) FROM (SELECT * FROM upgrade_attempts EXCEPT ALL SELECT * FROM leaseq.attempts) gone) AS attempts_changed,
       (SELECT count(*) FROM (SELECT * FROM leaseq.attempts EXCEPT ALL SELECT * FROM upgrade_attempts) new) AS attempts_new;

SELECT count(*) FILTER (WHERE snoozes <> 0) AS jobs_snoozed,
       (SELECT count(*) FROM leaseq.queues WHERE retain IS NOT NULL OR max_snoozes IS NOT NULL)
           AS queues_with_new_settings
  FROM leaseq.jobs;

-- The running jobs are completed with the tokens 0.1.0 handed out, under the same attempt numbers
-- and now kept on the job's row; one alone, one in a batch.
SELECT leaseq.queue_complete(job_id, lease_token, '{"after": "upgrade"}') AS completed_with_old_token
  FROM upgrade_leases ORDER BY job_id LIMIT 1;
SELECT leaseq.queue_complete_batch(ARRAY[job_id], ARRAY[lease_token]) AS completed_with_old_token
  FROM upgrade_leases ORDER BY job_id OFFSET 1;
SELECT count(*) AS successes_kept_on_the_row FROM leaseq.jobs j JOIN upgrade_leases l ON l.job_id = j.id
 WHERE j.status = 'succeeded' AND j.lease_token = l.lease_token
   AND NOT EXISTS (SELECT FROM leaseq.closed_attempts c WHERE c.job_id = j.id);
SELECT bool_and(a.outcome = 'succeeded' AND a.lease_token = l.lease_token) AS closed_as_claimed
  FROM upgrade_leases l JOIN leaseq.attempts a ON a.job_id = l.job_id AND a.attempt_no = l.attempt_no;

-- The application role lost its rights on the tables and joined the group roles its rights
-- matched; it finishes its 0.1.0 lease as itself, through the functions only.
SELECT r.rolname AS upgrade_app_is_in
  FROM pg_auth_members AS m JOIN pg_roles AS r ON r.oid = m.roleid
 WHERE m.member = 'upgrade_app'::regrole ORDER BY 1;
SELECT count(*) AS table_rights_left
  FROM pg_class AS rel, aclexplode(rel.relacl) AS acl
 WHERE rel.relnamespace = 'leaseq'::regnamespace AND acl.grantee <> rel.relowner;
GRANT SELECT ON upgrade_app_lease TO upgrade_app;
SET ROLE upgrade_app;
SELECT leaseq.queue_complete(job_id, lease_token) AS app_completed_with_old_token
  FROM upgrade_app_lease;
-- (and may no longer touch the tables themselves)
UPDATE leaseq.jobs SET status = 'succeeded';
RESET ROLE;

-- The dedupe key still holds; the dead job comes back and is numbered after its history; the
-- retrying job keeps its backoff.
SELECT leaseq.queue_enqueue('up_main', '{"state": "duplicate"}', dedupe_key => 'up-key')
       = (SELECT id FROM leaseq.jobs WHERE dedupe_key = 'up-key') AS deduped;
SELECT leaseq.queue_redrive(id) AS redriven FROM leaseq.jobs WHERE payload->>'state' = 'dead';
SELECT payload->>'state' AS claimed, attempt_no FROM leaseq.queue_claim('up_main', 'new-worker', 10)
 ORDER BY job_id;
SELECT run_at > clock_timestamp() AS still_backing_off FROM leaseq.jobs WHERE payload->>'state' = 'retrying';
SELECT string_agg(payload->>'state' || ':' || status, ', ' ORDER BY id) AS jobs
  FROM leaseq.jobs WHERE queue = 'up_main';
DROP TABLE upgrade_jobs, upgrade_attempts, upgrade_leases, upgrade_app_lease;
