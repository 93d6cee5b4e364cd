//! The install DDL lives in `sql/schema.sql`, one source for types, tables and indexes; it runs
//! before every generated function, which all refer to its objects by qualified name.
use pgrx::prelude::*;

extension_sql_file!("../sql/schema.sql", name = "schema", bootstrap);

// Every statement on the job path has one right plan: an index walk over one queue's due work,
// or nested loops reaching single jobs through their primary key. Left to itself the planner
// strays from it exactly when it hurts: the plan cache re-plans each backend's first calls with
// the parameters' values (custom plans, measured at 10% of a claim); a generic plan for
// `LIMIT $n` guesses hundreds of rows and hash- or merge-joins the claimed ids against every
// pending job; and any plan made while statistics still describe an empty table (a new queue,
// a truncated one) prefers scans that grow with the queue. So the job-path functions take
// generic plans, made once per backend, with sequential scans and hash and merge joins ruled out
// (the partial indexes' predicates keep single-job statements on jobs_pkey; see sql/schema.sql).
// Not queue_stats, queue_jobs and queue_purge: they read whole queues.
extension_sql!(
    r#"
DO $$
DECLARE f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
              WHERE p.pronamespace = 'leaseq'::regnamespace AND p.prokind = 'f'
                AND p.proname NOT IN ('queue_stats', 'queue_jobs', 'queue_purge')
    LOOP
        EXECUTE pg_catalog.format(
            'ALTER FUNCTION %s SET plan_cache_mode = force_generic_plan SET enable_seqscan = off '
            'SET enable_hashjoin = off SET enable_mergejoin = off', f);
    END LOOP;
END $$;
"#,
    name = "job_path_plans",
    finalize
);
