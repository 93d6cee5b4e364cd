-- leaseq 0.3.0 -> 0.4.0. Jobs, leases, tokens and history are kept as they are. Every change to
-- the schema or to a SQL definition after 0.3.0 goes here.

-- leaseq.jobs with its columns in 0.4.0's order (sql/schema.sql, "Column order is deliberate"):
-- PostgreSQL cannot move a column, so the table is rewritten — every row copied under an
-- ACCESS EXCLUSIVE lock, which every job function waits for meanwhile (a million jobs: see
-- README.md, "Upgrading"). Ids continue where they were; what hangs on the table (its indexes,
-- the commit-time trigger of dependencies, the view of attempts, its place in pg_dump's output)
-- is made again as a fresh install makes it, and so is the payloads' index when it was there.
LOCK TABLE leaseq.jobs IN ACCESS EXCLUSIVE MODE;
SELECT pg_catalog.set_config('leaseq_upgrade.payload_index',
                             coalesce(pg_catalog.pg_get_indexdef(
                                 pg_catalog.to_regclass('leaseq.jobs_payload_idx')), ''),
                             true);
DROP VIEW leaseq.attempts;
ALTER TABLE leaseq.jobs RENAME TO jobs_0_3_0;
ALTER SEQUENCE leaseq.jobs_id_seq RENAME TO jobs_0_3_0_id_seq;
CREATE TABLE leaseq.jobs (
    id               bigint GENERATED ALWAYS AS IDENTITY,
    created_at       timestamptz        NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    priority         int                NOT NULL DEFAULT 0,
    max_attempts     int                NOT NULL,
    queue            text               NOT NULL,
    dedupe_key       text,
    group_key        text,
    trace_context    text,
    payload          jsonb              NOT NULL,
    snoozes          int                NOT NULL DEFAULT 0,
    run_at           timestamptz        NOT NULL,
    started_at       timestamptz,
    lease_token      uuid,
    worker           text,
    attempts         int                NOT NULL DEFAULT 0,
    status           leaseq.job_status  NOT NULL DEFAULT 'pending',
    lane             leaseq.job_status  NOT NULL GENERATED ALWAYS AS (
                         CASE WHEN status OPERATOR(pg_catalog.=) 'succeeded'
                                   AND dedupe_key IS NULL AND group_key IS NULL
                              THEN 'running' ELSE status END) STORED,
    updated_at       timestamptz        NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    lease_expires_at timestamptz,
    finished_at      timestamptz,
    keyed_finished_at timestamptz GENERATED ALWAYS AS (
                         CASE WHEN dedupe_key IS NOT NULL OR group_key IS NOT NULL
                              THEN finished_at END) STORED,
    result           jsonb,
    last_error       jsonb,
    progress         jsonb,
    progress_at      timestamptz
) WITH (fillfactor = 30);
INSERT INTO leaseq.jobs (id, created_at, priority, max_attempts, queue, dedupe_key, group_key,
                         trace_context, payload, snoozes, run_at, started_at, lease_token, worker,
                         attempts, status, updated_at, lease_expires_at, finished_at, result,
                         last_error, progress, progress_at)
     OVERRIDING SYSTEM VALUE
     SELECT id, created_at, priority, max_attempts, queue, dedupe_key, group_key, trace_context,
            payload, snoozes, run_at, started_at, lease_token, worker, attempts, status,
            updated_at, lease_expires_at, finished_at, result, last_error, progress, progress_at
       FROM leaseq.jobs_0_3_0
      ORDER BY id;
SELECT pg_catalog.setval('leaseq.jobs_id_seq', old.last_value, old.is_called)
  FROM leaseq.jobs_0_3_0_id_seq AS old;
-- Out of the extension first: that also takes the old table and its sequence out of the list of
-- what pg_dump dumps, where dropping them would leave their numbers.
ALTER EXTENSION leaseq DROP SEQUENCE leaseq.jobs_0_3_0_id_seq;
ALTER EXTENSION leaseq DROP TABLE leaseq.jobs_0_3_0;
DROP TABLE leaseq.jobs_0_3_0;
ALTER TABLE leaseq.jobs ADD CONSTRAINT jobs_pkey PRIMARY KEY (id);
CREATE INDEX jobs_due_idx ON leaseq.jobs (queue, priority DESC, run_at, id)
    WHERE lane OPERATOR(pg_catalog.=) 'pending' AND queue IS NOT NULL;
CREATE INDEX jobs_scheduled_idx ON leaseq.jobs (queue, run_at)
    WHERE lane OPERATOR(pg_catalog.=) 'pending' AND run_at OPERATOR(pg_catalog.>) created_at
      AND queue IS NOT NULL;
CREATE INDEX jobs_dead_idx ON leaseq.jobs (queue, id)
    WHERE lane OPERATOR(pg_catalog.=) 'dead' AND queue IS NOT NULL;
CREATE INDEX jobs_held_idx ON leaseq.jobs (queue, lane, id)
    WHERE lane OPERATOR(pg_catalog.>) 'cancelled' AND queue IS NOT NULL;
CREATE UNIQUE INDEX jobs_dedupe_key_live ON leaseq.jobs (queue, dedupe_key)
    WHERE dedupe_key IS NOT NULL AND keyed_finished_at IS NULL;
CREATE INDEX jobs_group_live_idx ON leaseq.jobs (queue, group_key, lane, id)
    WHERE group_key IS NOT NULL AND keyed_finished_at IS NULL;
CREATE INDEX jobs_dedupe_key_finished ON leaseq.jobs (queue, dedupe_key, keyed_finished_at)
    WHERE dedupe_key IS NOT NULL
      AND (lane OPERATOR(pg_catalog.=) 'succeeded' OR lane OPERATOR(pg_catalog.=) 'dead');
DO $payloads$
BEGIN
    IF pg_catalog.current_setting('leaseq_upgrade.payload_index')
       OPERATOR(pg_catalog.<>) '' THEN
        EXECUTE pg_catalog.current_setting('leaseq_upgrade.payload_index');
    END IF;
END
$payloads$;
-- A lease row per claim call replaces the lease-expiry index (sql/schema.sql): the jobs running
-- now get one row per claim call they came from — their queue, token and lease end.
CREATE TABLE leaseq.leases (
    queue      text        NOT NULL,
    expires_at timestamptz NOT NULL,
    token      uuid        NOT NULL,
    job_ids    bigint[]    NOT NULL
);
CREATE INDEX leases_expiry_idx ON leaseq.leases (queue, expires_at);
SELECT pg_catalog.pg_extension_config_dump('leaseq.leases', '');
INSERT INTO leaseq.leases (queue, expires_at, token, job_ids)
     SELECT job.queue, job.lease_expires_at, job.lease_token, pg_catalog.array_agg(job.id)
       FROM leaseq.jobs AS job
      WHERE job.status OPERATOR(pg_catalog.=) 'running'
      GROUP BY job.queue, job.lease_expires_at, job.lease_token;
CREATE CONSTRAINT TRIGGER jobs_parents_read_at_commit
    AFTER INSERT ON leaseq.jobs DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.status::pg_catalog.text OPERATOR(pg_catalog.=) 'blocked')
    EXECUTE FUNCTION leaseq.parents_read_at_commit();
