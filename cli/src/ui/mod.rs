//! `leaseq ui`: the admin console, served by the `leaseq` binary itself. Every page is rendered
//! on the server (maud), every asset is compiled in, and every number and every action is a call
//! of one of the extension's functions, made as the console's database role (or the operator's,
//! with `--role-header`): the database decides what each role may see and do, and the pages only
//! follow what `queue_privileges()` says.
//!
//! - `app`: the ground every other module stands on: the options, the state every request
//!   shares, `UiError` and its SQLSTATE → HTTP status.
//! - `auth`: the listen and host rules, `--auth`, CSRF, the same-origin check, the role header,
//!   the hardening headers.
//! - `db`: the pool, the per-request transaction.
//! - `form`: query strings and form bodies; the only (parse-level) input checks.
//! - `layout`: the page frame, flash and error boxes (a `UiError`'s page), confirmation page,
//!   assets.
//! - `chart`: the server-drawn SVG throughput chart.
//! - `pages`: one module per GET page.
//! - `actions`: every POST.
//! - `events`: `/events`, server-sent events fed by LISTEN.
mod actions;
mod app;
mod auth;
mod chart;
mod db;
mod events;
mod form;
mod layout;
mod pages;

use std::time::Instant;

use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderValue, header};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};

pub use app::{AllowedHost, Options};
pub use auth::trusted_proxy;

use app::{App, Shared};

/// Serves until SIGINT or SIGTERM. The address is checked first (see `auth::check_listen`); the
/// line `leaseq ui: listening on http://ADDR/` (`https://` with `--tls-cert`) goes to stdout
/// once the socket is bound.
pub async fn serve(url: &str, options: Options) -> Result<(), Box<dyn std::error::Error>> {
    auth::check_listen(options.listen, options.auth.as_ref())?;
    auth::check_role_header(options.role_header.as_deref(), &options.trusted_proxies)?;
    let pool = db::pool(url)?;
    let (events, _) = tokio::sync::broadcast::channel(16);
    events::spawn_listener(url.to_string(), events.clone());
    let app = App::new(Shared {
        hosts: app::Hosts::new(options.listen, &options.allowed_hosts),
        options,
        pool,
        events,
    });
    let listener = tokio::net::TcpListener::bind(app.options.listen).await?;
    let address = listener.local_addr()?;
    let tls = app.options.tls.clone();
    let scheme = if tls.is_some() { "https" } else { "http" };
    println!("leaseq ui: listening on {scheme}://{address}/");
    use std::io::Write;
    std::io::stdout().flush()?;
    crate::https::serve(listener, router(app), tls).await?;
    Ok(())
}

fn router(app: App) -> Router {
    let tls = app.options.tls.is_some();
    let router = Router::new()
        .route("/", get(pages::overview::show))
        .route("/jobs", get(pages::jobs::show))
        .route("/jobs/bulk", post(actions::bulk))
        .route("/jobs/{id}", get(pages::job::show))
        .route("/jobs/{id}/redrive", post(actions::redrive))
        .route("/jobs/{id}/cancel", post(actions::cancel))
        .route("/queues", post(actions::save_queue))
        .route("/queues/new", get(pages::queues::new))
        .route("/queues/{name}", get(pages::queues::show))
        .route("/queues/{name}/pause", post(actions::pause))
        .route("/queues/{name}/resume", post(actions::resume))
        .route("/enqueue", get(pages::enqueue::show).post(actions::enqueue))
        .route(
            "/schedules",
            get(pages::schedules::show).post(actions::schedule),
        )
        .route("/schedules/{name}/delete", post(actions::unschedule))
        .route("/groups", get(pages::groups::show))
        .route("/workers", get(pages::workers::show))
        .route("/events", get(events::stream))
        .route(
            "/assets/leaseq.css",
            get(|| async { layout::asset(layout::CSS, "text/css; charset=utf-8") }),
        )
        .route(
            "/assets/leaseq.js",
            get(|| async { layout::asset(layout::JS, "text/javascript; charset=utf-8") }),
        )
        .layer(middleware::from_fn_with_state(
            app.clone(),
            auth::require_auth,
        ))
        .layer(middleware::from_fn_with_state(
            app.clone(),
            auth::require_proxy,
        ))
        .layer(middleware::from_fn_with_state(
            app.clone(),
            auth::check_host,
        ))
        .layer(middleware::from_fn(auth::harden))
        .layer(middleware::from_fn(timing));
    let router = if tls {
        router.layer(middleware::from_fn(secure_cookies))
    } else {
        router
    };
    router.with_state(app)
}

/// Over HTTPS every cookie is `Secure`: a browser then never sends the CSRF token or the flash
/// over plain HTTP (to a man in the middle answering for the console's name on port 80).
async fn secure_cookies(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    let cookies: Vec<HeaderValue> = headers
        .get_all(header::SET_COOKIE)
        .iter()
        .cloned()
        .collect();
    headers.remove(header::SET_COOKIE);
    for cookie in cookies {
        let mut secure = cookie.as_bytes().to_vec();
        secure.extend_from_slice(b"; Secure");
        headers.append(
            header::SET_COOKIE,
            HeaderValue::from_bytes(&secure).expect("a header value with an ASCII suffix"),
        );
    }
    response
}

/// `Server-Timing: db;dur=…, total;dur=…` on every response (milliseconds), the database part
/// summed by `db` over the request's calls.
async fn timing(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let (mut response, db) = db::DB_TIME
        .scope(std::cell::Cell::new(std::time::Duration::ZERO), async {
            let response = next.run(request).await;
            (response, db::DB_TIME.with(|t| t.get()))
        })
        .await;
    let value = format!(
        "db;dur={:.2}, total;dur={:.2}",
        db.as_secs_f64() * 1e3,
        started.elapsed().as_secs_f64() * 1e3
    );
    if let Ok(value) = HeaderValue::from_str(&value) {
        response.headers_mut().insert("server-timing", value);
    }
    response
}
