-- What every backend keeps of the grants and of the schedules' next ticks (src/core/access.rs,
-- src/lifecycle/schedule.rs) is read again after a change to those tables, and only then:
-- another relation's change — a temporary table made, analyzed and dropped, which any session
-- may do — does not make the next claim read them again. The reads are counted by
-- pg_stat_xact_user_tables (this transaction's own scans of each table).
\pset pager off
SELECT leaseq.queue_create('cache_q');
CREATE TEMP VIEW cache_scans AS
SELECT sum(seq_scan + coalesce(idx_scan, 0)) FILTER (WHERE relname = 'queue_grants') AS grants,
       sum(seq_scan + coalesce(idx_scan, 0)) FILTER (WHERE relname = 'schedules') AS schedules
  FROM pg_stat_xact_user_tables WHERE schemaname = 'leaseq';
BEGIN;
-- The caches are read.
SELECT count(*) AS claimed FROM leaseq.queue_claim('cache_q', 'w');
SELECT grants, schedules FROM cache_scans \gset before_
CREATE TEMP TABLE cache_other (id int);
ANALYZE cache_other;
DROP TABLE cache_other;
SELECT count(*) AS claimed FROM leaseq.queue_claim('cache_q', 'w');
SELECT grants - :before_grants AS grants_read_again,
       schedules - :before_schedules AS schedules_read_again
  FROM cache_scans;
-- A grant changes its table: the next claim reads the grants again.
SELECT leaseq.queue_grant('cache_q', 'leaseq_observer', 'observe') AS granted;
SELECT grants, schedules FROM cache_scans \gset before_
SELECT count(*) AS claimed FROM leaseq.queue_claim('cache_q', 'w');
SELECT grants - :before_grants AS grants_read_again FROM cache_scans;
-- So does a schedule: the next claim reads the schedules again.
SELECT leaseq.queue_schedule('cache_yearly', 'cache_q', '0 0 1 1 *', '{}') IS NOT NULL AS scheduled;
SELECT grants, schedules FROM cache_scans \gset before_
SELECT count(*) AS claimed FROM leaseq.queue_claim('cache_q', 'w');
SELECT schedules - :before_schedules AS schedules_read_again FROM cache_scans;
ROLLBACK;
-- A claim reads its queue's settings and looks for expired leases in one statement — unless no
-- entry of leases_expiry_idx ends by now: then it runs neither, and takes the settings from
-- what the backend keeps of the queues (read again after any change to them, like the grants).
CREATE TEMP VIEW queue_scans AS
SELECT sum(seq_scan + coalesce(idx_scan, 0)) AS queues
  FROM pg_stat_xact_user_tables WHERE schemaname = 'leaseq' AND relname = 'queues';
BEGIN;
SELECT count(*) AS enqueued FROM leaseq.queue_enqueue_batch('cache_q', ARRAY['{}', '{}']::jsonb[]);
SELECT count(*) AS claimed FROM leaseq.queue_claim('cache_q', 'w');
SELECT queues FROM queue_scans \gset before_
SELECT count(*) AS claimed FROM leaseq.queue_claim('cache_q', 'w');
SELECT queues - :before_queues AS queues_read_while_no_lease_ended FROM queue_scans;
-- An hour later both leases have ended: the claim reads the queue and reclaims them.
SET LOCAL leaseq.clock_offset = '1h';
SELECT queues FROM queue_scans \gset before_
SELECT count(*) AS n FROM leaseq.queue_claim('cache_q', 'w') \gset
SELECT queues - :before_queues AS queues_read_once_leases_ended FROM queue_scans;
SELECT count(*) AS attempts_closed_lease_expired
  FROM leaseq.closed_attempts AS attempt JOIN leaseq.jobs AS job ON job.id = attempt.job_id
 WHERE job.queue = 'cache_q' AND attempt.outcome = 'lease_expired';
ROLLBACK;
