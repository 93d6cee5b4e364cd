-- A call that changes nothing writes nothing: no transaction id, so no commit record, no WAL
-- flush at commit, no step towards wraparound — an idle Worker polls an empty queue for ever,
-- and a stale worker's refused finish or an observer's read costs what a read costs. Each call
-- runs in its own transaction (\gexec runs each generated statement on its own);
-- pg_current_xact_id_if_assigned() is NULL until something in it asked for a transaction id.
\pset pager off
CREATE FUNCTION pg_temp.writes_nothing(call text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE call;
    RETURN pg_current_xact_id_if_assigned() IS NULL;
END $$;
SELECT leaseq.queue_create('wn_empty');
SELECT leaseq.queue_create('wn_paused');
SELECT leaseq.queue_pause('wn_paused');
-- A lease of an hour: a lease ended by a slow run would be reclaimed, which writes.
SELECT leaseq.queue_create('wn', interval '1 hour');
SELECT leaseq.queue_enqueue('wn', '{"n": 1}') AS done_id \gset
SELECT leaseq.queue_enqueue('wn', '{"n": 2}') AS running_id \gset
SELECT leaseq.queue_enqueue('wn', '{"n": 3}', run_at => now() + interval '1 hour') AS later_id \gset
SELECT lease_token AS done_token FROM leaseq.queue_claim('wn', 'w') \gset
SELECT leaseq.queue_complete(:done_id, :'done_token', '{"ok": true}');
SELECT lease_token AS running_token FROM leaseq.queue_claim('wn', 'w') \gset
\set stale 00000000-0000-4000-8000-000000000000
-- Only the function called is shown: the calls name job ids and tokens, which depend on the
-- tests that ran before.
\set ECHO none
\pset tuples_only on
SELECT format('SELECT pg_temp.writes_nothing(%L) AS writes_nothing, %L AS function', call,
              substring(call FROM 'leaseq\.(\w+)'))
  FROM (VALUES
    -- the job path when there is nothing to do
    ($$SELECT * FROM leaseq.queue_claim('wn_empty', 'w')$$),
    ($$SELECT * FROM leaseq.queue_claim('wn_empty', 'w', 100)$$),
    ($$SELECT * FROM leaseq.queue_claim('wn_paused', 'w')$$),
    ($$SELECT * FROM leaseq.queue_claim('wn', 'w')$$),
    -- a stale worker's calls, refused
    (format($$SELECT leaseq.queue_complete(%s, %L)$$, :running_id, :'stale')),
    (format($$SELECT * FROM leaseq.queue_complete_batch(ARRAY[%s], ARRAY[%L]::uuid[])$$, :running_id, :'stale')),
    (format($$SELECT leaseq.queue_fail(%s, %L::uuid, '{}')$$, :running_id, :'stale')),
    (format($$SELECT * FROM leaseq.queue_fail_batch(ARRAY[%s], ARRAY[%L]::uuid[], ARRAY['{}']::jsonb[])$$, :running_id, :'stale')),
    (format($$SELECT leaseq.queue_renew(%s, %L::uuid)$$, :running_id, :'stale')),
    (format($$SELECT * FROM leaseq.queue_renew_batch(ARRAY[%s], ARRAY[%L]::uuid[])$$, :running_id, :'stale')),
    (format($$SELECT leaseq.queue_snooze(%s, %L::uuid, interval '1 minute')$$, :running_id, :'stale')),
    (format($$SELECT leaseq.queue_progress(%s, %L::uuid, '{}')$$, :running_id, :'stale')),
    (format($$SELECT * FROM leaseq.queue_hand_back(ARRAY[%s], ARRAY[%L]::uuid[])$$, :running_id, :'stale')),
    (format($$SELECT leaseq.queue_complete(%s, %L::uuid)$$, :done_id, :'done_token')),
    -- what has nothing to act on
    (format($$SELECT leaseq.queue_cancel(%s)$$, :done_id)),
    (format($$SELECT * FROM leaseq.queue_cancel_batch(ARRAY[%s])$$, :done_id)),
    (format($$SELECT * FROM leaseq.queue_redrive_batch(ARRAY[%s])$$, :later_id)),
    (format($$SELECT leaseq.queue_redrive(%s)$$, :later_id)),
    ($$SELECT leaseq.queue_redrive_all('wn')$$),
    ($$SELECT leaseq.queue_purge('wn', interval '1 day')$$),
    -- reads
    ($$SELECT * FROM leaseq.queue_stats()$$),
    ($$SELECT * FROM leaseq.queue_counts()$$),
    ($$SELECT * FROM leaseq.queue_overview()$$),
    ($$SELECT * FROM leaseq.queue_settings()$$),
    ($$SELECT * FROM leaseq.queue_throughput(60)$$),
    ($$SELECT * FROM leaseq.queue_workers()$$),
    ($$SELECT * FROM leaseq.queue_groups('wn')$$),
    ($$SELECT * FROM leaseq.queue_grants()$$),
    ($$SELECT * FROM leaseq.queue_privileges()$$),
    ($$SELECT * FROM leaseq.queue_schedules()$$),
    ($$SELECT * FROM leaseq.metrics()$$),
    ($$SELECT * FROM leaseq.queue_jobs('wn')$$),
    (format($$SELECT * FROM leaseq.queue_job(%s)$$, :done_id)),
    (format($$SELECT * FROM leaseq.queue_attempts(%s)$$, :done_id)),
    (format($$SELECT leaseq.queue_result(%s)$$, :done_id)),
    (format($$SELECT * FROM leaseq.queue_children(%s)$$, :done_id)),
    (format($$SELECT * FROM leaseq.queue_parents(%s)$$, :done_id)),
    (format($$SELECT * FROM leaseq.queue_steps(%s)$$, :running_id))
  ) AS calls (call) \gexec
\pset tuples_only off
\set ECHO all
-- Nothing above changed a job.
SELECT id = :done_id AS job, status, attempts FROM leaseq.jobs WHERE queue = 'wn' ORDER BY id;
