//! Read-only views of a queue's jobs and their attempt history, as typed rows: the extension's
//! `queue_jobs`, `queue_job` and `queue_attempts`, nothing read from its tables directly.
//!
//! Statuses and outcomes cross as text (`status::text`) and are decoded here, so that a label
//! this client does not know is a decoding error of that column rather than a silent default.
//! `jsonb` columns arrive as `RawValue`s: the server's own text of the document, so user data
//! (payload, result) keeps every digit it was enqueued with.

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::value::RawValue;
use tokio_postgres::Row;
use tokio_postgres::types::Json;

use crate::client::{Client, Error};

const JOBS: &str =
    "SELECT job_id, status::text AS status, priority, run_at, attempts, max_attempts,
                           worker, lease_expires_at, last_error, created_at, finished_at
                      FROM leaseq.queue_jobs($1, $2::text::leaseq.job_status, $3)";
const JOB: &str = "SELECT job_id, queue, status::text AS status, priority, run_at, attempts,
                          max_attempts, worker, lease_expires_at, dedupe_key, payload, result,
                          last_error, created_at, updated_at, finished_at, snoozes, group_key
                     FROM leaseq.queue_job($1)";
const RESULT: &str = "SELECT leaseq.queue_result($1) AS result";
const ATTEMPTS: &str = "SELECT attempt_no, worker, started_at, ended_at, outcome::text AS outcome,
                               error
                          FROM leaseq.queue_attempts($1)";

/// Generates a Rust enum for one of the extension's SQL enums, with its labels, `Display`,
/// `FromStr` and decoding from the label's text.
macro_rules! sql_enum {
    ($(#[$doc:meta])* $ty:ident, $what:literal, { $($variant:ident => $label:literal,)* }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $ty {
            $($variant,)*
        }

        impl $ty {
            /// Every value, in the SQL enum's order.
            pub const ALL: &[$ty] = &[$($ty::$variant,)*];

            /// The SQL label.
            pub fn label(self) -> &'static str {
                match self {
                    $($ty::$variant => $label,)*
                }
            }
        }

        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.label())
            }
        }

        impl std::str::FromStr for $ty {
            type Err = String;

            fn from_str(label: &str) -> Result<$ty, String> {
                match label {
                    $($label => Ok($ty::$variant),)*
                    _ => Err(format!(
                        concat!("unknown ", $what, " {:?}: expected one of {}"),
                        label,
                        $ty::ALL.iter().map(|v| v.label()).collect::<Vec<_>>().join(", ")
                    )),
                }
            }
        }

        impl<'a> tokio_postgres::types::FromSql<'a> for $ty {
            fn from_sql(
                ty: &tokio_postgres::types::Type,
                raw: &'a [u8],
            ) -> Result<$ty, Box<dyn std::error::Error + Sync + Send>> {
                Ok(<&str as tokio_postgres::types::FromSql>::from_sql(ty, raw)?.parse()?)
            }

            fn accepts(ty: &tokio_postgres::types::Type) -> bool {
                <&str as tokio_postgres::types::FromSql>::accepts(ty)
            }
        }
    };
}
pub(crate) use sql_enum;

sql_enum!(
    /// `leaseq.job_status`.
    JobStatus, "job status", {
        Pending => "pending",
        Running => "running",
        Succeeded => "succeeded",
        Dead => "dead",
        Cancelled => "cancelled",
        Waiting => "waiting",
    }
);

sql_enum!(
    /// `leaseq.attempt_outcome`.
    AttemptOutcome, "attempt outcome", {
        Running => "running",
        Succeeded => "succeeded",
        Failed => "failed",
        LeaseExpired => "lease_expired",
        Cancelled => "cancelled",
        Snoozed => "snoozed",
        HandedBack => "handed_back",
    }
);

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

    /// `queue_job(job_id)`: the whole job. The server refuses an unknown id (SQLSTATE 42704).
    pub async fn job(&self, job_id: i64) -> Result<JobDetail, Error> {
        let r = self.raw().query_one(JOB, &[&job_id]).await?;
        Ok(JobDetail {
            id: r.try_get("job_id")?,
            queue: r.try_get("queue")?,
            status: r.try_get("status")?,
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
        })
    }

    /// `queue_attempts(job_id)`: the job's attempts, oldest first.
    /// What the job returned when it succeeded; none until then.
    pub async fn result(&self, job_id: i64) -> Result<Option<Box<RawValue>>, Error> {
        let row = self.raw().query_one(RESULT, &[&job_id]).await?;
        json_or_null(&row, "result")
    }

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

/// A nullable `jsonb` column as its document's text.
fn json_or_null(row: &Row, column: &str) -> Result<Option<Box<RawValue>>, Error> {
    Ok(row
        .try_get::<_, Option<Json<Box<RawValue>>>>(column)?
        .map(|json| json.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio_postgres::types::{FromSql, Type};

    #[test]
    fn labels_round_trip() {
        for status in JobStatus::ALL {
            assert_eq!(status.label().parse::<JobStatus>(), Ok(*status));
        }
        for outcome in AttemptOutcome::ALL {
            assert_eq!(outcome.label().parse::<AttemptOutcome>(), Ok(*outcome));
        }
    }

    #[test]
    fn unknown_label_is_a_decoding_error() {
        assert!(JobStatus::from_sql(&Type::TEXT, b"paused").is_err());
        assert_eq!(
            JobStatus::from_sql(&Type::TEXT, b"dead").unwrap(),
            JobStatus::Dead
        );
        assert_eq!(
            "lost".parse::<AttemptOutcome>(),
            Err(
                "unknown attempt outcome \"lost\": expected one of running, succeeded, failed, \
                 lease_expired, cancelled, snoozed, handed_back"
                    .into()
            )
        );
    }
}