CREATE VIEW leaseq.attempts AS
    SELECT closed.job_id, closed.attempt_no, closed.lease_token, closed.worker,
           closed.started_at, closed.ended_at, closed.outcome, closed.error
      FROM leaseq.closed_attempts AS closed
    UNION ALL
    SELECT job.id,
           coalesce((SELECT max(earlier.attempt_no) FROM leaseq.closed_attempts AS earlier
                      WHERE earlier.job_id = job.id), 0) + 1,
           job.lease_token, job.worker, job.started_at, job.finished_at,
           CASE WHEN job.status OPERATOR(pg_catalog.=) 'running' THEN 'running'
                ELSE 'succeeded' END::leaseq.attempt_outcome,
           NULL
      FROM leaseq.jobs AS job
     WHERE job.lease_token IS NOT NULL;
SELECT pg_catalog.pg_extension_config_dump('leaseq.jobs', '');
SELECT pg_catalog.pg_extension_config_dump('leaseq.jobs_id_seq', '');
ANALYZE leaseq.jobs;

-- sql/privileges.sql, word for word (scripts/test checks it): every upgrade ends with it.
-- Who may do what (docs/reference.md, "Permissions"; src/core/access.rs). Runs after every generated function.
--
-- leaseq's tables belong to leaseq_owner, a NOLOGIN role that holds nothing else, and no other
-- role holds any right on them: every write goes through the functions, which act as
-- leaseq_owner while their statements run (src/core/connect.rs). The functions themselves are granted to
-- four group roles, never to PUBLIC:
--   leaseq_producer  enqueue, flows
--   leaseq_worker    a producer's rights, claim, renew, complete, fail, snooze, hand back,
--                    parents and children (a child's handler reads its parents' results),
--                    step and steps (what its earlier attempts did), progress, await
--   leaseq_observer  stats, jobs, job, attempts, result, parents, children, steps, flow status,
--                    await, metrics,
--                    settings, overview, throughput, workers, groups
--   leaseq_admin     a worker's and an observer's rights, create, redrive, cancel, purge, grants,
--                    pause, schedules
-- and queue_privileges() (what the caller may do on each queue) to producers and observers, so
-- to every one of them.
-- Roles are cluster-wide: a second database installing leaseq reuses them, and DROP EXTENSION
-- leaves them.
DO $roles$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles
                    WHERE rolname OPERATOR(pg_catalog.=) 'leaseq_owner') THEN
        CREATE ROLE leaseq_owner NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles
                    WHERE rolname OPERATOR(pg_catalog.=) 'leaseq_producer') THEN
        CREATE ROLE leaseq_producer NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles
                    WHERE rolname OPERATOR(pg_catalog.=) 'leaseq_worker') THEN
        CREATE ROLE leaseq_worker NOLOGIN IN ROLE leaseq_producer;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles
                    WHERE rolname OPERATOR(pg_catalog.=) 'leaseq_observer') THEN
        CREATE ROLE leaseq_observer NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles
                    WHERE rolname OPERATOR(pg_catalog.=) 'leaseq_admin') THEN
        CREATE ROLE leaseq_admin NOLOGIN IN ROLE leaseq_worker, leaseq_observer;
    END IF;
    -- The functions act with leaseq_owner's rights: a leaseq_owner that someone made before,
    -- able to log in, holding other rights or with members, would lend them to every caller.
    IF EXISTS (SELECT FROM pg_catalog.pg_roles AS owner
                WHERE owner.rolname OPERATOR(pg_catalog.=) 'leaseq_owner'
                  AND (owner.rolcanlogin OR owner.rolsuper OR owner.rolcreaterole
                       OR owner.rolcreatedb OR owner.rolreplication OR owner.rolbypassrls
                       OR EXISTS (SELECT FROM pg_catalog.pg_auth_members AS membership
                                   WHERE membership.roleid OPERATOR(pg_catalog.=) owner.oid
                                      OR membership.member OPERATOR(pg_catalog.=) owner.oid)))
    THEN
        RAISE EXCEPTION 'role "leaseq_owner" exists with rights beyond owning leaseq''s tables'
            USING ERRCODE = '42501',
                  HINT = 'leaseq''s functions act as leaseq_owner: make it NOLOGIN, with no '
                         'attributes, no members and no memberships, or drop it.';
    END IF;
