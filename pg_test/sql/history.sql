-- Lease expiry and redrive, with time passing: attempt numbers come from history, so a redriven
-- job whose lease then expires never collides with its own past attempts. Time passes on the
-- test clock (leaseq.clock_offset, superusers only): each crash below moves it a second on
-- instead of waiting.
\pset pager off
-- Backoff of up to an hour: a reclaimed job is never due again within the same claim call
-- (that needs a 0 µs draw out of 3.6e9), so each step below is deterministic. The test moves
-- run_at by hand instead of waiting. Leases are an hour, except those of the workers that
-- "crash" (10 ms, then the clock a second on): only the leases meant to run out can.
SELECT leaseq.queue_create('hist', lease => '1 hour', max_attempts => 2,
                           backoff_base => '1 hour', backoff_cap => '1 hour');
SELECT leaseq.queue_enqueue('hist', '{"job": "flaky"}') AS id \gset

-- Attempt 1: the worker dies (never finishes); its lease runs out.
SELECT job_id = :id AS claimed, attempt_no, lease_token AS t1 FROM leaseq.queue_claim('hist', 'crashed', lease => '10 milliseconds') \gset
SET leaseq.clock_offset = '1s';
SELECT expired_leases FROM leaseq.queue_stats() WHERE queue = 'hist';
SELECT leaseq.queue_renew(:id, :'t1') IS NULL AS expired_lease_not_revived;
SELECT leaseq.queue_complete(:id, :'t1') AS expired_lease_cannot_complete;
SELECT leaseq.queue_fail(:id, :'t1') IS NULL AS expired_lease_cannot_fail;
-- The next claim reclaims it: attempt 1 closes lease_expired at the lease's end, and the job is
-- pending again, after its backoff.
SELECT count(*) AS claimed_while_reclaiming FROM leaseq.queue_claim('hist', 'w');
SELECT status, attempts, last_error->>'error' AS last_error,
       run_at > clock_timestamp()
       AND run_at <= clock_timestamp() + current_setting('leaseq.clock_offset')::interval
                      + interval '1 hour' AS backed_off
  FROM leaseq.jobs WHERE id = :id;
SELECT a.attempt_no, a.outcome, a.ended_at = (a.error->>'lease_expires_at')::timestamptz AS ended_at_lease_end
  FROM leaseq.attempts a WHERE job_id = :id;
UPDATE leaseq.jobs SET run_at = clock_timestamp() WHERE id = :id;

-- Attempt 2 expires as well: the budget (2) is spent, so the reclaim makes it dead.
SELECT attempt_no, lease_token AS t2 FROM leaseq.queue_claim('hist', 'crashed-again', lease => '10 milliseconds') \gset
SELECT :attempt_no AS second_attempt;
SET leaseq.clock_offset = '2s';
SELECT count(*) AS claimed FROM leaseq.queue_claim('hist', 'w');
SELECT status, attempts, finished_at IS NOT NULL AS finished FROM leaseq.jobs WHERE id = :id;

-- Redrive resets the budget; the next attempts are 3 and 4, and attempt 3's lease expiring
-- again writes attempt 3 as lease_expired (no UNIQUE violation on (job_id, attempt_no)).
SELECT leaseq.queue_redrive(:id) AS redriven;
SELECT attempt_no, lease_token AS t3 FROM leaseq.queue_claim('hist', 'after-redrive', lease => '10 milliseconds') \gset
SELECT :attempt_no AS third_attempt;
SET leaseq.clock_offset = '3s';
SELECT count(*) AS claimed FROM leaseq.queue_claim('hist', 'w');
UPDATE leaseq.jobs SET run_at = clock_timestamp() WHERE id = :id;
SELECT attempt_no, lease_token AS t4 FROM leaseq.queue_claim('hist', 'finisher') \gset
SELECT :attempt_no AS fourth_attempt;
-- Every older token is fenced; only the current one completes.
SELECT leaseq.queue_complete(:id, :'t1') OR leaseq.queue_complete(:id, :'t2')
       OR leaseq.queue_complete(:id, :'t3') AS any_stale_token_completed;
SELECT leaseq.queue_complete(:id, :'t4', '{"done": true}') AS completed;
SELECT array_agg(attempt_no || ':' || outcome ORDER BY attempt_no) AS history,
       bool_and(ended_at IS NOT NULL) AS all_closed
  FROM leaseq.attempts WHERE job_id = :id;
-- No two attempts' lease windows overlap.
SELECT count(*) AS overlapping
  FROM leaseq.attempts a JOIN leaseq.attempts b
    ON a.job_id = b.job_id AND a.attempt_no < b.attempt_no AND b.started_at < a.ended_at
 WHERE a.job_id = :id;

-- redrive_all takes a queue's dead jobs, and only those.
SELECT leaseq.queue_enqueue('hist', '{"job": "poison"}', max_attempts => 1) AS p \gset
SELECT lease_token AS pt FROM leaseq.queue_claim('hist', 'w') \gset
SELECT leaseq.queue_fail(:p, :'pt', '{"error": "boom"}');
SELECT leaseq.queue_redrive_all('hist') AS redriven, leaseq.queue_redrive_all('hist') AS again;
SELECT status, attempts FROM leaseq.jobs WHERE id = :p;
SELECT attempt_no FROM leaseq.queue_claim('hist', 'w');
