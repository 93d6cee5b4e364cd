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