END
$roles$;

GRANT USAGE ON SCHEMA leaseq
   TO leaseq_owner, leaseq_producer, leaseq_worker, leaseq_observer, leaseq_admin;
-- The owner makes and drops the one index leaseq makes on request, the payloads' (src/admin/search.rs,
-- `queue_index_payloads`); an index lives in its table's schema.
GRANT CREATE ON SCHEMA leaseq TO leaseq_owner;

ALTER TABLE leaseq.queues OWNER TO leaseq_owner;
ALTER TABLE leaseq.jobs OWNER TO leaseq_owner;
ALTER TABLE leaseq.closed_attempts OWNER TO leaseq_owner;
ALTER TABLE leaseq.queue_grants OWNER TO leaseq_owner;
ALTER TABLE leaseq.schedules OWNER TO leaseq_owner;
ALTER TABLE leaseq.groups OWNER TO leaseq_owner;
ALTER TABLE leaseq.job_parents OWNER TO leaseq_owner;
ALTER TABLE leaseq.job_steps OWNER TO leaseq_owner;
ALTER TABLE leaseq.purged_keys OWNER TO leaseq_owner;
ALTER TABLE leaseq.leases OWNER TO leaseq_owner;
ALTER VIEW leaseq.attempts OWNER TO leaseq_owner;
-- Said, not left to the defaults: nobody else holds anything on them.
REVOKE ALL ON leaseq.queues, leaseq.jobs, leaseq.closed_attempts, leaseq.queue_grants,
              leaseq.schedules, leaseq.groups, leaseq.job_parents, leaseq.job_steps,
              leaseq.purged_keys, leaseq.attempts, leaseq.jobs_id_seq, leaseq.leases FROM PUBLIC;

