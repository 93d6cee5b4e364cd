-- queue_purge, as a user sees it.
\pset pager off

-- queue_purge: finished (succeeded, cancelled) jobs older than the cutoff go, with their history;
-- pending, running and dead jobs stay.
SELECT leaseq.queue_create('life_purge', max_attempts => 1);
SELECT count(*) AS enqueued FROM leaseq.queue_enqueue_batch('life_purge', ARRAY['{"do": "ok"}', '{"do": "die"}', '{"do": "cancel"}', '{"do": "run"}', '{"do": "wait"}']::jsonb[]);
SELECT leaseq.queue_complete(job_id, lease_token) FROM leaseq.queue_claim('life_purge', 'w') WHERE payload->>'do' = 'ok';
SELECT leaseq.queue_fail(job_id, lease_token) FROM leaseq.queue_claim('life_purge', 'w') WHERE payload->>'do' = 'die';
SELECT leaseq.queue_cancel(id) FROM leaseq.jobs WHERE queue = 'life_purge' AND payload->>'do' = 'cancel';
SELECT payload->>'do' AS claimed FROM leaseq.queue_claim('life_purge', 'w');
SELECT leaseq.queue_purge('life_purge', older_than => '1 hour') AS too_recent;
SELECT leaseq.queue_purge('life_purge', older_than => '0') AS purged;
SELECT string_agg(payload->>'do' || ':' || status, ',' ORDER BY id) AS kept,
       (SELECT count(*) FROM leaseq.attempts a WHERE a.job_id IN (SELECT id FROM leaseq.jobs WHERE queue = 'life_purge')) AS attempts_kept,
       (SELECT count(*) FROM leaseq.attempts a WHERE NOT EXISTS (SELECT 1 FROM leaseq.jobs j WHERE j.id = a.job_id)) AS orphan_attempts
  FROM leaseq.jobs WHERE queue = 'life_purge';
