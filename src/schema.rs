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
// generic plans, made once per backend, with sequential scans and hash and merge joins ruled out,
// and without JIT: a generic claim plan's estimated cost grows with the backlog (it guesses that
// `LIMIT $n` takes a tenth of the due jobs) and passes `jit_above_cost` near a million due jobs,
// after which every claim spent 9 ms compiling its plan (0.08× the rate of a small backlog,
// measured). The partial indexes' predicates keep single-job statements on jobs_pkey (see
// sql/schema.sql).
// Not queue_stats, queue_jobs and queue_purge: they read whole queues. And not the set-returning
// job-path functions, which apply the same settings themselves, once per call
// (`spi::connect_with_settings`; the test below keeps the two lists equal).
extension_sql!(
    r#"
DO $$
DECLARE f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
              WHERE p.pronamespace = 'leaseq'::regnamespace AND p.prokind = 'f'
                AND p.proname NOT IN ('queue_stats', 'queue_jobs', 'queue_purge', 'queue_claim',
                                      'queue_enqueue_batch', 'queue_complete_batch',
                                      'queue_fail_batch')
    LOOP
        EXECUTE pg_catalog.format(
            'ALTER FUNCTION %s SET plan_cache_mode = force_generic_plan SET enable_seqscan = off '
            'SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off', f);
    END LOOP;
END $$;
"#,
    name = "job_path_plans",
    finalize
);

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use pgrx::prelude::*;

    /// Functions with `SET` clauses and those applying `spi::SETTINGS` themselves run their
    /// statements under the same settings (a differing search_path would also make kept plans
    /// re-analyse on every switch).
    #[pg_test]
    fn job_path_functions_all_run_under_the_same_settings() {
        let expected: Vec<String> = crate::spi::SETTINGS
            .iter()
            .map(|(n, v)| format!("{}={}", n.to_str().unwrap(), v.to_str().unwrap()))
            .collect();
        for f in [
            "queue_enqueue",
            "queue_complete",
            "queue_fail",
            "queue_renew",
            "queue_cancel",
        ] {
            let config = Spi::get_one::<Vec<String>>(&format!(
                "SELECT proconfig FROM pg_proc WHERE proname = '{f}'
                    AND pronamespace = 'leaseq'::regnamespace"
            ));
            let mut config = config.unwrap().unwrap();
            config.sort();
            let mut expected = expected.clone();
            expected.sort();
            assert_eq!(config, expected, "{f}");
        }
        let srf_config = Spi::get_one::<i64>(
            "SELECT count(*) FROM pg_proc WHERE pronamespace = 'leaseq'::regnamespace
                AND proname IN ('queue_claim', 'queue_enqueue_batch', 'queue_complete_batch',
                                'queue_fail_batch')
                AND proconfig IS NOT NULL",
        );
        assert_eq!(srf_config, Ok(Some(0)));
    }

    #[pg_test]
    fn a_set_returning_call_restores_the_callers_settings() {
        Spi::run("SET enable_seqscan = on").unwrap();
        Spi::run("SET search_path = public").unwrap();
        Spi::run("SELECT leaseq.queue_create('settings_restored')").unwrap();
        Spi::run("SELECT count(*) FROM leaseq.queue_claim('settings_restored', 'w', 10)").unwrap();
        let seqscan = Spi::get_one::<String>("SHOW enable_seqscan");
        assert_eq!(seqscan, Ok(Some("on".to_string())));
        let path = Spi::get_one::<String>("SHOW search_path");
        assert_eq!(path, Ok(Some("public".to_string())));
    }
}
