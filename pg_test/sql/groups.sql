-- Ordered groups, as a user sees them: the jobs of one group_key run at most group_concurrency at
-- a time and, with 1, in enqueue order (priority orders between groups, not inside one); a job
-- waiting out a retry or a snooze holds its group; success, dead and cancel give the room back.
\pset pager off

-- Who is where: a group's jobs by id, with their status.
CREATE FUNCTION pg_temp.groups(q text) RETURNS TABLE (group_key text, jobs text)
LANGUAGE sql AS $$
    SELECT coalesce(job.group_key, '(none)'),
           string_agg(format('%s:%s', job.payload->>'n', job.status), ' ' ORDER BY job.id)
      FROM leaseq.jobs AS job
     WHERE job.queue = q
     GROUP BY job.group_key
     ORDER BY 1
$$;

SELECT leaseq.queue_create('grp', max_attempts => 2, backoff_base => '1 hour',
                           backoff_cap => '1 hour');
-- a1 a2 a3 in group a, b1 in b, one job without a group; a4 has the highest priority of all.
SELECT count(leaseq.queue_enqueue('grp', jsonb_build_object('n', n), group_key => g,
                                  priority => p)) AS enqueued
  FROM (VALUES ('a1', 'a', 0), ('b1', 'b', 0), ('a2', 'a', 0), ('x1', NULL, 0), ('a3', 'a', 0),
               ('a4', 'a', 100)) AS given (n, g, p);
SELECT * FROM pg_temp.groups('grp');
SELECT queue, pending, waiting FROM leaseq.queue_stats() WHERE queue = 'grp';
SELECT queue, group_key FROM leaseq.groups WHERE queue = 'grp' ORDER BY 2;

-- A claim of ten takes one job per group and the ungrouped one: the waiting are not claimable.
SELECT payload->>'n' AS claimed FROM leaseq.queue_claim('grp', 'w', 10) ORDER BY 1;
SELECT count(*) AS nothing_more FROM leaseq.queue_claim('grp', 'w', 10);

-- a1 succeeds: a2 (the oldest waiting, not the high-priority a4) is admitted in that transaction.
SELECT leaseq.queue_complete(id, lease_token) FROM leaseq.jobs WHERE payload->>'n' = 'a1';
SELECT * FROM pg_temp.groups('grp');

-- a2 fails and waits out its backoff (an hour): it holds the group; a3 stays waiting.
SELECT leaseq.queue_fail(job_id, lease_token) AS a2_failed
  FROM leaseq.queue_claim('grp', 'w', 10) WHERE payload->>'n' = 'a2';
SELECT * FROM pg_temp.groups('grp');
SELECT count(*) AS claimable FROM leaseq.queue_claim('grp', 'w', 10);

-- It snoozes on its retry: still holding the group.
UPDATE leaseq.jobs SET run_at = clock_timestamp() WHERE payload->>'n' = 'a2';
SELECT leaseq.queue_snooze(job_id, lease_token, '1 hour') AS a2_snoozed
  FROM leaseq.queue_claim('grp', 'w', 10);
SELECT * FROM pg_temp.groups('grp');

-- Its last attempt fails: dead, and a3 is admitted.
UPDATE leaseq.jobs SET run_at = clock_timestamp() WHERE payload->>'n' = 'a2';
SELECT leaseq.queue_fail(job_id, lease_token) AS a2_failed_for_good
  FROM leaseq.queue_claim('grp', 'w', 10);
SELECT * FROM pg_temp.groups('grp');

-- a3 is cancelled while pending: a4 is admitted. Cancelling a waiting job admits nothing.
SELECT leaseq.queue_enqueue('grp', '{"n": "a5"}', group_key => 'a') AS a5 \gset
SELECT leaseq.queue_cancel(id) AS a3_cancelled FROM leaseq.jobs WHERE payload->>'n' = 'a3';
SELECT leaseq.queue_cancel(:a5) AS a5_cancelled;
SELECT * FROM pg_temp.groups('grp');

-- Redriven while its group is busy, dead a2 waits — ahead of jobs enqueued after it.
SELECT leaseq.queue_enqueue('grp', '{"n": "a6"}', group_key => 'a') IS NOT NULL AS a6;
SELECT leaseq.queue_redrive(id) AS a2_redriven FROM leaseq.jobs WHERE payload->>'n' = 'a2';
SELECT * FROM pg_temp.groups('grp');
SELECT leaseq.queue_complete(job_id, lease_token) AS a4_done
  FROM leaseq.queue_claim('grp', 'w', 10) WHERE payload->>'n' = 'a4';
SELECT * FROM pg_temp.groups('grp');

-- A lease that expires keeps the group (the job is retried); one that expires on the last
-- attempt sends the job dead and frees it.
SELECT payload->>'n' AS claimed FROM leaseq.queue_claim('grp', 'w', 10, lease => '1 hour')
 ORDER BY 1;
WITH ended AS (
    UPDATE leaseq.jobs SET lease_expires_at = clock_timestamp() - interval '1 second'
     WHERE payload->>'n' = 'a2'
    RETURNING queue, lease_expires_at, lease_token, id)
