-- Run on the new major after pg_upgrade (scripts/lib.sh check_pg_upgrade), once the rows were
-- compared with the old cluster's. Each line must read t: a wrong token is refused; then every
-- lease taken on the old major (three) finishes with its token; the group's
-- waiting job is admitted then; a new job takes an id after every upgraded one; the schedule
-- came across.
\set ON_ERROR_STOP on
\pset tuples_only on
\pset format unaligned
SELECT bool_and(NOT leaseq.queue_complete(job_id, gen_random_uuid())
                AND leaseq.queue_renew(job_id, gen_random_uuid()) IS NULL)
  FROM pg_upgrade_leases;
SELECT count(*) FILTER (WHERE leaseq.queue_complete(job_id, lease_token)) = 3 AND count(*) = 3
  FROM pg_upgrade_leases;
SELECT status = 'pending'
  FROM leaseq.jobs WHERE queue = 'pgu_groups' AND payload->>'state' = 'waiting in a group';
SELECT leaseq.queue_enqueue('pgu_main', '{"after": "pg_upgrade"}')
       > (SELECT max(id) FROM leaseq.jobs WHERE payload->>'after' IS NULL);
-- It goes: the contract tests list every schedule of the database.
SELECT leaseq.queue_unschedule('pgu_nightly');
