-- Who may do what. Every function is called as each kind of role, on a queue without grants
-- ("open") and on one with grants ("closed"), and each cell of the matrix says what happened:
--   ok[:answer]  the call ran (then it is rolled back, so every cell starts from the same rows)
--   schema       42501, the role may not use schema leaseq (only PUBLIC's rights)
--   fn           42501, the role may not execute the function (no group role grants it)
--   table        42501, the role holds no right on the table, view or sequence
--   queue        42501, the queue's grants do not cover the call (src/core/access.rs); for a
--                job named by id, the refusal names the job, not its queue
--   a SQLSTATE   anything else, which should not happen
-- A cell that left any row of any leaseq table changed says CHANGED. Then: direct writes to the
-- tables, by every group role and by a role that is only in PUBLIC; and rows the worker role
-- writes with a true queue_complete commit with it.
\pset pager off
SET client_min_messages = warning;

-- Roles are cluster-wide: made once, their memberships set again on every run.
DO $$
DECLARE
    name text;
BEGIN
    FOREACH name IN ARRAY ARRAY['priv_nobody', 'priv_outsider', 'priv_producer', 'priv_worker', 'priv_observer',
                                'priv_admin', 'priv_team', 'priv_team_member', 'priv_lead'] LOOP
        IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = name) THEN
            EXECUTE format('CREATE ROLE %I NOLOGIN', name);
        END IF;
    END LOOP;
END $$;
-- An outsider: only PUBLIC's rights, and the use of the schema (0.1.0's README granted that).
GRANT USAGE ON SCHEMA leaseq TO priv_outsider;
GRANT leaseq_producer TO priv_producer;
GRANT leaseq_worker TO priv_worker;
GRANT leaseq_observer TO priv_observer;
GRANT leaseq_admin TO priv_admin;
-- A team: worker and observer, with grants on the closed queue; a member of the team holds them
-- through membership only.
GRANT leaseq_worker, leaseq_observer TO priv_team;
GRANT priv_team TO priv_team_member;
-- A team lead: worker and observer too, with `admin` on the closed queue (it covers everything).
GRANT leaseq_worker, leaseq_observer TO priv_lead;

SELECT leaseq.queue_create('priv_open');
SELECT leaseq.queue_create('priv_closed');
SELECT leaseq.queue_grant('priv_closed', 'priv_team', 'work') AS granted,
       leaseq.queue_grant('priv_closed', 'priv_team', 'observe') AS granted,
       leaseq.queue_grant('priv_closed', 'priv_team', 'work') AS granted_twice,
       leaseq.queue_grant('priv_closed', 'priv_lead', 'admin') AS granted;
-- The rights of the roles in the matrix are all they hold: none on the tables.
SELECT count(*) AS direct_table_rights
  FROM pg_class AS rel, aclexplode(rel.relacl) AS acl
 WHERE rel.relnamespace = 'leaseq'::regnamespace AND acl.grantee <> rel.relowner;
SELECT rel.relname, rel.relowner::regrole AS owner
  FROM pg_class AS rel
 WHERE rel.relnamespace = 'leaseq'::regnamespace AND rel.relkind IN ('r', 'v', 'S')
 ORDER BY 1;
SELECT p.oid::regprocedure AS executable_by_public
  FROM pg_proc AS p
 WHERE p.pronamespace = 'leaseq'::regnamespace
   AND has_function_privilege('public', p.oid, 'EXECUTE');

-- In each queue: a running job (its token kept), a pending one (due) and a dead one.
CREATE TEMP TABLE scope (name text, queue text, running bigint, token uuid, pending bigint,
                         dead bigint);
INSERT INTO scope (name, queue) VALUES ('open', 'priv_open'), ('closed', 'priv_closed');
UPDATE scope SET dead = leaseq.queue_enqueue(queue, '{"will": "die"}', priority => 3,
                                             max_attempts => 1);
SELECT count(*) AS dead FROM scope,
       LATERAL leaseq.queue_claim(scope.queue, 'setup') AS claimed,
       LATERAL leaseq.queue_fail(claimed.job_id, claimed.lease_token, '{}') AS failed
 WHERE failed = 'dead';
