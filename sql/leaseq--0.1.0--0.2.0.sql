-- leaseq 0.1.0 -> 0.2.0. Jobs, leases, tokens and history are kept as they are; what changes is
-- where future successes are recorded (on the job's row), the settings of the functions, and who
-- may do what (group roles, per-queue grants, tables written only through the functions).
\echo Use "ALTER EXTENSION leaseq UPDATE TO '0.2.0'" to load this file. \quit

-- Settings are no longer part of the function definitions: each function applies its own at run
-- time (src/spi.rs), so that no later upgrade script can drop them by replacing a function.
-- 0.1.0 pinned search_path on every function but queue_claim, queue_enqueue_batch,
-- queue_complete_batch and queue_fail_batch (which set it themselves), and its install script's DO
-- block added the job-path plan settings to the same functions but queue_stats, queue_jobs and
-- queue_purge. All of that goes.
ALTER FUNCTION leaseq.queue_attempts(bigint) RESET ALL;
ALTER FUNCTION leaseq.queue_cancel(bigint) RESET ALL;
ALTER FUNCTION leaseq.queue_complete(bigint, uuid, jsonb) RESET ALL;
ALTER FUNCTION leaseq.queue_create(text, interval, int, interval, interval) RESET ALL;
ALTER FUNCTION leaseq.queue_enqueue(text, jsonb, timestamptz, int, text, int) RESET ALL;
ALTER FUNCTION leaseq.queue_fail(bigint, uuid, jsonb, boolean, interval) RESET ALL;
ALTER FUNCTION leaseq.queue_job(bigint) RESET ALL;
ALTER FUNCTION leaseq.queue_jobs(text, leaseq.job_status, int) RESET ALL;
ALTER FUNCTION leaseq.queue_purge(text, interval, int) RESET ALL;
ALTER FUNCTION leaseq.queue_redrive(bigint) RESET ALL;
ALTER FUNCTION leaseq.queue_redrive_all(text, int) RESET ALL;
ALTER FUNCTION leaseq.queue_renew(bigint, uuid, interval) RESET ALL;
ALTER FUNCTION leaseq.queue_stats() RESET ALL;

-- A job's success is final, so the attempt that succeeds stays on the job's row, token
-- included, instead of being copied to closed_attempts (src/history.rs). The rules of a job's
-- lease and token are kept by the functions' statements and checked by the tests
-- (pg_test/invariants.sql), no longer by a CHECK that every writing statement re-read from its
-- stored form (sql/schema.sql); rows written by 0.1.0 satisfy them.
ALTER TABLE leaseq.jobs DROP CONSTRAINT jobs_lease_iff_running;

-- The attempt on a job's row is the one it carries a token for: a running job's open attempt,
-- or a succeeded job's last (jobs that succeeded under 0.1.0 carry none: their success is in
-- closed_attempts). It is numbered with the very expression of the statements that close
-- attempts (src/history.rs).
CREATE OR REPLACE VIEW leaseq.attempts AS
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

-- New in 0.2.0: every lease a worker holds renewed in one call (src/lease.rs), granted below
-- with the other worker functions.
CREATE FUNCTION leaseq.queue_renew_batch(
	"job_ids" bigint[],
	"lease_tokens" uuid[],
	"lease" interval DEFAULT NULL
) RETURNS SETOF timestamp with time zone
LANGUAGE c
AS 'MODULE_PATHNAME', 'queue_renew_batch_wrapper';

-- New in 0.2.0: per-queue retention, applied by the maintenance worker (src/maintenance.rs),
-- and snoozes (src/snooze.rs): a job's count, a queue's limit, an attempt's outcome.
-- queue_create takes retain and max_snoozes as its sixth and seventh arguments. The
-- five-argument function goes: its entry point stays in the library for databases not yet
-- updated.
ALTER TYPE leaseq.attempt_outcome ADD VALUE 'snoozed';
ALTER TABLE leaseq.jobs ADD COLUMN snoozes int NOT NULL DEFAULT 0;
ALTER TABLE leaseq.queues ADD COLUMN retain interval;
ALTER TABLE leaseq.queues ADD COLUMN max_snoozes int;
ALTER TABLE leaseq.queues ADD CONSTRAINT queues_retain_positive
    CHECK (retain OPERATOR(pg_catalog.>) interval '0');
