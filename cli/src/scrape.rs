//! `leaseq metrics --listen ADDR`: `leaseq.metrics()` served over HTTP for Prometheus.
//!
//! - The listen rule, the console's: loopback only, unless `--auth` (a bearer token, or basic
//!   credentials) guards the endpoint — what it serves names every queue, its backlog and the
//!   server's xmin horizon. `--auth` is checked as the console checks it, throttled per peer.
//! - A scrape runs the function on one kept connection, made again after it breaks, and its text
//!   is kept `FRESH_FOR`: more hits than Prometheus makes cost the database nothing more.
//! - A scrape the database cannot answer is a `503` with a fixed text, so that Prometheus marks
//!   the target down; why (the server, database and role tried, the server's message) goes to
//!   the exporter's stderr, not to whoever asked. The next scrape tries again.
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::sync::Mutex;

use leaseq_client::{Client, connect_target, describe};

use crate::credentials::Auth;

/// The exposition format's content type.
const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";
/// How long one scrape's text is served again: well under any scrape interval Prometheus is
/// given (15 s by default, 5 s rarely less), so a scraper never sees the same sample twice, while
/// a flood of requests runs the count once per 5 s.
const FRESH_FOR: Duration = Duration::from_secs(5);
const UNAVAILABLE: &str =
    "leaseq metrics: the database did not answer; the exporter's log says why\n";

struct Database {
    url: String,
    auth: Option<Auth>,
    scraped: Mutex<Scraped>,
}

/// The kept connection, and the last scrape's text with when it was taken.
#[derive(Default)]
struct Scraped {
    client: Option<Client>,
    last: Option<(Instant, String)>,
}

/// The listen rule: another host may reach the metrics only with `--auth`.
pub fn check_listen(address: SocketAddr, auth: Option<&Auth>) -> Result<(), String> {
    if address.ip().is_loopback() || auth.is_some() {
        return Ok(());
    }
    Err(format!(
        "refusing to serve metrics on {address} without --auth: they name every queue, its \
         backlog and the server's oldest snapshot. Pass --auth bearer:TOKEN (or set \
         LEASEQ_METRICS_AUTH; Prometheus sends it with `authorization: {{credentials: …}}`), or \
         listen on a loopback address such as 127.0.0.1:9187"
    ))
}

/// Serves until SIGINT or SIGTERM; over HTTPS with `tls` (`--tls-cert`, `--tls-key`). The address
/// is checked first (`check_listen`).
pub async fn serve(
    url: &str,
    address: SocketAddr,
    auth: Option<Auth>,
    tls: Option<Arc<rustls::ServerConfig>>,
) -> Result<(), Box<dyn std::error::Error>> {
    check_listen(address, auth.as_ref())?;
    let database = Arc::new(Database {
        url: url.to_string(),
        auth,
        scraped: Mutex::default(),
    });
    let app = Router::new()
        .route("/metrics", get(metrics))
        .layer(middleware::from_fn_with_state(
            database.clone(),
            require_auth,
        ))
        .with_state(database);
    let listener = tokio::net::TcpListener::bind(address).await?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    eprintln!(
        "leaseq: serving metrics on {scheme}://{}/metrics",
        listener.local_addr()?
    );
    crate::https::serve(listener, app, tls).await?;
    Ok(())
}

async fn require_auth(
    State(database): State<Arc<Database>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
    next: Next,
) -> Response {
    match &database.auth {
        Some(auth) => match auth.check(peer.ip(), request.headers(), "leaseq metrics") {
            Ok(()) => next.run(request).await,
            Err(refusal) => *refusal,
        },
        None => next.run(request).await,
    }
}

async fn metrics(State(database): State<Arc<Database>>) -> Response {
    // Held across the scrape: requests meanwhile wait for its text rather than run their own.
    let mut scraped = database.scraped.lock().await;
    let Scraped { client, last } = &mut *scraped;
    if let Some((at, text)) = last.as_ref()
        && at.elapsed() < FRESH_FOR
    {
        return ([(header::CONTENT_TYPE, TEXT_FORMAT)], text.clone()).into_response();
    }
    if client.as_ref().is_none_or(Client::is_closed) {
        match Client::connect(&database.url).await {
            Ok(connected) => *client = Some(connected),
            Err(e) => {
                let target = connect_target(&database.url);
                return unavailable(&format!("cannot connect to {target}: {}", describe(&e)));
            }
        }
    }
    let connected = client.as_ref().expect("connected above");
    match connected.metrics().await {
        Ok(text) => {
            *last = Some((Instant::now(), text.clone()));
            ([(header::CONTENT_TYPE, TEXT_FORMAT)], text).into_response()
        }
        Err(e) => unavailable(&describe(&e)),
    }
}

fn unavailable(said: &str) -> Response {
    eprintln!("leaseq: a scrape failed: {said}");
    (StatusCode::SERVICE_UNAVAILABLE, UNAVAILABLE).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_serves_metrics_without_auth() {
        let bearer: Auth = "bearer:t".parse().unwrap();
        assert!(check_listen("127.0.0.1:9187".parse().unwrap(), None).is_ok());
        assert!(check_listen("[::1]:9187".parse().unwrap(), None).is_ok());
        assert!(check_listen("0.0.0.0:9187".parse().unwrap(), None).is_err());
        assert!(check_listen("10.1.2.3:9187".parse().unwrap(), None).is_err());
        assert!(check_listen("0.0.0.0:9187".parse().unwrap(), Some(&bearer)).is_ok());
    }
}