UPDATE scope SET running = leaseq.queue_enqueue(queue, '{"will": "run"}', priority => 2);
UPDATE scope SET token = (SELECT claimed.lease_token
                            FROM leaseq.queue_claim(scope.queue, 'setup') AS claimed
                           WHERE claimed.job_id = scope.running);
UPDATE scope SET pending = leaseq.queue_enqueue(queue, '{"will": "wait"}', priority => 1);
SELECT leaseq.queue_schedule('sched_' || queue, queue, '0 0 1 1 *', '{}') IS NOT NULL AS scheduled
  FROM scope ORDER BY name;
SELECT name, running IS NOT NULL AND token IS NOT NULL AND pending IS NOT NULL
             AND dead IS NOT NULL AS ready
  FROM scope ORDER BY name;

-- Every row of every leaseq table (read with the rights of the test's superuser).
CREATE FUNCTION pg_temp.fingerprint() RETURNS text LANGUAGE sql SECURITY DEFINER AS $$
    SELECT md5(concat_ws('|',
        (SELECT string_agg(q::text, ',' ORDER BY name) FROM leaseq.queues q),
        (SELECT string_agg(j::text, ',' ORDER BY id) FROM leaseq.jobs j),
        (SELECT string_agg(a::text, ',' ORDER BY job_id, attempt_no) FROM leaseq.closed_attempts a),
        (SELECT string_agg(g::text, ',' ORDER BY queue, role::text, privilege)
           FROM leaseq.queue_grants g),
        (SELECT string_agg(s::text, ',' ORDER BY name) FROM leaseq.schedules s)))
$$;

-- Runs `call` (a query of one value) as `who`, answers as the legend above says, and leaves
-- nothing behind: the call runs in a subtransaction that is always rolled back.
CREATE FUNCTION pg_temp.try_as(who text, call text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    before text := pg_temp.fingerprint();
    answer text;
    outcome text;
BEGIN
    BEGIN
        EXECUTE format('SET LOCAL ROLE %I', who);
        EXECUTE call INTO answer;
        RAISE EXCEPTION USING ERRCODE = 'LQ000', MESSAGE = coalesce(answer, 'null');
    EXCEPTION WHEN OTHERS THEN
        outcome := CASE
            WHEN SQLSTATE = 'LQ000' THEN 'ok' || CASE WHEN SQLERRM = '' THEN '' ELSE ':' || SQLERRM END
            WHEN SQLSTATE = '42501' AND SQLERRM LIKE 'permission denied for schema leaseq' THEN 'schema'
            WHEN SQLSTATE = '42501' AND SQLERRM ~ '^permission denied for (function|procedure) ' THEN 'fn'
            -- Allowed, and refused only for running inside this function's transaction: it
            -- must be CALLed on its own (pg_test/sql/await.sql).
            WHEN SQLSTATE = '25001' AND SQLERRM LIKE 'leaseq.queue_await must be called by CALL on its own%' THEN 'ok:own'
            WHEN SQLSTATE = '42501'
                 AND SQLERRM ~ '^permission denied for (table|view|sequence) ' THEN 'table'
            WHEN SQLSTATE = '42501' AND (SQLERRM LIKE '%lacks privilege%on queue%'
                                         OR SQLERRM LIKE '%does not exist or is not visible to role%')
                 THEN 'queue'
            ELSE SQLSTATE || ' ' || SQLERRM END;
    END;
    IF pg_temp.fingerprint() <> before THEN
        outcome := outcome || ' CHANGED';
    END IF;
    RETURN outcome;
END $$;

-- %1$L queue, %2$s its running job, %3$L that job's token, %4$s a pending job, %5$s a dead job.
CREATE TEMP TABLE calls (n int, call text);
INSERT INTO calls VALUES
    (1, $$SELECT leaseq.queue_enqueue(%1$L, '{}') > 0$$),
    (2, $$SELECT count(*) FROM leaseq.queue_enqueue_batch(%1$L, ARRAY['{}', '{}']::jsonb[])$$),
    (3, $$SELECT count(*) FROM leaseq.queue_claim(%1$L, 'matrix', 5)$$),
    (4, $$SELECT leaseq.queue_renew(%2$s, %3$L) IS NOT NULL$$),
    (5, $$SELECT count(*) FROM leaseq.queue_renew_batch(ARRAY[%2$s], ARRAY[%3$L]::uuid[]) AS r WHERE r IS NOT NULL$$),
    (6, $$SELECT leaseq.queue_complete(%2$s, %3$L)$$),
    (7, $$SELECT bool_and(done) FROM leaseq.queue_complete_batch(ARRAY[%2$s], ARRAY[%3$L]::uuid[]) AS done$$),
    (8, $$SELECT leaseq.queue_fail(%2$s, %3$L, '{}')$$),
    (9, $$SELECT string_agg(s::text, ',') FROM leaseq.queue_fail_batch(ARRAY[%2$s], ARRAY[%3$L]::uuid[]) AS s$$),
    (9, $$SELECT leaseq.queue_snooze(%2$s, %3$L, '1 minute')$$),
    (9, $$SELECT bool_and(h) FROM leaseq.queue_hand_back(ARRAY[%2$s], ARRAY[%3$L]::uuid[]) AS h$$),
    (10, $$SELECT coalesce(string_agg(queue, ',' ORDER BY queue), 'none') FROM leaseq.queue_stats() WHERE queue LIKE 'priv_%%'$$),
    (10, $$SELECT coalesce(string_agg(DISTINCT queue, ',' ORDER BY queue), 'none') FROM leaseq.queue_counts() WHERE queue LIKE 'priv_%%'$$),
    (11, $$SELECT count(*) FROM leaseq.queue_jobs(%1$L)$$),
    (12, $$SELECT count(*) FROM leaseq.queue_job(%2$s)$$),
    (13, $$SELECT count(*) FROM leaseq.queue_attempts(%5$s)$$),
    (14, $$SELECT 'created' FROM leaseq.queue_create(%1$L, max_attempts => 9)$$),
    (15, $$SELECT leaseq.queue_redrive(%5$s)$$),
    (16, $$SELECT leaseq.queue_redrive_all(%1$L)$$),
    (17, $$SELECT leaseq.queue_cancel(%4$s)$$),
    (18, $$SELECT leaseq.queue_purge(%1$L, '0 seconds')$$),
    (19, $$SELECT leaseq.queue_grant(%1$L, 'priv_nobody', 'observe')$$),
    (20, $$SELECT leaseq.queue_revoke(%1$L, 'priv_team', 'work')$$),
    (21, $$SELECT count(*) FROM leaseq.queue_grants() WHERE queue LIKE 'priv_%%'$$),
    (22, $$SELECT string_agg(DISTINCT m[1], ',') FROM regexp_matches(leaseq.metrics(), 'queue="(priv_[a-z]+)"', 'g') AS m$$),
    (23, $$SELECT leaseq.queue_schedule('new_' || %1$L, %1$L, '0 0 1 1 *', '{}') IS NOT NULL$$),
    (24, $$SELECT leaseq.queue_unschedule('sched_' || %1$L)$$),
    (25, $$SELECT string_agg(queue, ',' ORDER BY queue) FROM leaseq.queue_schedules() WHERE queue LIKE 'priv_%%'$$),
    (26, $$SELECT leaseq.queue_pause(%1$L)$$),
    (27, $$SELECT leaseq.queue_resume(%1$L)$$),
    (28, $$SELECT bool_and(r) FROM leaseq.queue_redrive_batch(ARRAY[%5$s]) AS r$$),
    (29, $$SELECT bool_and(c) FROM leaseq.queue_cancel_batch(ARRAY[%4$s]) AS c$$),
    (30, $$SELECT coalesce(string_agg(queue, ',' ORDER BY queue), 'none') FROM leaseq.queue_settings() WHERE queue LIKE 'priv_%%'$$),
    (31, $$SELECT coalesce(string_agg(queue, ',' ORDER BY queue), 'none') FROM leaseq.queue_overview() WHERE queue LIKE 'priv_%%'$$),
    (32, $$SELECT coalesce(string_agg(DISTINCT queue, ',' ORDER BY queue), 'none') FROM leaseq.queue_throughput(1) WHERE queue LIKE 'priv_%%'$$),
    (33, $$SELECT coalesce(string_agg(queue, ',' ORDER BY queue), 'none') FROM leaseq.queue_workers() WHERE queue LIKE 'priv_%%'$$),
    (34, $$SELECT count(*) FROM leaseq.queue_groups(%1$L)$$),
    (35, $$SELECT count(*) FROM leaseq.queue_jobs(status => 'running') WHERE queue = %1$L$$),
    (36, $$SELECT coalesce(string_agg(format('%%s:%%s%%s%%s%%s', queue, produce::int, work::int, observe::int, admin::int), ',' ORDER BY queue), 'none') FROM leaseq.queue_privileges() WHERE queue = %1$L$$),
    (37, $$SELECT leaseq.queue_index_payloads(false)$$),
    (38, $$SELECT count(*) FROM leaseq.queue_jobs(status => 'dead') WHERE queue = %1$L$$),
    (39, $$SELECT count(*) FROM leaseq.queue_jobs(payload_contains => '{}') WHERE queue = %1$L$$),
    (40, $$SELECT coalesce(leaseq.queue_result(%5$s)::text, 'none')$$),
    (41, $$SELECT count(*) FROM leaseq.queue_parents(%5$s)$$),
    (42, $$SELECT leaseq.queue_enqueue(%1$L, '{}', depends_on => ARRAY[%4$s]) > 0$$),
    (43, $$SELECT count(*) FROM leaseq.queue_flow(jsonb_build_array(jsonb_build_object('key', 'a', 'queue', %1$L)))$$),
    (44, $$SELECT jobs FROM leaseq.queue_flow_status(%4$s)$$),
    (45, $$SELECT count(*) FROM leaseq.queue_children(%4$s)$$),
    (46, $$SELECT leaseq.queue_step(%2$s, %3$L, 'matrix')$$),
    (47, $$SELECT count(*) FROM leaseq.queue_steps(%2$s)$$),
    (48, $$SELECT leaseq.queue_progress(%2$s, %3$L, '{"done": 1}')$$),
    (49, $$CALL leaseq.queue_await(ARRAY[%5$s]::bigint[], '0')$$);

SELECT substring(calls.call FROM 'leaseq\.(\w+)\(') AS function, scope.name AS queue,
       max(outcome) FILTER (WHERE who = 'priv_nobody') AS nobody,
       max(outcome) FILTER (WHERE who = 'priv_outsider') AS outsider,
       max(outcome) FILTER (WHERE who = 'priv_producer') AS producer,
       max(outcome) FILTER (WHERE who = 'priv_worker') AS worker,
       max(outcome) FILTER (WHERE who = 'priv_observer') AS observer,
       max(outcome) FILTER (WHERE who = 'priv_admin') AS admin,
       max(outcome) FILTER (WHERE who = 'priv_team') AS team,
       max(outcome) FILTER (WHERE who = 'priv_team_member') AS team_member,
       max(outcome) FILTER (WHERE who = 'priv_lead') AS lead
  FROM calls, scope,
       unnest(ARRAY['priv_nobody', 'priv_outsider', 'priv_producer', 'priv_worker', 'priv_observer', 'priv_admin',
                    'priv_team', 'priv_team_member', 'priv_lead']) AS who,
       LATERAL pg_temp.try_as(who, format(calls.call, scope.queue, scope.running, scope.token,
                                          scope.pending, scope.dead)) AS outcome
 GROUP BY calls.n, calls.call, scope.name
 ORDER BY calls.n, calls.call, scope.name DESC;

-- Direct reads and writes of every table, by every group role, by a role only in PUBLIC and by
-- one that may use the schema: all refused. (Observers read through the functions.)
CREATE TEMP TABLE statements (n int, statement text);
INSERT INTO statements VALUES
    (1, $$SELECT count(*) FROM leaseq.queues$$),
    (2, $$INSERT INTO leaseq.queues (name, lease, max_attempts, backoff_base, backoff_cap)
          VALUES ('forged', '1 hour', 1000, '1 second', '1 second') RETURNING 1$$),
    (3, $$UPDATE leaseq.queues SET max_attempts = 1000 RETURNING 1$$),
    (4, $$DELETE FROM leaseq.queues RETURNING 1$$),
    (5, $$SELECT count(*) FROM leaseq.jobs$$),
    (6, $$INSERT INTO leaseq.jobs (queue, run_at, max_attempts, payload)
          VALUES ('priv_open', now(), 1, '{}') RETURNING 1$$),
    (7, $$UPDATE leaseq.jobs SET status = 'succeeded' RETURNING 1$$),
    (8, $$DELETE FROM leaseq.jobs RETURNING 1$$),
    (9, $$SELECT count(*) FROM leaseq.closed_attempts$$),
    (10, $$INSERT INTO leaseq.closed_attempts
           VALUES (1, 99, gen_random_uuid(), 'forger', now(), now(), 'succeeded') RETURNING 1$$),
    (11, $$UPDATE leaseq.closed_attempts SET outcome = 'succeeded' RETURNING 1$$),
    (12, $$DELETE FROM leaseq.closed_attempts RETURNING 1$$),
    (13, $$SELECT count(*) FROM leaseq.queue_grants$$),
    (14, $$INSERT INTO leaseq.queue_grants (queue, role, privilege)
           VALUES ('priv_closed', current_user::regrole, 'admin') RETURNING 1$$),
    (15, $$UPDATE leaseq.queue_grants SET role = current_user::regrole RETURNING 1$$),
    (16, $$DELETE FROM leaseq.queue_grants RETURNING 1$$),
    (17, $$SELECT count(*) FROM leaseq.attempts$$),
    (17, $$UPDATE leaseq.schedules SET next_at = now() RETURNING 1$$),
    (18, $$SELECT nextval('leaseq.jobs_id_seq')$$),
    (18, $$SELECT count(*) FROM leaseq.job_parents$$),
    (18, $$UPDATE leaseq.job_parents SET on_parent_failure = 'run' RETURNING 1$$),
    (18, $$INSERT INTO leaseq.job_steps VALUES (1, 'forged', 1, NULL, now()) RETURNING 1$$);
INSERT INTO statements
SELECT 18 + row_number() OVER (ORDER BY t), format('TRUNCATE leaseq.%I', t)
  FROM unnest(ARRAY['queues', 'jobs', 'closed_attempts', 'queue_grants', 'schedules',
                    'job_parents', 'job_steps']) AS t;

SELECT regexp_replace(split_part(statement, ' ', 1) || ' ' ||
                      substring(statement FROM 'leaseq\.(\w+)'), '\s+', ' ') AS statement,
       max(outcome) FILTER (WHERE who = 'priv_nobody') AS nobody,
       max(outcome) FILTER (WHERE who = 'priv_outsider') AS outsider,
       max(outcome) FILTER (WHERE who = 'priv_producer') AS producer,
       max(outcome) FILTER (WHERE who = 'priv_worker') AS worker,
       max(outcome) FILTER (WHERE who = 'priv_observer') AS observer,
       max(outcome) FILTER (WHERE who = 'priv_admin') AS admin,
       max(outcome) FILTER (WHERE who = 'priv_team') AS team
  FROM statements,
       unnest(ARRAY['priv_nobody', 'priv_outsider', 'priv_producer', 'priv_worker', 'priv_observer', 'priv_admin',
                    'priv_team']) AS who,
       LATERAL pg_temp.try_as(who, statements.statement) AS outcome
 GROUP BY statements.n, statements.statement
 ORDER BY statements.n, statements.statement;

-- In-database exactly-once, for a role that is only a leaseq_worker: the rows it writes in the
-- transaction of a true queue_complete commit with it; with a false one it rolls back.
CREATE TABLE priv_effects (job_id bigint PRIMARY KEY);
GRANT INSERT ON priv_effects TO priv_worker;
SELECT leaseq.queue_enqueue('priv_open', '{"effect": 1}', priority => 9) AS effect_job \gset
SET ROLE priv_worker;
BEGIN;
SELECT job_id AS claimed, lease_token AS effect_token
  FROM leaseq.queue_claim('priv_open', 'effects', 1) \gset
INSERT INTO priv_effects VALUES (:claimed);
SELECT :claimed = :effect_job AS claimed_it,
       leaseq.queue_complete(:claimed, :'effect_token') AS completed;
COMMIT;
BEGIN;
INSERT INTO priv_effects VALUES (:claimed + 1000000);
SELECT leaseq.queue_complete(:claimed, :'effect_token') AS completed_again;
ROLLBACK;
RESET ROLE;
SELECT (SELECT array_agg(job_id) FROM priv_effects) = ARRAY[:effect_job::bigint] AS one_effect,
       (SELECT status FROM leaseq.jobs WHERE id = :effect_job) AS status;

-- A related job (a parent, a child, the rest of a flow) in a queue the caller may neither
-- observe nor work shows no queue, status or result, and is not counted: a role that may only
-- produce into the closed queue, or work an open one, does not read the closed queue's results
-- through a job of its own that depends on one of them.
SELECT leaseq.queue_enqueue('priv_closed', '{"secret": 1}', priority => 10) AS sec_job \gset
SELECT job_id = :sec_job AS claimed_it, leaseq.queue_complete(job_id, lease_token, '{"s": 1}') AS completed
  FROM leaseq.queue_claim('priv_closed', 'setup');
SELECT leaseq.queue_enqueue('priv_open', '{"public": 1}', priority => 10) AS pub_job \gset
SELECT job_id = :pub_job AS claimed_it, leaseq.queue_complete(job_id, lease_token, '{"o": 1}') AS completed
  FROM leaseq.queue_claim('priv_open', 'setup');
SELECT leaseq.queue_enqueue('priv_open', '{"child": 1}', depends_on => ARRAY[:sec_job, :pub_job])
       AS linked_child \gset
SELECT leaseq.queue_enqueue('priv_open', '{"root": 1}') AS flow_root \gset
SELECT leaseq.queue_enqueue('priv_open', '{}', depends_on => ARRAY[:flow_root]) IS NOT NULL AS open_child,
       leaseq.queue_enqueue('priv_closed', '{}', depends_on => ARRAY[:flow_root]) IS NOT NULL AS closed_child;
SET ROLE priv_worker;
SELECT parent_id = :sec_job AS closed_parent, queue, status, result
  FROM leaseq.queue_parents(:linked_child) ORDER BY 1;
SELECT queue, status FROM leaseq.queue_children(:flow_root) ORDER BY child_id;
RESET ROLE;
SET ROLE priv_observer;
SELECT jobs, pending FROM leaseq.queue_flow_status(:flow_root);
RESET ROLE;
-- The team observes and works the closed queue: it sees everything.
SET ROLE priv_team_member;
SELECT parent_id = :sec_job AS closed_parent, queue, status, result
  FROM leaseq.queue_parents(:linked_child) ORDER BY 1;
SELECT queue, status FROM leaseq.queue_children(:flow_root) ORDER BY child_id;
SELECT jobs, pending FROM leaseq.queue_flow_status(:flow_root);
RESET ROLE;

-- Linking a child to a parent needs observe or work on the parent's queue: produce there is
-- not enough (the link reads the parent, and its finish then settles the child). A role that
-- may only produce into the closed queue is refused; the team that works it may.
SELECT leaseq.queue_grant('priv_closed', 'priv_producer', 'produce') AS granted;
SELECT who, pg_temp.try_as(who, format($$SELECT leaseq.queue_enqueue('priv_open', '{}', depends_on => ARRAY[%s]) > 0$$, :sec_job))
       AS links_to_closed_parent
  FROM unnest(ARRAY['priv_producer', 'priv_team_member']) AS who;
SELECT leaseq.queue_revoke('priv_closed', 'priv_producer', 'produce') AS revoked;

-- Revoking a closed queue's last grants opens it again.
SELECT leaseq.queue_revoke('priv_closed', 'priv_team', 'work') AS revoked,
       leaseq.queue_revoke('priv_closed', 'priv_team', 'observe') AS revoked,
       leaseq.queue_revoke('priv_closed', 'priv_team', 'observe') AS revoked_twice;
SELECT pg_temp.try_as('priv_worker', $$SELECT count(*) FROM leaseq.queue_claim('priv_closed', 'w', 0 + 1)$$)
    AS worker_claims_reopened_queue;

-- The test clock (leaseq.clock_offset, src/core/clock.rs) is a superuser's: every other role's
-- attempt to move it is refused with 42501, and the clock the functions read stays the server's.
SELECT who, pg_temp.try_as(who, $$SELECT set_config('leaseq.clock_offset', '1h', true)$$)
       AS moves_the_clock
  FROM unnest(ARRAY['priv_outsider', 'priv_producer', 'priv_worker', 'priv_observer',
                    'priv_admin']) AS who;
SHOW leaseq.clock_offset;

-- So are the limits and the claim tuning that steers shared state: a producer may not raise the
-- payload limit for itself, nor a worker set what holds every session of a queue (and the
-- maintenance worker's reclaim) off the head of its index. GRANT SET ON PARAMETER hands one to a
-- role; the limit holds for every other.
SELECT setting, who,
       pg_temp.try_as(who, format('SELECT set_config(%L, %L, true)', setting, value)) AS sets_it
  FROM (VALUES ('leaseq.max_payload_bytes', '2147483647'), ('leaseq.claim_slow_head', '0'),
               ('leaseq.claim_rescan_interval', '1h')) AS s(setting, value),
       unnest(ARRAY['priv_producer', 'priv_worker', 'priv_admin']) AS who
 ORDER BY setting, who;
SHOW leaseq.max_payload_bytes;
GRANT SET ON PARAMETER leaseq.max_payload_bytes TO priv_admin;
SELECT pg_temp.try_as('priv_admin', $$SELECT set_config('leaseq.max_payload_bytes', '16', true)$$)
       AS granted_sets_it,
       pg_temp.try_as('priv_producer',
                      $$SELECT leaseq.queue_enqueue('priv_open', jsonb_build_object('big', repeat('x', 1100000)))::text$$)
       AS producer_over_the_limit;
REVOKE SET ON PARAMETER leaseq.max_payload_bytes FROM priv_admin;

-- A schedule belongs to its queue: replacing one by name needs admin on the queue it is in, not
-- only on the queue it would move to. (Latent while only leaseq_admin may call queue_schedule:
-- here the team and its lead are given EXECUTE on it, as per-queue admins would be.) The lead
-- administers priv_sched_a, the team priv_sched_b.
SELECT leaseq.queue_create('priv_sched_a'), leaseq.queue_create('priv_sched_b');
SELECT leaseq.queue_grant('priv_sched_a', 'priv_lead', 'admin') AS granted,
       leaseq.queue_grant('priv_sched_b', 'priv_team', 'admin') AS granted;
GRANT EXECUTE ON FUNCTION leaseq.queue_schedule(text, text, text, jsonb, text, boolean, text)
   TO priv_lead, priv_team;
SELECT leaseq.queue_schedule('priv_sched_report', 'priv_sched_a', '0 * * * *', '{"a": 1}') IS NOT NULL
       AS scheduled;
SELECT who, target,
       pg_temp.try_as(who, format($$SELECT leaseq.queue_schedule('priv_sched_report', %L, '0 * * * *', '{"b": 1}') IS NOT NULL$$,
                                  target)) AS replaces_a_schedule
  FROM unnest(ARRAY['priv_team_member', 'priv_lead']) AS who,
       unnest(ARRAY['priv_sched_a', 'priv_sched_b']) AS target
 ORDER BY who, target;
SELECT queue, payload FROM leaseq.schedules WHERE name = 'priv_sched_report';
REVOKE EXECUTE ON FUNCTION leaseq.queue_schedule(text, text, text, jsonb, text, boolean, text)
  FROM priv_lead, priv_team;
SELECT leaseq.queue_unschedule('priv_sched_report') AS removed;

-- A job named by id in a queue the caller may not see: the refusal names the job and the
-- privilege, never the queue, so trying ids teaches no hidden queue's name.
SELECT leaseq.queue_enqueue('priv_closed', '{}') AS hidden_job \gset
CREATE FUNCTION pg_temp.refusal_as(who text, call text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('SET LOCAL ROLE %I', who);
    EXECUTE call;
    RAISE EXCEPTION USING ERRCODE = 'LQ000', MESSAGE = 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ' ' || regexp_replace(SQLERRM, 'job [0-9]+', 'job N');
END $$;
SELECT pg_temp.refusal_as('priv_observer', format('SELECT * FROM leaseq.queue_job(%s)', :hidden_job))
       AS observer_reads_hidden_job,
       pg_temp.refusal_as('priv_worker',
                          format('SELECT leaseq.queue_complete(%s, gen_random_uuid())', :hidden_job))
       AS worker_completes_hidden_job;

DROP TABLE priv_effects;