ALTER TABLE leaseq.queues ADD CONSTRAINT queues_max_snoozes_not_negative
    CHECK (max_snoozes OPERATOR(pg_catalog.>=) 0);
DROP FUNCTION leaseq.queue_create(text, interval, int, interval, interval);
CREATE FUNCTION leaseq.queue_create(
	"queue" TEXT,
	"lease" interval DEFAULT '30 seconds',
	"max_attempts" INT DEFAULT 5,
	"backoff_base" interval DEFAULT '1 second',
	"backoff_cap" interval DEFAULT '5 minutes',
	"retain" interval DEFAULT NULL,
	"max_snoozes" INT DEFAULT NULL,
	"group_concurrency" INT DEFAULT 1
) RETURNS void
LANGUAGE c
AS 'MODULE_PATHNAME', 'create_queue_wrapper';

CREATE FUNCTION leaseq.queue_snooze(
	"job_id" bigint,
	"lease_token" uuid,
	"delay" interval
) RETURNS leaseq.job_status
LANGUAGE c
AS 'MODULE_PATHNAME', 'queue_snooze_wrapper';

-- queue_job and queue_stats return one column more (snoozes, most_snoozes).
DROP FUNCTION leaseq.queue_job(bigint);
CREATE FUNCTION leaseq.queue_job(
	"job_id" bigint
) RETURNS TABLE (
	"job_id" bigint,
	"queue" TEXT,
	"status" leaseq.job_status,
	"priority" INT,
	"run_at" timestamp with time zone,
	"attempts" INT,
	"max_attempts" INT,
	"worker" TEXT,
	"lease_expires_at" timestamp with time zone,
	"dedupe_key" TEXT,
	"payload" jsonb,
	"result" jsonb,
	"last_error" jsonb,
	"created_at" timestamp with time zone,
	"updated_at" timestamp with time zone,
	"finished_at" timestamp with time zone,
	"snoozes" INT,
	"group_key" TEXT
)
LANGUAGE c
AS 'MODULE_PATHNAME', 'job_wrapper';
DROP FUNCTION leaseq.queue_stats();
CREATE FUNCTION leaseq.queue_stats() RETURNS TABLE (
	"queue" TEXT,
	"pending" bigint,
	"scheduled" bigint,
	"running" bigint,
	"expired_leases" bigint,
	"succeeded" bigint,
	"dead" bigint,
	"cancelled" bigint,
	"oldest_pending_age" interval,
	"most_snoozes" INT,
	"waiting" bigint
)
STRICT
LANGUAGE c
AS 'MODULE_PATHNAME', 'stats_wrapper';

-- New in 0.2.0: dedupe windows and replace (src/enqueue.rs): queue_enqueue takes dedupe_for and
-- on_duplicate; 0.1.0's six-argument entry point stays in the library for databases not yet
-- updated. Keyed finished jobs are indexed for the window (sql/schema.sql).
DROP FUNCTION leaseq.queue_enqueue(text, jsonb, timestamptz, int, text, int);
CREATE FUNCTION leaseq.queue_enqueue(
	"queue" TEXT,
	"payload" jsonb,
	"run_at" timestamp with time zone DEFAULT NULL,
	"priority" INT DEFAULT 0,
	"dedupe_key" TEXT DEFAULT NULL,
	"max_attempts" INT DEFAULT NULL,
	"dedupe_for" interval DEFAULT NULL,
	"on_duplicate" TEXT DEFAULT 'ignore',
	"group_key" TEXT DEFAULT NULL
) RETURNS bigint
LANGUAGE c
AS 'MODULE_PATHNAME', 'enqueue_wrapper';
CREATE INDEX jobs_dedupe_key_finished ON leaseq.jobs (queue, dedupe_key, finished_at)
    WHERE dedupe_key IS NOT NULL
      AND (status OPERATOR(pg_catalog.=) 'succeeded' OR status OPERATOR(pg_catalog.=) 'dead');

-- New in 0.2.0: the index the maintenance worker finds jobs that came due with (sql/schema.sql).
CREATE INDEX jobs_scheduled_idx ON leaseq.jobs (queue, run_at)
    WHERE status OPERATOR(pg_catalog.=) 'pending' AND run_at OPERATOR(pg_catalog.>) created_at
      AND queue IS NOT NULL;

