-- The job lifecycle as a user sees it, one step at a time. Volatile values (ids, tokens, times)
-- are compared, never printed.
\pset pager off

-- queue_create: defaults, then an update of the same queue.
SELECT leaseq.queue_create('life');
SELECT name, lease, max_attempts, backoff_base, backoff_cap FROM leaseq.queues WHERE name = 'life';
SELECT leaseq.queue_create('life', lease => '2 minutes', max_attempts => 3,
                           backoff_base => '2 seconds', backoff_cap => '1 minute');
SELECT name, lease, max_attempts, backoff_base, backoff_cap FROM leaseq.queues WHERE name = 'life';

-- queue_enqueue: defaults come from the queue and the server clock.
SELECT leaseq.queue_enqueue('life', '{"to": "ada@example.com"}') AS a \gset
SELECT status, priority, attempts, max_attempts, run_at <= clock_timestamp() AS due,
       run_at = created_at AS run_at_is_enqueue_time, lease_token IS NULL AS no_lease
  FROM leaseq.jobs WHERE id = :a;
-- A payload comes back exactly as given, big numbers and all.
SELECT leaseq.queue_enqueue('life', '{"amount": 12345678901234567890.000000000000000001, "n": 0.1}',
                            priority => -5, max_attempts => 1) AS exact \gset
SELECT payload::text, max_attempts FROM leaseq.jobs WHERE id = :exact;
-- run_at in the future: scheduled, not claimable yet.
SELECT leaseq.queue_enqueue('life', '{"later": true}', run_at => clock_timestamp() + interval '1 hour') AS later \gset
-- A higher priority is claimed first.
SELECT leaseq.queue_enqueue('life', '{"urgent": true}', priority => 10) AS urgent \gset

-- A rolled-back enqueue leaves nothing behind.
BEGIN;
SELECT leaseq.queue_enqueue('life', '{"rolled": "back"}') IS NOT NULL AS enqueued;
ROLLBACK;
SELECT count(*) AS rolled_back_jobs FROM leaseq.jobs WHERE payload ? 'rolled';

SELECT queue, pending, scheduled, running, expired_leases, succeeded, dead, cancelled,
       oldest_pending_age >= interval '0' AS has_age
  FROM leaseq.queue_stats() WHERE queue = 'life';

-- queue_claim: priority first, then run_at, then id; one fresh token for the call's jobs,
-- attempt 1, the lease on the server clock.
CREATE TEMP TABLE claimed AS SELECT * FROM leaseq.queue_claim('life', 'worker-1', batch => 2);
SELECT job_id = :urgent AS first_is_urgent FROM claimed ORDER BY priority DESC LIMIT 1;
SELECT count(*) AS claimed, bool_and(attempt_no = 1) AS first_attempts,
       bool_and(lease_expires_at > clock_timestamp() + interval '110 seconds'
                AND lease_expires_at <= clock_timestamp() + interval '2 minutes') AS lease_from_queue,
       count(DISTINCT lease_token) AS distinct_tokens
  FROM claimed;
SELECT j.status, j.attempts, j.worker, j.lease_token = c.lease_token AS token_matches,
       a.attempt_no, a.outcome, a.lease_token = c.lease_token AS attempt_token_matches
  FROM claimed c JOIN leaseq.jobs j ON j.id = c.job_id
  JOIN leaseq.attempts a ON a.job_id = c.job_id
 ORDER BY j.priority DESC;
-- The scheduled job is not due; the low-priority one is next.
SELECT job_id = :exact AS got_low_priority, attempt_no FROM leaseq.queue_claim('life', 'worker-2', batch => 10);

-- queue_renew: extends a current lease, by the given lease or the queue's.
SELECT lease_token AS urgent_token FROM claimed WHERE job_id = :urgent \gset
SELECT leaseq.queue_renew(:urgent, :'urgent_token', lease => '1 hour') > clock_timestamp() + interval '59 minutes' AS renewed;
SELECT leaseq.queue_renew(:urgent, :'urgent_token') <= clock_timestamp() + interval '2 minutes' AS renewed_to_queue_lease;
-- A token that is not the current one renews nothing.
SELECT leaseq.queue_renew(:urgent, gen_random_uuid()) IS NULL AS random_token_fenced;
SELECT leaseq.queue_renew(987654321, gen_random_uuid()) IS NULL AS unknown_job_fenced;

-- queue_complete: stale tokens are refused, the current one succeeds once.
SELECT leaseq.queue_complete(:urgent, gen_random_uuid(), '{"sent": false}') AS random_token_completes;
SELECT leaseq.queue_complete(:urgent, :'urgent_token', '{"sent": true}') AS completed;
SELECT leaseq.queue_complete(:urgent, :'urgent_token', '{"sent": "twice"}') AS completed_twice;
SELECT leaseq.queue_renew(:urgent, :'urgent_token') IS NULL AS finished_job_not_renewed;
SELECT leaseq.queue_fail(:urgent, :'urgent_token') IS NULL AS finished_job_not_failed;
-- The lease ends; the token stays on the row as the record of the attempt that succeeded.
SELECT status, result, lease_expires_at IS NULL AS lease_ended,
       lease_token = :'urgent_token' AS attempt_on_row, finished_at IS NOT NULL AS finished
  FROM leaseq.jobs WHERE id = :urgent;
SELECT attempt_no, outcome, ended_at >= started_at AS ended FROM leaseq.attempts WHERE job_id = :urgent;

