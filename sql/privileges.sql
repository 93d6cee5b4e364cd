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
