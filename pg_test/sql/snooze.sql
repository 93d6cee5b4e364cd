-- queue_snooze, as a user sees it: "not ready yet" — the job comes back later, its attempt budget
-- kept, the attempt in history as 'snoozed', attempt numbers still growing; past max_snoozes it
-- goes dead; a stale token changes nothing.
\pset pager off

SELECT leaseq.queue_create('life_snooze', max_attempts => 2, max_snoozes => 2);
SELECT leaseq.queue_enqueue('life_snooze', '{"report": "2026-11-30"}') AS job \gset

-- Snoozed twice: pending again each time, due after the delay, the budget untouched.
SELECT job_id = :job AS claimed, attempt_no, lease_token AS token
  FROM leaseq.queue_claim('life_snooze', 'w1') \gset
SELECT leaseq.queue_snooze(:job, :'token', '1 hour') AS status;
SELECT status, attempts, snoozes, run_at > clock_timestamp() + interval '59 minutes' AS later
  FROM leaseq.queue_job(:job);
UPDATE leaseq.jobs SET run_at = clock_timestamp() WHERE id = :job;  -- the hour has passed
SELECT attempt_no, lease_token AS token FROM leaseq.queue_claim('life_snooze', 'w2') \gset
SELECT :attempt_no AS second_attempt_no, leaseq.queue_snooze(:job, :'token', '0') AS status;
SELECT status, attempts, snoozes FROM leaseq.queue_job(:job);

-- A stale token: nothing changes.
SELECT leaseq.queue_snooze(:job, :'token', '0') IS NULL AS fenced;

-- The third snooze is one too many: dead, with the reason.
SELECT attempt_no, lease_token AS token FROM leaseq.queue_claim('life_snooze', 'w3') \gset
SELECT :attempt_no AS third_attempt_no, leaseq.queue_snooze(:job, :'token', '0') AS status;
SELECT status, attempts, snoozes, last_error, finished_at IS NOT NULL AS finished
  FROM leaseq.queue_job(:job);
SELECT attempt_no, worker, outcome FROM leaseq.queue_attempts(:job);
SELECT most_snoozes FROM leaseq.queue_stats() WHERE queue = 'life_snooze';

-- A queue without a limit: five snoozes in a row, then the budget of two attempts is all there:
-- a first failure is retried, the second is final.
SELECT leaseq.queue_create('life_snooze_forever', max_attempts => 2, backoff_base => '1 ms',
                           backoff_cap => '1 ms');
SELECT leaseq.queue_enqueue('life_snooze_forever', '{}') AS forever \gset
SELECT leaseq.queue_snooze(job_id, lease_token, '0') FROM leaseq.queue_claim('life_snooze_forever', 'w');
SELECT leaseq.queue_snooze(job_id, lease_token, '0') FROM leaseq.queue_claim('life_snooze_forever', 'w');
SELECT leaseq.queue_snooze(job_id, lease_token, '0') FROM leaseq.queue_claim('life_snooze_forever', 'w');
SELECT leaseq.queue_snooze(job_id, lease_token, '0') FROM leaseq.queue_claim('life_snooze_forever', 'w');
SELECT leaseq.queue_snooze(job_id, lease_token, '0') FROM leaseq.queue_claim('life_snooze_forever', 'w');
SELECT status, attempts, snoozes FROM leaseq.queue_job(:forever);
SELECT most_snoozes FROM leaseq.queue_stats() WHERE queue = 'life_snooze_forever';
SELECT leaseq.queue_fail(job_id, lease_token) AS first_failure
  FROM leaseq.queue_claim('life_snooze_forever', 'w');
UPDATE leaseq.jobs SET run_at = clock_timestamp() WHERE id = :forever;
SELECT attempt_no AS seventh_attempt_no, leaseq.queue_fail(job_id, lease_token) AS second_failure
  FROM leaseq.queue_claim('life_snooze_forever', 'w');
SELECT string_agg(outcome::text, ',' ORDER BY attempt_no) AS history
  FROM leaseq.queue_attempts(:forever);
