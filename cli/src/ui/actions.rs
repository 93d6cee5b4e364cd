//! Every POST. Each one checks the origin and the CSRF token (`auth::check_post`), asks for
//! confirmation first when it destroys or stops something (redrive, cancel, bulk, pause,
//! unschedule: the same POST again with `confirm=yes`, so it works without JavaScript), then
//! calls one function and redirects (303) with a flash message.
//!
//! None of them checks privileges: the database refuses what the role may not do (42501, shown
//! as 403), so a hidden button is never the only thing in the way.
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use chrono::{DateTime, Utc};
use tokio_postgres::types::ToSql;

use super::app::{App, UiError};
use super::auth::{self, Session};
use super::form::{Form, parse_id};
use super::layout;
use super::pages::Privileges;
use super::pages::queues::SETTING_FIELDS;

const REDRIVE: &str = "SELECT leaseq.queue_redrive($1)";
const CANCEL: &str = "SELECT leaseq.queue_cancel($1)";
const REDRIVE_BATCH: &str = "SELECT changed FROM leaseq.queue_redrive_batch($1) AS r (changed)";
const CANCEL_BATCH: &str = "SELECT changed FROM leaseq.queue_cancel_batch($1) AS r (changed)";
const PAUSE: &str = "SELECT leaseq.queue_pause($1)";
const RESUME: &str = "SELECT leaseq.queue_resume($1)";
const ENQUEUE: &str = "SELECT leaseq.queue_enqueue(queue => $1,
                                                   payload => $2::text::jsonb,
                                                   run_at => $3::text::timestamptz,
                                                   priority => $4,
                                                   dedupe_key => $5,
                                                   max_attempts => $6,
                                                   dedupe_for => $7::text::interval,
                                                   on_duplicate => $8,
                                                   group_key => $9)";
const SCHEDULE: &str = "SELECT leaseq.queue_schedule($1, $2, $3, $4::text::jsonb, $5, $6)";
const UNSCHEDULE: &str = "SELECT leaseq.queue_unschedule($1)";

/// The body, after the origin and CSRF checks.
fn checked(app: &App, headers: &HeaderMap, body: &Bytes) -> Result<Form, UiError> {
    let form = Form::parse(body);
    auth::check_post(&app.hosts, headers, &form)?;
    Ok(form)
}

/// The confirmation page of `action`, carrying the form's fields.
async fn confirm(
    app: &App,
    session: &Session,
    headers: &HeaderMap,
    action: &str,
    question: &str,
    form: &Form,
) -> Result<Response, UiError> {
    let db = app.begin(headers).await?;
    let privileges = Privileges::load(&db).await?;
    db.commit().await?;
    Ok(layout::confirm_page(
        session,
        &privileges,
        action,
        question,
        form.pairs(),
    ))
}

