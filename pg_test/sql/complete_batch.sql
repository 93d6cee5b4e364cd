-- queue_complete_batch, as a user sees it.
\pset pager off

-- queue_complete_batch: one answer per job in input order, each under its own fence.
SELECT leaseq.queue_create('life_batch');
SELECT count(*) AS enqueued FROM leaseq.queue_enqueue_batch('life_batch', ARRAY['{"i": 1}', '{"i": 2}', '{"i": 3}']::jsonb[]);
CREATE TEMP TABLE batch_claimed AS SELECT * FROM leaseq.queue_claim('life_batch', 'w', 3);
SELECT array_agg(done ORDER BY position) AS answers
  FROM leaseq.queue_complete_batch(
           (SELECT array_agg(job_id ORDER BY payload->>'i') FROM batch_claimed),
           (SELECT array_agg(CASE WHEN payload->>'i' = '2' THEN gen_random_uuid() ELSE lease_token END
                             ORDER BY payload->>'i') FROM batch_claimed),
           ARRAY['{"r": 1}', NULL, '{"r": 3}']::jsonb[]) WITH ORDINALITY AS r (done, position);
SELECT j.payload->>'i' AS i, j.status, j.result, a.outcome
  FROM leaseq.jobs j JOIN leaseq.attempts a ON a.job_id = j.id
 WHERE j.queue = 'life_batch' ORDER BY 1;
SELECT count(*) AS empty_batch FROM leaseq.queue_complete_batch(ARRAY[]::bigint[], ARRAY[]::uuid[]);
