//! `/enqueue`: one job, with every option of `queue_enqueue`. The payload is checked as JSON as
//! it is typed (the vendored script) and again on the server.
use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::response::Response;
use maud::{Markup, html};

use super::Privileges;
use crate::ui::app::{App, UiError};
use crate::ui::auth::Session;
use crate::ui::form::Form;
use crate::ui::layout::{self, Nav};

/// The optional fields after queue and payload: (name, label, placeholder).
pub const OPTIONS: &[(&str, &str, &str)] = &[
    ("run_at", "Run at", "now; or e.g. 2026-12-01 09:00+00"),
    ("priority", "Priority", "0"),
    ("group_key", "Group key", ""),
    ("dedupe_key", "Dedupe key", ""),
    ("dedupe_for", "Dedupe for", "an interval, e.g. 1 hour"),
    ("max_attempts", "Max attempts", "the queue's"),
];

pub async fn show(
    State(app): State<App>,
    session: Session,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Result<Response, UiError> {
    let db = app.begin(&headers).await?;
    let privileges = Privileges::load(&db).await?;
    db.commit().await?;
    let given = Form::query(query.as_deref());
    let body = form(&session, &privileges, &given);
    Ok(layout::page(
        &session,
        &privileges,
        "Enqueue a job",
        Nav::Enqueue,
        body,
    ))
}

pub fn form(session: &Session, privileges: &Privileges, given: &Form) -> Markup {
    let queue = given.get("queue").unwrap_or_default();
    let on_duplicate = given.get("on_duplicate").unwrap_or("ignore");
    html! {
        @if !privileges.any_produce() {
            p data-testid="not-permitted" { "This role may not enqueue on any queue." }
        } @else {
            form #enqueue-form.stacked method="post" action="/enqueue" data-testid="enqueue-form" {
                (layout::csrf(session))
                label for="enqueue-queue" { "Queue" }
                select #enqueue-queue name="queue" data-testid="enqueue-queue" {
                    @for q in privileges.producible() {
                        option value=(q) selected[q == queue] { (q) }
                    }
                }
                label for="enqueue-payload" { "Payload (JSON)" }
                textarea #enqueue-payload name="payload" rows="8" data-json
                    data-testid="enqueue-payload" spellcheck="false" {
                    (given.get("payload").unwrap_or("{}"))
                }
                p.json-status data-testid="payload-status" aria-live="polite" {}
                @for (name, label, placeholder) in OPTIONS {
                    label for={"enqueue-" (name)} { (label) }
                    input type="text" id={"enqueue-" (name)} name=(name) placeholder=(placeholder)
                        data-testid={"enqueue-" (name)} value=(given.get(name).unwrap_or_default());
                }
                label for="enqueue-on_duplicate" { "On duplicate" }
                select #enqueue-on_duplicate name="on_duplicate" data-testid="enqueue-on_duplicate" {
                    @for mode in ["ignore", "replace"] {
                        option value=(mode) selected[mode == on_duplicate] { (mode) }
                    }
                }
                button type="submit" data-testid="enqueue-submit" id="enqueue-submit" { "Enqueue" }
            }
        }
    }
}
