//! A job named by its id, by the functions that take no lease token (redrive, cancel, inspect):
//! `42704` when no job has it.
use pgrx::spi::SpiClient;

use crate::core::errors;
use crate::core::spi::{self, INT8, Statement};

pub(crate) const EXISTS: Statement = Statement {
    name: "job.exists",
    sql: "SELECT 1 FROM leaseq.jobs AS job WHERE job.id = $1",
    params: &[INT8],
};

/// Raises `42704` unless a job has the id `job_id`.
pub fn require_exists(client: &mut SpiClient<'_>, function: &str, job_id: i64) {
    if spi::run(client, &EXISTS, &[job_id.into()]).is_empty() {
        errors::unknown_job(function, job_id);
    }
}
