//! `/workers`: who holds leases now (`queue_workers()`, from the running jobs): per worker and
//! queue, how many jobs, since when, the next lease to expire and how many already have.
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use chrono::{DateTime, Utc};
use maud::html;

use super::Privileges;
use crate::ui::app::{App, UiError};
use crate::ui::auth::Session;
use crate::ui::layout::{self, Nav};

const WORKERS: &str = "SELECT worker, queue, running, oldest_started_at, next_expiry, expired
                         FROM leaseq.queue_workers()
                        ORDER BY worker, queue";

pub async fn show(
    State(app): State<App>,
    session: Session,
    headers: HeaderMap,
) -> Result<Response, UiError> {
    let db = app.begin(&headers).await?;
    let privileges = Privileges::load(&db).await?;
    let rows = db.query(WORKERS, &[]).await?;
    db.commit().await?;
    let body = html! {
        table #workers data-testid="workers-table" {
            thead { tr {
                th { "Worker" } th { "Queue" } th.num { "Running" } th { "Oldest started" }
                th { "Next lease expiry" } th.num { "Expired leases" }
            } }
            tbody {
                @for r in &rows {
                    @let worker: Option<String> = r.try_get(0)?;
                    @let queue: String = r.try_get(1)?;
                    @let worker = worker.unwrap_or_default();
                    tr data-testid="worker-row" data-worker=(worker) data-queue=(queue) {
                        td { a href={"/jobs?status=running&worker=" (layout::enc(&worker))} { code { (worker) } } }
                        td { (queue) }
                        td.num data-testid="worker-running" { (r.try_get::<_, i64>(2)?) }
                        td { (layout::time(r.try_get::<_, Option<DateTime<Utc>>>(3)?)) }
                        td { (layout::time(r.try_get::<_, Option<DateTime<Utc>>>(4)?)) }
                        td.num data-testid="worker-expired" { (r.try_get::<_, i64>(5)?) }
                    }
                }
                @if rows.is_empty() { tr { td colspan="6" { "No worker holds a lease." } } }
            }
        }
    };
    Ok(layout::page(
        &session,
        &privileges,
        "Workers",
        Nav::Workers,
        body,
    ))
}
