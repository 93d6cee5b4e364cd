//! Payload search: `queue_index_payloads`, the index that makes `queue_jobs`' payload filter
//! cost the matches instead of a walk through the history (observe/inspect.rs,
//! `JOBS_BY_PAYLOAD`). Not made by default: no update of a job is HOT (claims and finishes
//! change `status`, which the partial indexes name), so every index on `leaseq.jobs` is written
//! at enqueue, claim and finish — its cost is in docs/benchmarks.md, section 17.
use pgrx::prelude::*;

use crate::core::args;
use crate::core::connect::{self, WHOLE_QUEUE};
use crate::core::spi::{self, Statement};
use crate::observe::inspect::PAYLOADS_INDEXED;

/// Each job's payload under its queue's name, `{queue: payload}`, so that one probe finds one
/// queue's matches. While it is built, enqueues, claims and finishes wait (`ShareLock`).
pub(crate) const CREATE: Statement = Statement {
    name: "search.create",
    sql:
        "CREATE INDEX IF NOT EXISTS jobs_payload_idx ON leaseq.jobs
              USING gin ((pg_catalog.jsonb_set('{}'::jsonb, ARRAY[queue], payload)) jsonb_path_ops)",
    params: &[],
};

pub(crate) const DROP: Statement = Statement {
    name: "search.drop",
    sql: "DROP INDEX IF EXISTS leaseq.jobs_payload_idx",
    params: &[],
};

/// Makes (`enabled`) or drops the index of payloads that `queue_jobs(payload_contains => …)`
/// searches; true when it made or dropped it, false when it already was as asked. Making it
/// reads every job and blocks the queue's writes until done: on a busy database run
/// `CREATE INDEX CONCURRENTLY` with the same definition instead (docs/design.md, "The console").
///
/// Errors: `22004` NULL enabled.
#[pg_extern]
pub fn queue_index_payloads(enabled: Option<bool>) -> bool {
    let enabled = args::required("queue_index_payloads", "enabled", enabled);
    connect::connect(&WHOLE_QUEUE, |client| {
        let indexed: bool = spi::run(client, &PAYLOADS_INDEXED, &[]).single(|row| row.required(1));
        if indexed == enabled {
            return false;
        }
        spi::run(client, if enabled { &CREATE } else { &DROP }, &[]);
        true
    })
}
