//! Read-only views of a queue's jobs and their attempt history, as typed rows: the extension's
//! `queue_jobs`, `queue_job` and `queue_attempts`, nothing read from its tables directly.
//!
//! Statuses and outcomes cross as text (`status::text`) and are decoded into `enums`' types.
//! `jsonb` columns arrive as `RawValue`s: the server's own text of the document, so user data
//! (payload, result) keeps every digit it was enqueued with.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::value::RawValue;
use tokio_postgres::Row;
use tokio_postgres::types::Json;

use crate::client::{Client, Error};
use crate::enums::{AttemptOutcome, JobStatus, ParentFailure};

const JOBS: &str =
    "SELECT job_id, status::text AS status, priority, run_at, attempts, max_attempts,
                           worker, lease_expires_at, last_error, created_at, finished_at
                      FROM leaseq.queue_jobs($1, $2::text::leaseq.job_status, $3)";
/// Every column, by name: `progress` and `progress_at` exist from 0.3.0 on, and a database not
/// yet updated from 0.2.0 is still served.
const JOB: &str = "SELECT job.*, job.status::text AS status_label FROM leaseq.queue_job($1) AS job";
const RESULT: &str = "SELECT leaseq.queue_result($1) AS result";
const AWAIT: &str =
    "CALL leaseq.queue_await($1, $2::bigint OPERATOR(pg_catalog.*) interval '1 microsecond')";
const PARENTS: &str = "SELECT parent_id, queue, status::text AS status, result
                         FROM leaseq.queue_parents($1)";
const CHILDREN: &str = "SELECT child_id, queue, status::text AS status
                          FROM leaseq.queue_children($1)";
const STEPS: &str = "SELECT name, attempt_no, output, recorded_at FROM leaseq.queue_steps($1)";
const FLOW: &str = "SELECT key, job_id FROM leaseq.queue_flow($1::text::jsonb, $2)";
const FLOW_STATUS: &str = "SELECT jobs, blocked, pending, running, succeeded, dead, cancelled,
                                  finished
                             FROM leaseq.queue_flow_status($1)";
const ATTEMPTS: &str = "SELECT attempt_no, worker, started_at, ended_at, outcome::text AS outcome,
                               error
                          FROM leaseq.queue_attempts($1)";

/// A row of `queue_jobs`.
#[derive(Clone, Debug)]
pub struct JobSummary {
    pub id: i64,
    pub status: JobStatus,
    pub priority: i32,
    pub run_at: DateTime<Utc>,
    /// Attempts started so far (a claim starts one).
    pub attempts: i32,
    pub max_attempts: i32,
    /// The worker holding or last holding the job.
    pub worker: Option<String>,
    pub lease_expires_at: Option<DateTime<Utc>>,
    pub last_error: Option<Box<RawValue>>,
    pub created_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
}

/// The row of `queue_job`: all of a job.
#[derive(Clone, Debug)]
pub struct JobDetail {
    pub id: i64,
    pub queue: String,
    pub status: JobStatus,
    pub priority: i32,
    pub run_at: DateTime<Utc>,
    pub attempts: i32,
    pub max_attempts: i32,
    pub worker: Option<String>,
    pub lease_expires_at: Option<DateTime<Utc>>,
    pub dedupe_key: Option<String>,
    pub payload: Box<RawValue>,
    pub result: Option<Box<RawValue>>,
    pub last_error: Option<Box<RawValue>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    /// Times it snoozed (`queue_snooze`).
    pub snoozes: i32,
    /// Its group (`queue_enqueue`'s `group_key`).
    pub group_key: Option<String>,
    /// What its running (or last) attempt last reported (`Client::progress`), and when.
    pub progress: Option<Box<RawValue>>,
    pub progress_at: Option<DateTime<Utc>>,
}

/// What `Client::await_jobs` saw last.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Awaited {
    /// Every job is final (succeeded, dead or cancelled).
    pub all_final: bool,
    /// The jobs not final yet, ascending; empty when all are.
    pub unfinished: Vec<i64>,
}

/// A row of `queue_attempts`: one claim of a job and how it ended.
#[derive(Clone, Debug)]
pub struct Attempt {
    /// The fencing generation this claim had.
    pub attempt_no: i32,
    pub worker: String,
    pub started_at: DateTime<Utc>,
    /// `None` while the attempt is open.
    pub ended_at: Option<DateTime<Utc>>,
    pub outcome: AttemptOutcome,
    pub error: Option<Box<RawValue>>,
}

impl Attempt {
    /// How long the attempt ran; `None` while it is open.
    pub fn duration(&self) -> Option<TimeDelta> {
        self.ended_at.map(|ended| ended - self.started_at)
    }
}

