-- queue_fail_batch, as a user sees it.
\pset pager off

-- queue_fail_batch: one status per job in input order — pending, dead, or NULL where fenced.
SELECT leaseq.queue_create('life_fail_batch', max_attempts => 2, backoff_base => '1 hour', backoff_cap => '1 hour');
SELECT count(*) AS enqueued FROM leaseq.queue_enqueue_batch('life_fail_batch', ARRAY['{"i": 1}', '{"i": 2}', '{"i": 3}']::jsonb[]);
CREATE TEMP TABLE fail_claimed AS SELECT * FROM leaseq.queue_claim('life_fail_batch', 'w', 3);
SELECT array_agg(coalesce(status::text, 'NULL') ORDER BY position) AS statuses
  FROM leaseq.queue_fail_batch(
           (SELECT array_agg(job_id ORDER BY payload->>'i') FROM fail_claimed),
           (SELECT array_agg(CASE WHEN payload->>'i' = '2' THEN gen_random_uuid() ELSE lease_token END
                             ORDER BY payload->>'i') FROM fail_claimed),
           ARRAY['{"e": 1}', NULL, '{"e": 3}']::jsonb[]) WITH ORDINALITY AS r (status, position);
SELECT j.payload->>'i' AS i, j.status, j.last_error, a.outcome, a.error,
       j.run_at > clock_timestamp() OR j.status <> 'pending' AS backed_off
  FROM leaseq.jobs j JOIN leaseq.attempts a ON a.job_id = j.id
 WHERE j.queue = 'life_fail_batch' ORDER BY 1;
SELECT array_agg(coalesce(status::text, 'NULL')) AS without_retry
  FROM leaseq.queue_fail_batch(ARRAY[(SELECT job_id FROM fail_claimed WHERE payload->>'i' = '2')],
                               ARRAY[(SELECT lease_token FROM fail_claimed WHERE payload->>'i' = '2')],
                               retry => false) AS r (status);