-- Every backend keeps the grants, the schedules' next ticks and the paused queues it read
-- (src/core/access.rs, src/lifecycle/schedule.rs, src/lifecycle/pause.rs); any change to them, by the
-- functions or by hand, tells every backend to read them again.
CREATE OR REPLACE TRIGGER queue_grants_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON leaseq.queue_grants
    FOR EACH STATEMENT EXECUTE FUNCTION leaseq.cached_table_changed();
CREATE OR REPLACE TRIGGER schedules_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON leaseq.schedules
    FOR EACH STATEMENT EXECUTE FUNCTION leaseq.cached_table_changed();
CREATE OR REPLACE TRIGGER queues_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON leaseq.queues
    FOR EACH STATEMENT EXECUTE FUNCTION leaseq.cached_table_changed();

-- Routines: functions and the one procedure, queue_await.
REVOKE ALL ON ALL ROUTINES IN SCHEMA leaseq FROM PUBLIC;

GRANT EXECUTE ON FUNCTION
    leaseq.queue_enqueue(text, jsonb, timestamptz, int, text, int, interval, text, text, bigint[],
                         text, text),
    leaseq.queue_enqueue_batch(text, jsonb[], timestamptz, int, text[], bigint[], text, jsonb,
                               text),
    leaseq.queue_flow(jsonb, text),
    leaseq.queue_privileges()
   TO leaseq_producer;

GRANT EXECUTE ON FUNCTION
    leaseq.queue_claim(text, text, int, interval),
    leaseq.queue_renew(bigint, uuid, interval),
    leaseq.queue_renew_batch(bigint[], uuid[], interval),
    leaseq.queue_complete(bigint, uuid, jsonb),
    leaseq.queue_complete_batch(bigint[], uuid[], jsonb[]),
    leaseq.queue_fail(bigint, uuid, jsonb, boolean, interval),
    leaseq.queue_fail_batch(bigint[], uuid[], jsonb[], boolean),
    leaseq.queue_snooze(bigint, uuid, interval),
    leaseq.queue_hand_back(bigint[], uuid[]),
    leaseq.queue_parents(bigint),
    leaseq.queue_children(bigint),
    leaseq.queue_step(bigint, uuid, text, jsonb),
    leaseq.queue_steps(bigint),
    leaseq.queue_progress(bigint, uuid, jsonb)
   TO leaseq_worker;

GRANT EXECUTE ON FUNCTION
    leaseq.queue_stats(),
    leaseq.queue_counts(),
    leaseq.queue_jobs(text, leaseq.job_status, int, text, text, text, timestamptz, timestamptz,
                      jsonb, bigint, bigint),
    leaseq.queue_job(bigint),
    leaseq.queue_attempts(bigint),
    leaseq.queue_result(bigint),
    leaseq.queue_parents(bigint),
    leaseq.queue_children(bigint),
    leaseq.queue_steps(bigint),
    leaseq.queue_flow_status(bigint),
    leaseq.metrics(),
    leaseq.queue_schedules(),
    leaseq.queue_settings(),
    leaseq.queue_overview(),
    leaseq.queue_throughput(int),
    leaseq.queue_workers(),
    leaseq.queue_groups(text, int),
    leaseq.queue_privileges()
   TO leaseq_observer;

GRANT EXECUTE ON PROCEDURE leaseq.queue_await(bigint[], interval, boolean, bigint[])
   TO leaseq_observer, leaseq_worker;

GRANT EXECUTE ON FUNCTION
    leaseq.queue_create(text, interval, int, interval, interval, interval, int, int),
    leaseq.queue_redrive(bigint),
    leaseq.queue_redrive_all(text, int),
    leaseq.queue_redrive_batch(bigint[]),
    leaseq.queue_cancel(bigint),
    leaseq.queue_cancel_batch(bigint[]),
    leaseq.queue_purge(text, interval, int),
    leaseq.queue_grant(text, regrole, text),
    leaseq.queue_revoke(text, regrole, text),
    leaseq.queue_grants(),
    leaseq.queue_schedule(text, text, text, jsonb, text, boolean, text),
    leaseq.queue_unschedule(text),
    leaseq.queue_pause(text),
    leaseq.queue_resume(text),
    leaseq.queue_index_payloads(boolean)
   TO leaseq_admin;
