-- leaseq 0.2.0 -> 0.3.0. Jobs, leases, tokens and history are kept as they are. What changes:
-- the liveness predicates of two indexes say what they mean (finished_at IS NULL); the
-- library serves 0.2.0's and 0.1.0's definitions of queue_complete(_batch) from its compat
-- module, so this release's definitions call the lifecycle's own entry points; workers may
-- hand back jobs they claimed and never started (queue_hand_back, a new attempt outcome);
-- queues may be paused (queue_pause, queue_resume); and what an admin console needs: filtered,
-- keyset-paginated queue_jobs, bulk redrive and cancel, what the caller may do, queue settings,
-- an overview, throughput by minute, workers and groups; jobs may depend on others
-- (queue_enqueue's depends_on, a new status, a table of edges) and read their parents' results;
-- handlers record steps and report progress (two columns on jobs); queue_await, a procedure,
-- waits for jobs to be final.
\echo Use "ALTER EXTENSION leaseq UPDATE TO '0.3.0'" to load this file. \quit

-- Live means not final: finished_at IS NULL, set exactly on final jobs (pg_test/invariants.sql).
-- A predicate listing statuses could not take a status that a later upgrade adds, since
-- PostgreSQL cannot use an enum value in the transaction that adds it (docs/design.md). Both
-- indexes are rebuilt under the update's ACCESS EXCLUSIVE lock on leaseq.jobs: each holds only
-- live keyed or grouped jobs, the same rows under either predicate.
DROP INDEX leaseq.jobs_dedupe_key_live;
CREATE UNIQUE INDEX jobs_dedupe_key_live ON leaseq.jobs (queue, dedupe_key)
    WHERE dedupe_key IS NOT NULL AND finished_at IS NULL;
DROP INDEX leaseq.jobs_group_live_idx;
CREATE INDEX jobs_group_live_idx ON leaseq.jobs (queue, group_key, status, id)
    WHERE group_key IS NOT NULL AND finished_at IS NULL;

-- 0.3.0's definitions call the lifecycle's entry points; the symbols 0.2.0's called stay in the
-- library (src/compat/) for databases not yet updated.
CREATE OR REPLACE FUNCTION leaseq."queue_complete"(
	"job_id" bigint,
	"lease_token" uuid,
	"result" jsonb DEFAULT NULL
) RETURNS bool
LANGUAGE c
AS 'MODULE_PATHNAME', 'complete_wrapper';

CREATE OR REPLACE FUNCTION leaseq."queue_complete_batch"(
	"job_ids" bigint[],
	"lease_tokens" uuid[],
	"results" jsonb[] DEFAULT NULL
) RETURNS SETOF bool
LANGUAGE c
AS 'MODULE_PATHNAME', 'complete_batch_wrapper';

-- Room on each page for the three versions a job's row has at once between a claim and its
-- finish (sql/schema.sql). New pages only: the rows and their leases stay where they are.
ALTER TABLE leaseq.jobs SET (fillfactor = 30);

-- A job its worker gave back unstarted (src/lifecycle/hand_back.rs). Nothing in this script
-- uses the new label: PostgreSQL refuses that in the transaction that adds it.
ALTER TYPE leaseq.attempt_outcome ADD VALUE 'handed_back';

-- Queues may be paused (src/lifecycle/pause.rs): a column with a constant default, added without
-- rewriting the table; every queue runs.
ALTER TABLE leaseq.queues ADD COLUMN paused boolean NOT NULL DEFAULT false;

-- A schedule keeps the job its last tick enqueued (src/lifecycle/schedule.rs), shown by
-- queue_schedules; NULL until its next tick. A column without a default: no rewrite.
ALTER TABLE leaseq.schedules ADD COLUMN last_job_id bigint;

-- queue_schedules returns it: a new definition, with 0.3.0's entry point (0.2.0's symbol,
-- which the definition being replaced calls, is served from src/compat/).
DROP FUNCTION leaseq.queue_schedules();
CREATE FUNCTION leaseq."queue_schedules"() RETURNS TABLE (
	"name" TEXT,
	"queue" TEXT,
	"every" TEXT,
	"timezone" TEXT,
	"catch_up" bool,
	"payload" jsonb,
	"next_at" timestamp with time zone,
	"last_job_id" bigint
)
STRICT
LANGUAGE c
AS 'MODULE_PATHNAME', 'schedules_wrapper';

