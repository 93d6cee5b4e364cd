-- queue_await (src/observe/wait.rs): a procedure, CALLed on its own, that returns once every job
-- it names is final or its timeout passes, and says which are not final yet. Its wake-up by a
-- finishing commit, and that it sleeps holding no snapshot, are pinned by a live test that can
-- run a CALL and a finish at once (cli/tests/worker.rs,
-- await_sleeps_holding_no_snapshot_and_wakes_at_each_finish).
\pset pager off
SELECT leaseq.queue_create('await_q', lease => '1 hour');
SELECT leaseq.queue_enqueue('await_q', '{"n": 1}') AS first \gset
SELECT leaseq.queue_enqueue('await_q', '{"n": 2}') AS second \gset

-- Neither is final, and there is no time to wait: both unfinished, at once.
CALL leaseq.queue_await(ARRAY[:second, :first]::bigint[], '0') \gset
SELECT :'all_final' AS all_final, :'unfinished'::bigint[] = ARRAY[:first, :second]::bigint[] AS unfinished_as_expected;

-- A timeout is waited out on the server's clock.
SELECT clock_timestamp() AS started \gset
CALL leaseq.queue_await(ARRAY[:first]::bigint[], '200 milliseconds') \gset
SELECT :'all_final' AS all_final, :'unfinished'::bigint[] = ARRAY[:first]::bigint[] AS unfinished_as_expected;
SELECT clock_timestamp() - :'started'::timestamptz >= '200 milliseconds' AS waited_the_timeout;

-- One succeeded: only the other is left.
SELECT job_id = :first AS claimed_first, leaseq.queue_complete(job_id, lease_token) AS completed
  FROM leaseq.queue_claim('await_q', 'w');
CALL leaseq.queue_await(ARRAY[:first, :second]::bigint[], '0') \gset
SELECT :'all_final' AS all_final, :'unfinished'::bigint[] = ARRAY[:second]::bigint[] AS unfinished_as_expected;
-- Cancelled is final too: all final, returning at once whatever the timeout.
SELECT leaseq.queue_cancel(:second);
CALL leaseq.queue_await(ARRAY[:first, :second]::bigint[], '1 day') \gset
SELECT :'all_final' AS all_final, :'unfinished'::bigint[] = '{}'::bigint[] AS unfinished_as_expected;
-- A dead job is final.
SELECT leaseq.queue_enqueue('await_q', '{"n": 3}', max_attempts => 1) AS third \gset
SELECT leaseq.queue_fail(job_id, lease_token, '{"e": 1}') AS failed
  FROM leaseq.queue_claim('await_q', 'w');
SELECT status FROM leaseq.queue_job(:third);
CALL leaseq.queue_await(ARRAY[:third]::bigint[], '1 day') \gset
SELECT :'all_final' AS all_final, :'unfinished'::bigint[] = '{}'::bigint[] AS unfinished_as_expected;
-- Nothing to wait for.
CALL leaseq.queue_await('{}', '1 day');

-- Bad input: each refusal's SQLSTATE, and nothing changed (it only reads, but says so).
SELECT leaseq.queue_enqueue('await_q', '{"n": 4}') AS live \gset
CREATE FUNCTION pg_temp.fingerprint() RETURNS text LANGUAGE sql AS $$
    SELECT md5(concat_ws('|',
        (SELECT string_agg(j::text, ',' ORDER BY id) FROM leaseq.jobs j),
        (SELECT string_agg(a::text, ',' ORDER BY job_id, attempt_no) FROM leaseq.attempts a)))
$$;
SELECT pg_temp.fingerprint() AS before \gset
\set VERBOSITY terse
CALL leaseq.queue_await(NULL, '1 second');
\echo :LAST_ERROR_SQLSTATE
CALL leaseq.queue_await(ARRAY[:live, NULL]::bigint[], '1 second');
\echo :LAST_ERROR_SQLSTATE
CALL leaseq.queue_await(ARRAY[:live, :live]::bigint[], '1 second');
\echo :LAST_ERROR_SQLSTATE
CREATE FUNCTION pg_temp.ids(n int) RETURNS bigint[] LANGUAGE sql
    AS $$ SELECT array_agg(i) FROM generate_series(1, n) AS i $$;
CALL leaseq.queue_await(pg_temp.ids(10001), '1 second');
\echo :LAST_ERROR_SQLSTATE
CALL leaseq.queue_await(ARRAY[:live]::bigint[], NULL);
\echo :LAST_ERROR_SQLSTATE
CALL leaseq.queue_await(ARRAY[:live]::bigint[], '-1 second');
\echo :LAST_ERROR_SQLSTATE
CALL leaseq.queue_await(ARRAY[:live]::bigint[], '1 day 1 second');
\echo :LAST_ERROR_SQLSTATE
-- (A job purged while a call waits counts as final; one already gone when it starts cannot be
-- told from one that never existed.)
CALL leaseq.queue_await(ARRAY[:live, 0]::bigint[], '1 second');
\echo :LAST_ERROR_SQLSTATE
-- Only where it may commit between its waits: not in a transaction block, not from a function.
BEGIN;
CALL leaseq.queue_await(ARRAY[:live]::bigint[], '1 second');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
CREATE FUNCTION pg_temp.await_in_a_function(ids bigint[]) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    all_final boolean;
    unfinished bigint[];
BEGIN
    CALL leaseq.queue_await(ids, '1 second', all_final, unfinished);
END $$;
SELECT pg_temp.await_in_a_function(ARRAY[:live]::bigint[]);
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY default
SELECT pg_temp.fingerprint() = :'before' AS nothing_changed;

-- From a DO block at top level it may commit: a procedure's own caller can wait.
DO $$
DECLARE
    ids bigint[] := ARRAY(SELECT id FROM leaseq.jobs WHERE queue = 'await_q');
    all_final boolean;
    unfinished bigint[];
BEGIN
    CALL leaseq.queue_await(ids, '0', all_final, unfinished);
    RAISE NOTICE 'all final: %, unfinished: % of %', all_final, cardinality(unfinished),
        cardinality(ids);
END $$;