-- New in 0.2.0: per-queue grants (src/access.rs), as sql/schema.sql creates them.
CREATE TYPE leaseq.queue_privilege AS ENUM ('produce', 'work', 'observe', 'admin');

CREATE TABLE leaseq.queue_grants (
    queue      text                   NOT NULL,
    role       regrole                NOT NULL,
    privilege  leaseq.queue_privilege NOT NULL,
    granted_at timestamptz            NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    CONSTRAINT queue_grants_pkey PRIMARY KEY (queue, role, privilege),
    CONSTRAINT queue_grants_queue_fkey FOREIGN KEY (queue) REFERENCES leaseq.queues (name)
);
SELECT pg_catalog.pg_extension_config_dump('leaseq.queue_grants', '');

CREATE FUNCTION leaseq.queue_grant(
	"queue" TEXT,
	"role" regrole,
	"privilege" TEXT
) RETURNS bool
LANGUAGE c
AS 'MODULE_PATHNAME', 'queue_grant_wrapper';

CREATE FUNCTION leaseq.queue_revoke(
	"queue" TEXT,
	"role" regrole,
	"privilege" TEXT
) RETURNS bool
LANGUAGE c
AS 'MODULE_PATHNAME', 'queue_revoke_wrapper';

CREATE FUNCTION leaseq.queue_grants() RETURNS TABLE (
	"queue" TEXT,
	"role" regrole,
	"privilege" leaseq.queue_privilege,
	"granted_at" timestamp with time zone
)
STRICT
LANGUAGE c
AS 'MODULE_PATHNAME', 'queue_grants_wrapper';

-- New in 0.2.0: Prometheus metrics (src/metrics.rs).
CREATE FUNCTION leaseq.metrics() RETURNS TEXT
STRICT
LANGUAGE c
AS 'MODULE_PATHNAME', 'metrics_wrapper';

CREATE FUNCTION leaseq.cached_table_changed()
	RETURNS TRIGGER
	LANGUAGE c
	AS 'MODULE_PATHNAME', 'cached_table_changed_wrapper';

-- New in 0.2.0: periodic jobs (src/schedule.rs), as sql/schema.sql creates them.
CREATE TABLE leaseq.schedules (
    name       text        NOT NULL,
    queue      text        NOT NULL,
    every      text        NOT NULL,
    payload    jsonb       NOT NULL,
    timezone   text        NOT NULL,
    catch_up   boolean     NOT NULL,
    next_at    timestamptz NOT NULL,
    created_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    updated_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    CONSTRAINT schedules_pkey PRIMARY KEY (name),
    CONSTRAINT schedules_queue_fkey FOREIGN KEY (queue) REFERENCES leaseq.queues (name)
);
CREATE INDEX schedules_due_idx ON leaseq.schedules (queue, next_at);
SELECT pg_catalog.pg_extension_config_dump('leaseq.schedules', '');

CREATE FUNCTION leaseq.queue_schedule(
	"name" TEXT,
	"queue" TEXT,
	"every" TEXT,
	"payload" jsonb,
	"timezone" TEXT DEFAULT 'UTC',
	"catch_up" bool DEFAULT false
) RETURNS timestamp with time zone
LANGUAGE c
AS 'MODULE_PATHNAME', 'queue_schedule_wrapper';

CREATE FUNCTION leaseq.queue_unschedule(
	"name" TEXT
) RETURNS bool
LANGUAGE c
AS 'MODULE_PATHNAME', 'queue_unschedule_wrapper';

CREATE FUNCTION leaseq.queue_schedules() RETURNS TABLE (
	"name" TEXT,
	"queue" TEXT,
	"every" TEXT,
	"timezone" TEXT,
	"catch_up" bool,
	"payload" jsonb,
	"next_at" timestamp with time zone
)
STRICT
LANGUAGE c
AS 'MODULE_PATHNAME', 'queue_schedules_wrapper';

