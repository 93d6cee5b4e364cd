-- What an admin console reads and does beside the job lifecycle: filtered, keyset-paginated
-- queue_jobs; bulk redrive and cancel; each queue's settings, overview and last hour; who holds
-- leases; busy groups. (Who may call them: privileges.sql; bad input: errors.sql.)
\pset pager off

SELECT leaseq.queue_create('con_a', max_attempts => 1);
SELECT leaseq.queue_create('con_b', lease => '2 minutes', retain => '7 days', max_snoozes => 3,
                           group_concurrency => 1);
-- Twelve jobs in con_a (customers 1..4 in turn), two grouped and one keyed in con_b.
SELECT count(*) AS enqueued FROM (
    SELECT leaseq.queue_enqueue('con_a', jsonb_build_object('customer', n % 4 + 1, 'n', n))
      FROM generate_series(1, 12) AS n) AS jobs;
SELECT leaseq.queue_enqueue('con_b', '{"doc": 1}', group_key => 'doc-1') AS grouped_first \gset
SELECT leaseq.queue_enqueue('con_b', '{"doc": 1, "rev": 2}', group_key => 'doc-1') AS grouped_second \gset
SELECT leaseq.queue_enqueue('con_b', '{"sync": 9}', dedupe_key => 'sync-9') AS keyed \gset

-- Two of con_a claimed by w-1, one of them failed for good (max_attempts 1): dead.
SELECT array_agg(job_id ORDER BY job_id) AS claimed_ids, min(lease_token::text) AS token
  FROM leaseq.queue_claim('con_a', 'w-1', 2) \gset
SELECT leaseq.queue_fail((:'claimed_ids'::bigint[])[1], :'token', '{"error": "boom"}') AS failed;

-- Newest first across every queue; the filters narrow it.
SELECT queue, count(*) AS jobs
  FROM leaseq.queue_jobs(max_rows => 10000) WHERE queue LIKE 'con_%' GROUP BY queue ORDER BY queue;
SELECT array_agg(job_id) = array_agg(job_id ORDER BY job_id DESC) AS ordered_newest_first
  FROM leaseq.queue_jobs('con_a');
SELECT count(*) AS customer_2 FROM leaseq.queue_jobs('con_a', payload_contains => '{"customer": 2}');
SELECT bool_and(status = 'dead') AND count(*) = 1 AS one_dead
  FROM leaseq.queue_jobs('con_a', status => 'dead');
SELECT count(*) AS running_on_w1 FROM leaseq.queue_jobs(worker => 'w-1', status => 'running')
 WHERE queue LIKE 'con_%';
-- Dead and running jobs start from their indexes, payloads too once queue_index_payloads made
-- theirs: the same answers.
SELECT leaseq.queue_index_payloads(true) AS indexed, leaseq.queue_index_payloads(true) AS indexed_again;
SELECT count(*) AS customer_2 FROM leaseq.queue_jobs('con_a', payload_contains => '{"customer": 2}');
SELECT queue, count(*) AS customer_2_in_any_queue
  FROM leaseq.queue_jobs(payload_contains => '{"customer": 2}') WHERE queue LIKE 'con_%' GROUP BY queue;
SELECT status, count(*) AS customer_2_by_status
  FROM leaseq.queue_jobs('con_a', 'pending', payload_contains => '{"customer": 2}') GROUP BY status;
SELECT array_agg(job_id) = array_agg(job_id ORDER BY job_id DESC) AS indexed_newest_first,
       count(*) AS first_page
  FROM leaseq.queue_jobs(payload_contains => '{}', max_rows => 4);
SELECT leaseq.queue_index_payloads(false) AS dropped, leaseq.queue_index_payloads(false) AS dropped_again;
SELECT job_id = :grouped_first AS first_of_doc_1, status
  FROM leaseq.queue_jobs('con_b', group_key => 'doc-1') ORDER BY job_id LIMIT 1;
SELECT job_id = :keyed AS the_keyed_job, dedupe_key FROM leaseq.queue_jobs('con_b', dedupe_key => 'sync-9');
SELECT count(*) AS created_in_the_future FROM leaseq.queue_jobs('con_a', created_after => now() + interval '1 day');
SELECT count(*) = 12 AS all_created_before_tomorrow
  FROM leaseq.queue_jobs('con_a', created_before => now() + interval '1 day');