-- A succeeded job's result, for whoever may observe its queue (src/observe/inspect.rs).
CREATE FUNCTION leaseq."queue_result"(
	"job_id" bigint
) RETURNS jsonb
LANGUAGE c
AS 'MODULE_PATHNAME', 'queue_result_wrapper';

-- The opt-in index of payloads that queue_jobs searches (src/admin/search.rs).
CREATE FUNCTION leaseq."queue_index_payloads"(
	"enabled" bool
) RETURNS bool
LANGUAGE c
AS 'MODULE_PATHNAME', 'queue_index_payloads_wrapper';

CREATE FUNCTION leaseq."queue_pause"(
	"queue" TEXT
) RETURNS bool
LANGUAGE c
AS 'MODULE_PATHNAME', 'queue_pause_wrapper';

CREATE FUNCTION leaseq."queue_resume"(
	"queue" TEXT
) RETURNS bool
LANGUAGE c
AS 'MODULE_PATHNAME', 'queue_resume_wrapper';

CREATE FUNCTION leaseq."queue_hand_back"(
	"job_ids" bigint[],
	"lease_tokens" uuid[]
) RETURNS SETOF bool
LANGUAGE c
AS 'MODULE_PATHNAME', 'queue_hand_back_wrapper';

-- What the console needs (src/observe/, src/admin/grant.rs, src/lifecycle/): queue_jobs takes
-- filters and a keyset cursor — a new signature, so the old one is dropped; 0.2.0's symbol
-- stays in the library (src/compat/) for databases not yet updated.
DROP FUNCTION leaseq.queue_jobs(text, leaseq.job_status, int);

CREATE FUNCTION leaseq."queue_jobs"(
	"queue" TEXT DEFAULT NULL,
	"status" leaseq.job_status DEFAULT NULL,
	"max_rows" INT DEFAULT 100,
	"group_key" TEXT DEFAULT NULL,
	"dedupe_key" TEXT DEFAULT NULL,
	"worker" TEXT DEFAULT NULL,
	"created_after" timestamp with time zone DEFAULT NULL,
	"created_before" timestamp with time zone DEFAULT NULL,
	"payload_contains" jsonb DEFAULT NULL,
	"before_id" bigint DEFAULT NULL,
	"after_id" bigint DEFAULT NULL
) RETURNS TABLE (
	"job_id" bigint,
	"status" leaseq.job_status,
	"priority" INT,
	"run_at" timestamp with time zone,
	"attempts" INT,
	"max_attempts" INT,
	"worker" TEXT,
	"lease_expires_at" timestamp with time zone,
	"last_error" jsonb,
	"created_at" timestamp with time zone,
	"finished_at" timestamp with time zone,
	"queue" TEXT,
	"group_key" TEXT,
	"dedupe_key" TEXT
)
LANGUAGE c
AS 'MODULE_PATHNAME', 'jobs_wrapper';

CREATE FUNCTION leaseq."queue_settings"() RETURNS TABLE (
	"queue" TEXT,
	"lease" interval,
	"max_attempts" INT,
	"backoff_base" interval,
	"backoff_cap" interval,
	"retain" interval,
	"max_snoozes" INT,
	"group_concurrency" INT,
	"paused" bool,
	"created_at" timestamp with time zone,
	"updated_at" timestamp with time zone
)
STRICT
LANGUAGE c
AS 'MODULE_PATHNAME', 'queue_settings_wrapper';

CREATE FUNCTION leaseq."queue_overview"() RETURNS TABLE (
	"queue" TEXT,
	"paused" bool,
	"pending" bigint,
	"scheduled" bigint,
	"running" bigint,
	"expired_leases" bigint,
	"dead" bigint,
	"waiting" bigint,
	"blocked" bigint,
	"oldest_pending_age" interval,
	"counted_at" timestamp with time zone,
	"completed_last_hour" bigint,
	"failed_last_hour" bigint
)
STRICT
LANGUAGE c
AS 'MODULE_PATHNAME', 'queue_overview_wrapper';

CREATE FUNCTION leaseq."queue_throughput"(
	"minutes" INT DEFAULT 60
) RETURNS TABLE (
	"queue" TEXT,
	"minute" timestamp with time zone,
	"completed" bigint,
	"failed" bigint
)
LANGUAGE c
AS 'MODULE_PATHNAME', 'queue_throughput_wrapper';

