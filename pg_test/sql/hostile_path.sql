-- A caller that tries to get its own code run inside leaseq's statements: a schema of its own
-- first on search_path, holding look-alikes of functions and operators those statements use
-- (each refuses loudly if it is ever called), and temp tables named like leaseq's. Every call
-- must work as it does for anyone else; the rows are read afterwards with the path reset.
\pset pager off
SET client_min_messages = warning;
DROP SCHEMA IF EXISTS hostile CASCADE;
CREATE SCHEMA hostile;
CREATE FUNCTION hostile.refuse_uuid(uuid, uuid) RETURNS boolean LANGUAGE plpgsql
    AS $$ BEGIN RAISE EXCEPTION 'hostile = on uuid called'; END $$;
CREATE OPERATOR hostile.= (LEFTARG = uuid, RIGHTARG = uuid, FUNCTION = hostile.refuse_uuid);
CREATE FUNCTION hostile.refuse_bigint(bigint, bigint) RETURNS boolean LANGUAGE plpgsql
    AS $$ BEGIN RAISE EXCEPTION 'hostile = on bigint called'; END $$;
CREATE OPERATOR hostile.= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = hostile.refuse_bigint);
CREATE FUNCTION hostile.refuse_status(leaseq.job_status, leaseq.job_status) RETURNS boolean
    LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'hostile = on job_status called'; END $$;
CREATE OPERATOR hostile.= (LEFTARG = leaseq.job_status, RIGHTARG = leaseq.job_status,
                           FUNCTION = hostile.refuse_status);
CREATE FUNCTION hostile.refuse_time(timestamptz, timestamptz) RETURNS boolean LANGUAGE plpgsql
    AS $$ BEGIN RAISE EXCEPTION 'hostile comparison of timestamps called'; END $$;
CREATE OPERATOR hostile.<= (LEFTARG = timestamptz, RIGHTARG = timestamptz,
                            FUNCTION = hostile.refuse_time);
CREATE OPERATOR hostile.> (LEFTARG = timestamptz, RIGHTARG = timestamptz,
                           FUNCTION = hostile.refuse_time);
CREATE FUNCTION hostile.unnest(bigint[]) RETURNS SETOF bigint LANGUAGE plpgsql
    AS $$ BEGIN RAISE EXCEPTION 'hostile unnest called'; END $$;
CREATE FUNCTION hostile.cardinality(anyarray) RETURNS int LANGUAGE plpgsql
    AS $$ BEGIN RAISE EXCEPTION 'hostile cardinality called'; END $$;
CREATE FUNCTION hostile.jsonb_build_object(text, timestamptz, text, text) RETURNS jsonb
    LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'hostile jsonb_build_object called'; END $$;
CREATE TEMP TABLE queues (name text);
CREATE TEMP TABLE jobs (id bigint);
CREATE TEMP TABLE closed_attempts (job_id bigint);

-- The caller is no superuser: a role in leaseq_admin (so it may call every function). Its
-- schema is open to everyone, so that whatever role leaseq's statements run as could see it.
DO $$ BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'hostile_caller') THEN
        CREATE ROLE hostile_caller NOLOGIN;
    END IF;
END $$;
GRANT leaseq_admin TO hostile_caller;
GRANT USAGE ON SCHEMA hostile TO PUBLIC;
SET ROLE hostile_caller;
SET search_path = hostile, pg_catalog, public;
SELECT leaseq.queue_create('hostile_path', lease => '1 minute', backoff_base => '1 hour', backoff_cap => '1 hour');
SELECT leaseq.queue_enqueue('hostile_path', '{"n": 1}') IS NOT NULL AS enqueued;
SELECT count(*) AS enqueued FROM leaseq.queue_enqueue_batch('hostile_path',
    ARRAY['{"n": 2}', '{"n": 3}', '{"n": 4}', '{"n": 5}']::jsonb[]);
CREATE TEMP TABLE hostile_claimed AS SELECT * FROM leaseq.queue_claim('hostile_path', 'w', 5);
SELECT count(*) AS claimed FROM hostile_claimed;
SELECT count(*) FILTER (WHERE expires IS NOT NULL) AS renewed
  FROM leaseq.queue_renew_batch((SELECT array_agg(job_id ORDER BY job_id) FROM hostile_claimed),
                                (SELECT array_agg(lease_token ORDER BY job_id) FROM hostile_claimed))
       AS expires;
SELECT leaseq.queue_renew(job_id, lease_token) IS NOT NULL AS renewed
  FROM hostile_claimed WHERE payload->>'n' = '1';
SELECT leaseq.queue_complete(job_id, lease_token, '{"ok": true}') AS completed
  FROM hostile_claimed WHERE payload->>'n' = '1';
SELECT done FROM leaseq.queue_complete_batch(
    (SELECT array_agg(job_id ORDER BY job_id) FROM hostile_claimed WHERE payload->>'n' IN ('2', '3')),
    (SELECT array_agg(lease_token ORDER BY job_id) FROM hostile_claimed WHERE payload->>'n' IN ('2', '3')))
    AS done;
SELECT leaseq.queue_fail(job_id, lease_token, '{"error": "permanent"}', retry => false) AS failed
  FROM hostile_claimed WHERE payload->>'n' = '4';
SELECT status FROM leaseq.queue_fail_batch(
    (SELECT array_agg(job_id) FROM hostile_claimed WHERE payload->>'n' = '5'),
    (SELECT array_agg(lease_token) FROM hostile_claimed WHERE payload->>'n' = '5'),
    ARRAY['{"error": "transient"}']::jsonb[]) AS status;
SELECT leaseq.queue_redrive(job_id) AS redriven FROM hostile_claimed WHERE payload->>'n' = '4';
SELECT leaseq.queue_cancel(job_id) AS cancelled FROM hostile_claimed WHERE payload->>'n' = '4';
SELECT pending, running, succeeded, dead, cancelled
  FROM leaseq.queue_stats() WHERE queue = 'hostile_path';
SELECT count(*) AS listed FROM leaseq.queue_jobs('hostile_path');
SELECT count(*) AS attempts FROM hostile_claimed, leaseq.queue_attempts(job_id);
RESET search_path;
RESET ROLE;

-- What the calls did, read with the path reset: as for any caller.
SELECT j.payload->>'n' AS n, j.status, j.attempts, j.result
  FROM leaseq.jobs AS j WHERE j.queue = 'hostile_path' ORDER BY j.id;
SELECT count(*) AS history_rows FROM leaseq.closed_attempts AS c
  JOIN leaseq.jobs AS j ON j.id = c.job_id WHERE j.queue = 'hostile_path';
DROP SCHEMA hostile CASCADE;
