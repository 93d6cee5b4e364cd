//! `/schedules`: every schedule with its next tick and last job (`queue_schedules()`), the form to add one
//! (or replace one of the same name) and a remove button, where the role administers the queue.
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use maud::html;

use super::Privileges;
use crate::ui::app::{App, UiError};
use crate::ui::auth::Session;
use crate::ui::layout::{self, Nav};

const SCHEDULES: &str = "SELECT name, queue, every, timezone, catch_up, payload::text, next_at,
                                last_job_id
                           FROM leaseq.queue_schedules()
                          ORDER BY name";

pub async fn show(
    State(app): State<App>,
    session: Session,
    headers: HeaderMap,
) -> Result<Response, UiError> {
    let db = app.begin(&headers).await?;
    let privileges = Privileges::load(&db).await?;
    let rows = db.query(SCHEDULES, &[]).await?;
    db.commit().await?;
    let hide = app.options.hide_payloads;
    let body = html! {
        table #schedules data-testid="schedules-table" {
            thead { tr {
                th { "Name" } th { "Queue" } th { "Every" } th { "Time zone" } th { "Catch up" }
                th { "Payload" } th { "Next tick" } th { "Last job" } th {}
            } }
            tbody {
                @for r in &rows {
                    @let name: String = r.try_get(0)?;
                    @let queue: String = r.try_get(1)?;
                    tr data-testid="schedule-row" data-schedule=(name) {
                        td { (name) }
                        td { a href={"/queues/" (queue)} { (queue) } }
                        td { code { (r.try_get::<_, String>(2)?) } }
                        td { (r.try_get::<_, String>(3)?) }
                        td { (if r.try_get::<_, bool>(4)? { "yes" } else { "no" }) }
                        td data-testid="schedule-payload" {
                            @if hide { span.masked { "hidden" } }
                            @else { code { (r.try_get::<_, String>(5)?) } }
                        }
                        td data-testid="schedule-next" { (layout::time(r.try_get(6)?)) }
                        td data-testid="schedule-last-job" {
                            @match r.try_get::<_, Option<i64>>(7)? {
                                Some(id) => a href={"/jobs/" (id)} { "#" (id) },
                                None => span.none { "none yet" },
                            }
                        }
                        td {
                            @if privileges.admin(&queue) {
                                (layout::button(&session, &format!("/schedules/{}/delete", layout::enc(&name)),
                                    "Remove", "schedule-delete", "danger", &[]))
                            }
                        }
                    }
                }
                @if rows.is_empty() { tr { td colspan="9" { "No schedules." } } }
            }
        }
        @if privileges.any_admin() {
            h2 { "Add a schedule" }
            form #schedule-form.stacked method="post" action="/schedules" data-testid="schedule-form" {
                (layout::csrf(&session))
                label for="schedule-name" { "Name" small { " replaces a schedule of the same name" } }
                input #schedule-name type="text" name="name" required data-testid="schedule-name";
                label for="schedule-queue" { "Queue" }
                select #schedule-queue name="queue" data-testid="schedule-queue" {
                    @for q in privileges.administrable() { option value=(q) { (q) } }
                }
                label for="schedule-every" { "Every" small { " minute hour day-of-month month day-of-week" } }
                input #schedule-every type="text" name="every" required placeholder="*/5 * * * *"
                    data-testid="schedule-every";
                label for="schedule-payload" { "Payload (JSON)" }
                textarea #schedule-payload name="payload" rows="4" data-json
                    data-testid="schedule-payload" { "{}" }
                label for="schedule-timezone" { "Time zone" }
                input #schedule-timezone type="text" name="timezone" value="UTC"
                    data-testid="schedule-timezone";
                label.check {
                    input type="checkbox" name="catch_up" value="true" data-testid="schedule-catch-up";
                    " Catch up: after downtime, enqueue every missed tick"
                }
                button type="submit" data-testid="schedule-submit" id="schedule-submit" { "Add schedule" }
            }
        }
    };
    Ok(layout::page(
        &session,
        &privileges,
        "Schedules",
        Nav::Schedules,
        body,
    ))
}
