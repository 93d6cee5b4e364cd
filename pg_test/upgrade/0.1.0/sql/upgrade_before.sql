-- Runs on leaseq 0.1.0, the release users hold data in: jobs in every state, with history,
-- live leases and a dedupe key, kept aside (upgrade_jobs, upgrade_attempts, upgrade_leases) for
-- upgrade_after.sql to compare once the extension is updated. Its functions call the library
-- under test, as after a package upgrade and before ALTER EXTENSION UPDATE: that library must
-- serve the 0.1.0 schema as 0.1.0 did.
\pset pager off
SELECT extversion FROM pg_extension WHERE extname = 'leaseq';
SELECT leaseq.queue_create('up_main', lease => '1 hour', max_attempts => 2,
                           backoff_base => '1 hour', backoff_cap => '1 hour');

-- Two running jobs with live leases (claimed first: the highest priority).
SELECT count(*) AS enqueued FROM leaseq.queue_enqueue_batch('up_main',
    ARRAY['{"state": "running", "n": 1}', '{"state": "running", "n": 2}']::jsonb[], priority => 10);
CREATE TABLE upgrade_leases AS
    SELECT job_id, lease_token, attempt_no FROM leaseq.queue_claim('up_main', 'old-worker', 2);
-- Succeeded, with a result.
SELECT leaseq.queue_enqueue('up_main', '{"state": "succeeded"}', priority => 9) > 0 AS enqueued;
SELECT leaseq.queue_complete(job_id, lease_token, '{"done": true}') FROM leaseq.queue_claim('up_main', 'w');
SELECT leaseq.queue_enqueue('up_main', '{"state": "succeeded in a batch"}', priority => 9) > 0 AS enqueued;
SELECT leaseq.queue_complete_batch(ARRAY[job_id], ARRAY[lease_token]) FROM leaseq.queue_claim('up_main', 'w');
-- Dead: its one attempt failed.
SELECT leaseq.queue_enqueue('up_main', '{"state": "dead"}', priority => 8, max_attempts => 1) > 0 AS enqueued;
SELECT leaseq.queue_fail(job_id, lease_token, '{"error": "boom"}') FROM leaseq.queue_claim('up_main', 'w');
-- Retrying: failed once, pending again an hour later.
SELECT leaseq.queue_enqueue('up_main', '{"state": "retrying"}', priority => 7) > 0 AS enqueued;
SELECT leaseq.queue_fail(job_id, lease_token, '{"error": "try later"}', retry_in => '1 hour')
  FROM leaseq.queue_claim('up_main', 'w');
-- Cancelled, pending with a dedupe key, scheduled for later.
SELECT leaseq.queue_cancel(leaseq.queue_enqueue('up_main', '{"state": "cancelled"}'));
SELECT leaseq.queue_enqueue('up_main', '{"state": "pending"}', dedupe_key => 'up-key') > 0 AS pending;
SELECT leaseq.queue_enqueue('up_main', '{"state": "scheduled"}',
                            run_at => clock_timestamp() + interval '1 day') > 0 AS scheduled;

-- An application role with the rights 0.1.0's README told users to grant; its functions ran
-- with those rights, and it holds a lease when the update comes.
SET client_min_messages = warning;
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'upgrade_app') THEN
        CREATE ROLE upgrade_app NOLOGIN;
    END IF;
    -- Cluster-wide: forget what an earlier run's update gave it.
    IF pg_has_role('upgrade_app', 'leaseq_worker', 'MEMBER') THEN
        REVOKE leaseq_worker FROM upgrade_app;
    END IF;
    IF pg_has_role('upgrade_app', 'leaseq_observer', 'MEMBER') THEN
        REVOKE leaseq_observer FROM upgrade_app;
    END IF;
END $$;
RESET client_min_messages;
GRANT USAGE ON SCHEMA leaseq TO upgrade_app;
GRANT SELECT, INSERT, UPDATE ON leaseq.queues, leaseq.jobs TO upgrade_app;
GRANT SELECT, INSERT ON leaseq.closed_attempts TO upgrade_app;
GRANT SELECT ON leaseq.attempts TO upgrade_app;
SET ROLE upgrade_app;
SELECT leaseq.queue_enqueue('up_main', '{"state": "running for the app"}', priority => 20) > 0
       AS app_enqueued;
CREATE TEMP TABLE app_lease AS
    SELECT job_id, lease_token FROM leaseq.queue_claim('up_main', 'app-worker')
     WHERE payload->>'state' = 'running for the app';
RESET ROLE;
CREATE TABLE upgrade_app_lease AS SELECT * FROM app_lease;
SELECT count(*) AS app_leases FROM upgrade_app_lease;

-- queue_jobs as 0.1.0 declared it: one queue, by status, newest first.
SELECT status, payload.state
  FROM leaseq.queue_jobs('up_main', NULL, 3) AS j,
       LATERAL (SELECT payload->>'state' AS state FROM leaseq.jobs WHERE id = j.job_id) AS payload;
SELECT count(*) AS dead FROM leaseq.queue_jobs('up_main', 'dead', 10);

SELECT string_agg(payload->>'state' || ':' || status, ', ' ORDER BY id) AS jobs
  FROM leaseq.jobs WHERE queue = 'up_main';
CREATE TABLE upgrade_jobs AS SELECT * FROM leaseq.jobs;
CREATE TABLE upgrade_attempts AS SELECT * FROM leaseq.attempts;
SELECT count(*) AS attempts FROM upgrade_attempts;
