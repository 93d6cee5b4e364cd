-- leaseq 0.1.0 -> 0.2.0. Jobs, leases, tokens and history are untouched: no table changes.
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

-- The open attempt is numbered with the very expression of the statements that close it
-- (src/history.rs); same columns, same rows.
CREATE OR REPLACE VIEW leaseq.attempts AS
    SELECT closed.job_id, closed.attempt_no, closed.lease_token, closed.worker,
           closed.started_at, closed.ended_at, closed.outcome, closed.error
      FROM leaseq.closed_attempts AS closed
    UNION ALL
    SELECT job.id,
           coalesce((SELECT max(earlier.attempt_no) FROM leaseq.closed_attempts AS earlier
                      WHERE earlier.job_id = job.id), 0) + 1,
           job.lease_token, job.worker, job.started_at, NULL, 'running', NULL
      FROM leaseq.jobs AS job
     WHERE job.status = 'running';