INSERT INTO leaseq.leases (queue, expires_at, token, job_ids)
SELECT queue, lease_expires_at, lease_token, ARRAY[id] FROM ended;
SELECT count(*) AS claimed FROM leaseq.queue_claim('grp', 'w', 10);
SELECT * FROM pg_temp.groups('grp');
UPDATE leaseq.jobs SET run_at = clock_timestamp() WHERE payload->>'n' = 'a2';
SELECT payload->>'n' AS claimed FROM leaseq.queue_claim('grp', 'w', 10);
WITH ended AS (
    UPDATE leaseq.jobs SET lease_expires_at = clock_timestamp() - interval '1 second'
     WHERE payload->>'n' = 'a2'
    RETURNING queue, lease_expires_at, lease_token, id)
INSERT INTO leaseq.leases (queue, expires_at, token, job_ids)
SELECT queue, lease_expires_at, lease_token, ARRAY[id] FROM ended;
SELECT payload->>'n' AS claimed_after_a2_went_dead FROM leaseq.queue_claim('grp', 'w', 10);
SELECT * FROM pg_temp.groups('grp');
SELECT attempt_no, outcome FROM leaseq.attempts
 WHERE job_id = (SELECT id FROM leaseq.jobs WHERE payload->>'n' = 'a2') ORDER BY 1;

-- A group whose last live job ends loses its row; the next job of the key makes it again.
SELECT leaseq.queue_complete(id, lease_token) AS b1_done FROM leaseq.jobs WHERE payload->>'n' = 'b1';
SELECT group_key FROM leaseq.groups WHERE queue = 'grp' ORDER BY 1;
SELECT group_key, status FROM leaseq.queue_job(leaseq.queue_enqueue('grp', '{"n": "b2"}', group_key => 'b'));

-- group_concurrency 2, a batch: the first two of a group are admitted, in payload order.
SELECT leaseq.queue_create('grp2', group_concurrency => 2);
SELECT count(*) AS enqueued FROM leaseq.queue_enqueue_batch('grp2',
    ARRAY(SELECT jsonb_build_object('n', 'c' || n) FROM generate_series(1, 5) AS n),
    group_keys => ARRAY['c', 'c', NULL, 'c', 'c']);
SELECT * FROM pg_temp.groups('grp2');
SELECT payload->>'n' AS claimed FROM leaseq.queue_claim('grp2', 'w', 10) ORDER BY 1;
-- Raised to 3: one more is admitted at once. Lowered to 1: the admitted keep their place, and
-- nobody else is admitted until the group is under it.
SELECT leaseq.queue_create('grp2', group_concurrency => 3);
SELECT * FROM pg_temp.groups('grp2');
SELECT leaseq.queue_create('grp2', group_concurrency => 1);
SELECT leaseq.queue_complete(job_id, lease_token) AS one_done
  FROM leaseq.queue_claim('grp2', 'w', 10) WHERE payload->>'n' = 'c4';
SELECT * FROM pg_temp.groups('grp2');
SELECT leaseq.queue_complete(id, lease_token) AS all_running_done
  FROM leaseq.jobs WHERE queue = 'grp2' AND status = 'running' ORDER BY id;
SELECT * FROM pg_temp.groups('grp2');

-- Dedupe keys work across a group's waiting jobs: a duplicate of a waiting job is that job, and
-- replace gives it the new payload.
SELECT leaseq.queue_create('grp3');
SELECT leaseq.queue_enqueue('grp3', '{"n": "d1"}', group_key => 'd') IS NOT NULL AS d1;
SELECT leaseq.queue_enqueue('grp3', '{"n": "d2"}', group_key => 'd', dedupe_key => 'k') AS d2 \gset
SELECT leaseq.queue_enqueue('grp3', '{"n": "d3"}', group_key => 'd', dedupe_key => 'k') = :d2
       AS same_job;
SELECT leaseq.queue_enqueue('grp3', '{"n": "d2b"}', group_key => 'd', dedupe_key => 'k',
                            on_duplicate => 'replace') = :d2 AS replaced;
SELECT * FROM pg_temp.groups('grp3');

-- The other ways to end: snoozed once too often, completed and failed for good by the batch
-- functions; each admits its group's next job.
SELECT leaseq.queue_create('grp4', max_snoozes => 0);
SELECT count(*) AS enqueued FROM leaseq.queue_enqueue_batch('grp4',
    ARRAY(SELECT jsonb_build_object('n', g || n) FROM unnest(ARRAY['s', 'c', 'f']) AS g,
                                                     generate_series(1, 2) AS n ORDER BY n, g),
    group_keys => ARRAY(SELECT g FROM unnest(ARRAY['s', 'c', 'f']) AS g,
                                      generate_series(1, 2) AS n ORDER BY n, g));
SELECT payload->>'n' AS claimed FROM leaseq.queue_claim('grp4', 'w', 10) ORDER BY 1;
SELECT leaseq.queue_snooze(id, lease_token, '0') AS s1 FROM leaseq.jobs WHERE payload->>'n' = 's1';
SELECT count(*) FILTER (WHERE done) AS completed
  FROM leaseq.queue_complete_batch(
           ARRAY(SELECT id FROM leaseq.jobs WHERE payload->>'n' = 'c1'),
           ARRAY(SELECT lease_token FROM leaseq.jobs WHERE payload->>'n' = 'c1')) AS done;
SELECT status FROM leaseq.queue_fail_batch(
           ARRAY(SELECT id FROM leaseq.jobs WHERE payload->>'n' = 'f1'),
           ARRAY(SELECT lease_token FROM leaseq.jobs WHERE payload->>'n' = 'f1'),
           retry => false) AS status;
SELECT * FROM pg_temp.groups('grp4');
