//! Periodic jobs: `queue_schedule`, `queue_unschedule` and `queue_schedules` (docs/reference.md,
//! their section). Scheduling needs `leaseq_admin`; listing, `leaseq_observer`.
use chrono::{DateTime, Utc};
use serde_json::value::RawValue;
use tokio_postgres::types::{Json, ToSql};

use crate::client::{Client, Error};

const SCHEDULE: &str = "SELECT leaseq.queue_schedule($1, $2, $3, $4::text::jsonb, $5, $6)";
// With the current span's context (feature `otel`), which every tick's job carries.
const SCHEDULE_TRACED: &str = "SELECT leaseq.queue_schedule($1, $2, $3, $4::text::jsonb, $5, $6,
                                                         trace_context => $7)";
const UNSCHEDULE: &str = "SELECT leaseq.queue_unschedule($1)";
const SCHEDULES: &str = "SELECT name, queue, every, timezone, catch_up, payload, next_at,
                                  last_job_id
                           FROM leaseq.queue_schedules()";

/// A row of `queue_schedules()`.
#[derive(Clone, Debug)]
pub struct Schedule {
    pub name: String,
    pub queue: String,
    /// A five-field cron expression.
    pub every: String,
    pub timezone: String,
    /// Every missed tick is enqueued after downtime, not only the latest.
    pub catch_up: bool,
    pub payload: Box<RawValue>,
    /// The next tick not yet enqueued.
    pub next_at: DateTime<Utc>,
    /// The job its last tick enqueued; none before its first tick.
    pub last_job_id: Option<i64>,
}

impl Client {
    /// Enqueues `payload` (JSON text) into `queue` at every tick of `every` in `timezone`;
    /// replaces the schedule `name` if it exists. Returns the first tick.
    pub async fn schedule(
        &self,
        name: &str,
        queue: &str,
        every: &str,
        payload: &str,
        timezone: &str,
        catch_up: bool,
    ) -> Result<DateTime<Utc>, Error> {
        let trace = self.trace_context(None).await?;
        let (statement, params) = match trace {
            Some(_) => (SCHEDULE_TRACED, 7),
            None => (SCHEDULE, 6),
        };
        let row = self
            .raw()
            .query_one(
                statement,
                &[
                    &name as &(dyn ToSql + Sync),
                    &queue,
                    &every,
                    &payload,
                    &timezone,
                    &catch_up,
                    &trace,
                ][..params],
            )
            .await?;
        row.try_get(0)
    }

    /// Removes the schedule `name`; false when there was none.
    pub async fn unschedule(&self, name: &str) -> Result<bool, Error> {
        self.raw().query_one(UNSCHEDULE, &[&name]).await?.try_get(0)
    }

    /// Every schedule the caller may observe, by name.
    pub async fn schedules(&self) -> Result<Vec<Schedule>, Error> {
        let rows = self.raw().query(SCHEDULES, &[]).await?;
        rows.iter()
            .map(|r| {
                Ok(Schedule {
                    name: r.try_get("name")?,
                    queue: r.try_get("queue")?,
                    every: r.try_get("every")?,
                    timezone: r.try_get("timezone")?,
                    catch_up: r.try_get("catch_up")?,
                    payload: r.try_get::<_, Json<Box<RawValue>>>("payload")?.0,
                    next_at: r.try_get("next_at")?,
                    last_job_id: r.try_get("last_job_id")?,
                })
            })
            .collect()
    }
}
