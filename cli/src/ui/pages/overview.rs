//! `/`: every queue the role observes, its jobs by state and its last hour, from
//! `queue_overview()` (indexes and counters) and `queue_throughput()`; never a count over the
//! finished jobs.
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use chrono::{DateTime, Utc};
use maud::html;

use super::Privileges;
use crate::ui::app::{App, UiError};
use crate::ui::auth::Session;
use crate::ui::chart::{self, Minute};
use crate::ui::db::Db;
use crate::ui::layout::{self, Nav};

const OVERVIEW: &str = "SELECT queue, paused, pending, scheduled, running, expired_leases, dead,
                               waiting, blocked, extract(epoch FROM oldest_pending_age)::float8,
                               completed_last_hour, failed_last_hour,
                               extract(epoch FROM pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) counted_at)::float8
                          FROM leaseq.queue_overview()
                         ORDER BY queue";
/// Summed over the queues when `$1` is NULL, else that queue's.
const THROUGHPUT: &str = "SELECT minute, pg_catalog.sum(completed)::bigint,
                                  pg_catalog.sum(failed)::bigint
                            FROM leaseq.queue_throughput(60)
                           WHERE $1::text IS NULL OR queue OPERATOR(pg_catalog.=) $1
                           GROUP BY minute
                           ORDER BY minute";

pub struct QueueRow {
    pub queue: String,
    pub paused: bool,
    pub pending: i64,
    pub scheduled: i64,
    pub running: i64,
    pub expired_leases: i64,
    pub dead: i64,
    pub waiting: i64,
    /// Waiting for their parents (`depends_on`).
    pub blocked: i64,
    pub oldest_pending_age: Option<f64>,
    pub completed_last_hour: i64,
    pub failed_last_hour: i64,
    /// How long ago the numbers were counted (the overview keeps them `leaseq.overview_max_age`).
    pub counted_ago: f64,
}

pub async fn overview_rows(db: &Db) -> Result<Vec<QueueRow>, UiError> {
    let rows = db.query(OVERVIEW, &[]).await?;
    rows.iter()
        .map(|r| {
            Ok(QueueRow {
                queue: r.try_get(0)?,
                paused: r.try_get(1)?,
                pending: r.try_get(2)?,
                scheduled: r.try_get(3)?,
                running: r.try_get(4)?,
                expired_leases: r.try_get(5)?,
                dead: r.try_get(6)?,
                waiting: r.try_get(7)?,
                blocked: r.try_get(8)?,
                oldest_pending_age: r.try_get(9)?,
                completed_last_hour: r.try_get(10)?,
                failed_last_hour: r.try_get(11)?,
                counted_ago: r.try_get(12)?,
            })
        })
        .collect::<Result<_, tokio_postgres::Error>>()
        .map_err(UiError::from)
}

pub async fn throughput(db: &Db, queue: Option<&str>) -> Result<Vec<Minute>, UiError> {
    let rows = db.query(THROUGHPUT, &[&queue]).await?;
    rows.iter()
        .map(|r| {
            let _: DateTime<Utc> = r.try_get(0)?;
            Ok(Minute {
                completed: r.try_get(1)?,
                failed: r.try_get(2)?,
            })
        })
        .collect::<Result<_, tokio_postgres::Error>>()
        .map_err(UiError::from)
}

pub async fn show(
    State(app): State<App>,
    session: Session,
    headers: HeaderMap,
) -> Result<Response, UiError> {
    let db = app.begin(&headers).await?;
    let privileges = Privileges::load(&db).await?;
    let queues = overview_rows(&db).await?;
    let minutes = throughput(&db, None).await?;
    db.commit().await?;
    let body = html! {
        div #live data-live="overview" {
            (chart::throughput(&minutes, "throughput-chart"))
            table #queues data-testid="queues-table" {
                thead { tr {
                    th { "Queue" } th { "State" } th.num { "Pending" } th.num { "Scheduled" }
                    th.num { "Running" } th.num { "Expired leases" } th.num { "Waiting" }
                    th.num { "Blocked" } th.num { "Dead" } th.num { "Oldest pending" }
                    th.num { "Completed/h" } th.num { "Failed/h" }
                } }
                tbody {
                    @for q in &queues {
                        tr data-testid="queue-row" data-queue=(q.queue) id={"queue-" (q.queue)} {
                            td { a href={"/queues/" (q.queue)} data-testid="queue-link" { (q.queue) } }
                            td data-testid="paused" {
                                @if q.paused { span.badge.paused { "paused" } } @else { "active" }
                            }
                            td.num data-testid="pending" {
                                a href={"/jobs?queue=" (q.queue) "&status=pending"} { (q.pending) } }
                            td.num data-testid="scheduled" { (q.scheduled) }
                            td.num data-testid="running" {
                                a href={"/jobs?queue=" (q.queue) "&status=running"} { (q.running) } }
                            td.num data-testid="expired-leases" { (q.expired_leases) }
                            td.num data-testid="waiting" {
                                a href={"/groups?queue=" (q.queue)} { (q.waiting) } }
                            td.num data-testid="blocked" {
                                a href={"/jobs?queue=" (q.queue) "&status=blocked"} { (q.blocked) } }
                            td.num data-testid="dead" {
                                a href={"/jobs?queue=" (q.queue) "&status=dead"} { (q.dead) } }
                            td.num data-testid="oldest-pending-age" { (layout::age(q.oldest_pending_age)) }
                            td.num data-testid="completed-last-hour" { (q.completed_last_hour) }
                            td.num data-testid="failed-last-hour" { (q.failed_last_hour) }
                        }
                    }
                    @if queues.is_empty() {
                        tr { td colspan="12" { "No queue this role may observe." } }
                    }
                }
            }
        }
        @if let Some(ago) = queues.iter().map(|q| q.counted_ago).reduce(f64::max) {
            p.note data-testid="counted-ago" {
                "Live jobs counted " (layout::age(Some(ago))) " ago (kept for leaseq.overview_max_age)."
            }
        }
        @if privileges.may_create {
            p { a.button href="/queues/new" data-testid="new-queue" { "New queue" } }
        }
    };
    Ok(layout::page(
        &session,
        &privileges,
        "Queues",
        Nav::Overview,
        body,
    ))
}
