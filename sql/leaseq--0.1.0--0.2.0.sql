-- leaseq 0.1.0 -> 0.2.0. Jobs, leases, tokens and history are kept as they are; what changes is
-- where future successes are recorded (on the job's row) and the settings of the functions.
\echo Use "ALTER EXTENSION leaseq UPDATE TO '0.2.0'" to load this file. \quit

-- Settings are no longer part of the function definitions: each function applies its own at run
-- time (src/spi.rs), so that no later upgrade script can drop them by replacing a function.
-- 0.1.0 pinned search_path on every function but queue_claim, queue_enqueue_batch,
-- queue_complete_batch and queue_fail_batch (which set it themselves), and its install script's DO
-- block added the job-path plan settings to the same functions but queue_stats, queue_jobs and
-- queue_purge. All of that goes.
ALTER FUNCTION leaseq.queue_attempts(bigint) RESET ALL;
ALTER FUNCTION leaseq.queue_cancel(bigint) RESET ALL;
ALTER FUNCTION leaseq.queue_complete(bigint, uuid, jsonb) RESET ALL;
ALTER FUNCTION leaseq.queue_create(text, interval, int, interval, interval) RESET ALL;
ALTER FUNCTION leaseq.queue_enqueue(text, jsonb, timestamptz, int, text, int) RESET ALL;
ALTER FUNCTION leaseq.queue_fail(bigint, uuid, jsonb, boolean, interval) RESET ALL;
ALTER FUNCTION leaseq.queue_job(bigint) RESET ALL;
ALTER FUNCTION leaseq.queue_jobs(text, leaseq.job_status, int) RESET ALL;
ALTER FUNCTION leaseq.queue_purge(text, interval, int) RESET ALL;
ALTER FUNCTION leaseq.queue_redrive(bigint) RESET ALL;
ALTER FUNCTION leaseq.queue_redrive_all(text, int) RESET ALL;
ALTER FUNCTION leaseq.queue_renew(bigint, uuid, interval) RESET ALL;
ALTER FUNCTION leaseq.queue_stats() RESET ALL;

-- A job's success is final, so the attempt that succeeds stays on the job's row, token
-- included, instead of being copied to closed_attempts (src/history.rs). The rules of a job's
-- lease and token are kept by the functions' statements and checked by the tests
-- (pg_test/invariants.sql), no longer by a CHECK that every writing statement re-read from its
-- stored form (sql/schema.sql); rows written by 0.1.0 satisfy them.
ALTER TABLE leaseq.jobs DROP CONSTRAINT jobs_lease_iff_running;

-- The attempt on a job's row is the one it carries a token for: a running job's open attempt,
-- or a succeeded job's last (jobs that succeeded under 0.1.0 carry none: their success is in
-- closed_attempts). It is numbered with the very expression of the statements that close
-- attempts (src/history.rs).
CREATE OR REPLACE VIEW leaseq.attempts AS
    SELECT closed.job_id, closed.attempt_no, closed.lease_token, closed.worker,
           closed.started_at, closed.ended_at, closed.outcome, closed.error
      FROM leaseq.closed_attempts AS closed
    UNION ALL
    SELECT job.id,
           coalesce((SELECT max(earlier.attempt_no) FROM leaseq.closed_attempts AS earlier
                      WHERE earlier.job_id = job.id), 0) + 1,
           job.lease_token, job.worker, job.started_at, job.finished_at,
           CASE WHEN job.status OPERATOR(pg_catalog.=) 'running' THEN 'running'
                ELSE 'succeeded' END::leaseq.attempt_outcome,
           NULL
      FROM leaseq.jobs AS job
     WHERE job.lease_token IS NOT NULL;

-- New in 0.2.0: every lease a worker holds renewed in one call (src/lease.rs). Like every leaseq
-- function, it keeps PostgreSQL's default privileges: whoever may renew one job may renew many.
CREATE FUNCTION leaseq.queue_renew_batch(
	"job_ids" bigint[],
	"lease_tokens" uuid[],
	"lease" interval DEFAULT NULL
) RETURNS SETOF timestamp with time zone
LANGUAGE c
AS 'MODULE_PATHNAME', 'queue_renew_batch_wrapper';
