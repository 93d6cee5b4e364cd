//! Redrive: `dead` → `pending`, now, with a fresh retry budget.
//!
//! `attempts` (the budget used in the current life) goes back to 0; the attempt history stays,
//! and the next claim numbers its attempt after all of it (`MAX(attempt_no) + 1`), so a
//! redriven job can never collide with its own past — not even when a lease expires.
//! A dead job whose `dedupe_key` is meanwhile held by another live job cannot come back while
//! that job lives: redrive then raises `23505` on `jobs_dedupe_key_live`.
//! A redriven job of a group waits for room like any other of its jobs, ahead of those enqueued
//! after it (`group`).
use pgrx::prelude::*;

use crate::core::access;
use crate::core::args;
use crate::core::clock;
use crate::core::connect::{self, JOB_PATH};
use crate::core::datum::{IdArray, QueuePrivilege};
use crate::core::spi::{self, INT4, INT8, Statement, TEXT, TIMESTAMPTZ};
use crate::lifecycle::depend;
use crate::lifecycle::group;
use crate::lifecycle::job;
use crate::lifecycle::queue;

pub(crate) const REDRIVE: Statement = Statement {
    name: "redrive",
    sql: "UPDATE leaseq.jobs AS job
             SET status = 'pending', attempts = 0, run_at = $2, updated_at = $2, finished_at = NULL
           WHERE job.id = $1 AND job.status = 'dead'
          RETURNING job.id",
    params: &[INT8, TIMESTAMPTZ],
};

pub(crate) const REDRIVE_ALL: Statement = Statement {
    name: "redrive_all",
    sql: "WITH chosen AS (
              SELECT job.id FROM leaseq.jobs AS job
               WHERE job.queue = $1 AND job.lane = 'dead'
               ORDER BY job.id
               LIMIT $3
                 FOR UPDATE SKIP LOCKED),
          redriven AS (
              UPDATE leaseq.jobs AS job
                 SET status = 'pending', attempts = 0, run_at = $2, updated_at = $2,
                     finished_at = NULL
                FROM chosen
               WHERE job.id = chosen.id AND job.status = 'dead'
              RETURNING job.id)
          SELECT coalesce(array_agg(redriven.id), '{}') FROM redriven",
    params: &[TEXT, TIMESTAMPTZ, INT4],
};

/// Makes a `dead` job `pending` and due now, with its retry budget reset and its history kept.
/// Returns false when the job is not dead.
///
/// Errors: `22004` NULL job_id, `42704` no such job, `23505` its dedupe key is held by a live job.
#[pg_extern]
pub fn queue_redrive(job_id: Option<i64>) -> bool {
    const F: &str = "queue_redrive";
    let job_id = args::required(F, "job_id", job_id);
    let now = clock::now();
    access::require_jobs(F, &[job_id], QueuePrivilege::Admin);
    connect::connect(&JOB_PATH, |client| {
        if !spi::run(client, &REDRIVE, &[job_id.into(), now.into()]).is_empty() {
            group::redriven(client, &[job_id], now);
            depend::redriven(client, &[job_id], now);
            return true;
        }
        job::require_exists(client, F, job_id);
        false
    })
}

/// Redrives up to `max_jobs` (NULL: all) of `queue`'s dead jobs, oldest first, and returns how
/// many. Dead jobs locked by a concurrent transaction are skipped.
///
/// Errors: `22004` NULL queue, `22023` invalid name or max_jobs < 1, `42704` unknown queue,
/// `23505` as `queue_redrive`.
#[pg_extern]
pub fn queue_redrive_all(queue: Option<&str>, max_jobs: default!(Option<i32>, "NULL")) -> i64 {
    const F: &str = "queue_redrive_all";
    let queue = args::queue_name(F, queue);
    if let Some(max_jobs) = max_jobs {
        let all = Some(", or NULL for all");
        args::int_in_range(F, "max_jobs", max_jobs, 1..=i32::MAX, all);
    }
    let now = clock::now();
    access::require_queue(F, queue, QueuePrivilege::Admin);
    connect::connect(&JOB_PATH, |client| {
        queue::load(client, F, queue);
        let redriven: Vec<i64> = spi::run(
            client,
            &REDRIVE_ALL,
            &[queue.into(), now.into(), max_jobs.into()],
        )
        .single(|row| row.required(1));
        group::redriven(client, &redriven, now);
        depend::redriven(client, &redriven, now);
        redriven.len() as i64
    })
}

/// `queue_redrive` of each of `job_ids` (at most 10000), in one transaction: a boolean per id,
/// in input order — true where the job was dead and is pending again, false where it was not
/// dead. For a console's "redrive the selected jobs".
///
/// Errors: `22004` NULL job_ids or element, `22023` more than 10000 ids or an id twice, `42704`
/// an id no job has, `42501` without the `admin` privilege on a job's queue, `23505` as
/// `queue_redrive` — each before anything changed.
#[pg_extern]
pub fn queue_redrive_batch(job_ids: Option<IdArray>) -> SetOfIterator<'static, bool> {
    const F: &str = "queue_redrive_batch";
    let job_ids = args::job_ids(F, job_ids);
    let now = clock::now();
    access::require_jobs(F, &job_ids, QueuePrivilege::Admin);
    let redriven = connect::connect(&JOB_PATH, |client| {
        job::require_all_exist(client, F, &job_ids);
        let redriven: Vec<bool> = job_ids
            .iter()
            .map(|&id| !spi::run(client, &REDRIVE, &[id.into(), now.into()]).is_empty())
            .collect();
        let ids: Vec<i64> = job_ids
            .iter()
            .zip(&redriven)
            .filter_map(|(&id, &r)| r.then_some(id))
            .collect();
        group::redriven(client, &ids, now);
        depend::redriven(client, &ids, now);
        redriven
    });
    SetOfIterator::new(redriven)
}
