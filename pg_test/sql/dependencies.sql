-- Dependencies (src/lifecycle/depend.rs): a job with parents is blocked, invisible to claims,
-- until the last parent succeeds — and becomes pending in that parent's own transaction. A
-- parent that fails applies its children's on_parent_failure; redriving it takes it back.
\pset pager off
SELECT leaseq.queue_create('dep_a', max_attempts => 1);
SELECT leaseq.queue_create('dep_b', max_attempts => 1);

-- Fan-in across queues: c waits for a (dep_a) and b (dep_b).
SELECT leaseq.queue_enqueue('dep_a', '{"n": "a"}') AS a \gset
SELECT leaseq.queue_enqueue('dep_a', '{"n": "b"}') AS b \gset
SELECT leaseq.queue_enqueue('dep_b', '{"n": "c"}', depends_on => ARRAY[:a, :b]) AS c \gset
SELECT status FROM leaseq.jobs WHERE id = :c;
SELECT count(*) AS claimed_while_blocked FROM leaseq.queue_claim('dep_b', 'w');
SELECT job_id = :a AS claimed_a, lease_token AS ta FROM leaseq.queue_claim('dep_a', 'w') \gset
SELECT job_id = :b AS claimed_b, lease_token AS tb FROM leaseq.queue_claim('dep_a', 'w') \gset
SELECT leaseq.queue_complete(:a, :'ta', '{"out": 1}') AS a_completed;
SELECT status AS after_first_parent FROM leaseq.jobs WHERE id = :c;
-- The last parent's completion releases the child in its own transaction: rolled back, the
-- child is blocked again.
BEGIN;
SELECT leaseq.queue_complete(:b, :'tb', '{"out": 2}') AS b_completed;
SELECT status AS inside_the_completing_transaction FROM leaseq.jobs WHERE id = :c;
ROLLBACK;
SELECT status AS after_rollback FROM leaseq.jobs WHERE id = :c;
SELECT leaseq.queue_complete(:b, :'tb', '{"out": 2}') AS b_completed;
SELECT status AS after_last_parent FROM leaseq.jobs WHERE id = :c;
-- The child's handler reads its parents' results.
SELECT parent_id = :a AS is_a, queue, status, result FROM leaseq.queue_parents(:c);
SELECT job_id = :c AS claimed_c FROM leaseq.queue_claim('dep_b', 'w');
SELECT child_id = :c AS is_c, queue, status FROM leaseq.queue_children(:a);

-- A stale worker cannot release a child: its completion is fenced, the child stays blocked.
SELECT leaseq.queue_enqueue('dep_a', '{"n": "p"}') AS p \gset
SELECT leaseq.queue_enqueue('dep_b', '{"n": "q"}', depends_on => ARRAY[:p]) AS q \gset
SELECT lease_token AS tp FROM leaseq.queue_claim('dep_a', 'w') \gset
SELECT leaseq.queue_complete(:p, gen_random_uuid()) AS stale_completed;
SELECT status AS child_of_stale FROM leaseq.jobs WHERE id = :q;
SELECT leaseq.queue_complete(:p, :'tp') AS completed;
SELECT status AS child_of_current FROM leaseq.jobs WHERE id = :q;

-- A parent already final when its child is enqueued counts at once.
SELECT leaseq.queue_enqueue('dep_b', '{"n": "late"}', depends_on => ARRAY[:a]) AS late \gset
SELECT status AS child_of_succeeded_parent FROM leaseq.jobs WHERE id = :late;

-- Fan-out in one call: every job of the batch waits for the same parents.
SELECT leaseq.queue_enqueue('dep_a', '{"n": "root"}') AS root \gset
SELECT array_agg(id ORDER BY id) AS fan FROM leaseq.queue_enqueue_batch('dep_b',
       ARRAY['{"i": 1}', '{"i": 2}', '{"i": 3}']::jsonb[], depends_on => ARRAY[:root]) AS id \gset
SELECT array_agg(status ORDER BY id) AS fan_blocked FROM leaseq.jobs WHERE id = ANY (:'fan');
SELECT lease_token AS troot FROM leaseq.queue_claim('dep_a', 'w') \gset
SELECT leaseq.queue_complete_batch(ARRAY[:root], ARRAY[:'troot']::uuid[]) AS root_completed;
SELECT array_agg(status ORDER BY id) AS fan_released FROM leaseq.jobs WHERE id = ANY (:'fan');
SELECT count(*) FILTER (WHERE job_id = ANY (:'fan')) AS fan_claimed
  FROM leaseq.queue_claim('dep_b', 'w', 10);

