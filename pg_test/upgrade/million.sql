-- A database of 1,000,000 jobs at the last release, for scripts/lib.sh check_upgrade_at_scale:
-- 600,000 succeeded, 100,000 running under live leases, 50,000 waiting out a retry (a closed
-- attempt each), 10,000 dead, the rest pending — claimed and finished through the functions, as
-- a queue that has been running fills its tables.
SELECT leaseq.queue_create('million', lease => '1 hour', backoff_base => '1 hour',
                           backoff_cap => '1 hour');
SELECT count(*) AS enqueued
  FROM generate_series(1, 100) AS call,
       LATERAL leaseq.queue_enqueue_batch('million',
                                          array_fill(jsonb_build_object('call', call),
                                                     ARRAY[10000])) AS job;
DO $fill$
DECLARE
    ids bigint[];
    tokens uuid[];
BEGIN
    FOR n IN 1..76 LOOP
        SELECT array_agg(claimed.job_id), array_agg(claimed.lease_token) INTO ids, tokens
          FROM leaseq.queue_claim('million', 'filler', 10000) AS claimed;
        IF n <= 60 THEN
            PERFORM count(*) FROM leaseq.queue_complete_batch(ids, tokens);
        ELSIF n <= 65 THEN
            PERFORM count(*) FROM leaseq.queue_fail_batch(ids, tokens, NULL, true);
        ELSIF n <= 66 THEN
            PERFORM count(*) FROM leaseq.queue_fail_batch(ids, tokens, NULL, false);
        END IF;
    END LOOP;
END
$fill$;
SELECT status, count(*) FROM leaseq.jobs GROUP BY status ORDER BY status;