CREATE FUNCTION leaseq."queue_workers"() RETURNS TABLE (
	"worker" TEXT,
	"queue" TEXT,
	"running" bigint,
	"oldest_started_at" timestamp with time zone,
	"next_expiry" timestamp with time zone,
	"expired" bigint
)
STRICT
LANGUAGE c
AS 'MODULE_PATHNAME', 'queue_workers_wrapper';

CREATE FUNCTION leaseq."queue_groups"(
	"queue" TEXT,
	"max_rows" INT DEFAULT 100
) RETURNS TABLE (
	"group_key" TEXT,
	"admitted" bigint,
	"waiting" bigint,
	"oldest_waiting_id" bigint
)
LANGUAGE c
AS 'MODULE_PATHNAME', 'queue_groups_wrapper';

CREATE FUNCTION leaseq."queue_privileges"() RETURNS TABLE (
	"queue" TEXT,
	"produce" bool,
	"work" bool,
	"observe" bool,
	"admin" bool
)
STRICT
LANGUAGE c
AS 'MODULE_PATHNAME', 'queue_privileges_wrapper';

CREATE FUNCTION leaseq."queue_redrive_batch"(
	"job_ids" bigint[]
) RETURNS SETOF bool
LANGUAGE c
AS 'MODULE_PATHNAME', 'queue_redrive_batch_wrapper';

CREATE FUNCTION leaseq."queue_cancel_batch"(
	"job_ids" bigint[]
) RETURNS SETOF bool
LANGUAGE c
AS 'MODULE_PATHNAME', 'queue_cancel_batch_wrapper';

-- sql/privileges.sql, word for word (scripts/test checks it): every upgrade ends with it.

-- Dependencies (src/lifecycle/depend.rs): a job waits for its parents in a status of its own,
-- with one edge per parent. Nothing in this script uses the new label: PostgreSQL refuses that
-- in the transaction that adds it.
ALTER TYPE leaseq.job_status ADD VALUE 'blocked';

CREATE TYPE leaseq.parent_failure AS ENUM ('cancel', 'dead', 'run');

CREATE TABLE leaseq.job_parents (
    child_id          bigint                NOT NULL,
    parent_id         bigint                NOT NULL,
    on_parent_failure leaseq.parent_failure NOT NULL,
    CONSTRAINT job_parents_pkey PRIMARY KEY (child_id, parent_id)
);
CREATE INDEX job_parents_parent_idx ON leaseq.job_parents (parent_id)
    INCLUDE (child_id, on_parent_failure);
SELECT pg_catalog.pg_extension_config_dump('leaseq.job_parents', '');

