-- Every bad input of every function: the SQLSTATE and message it raises, and proof that it
-- changed nothing (rows of every leaseq table, and the job id sequence).
\pset pager off
SELECT leaseq.queue_create('err_q');
SELECT leaseq.queue_enqueue('err_q', '{"n": 1}') AS job_id \gset

-- (Read with the rights of the test's superuser, whichever role calls it.)
CREATE FUNCTION pg_temp.fingerprint() RETURNS text LANGUAGE sql SECURITY DEFINER AS $$
    SELECT md5(concat_ws('|',
        (SELECT string_agg(q::text, ',' ORDER BY name) FROM leaseq.queues q),
        (SELECT string_agg(j::text, ',' ORDER BY id) FROM leaseq.jobs j),
        (SELECT string_agg(a::text, ',' ORDER BY job_id, attempt_no) FROM leaseq.attempts a),
        (SELECT string_agg(g::text, ',' ORDER BY queue, role::text, privilege) FROM leaseq.queue_grants g),
        (SELECT string_agg(s::text, ',' ORDER BY name) FROM leaseq.schedules s),
        (SELECT string_agg(g::text, ',' ORDER BY queue, group_key) FROM leaseq.groups g),
        (SELECT string_agg(e::text, ',' ORDER BY child_id, parent_id) FROM leaseq.job_parents e),
        (SELECT string_agg(s::text, ',' ORDER BY job_id, name) FROM leaseq.job_steps s),
        pg_sequence_last_value('leaseq.jobs_id_seq')::text))
$$;

-- Runs one call; answers its SQLSTATE and message, and flags any change it left behind.
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

SELECT pg_temp.fingerprint() AS before \gset

SELECT call, pg_temp.refusal(call) AS refused_with
  FROM (VALUES
    -- queue_create
    ($$leaseq.queue_create(NULL)$$),
    ($$leaseq.queue_create('Bad')$$),
    ($$leaseq.queue_create('1queue')$$),
    ($$leaseq.queue_create('_queue')$$),
    ($$leaseq.queue_create('')$$),
    ($$leaseq.queue_create('q;drop table leaseq.jobs')$$),
    ($$leaseq.queue_create('q''x')$$),
    ($$leaseq.queue_create('qué')$$),
    ($$leaseq.queue_create(repeat('q', 49))$$),
    ($$leaseq.queue_create('err_q', lease => NULL)$$),
    ($$leaseq.queue_create('err_q', lease => '0')$$),
    ($$leaseq.queue_create('err_q', lease => '-1 second')$$),
    ($$leaseq.queue_create('err_q', lease => '1 day 1 microsecond')$$),
    ($$leaseq.queue_create('err_q', lease => '1 mon')$$),
    ($$leaseq.queue_create('err_q', lease => '-1 mon +30 days 1 sec')$$),
    ($$leaseq.queue_create('err_q', lease => '1000000 years')$$),
    ($$leaseq.queue_create('err_q', lease => 'soon')$$),
    ($$leaseq.queue_create('err_q', retain => '0')$$),
    ($$leaseq.queue_create('err_q', retain => '-1 day')$$),
    ($$leaseq.queue_create('err_q', retain => '101 years')$$),
    ($$leaseq.queue_create('err_q', max_attempts => NULL)$$),
    ($$leaseq.queue_create('err_q', max_attempts => 0)$$),
    ($$leaseq.queue_create('err_q', max_attempts => -1)$$),
    ($$leaseq.queue_create('err_q', backoff_base => NULL)$$),
    ($$leaseq.queue_create('err_q', backoff_base => '0')$$),
    ($$leaseq.queue_create('err_q', backoff_cap => NULL)$$),
    ($$leaseq.queue_create('err_q', backoff_cap => '31 days')$$),
    ($$leaseq.queue_create('err_q', backoff_cap => '-5 minutes')$$),
    ($$leaseq.queue_create('err_q', backoff_cap => '1000 years')$$),
    ($$leaseq.queue_create('err_q', backoff_base => '10 minutes', backoff_cap => '5 minutes')$$),
    -- queue_enqueue
    ($$leaseq.queue_enqueue(NULL, '{}')$$),
    ($$leaseq.queue_enqueue('err_q', NULL)$$),
    ($$leaseq.queue_enqueue('no_such_queue', '{}')$$),
    ($$leaseq.queue_enqueue('No Such Queue', '{}')$$),
    ($$leaseq.queue_enqueue('err_q', '{}', run_at => 'infinity')$$),
    ($$leaseq.queue_enqueue('err_q', '{}', run_at => '-infinity')$$),
    ($$leaseq.queue_enqueue('err_q', '{}', run_at => '294277-01-01')$$),
    ($$leaseq.queue_enqueue('err_q', '{}', max_attempts => -2147483648)$$),
    ($$leaseq.queue_enqueue(repeat('é', 100), '{}')$$),
    ($$leaseq.queue_enqueue('err_q', '{}', priority => NULL)$$),
    ($$leaseq.queue_enqueue('err_q', '{}', dedupe_key => '')$$),
    ($$leaseq.queue_enqueue('err_q', '{}', dedupe_key => repeat('k', 513))$$),
    ($$leaseq.queue_enqueue('err_q', '{}', max_attempts => 0)$$),
    ($$leaseq.queue_enqueue('err_q', jsonb_build_object('blob', repeat('x', 1048576)))$$),
    ($$leaseq.queue_enqueue('no_such_queue', '{}', dedupe_key => 'k')$$),
    ($$leaseq.queue_enqueue('err_q', '{}', depends_on => ARRAY[NULL]::bigint[])$$),
    ($$leaseq.queue_enqueue('err_q', '{}', depends_on => ARRAY[1, 1])$$),
    ($$leaseq.queue_enqueue('err_q', '{}', depends_on => ARRAY[0])$$),
    ($$leaseq.queue_enqueue('err_q', '{}', depends_on => ARRAY[9223372036854775807])$$),
    ($$leaseq.queue_enqueue('err_q', '{}', depends_on => ARRAY(SELECT generate_series(1, 10001)::bigint))$$),
    ($$leaseq.queue_enqueue('err_q', '{}', depends_on => ARRAY[1], dedupe_key => 'k')$$),
    ($$leaseq.queue_enqueue('err_q', '{}', depends_on => ARRAY[1], group_key => 'g')$$),
    ($$leaseq.queue_enqueue('err_q', '{}', depends_on => ARRAY[1], on_parent_failure => NULL)$$),
    ($$leaseq.queue_enqueue('err_q', '{}', depends_on => ARRAY[1], on_parent_failure => 'explode')$$),
    ($$leaseq.queue_enqueue('no_such_queue', '{}', depends_on => ARRAY[1])$$),
    -- queue_enqueue_batch
    ($$leaseq.queue_enqueue_batch(NULL, ARRAY['{}']::jsonb[])$$),
    ($$leaseq.queue_enqueue_batch('err_q', NULL)$$),
    ($$leaseq.queue_enqueue_batch('err_q', ARRAY['{}', NULL]::jsonb[])$$),
    ($$leaseq.queue_enqueue_batch('err_q', ARRAY['{}'::jsonb, jsonb_build_object('blob', repeat('x', 1048576))])$$),
    ($$leaseq.queue_enqueue_batch('no_such_queue', ARRAY['{}']::jsonb[])$$),
    ($$leaseq.queue_enqueue_batch('no_such_queue', ARRAY[]::jsonb[])$$),
    ($$leaseq.queue_enqueue_batch('bad name', ARRAY['{}']::jsonb[])$$),
    ($$leaseq.queue_enqueue_batch('err_q', ARRAY['{}']::jsonb[], run_at => 'infinity')$$),
    ($$leaseq.queue_enqueue_batch('err_q', ARRAY['{}']::jsonb[], priority => NULL)$$),
    ($$leaseq.queue_enqueue_batch('err_q', ARRAY['{}']::jsonb[], depends_on => ARRAY[NULL]::bigint[])$$),
    ($$leaseq.queue_enqueue_batch('err_q', ARRAY['{}']::jsonb[], depends_on => ARRAY[0])$$),
    ($$leaseq.queue_enqueue_batch('err_q', ARRAY['{}']::jsonb[], depends_on => ARRAY[1], group_keys => ARRAY['g'])$$),
    ($$leaseq.queue_enqueue_batch('err_q', ARRAY['{}']::jsonb[], depends_on => ARRAY[1], on_parent_failure => NULL)$$),
    -- sizes, from the arguments' headers, before anything is copied (docs/security.md)
    ($$leaseq.queue_enqueue_batch('err_q', array_fill('{}'::jsonb, ARRAY[10001]))$$),
    ($$leaseq.queue_enqueue_batch('err_q', array_fill(NULL::jsonb, ARRAY[10001]))$$),
    ($$leaseq.queue_enqueue_batch('err_q', array_fill('{}'::jsonb, ARRAY[10000]), depends_on => ARRAY(SELECT generate_series(1, 11)::bigint))$$),
    ($$leaseq.queue_enqueue_batch('err_q', ARRAY['{}']::jsonb[], group_keys => ARRAY[repeat('g', 10000)])$$),
    ($$leaseq.queue_enqueue('err_q', '{}', depends_on => array_fill(NULL::bigint, ARRAY[10001]))$$),
    ($$leaseq.queue_cancel_batch(array_fill(NULL::bigint, ARRAY[10001]))$$),
    -- queue_claim
    ($$leaseq.queue_claim(NULL, 'w')$$),
    ($$leaseq.queue_claim('err_q', NULL)$$),
    ($$leaseq.queue_claim('err_q', '')$$),
    ($$leaseq.queue_claim('err_q', repeat('w', 513))$$),
    ($$leaseq.queue_claim('err_q', 'w', batch => NULL)$$),
    ($$leaseq.queue_claim('err_q', 'w', batch => 0)$$),
    ($$leaseq.queue_claim('err_q', 'w', batch => -1)$$),
    ($$leaseq.queue_claim('err_q', 'w', batch => 10001)$$),
    ($$leaseq.queue_claim('err_q', 'w', lease => '0')$$),
    ($$leaseq.queue_claim('err_q', 'w', lease => '-1 hour')$$),
    ($$leaseq.queue_claim('err_q', 'w', lease => '25 hours')$$),
    ($$leaseq.queue_claim('err_q', 'w', lease => '1 day -23 hours')$$),
    ($$leaseq.queue_claim('err_q', 'w', lease => '1000000 years')$$),
    ($$leaseq.queue_claim('err_q', 'w', batch => 2147483647)$$),
    ($$leaseq.queue_claim('no_such_queue', 'w')$$),
    ($$leaseq.queue_claim('q"x', 'w')$$),
    -- queue_renew
    ($$leaseq.queue_renew(NULL, gen_random_uuid())$$),
    ($$leaseq.queue_renew(1, NULL)$$),
    ($$leaseq.queue_renew(1, gen_random_uuid(), lease => '0')$$),
    ($$leaseq.queue_renew(1, gen_random_uuid(), lease => '2 days')$$),
    -- queue_renew_batch
    ($$leaseq.queue_renew_batch(NULL, ARRAY[gen_random_uuid()])$$),
    ($$leaseq.queue_renew_batch(ARRAY[1], NULL)$$),
    ($$leaseq.queue_renew_batch(ARRAY[1, NULL], ARRAY[gen_random_uuid(), gen_random_uuid()])$$),
    ($$leaseq.queue_renew_batch(ARRAY[1, 2, 3], ARRAY[gen_random_uuid(), gen_random_uuid()])$$),
    ($$leaseq.queue_renew_batch(ARRAY[1, 1], ARRAY[gen_random_uuid(), gen_random_uuid()])$$),
    ($$leaseq.queue_renew_batch(ARRAY[1], ARRAY[gen_random_uuid()], lease => '0')$$),
    ($$leaseq.queue_renew_batch(ARRAY[1], ARRAY[gen_random_uuid()], lease => '2 days')$$),
    ($$leaseq.queue_renew_batch(array_agg(n::bigint), array_agg(gen_random_uuid())) FROM generate_series(1, 10001) n$$),
    -- queue_complete
    ($$leaseq.queue_complete(NULL, gen_random_uuid())$$),
    ($$leaseq.queue_complete(1, NULL)$$),
    ($$leaseq.queue_complete(1, gen_random_uuid(), jsonb_build_object('blob', repeat('x', 1048576)))$$),
    -- queue_complete_batch
    ($$leaseq.queue_complete_batch(NULL, ARRAY[gen_random_uuid()])$$),
    ($$leaseq.queue_complete_batch(ARRAY[1], NULL)$$),
    ($$leaseq.queue_complete_batch(ARRAY[1, NULL], ARRAY[gen_random_uuid(), gen_random_uuid()])$$),
    ($$leaseq.queue_complete_batch(ARRAY[1, 2], ARRAY[gen_random_uuid(), NULL])$$),
    ($$leaseq.queue_complete_batch(ARRAY[1, 2, 3], ARRAY[gen_random_uuid(), gen_random_uuid()])$$),
    ($$leaseq.queue_complete_batch(ARRAY[1, 1], ARRAY[gen_random_uuid(), gen_random_uuid()])$$),
    ($$leaseq.queue_complete_batch(ARRAY[1], ARRAY[gen_random_uuid()], ARRAY['{}', '{}']::jsonb[])$$),
    ($$leaseq.queue_complete_batch(array_agg(n::bigint), array_agg(gen_random_uuid())) FROM generate_series(1, 10001) n$$),
    ($$leaseq.queue_complete_batch(ARRAY[1], ARRAY[gen_random_uuid()], ARRAY[jsonb_build_object('blob', repeat('x', 1048576))])$$),
    -- queue_fail_batch
    ($$leaseq.queue_fail_batch(NULL, ARRAY[gen_random_uuid()])$$),
    ($$leaseq.queue_fail_batch(ARRAY[1], ARRAY[NULL]::uuid[])$$),
    ($$leaseq.queue_fail_batch(ARRAY[1, 2, 3], ARRAY[gen_random_uuid(), gen_random_uuid()])$$),
    ($$leaseq.queue_fail_batch(ARRAY[1, 1], ARRAY[gen_random_uuid(), gen_random_uuid()])$$),
    ($$leaseq.queue_fail_batch(ARRAY[1], ARRAY[gen_random_uuid()], ARRAY[NULL, NULL]::jsonb[])$$),
    ($$leaseq.queue_fail_batch(ARRAY[1], ARRAY[gen_random_uuid()], retry => NULL)$$),
    ($$leaseq.queue_fail_batch(ARRAY[1], ARRAY[gen_random_uuid()], ARRAY[jsonb_build_object('blob', repeat('x', 1048576))])$$),
    -- queue_fail
    ($$leaseq.queue_fail(NULL, gen_random_uuid())$$),
    ($$leaseq.queue_fail(1, NULL)$$),
    ($$leaseq.queue_fail(1, gen_random_uuid(), retry => NULL)$$),
    ($$leaseq.queue_fail(1, gen_random_uuid(), retry_in => '-1 second')$$),
    ($$leaseq.queue_fail(1, gen_random_uuid(), retry_in => '31 days')$$),
    ($$leaseq.queue_fail(1, gen_random_uuid(), retry_in => '1000 years')$$),
    ($$leaseq.queue_fail(1, gen_random_uuid(), jsonb_build_object('blob', repeat('x', 1048576)))$$),
    -- queue_redrive, queue_redrive_all, queue_cancel
    ($$leaseq.queue_redrive(NULL)$$),
    ($$leaseq.queue_redrive(-1)$$),
    ($$leaseq.queue_redrive(9223372036854775807)$$),
    ($$leaseq.queue_redrive_all(NULL)$$),
    ($$leaseq.queue_redrive_all('no_such_queue')$$),
    ($$leaseq.queue_redrive_all('drop;table')$$),
    ($$leaseq.queue_redrive_all('err_q', max_jobs => 0)$$),
    ($$leaseq.queue_cancel(NULL)$$),
    ($$leaseq.queue_cancel(9223372036854775807)$$),
    -- queue_purge
    ($$leaseq.queue_purge(NULL, '1 day')$$),
    ($$leaseq.queue_purge('err_q', NULL)$$),
    ($$leaseq.queue_purge('err_q', '-1 second')$$),
    ($$leaseq.queue_purge('err_q', '1 day', max_jobs => 0)$$),
    ($$leaseq.queue_purge('err_q', '1 day', max_jobs => NULL)$$),
    ($$leaseq.queue_purge('no_such_queue', '1 day')$$),
    ($$leaseq.queue_purge('Q', '1 day')$$),
    -- queue_jobs, queue_job, queue_attempts, queue_result
    ($$leaseq.queue_jobs(NULL, max_rows => 0)$$),
    ($$leaseq.queue_jobs('no_such_queue')$$),
    ($$leaseq.queue_jobs('Q')$$),
    ($$leaseq.queue_jobs('err_q', max_rows => NULL)$$),
    ($$leaseq.queue_jobs('err_q', max_rows => 0)$$),
    ($$leaseq.queue_jobs('err_q', max_rows => 10001)$$),
    ($$leaseq.queue_jobs('err_q', status => 'bogus')$$),
    ($$leaseq.queue_jobs('err_q', group_key => '')$$),
    ($$leaseq.queue_jobs('err_q', dedupe_key => repeat('k', 513))$$),
    ($$leaseq.queue_jobs(worker => '')$$),
    ($$leaseq.queue_jobs('err_q', payload_contains => '{"customer": 42')$$),
    ($$leaseq.queue_job(NULL)$$),
    ($$leaseq.queue_job(0)$$),
    ($$leaseq.queue_attempts(NULL)$$),
    ($$leaseq.queue_attempts(0)$$),
    ($$leaseq.queue_result(NULL)$$),
    ($$leaseq.queue_result(0)$$),
    ($$leaseq.queue_parents(NULL)$$),
    ($$leaseq.queue_parents(0)$$),
    ($$leaseq.queue_children(NULL)$$),
    ($$leaseq.queue_children(0)$$),
    -- queue_step, queue_steps
    ($$leaseq.queue_step(NULL, gen_random_uuid(), 'a')$$),
    ($$leaseq.queue_step(1, NULL, 'a')$$),
    ($$leaseq.queue_step(1, gen_random_uuid(), NULL)$$),
    ($$leaseq.queue_step(1, gen_random_uuid(), '')$$),
    ($$leaseq.queue_step(1, gen_random_uuid(), repeat('s', 513))$$),
    ($$leaseq.queue_step(1, gen_random_uuid(), 'a', jsonb_build_object('blob', repeat('x', 1048576)))$$),
    ($$leaseq.queue_steps(NULL)$$),
    ($$leaseq.queue_steps(0)$$),
    -- queue_enqueue_batch's depends_on_each
    ($$leaseq.queue_enqueue_batch('err_q', ARRAY['{}']::jsonb[], depends_on_each => '{}')$$),
    ($$leaseq.queue_enqueue_batch('err_q', ARRAY['{}', '{}']::jsonb[], depends_on_each => '[[]]')$$),
    ($$leaseq.queue_enqueue_batch('err_q', ARRAY['{}']::jsonb[], depends_on_each => '[["a"]]')$$),
    ($$leaseq.queue_enqueue_batch('err_q', ARRAY['{}']::jsonb[], depends_on_each => '[[1, 1]]')$$),
    ($$leaseq.queue_enqueue_batch('err_q', ARRAY['{}']::jsonb[], depends_on_each => '[[0]]')$$),
    ($$leaseq.queue_enqueue_batch('err_q', ARRAY['{}']::jsonb[], depends_on => ARRAY[1], depends_on_each => '[[1]]')$$),
    ($$leaseq.queue_enqueue_batch('err_q', ARRAY['{}']::jsonb[], group_keys => ARRAY['g'], depends_on_each => '[[1]]')$$),
    ($$leaseq.queue_enqueue_batch('err_q', ARRAY['{}', '{}']::jsonb[], depends_on_each => (SELECT jsonb_build_array(jsonb_agg(n), '[]'::jsonb) FROM generate_series(1, 10001) n))$$),
    -- queue_progress (queue_await's refusals: pg_test/sql/await.sql, as it is CALLed)
    ($$leaseq.queue_progress(NULL, gen_random_uuid(), '{}')$$),
    ($$leaseq.queue_progress(1, NULL, '{}')$$),
    ($$leaseq.queue_progress(1, gen_random_uuid(), NULL)$$),
    ($$leaseq.queue_progress(1, gen_random_uuid(), jsonb_build_object('blob', repeat('x', 1048576)))$$),
    -- trace_context (queue_enqueue, queue_enqueue_batch, queue_flow): a W3C traceparent
    ($$leaseq.queue_enqueue('err_q', '{}', trace_context => '')$$),
    ($$leaseq.queue_enqueue('err_q', '{}', trace_context => '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331')$$),
    ($$leaseq.queue_enqueue('err_q', '{}', trace_context => '01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01')$$),
    ($$leaseq.queue_enqueue('err_q', '{}', trace_context => '00-00000000000000000000000000000000-b7ad6b7169203331-01')$$),
    ($$leaseq.queue_enqueue('err_q', '{}', trace_context => '00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01')$$),
    ($$leaseq.queue_enqueue('err_q', '{}', trace_context => '00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01')$$),
    ($$leaseq.queue_enqueue('err_q', '{}', trace_context => '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-x')$$),
    ($$leaseq.queue_enqueue_batch('err_q', ARRAY['{}']::jsonb[], trace_context => 'x')$$),
    ($$leaseq.queue_flow('[{"key": "a", "queue": "err_q"}]', trace_context => 'x')$$),
    ($$leaseq.queue_schedule('s', 'err_q', '* * * * *', '{}', trace_context => 'x')$$),
    -- queue_flow, queue_flow_status
    ($$leaseq.queue_flow(NULL)$$),
    ($$leaseq.queue_flow('{}')$$),
    ($$leaseq.queue_flow('[]')$$),
    ($$leaseq.queue_flow('[1]')$$),
    ($$leaseq.queue_flow('[{"queue": "err_q"}]')$$),
    ($$leaseq.queue_flow('[{"key": "a"}]')$$),
    ($$leaseq.queue_flow('[{"key": "a", "queue": "err_q", "dependson": []}]')$$),
    ($$leaseq.queue_flow('[{"key": "a", "queue": "err_q", "priority": "high"}]')$$),
    ($$leaseq.queue_flow('[{"key": "a", "queue": "err_q", "priority": 2147483648}]')$$),
    ($$leaseq.queue_flow('[{"key": "", "queue": "err_q"}]')$$),
    ($$leaseq.queue_flow('[{"key": "a", "queue": "err_q"}, {"key": "a", "queue": "err_q"}]')$$),
    ($$leaseq.queue_flow('[{"key": "a", "queue": "Err Q"}]')$$),
    ($$leaseq.queue_flow('[{"key": "a", "queue": "no_such_queue"}]')$$),
    ($$leaseq.queue_flow('[{"key": "a", "queue": "err_q", "max_attempts": 0}]')$$),
    ($$leaseq.queue_flow('[{"key": "a", "queue": "err_q", "on_parent_failure": "explode"}]')$$),
    ($$leaseq.queue_flow('[{"key": "a", "queue": "err_q", "depends_on": ["b"]}]')$$),
    ($$leaseq.queue_flow('[{"key": "a", "queue": "err_q", "depends_on": ["a"]}]')$$),
    ($$leaseq.queue_flow('[{"key": "a", "queue": "err_q", "depends_on": ["b"]}, {"key": "b", "queue": "err_q", "depends_on": ["c"]}, {"key": "c", "queue": "err_q", "depends_on": ["a"]}]')$$),
    ($$leaseq.queue_flow('[{"key": "a", "queue": "err_q"}, {"key": "b", "queue": "err_q", "depends_on": ["a", "a"]}]')$$),
    ($$leaseq.queue_flow(jsonb_build_array(jsonb_build_object('key', 'a', 'queue', 'err_q', 'payload', jsonb_build_object('blob', repeat('x', 1048576)))))$$),
    ($$leaseq.queue_flow((SELECT jsonb_agg(jsonb_build_object('key', n::text, 'queue', 'err_q')) FROM generate_series(1, 10001) n))$$),
    ($$leaseq.queue_flow(jsonb_build_array(jsonb_build_object('key', 'a', 'queue', 'err_q', 'depends_on', (SELECT jsonb_agg(m::text) FROM generate_series(1, 10001) m))))$$),
    ($$leaseq.queue_flow((SELECT jsonb_agg(jsonb_build_object('key', n::text, 'queue', 'err_q', 'depends_on', (SELECT jsonb_agg(m::text) FROM generate_series(1, 10000) m))) FROM generate_series(1, 11) n))$$),
    ($$leaseq.queue_flow((SELECT jsonb_agg(jsonb_build_object('key', n::text, 'queue', 'err_q', 'payload', repeat('x', 1000000))) FROM generate_series(1, 70) n))$$),
    ($$leaseq.queue_flow('{"key": "a", "queue": "err_q"}')$$),
    ($$leaseq.queue_flow_status(NULL)$$),
    ($$leaseq.queue_flow_status(0)$$),
    -- queue_enqueue's dedupe window and replace
    ($$leaseq.queue_enqueue('err_q', '{}', dedupe_for => '1 hour')$$),
    ($$leaseq.queue_enqueue('err_q', '{}', on_duplicate => 'replace')$$),
    ($$leaseq.queue_enqueue('err_q', '{}', dedupe_key => 'k', on_duplicate => NULL)$$),
    ($$leaseq.queue_enqueue('err_q', '{}', dedupe_key => 'k', on_duplicate => 'update')$$),
    ($$leaseq.queue_enqueue('err_q', '{}', dedupe_key => 'k', dedupe_for => '0')$$),
    ($$leaseq.queue_enqueue('err_q', '{}', dedupe_key => 'k', dedupe_for => '-1 day')$$),
    -- queue_schedule, queue_unschedule
    ($$leaseq.queue_schedule(NULL, 'err_q', '* * * * *', '{}')$$),
    ($$leaseq.queue_schedule('s', NULL, '* * * * *', '{}')$$),
    ($$leaseq.queue_schedule('s', 'err_q', NULL, '{}')$$),
    ($$leaseq.queue_schedule('s', 'err_q', '* * * * *', NULL)$$),
    ($$leaseq.queue_schedule('s', 'err_q', '* * * * *', '{}', timezone => NULL)$$),
    ($$leaseq.queue_schedule('s', 'err_q', '* * * * *', '{}', catch_up => NULL)$$),
    ($$leaseq.queue_schedule('', 'err_q', '* * * * *', '{}')$$),
    ($$leaseq.queue_schedule('s', 'err_q', '0 * * * * *', '{}')$$),
    ($$leaseq.queue_schedule('s', 'err_q', '61 * * * *', '{}')$$),
    ($$leaseq.queue_schedule('s', 'err_q', 'every day', '{}')$$),
    ($$leaseq.queue_schedule('s', 'err_q', '* * * * *', '{}', timezone => 'Mars/Olympus')$$),
    ($$leaseq.queue_schedule('s', 'no_such_queue', '* * * * *', '{}')$$),
    ($$leaseq.queue_schedule('s', 'Q', '* * * * *', '{}')$$),
    ($$leaseq.queue_unschedule(NULL)$$),
    -- queue_index_payloads
    ($$leaseq.queue_index_payloads(NULL)$$),
    -- queue_pause, queue_resume
    ($$leaseq.queue_pause(NULL)$$),
    ($$leaseq.queue_pause('Not A Name')$$),
    ($$leaseq.queue_pause('no_such_queue')$$),
    ($$leaseq.queue_resume(NULL)$$),
    ($$leaseq.queue_resume('q;drop table leaseq.jobs')$$),
    ($$leaseq.queue_resume('no_such_queue')$$),
    -- queue_snooze
    ($$leaseq.queue_snooze(NULL, gen_random_uuid(), '1 minute')$$),
    ($$leaseq.queue_snooze(1, NULL, '1 minute')$$),
    ($$leaseq.queue_snooze(1, gen_random_uuid(), NULL)$$),
    ($$leaseq.queue_snooze(1, gen_random_uuid(), '-1 second')$$),
    ($$leaseq.queue_snooze(1, gen_random_uuid(), '31 days')$$),
    ($$leaseq.queue_create('err_q', max_snoozes => -1)$$),
    -- queue_hand_back
    ($$leaseq.queue_hand_back(NULL, ARRAY[gen_random_uuid()])$$),
    ($$leaseq.queue_hand_back(ARRAY[1], NULL)$$),
    ($$leaseq.queue_hand_back(ARRAY[1, NULL], ARRAY[gen_random_uuid(), gen_random_uuid()])$$),
    ($$leaseq.queue_hand_back(ARRAY[1], ARRAY[NULL]::uuid[])$$),
    ($$leaseq.queue_hand_back(ARRAY[1, 2, 3], ARRAY[gen_random_uuid(), gen_random_uuid()])$$),
    ($$leaseq.queue_hand_back(ARRAY[1, 1], ARRAY[gen_random_uuid(), gen_random_uuid()])$$),
    ($$leaseq.queue_hand_back(ARRAY(SELECT generate_series(1, 10001)::bigint),
                              ARRAY(SELECT gen_random_uuid() FROM generate_series(1, 10001)))$$),
    -- ordered groups
    ($$leaseq.queue_enqueue('err_q', '{}', group_key => '')$$),
    ($$leaseq.queue_enqueue('err_q', '{}', group_key => repeat('g', 513))$$),
    ($$leaseq.queue_enqueue('no_such_queue', '{}', group_key => 'g')$$),
    ($$leaseq.queue_enqueue('no_such_queue', '{}', dedupe_key => 'k', group_key => 'g')$$),
    ($$leaseq.queue_enqueue_batch('err_q', ARRAY['{}', '{}']::jsonb[], group_keys => ARRAY['g'])$$),
    ($$leaseq.queue_enqueue_batch('err_q', ARRAY['{}']::jsonb[], group_keys => ARRAY['g', 'h'])$$),
    ($$leaseq.queue_enqueue_batch('err_q', ARRAY['{}', '{}']::jsonb[], group_keys => ARRAY['g', ''])$$),
    ($$leaseq.queue_enqueue_batch('err_q', ARRAY['{}']::jsonb[], group_keys => ARRAY[repeat('g', 513)])$$),
    ($$leaseq.queue_enqueue_batch('no_such_queue', ARRAY['{}']::jsonb[], group_keys => ARRAY['g'])$$),
    ($$leaseq.queue_create('err_q', group_concurrency => NULL)$$),
    ($$leaseq.queue_create('err_q', group_concurrency => 0)$$),
    ($$leaseq.queue_create('err_q', group_concurrency => -1)$$),
    ($$leaseq.queue_create('err_q', group_concurrency => 1001)$$),
    -- queue_redrive_batch, queue_cancel_batch: an unknown id refuses the whole call (the
    -- first id is err_q's pending job, which a cancel would have cancelled)
    ($$leaseq.queue_redrive_batch(NULL)$$),
    ($$leaseq.queue_redrive_batch(ARRAY[1, NULL])$$),
    ($$leaseq.queue_redrive_batch(ARRAY[1, 1])$$),
    ($$leaseq.queue_redrive_batch(ARRAY(SELECT generate_series(1, 10001)::bigint))$$),
    ($$leaseq.queue_redrive_batch(ARRAY[(SELECT max(id) FROM leaseq.jobs), -1])$$),
    ($$leaseq.queue_cancel_batch(NULL)$$),
    ($$leaseq.queue_cancel_batch(ARRAY[NULL]::bigint[])$$),
    ($$leaseq.queue_cancel_batch(ARRAY[7, 7])$$),
    ($$leaseq.queue_cancel_batch(ARRAY(SELECT generate_series(1, 10001)::bigint))$$),
    ($$leaseq.queue_cancel_batch(ARRAY[(SELECT max(id) FROM leaseq.jobs), 9223372036854775807])$$),
    -- queue_throughput, queue_groups
    ($$leaseq.queue_throughput(NULL)$$),
    ($$leaseq.queue_throughput(0)$$),
    ($$leaseq.queue_throughput(61)$$),
    ($$leaseq.queue_groups(NULL)$$),
    ($$leaseq.queue_groups('Q')$$),
    ($$leaseq.queue_groups('no_such_queue')$$),
    ($$leaseq.queue_groups('err_q', max_rows => NULL)$$),
    ($$leaseq.queue_groups('err_q', max_rows => 0)$$),
    -- queue_grant, queue_revoke
    ($$leaseq.queue_grant(NULL, 'leaseq_worker', 'work')$$),
    ($$leaseq.queue_grant('err_q', NULL, 'work')$$),
    ($$leaseq.queue_grant('err_q', 'leaseq_worker', NULL)$$),
    ($$leaseq.queue_grant('err_q', 'leaseq_worker', 'write')$$),
    ($$leaseq.queue_grant('err_q', 'leaseq_worker', 'WORK')$$),
    ($$leaseq.queue_grant('err_q', 'leaseq_worker', '')$$),
    ($$leaseq.queue_grant('Q', 'leaseq_worker', 'work')$$),
    ($$leaseq.queue_grant('no_such_queue', 'leaseq_worker', 'work')$$),
    ($$leaseq.queue_grant('err_q', 'no_such_role', 'work')$$),
    ($$leaseq.queue_revoke(NULL, 'leaseq_worker', 'work')$$),
    ($$leaseq.queue_revoke('err_q', NULL, 'work')$$),
    ($$leaseq.queue_revoke('err_q', 'leaseq_worker', NULL)$$),
    ($$leaseq.queue_revoke('err_q', 'leaseq_worker', 'all')$$),
    ($$leaseq.queue_revoke('no_such_queue', 'leaseq_worker', 'work')$$)
  ) AS calls (call);


-- Nothing any of those refusals did is left.
SELECT pg_temp.fingerprint() = :'before' AS refusals_changed_nothing;

-- A queue with a grant refuses a role that holds none covering the call (pg_test/sql/
-- privileges.sql tries every role on every function).
SELECT leaseq.queue_create('err_closed');
SELECT leaseq.queue_grant('err_closed', 'leaseq_admin', 'work');
SELECT pg_temp.fingerprint() AS before \gset
SET ROLE leaseq_worker;
SELECT pg_temp.refusal($$leaseq.queue_enqueue('err_closed', '{}')$$) AS worker_enqueue;
RESET ROLE;
SELECT pg_temp.fingerprint() = :'before' AS refusal_changed_nothing;

-- Not errors: a random, stale or unknown (job_id, lease_token) is the fence at work. renew and
-- fail answer NULL, complete false, and nothing changes.
SELECT job_id AS claimed_id, lease_token AS live_token FROM leaseq.queue_claim('err_q', 'w') \gset
SELECT pg_temp.fingerprint() AS fenced_before \gset
SELECT leaseq.queue_renew(:claimed_id, gen_random_uuid()) IS NULL AS random_token_renew,
       leaseq.queue_complete(:claimed_id, gen_random_uuid()) AS random_token_complete,
       leaseq.queue_fail(:claimed_id, gen_random_uuid()) IS NULL AS random_token_fail,
       leaseq.queue_renew(9223372036854775807, :'live_token') IS NULL AS unknown_job_renew,
       leaseq.queue_complete(-1, :'live_token') AS unknown_job_complete,
       leaseq.queue_fail(0, :'live_token') IS NULL AS unknown_job_fail;
SELECT pg_temp.fingerprint() = :'fenced_before' AS fenced_calls_changed_nothing;
SELECT leaseq.queue_complete(:claimed_id, :'live_token') AS completed_with_live_token;
SELECT pg_temp.fingerprint() AS fenced_before \gset
SELECT leaseq.queue_renew(:claimed_id, :'live_token') IS NULL AS stale_token_renew,
       leaseq.queue_complete(:claimed_id, :'live_token') AS stale_token_complete,
       leaseq.queue_fail(:claimed_id, :'live_token') IS NULL AS stale_token_fail;
SELECT pg_temp.fingerprint() = :'fenced_before' AS stale_calls_changed_nothing;

-- A redrive that would give a dedupe key a second live job is refused.
SELECT leaseq.queue_enqueue('err_q', '{}', dedupe_key => 'once', max_attempts => 1) AS keyed \gset
SELECT leaseq.queue_fail(job_id, lease_token, retry => false) FROM leaseq.queue_claim('err_q', 'w') WHERE job_id = :keyed;
SELECT leaseq.queue_enqueue('err_q', '{}', dedupe_key => 'once') <> :keyed AS key_free_once_dead;
SELECT pg_temp.refusal(format('leaseq.queue_redrive(%s)', :keyed)) AS redrive_refused,
       pg_temp.refusal($$leaseq.queue_redrive_all('err_q')$$) AS redrive_all_refused;

-- The payload limit is a setting: lowered, a small document is refused.
SET leaseq.max_payload_bytes = 16;
SELECT pg_temp.refusal($$leaseq.queue_enqueue('err_q', '{"text": "seventeen bytes+"}')$$);
RESET leaseq.max_payload_bytes;

-- Lease operations refuse to run under snapshot isolation.
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT pg_temp.refusal($$leaseq.queue_claim('err_q', 'w')$$) AS claim,
       pg_temp.refusal($$leaseq.queue_renew(1, gen_random_uuid())$$) AS renew,
       pg_temp.refusal($$leaseq.queue_renew_batch(ARRAY[1], ARRAY[gen_random_uuid()])$$) AS renew_batch,
       pg_temp.refusal($$leaseq.queue_complete(1, gen_random_uuid())$$) AS complete,
       pg_temp.refusal($$leaseq.queue_fail(1, gen_random_uuid())$$) AS fail,
       pg_temp.refusal($$leaseq.queue_complete_batch(ARRAY[1], ARRAY[gen_random_uuid()])$$) AS complete_batch,
       pg_temp.refusal($$leaseq.queue_fail_batch(ARRAY[1], ARRAY[gen_random_uuid()])$$) AS fail_batch,
       pg_temp.refusal($$leaseq.queue_snooze(1, gen_random_uuid(), '1 minute')$$) AS snooze,
       pg_temp.refusal($$leaseq.queue_hand_back(ARRAY[1], ARRAY[gen_random_uuid()])$$) AS hand_back;
ROLLBACK;
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT pg_temp.refusal($$leaseq.queue_claim('err_q', 'w')$$) AS claim;
ROLLBACK;

SELECT count(*) AS jobs, string_agg(status::text, ',' ORDER BY id) AS statuses
  FROM leaseq.jobs WHERE queue = 'err_q';