-- New in 0.2.0: ordered groups (src/group.rs), as sql/schema.sql creates them. The new status
-- may not be used before this transaction commits, so no index here names it; the unique dedupe
-- index now covers every live status, `waiting` included, and is rebuilt for that.
-- queue_enqueue_batch takes group_keys; 0.1.0's four-argument entry point stays in the library
-- for databases not yet updated. (queue_create's group_concurrency, queue_enqueue's group_key,
-- queue_job's group_key and queue_stats' waiting are in their definitions above.)
ALTER TYPE leaseq.job_status ADD VALUE 'waiting';
ALTER TABLE leaseq.jobs ADD COLUMN group_key text;
ALTER TABLE leaseq.queues ADD COLUMN group_concurrency int NOT NULL DEFAULT 1;
ALTER TABLE leaseq.queues ADD CONSTRAINT queues_group_concurrency_in_range CHECK (
    group_concurrency OPERATOR(pg_catalog.>=) 1
    AND group_concurrency OPERATOR(pg_catalog.<=) 1000);
DROP INDEX leaseq.jobs_dedupe_key_live;
CREATE UNIQUE INDEX jobs_dedupe_key_live ON leaseq.jobs (queue, dedupe_key)
    WHERE dedupe_key IS NOT NULL
      AND status OPERATOR(pg_catalog.<>) 'succeeded' AND status OPERATOR(pg_catalog.<>) 'dead'
      AND status OPERATOR(pg_catalog.<>) 'cancelled';
CREATE INDEX jobs_group_live_idx ON leaseq.jobs (queue, group_key, status, id)
    WHERE group_key IS NOT NULL
      AND status OPERATOR(pg_catalog.<>) 'succeeded' AND status OPERATOR(pg_catalog.<>) 'dead'
      AND status OPERATOR(pg_catalog.<>) 'cancelled';
CREATE TABLE leaseq.groups (
    queue     text NOT NULL,
    group_key text NOT NULL,
    CONSTRAINT groups_pkey PRIMARY KEY (queue, group_key)
);
DROP FUNCTION leaseq.queue_enqueue_batch(text, jsonb[], timestamptz, int);
CREATE FUNCTION leaseq.queue_enqueue_batch(
	"queue" TEXT,
	"payloads" jsonb[],
	"run_at" timestamp with time zone DEFAULT NULL,
	"priority" INT DEFAULT 0,
	"group_keys" TEXT[] DEFAULT NULL
) RETURNS SETOF bigint
LANGUAGE c
AS 'MODULE_PATHNAME', 'enqueue_batch_wrapper';

-- 0.1.0's functions ran with the caller's rights, so its README had every application role
-- granted rights on the tables. No role but leaseq_owner keeps any now; so that running
-- applications keep working, a role that held UPDATE on leaseq.jobs (what a worker needed) joins
-- leaseq_worker, one that held only INSERT on it leaseq_producer, one that held SELECT on it
-- leaseq_observer. Administration (queue_create, redrive, cancel, purge) needs leaseq_admin.
DO $roles_of_010$
DECLARE
    holder record;