-- queue_enqueue and queue_enqueue_batch take depends_on (and the batch depends_on_each, each
-- job's own parents) and trace_context (below): new signatures, so the old ones are
-- dropped; 0.2.0's symbols stay in the library (src/compat/) for databases not yet updated.
DROP FUNCTION leaseq.queue_enqueue(text, jsonb, timestamptz, int, text, int, interval, text, text);
CREATE FUNCTION leaseq."queue_enqueue"(
	"queue" TEXT,
	"payload" jsonb,
	"run_at" timestamp with time zone DEFAULT NULL,
	"priority" INT DEFAULT 0,
	"dedupe_key" TEXT DEFAULT NULL,
	"max_attempts" INT DEFAULT NULL,
	"dedupe_for" interval DEFAULT NULL,
	"on_duplicate" TEXT DEFAULT 'ignore',
	"group_key" TEXT DEFAULT NULL,
	"depends_on" bigint[] DEFAULT NULL,
	"on_parent_failure" TEXT DEFAULT 'cancel',
	"trace_context" TEXT DEFAULT NULL
) RETURNS bigint
LANGUAGE c
AS 'MODULE_PATHNAME', 'enqueue_job_wrapper';

DROP FUNCTION leaseq.queue_enqueue_batch(text, jsonb[], timestamptz, int, text[]);
CREATE FUNCTION leaseq."queue_enqueue_batch"(
	"queue" TEXT,
	"payloads" jsonb[],
	"run_at" timestamp with time zone DEFAULT NULL,
	"priority" INT DEFAULT 0,
	"group_keys" TEXT[] DEFAULT NULL,
	"depends_on" bigint[] DEFAULT NULL,
	"on_parent_failure" TEXT DEFAULT 'cancel',
	"depends_on_each" jsonb DEFAULT NULL,
	"trace_context" TEXT DEFAULT NULL
) RETURNS SETOF bigint
LANGUAGE c
AS 'MODULE_PATHNAME', 'enqueue_jobs_wrapper';

-- A job's parents with their results (src/observe/inspect.rs).
CREATE FUNCTION leaseq."queue_parents"(
	"job_id" bigint
) RETURNS TABLE (
	"parent_id" bigint,
	"queue" TEXT,
	"status" leaseq.job_status,
	"result" jsonb
)
LANGUAGE c
AS 'MODULE_PATHNAME', 'queue_parents_wrapper';

-- The jobs that depend on a job (src/observe/inspect.rs).
CREATE FUNCTION leaseq."queue_children"(
	"job_id" bigint
) RETURNS TABLE (
	"child_id" bigint,
	"queue" TEXT,
	"status" leaseq.job_status
)
LANGUAGE c
AS 'MODULE_PATHNAME', 'queue_children_wrapper';

-- A graph of jobs at once, and how far it got (src/lifecycle/flow.rs).
CREATE FUNCTION leaseq."queue_flow"(
	"jobs" jsonb,
	"trace_context" TEXT DEFAULT NULL
) RETURNS TABLE (
	"key" TEXT,
	"job_id" bigint
)
LANGUAGE c
AS 'MODULE_PATHNAME', 'queue_flow_wrapper';

CREATE FUNCTION leaseq."queue_flow_status"(
	"root" bigint
) RETURNS TABLE (
	"jobs" bigint,
	"blocked" bigint,
	"pending" bigint,
	"running" bigint,
	"succeeded" bigint,
	"dead" bigint,
	"cancelled" bigint,
	"finished" bool
)
LANGUAGE c
AS 'MODULE_PATHNAME', 'queue_flow_status_wrapper';

-- Steps, recorded under the fence and read by retries (src/lifecycle/step.rs).
CREATE TABLE leaseq.job_steps (
    job_id      bigint      NOT NULL,
    name        text        NOT NULL,
    attempt_no  int         NOT NULL,
    output      jsonb,
    recorded_at timestamptz NOT NULL,
    CONSTRAINT job_steps_pkey PRIMARY KEY (job_id, name)
);
SELECT pg_catalog.pg_extension_config_dump('leaseq.job_steps', '');

CREATE FUNCTION leaseq."queue_step"(
	"job_id" bigint,
	"lease_token" uuid,
	"name" TEXT,
	"output" jsonb DEFAULT NULL
) RETURNS bool
LANGUAGE c
AS 'MODULE_PATHNAME', 'queue_step_wrapper';

CREATE FUNCTION leaseq."queue_steps"(
	"job_id" bigint
) RETURNS TABLE (
	"name" TEXT,
	"attempt_no" INT,
	"output" jsonb,
	"recorded_at" timestamp with time zone
)
LANGUAGE c
AS 'MODULE_PATHNAME', 'queue_steps_wrapper';

-- Progress (src/lifecycle/progress.rs): what a running job last reported, and when. Columns
-- without a default: no rewrite. queue_job returns them (0.2.0's definition, served from
-- src/compat/, returns the columns before them).
ALTER TABLE leaseq.jobs ADD COLUMN progress jsonb, ADD COLUMN progress_at timestamptz;

-- The producer's W3C traceparent, kept from enqueue to claim so that the worker's span joins
-- the producer's trace (src/lifecycle/enqueue.rs). Written once: last, in the row's unchanged
-- suffix, nullable without a default (no rewrite).
ALTER TABLE leaseq.jobs ADD COLUMN trace_context text;

-- queue_claim returns it: a new definition, with 0.3.0's entry point (0.1.0's and 0.2.0's
-- symbol, which the definition being replaced calls, is served from src/compat/).
DROP FUNCTION leaseq.queue_claim(text, text, int, interval);
CREATE FUNCTION leaseq."queue_claim"(
	"queue" TEXT,
	"worker" TEXT,
	"batch" INT DEFAULT 1,
	"lease" interval DEFAULT NULL
) RETURNS TABLE (
	"job_id" bigint,
	"lease_token" uuid,
	"attempt_no" INT,
	"payload" jsonb,
	"lease_expires_at" timestamp with time zone,
	"priority" INT,
	"enqueued_at" timestamp with time zone,
	"trace_context" TEXT
)
LANGUAGE c
AS 'MODULE_PATHNAME', 'claim_jobs_wrapper';

