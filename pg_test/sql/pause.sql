-- queue_pause and queue_resume, as an operator sees them: a paused queue's claims return nothing
-- while its enqueues still commit and its running jobs still finish; resuming wakes its workers;
-- the metrics say which queues are paused.
\pset pager off

SELECT leaseq.queue_create('life_pause');
SELECT leaseq.queue_create('life_pause_other');
SELECT leaseq.queue_enqueue('life_pause', '{"n": 1}') AS first \gset
SELECT leaseq.queue_enqueue('life_pause', '{"n": 2}') AS second \gset
SELECT leaseq.queue_enqueue('life_pause_other', '{"n": 3}') > 0 AS other_enqueued;
SELECT job_id = :first AS claimed_first, lease_token AS token
  FROM leaseq.queue_claim('life_pause', 'w1') \gset

-- Paused: true the first time, false when already paused. Claims return nothing; the other
-- queue is untouched; an enqueue commits; the running job still completes.
SELECT leaseq.queue_pause('life_pause') AS paused, leaseq.queue_pause('life_pause') AS again;
SELECT count(*) AS claimed_while_paused FROM leaseq.queue_claim('life_pause', 'w2', 10);
SELECT payload->>'n' AS other_queue_claims FROM leaseq.queue_claim('life_pause_other', 'w2');
SELECT leaseq.queue_enqueue('life_pause', '{"n": 4}') > 0 AS enqueued_while_paused;
SELECT leaseq.queue_complete(:first, :'token') AS completed_while_paused;
SELECT status, count(*) FROM leaseq.jobs WHERE queue = 'life_pause' GROUP BY status ORDER BY status;
SELECT line FROM unnest(string_to_array(leaseq.metrics(), E'\n')) AS line
 WHERE line LIKE 'leaseq_queue_paused{queue="life_pause%' ORDER BY line;
-- Creating the queue again keeps it paused.
SELECT leaseq.queue_create('life_pause', max_attempts => 7);
SELECT count(*) AS claimed_after_create FROM leaseq.queue_claim('life_pause', 'w2', 10);

-- Resumed (its channel hears it: pg_test/specs/pause_reaches_other_sessions.spec): the jobs enqueued
-- meanwhile are claimed in order.
SELECT leaseq.queue_resume('life_pause') AS resumed, leaseq.queue_resume('life_pause') AS again;
SELECT payload->>'n' AS n FROM leaseq.queue_claim('life_pause', 'w2', 10);
SELECT line FROM unnest(string_to_array(leaseq.metrics(), E'\n')) AS line
 WHERE line LIKE 'leaseq_queue_paused{queue="life_pause"}%';

-- Paused in a transaction that rolls back: still running once it has.
BEGIN;
SELECT leaseq.queue_pause('life_pause');
SELECT count(*) AS claimed_in_the_pausing_transaction FROM leaseq.queue_claim('life_pause', 'w3');
ROLLBACK;
SELECT leaseq.queue_enqueue('life_pause', '{"n": 5}') > 0 AS enqueued;
SELECT payload->>'n' AS claimed_after_rollback FROM leaseq.queue_claim('life_pause', 'w3');
-- (Bad input, and that it changes nothing: errors.sql.)
SELECT name, paused FROM leaseq.queues WHERE name LIKE 'life_pause%' ORDER BY name;