-- Each job its own parents (depends_on_each): one waits for both, one for the first only, one
-- for nothing (pending at once); the first parent's success releases the second job alone.
SELECT leaseq.queue_enqueue('dep_a', '{"n": "x"}') AS x \gset
SELECT leaseq.queue_enqueue('dep_a', '{"n": "y"}') AS y \gset
SELECT array_agg(id ORDER BY id) AS own FROM leaseq.queue_enqueue_batch('dep_b',
       ARRAY['{"i": "xy"}', '{"i": "x"}', '{"i": "free"}']::jsonb[],
       depends_on_each => jsonb_build_array(jsonb_build_array(:x, :y), jsonb_build_array(:x),
                                            '[]'::jsonb)) AS id \gset
SELECT array_agg(status ORDER BY id) AS own_statuses,
       (SELECT array_agg(array_length(array(SELECT parent_id FROM leaseq.queue_parents(j.id)), 1)
                         ORDER BY j.id) FROM leaseq.jobs j WHERE j.id = ANY (:'own')) AS parents_each
  FROM leaseq.jobs WHERE id = ANY (:'own');
SELECT leaseq.queue_complete(job_id, lease_token) AS x_completed
  FROM leaseq.queue_claim('dep_a', 'w') WHERE job_id = :x;
SELECT array_agg(status ORDER BY id) AS after_x FROM leaseq.jobs WHERE id = ANY (:'own');
SELECT leaseq.queue_complete(job_id, lease_token) AS y_completed
  FROM leaseq.queue_claim('dep_a', 'w') WHERE job_id = :y;
SELECT array_agg(status ORDER BY id) AS after_y FROM leaseq.jobs WHERE id = ANY (:'own');

-- on_parent_failure => 'cancel' (the default): a parent that goes dead cancels its child and,
-- through it, the grandchild; each names the failed parent.
SELECT leaseq.queue_enqueue('dep_a', '{"n": "doomed"}') AS doomed \gset
SELECT leaseq.queue_enqueue('dep_b', '{"n": "child"}', depends_on => ARRAY[:doomed]) AS child \gset
SELECT leaseq.queue_enqueue('dep_b', '{"n": "grandchild"}', depends_on => ARRAY[:child],
                            on_parent_failure => 'dead') AS grandchild \gset
SELECT lease_token AS td FROM leaseq.queue_claim('dep_a', 'w') \gset
SELECT leaseq.queue_fail(:doomed, :'td', '{"error": "boom"}') AS parent_status;
SELECT id = :child AS is_child, status, last_error->'failed_parents' = jsonb_build_array(:doomed)
       AS names_parent, finished_at IS NOT NULL AS finished
  FROM leaseq.jobs WHERE id IN (:child) ;
SELECT status AS grandchild_status, last_error->'failed_parents' = jsonb_build_array(:child)
       AS names_child FROM leaseq.jobs WHERE id = :grandchild;

-- on_parent_failure => 'dead': the child goes dead; redriving the parent brings it back to
-- blocked, and the parent's success then releases it.
SELECT leaseq.queue_enqueue('dep_a', '{"n": "flaky"}') AS flaky \gset
SELECT leaseq.queue_enqueue('dep_b', '{"n": "waits"}', depends_on => ARRAY[:flaky],
                            on_parent_failure => 'dead') AS waits \gset
SELECT lease_token AS tf FROM leaseq.queue_claim('dep_a', 'w') \gset
SELECT leaseq.queue_fail(:flaky, :'tf') AS parent_status;
SELECT status AS child_after_parent_dead FROM leaseq.jobs WHERE id = :waits;
SELECT leaseq.queue_redrive(:flaky) AS parent_redriven;
SELECT status AS child_after_parent_redriven, finished_at IS NULL AS live
  FROM leaseq.jobs WHERE id = :waits;
SELECT lease_token AS tf2 FROM leaseq.queue_claim('dep_a', 'w') \gset
SELECT leaseq.queue_complete(:flaky, :'tf2') AS parent_completed;
SELECT status AS child_after_parent_succeeded FROM leaseq.jobs WHERE id = :waits;

-- Redriving that child while its parent is still dead makes it blocked, not runnable: it runs
-- once the parent is redriven and succeeds.
SELECT leaseq.queue_create('dep_validate'), leaseq.queue_create('dep_redriven');
SELECT leaseq.queue_enqueue('dep_validate', '{"n": "validate"}') AS validate \gset
SELECT leaseq.queue_enqueue('dep_redriven', '{"n": "charge"}', depends_on => ARRAY[:validate],
                            on_parent_failure => 'dead') AS charge \gset