impl Client {
    /// `queue_jobs(queue, status, max_rows)`: the queue's most recent jobs, newest first.
    pub async fn jobs(
        &self,
        queue: &str,
        status: Option<JobStatus>,
        max_rows: i32,
    ) -> Result<Vec<JobSummary>, Error> {
        let status = status.map(JobStatus::label);
        let rows = self
            .raw()
            .query(JOBS, &[&queue, &status, &max_rows])
            .await?;
        rows.iter()
            .map(|r| {
                Ok(JobSummary {
                    id: r.try_get("job_id")?,
                    status: r.try_get("status")?,
                    priority: r.try_get("priority")?,
                    run_at: r.try_get("run_at")?,
                    attempts: r.try_get("attempts")?,
                    max_attempts: r.try_get("max_attempts")?,
                    worker: r.try_get("worker")?,
                    lease_expires_at: r.try_get("lease_expires_at")?,
                    last_error: json_or_null(r, "last_error")?,
                    created_at: r.try_get("created_at")?,
                    finished_at: r.try_get("finished_at")?,
                })
            })
            .collect()
    }

    /// `queue_job(job_id)`: the whole job (no progress on a database still at 0.2.0). The server
    /// refuses an unknown id (SQLSTATE 42704).
    pub async fn job(&self, job_id: i64) -> Result<JobDetail, Error> {
        let r = self.raw().query_one(JOB, &[&job_id]).await?;
        let reports = r.columns().iter().any(|c| c.name() == "progress");
        Ok(JobDetail {
            id: r.try_get("job_id")?,
            queue: r.try_get("queue")?,
            status: r.try_get("status_label")?,
            priority: r.try_get("priority")?,
            run_at: r.try_get("run_at")?,
            attempts: r.try_get("attempts")?,
            max_attempts: r.try_get("max_attempts")?,
            worker: r.try_get("worker")?,
            lease_expires_at: r.try_get("lease_expires_at")?,
            dedupe_key: r.try_get("dedupe_key")?,
            payload: r.try_get::<_, Json<Box<RawValue>>>("payload")?.0,
            result: json_or_null(&r, "result")?,
            last_error: json_or_null(&r, "last_error")?,
            created_at: r.try_get("created_at")?,
            updated_at: r.try_get("updated_at")?,
            finished_at: r.try_get("finished_at")?,
            snoozes: r.try_get("snoozes")?,
            group_key: r.try_get("group_key")?,
            progress: if reports {
                json_or_null(&r, "progress")?
            } else {
                None
            },
            progress_at: if reports {
                r.try_get("progress_at")?
            } else {
                None
            },
        })
    }

    /// `CALL queue_await(job_ids, timeout)`: returns once every job is final or `timeout`
    /// passes, woken by the finishing commits. The server commits between its looks and sleeps
    /// holding no snapshot, so it needs this connection to itself and outside a transaction.
    pub async fn await_jobs(&self, job_ids: &[i64], timeout: Duration) -> Result<Awaited, Error> {
        let timeout = i64::try_from(timeout.as_micros()).unwrap_or(i64::MAX);
        let r = self.raw().query_one(AWAIT, &[&job_ids, &timeout]).await?;
        Ok(Awaited {
            all_final: r.try_get("all_final")?,
            unfinished: r.try_get("unfinished")?,
        })
    }

    /// What the job returned when it succeeded; none until then.
    pub async fn result(&self, job_id: i64) -> Result<Option<Box<RawValue>>, Error> {
        let row = self.raw().query_one(RESULT, &[&job_id]).await?;
        json_or_null(&row, "result")
    }

    /// `queue_parents(job_id)`: the jobs it depends on, oldest first, with their results once
    /// they succeeded — what a child's handler reads its inputs from.
    pub async fn parents(&self, job_id: i64) -> Result<Vec<Parent>, Error> {
        let rows = self.raw().query(PARENTS, &[&job_id]).await?;
        rows.iter()
            .map(|r| {
                Ok(Parent {
                    id: r.try_get("parent_id")?,
                    queue: r.try_get("queue")?,
                    status: r.try_get("status")?,
                    result: json_or_null(r, "result")?,
                })
            })
            .collect()
    }

    /// `queue_children(job_id)`: the jobs that depend on it, oldest first.
    pub async fn children(&self, job_id: i64) -> Result<Vec<Child>, Error> {
        let rows = self.raw().query(CHILDREN, &[&job_id]).await?;
        rows.iter()
            .map(|r| {
                Ok(Child {
                    id: r.try_get("child_id")?,
                    queue: r.try_get("queue")?,
                    status: r.try_get("status")?,
                })
            })
            .collect()
    }

    /// `queue_flow(jobs)`: a graph of jobs in one call (checked whole before anything is
    /// inserted); each node's key with its job id, in the order given.
    pub async fn flow(&self, nodes: &[FlowNode]) -> Result<Vec<(String, i64)>, Error> {
        self.flow_text(&flow_json(nodes)).await
    }

