-- Where a claim starts, as a drain leaves the due index: the entries of jobs claimed since the
-- last vacuum stay at its head. A scan marks them dead and never counts them again, but still
-- reads their pages: a claim from a head of many such pages is slow, and the queue's claims then
-- start after their cursors (src/lifecycle/claim.rs, "Where a claim starts").
\pset pager off

-- Only what a claim reads makes it slow here, never its time; and no vacuum removes the head.
SET leaseq.claim_slow_head = 2147483647;
SET leaseq.claim_rescan_interval = '1h';
ALTER TABLE leaseq.jobs SET (autovacuum_enabled = off);
SELECT leaseq.queue_create('drained_head');
SELECT count(*) FROM leaseq.queue_enqueue_batch('drained_head',
    ARRAY(SELECT jsonb_build_object('n', n) FROM generate_series(1, 5010) AS n),
    run_at => now() - interval '1 minute');

CREATE FUNCTION pg_temp.claims(kind text) RETURNS bigint LANGUAGE sql AS $$
    SELECT coalesce(sum(split_part(line, ' ', 2)::bigint), 0)
      FROM unnest(string_to_array(leaseq.metrics(), E'\n')) AS line
     WHERE line LIKE 'leaseq_claims_' || kind || '_total{queue="drained_head"} %'
$$;

-- 5,000 claimed at once, from the head: a head of live entries is cheap however long the batch.
SELECT count(*) AS claimed FROM leaseq.queue_claim('drained_head', 'w', 5000);
-- An index scan marks their entries dead (nothing is counted for them from now on).
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SELECT count(*) AS pending FROM leaseq.jobs WHERE queue = 'drained_head' AND status = 'pending';
RESET enable_seqscan;
RESET enable_bitmapscan;

-- The next claim reads the marked head's pages to reach job 5,001: slow. The one after it
-- starts after its cursor, and is still exact: job 5,002.
SELECT pg_temp.claims('from_head') AS from_head, pg_temp.claims('after_cursor') AS after_cursor;
SELECT payload->>'n' AS n FROM leaseq.queue_claim('drained_head', 'w');
SELECT payload->>'n' AS n FROM leaseq.queue_claim('drained_head', 'w');
SELECT pg_temp.claims('from_head') AS from_head, pg_temp.claims('after_cursor') AS after_cursor;

ALTER TABLE leaseq.jobs RESET (autovacuum_enabled);
