-- Durable steps (src/lifecycle/step.rs): a handler records what it did under the fence, in the
-- transaction of the step's effect; a retry reads the steps and skips them. A stale worker
-- records nothing.
\pset pager off
SELECT leaseq.queue_create('steps', lease => '1 hour', backoff_base => '1 second',
                           backoff_cap => '1 second');
SELECT leaseq.queue_enqueue('steps', '{"order": 7}') AS id \gset
SELECT lease_token AS t1, attempt_no FROM leaseq.queue_claim('steps', 'w1') \gset

-- Attempt 1 charges the card (the effect and its step commit together), then fails.
CREATE TABLE step_effects (job_id bigint, what text);
BEGIN;
INSERT INTO step_effects VALUES (:id, 'charged');
SELECT leaseq.queue_step(:id, :'t1', 'charge', '{"charge_id": "ch_1"}') AS recorded;
COMMIT;
-- The first record stands: the same step again records nothing.
SELECT leaseq.queue_step(:id, :'t1', 'charge', '{"charge_id": "ch_2"}') AS recorded_again;
-- A step rolled back with its effect is not recorded.
BEGIN;
SELECT leaseq.queue_step(:id, :'t1', 'email') AS recorded;
ROLLBACK;
SELECT leaseq.queue_fail(:id, :'t1', '{"error": "mailer down"}') AS failed;

-- Its token is stale now: a step with it changes nothing.
SELECT leaseq.queue_step(:id, :'t1', 'email') AS stale_recorded;
SELECT count(*) AS steps_after_stale FROM leaseq.job_steps WHERE job_id = :id;

-- Attempt 2 reads what attempt 1 did, skips the charge, and records the email.
UPDATE leaseq.jobs SET run_at = clock_timestamp() WHERE id = :id;
SELECT lease_token AS t2, attempt_no FROM leaseq.queue_claim('steps', 'w2') \gset
SELECT :attempt_no AS second_attempt;
SELECT name, attempt_no, output FROM leaseq.queue_steps(:id);
SELECT leaseq.queue_step(:id, :'t2', 'email', NULL) AS recorded;
SELECT leaseq.queue_complete(:id, :'t2') AS completed;
SELECT name, attempt_no, output FROM leaseq.queue_steps(:id);
SELECT count(*) AS effects FROM step_effects WHERE job_id = :id;

-- A job without steps: no rows. Purged, a job's steps go with it.
SELECT count(*) AS none FROM leaseq.queue_steps(leaseq.queue_enqueue('steps', '{}'));
SELECT leaseq.queue_purge('steps', '0 seconds') >= 1 AS purged;
SELECT count(*) AS steps_left FROM leaseq.job_steps WHERE job_id = :id;
DROP TABLE step_effects;
