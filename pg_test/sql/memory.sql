-- What leaseq's functions read is copied into the memory of the call that reads it, not of the
-- transaction: a query calling queue_result once per row over large results, in one transaction,
-- holds one result at a time. (Copies used to go to the transaction's context, SPI's parent:
-- 200 results of 200 kB grew it by 40 MB until the commit.)
\pset pager off
SELECT leaseq.queue_create('memory_results');
SELECT count(*) AS enqueued
  FROM leaseq.queue_enqueue_batch('memory_results', array_fill('{}'::jsonb, ARRAY[200]));
SELECT count(*) FILTER (WHERE done) AS completed
  FROM leaseq.queue_claim('memory_results', 'w', 200) AS job,
       LATERAL leaseq.queue_complete(job.job_id, job.lease_token,
                                     jsonb_build_object('blob', repeat('x', 200000))) AS done;
BEGIN;
SELECT count(*) AS read, sum(pg_column_size(result)) > 200 * 200000 AS every_result_whole
  FROM (SELECT leaseq.queue_result(id) AS result FROM leaseq.jobs
         WHERE queue = 'memory_results') AS read;
SELECT total_bytes < 8 * 1024 * 1024 AS transaction_memory_stays_small
  FROM pg_backend_memory_contexts WHERE name = 'TopTransactionContext';
COMMIT;
-- The results go: the tests after this one digest every table.
SELECT leaseq.queue_purge('memory_results', '0 seconds') AS purged;
