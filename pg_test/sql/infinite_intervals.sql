-- The interval 'infinity' (and '-infinity'): PostgreSQL reads it from 17 on, and leaseq refuses it
-- like any interval out of its argument's range, changing nothing — except where a longest
-- interval has a meaning: `dedupe_for => 'infinity'` keeps the key for ever (as '10000 years'
-- does) and `queue_purge(older_than => 'infinity')` purges nothing. Before 17 PostgreSQL's input
-- function refuses it (22007) before leaseq runs: expected/infinite_intervals_1.out.
\pset pager off
SELECT leaseq.queue_create('inf_q');
SELECT leaseq.queue_enqueue('inf_q', '{}') AS job_id \gset
SELECT job_id AS claimed, lease_token AS token FROM leaseq.queue_claim('inf_q', 'w') \gset

CREATE FUNCTION pg_temp.fingerprint() RETURNS text LANGUAGE sql AS $$
    SELECT md5(concat_ws('|',
        (SELECT string_agg(q::text, ',' ORDER BY name) FROM leaseq.queues q),
        (SELECT string_agg(j::text, ',' ORDER BY id) FROM leaseq.jobs j),
        (SELECT string_agg(a::text, ',' ORDER BY job_id, attempt_no) FROM leaseq.attempts a)))
$$;

-- Runs one call; answers its SQLSTATE and message, or that it changed the database.
CREATE FUNCTION pg_temp.refusal(call text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    before text := pg_temp.fingerprint();
    state text;
    message text;
BEGIN
    BEGIN
        EXECUTE 'SELECT ' || call;
    EXCEPTION WHEN OTHERS THEN
        GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, message = MESSAGE_TEXT;
        IF pg_temp.fingerprint() <> before THEN
            RETURN 'CHANGED THE DATABASE: ' || state;
        END IF;
        RETURN state || ' ' || message;
    END;
    RETURN 'NO ERROR';
END $$;

SELECT call, pg_temp.refusal(replace(replace(call, ':job', :'claimed'), ':token', quote_literal(:'token')))
       AS refused_with
  FROM (VALUES
    ($$leaseq.queue_create('inf_q2', lease => 'infinity')$$),
    ($$leaseq.queue_create('inf_q2', lease => '-infinity')$$),
    ($$leaseq.queue_create('inf_q2', backoff_base => 'infinity')$$),
    ($$leaseq.queue_create('inf_q2', backoff_cap => 'infinity')$$),
    ($$leaseq.queue_create('inf_q2', retain => 'infinity')$$),
    ($$leaseq.queue_enqueue('inf_q', '{}', dedupe_key => 'k', dedupe_for => 'infinity')$$),
    ($$leaseq.queue_claim('inf_q', 'w', lease => 'infinity')$$),
    ($$leaseq.queue_renew(:job, :token, lease => 'infinity')$$),
    ($$leaseq.queue_renew_batch(ARRAY[:job]::bigint[], ARRAY[:token]::uuid[], lease => 'infinity')$$),
    ($$leaseq.queue_fail(:job, :token, retry_in => 'infinity')$$),
    ($$leaseq.queue_fail(:job, :token, retry_in => '-infinity')$$),
    ($$leaseq.queue_snooze(:job, :token, 'infinity')$$),
    ($$leaseq.queue_purge('inf_q', older_than => 'infinity')$$),
    ($$leaseq.queue_purge('inf_q', older_than => '-infinity')$$)
  ) AS calls(call);

SELECT leaseq.queue_complete(:claimed, :'token') AS the_job_is_still_claimed;