BEGIN
    -- The group roles first (as below, where a fresh install creates them).
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'leaseq_producer') THEN
        CREATE ROLE leaseq_producer NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'leaseq_worker') THEN
        CREATE ROLE leaseq_worker NOLOGIN IN ROLE leaseq_producer;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'leaseq_observer') THEN
        CREATE ROLE leaseq_observer NOLOGIN;
    END IF;
    FOR holder IN
        SELECT grantee.rolname AS name,
               bool_or(rel.relname = 'jobs' AND acl.privilege_type = 'UPDATE') AS worker,
               bool_or(rel.relname = 'jobs' AND acl.privilege_type = 'INSERT') AS producer,
               bool_or(rel.relname = 'jobs' AND acl.privilege_type = 'SELECT') AS observer
          FROM pg_catalog.pg_class AS rel
         CROSS JOIN LATERAL pg_catalog.aclexplode(rel.relacl) AS acl
          JOIN pg_catalog.pg_roles AS grantee ON grantee.oid = acl.grantee
         WHERE rel.relnamespace = 'leaseq'::regnamespace AND acl.grantee <> rel.relowner
         GROUP BY grantee.rolname
         ORDER BY grantee.rolname
    LOOP
        IF holder.worker THEN
            EXECUTE pg_catalog.format('GRANT leaseq_worker TO %I', holder.name);
        ELSIF holder.producer THEN
            EXECUTE pg_catalog.format('GRANT leaseq_producer TO %I', holder.name);
        END IF;
        IF holder.observer THEN
            EXECUTE pg_catalog.format('GRANT leaseq_observer TO %I', holder.name);
        END IF;
        EXECUTE pg_catalog.format('REVOKE ALL ON leaseq.queues, leaseq.jobs, leaseq.closed_attempts,
                                   leaseq.attempts, leaseq.jobs_id_seq FROM %I', holder.name);
        RAISE WARNING 'leaseq: role % loses its rights on leaseq''s tables%', holder.name,
            CASE WHEN holder.worker THEN ' and joins leaseq_worker'
                 WHEN holder.producer THEN ' and joins leaseq_producer' ELSE '' END
            || CASE WHEN holder.observer THEN ' and leaseq_observer' ELSE '' END;
    END LOOP;
END
$roles_of_010$;
-- From here on, word for word sql/privileges.sql, which a fresh install runs last.
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

ALTER TABLE leaseq.queues OWNER TO leaseq_owner;
ALTER TABLE leaseq.jobs OWNER TO leaseq_owner;
ALTER TABLE leaseq.closed_attempts OWNER TO leaseq_owner;
ALTER TABLE leaseq.queue_grants OWNER TO leaseq_owner;
ALTER TABLE leaseq.schedules OWNER TO leaseq_owner;
ALTER TABLE leaseq.groups OWNER TO leaseq_owner;
ALTER VIEW leaseq.attempts OWNER TO leaseq_owner;
-- Said, not left to the defaults: nobody else holds anything on them.
REVOKE ALL ON leaseq.queues, leaseq.jobs, leaseq.closed_attempts, leaseq.queue_grants,
              leaseq.schedules, leaseq.groups, leaseq.attempts, leaseq.jobs_id_seq FROM PUBLIC;

-- Every backend keeps the grants and the schedules' next ticks it read (src/access.rs,
-- src/schedule.rs); any change to them, by the functions or by hand, tells every backend to read
-- them again.
CREATE TRIGGER queue_grants_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON leaseq.queue_grants
    FOR EACH STATEMENT EXECUTE FUNCTION leaseq.cached_table_changed();
CREATE TRIGGER schedules_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON leaseq.schedules
    FOR EACH STATEMENT EXECUTE FUNCTION leaseq.cached_table_changed();

REVOKE ALL ON ALL FUNCTIONS IN SCHEMA leaseq FROM PUBLIC;

GRANT EXECUTE ON FUNCTION
    leaseq.queue_enqueue(text, jsonb, timestamptz, int, text, int, interval, text, text),
    leaseq.queue_enqueue_batch(text, jsonb[], timestamptz, int, text[])
   TO leaseq_producer;

GRANT EXECUTE ON FUNCTION
    leaseq.queue_claim(text, text, int, interval),
    leaseq.queue_renew(bigint, uuid, interval),
    leaseq.queue_renew_batch(bigint[], uuid[], interval),
    leaseq.queue_complete(bigint, uuid, jsonb),
    leaseq.queue_complete_batch(bigint[], uuid[], jsonb[]),
    leaseq.queue_fail(bigint, uuid, jsonb, boolean, interval),
    leaseq.queue_fail_batch(bigint[], uuid[], jsonb[], boolean),
    leaseq.queue_snooze(bigint, uuid, interval)
   TO leaseq_worker;

GRANT EXECUTE ON FUNCTION
    leaseq.queue_stats(),
    leaseq.queue_jobs(text, leaseq.job_status, int),
    leaseq.queue_job(bigint),
    leaseq.queue_attempts(bigint),
    leaseq.metrics(),
    leaseq.queue_schedules()
   TO leaseq_observer;

GRANT EXECUTE ON FUNCTION
    leaseq.queue_create(text, interval, int, interval, interval, interval, int, int),
    leaseq.queue_redrive(bigint),
    leaseq.queue_redrive_all(text, int),
    leaseq.queue_cancel(bigint),
    leaseq.queue_purge(text, interval, int),
    leaseq.queue_grant(text, regrole, text),
    leaseq.queue_revoke(text, regrole, text),
    leaseq.queue_grants(),
    leaseq.queue_schedule(text, text, text, jsonb, text, boolean),
    leaseq.queue_unschedule(text)
   TO leaseq_admin;