    /// `queue_flow` of a flow already written as JSON text (an array of nodes: `key`, `queue`,
    /// `payload`, `depends_on`, `on_parent_failure`, `priority`, `max_attempts`).
    pub async fn flow_text(&self, text: &str) -> Result<Vec<(String, i64)>, Error> {
        let rows = self
            .raw()
            .query(FLOW, &[&text, &crate::trace::traceparent()])
            .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("key")?, r.try_get("job_id")?)))
            .collect()
    }

    /// `queue_flow_status(root)`: the job and every job that depends on it, by status.
    pub async fn flow_status(&self, root: i64) -> Result<FlowStatus, Error> {
        let r = self.raw().query_one(FLOW_STATUS, &[&root]).await?;
        Ok(FlowStatus {
            jobs: r.try_get("jobs")?,
            blocked: r.try_get("blocked")?,
            pending: r.try_get("pending")?,
            running: r.try_get("running")?,
            succeeded: r.try_get("succeeded")?,
            dead: r.try_get("dead")?,
            cancelled: r.try_get("cancelled")?,
            finished: r.try_get("finished")?,
        })
    }

    /// `queue_steps(job_id)`: the steps its attempts recorded (`Client::step`), in order.
    pub async fn steps(&self, job_id: i64) -> Result<Vec<Step>, Error> {
        let rows = self.raw().query(STEPS, &[&job_id]).await?;
        rows.iter()
            .map(|r| {
                Ok(Step {
                    name: r.try_get("name")?,
                    attempt_no: r.try_get("attempt_no")?,
                    output: json_or_null(r, "output")?,
                    recorded_at: r.try_get("recorded_at")?,
                })
            })
            .collect()
    }

    /// `queue_attempts(job_id)`: the job's attempts, oldest first.
    pub async fn attempts(&self, job_id: i64) -> Result<Vec<Attempt>, Error> {
        let rows = self.raw().query(ATTEMPTS, &[&job_id]).await?;
        rows.iter()
            .map(|r| {
                Ok(Attempt {
                    attempt_no: r.try_get("attempt_no")?,
                    worker: r.try_get("worker")?,
                    started_at: r.try_get("started_at")?,
                    ended_at: r.try_get("ended_at")?,
                    outcome: r.try_get("outcome")?,
                    error: json_or_null(r, "error")?,
                })
            })
            .collect()
    }
}

/// A row of `queue_parents`.
#[derive(Clone, Debug)]
pub struct Parent {
    pub id: i64,
    /// `None` once purged by its queue's retention.
    pub queue: Option<String>,
    pub status: Option<JobStatus>,
    /// What it returned, once it succeeded.
    pub result: Option<Box<RawValue>>,
}

/// A row of `queue_children`.
#[derive(Clone, Debug, PartialEq)]
pub struct Child {
    pub id: i64,
    /// `None` once purged by its queue's retention.
    pub queue: Option<String>,
    pub status: Option<JobStatus>,
}

/// A row of `queue_steps`.
#[derive(Clone, Debug)]
pub struct Step {
    pub name: String,
    /// The attempt that recorded it.
    pub attempt_no: i32,
    pub output: Option<Box<RawValue>>,
    pub recorded_at: DateTime<Utc>,
}

/// One node of a flow (`Client::flow`).
#[derive(Clone, Debug, Default)]
pub struct FlowNode {
    /// The node's name within the flow, which `depends_on` refers to.
    pub key: String,
    pub queue: String,
    /// The payload's JSON text (`{}` when empty), sent as it is: every digit kept.
    pub payload: String,
    /// Keys of the nodes this one waits for.
    pub depends_on: Vec<String>,
    pub on_parent_failure: ParentFailure,
    pub priority: i32,
    /// `None`: the queue's budget.
    pub max_attempts: Option<i32>,
}

/// A row of `queue_flow_status`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowStatus {
    pub jobs: i64,
    pub blocked: i64,
    /// Pending, or waiting for room in their group.
    pub pending: i64,
    pub running: i64,
    pub succeeded: i64,
    pub dead: i64,
    pub cancelled: i64,
    /// Every job of the flow is final.
    pub finished: bool,
}

/// The flow's JSON text: the payloads as given, the rest quoted by serde_json.
fn flow_json(nodes: &[FlowNode]) -> String {
    let quoted = |text: &str| serde_json::Value::from(text).to_string();
    let nodes: Vec<String> = nodes
        .iter()
        .map(|node| {
            let depends_on: Vec<String> = node.depends_on.iter().map(|k| quoted(k)).collect();
            let payload = if node.payload.trim().is_empty() {
                "{}"
            } else {
                node.payload.as_str()
            };
            let max_attempts = node
                .max_attempts
                .map_or(String::new(), |n| format!(r#","max_attempts":{n}"#));
            format!(
                r#"{{"key":{},"queue":{},"payload":{payload},"depends_on":[{}],"on_parent_failure":"{}","priority":{}{max_attempts}}}"#,
                quoted(&node.key),
                quoted(&node.queue),
                depends_on.join(","),
                node.on_parent_failure.label(),
                node.priority,
            )
        })
        .collect();
    format!("[{}]", nodes.join(","))
}

/// A nullable `jsonb` column as its document's text.
fn json_or_null(row: &Row, column: &str) -> Result<Option<Box<RawValue>>, Error> {
    Ok(row
        .try_get::<_, Option<Json<Box<RawValue>>>>(column)?
        .map(|json| json.0))
}
