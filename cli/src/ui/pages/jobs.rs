//! `/jobs`: a filtered, keyset-paginated list, newest first (`queue_jobs` with `before_id` the
//! last id shown), with checkboxes for bulk redrive and cancel where the role administers.
//! Filters go to the database as given (it validates them); only the payload filter's JSON and
//! `before`'s integer are checked here.
use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::response::Response;
use chrono::{DateTime, Utc};
use maud::{Markup, html};

use super::Privileges;
use crate::ui::app::{App, UiError};
use crate::ui::auth::Session;
use crate::ui::form::Form;
use crate::ui::layout::{self, Nav};
use tokio_postgres::error::SqlState;

pub const PAGE: i32 = 50;

/// How long a page may search. `queue_jobs` walks the jobs newest first and filters what it
/// reads, so a filter that matches almost nothing reads the whole table; the console stops it
/// rather than let one search hold a connection and a snapshot for minutes.
const SEARCH_LIMIT: &str = "5s";
const LIMIT_SEARCH: &str = "SELECT pg_catalog.set_config('statement_timeout', $1, true)";
/// Whether `queue_index_payloads` made the index a payload search reads (else it walks).
const PAYLOADS_INDEXED: &str = "SELECT EXISTS (SELECT FROM pg_catalog.pg_index AS index
                                 WHERE index.indexrelid
                                       OPERATOR(pg_catalog.=) pg_catalog.to_regclass('leaseq.jobs_payload_idx')
                                   AND index.indisvalid)";

const JOBS: &str = "SELECT job_id, status::text, priority, run_at, attempts, max_attempts, worker,
                           lease_expires_at, created_at, finished_at, queue, group_key,
                           dedupe_key
                      FROM leaseq.queue_jobs(queue => $1,
                                             status => $2::text::leaseq.job_status,
                                             max_rows => $3,
                                             group_key => $4,
                                             dedupe_key => $5,
                                             worker => $6,
                                             created_after => $7::text::timestamptz,
                                             created_before => $8::text::timestamptz,
                                             payload_contains => $9::text::jsonb,
                                             before_id => $10)";

/// The filter fields, in form order: (name, label, placeholder).
pub const FILTERS: &[(&str, &str, &str)] = &[
    ("group_key", "Group key", ""),
    ("dedupe_key", "Dedupe key", ""),
    ("worker", "Worker", ""),
    ("created_after", "Created after", "2026-01-31 12:00+00"),
    ("created_before", "Created before", "2026-01-31 13:00+00"),
    ("payload", "Payload contains", "{\"customer\": 42}"),
];

struct JobRow {
    id: i64,
    status: String,
    priority: i32,
    run_at: DateTime<Utc>,
    attempts: i32,
    max_attempts: i32,
    worker: Option<String>,
    lease_expires_at: Option<DateTime<Utc>>,
    created_at: DateTime<Utc>,
    finished_at: Option<DateTime<Utc>>,
    queue: String,
    group_key: Option<String>,
}