-- queue_fail: with budget left the job is pending again after the backoff (base 2 s: attempt 1
-- waits at most 2 s); the attempt keeps the error.
SELECT lease_token AS a_token FROM claimed WHERE job_id = :a \gset
SELECT leaseq.queue_fail(:a, :'a_token', '{"error": "smtp timeout"}') AS after_first_failure;
SELECT status, attempts, last_error, lease_token IS NULL AS lease_cleared,
       run_at <= clock_timestamp() + interval '2 seconds' AS backoff_within_base
  FROM leaseq.jobs WHERE id = :a;
SELECT attempt_no, outcome, error FROM leaseq.attempts WHERE job_id = :a;
SELECT leaseq.queue_fail(:a, :'a_token') IS NULL AS stale_fail_fenced;
-- retry_in overrides the backoff.
UPDATE leaseq.jobs SET run_at = clock_timestamp() WHERE id = :a;  -- skip the wait
SELECT lease_token AS a_token2, attempt_no FROM leaseq.queue_claim('life', 'worker-1') \gset
SELECT :attempt_no AS second_attempt_no;
SELECT leaseq.queue_fail(:a, :'a_token2', retry_in => '10 minutes') AS after_retry_in;
SELECT run_at > clock_timestamp() + interval '9 minutes' AS scheduled_by_retry_in FROM leaseq.jobs WHERE id = :a;
-- retry => false: dead at once, whatever the budget.
UPDATE leaseq.jobs SET run_at = clock_timestamp() WHERE id = :a;
SELECT lease_token AS a_token3 FROM leaseq.queue_claim('life', 'worker-1') \gset
SELECT leaseq.queue_fail(:a, :'a_token3', '{"error": "bad address"}', retry => false) AS permanent;
SELECT status, attempts, finished_at IS NOT NULL AS finished FROM leaseq.jobs WHERE id = :a;

-- queue_redrive: back to pending now, budget reset, history kept; the next attempt is numbered
-- after all of it.
SELECT leaseq.queue_redrive(:urgent) AS redrive_succeeded_job;
SELECT leaseq.queue_redrive(:a) AS redriven;
SELECT status, attempts, run_at <= clock_timestamp() AS due, finished_at IS NULL AS unfinished
  FROM leaseq.jobs WHERE id = :a;
SELECT attempt_no FROM leaseq.queue_claim('life', 'worker-3');
SELECT array_agg(attempt_no || ':' || outcome ORDER BY attempt_no) AS history
  FROM leaseq.attempts WHERE job_id = :a;

-- queue_cancel: a running job loses its lease; its worker is fenced from then on.
SELECT lease_token AS a_token4 FROM leaseq.jobs WHERE id = :a \gset
SELECT leaseq.queue_cancel(:a) AS cancelled;
SELECT leaseq.queue_complete(:a, :'a_token4') AS complete_after_cancel,
       leaseq.queue_renew(:a, :'a_token4') IS NULL AS renew_after_cancel_fenced,
       leaseq.queue_fail(:a, :'a_token4') IS NULL AS fail_after_cancel_fenced;
SELECT status, lease_token IS NULL AS lease_cleared FROM leaseq.jobs WHERE id = :a;
SELECT attempt_no, outcome FROM leaseq.attempts WHERE job_id = :a AND attempt_no = 4;
SELECT leaseq.queue_cancel(:a) AS cancel_again, leaseq.queue_cancel(:urgent) AS cancel_succeeded;
-- A pending (scheduled) job can be cancelled too, and is then never claimed.
SELECT leaseq.queue_cancel(:later) AS cancel_scheduled;

-- Dedupe: one live job per key; a finished job frees the key.
SELECT leaseq.queue_enqueue('life', '{"v": 1}', dedupe_key => 'report-42') AS d1 \gset
SELECT leaseq.queue_enqueue('life', '{"v": 2}', dedupe_key => 'report-42') = :d1 AS same_job;
SELECT payload FROM leaseq.jobs WHERE id = :d1;
SELECT leaseq.queue_cancel(:d1);
SELECT leaseq.queue_enqueue('life', '{"v": 3}', dedupe_key => 'report-42') <> :d1 AS new_job_after_finish;

-- Batch enqueue: one id per payload, in payload order.
CREATE TEMP TABLE batch AS
    SELECT ids.id, row_number() OVER () AS position
      FROM leaseq.queue_enqueue_batch('life', ARRAY['{"i": 1}', '{"i": 2}', '{"i": 3}']::jsonb[],
                                      priority => 100) AS ids (id);
SELECT array_agg(j.payload->>'i' ORDER BY b.position) AS payload_order,
       bool_and(j.priority = 100) AS priority_set
  FROM batch b JOIN leaseq.jobs j ON j.id = b.id;
SELECT count(*) AS empty_batch FROM leaseq.queue_enqueue_batch('life', ARRAY[]::jsonb[]);
SELECT array_agg(payload->>'i' ORDER BY priority DESC, job_id) AS claim_order
  FROM leaseq.queue_claim('life', 'worker-4', batch => 3);

SELECT queue, pending, scheduled, running, expired_leases, succeeded, dead, cancelled
  FROM leaseq.queue_stats() WHERE queue = 'life';

-- Inspection: a queue's jobs (newest first, optionally by status), one job, its history.
SELECT array_agg(status::text ORDER BY job_id DESC) = (SELECT array_agg(status::text ORDER BY id DESC) FROM leaseq.jobs WHERE queue = 'life') AS jobs_newest_first
  FROM leaseq.queue_jobs('life');
SELECT count(*) AS cancelled_listed FROM leaseq.queue_jobs('life', status => 'cancelled');
SELECT count(*) AS at_most_max_rows FROM leaseq.queue_jobs('life', max_rows => 2);
SELECT queue, status, payload, result, attempts FROM leaseq.queue_job(:urgent);
SELECT attempt_no, worker, outcome, error, ended_at >= started_at AS ended FROM leaseq.queue_attempts(:a);
