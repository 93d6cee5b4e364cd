//! The client-side operation log: every enqueue and every finish, as its client saw it — `ok`
//! (acknowledged), `error` (failed before its commit was sent), `unknown` (sent, no answer),
//! `refused` (a finish whose lease was no longer held) — and, from library workers' handlers,
//! when a handler returned an outcome for its worker to send (`returned`) and when its stop
//! token fired while it ran (`stop`); one JSON object per line, stamped with the wall clock
//! (`at`), written before the client goes on. After the run the logs are loaded into `faults.ops` on the primary
//! and checked against what the database holds.
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

use leaseq_client::Client;

use crate::cluster::Error;

pub struct OpLog(Mutex<std::fs::File>);

impl OpLog {
    pub fn create(path: &Path) -> std::io::Result<OpLog> {
        Ok(OpLog(Mutex::new(std::fs::File::create(path)?)))
    }

    /// Appends one line, stamped now (`at`) unless it says when it happened; a line is whole or
    /// absent even if the process is killed after.
    pub fn write(&self, mut op: serde_json::Value) {
        if op["at"].is_null() {
            op["at"] = now().into();
        }
        let line = format!("{op}\n");
        self.0
            .lock()
            .expect("op log")
            .write_all(line.as_bytes())
            .expect("the op log is writable");
    }
}

/// The wall clock, in seconds since the epoch: what `at` records. Every process of a run is on
/// one machine, so it reads the server's clock too (unless a scenario fakes the server's).
pub fn now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_secs_f64()
}

pub async fn create_table(admin: &Client) -> Result<(), Error> {
    admin
        .raw()
        .batch_execute(
            "CREATE TABLE faults.ops (kind text NOT NULL, op text, queue text,
                                      outcome text, job_id bigint, job_key text,
                                      lease_token uuid, attempt_no int, worker text,
                                      error text, at timestamptz NOT NULL)",
        )
        .await?;
    Ok(())
}

/// Loads every `*.jsonl` file of `dir` into `faults.ops`; the number of operations.
pub async fn load(admin: &Client, dir: &Path) -> Result<i64, Error> {
    let mut lines = String::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "jsonl") {
            lines.push_str(&std::fs::read_to_string(&path)?);
        }
    }
    // One jsonb array, unpacked by the server: no parsing of ours to get wrong.
    let array = format!(
        "[{}]",
        lines.trim_end().lines().collect::<Vec<_>>().join(",")
    );
    let loaded = admin
        .raw()
        .execute(
            "INSERT INTO faults.ops (kind, op, queue, outcome, job_id, job_key, lease_token,
                                     attempt_no, worker, error, at)
             SELECT o.kind, o.op, o.queue, o.outcome, o.job_id, o.job_key, o.lease_token,
                    o.attempt_no, o.worker, o.error, to_timestamp(o.at)
               FROM jsonb_to_recordset($1::text::jsonb) AS o(kind text, op text, queue text,
                    outcome text, job_id bigint, job_key text, lease_token uuid, attempt_no int,
                    worker text, error text, at float8)",
            &[&array],
        )
        .await?;
    Ok(loaded as i64)
}