/// One call returning one boolean, committed.
async fn one_bool(
    app: &App,
    headers: &HeaderMap,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<bool, UiError> {
    let db = app.begin(headers).await?;
    let changed: bool = db.query_one(sql, params).await?.try_get(0)?;
    db.commit().await?;
    Ok(changed)
}

pub async fn redrive(
    State(app): State<App>,
    session: Session,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, UiError> {
    let form = checked(&app, &headers, &body)?;
    let id = parse_id("job", &id)?;
    let action = format!("/jobs/{id}/redrive");
    if !form.confirmed() {
        let question = format!("Redrive job {id}? It goes back to pending with a fresh budget.");
        return confirm(&app, &session, &headers, &action, &question, &form).await;
    }
    let message = if one_bool(&app, &headers, REDRIVE, &[&id]).await? {
        format!("job {id} is pending again")
    } else {
        format!("job {id} is not dead: nothing changed")
    };
    Ok(layout::redirect(&format!("/jobs/{id}"), &message))
}

pub async fn cancel(
    State(app): State<App>,
    session: Session,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, UiError> {
    let form = checked(&app, &headers, &body)?;
    let id = parse_id("job", &id)?;
    let action = format!("/jobs/{id}/cancel");
    if !form.confirmed() {
        let question =
            format!("Cancel job {id}? If it is running, its worker is fenced out of finishing it.");
        return confirm(&app, &session, &headers, &action, &question, &form).await;
    }
    let message = if one_bool(&app, &headers, CANCEL, &[&id]).await? {
        format!("job {id} cancelled")
    } else {
        format!("job {id} had already finished: nothing changed")
    };
    Ok(layout::redirect(&format!("/jobs/{id}"), &message))
}

pub async fn bulk(
    State(app): State<App>,
    session: Session,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, UiError> {
    let form = checked(&app, &headers, &body)?;
    let (sql, verb, done) = match form.get("action") {
        Some("redrive") => (REDRIVE_BATCH, "Redrive", "redrove"),
        Some("cancel") => (CANCEL_BATCH, "Cancel", "cancelled"),
        _ => return Err(UiError::input("action", "expected redrive or cancel")),
    };
    let ids = form
        .all("id")
        .map(|id| parse_id("id", id))
        .collect::<Result<Vec<i64>, _>>()?;
    if ids.is_empty() {
        return Err(UiError::input("id", "select at least one job"));
    }
    if !form.confirmed() {
        let list = ids
            .iter()
            .map(i64::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        let question = format!("{verb} {} job(s): {list}?", ids.len());
        return confirm(&app, &session, &headers, "/jobs/bulk", &question, &form).await;
    }
    let db = app.begin(&headers).await?;
    let rows = db.query(sql, &[&ids]).await?;
    db.commit().await?;
    let changed = rows
        .iter()
        .map(|r| r.try_get::<_, bool>(0))
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .filter(|c| *c)
        .count();
    let message = format!(
        "{done} {changed} of {} selected job(s); the others were left as they were",
        ids.len()
    );
    // `back` is the list's query string: the redirect stays on /jobs whatever it holds.
    let back: String = form
        .get("back")
        .unwrap_or_default()
        .chars()
        .filter(|c| !c.is_control())
        .collect();
    Ok(layout::redirect(&format!("/jobs?{back}"), &message))
}

pub async fn pause(
    State(app): State<App>,
    session: Session,
    headers: HeaderMap,
    Path(queue): Path<String>,
    body: Bytes,
) -> Result<Response, UiError> {
    let form = checked(&app, &headers, &body)?;
    let action = format!("/queues/{}/pause", layout::enc(&queue));
    if !form.confirmed() {
        let question = format!(
            "Pause queue {queue}? Its claims return no jobs until it is resumed; enqueues \
             still commit and running jobs finish."
        );
        return confirm(&app, &session, &headers, &action, &question, &form).await;
    }
    let message = if one_bool(&app, &headers, PAUSE, &[&queue]).await? {
        format!("queue {queue} paused")
    } else {
        format!("queue {queue} was already paused: nothing changed")
    };
    Ok(layout::redirect(
        &format!("/queues/{}", layout::enc(&queue)),
        &message,
    ))
}

pub async fn resume(
    State(app): State<App>,
    headers: HeaderMap,
    Path(queue): Path<String>,
    body: Bytes,
) -> Result<Response, UiError> {
    checked(&app, &headers, &body)?;
    let message = if one_bool(&app, &headers, RESUME, &[&queue]).await? {
        format!("queue {queue} resumed")
    } else {
        format!("queue {queue} was not paused: nothing changed")
    };
    Ok(layout::redirect(
        &format!("/queues/{}", layout::enc(&queue)),
        &message,
    ))
}

/// Create a queue or replace all its settings. Blank fields are left out of the call, so the
/// extension's defaults apply to them; the SQL names only fixed argument names, values are
/// parameters.
pub async fn save_queue(
    State(app): State<App>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, UiError> {
    let form = checked(&app, &headers, &body)?;
    let queue = form.text("queue");
    let mut ints: Vec<(usize, i32)> = Vec::new();
    let mut texts: Vec<(usize, String)> = Vec::new();
    for (i, (name, _, _)) in SETTING_FIELDS.iter().enumerate() {
        if matches!(*name, "max_attempts" | "max_snoozes" | "group_concurrency") {
            if let Some(v) = form.int(name)? {
                ints.push((i, v));
            }
        } else if let Some(v) = form.text(name) {
            texts.push((i, v));
        }
    }
    let mut sql = String::from("SELECT leaseq.queue_create(queue => $1");
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![&queue];
    let mut given: Vec<(usize, &(dyn ToSql + Sync), &str)> = ints
        .iter()
        .map(|(i, v)| (*i, v as &(dyn ToSql + Sync), ""))
        .chain(
            texts
                .iter()
                .map(|(i, v)| (*i, v as &(dyn ToSql + Sync), "::text::interval")),
        )
        .collect();
    given.sort_by_key(|(i, _, _)| *i);
    for (i, value, cast) in given {
        params.push(value);
        sql.push_str(&format!(
            ", {} => ${}{cast}",
            SETTING_FIELDS[i].0,
            params.len()
        ));
    }
    sql.push(')');
    let db = app.begin(&headers).await?;
    db.query(&sql, &params).await?;
    db.commit().await?;
    let queue = queue.unwrap_or_default();
    Ok(layout::redirect(
        &format!("/queues/{}", layout::enc(&queue)),
        &format!("queue {queue} saved"),
    ))
}

pub async fn enqueue(
    State(app): State<App>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, UiError> {
    let form = checked(&app, &headers, &body)?;
    let payload = form
        .json("payload")?
        .ok_or_else(|| UiError::input("payload", "required: a JSON document"))?;
    let priority = form.int("priority")?.unwrap_or(0);
    let max_attempts = form.int("max_attempts")?;
    let on_duplicate = form.text("on_duplicate").unwrap_or_else(|| "ignore".into());
    let text = |name: &str| form.text(name);
    let db = app.begin(&headers).await?;
    let id: i64 = db
        .query_one(
            ENQUEUE,
            &[
                &form.text("queue"),
                &payload,
                &text("run_at"),
                &priority,
                &text("dedupe_key"),
                &max_attempts,
                &text("dedupe_for"),
                &on_duplicate,
                &text("group_key"),
            ],
        )
        .await?
        .try_get(0)?;
    db.commit().await?;
    Ok(layout::redirect(
        &format!("/jobs/{id}"),
        &format!("enqueued job {id}"),
    ))
}

pub async fn schedule(
    State(app): State<App>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, UiError> {
    let form = checked(&app, &headers, &body)?;
    let payload = form
        .json("payload")?
        .ok_or_else(|| UiError::input("payload", "required: a JSON document"))?;
    let name = form.text("name");
    let timezone = form.text("timezone").unwrap_or_else(|| "UTC".into());
    let catch_up = form.get("catch_up").is_some();
    let db = app.begin(&headers).await?;
    let first: DateTime<Utc> = db
        .query_one(
            SCHEDULE,
            &[
                &name,
                &form.text("queue"),
                &form.text("every"),
                &payload,
                &timezone,
                &catch_up,
            ],
        )
        .await?
        .try_get(0)?;
    db.commit().await?;
    Ok(layout::redirect(
        "/schedules",
        &format!(
            "schedule {}: first tick {}",
            name.unwrap_or_default(),
            first.format("%Y-%m-%d %H:%M:%S UTC")
        ),
    ))
}

pub async fn unschedule(
    State(app): State<App>,
    session: Session,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Response, UiError> {
    let form = checked(&app, &headers, &body)?;
    let action = format!("/schedules/{}/delete", layout::enc(&name));
    if !form.confirmed() {
        let question = format!("Remove schedule {name}? Jobs it already enqueued stay.");
        return confirm(&app, &session, &headers, &action, &question, &form).await;
    }
    let message = if one_bool(&app, &headers, UNSCHEDULE, &[&name]).await? {
        format!("schedule {name} removed")
    } else {
        format!("no schedule {name}: nothing changed")
    };
    Ok(layout::redirect("/schedules", &message))
}