-- Keyset pages of 5: no job twice, none missed, each page after the last id of the one before.
WITH page1 AS (SELECT job_id FROM leaseq.queue_jobs('con_a', max_rows => 5)),
     page2 AS (SELECT job_id FROM leaseq.queue_jobs('con_a', max_rows => 5,
                                                    before_id => (SELECT min(job_id) FROM page1))),
     page3 AS (SELECT job_id FROM leaseq.queue_jobs('con_a', max_rows => 5,
                                                    before_id => (SELECT min(job_id) FROM page2)))
SELECT (SELECT count(*) FROM page1) AS page1, (SELECT count(*) FROM page2) AS page2,
       (SELECT count(*) FROM page3) AS page3,
       (SELECT count(DISTINCT job_id) FROM (TABLE page1 UNION ALL TABLE page2 UNION ALL TABLE page3) AS p) AS distinct_jobs,
       (SELECT max(job_id) FROM page2) < (SELECT min(job_id) FROM page1) AS page2_older;

-- A window of ids (after_id < id < before_id): newest first, nothing outside it; after_id alone
-- gives the jobs newer than one seen before.
WITH all_jobs AS (SELECT array_agg(job_id ORDER BY job_id) AS ids FROM leaseq.queue_jobs('con_a'))
SELECT (SELECT array_agg(job_id) FROM leaseq.queue_jobs('con_a', after_id => ids[3], before_id => ids[8]))
           = ARRAY[ids[7], ids[6], ids[5], ids[4]] AS window_newest_first,
       (SELECT count(*) FROM leaseq.queue_jobs('con_a', after_id => ids[cardinality(ids)])) AS newer_than_newest,
       (SELECT count(*) FROM leaseq.queue_jobs('con_a', 'dead', after_id => ids[1] - 1)) AS dead_in_window,
       (SELECT count(*) FROM leaseq.queue_jobs('con_a', 'dead', after_id => ids[cardinality(ids)])) AS dead_above
  FROM all_jobs;

-- A job's result, once it succeeded: NULL while it runs, then what its worker returned.
SELECT leaseq.queue_create('results_q');
SELECT leaseq.queue_enqueue('results_q', '{}') > 0 AS enqueued;
SELECT job_id AS result_job, lease_token AS result_token FROM leaseq.queue_claim('results_q', 'w-result') \gset
SELECT leaseq.queue_result(:result_job) IS NULL AS none_while_running;
SELECT leaseq.queue_complete(:result_job, :'result_token', '{"rows": 42}') AS completed;
SELECT leaseq.queue_result(:result_job) AS result;

-- Bulk redrive: one answer per id, in input order; only the dead job comes back.
SELECT (:'claimed_ids'::bigint[])[1] AS dead_job, (:'claimed_ids'::bigint[])[2] AS running_job \gset
SELECT array_agg(r) AS redriven
  FROM leaseq.queue_redrive_batch(ARRAY[:running_job, :dead_job]) AS r;
SELECT status, attempts FROM leaseq.jobs WHERE id = :dead_job;

-- Bulk cancel: the running job loses its lease at once (its worker is fenced out), the pending
-- ones are cancelled; cancelled again, each answers false.
SELECT array_agg(c) AS cancelled
  FROM leaseq.queue_cancel_batch(ARRAY[:running_job, :dead_job, :keyed]) AS c;
SELECT array_agg(c) AS cancelled_again
  FROM leaseq.queue_cancel_batch(ARRAY[:running_job, :keyed]) AS c;
SELECT leaseq.queue_complete(:running_job, :'token') AS stale_worker_completes,
       leaseq.queue_renew(:running_job, :'token') IS NULL AS stale_worker_cannot_renew;
SELECT outcome FROM leaseq.queue_attempts(:running_job) ORDER BY attempt_no DESC LIMIT 1;

-- Settings, as queue_create took them, and whether the queue is paused.
SELECT leaseq.queue_pause('con_b') AS paused;
SELECT queue, lease, max_attempts, backoff_base, backoff_cap, retain, max_snoozes,
       group_concurrency, paused, updated_at >= created_at AS updated_after_created
  FROM leaseq.queue_settings() WHERE queue LIKE 'con_%' ORDER BY queue;

