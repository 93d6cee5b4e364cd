-- Runs on leaseq 0.2.0, the release users hold data in: jobs in every state — live leases,
-- succeeded, dead, retrying, snoozed, cancelled, keyed, scheduled, waiting in an ordered group —
-- with history, a per-queue grant and a schedule, kept aside (upgrade_jobs, upgrade_attempts,
-- upgrade_leases) for upgrade_after.sql to compare once the extension is updated. Its functions
-- call the library under test, as after a package upgrade and before ALTER EXTENSION UPDATE:
-- that library must serve the 0.2.0 schema as 0.2.0 did.
\pset pager off
SELECT extversion FROM pg_extension WHERE extname = 'leaseq';
SELECT leaseq.queue_create('up_main', lease => '1 hour', max_attempts => 2,
                           backoff_base => '1 hour', backoff_cap => '1 hour');
SELECT leaseq.queue_create('up_groups', lease => '1 hour', group_concurrency => 1);

-- Two running jobs with live leases (claimed first: the highest priority).
SELECT count(*) AS enqueued FROM leaseq.queue_enqueue_batch('up_main',
    ARRAY['{"state": "running", "n": 1}', '{"state": "running", "n": 2}']::jsonb[], priority => 10);
CREATE TABLE upgrade_leases AS
    SELECT job_id, lease_token, attempt_no FROM leaseq.queue_claim('up_main', 'old-worker', 2);
-- Succeeded, with a result, alone and in a batch: on the job's row, as 0.2.0 keeps it.
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
-- Snoozed: back in an hour, its budget kept.
SELECT leaseq.queue_enqueue('up_main', '{"state": "snoozed"}', priority => 6) > 0 AS enqueued;
SELECT leaseq.queue_snooze(job_id, lease_token, '1 hour') FROM leaseq.queue_claim('up_main', 'w');
-- Cancelled, pending with a dedupe key, scheduled for later.
SELECT leaseq.queue_cancel(leaseq.queue_enqueue('up_main', '{"state": "cancelled"}'));
SELECT leaseq.queue_enqueue('up_main', '{"state": "pending"}', dedupe_key => 'up-key') > 0 AS pending;
SELECT leaseq.queue_enqueue('up_main', '{"state": "scheduled"}',
                            run_at => clock_timestamp() + interval '1 day') > 0 AS scheduled;
-- An ordered group: its first job running under a live lease, the next one waiting for it.
SELECT leaseq.queue_enqueue('up_groups', '{"state": "running in a group"}', group_key => 'g') > 0
       AS enqueued;
SELECT leaseq.queue_enqueue('up_groups', '{"state": "waiting in a group"}', group_key => 'g') > 0
       AS enqueued;
INSERT INTO upgrade_leases
    SELECT job_id, lease_token, attempt_no FROM leaseq.queue_claim('up_groups', 'old-worker', 10);
-- A per-queue grant and a schedule.
SET client_min_messages = warning;
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'upgrade_team') THEN
        CREATE ROLE upgrade_team NOLOGIN;
    END IF;
END $$;
GRANT leaseq_worker TO upgrade_team;
RESET client_min_messages;
SELECT leaseq.queue_grant('up_groups', 'upgrade_team', 'work');
SELECT leaseq.queue_schedule('up_nightly', 'up_main', '0 3 * * *', '{"state": "ticked"}') > now()
       AS scheduled;

-- A due tick, under 0.2.0's schema: a claim enqueues it and moves the schedule on, as 0.2.0 did
-- (its schema keeps no last job), and queue_schedules lists 0.2.0's columns. Rolled back.
BEGIN;
SELECT leaseq.queue_schedule('up_tick', 'up_main', '* * * * *', '{"state": "tick"}') IS NOT NULL
       AS scheduled;
UPDATE leaseq.schedules SET next_at = now() - interval '1 minute' WHERE name = 'up_tick';
SELECT count(*) AS tick_claimed FROM leaseq.queue_claim('up_main', 'w', 100)
 WHERE payload->>'state' = 'tick';
SELECT name, queue, every, timezone, catch_up, payload
  FROM leaseq.queue_schedules() WHERE name = 'up_tick' AND next_at > now();
ROLLBACK;

-- queue_jobs as 0.2.0 declared it: one queue, by status, newest first.
SELECT status, payload.state
  FROM leaseq.queue_jobs('up_main', NULL, 3) AS j,
       LATERAL (SELECT payload->>'state' AS state FROM leaseq.jobs WHERE id = j.job_id) AS payload;
SELECT count(*) AS dead FROM leaseq.queue_jobs('up_main', 'dead', 10);

-- A queue's new lease holds from its next claim: 0.2.0's schema sends no invalidation when its
-- queues change, so this library reads their settings at every claim instead of keeping them.
BEGIN;
SELECT leaseq.queue_create('up_lease', interval '1 minute');
SELECT count(*) AS enqueued FROM leaseq.queue_enqueue_batch('up_lease', ARRAY['{}', '{}']::jsonb[]);
SELECT lease_expires_at < now() + interval '2 minutes' AS short_lease
  FROM leaseq.queue_claim('up_lease', 'w');
SELECT leaseq.queue_create('up_lease', interval '2 hours');
SELECT lease_expires_at > now() + interval '1 hour' AS long_lease
  FROM leaseq.queue_claim('up_lease', 'w');
ROLLBACK;

SELECT string_agg(payload->>'state' || ':' || status, ', ' ORDER BY id) AS jobs FROM leaseq.jobs;
SELECT count(*) AS live_leases FROM upgrade_leases;
CREATE TABLE upgrade_jobs AS SELECT * FROM leaseq.jobs;
CREATE TABLE upgrade_attempts AS SELECT * FROM leaseq.attempts;
CREATE TABLE upgrade_rest AS
    SELECT (SELECT string_agg(q::text, ',' ORDER BY name) FROM leaseq.queues q) AS queues,
           (SELECT string_agg(g::text, ',' ORDER BY queue, role, privilege)
              FROM leaseq.queue_grants g) AS grants,
           (SELECT string_agg(s::text, ',' ORDER BY name) FROM leaseq.schedules s) AS schedules;
SELECT count(*) AS attempts FROM upgrade_attempts;
