-- queue_renew_batch, as a user sees it.
\pset pager off

-- One new expiry per job in input order, each under its own fence: the current leases move to
-- the requested lease from now, a wrong token and an expired lease get NULL and keep theirs.
SELECT leaseq.queue_create('renew_batch', lease => '1 minute');
SELECT count(*) AS enqueued FROM leaseq.queue_enqueue_batch('renew_batch',
    ARRAY['{"i": 1}', '{"i": 2}', '{"i": 3}', '{"i": 4}']::jsonb[]);
CREATE TEMP TABLE renew_claimed AS SELECT * FROM leaseq.queue_claim('renew_batch', 'w', 4);
WITH ended AS (
    UPDATE leaseq.jobs SET lease_expires_at = clock_timestamp() - interval '1 ms'
     WHERE id = (SELECT job_id FROM renew_claimed WHERE payload->>'i' = '4')
    RETURNING queue, lease_expires_at, lease_token, id)
INSERT INTO leaseq.leases (queue, expires_at, token, job_ids)
SELECT queue, lease_expires_at, lease_token, ARRAY[id] FROM ended;
CREATE TEMP TABLE renew_before AS SELECT id, lease_expires_at FROM leaseq.jobs WHERE queue = 'renew_batch';
SELECT position, expires IS NOT NULL AS renewed,
       expires BETWEEN clock_timestamp() + interval '59 minutes' AND clock_timestamp() + interval '1 hour' AS an_hour_from_now
  FROM leaseq.queue_renew_batch(
           (SELECT array_agg(job_id ORDER BY payload->>'i') FROM renew_claimed),
           (SELECT array_agg(CASE WHEN payload->>'i' = '2' THEN gen_random_uuid() ELSE lease_token END
                             ORDER BY payload->>'i') FROM renew_claimed),
           lease => '1 hour') WITH ORDINALITY AS r (expires, position)
 ORDER BY position;
-- What the answers say is what the rows hold.
SELECT c.payload->>'i' AS i, j.status, j.lease_expires_at <> b.lease_expires_at AS expiry_moved
  FROM renew_claimed c JOIN leaseq.jobs j ON j.id = c.job_id JOIN renew_before b ON b.id = j.id
 ORDER BY 1;
-- Without a lease, the queue's (a minute).
SELECT bool_and(expires BETWEEN clock_timestamp() + interval '59 seconds'
                            AND clock_timestamp() + interval '1 minute') AS the_queues_lease
  FROM leaseq.queue_renew_batch(
           (SELECT array_agg(job_id) FROM renew_claimed WHERE payload->>'i' IN ('1', '3')),
           (SELECT array_agg(lease_token) FROM renew_claimed WHERE payload->>'i' IN ('1', '3'))) AS expires;
SELECT count(*) AS empty_batch FROM leaseq.queue_renew_batch(ARRAY[]::bigint[], ARRAY[]::uuid[]);