-- The overview: live jobs by state from the indexes; this hour's outcomes from the counters.
-- Counters and kept counts live in shared memory: without shared_preload_libraries (a default
-- install, which scripts/test runs this file on too) the hour reads zeros and every call counts
-- again (README, "What preloading adds"). Each check below holds either way.
SELECT current_setting('shared_preload_libraries') ~ '\mleaseq\M' AS preloaded \gset
SELECT leaseq.queue_enqueue('con_a', '{"later": true}', run_at => now() + interval '1 hour') > 0 AS scheduled;
SELECT job_id AS done_job, lease_token AS done_token FROM leaseq.queue_claim('con_a', 'w-2') \gset
SELECT leaseq.queue_complete(:done_job, :'done_token') AS completed;
SELECT queue, paused, pending, scheduled, running, expired_leases, dead, waiting,
       oldest_pending_age > interval '0' AS has_waited,
       ARRAY[completed_last_hour, failed_last_hour]
         = CASE WHEN :'preloaded'::boolean AND queue = 'con_a' THEN '{1,1}' ELSE '{0,0}' END::bigint[]
         AS last_hour_counted_if_preloaded
  FROM leaseq.queue_overview() WHERE queue LIKE 'con_%' ORDER BY queue;
-- The counts are kept for leaseq.overview_max_age: a job enqueued since shows at the next count.
SELECT counted_at FROM leaseq.queue_overview() WHERE queue = 'con_a' \gset
SET leaseq.overview_max_age = '1h';
SELECT leaseq.queue_enqueue('con_a', '{"after": "the count"}') > 0 AS enqueued_since;
SELECT pending = CASE WHEN :'preloaded'::boolean THEN 9 ELSE 10 END AS pending_kept_if_preloaded,
       (counted_at = :'counted_at') = :'preloaded'::boolean AS kept_if_preloaded
  FROM leaseq.queue_overview() WHERE queue = 'con_a';
SET leaseq.overview_max_age = 0;
SELECT pending, counted_at > :'counted_at' AS counted_again FROM leaseq.queue_overview() WHERE queue = 'con_a';
RESET leaseq.overview_max_age;
-- Minute by minute (two minutes: the one the completion fell in may have just ended).
SELECT queue, count(*) AS minutes,
       ARRAY[sum(completed), sum(failed)]
         = CASE WHEN :'preloaded'::boolean AND queue = 'con_a' THEN '{1,1}' ELSE '{0,0}' END::numeric[]
         AS counted_if_preloaded
  FROM leaseq.queue_throughput(2) WHERE queue LIKE 'con_%' GROUP BY queue ORDER BY queue;
SELECT count(*) AS minutes, count(DISTINCT minute) AS distinct_minutes,
       max(minute) <= now() AND max(minute) > now() - interval '1 minute' AS last_is_this_minute,
       bool_and(date_trunc('minute', minute) = minute) AS whole_minutes
  FROM leaseq.queue_throughput() WHERE queue = 'con_a';

-- Who holds leases now; and the groups, most waiting first.
SELECT count(*) AS claimed_by_w3 FROM leaseq.queue_claim('con_a', 'w-3', 2);
SELECT worker, queue, running, oldest_started_at <= now() AS started, next_expiry > now() AS live,
       expired
  FROM leaseq.queue_workers() WHERE queue LIKE 'con_%' ORDER BY worker;
SELECT group_key, admitted, waiting, oldest_waiting_id = :grouped_second AS next_admitted
  FROM leaseq.queue_groups('con_b');

-- A claim on a queue that does not exist takes no counter slot (4,096 per server, kept until it
-- restarts): after more such claims than there are slots, a new queue's completions are counted.
DO $$
BEGIN
    FOR i IN 1..4100 LOOP
        BEGIN
            PERFORM leaseq.queue_claim('con_made_up_' || i, 'w');
        EXCEPTION WHEN undefined_object THEN NULL;
        END;
    END LOOP;
END $$;
SELECT leaseq.queue_create('con_after_made_up');
SELECT leaseq.queue_enqueue('con_after_made_up', '{}') AS after_job \gset
SELECT lease_token AS after_token FROM leaseq.queue_claim('con_after_made_up', 'w') \gset
SELECT leaseq.queue_complete(:after_job, :'after_token') AS completed;
-- (Without preloading there are no counters, and metrics() has no such line.)
SELECT coalesce((SELECT split_part(line, ' ', 2)::int
                   FROM unnest(string_to_array(leaseq.metrics(), E'\n')) AS line
                  WHERE line LIKE 'leaseq_completed_total{queue="con_after_made_up"} %'), 0)
       = CASE WHEN :'preloaded'::boolean THEN 1 ELSE 0 END AS counted_if_preloaded;