pub async fn show(
    State(app): State<App>,
    session: Session,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Result<Response, UiError> {
    let filter = Form::query(query.as_deref());
    let payload = filter.json("payload")?;
    if payload.is_some() && app.options.hide_payloads {
        return Err(UiError::input(
            "payload",
            "filtering by payload is off: the console runs with --hide-payloads",
        ));
    }
    let before = filter.bigint("before")?;
    let text = |name| filter.text(name);
    let (queue, status) = (text("queue"), text("status"));
    let db = app.begin(&headers).await?;
    let privileges = Privileges::load(&db).await?;
    let statuses = super::statuses(&db).await?;
    db.query(LIMIT_SEARCH, &[&SEARCH_LIMIT]).await?;
    let rows = db
        .query(
            JOBS,
            &[
                &queue,
                &status,
                &(PAGE + 1),
                &text("group_key"),
                &text("dedupe_key"),
                &text("worker"),
                &text("created_after"),
                &text("created_before"),
                &payload,
                &before,
            ],
        )
        .await
        .map_err(|e| match &e {
            UiError::Db(db) if db.code() == Some(&SqlState::QUERY_CANCELED) => UiError::input(
                "filters",
                format!(
                    "the search read for {SEARCH_LIMIT} without filling a page: narrow it with a \
                     queue, a status or a time range (a payload search is fast once an admin \
                     indexes payloads: leaseq.queue_index_payloads)"
                ),
            ),
            _ => e,
        })?;
    let unindexed_payload_search = match payload {
        Some(_) => !db
            .query_one(PAYLOADS_INDEXED, &[])
            .await?
            .try_get::<_, bool>(0)?,
        None => false,
    };
    db.commit().await?;
    let mut jobs = rows
        .iter()
        .map(|r| {
            Ok(JobRow {
                id: r.try_get(0)?,
                status: r.try_get(1)?,
                priority: r.try_get(2)?,
                run_at: r.try_get(3)?,
                attempts: r.try_get(4)?,
                max_attempts: r.try_get(5)?,
                worker: r.try_get(6)?,
                lease_expires_at: r.try_get(7)?,
                created_at: r.try_get(8)?,
                finished_at: r.try_get(9)?,
                queue: r.try_get(10)?,
                group_key: r.try_get(11)?,
            })
        })
        .collect::<Result<Vec<_>, tokio_postgres::Error>>()?;
    // One row more than a page says whether an older page exists, without a count.
    let older = (jobs.len() > PAGE as usize).then(|| {
        jobs.truncate(PAGE as usize);
        jobs.last().map(|j| j.id)
    });
    let older = older.flatten().map(|id| {
        let mut next = form_urlencoded::Serializer::new(String::new());
        for (k, v) in filter.pairs() {
            if k != "before" && !v.trim().is_empty() {
                next.append_pair(k, v);
            }
        }
        next.append_pair("before", &id.to_string());
        format!("/jobs?{}", next.finish())
    });
    let selectable = |job: &JobRow| privileges.admin(&job.queue);
    let any_selectable = jobs.iter().any(selectable);
    let back = query.unwrap_or_default();
    let table = html! {
            table #jobs data-testid="jobs-table" {
                thead { tr {
                    th { @if any_selectable { "Select" } }
                    th.num { "Job" } th { "Queue" } th { "Status" } th.num { "Priority" }
                    th.num { "Attempts" } th { "Worker" } th { "Lease until" } th { "Group" }
                    th { "Run at" } th { "Created" } th { "Finished" }
                } }
                tbody {
                    @for job in &jobs {
                        tr data-testid="job-row" data-job-id=(job.id) data-status=(job.status)
                            id={"job-" (job.id)} {
                            td {
                                @if selectable(job) {
                                    input type="checkbox" name="id" value=(job.id)
                                        data-testid="job-select" id={"select-" (job.id)}
                                        aria-label={"select job " (job.id)};
                                }
                            }
                            td.num { a href={"/jobs/" (job.id)} data-testid="job-link" { (job.id) } }
                            td { (job.queue) }
                            td { span class={"status " (job.status)} data-testid="job-status" { (job.status) } }
                            td.num { (job.priority) }
                            td.num { (job.attempts) "/" (job.max_attempts) }
                            td { (job.worker.as_deref().unwrap_or("")) }
                            td { (layout::time(job.lease_expires_at)) }
                            td { (job.group_key.as_deref().unwrap_or("")) }
                            td { (layout::time(Some(job.run_at))) }
                            td { (layout::time(Some(job.created_at))) }
                            td { (layout::time(job.finished_at)) }
                        }
                    }
                    @if jobs.is_empty() {
                        tr data-testid="no-jobs" { td colspan="12" { "No job matches." } }
                    }
                }
            }
    };
    let body = html! {
        (filter_form(&filter, &privileges, &statuses, app.options.hide_payloads))
        @if any_selectable {
            form #bulk method="post" action="/jobs/bulk" data-testid="bulk-form" {
                (layout::csrf(&session))
                input type="hidden" name="back" value=(back);
                (table)
                p.actions {
                    "Selected jobs: "
                    button type="submit" name="action" value="redrive" data-testid="bulk-redrive"
                        id="bulk-redrive" { "Redrive" }
                    " "
                    button.danger type="submit" name="action" value="cancel"
                        data-testid="bulk-cancel" id="bulk-cancel" { "Cancel" }
                }
            }
        } @else {
            (table)
        }
        @if unindexed_payload_search {
            p.note data-testid="payload-unindexed" {
                "Payloads are not indexed: this search reads the jobs newest first until a page \
                 fills. An admin can index them with "
                code { "SELECT leaseq.queue_index_payloads(true)" }
                " (every enqueue, claim and finish then writes the index too)."
            }
        }
                @if let Some(href) = older {
            p { a href=(href) data-testid="older" id="older" rel="next" { "Older →" } }
        }
    };
    Ok(layout::page(&session, &privileges, "Jobs", Nav::Jobs, body))
}

fn filter_form(
    filter: &Form,
    privileges: &Privileges,
    statuses: &[String],
    hide_payloads: bool,
) -> Markup {
    let queue = filter.get("queue").unwrap_or_default();
    let status = filter.get("status").unwrap_or_default();
    html! {
        form #jobs-filter.filters method="get" action="/jobs" data-testid="jobs-filter" {
            label for="filter-queue" { "Queue" }
            select #filter-queue name="queue" data-testid="filter-queue" {
                option value="" { "all" }
                @for q in privileges.observable() {
                    option value=(q) selected[q == queue] { (q) }
                }
            }
            label for="filter-status" { "Status" }
            select #filter-status name="status" data-testid="filter-status" {
                option value="" { "any" }
                @for s in statuses {
                    option value=(s) selected[*s == status] { (s) }
                }
            }
            @for (name, label, placeholder) in FILTERS {
                @if !(hide_payloads && *name == "payload") {
                    label for={"filter-" (name)} { (label) }
                    input type="text" id={"filter-" (name)} name=(name)
                        data-testid={"filter-" (name)} placeholder=(placeholder)
                        value=(filter.get(name).unwrap_or_default());
                }
            }
            button type="submit" data-testid="filter-apply" { "Filter" }
            " "
            a href="/jobs" data-testid="filter-clear" { "Clear" }
        }
    }
}
