//! `/queues/{name}`: a queue's settings (`queue_settings()`), its numbers and last hour, pause or
//! resume, and the edit form; `/queues/new`, the same form empty. `queue_create` replaces every
//! setting, so the edit form is prefilled with all of them and sends all of them back.
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use chrono::{DateTime, Utc};
use maud::{Markup, html};

use super::Privileges;
use super::overview::{overview_rows, throughput};
use crate::ui::app::{App, UiError};
use crate::ui::auth::Session;
use crate::ui::chart;
use crate::ui::layout::{self, Nav};

const SETTINGS: &str = "SELECT queue, lease::text, max_attempts, backoff_base::text,
                               backoff_cap::text, retain::text, max_snoozes, group_concurrency,
                               paused, created_at, updated_at
                          FROM leaseq.queue_settings()
                         WHERE queue OPERATOR(pg_catalog.=) $1";

/// The settings form's fields: (name, label, hint). Blank takes the extension's default.
pub const SETTING_FIELDS: &[(&str, &str, &str)] = &[
    ("lease", "Lease", "an interval, e.g. 30 seconds"),
    ("max_attempts", "Max attempts", "an integer"),
    ("backoff_base", "Backoff base", "an interval"),
    ("backoff_cap", "Backoff cap", "an interval"),
    (
        "retain",
        "Retain finished jobs",
        "an interval; blank: until purged",
    ),
    ("max_snoozes", "Max snoozes", "an integer; blank: unlimited"),
    ("group_concurrency", "Group concurrency", "an integer"),
];

pub async fn show(
    State(app): State<App>,
    session: Session,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Result<Response, UiError> {
    let db = app.begin(&headers).await?;
    let privileges = Privileges::load(&db).await?;
    let rows = db.query(SETTINGS, &[&name]).await?;
    let Some(row) = rows.first() else {
        return Err(UiError::NotFound(format!(
            "no queue {name:?} that this role may observe"
        )));
    };
    let numbers = overview_rows(&db)
        .await?
        .into_iter()
        .find(|q| q.queue == name);
    let minutes = throughput(&db, Some(&name)).await?;
    db.commit().await?;
    let text = |i: usize| -> Result<String, UiError> {
        Ok(row.try_get::<_, Option<String>>(i)?.unwrap_or_default())
    };
    let int = |i: usize| -> Result<String, UiError> {
        Ok(row
            .try_get::<_, Option<i32>>(i)?
            .map(|v| v.to_string())
            .unwrap_or_default())
    };
    let values = [
        text(1)?,
        int(2)?,
        text(3)?,
        text(4)?,
        text(5)?,
        int(6)?,
        int(7)?,
    ];
    let paused: bool = row.try_get(8)?;
    let created: DateTime<Utc> = row.try_get(9)?;
    let updated: DateTime<Utc> = row.try_get(10)?;
    let admin = privileges.admin(&name);
    let body = html! {
        p data-testid="queue-state" data-paused=(paused) {
            @if paused { span.badge.paused { "paused" } " — claims return no jobs; enqueues still commit" }
            @else { "active" }
            " · created " (layout::time(Some(created))) " · updated " (layout::time(Some(updated)))
        }
        @if admin {
            p.actions {
                @if paused {
                    (layout::button(&session, &format!("/queues/{name}/resume"), "Resume", "queue-resume", "", &[]))
                } @else {
                    (layout::button(&session, &format!("/queues/{name}/pause"), "Pause", "queue-pause", "danger", &[]))
                }
            }
        }
        @if let Some(q) = numbers {
            p data-testid="queue-numbers" {
                "pending " (q.pending) " · scheduled " (q.scheduled) " · running " (q.running)
                " · expired leases " (q.expired_leases) " · waiting " (q.waiting)
                " · blocked " (q.blocked)
                " · dead " (q.dead) " · oldest pending " (layout::age(q.oldest_pending_age))
            }
        }
        (chart::throughput(&minutes, "queue-throughput-chart"))
        p {
            a href={"/jobs?queue=" (name)} { "Jobs" } " · "
            a href={"/groups?queue=" (name)} { "Groups" }
        }
        h2 { "Settings" }
        @if admin {
            (settings_form(&session, &name, &values, true))
        } @else {
            table.fields data-testid="queue-settings" {
                @for ((field, label, _), value) in SETTING_FIELDS.iter().zip(&values) {
                    tr { th { (label) } td data-testid={"setting-" (field)} { (value) } }
                }
            }
        }
    };
    Ok(layout::page(
        &session,
        &privileges,
        &format!("Queue {name}"),
        Nav::Queues,
        body,
    ))
}

pub async fn new(
    State(app): State<App>,
    session: Session,
    headers: HeaderMap,
) -> Result<Response, UiError> {
    let db = app.begin(&headers).await?;
    let privileges = Privileges::load(&db).await?;
    db.commit().await?;
    let blank = vec![String::new(); SETTING_FIELDS.len()];
    let body = html! {
        @if privileges.may_create {
            p { "Blank fields take the extension's defaults." }
            (settings_form(&session, "", &blank, false))
        } @else {
            p data-testid="not-permitted" { "This role may not create queues." }
        }
    };
    Ok(layout::page(
        &session,
        &privileges,
        "New queue",
        Nav::Queues,
        body,
    ))
}

/// POSTs to `/queues` (create, or replace every setting of an existing queue).
pub fn settings_form(session: &Session, queue: &str, values: &[String], existing: bool) -> Markup {
    html! {
        form #queue-form.stacked method="post" action="/queues" data-testid="queue-form" {
            (layout::csrf(session))
            label for="queue-name" { "Name" }
            @if existing {
                input #queue-name type="text" name="queue" value=(queue) readonly data-testid="queue-name";
            } @else {
                input #queue-name type="text" name="queue" value=(queue) required
                    placeholder="lowercase, digits, _" data-testid="queue-name";
            }
            @for ((name, label, hint), value) in SETTING_FIELDS.iter().zip(values) {
                label for={"setting-" (name)} { (label) small { " " (hint) } }
                input type="text" id={"setting-" (name)} name=(name) value=(value)
                    data-testid={"setting-" (name)};
            }
            button type="submit" data-testid="queue-save" id="queue-save" {
                @if existing { "Save settings" } @else { "Create queue" }
            }
        }
    }
}
