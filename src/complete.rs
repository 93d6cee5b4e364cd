//! Complete: `running` → `succeeded`, under the lease fence (see `lease`).
//!
//! The job row changes and its attempt is written to history in one statement (see `history`).
//! Application writes made in the same transaction as the call commit only if the call returned
//! true: the in-database exactly-once effect.
use pgrx::prelude::*;

use crate::args;
use crate::datum::{Jsonb, JsonbArray};
use crate::errors;
use crate::spi::{
    self, INT8, INT8_ARRAY, JSONB, JSONB_ARRAY, Statement, TIMESTAMPTZ, UUID, UUID_ARRAY,
};

const COMPLETE: Statement = Statement {
    sql: concat!(
        "WITH j AS (
              UPDATE leaseq.jobs j
                 SET status = 'succeeded',
                     result = $4,
                     lease_token = NULL,
                     lease_expires_at = NULL,
                     updated_at = $3,
                     finished_at = $3
               WHERE j.id = $1 AND j.lease_token = $2 AND j.status = 'running'
                 AND j.lease_expires_at > $3
              RETURNING j.id, j.worker, j.started_at),
          a AS (",
        close_attempt!(from: "j", token: "$2", ended_at: "$3", outcome: "'succeeded'", error: "NULL"),
        ")
          SELECT (SELECT count(*) FROM j), (SELECT count(*) FROM a)"
    ),
    params: &[INT8, UUID, TIMESTAMPTZ, JSONB],
};

/// Marks a running job `succeeded` with `result`, closing its attempt `succeeded`. Returns false,
/// changing nothing, when the lease token is not current, the job is not running, or the lease
/// has expired.
///
/// Errors: `22004` NULL job_id/lease_token, `54000` result over `leaseq.max_payload_bytes`,
/// `0A000` outside READ COMMITTED.
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
pub fn queue_complete(
    job_id: Option<i64>,
    lease_token: Option<pgrx::Uuid>,
    result: default!(Option<Jsonb>, "NULL"),
) -> bool {
    const F: &str = "queue_complete";
    let job_id = args::required(F, "job_id", job_id);
    let lease_token = args::required(F, "lease_token", lease_token);
    if let Some(result) = &result {
        args::document(F, "result", result);
    }
    args::read_committed(F);
    let now = spi::now();
    Spi::connect_mut(|client| {
        let counts = spi::run(
            client,
            &COMPLETE,
            &[
                job_id.into(),
                lease_token.into(),
                now.into(),
                Jsonb::arg(result),
            ],
        )
        .first();
        let jobs: i64 = counts.get(1).ok().flatten().unwrap_or(0);
        let attempts: i64 = counts.get(2).ok().flatten().unwrap_or(0);
        if jobs != attempts {
            errors::internal(F, "the job's attempt was not closed once");
        }
        jobs == 1
    })
}

/// `COMPLETE` for many jobs in one statement: `$1` ids, `$2` tokens, `$3` results (or NULL),
/// `$4` now. One row per input position: whether that job was completed.
const COMPLETE_BATCH: Statement = Statement {
    sql: concat!(
        "WITH i AS (
              SELECT * FROM unnest($1::bigint[], $2::uuid[],
                                   coalesce($3, array_fill(NULL::jsonb, ARRAY[cardinality($1)])))
                            WITH ORDINALITY AS i (id, token, result, ord)),
          j AS (
              UPDATE leaseq.jobs j
                 SET status = 'succeeded',
                     result = i.result,
                     lease_token = NULL,
                     lease_expires_at = NULL,
                     updated_at = $4,
                     finished_at = $4
                FROM i
               WHERE j.id = i.id AND j.lease_token = i.token AND j.status = 'running'
                 AND j.lease_expires_at > $4
              RETURNING j.id, i.token, j.worker, j.started_at),
          a AS (",
        close_attempt!(from: "j", token: "j.token", ended_at: "$4", outcome: "'succeeded'", error: "NULL"),
        ")
          SELECT i.ord, j.id IS NOT NULL, (SELECT count(*) FROM a)
            FROM i LEFT JOIN j ON j.id = i.id
           ORDER BY i.ord"
    ),
    params: &[INT8_ARRAY, UUID_ARRAY, JSONB_ARRAY, TIMESTAMPTZ],
};

/// `queue_complete` for many jobs at once, in one statement: returns one boolean per job, in
/// input order, each with the meaning and the fence of `queue_complete`. `results`, when given,
/// has one element (or NULL) per job.
///
/// Errors: `22004` NULL job_ids/lease_tokens or a NULL element of them (named by position),
/// `22023` arrays of different lengths, more than 10000 jobs, or a job id twice; `54000` a
/// result over `leaseq.max_payload_bytes`; `0A000` outside READ COMMITTED.
#[pg_extern]
pub fn queue_complete_batch(
    job_ids: Option<Vec<Option<i64>>>,
    lease_tokens: Option<Vec<Option<pgrx::Uuid>>>,
    results: default!(Option<JsonbArray>, "NULL"),
) -> SetOfIterator<'static, bool> {
    const F: &str = "queue_complete_batch";
    let (ids, tokens) = args::job_batch(F, job_ids, lease_tokens);
    args::documents_per_job(F, "results", results.as_ref(), ids.len());
    args::read_committed(F);
    if ids.is_empty() {
        return SetOfIterator::new(Vec::new());
    }
    let now = spi::now();
    let n = ids.len();
    let done: Vec<bool> = spi::connect_with_settings(|client| {
        let results_arg = match &results {
            Some(r) => r.arg(),
            None => pgrx::datum::DatumWithOid::null_oid(pgrx::pg_sys::JSONBARRAYOID),
        };
        let rows = spi::run(
            client,
            &COMPLETE_BATCH,
            &[ids.into(), tokens.into(), results_arg, now.into()],
        );
        let mut attempts_closed = 0i64;
        let done: Vec<bool> = rows
            .map(|row| {
                attempts_closed = row.get(3).ok().flatten().unwrap_or(0);
                row.get(2).ok().flatten().unwrap_or(false)
            })
            .collect();
        if done.iter().filter(|d| **d).count() as i64 != attempts_closed {
            errors::internal(F, "a job's current lease had no open attempt");
        }
        done
    });
    if done.len() != n {
        errors::internal(F, "a batch answered for a different number of jobs");
    }
    SetOfIterator::new(done)
}
