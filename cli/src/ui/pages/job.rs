//! `/jobs/{id}`: one job (`queue_job`) and its attempt timeline (`queue_attempts`): every claim
//! is an attempt, so a lease that expired or a snooze shows as the attempt it ended. The running
//! attempt shows its worker and its lease, and each attempt the steps it recorded
//! (`queue_step`); the job's last progress report (`queue_progress`).
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use chrono::{DateTime, Utc};
use leaseq_client::JobStatus;
use maud::html;

use super::Privileges;
use crate::ui::app::{App, UiError};
use crate::ui::auth::Session;
use crate::ui::form::parse_id;
use crate::ui::layout::{self, Nav};

const JOB: &str = "SELECT job_id, queue, status::text, priority, run_at, attempts, max_attempts,
                          worker, lease_expires_at, dedupe_key,
                          pg_catalog.jsonb_pretty(payload), pg_catalog.jsonb_pretty(result),
                          pg_catalog.jsonb_pretty(last_error), created_at, updated_at,
                          finished_at, snoozes, group_key, pg_catalog.jsonb_pretty(progress),
                          progress_at
                     FROM leaseq.queue_job($1)";
const ATTEMPTS: &str = "SELECT attempt_no, worker, started_at, ended_at, outcome::text,
                               pg_catalog.jsonb_pretty(error)
                          FROM leaseq.queue_attempts($1)
                         ORDER BY attempt_no";
/// The steps the job's attempts recorded (`queue_step`), shown under the attempt of each.
const STEPS: &str = "SELECT attempt_no, name, recorded_at FROM leaseq.queue_steps($1)";

/// What each outcome means on the timeline.
fn explain(outcome: &str) -> &'static str {
    match outcome {
        "running" => "running now",
        "succeeded" => "completed",
        "failed" => "failed",
        "lease_expired" => "lease expired: its worker stopped renewing and the job was reclaimed",
        "cancelled" => "cancelled (its worker was fenced out)",
        "snoozed" => "snoozed: the worker put the job back for later",
        "handed_back" => "handed back unstarted",
        _ => "",
    }
}

pub async fn show(
    State(app): State<App>,
    session: Session,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Result<Response, UiError> {
    let id = parse_id("job", &id)?;
    let db = app.begin(&headers).await?;
    let privileges = Privileges::load(&db).await?;
    let rows = db.query(JOB, &[&id]).await?;
    let Some(job) = rows.first() else {
        return Err(UiError::NotFound(format!("no job {id}")));
    };
    let attempts = db.query(ATTEMPTS, &[&id]).await?;
    let steps = db.query(STEPS, &[&id]).await?;
    db.commit().await?;
    let hide = app.options.hide_payloads;
    let queue: String = job.try_get(1)?;
    let status: String = job.try_get(2)?;
    let worker: Option<String> = job.try_get(7)?;
    let lease: Option<DateTime<Utc>> = job.try_get(8)?;
    let admin = privileges.admin(&queue);
    // A status newer than this console: the button is offered and the database decides.
    let cancellable = status
        .parse::<JobStatus>()
        .map_or(true, JobStatus::cancellable);
    let field = |label: &str, value: maud::Markup, testid: &str| {
        html! { tr { th { (label) } td data-testid=(testid) { (value) } } }
    };
    let text = |s: Option<String>| html! { (s.unwrap_or_default()) };
    let body = html! {
        table.fields #job data-testid="job-fields" data-job-id=(id) {
            (field("Queue", html! { a href={"/queues/" (queue)} { (queue) } }, "job-queue"))
            (field("Status", html! { span class={"status " (status)} { (status) } }, "job-status"))
            (field("Priority", html! { (job.try_get::<_, i32>(3)?) }, "job-priority"))
            (field("Run at", layout::time(Some(job.try_get(4)?)), "job-run-at"))
            (field("Attempts", html! { (job.try_get::<_, i32>(5)?) " of " (job.try_get::<_, i32>(6)?) }, "job-attempts"))
            (field("Snoozes", html! { (job.try_get::<_, i32>(16)?) }, "job-snoozes"))
            (field("Worker", text(worker.clone()), "job-worker"))
            (field("Lease until", layout::time(lease), "job-lease"))
            (field("Dedupe key", text(job.try_get(9)?), "job-dedupe-key"))
            (field("Group key", text(job.try_get(17)?), "job-group-key"))
            (field("Created", layout::time(Some(job.try_get(13)?)), "job-created"))
            (field("Updated", layout::time(Some(job.try_get(14)?)), "job-updated"))
            (field("Finished", layout::time(job.try_get(15)?), "job-finished"))
            (field("Progress reported", layout::time(job.try_get(19)?), "job-progress-at"))
        }
        @if admin {
            p.actions {
                @if status == "dead" {
                    (layout::button(&session, &format!("/jobs/{id}/redrive"), "Redrive", "job-redrive", "", &[]))
                }
                @if cancellable {
                    (layout::button(&session, &format!("/jobs/{id}/cancel"), "Cancel", "job-cancel", "danger", &[]))
                }
            }
        }
        h2 { "Payload" }
        (layout::json_block(job.try_get::<_, Option<String>>(10)?.as_deref(), hide, "job-payload"))
        h2 { "Progress" }
        (layout::json_block(job.try_get::<_, Option<String>>(18)?.as_deref(), hide, "job-progress"))
        h2 { "Result" }
        (layout::json_block(job.try_get::<_, Option<String>>(11)?.as_deref(), hide, "job-result"))
        h2 { "Last error" }
        (layout::json_block(job.try_get::<_, Option<String>>(12)?.as_deref(), hide, "job-last-error"))
        h2 { "Attempts" }
        ol.timeline #attempts data-testid="attempts" {
            @for a in &attempts {
                @let no: i32 = a.try_get(0)?;
                @let outcome: String = a.try_get(4)?;
                @let error: Option<String> = a.try_get(5)?;
                li class={"attempt " (outcome)} data-testid={"attempt-" (outcome.replace('_', "-"))}
                    data-outcome=(outcome) data-attempt=(no) id={"attempt-" (no)} {
                    strong { "#" (no) " " (outcome) }
                    " — " (explain(&outcome))
                    br;
                    "worker " code { (a.try_get::<_, Option<String>>(1)?.unwrap_or_default()) }
                    ", started " (layout::time(a.try_get(2)?))
                    ", ended " (layout::time(a.try_get(3)?))
                    @if outcome == "running" {
                        ", lease until " span data-testid="running-lease" { (layout::time(lease)) }
                    }
                    @if error.is_some() {
                        (layout::json_block(error.as_deref(), hide, "attempt-error"))
                    }
                    @let recorded: Vec<_> = steps.iter().filter(|step| step.get::<_, i32>(0) == no).collect();
                    @if !recorded.is_empty() {
                        ul.steps data-testid="attempt-steps" {
                            @for step in recorded {
                                li { "step " code { (step.try_get::<_, String>(1)?) } " recorded " (layout::time(step.try_get(2)?)) }
                            }
                        }
                    }
                }
            }
            @if attempts.is_empty() { li data-testid="no-attempts" { "Not claimed yet." } }
        }
    };
    Ok(layout::page(
        &session,
        &privileges,
        &format!("Job {id}"),
        Nav::Jobs,
        body,
    ))
}