-- A schedule keeps a trace context, and its ticks' jobs carry it (src/lifecycle/schedule.rs):
-- queue_schedule takes it, a new definition with 0.3.0's entry point (the old symbol is served
-- from src/compat/).
ALTER TABLE leaseq.schedules ADD COLUMN trace_context text;
DROP FUNCTION leaseq.queue_schedule(text, text, text, jsonb, text, boolean);
CREATE FUNCTION leaseq."queue_schedule"(
	"name" TEXT,
	"queue" TEXT,
	"every" TEXT,
	"payload" jsonb,
	"timezone" TEXT DEFAULT 'UTC',
	"catch_up" bool DEFAULT false,
	"trace_context" TEXT DEFAULT NULL
) RETURNS timestamp with time zone
LANGUAGE c
AS 'MODULE_PATHNAME', 'schedule_ticks_wrapper';

DROP FUNCTION leaseq.queue_job(bigint);
CREATE FUNCTION leaseq."queue_job"(
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
	"group_key" TEXT,
	"progress" jsonb,
	"progress_at" timestamp with time zone
)
LANGUAGE c
AS 'MODULE_PATHNAME', 'inspect_job_wrapper';

CREATE FUNCTION leaseq."queue_progress"(
	"job_id" bigint,
	"lease_token" uuid,
	"progress" jsonb
) RETURNS bool
LANGUAGE c
AS 'MODULE_PATHNAME', 'queue_progress_wrapper';

-- Waits until jobs job_ids are all final or timeout passes (src/observe/wait.rs).
CREATE PROCEDURE leaseq."queue_await"(
	"job_ids" bigint[],
	"timeout" interval,
	INOUT "all_final" bool DEFAULT NULL,
	INOUT "unfinished" bigint[] DEFAULT NULL
)
LANGUAGE c
AS 'MODULE_PATHNAME', 'queue_await_wrapper';

-- A linked child's parents are read again when its transaction commits, not locked while it is
-- open (src/lifecycle/depend.rs).
CREATE FUNCTION leaseq."parents_read_at_commit"()
	RETURNS TRIGGER
	LANGUAGE c
	AS 'MODULE_PATHNAME', 'parents_read_at_commit_wrapper';

CREATE CONSTRAINT TRIGGER jobs_parents_read_at_commit
    AFTER INSERT ON leaseq.jobs DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.status::pg_catalog.text OPERATOR(pg_catalog.=) 'blocked')
    EXECUTE FUNCTION leaseq.parents_read_at_commit();

-- Metrics, the overview and the console find jobs held back — waiting for room in their group,
-- blocked by their parents — without scanning history: the statuses after 'cancelled', the last
-- of 0.1.0's. Not their literals, which an upgrade that adds a value (0.1.0 to 0.3.0 adds both)
-- may not use in its own transaction.
CREATE INDEX jobs_held_idx ON leaseq.jobs (queue, status, id)
    WHERE status OPERATOR(pg_catalog.>) 'cancelled' AND queue IS NOT NULL;

-- Jobs by queue and status, a row each (src/observe/stats.rs): queue_stats' successor.
CREATE FUNCTION leaseq."queue_counts"() RETURNS TABLE (
	"queue" TEXT,
	"status" leaseq.job_status,
	"jobs" bigint
)
STRICT
LANGUAGE c
AS 'MODULE_PATHNAME', 'queue_counts_wrapper';

-- Keys of purged jobs (src/lifecycle/purge.rs): a `dedupe_for` window outlives the job's row, so
-- a key is remembered when its job is purged, with the newest finish of its queue's jobs that had
-- it; enqueue reads it as it reads a finished job (src/lifecycle/enqueue.rs).
CREATE TABLE leaseq.purged_keys (
    queue       text        NOT NULL,
    dedupe_key  text        NOT NULL,
    job_id      bigint      NOT NULL,
    finished_at timestamptz NOT NULL,
    CONSTRAINT purged_keys_pkey PRIMARY KEY (queue, dedupe_key)
);
SELECT pg_catalog.pg_extension_config_dump('leaseq.purged_keys', '');

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
ALTER VIEW leaseq.attempts OWNER TO leaseq_owner;
-- Said, not left to the defaults: nobody else holds anything on them.
REVOKE ALL ON leaseq.queues, leaseq.jobs, leaseq.closed_attempts, leaseq.queue_grants,
              leaseq.schedules, leaseq.groups, leaseq.job_parents, leaseq.job_steps,
              leaseq.purged_keys, leaseq.attempts, leaseq.jobs_id_seq FROM PUBLIC;

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
