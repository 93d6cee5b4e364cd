-- Runs on leaseq 0.3.0: jobs in every state — live leases, succeeded, dead, retrying, snoozed,
-- cancelled, keyed, scheduled, waiting in an ordered group, and 0.3.0's own: a flow whose child
-- waits, blocked, for its running parent, a step and a progress report under a live lease, a
-- producer's trace context, a paused queue — with history, a per-queue grant and a schedule
-- that has ticked, kept aside (upgrade_jobs, upgrade_attempts, upgrade_leases, upgrade_rest) for
-- upgrade_after.sql to compare once the extension is updated. Its functions call the library
-- under test, as after a package upgrade and before ALTER EXTENSION UPDATE.
\pset pager off
SELECT extversion FROM pg_extension WHERE extname = 'leaseq';
SELECT leaseq.queue_create('up_main', lease => '1 hour', max_attempts => 2,
                           backoff_base => '1 hour', backoff_cap => '1 hour');
SELECT leaseq.queue_create('up_groups', lease => '1 hour', group_concurrency => 1);
SELECT leaseq.queue_create('up_flow', lease => '1 hour');
SELECT leaseq.queue_create('up_paused');
SELECT leaseq.queue_create('up_ticks');

-- Two running jobs with live leases (claimed first: the highest priority), one of them traced.
SELECT leaseq.queue_enqueue('up_main', '{"state": "running", "n": 1}', priority => 10,
       trace_context => '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01') > 0 AS enqueued;
SELECT leaseq.queue_enqueue('up_main', '{"state": "running", "n": 2}', priority => 10) > 0 AS enqueued;
CREATE TABLE upgrade_leases AS
    SELECT job_id, lease_token, attempt_no FROM leaseq.queue_claim('up_main', 'old-worker', 2);
-- Succeeded, with a result, alone and in a batch.
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
-- A flow: its parent running (a step recorded, progress reported), its child blocked on it.
SELECT key FROM leaseq.queue_flow(
    '[{"key": "parent", "queue": "up_flow", "payload": {"state": "running parent"}},
      {"key": "child", "queue": "up_flow", "payload": {"state": "blocked child"},
       "depends_on": ["parent"]}]') ORDER BY key;
INSERT INTO upgrade_leases
    SELECT job_id, lease_token, attempt_no FROM leaseq.queue_claim('up_flow', 'old-worker', 10);
SELECT leaseq.queue_step(l.job_id, l.lease_token, 'fetched', '{"rows": 3}') AS step_recorded,
       leaseq.queue_progress(l.job_id, l.lease_token, '{"done": 0.5}') AS progress_reported
  FROM upgrade_leases l JOIN leaseq.jobs j ON j.id = l.job_id WHERE j.queue = 'up_flow';
-- A paused queue, holding a job.
SELECT leaseq.queue_enqueue('up_paused', '{"state": "paused"}') > 0 AS enqueued;
SELECT leaseq.queue_pause('up_paused') AS paused;
-- A per-queue grant, and a schedule that has ticked once.
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
SELECT leaseq.queue_schedule('up_nightly', 'up_ticks', '0 3 * * *', '{"state": "ticked"}',
       trace_context => '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01') > now()
       AS scheduled;
UPDATE leaseq.schedules SET next_at = now() - interval '1 minute' WHERE name = 'up_nightly';
SELECT payload->>'state' AS ticked, trace_context FROM leaseq.queue_claim('up_ticks', 'w');

SELECT string_agg(payload->>'state' || ':' || status, ', ' ORDER BY id) AS jobs FROM leaseq.jobs;
SELECT count(*) AS live_leases FROM upgrade_leases;
CREATE TABLE upgrade_jobs AS SELECT * FROM leaseq.jobs;
CREATE TABLE upgrade_attempts AS SELECT * FROM leaseq.attempts;
CREATE TABLE upgrade_rest AS
    SELECT (SELECT string_agg(q::text, ',' ORDER BY name) FROM leaseq.queues q) AS queues,
           (SELECT string_agg(g::text, ',' ORDER BY queue, role, privilege)
              FROM leaseq.queue_grants g) AS grants,
           (SELECT string_agg(s::text, ',' ORDER BY name) FROM leaseq.schedules s) AS schedules,
           (SELECT string_agg(e::text, ',' ORDER BY child_id, parent_id) FROM leaseq.job_parents e)
             AS edges,
           (SELECT string_agg(s::text, ',' ORDER BY job_id, name) FROM leaseq.job_steps s) AS steps;
SELECT count(*) AS attempts FROM upgrade_attempts;
