//! How the `leaseq` command prints what it reads: left-aligned columns two spaces apart, `-` for
//! SQL NULL, `(none)` under an empty table's header, times in UTC.
use std::fmt;

use chrono::{DateTime, Utc};
use leaseq_client::client::QueueCounts;
use leaseq_client::{Attempt, Child, JobDetail, JobSummary, Parent, QueueGrant, Schedule, Step};

/// Rows of text under column names; `None` prints as `-`.
pub struct Table {
    columns: Vec<String>,
    rows: Vec<Vec<Option<String>>>,
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cell = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
        let widths: Vec<usize> = (0..self.columns.len())
            .map(|i| {
                self.rows
                    .iter()
                    .map(|r| cell(&r[i]).chars().count())
                    .chain([self.columns[i].chars().count()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |values: Vec<String>| {
            values
                .iter()
                .zip(&widths)
                .map(|(v, w)| format!("{v:<w$}"))
                .collect::<Vec<_>>()
                .join("  ")
                .trim_end()
                .to_string()
        };
        writeln!(f, "{}", line(self.columns.clone()))?;
        for row in &self.rows {
            writeln!(f, "{}", line(row.iter().map(cell).collect()))?;
        }
        if self.rows.is_empty() {
            writeln!(f, "(none)")?;
        }
        Ok(())
    }
}

/// `leaseq stats`: a row per queue, a column per status of `statuses` (the database's, in the
/// enum's order: a status added later gets its column without a change here), then the scheduled
/// jobs (among the pending), the expired leases (among the running) and the oldest pending age.
pub fn stats_table(statuses: &[String], queues: &[QueueCounts]) -> Table {
    let columns = [String::from("queue")]
        .into_iter()
        .chain(statuses.iter().cloned())
        .chain(names(&["scheduled", "expired_leases", "oldest_pending"]))
        .collect();
    Table {
        columns,
        rows: queues
            .iter()
            .map(|q| {
                let count = |status: &String| {
                    q.jobs
                        .iter()
                        .find(|(counted, _)| counted == status)
                        .map(|(_, jobs)| jobs.to_string())
                };
                let age = q
                    .oldest_pending_age
                    .map(|d| format!("{:.1}s", d.as_secs_f64()));
                [Some(q.queue.clone())]
                    .into_iter()
                    .chain(statuses.iter().map(count))
                    .chain([
                        Some(q.scheduled.to_string()),
                        Some(q.expired_leases.to_string()),
                        age,
                    ])
                    .collect()
            })
            .collect(),
    }
}

/// Column names as a table holds them.
fn names(columns: &[&str]) -> Vec<String> {
    columns.iter().map(|c| c.to_string()).collect()
}

/// `leaseq jobs`: a row per job, attempts as `used/allowed`.
pub fn jobs_table(jobs: &[JobSummary]) -> Table {
    Table {
        columns: names(&[
            "job_id",
            "status",
            "priority",
            "run_at",
            "attempts",
            "worker",
            "last_error",
        ]),
        rows: jobs
            .iter()
            .map(|j| {
                vec![
                    Some(j.id.to_string()),
                    Some(j.status.to_string()),
                    Some(j.priority.to_string()),
                    Some(j.run_at.format("%Y-%m-%d %H:%M:%S%.3f UTC").to_string()),
                    Some(format!("{}/{}", j.attempts, j.max_attempts)),
                    j.worker.clone(),
                    j.last_error.as_ref().map(|e| e.get().to_string()),
                ]
            })
            .collect(),
    }
}

/// `leaseq show`: the job's fields, one per line, names right-aligned.
pub fn job_fields(job: &JobDetail) -> String {
    let json = |v: &Option<Box<serde_json::value::RawValue>>| v.as_ref().map(|v| v.get().into());
    let fields: [(&str, Option<String>); 19] = [
        ("job_id", Some(job.id.to_string())),
        ("queue", Some(job.queue.clone())),
        ("status", Some(job.status.to_string())),
        ("priority", Some(job.priority.to_string())),
        ("run_at", Some(instant(&job.run_at))),
        ("attempts", Some(job.attempts.to_string())),
        ("max_attempts", Some(job.max_attempts.to_string())),
        ("snoozes", Some(job.snoozes.to_string())),
        ("worker", job.worker.clone()),
        (
            "lease_expires_at",
            job.lease_expires_at.as_ref().map(instant),
        ),
        ("dedupe_key", job.dedupe_key.clone()),
        ("group_key", job.group_key.clone()),
        ("payload", Some(job.payload.get().into())),
        ("result", json(&job.result)),
        ("last_error", json(&job.last_error)),
        ("progress", json(&job.progress)),
        ("progress_at", job.progress_at.as_ref().map(instant)),
        ("created_at", Some(instant(&job.created_at))),
        ("finished_at", job.finished_at.as_ref().map(instant)),
    ];
    fields
        .iter()
        .map(|(name, value)| format!("{name:>16}  {}\n", value.as_deref().unwrap_or("-")))
        .collect()
}

/// Under `leaseq show`: a row per attempt, times of day and the seconds it ran.
pub fn attempts_table(attempts: &[Attempt]) -> Table {
    let time_of_day = |t: &DateTime<Utc>| t.format("%H:%M:%S%.3f").to_string();
    Table {
        columns: names(&[
            "attempt_no",
            "worker",
            "outcome",
            "started",
            "ended",
            "seconds",
            "error",
        ]),
        rows: attempts
            .iter()
            .map(|a| {
                vec![
                    Some(a.attempt_no.to_string()),
                    Some(a.worker.clone()),
                    Some(a.outcome.to_string()),
                    Some(time_of_day(&a.started_at)),
                    a.ended_at.as_ref().map(time_of_day),
                    a.duration().map(seconds),
                    a.error.as_ref().map(|e| e.get().to_string()),
                ]
            })
            .collect(),
    }
}

/// The jobs a job depends on and those that depend on it, one table (empty: nothing printed).
pub fn family(parents: &[Parent], children: &[Child]) -> String {
    if parents.is_empty() && children.is_empty() {
        return String::new();
    }
    let status = |s: &Option<leaseq_client::JobStatus>| s.map(|s| s.to_string());
    let table = Table {
        columns: names(&["relation", "job", "queue", "status", "result"]),
        rows: parents
            .iter()
            .map(|p| {
                vec![
                    Some("parent".into()),
                    Some(p.id.to_string()),
                    p.queue.clone(),
                    status(&p.status),
                    p.result.as_ref().map(|r| r.get().to_string()),
                ]
            })
            .chain(children.iter().map(|c| {
                vec![
                    Some("child".into()),
                    Some(c.id.to_string()),
                    c.queue.clone(),
                    status(&c.status),
                    None,
                ]
            }))
            .collect(),
    };
    format!("\n{table}")
}

/// The steps a job's attempts recorded (empty: nothing printed).
pub fn steps_table(steps: &[Step]) -> String {
    if steps.is_empty() {
        return String::new();
    }
    let table = Table {
        columns: names(&["step", "attempt_no", "recorded", "output"]),
        rows: steps
            .iter()
            .map(|s| {
                vec![
                    Some(s.name.clone()),
                    Some(s.attempt_no.to_string()),
                    Some(s.recorded_at.format("%H:%M:%S%.3f").to_string()),
                    s.output.as_ref().map(|o| o.get().to_string()),
                ]
            })
            .collect(),
    };
    format!("\n{table}")
}

/// A duration in seconds to the millisecond, halves rounded away from zero (as PostgreSQL's
/// `round(numeric, 3)`, which 0.1.0 printed).
fn seconds(d: chrono::TimeDelta) -> String {
    let micros = d.num_microseconds().unwrap_or(i64::MAX);
    let millis = (micros.unsigned_abs() + 500) / 1000;
    let sign = if micros < 0 { "-" } else { "" };
    format!("{sign}{}.{:03}", millis / 1000, millis % 1000)
}

/// A timestamp to the microsecond, as PostgreSQL stores it.
fn instant(t: &DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S%.f UTC").to_string()
}

/// `leaseq queue grants`: one row per grant.
pub fn grants_table(grants: &[QueueGrant]) -> Table {
    Table {
        columns: names(&["queue", "role", "privilege", "granted_at"]),
        rows: grants
            .iter()
            .map(|g| {
                vec![
                    Some(g.queue.clone()),
                    Some(g.role.clone()),
                    Some(g.privilege.to_string()),
                    Some(g.granted_at.format("%Y-%m-%d %H:%M:%S").to_string()),
                ]
            })
            .collect(),
    }
}

/// `leaseq schedule ls`: one row per schedule.
pub fn schedules_table(schedules: &[Schedule]) -> Table {
    Table {
        columns: names(&[
            "name", "queue", "every", "timezone", "catch_up", "next_at", "last_job", "payload",
        ]),
        rows: schedules
            .iter()
            .map(|s| {
                vec![
                    Some(s.name.clone()),
                    Some(s.queue.clone()),
                    Some(s.every.clone()),
                    Some(s.timezone.clone()),
                    Some(s.catch_up.to_string()),
                    Some(s.next_at.format("%Y-%m-%d %H:%M:%S").to_string()),
                    s.last_job_id.map(|id| id.to_string()),
                    Some(s.payload.get().to_string()),
                ]
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leaseq_client::{AttemptOutcome, JobStatus};
    use serde_json::value::RawValue;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text).unwrap().to_utc()
    }

    fn json(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.into()).unwrap()
    }

    #[test]
    fn jobs_table_keeps_the_columns_and_marks_nulls() {
        let job = JobSummary {
            id: 42,
            status: JobStatus::Dead,
            priority: 0,
            run_at: at("2026-12-01T09:00:00.5+01:00"),
            attempts: 3,
            max_attempts: 3,
            worker: None,
            lease_expires_at: None,
            last_error: Some(json(r#"{"error": "invalid"}"#)),
            created_at: at("2026-12-01T08:00:00Z"),
            finished_at: None,
        };
        assert_eq!(
            jobs_table(&[job]).to_string(),
            "job_id  status  priority  run_at                       attempts  worker  last_error\n\
             42      dead    0         2026-12-01 08:00:00.500 UTC  3/3       -       {\"error\": \"invalid\"}\n"
        );
    }

    #[test]
    fn stats_has_a_column_per_status_the_database_lists_in_its_order() {
        // `paused` stands for a status added to the enum after this client was built.
        let statuses = names(&["pending", "blocked", "paused"]);
        let queue = QueueCounts {
            queue: "emails".into(),
            jobs: vec![
                ("pending".into(), 3),
                ("blocked".into(), 2),
                ("paused".into(), 1),
            ],
            scheduled: 1,
            expired_leases: 0,
            oldest_pending_age: Some(std::time::Duration::from_millis(1300)),
        };
        assert_eq!(
            stats_table(&statuses, &[queue]).to_string(),
            "queue   pending  blocked  paused  scheduled  expired_leases  oldest_pending\n\
             emails  3        2        1       1          0               1.3s\n"
        );
        assert_eq!(
            stats_table(&statuses, &[]).to_string(),
            "queue  pending  blocked  paused  scheduled  expired_leases  oldest_pending\n(none)\n"
        );
    }

    #[test]
    fn empty_table_says_none() {
        assert_eq!(
            attempts_table(&[]).to_string(),
            "attempt_no  worker  outcome  started  ended  seconds  error\n(none)\n"
        );
    }

    #[test]
    fn open_attempt_has_no_end_or_duration() {
        let attempts = [
            Attempt {
                attempt_no: 1,
                worker: "w1".into(),
                started_at: at("2026-12-01T09:00:00Z"),
                ended_at: Some(at("2026-12-01T09:00:01.2345Z")),
                outcome: AttemptOutcome::LeaseExpired,
                error: None,
            },
            Attempt {
                attempt_no: 2,
                worker: "w2".into(),
                started_at: at("2026-12-01T09:00:02Z"),
                ended_at: None,
                outcome: AttemptOutcome::Running,
                error: None,
            },
        ];
        assert_eq!(
            attempts_table(&attempts).to_string(),
            "attempt_no  worker  outcome        started       ended         seconds  error\n\
             1           w1      lease_expired  09:00:00.000  09:00:01.234  1.235    -\n\
             2           w2      running        09:00:02.000  -             -        -\n"
        );
    }

    #[test]
    fn job_fields_are_right_aligned_with_dashes_for_null() {
        let job = JobDetail {
            id: 7,
            queue: "emails".into(),
            status: JobStatus::Pending,
            priority: 1,
            run_at: at("2026-12-01T09:00:00.123456Z"),
            attempts: 0,
            max_attempts: 5,
            worker: None,
            lease_expires_at: None,
            dedupe_key: None,
            payload: json(r#"{"n": 12345678901234567890}"#),
            result: None,
            last_error: None,
            created_at: at("2026-12-01T09:00:00Z"),
            updated_at: at("2026-12-01T09:00:00Z"),
            finished_at: None,
            snoozes: 2,
            group_key: None,
            progress: Some(json(r#"{"done": 0.5}"#)),
            progress_at: Some(at("2026-12-01T09:00:01Z")),
        };
        let text = job_fields(&job);
        assert!(text.starts_with("          job_id  7\n           queue  emails\n"));
        assert!(text.contains("          run_at  2026-12-01 09:00:00.123456 UTC\n"));
        assert!(text.contains("         payload  {\"n\": 12345678901234567890}\n"));
        assert!(text.contains("lease_expires_at  -\n"));
        assert!(text.contains("         snoozes  2\n"));
        assert!(text.contains("        progress  {\"done\": 0.5}\n"));
        assert!(text.contains("     progress_at  2026-12-01 09:00:01 UTC\n"));
        assert!(text.ends_with("     finished_at  -\n"));
    }
}
