//! `/groups?queue=`: a queue's busy groups, busiest first (`queue_groups`): how many of each
//! group's jobs are admitted (pending or running), how many wait for room, and which waiting job
//! is admitted next.
use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::response::Response;
use maud::html;

use super::Privileges;
use crate::ui::app::{App, UiError};
use crate::ui::auth::Session;
use crate::ui::form::Form;
use crate::ui::layout::{self, Nav};

const GROUPS: &str = "SELECT group_key, admitted, waiting, oldest_waiting_id
                        FROM leaseq.queue_groups($1, 100)";

pub async fn show(
    State(app): State<App>,
    session: Session,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Result<Response, UiError> {
    let given = Form::query(query.as_deref());
    let db = app.begin(&headers).await?;
    let privileges = Privileges::load(&db).await?;
    // Without a choice, the first queue the role observes.
    let queue = given
        .text("queue")
        .or_else(|| privileges.observable().next().map(String::from));
    let rows = match &queue {
        Some(q) => db.query(GROUPS, &[q]).await?,
        None => Vec::new(),
    };
    db.commit().await?;
    let chosen = queue.clone().unwrap_or_default();
    let body = html! {
        form #groups-filter.filters method="get" action="/groups" data-testid="groups-filter" {
            label for="groups-queue" { "Queue" }
            select #groups-queue name="queue" data-testid="groups-queue" {
                @for q in privileges.observable() {
                    option value=(q) selected[q == chosen] { (q) }
                }
            }
            button type="submit" { "Show" }
        }
        table #groups data-testid="groups-table" data-queue=(chosen) {
            thead { tr {
                th { "Group" } th.num { "Admitted" } th.num { "Waiting" } th { "Next waiting job" }
            } }
            tbody {
                @for r in &rows {
                    @let key: String = r.try_get(0)?;
                    tr data-testid="group-row" data-group=(key) {
                        td { a href={"/jobs?queue=" (layout::enc(&chosen)) "&group_key=" (layout::enc(&key))} { (key) } }
                        td.num data-testid="admitted" { (r.try_get::<_, i64>(1)?) }
                        td.num data-testid="waiting" { (r.try_get::<_, i64>(2)?) }
                        td data-testid="oldest-waiting" {
                            @if let Some(id) = r.try_get::<_, Option<i64>>(3)? {
                                a href={"/jobs/" (id)} { (id) }
                            }
                        }
                    }
                }
                @if rows.is_empty() { tr { td colspan="4" { "No busy group." } } }
            }
        }
    };
    Ok(layout::page(
        &session,
        &privileges,
        "Groups",
        Nav::Groups,
        body,
    ))
}
