-- Run on the old major before pg_upgrade (scripts/lib.sh check_pg_upgrade): jobs in every
-- state — live leases (kept aside in pg_upgrade_leases with their tokens), succeeded, dead,
-- retrying, snoozed, cancelled, pending with a dedupe key, scheduled, waiting in an ordered
-- group — with history, a per-queue grant and a schedule. after.sql reads them on the new major.
\set ON_ERROR_STOP on
SELECT leaseq.queue_create('pgu_main', lease => '1 hour', max_attempts => 2,
                           backoff_base => '1 hour', backoff_cap => '1 hour');
SELECT leaseq.queue_create('pgu_groups', lease => '1 hour', group_concurrency => 1);
SELECT count(*) FROM leaseq.queue_enqueue_batch('pgu_main',
    ARRAY['{"state": "running", "n": 1}', '{"state": "running", "n": 2}']::jsonb[], priority => 10);
CREATE TABLE pg_upgrade_leases AS
    SELECT job_id, lease_token, attempt_no FROM leaseq.queue_claim('pgu_main', 'old-major', 2);
SELECT leaseq.queue_enqueue('pgu_main', '{"state": "succeeded"}', priority => 9);
SELECT leaseq.queue_complete(job_id, lease_token, '{"done": true}') FROM leaseq.queue_claim('pgu_main', 'w');
SELECT leaseq.queue_enqueue('pgu_main', '{"state": "dead"}', priority => 8, max_attempts => 1);
SELECT leaseq.queue_fail(job_id, lease_token, '{"error": "boom"}') FROM leaseq.queue_claim('pgu_main', 'w');
SELECT leaseq.queue_enqueue('pgu_main', '{"state": "retrying"}', priority => 7);
SELECT leaseq.queue_fail(job_id, lease_token, '{"error": "later"}', retry_in => '1 hour')
  FROM leaseq.queue_claim('pgu_main', 'w');
SELECT leaseq.queue_enqueue('pgu_main', '{"state": "snoozed"}', priority => 6);
SELECT leaseq.queue_snooze(job_id, lease_token, '1 hour') FROM leaseq.queue_claim('pgu_main', 'w');
SELECT leaseq.queue_cancel(leaseq.queue_enqueue('pgu_main', '{"state": "cancelled"}'));
SELECT leaseq.queue_enqueue('pgu_main', '{"state": "pending"}', dedupe_key => 'pgu-key');
SELECT leaseq.queue_enqueue('pgu_main', '{"state": "scheduled"}',
                            run_at => clock_timestamp() + interval '1 day');
SELECT leaseq.queue_enqueue('pgu_groups', '{"state": "running in a group"}', group_key => 'g');
SELECT leaseq.queue_enqueue('pgu_groups', '{"state": "waiting in a group"}', group_key => 'g');
INSERT INTO pg_upgrade_leases
    SELECT job_id, lease_token, attempt_no FROM leaseq.queue_claim('pgu_groups', 'old-major', 10);
DROP ROLE IF EXISTS upgrade_major_team;
CREATE ROLE upgrade_major_team NOLOGIN;
GRANT leaseq_worker TO upgrade_major_team;
SELECT leaseq.queue_grant('pgu_groups', 'upgrade_major_team', 'work');
SELECT leaseq.queue_schedule('pgu_nightly', 'pgu_main', '0 3 * * *', '{"state": "ticked"}');
-- Every state is there.
SELECT status, count(*) FROM leaseq.jobs GROUP BY status ORDER BY status;
