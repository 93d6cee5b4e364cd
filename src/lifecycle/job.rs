//! A job named by its id, by the functions that take no lease token (redrive, cancel, inspect):
//! `42704` when no job has it.
use pgrx::spi::SpiClient;

use crate::core::errors;
use crate::core::spi::{self, INT8, INT8_ARRAY, Statement};

pub(crate) const EXISTS: Statement = Statement {
    name: "job.exists",
    sql: "SELECT 1 FROM leaseq.jobs AS job WHERE job.id = $1",
    params: &[INT8],
};

/// The first of `$1` that no job has.
pub(crate) const MISSING: Statement = Statement {
    name: "job.missing",
    sql: "SELECT wanted.id
            FROM unnest($1::bigint[]) WITH ORDINALITY AS wanted (id, at)
           WHERE NOT EXISTS (SELECT FROM leaseq.jobs AS job WHERE job.id = wanted.id)
           ORDER BY wanted.at
           LIMIT 1",
    params: &[INT8_ARRAY],
};

/// Raises `42704`, naming the first, unless every one of `job_ids` is a job's id.
pub fn require_all_exist(client: &mut SpiClient<'_>, function: &str, job_ids: &[i64]) {
    if let Some(missing) = first_missing(client, job_ids) {
        errors::unknown_job(function, missing);
    }
}

/// The first of `job_ids` that no job has.
pub fn first_missing(client: &mut SpiClient<'_>, job_ids: &[i64]) -> Option<i64> {
    spi::run(client, &MISSING, &[job_ids.to_vec().into()]).first(|row| row.required(1))
}

/// Raises `42704` unless a job has the id `job_id`.
pub fn require_exists(client: &mut SpiClient<'_>, function: &str, job_id: i64) {
    if spi::run(client, &EXISTS, &[job_id.into()]).is_empty() {
        errors::unknown_job(function, job_id);
    }
}