SELECT lease_token AS tv FROM leaseq.queue_claim('dep_validate', 'w') \gset
SELECT leaseq.queue_fail(:validate, :'tv', retry => false) AS validate_failed;
SELECT leaseq.queue_redrive(:charge) AS child_redriven;
SELECT status AS child_after_its_redrive FROM leaseq.jobs WHERE id = :charge;
SELECT count(*) AS claimed_while_parent_dead FROM leaseq.queue_claim('dep_redriven', 'w');
SELECT leaseq.queue_redrive(:validate) AS parent_redriven;
SELECT lease_token AS tv2 FROM leaseq.queue_claim('dep_validate', 'w') \gset
SELECT leaseq.queue_complete(:validate, :'tv2') AS parent_completed;
SELECT job_id = :charge AS claimed_after_parent_succeeded
  FROM leaseq.queue_claim('dep_redriven', 'w');

-- on_parent_failure => 'run': a cancelled parent counts as final; the child runs once the
-- other parent succeeds, and reads which parent failed.
SELECT leaseq.queue_enqueue('dep_a', '{"n": "cancelled"}') AS gone \gset
SELECT leaseq.queue_enqueue('dep_a', '{"n": "fine"}') AS fine \gset
SELECT leaseq.queue_enqueue('dep_b', '{"n": "anyway"}', depends_on => ARRAY[:gone, :fine],
                            on_parent_failure => 'run') AS anyway \gset
SELECT leaseq.queue_cancel(:gone) AS parent_cancelled;
SELECT status AS still_waiting_for_the_other FROM leaseq.jobs WHERE id = :anyway;
SELECT lease_token AS tfine FROM leaseq.queue_claim('dep_a', 'w') \gset
SELECT leaseq.queue_complete(:fine, :'tfine') AS other_completed;
SELECT status AS runs_anyway FROM leaseq.jobs WHERE id = :anyway;
SELECT parent_id = :gone AS is_cancelled_one, status FROM leaseq.queue_parents(:anyway);

-- A job whose parents already failed is decided at enqueue: cancelled, dead or pending.
SELECT leaseq.queue_enqueue('dep_b', '{}', depends_on => ARRAY[:gone]) AS c1,
       leaseq.queue_enqueue('dep_b', '{}', depends_on => ARRAY[:gone],
                            on_parent_failure => 'dead') AS c2,
       leaseq.queue_enqueue('dep_b', '{}', depends_on => ARRAY[:gone],
                            on_parent_failure => 'run') AS c3 \gset
SELECT array_agg(status ORDER BY id) AS decided_at_enqueue FROM leaseq.jobs
 WHERE id IN (:c1, :c2, :c3);

-- Cycles cannot be built: a parent must exist before its child, so no job can name itself or
-- a job enqueued after it: naming the id the child itself would get, or any later one, is
-- refused (42704, no such job yet), and nothing is inserted.
SELECT count(*) AS jobs_before FROM leaseq.jobs \gset
CREATE FUNCTION pg_temp.refusal(call text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE 'SELECT ' || call;
    RETURN 'NO ERROR';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ' ' || SQLERRM;
END $$;
SELECT regexp_replace(pg_temp.refusal($$leaseq.queue_enqueue('dep_b', '{}',
           depends_on => ARRAY[(SELECT last_value + 1 FROM leaseq.jobs_id_seq)])$$),
           'job \d+', 'job N') AS itself;
SELECT regexp_replace(pg_temp.refusal($$leaseq.queue_enqueue('dep_b', '{}',
           depends_on => ARRAY[(SELECT last_value + 100 FROM leaseq.jobs_id_seq)])$$),
           'job \d+', 'job N') AS later;
SELECT count(*) = :jobs_before AS nothing_inserted FROM leaseq.jobs;
SELECT count(*) AS edges_to_later_jobs FROM leaseq.job_parents WHERE parent_id >= child_id;

-- A cancelled blocked child is final: its parent's later success leaves it so.
SELECT leaseq.queue_enqueue('dep_a', '{"n": "slow"}') AS slow \gset
SELECT leaseq.queue_enqueue('dep_b', '{}', depends_on => ARRAY[:slow]) AS unwanted \gset
SELECT leaseq.queue_cancel(:unwanted) AS child_cancelled;
SELECT lease_token AS ts FROM leaseq.queue_claim('dep_a', 'w') \gset
SELECT leaseq.queue_complete(:slow, :'ts') AS parent_completed;
SELECT status AS cancelled_child FROM leaseq.jobs WHERE id = :unwanted;

SELECT * FROM leaseq.queue_parents(:root);
