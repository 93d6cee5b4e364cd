//! `leaseq metrics --listen ADDR`: `leaseq.metrics()` served over HTTP for Prometheus.
//!
//! Each scrape of `/metrics` runs the function once on one kept connection, made again after it
//! breaks. A scrape the database cannot answer is a `503` with the server's message, so that
//! Prometheus marks the target down and says why, and the next scrape tries again.
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::serve::ListenerExt;
use tokio::sync::Mutex;

use leaseq_client::{Client, connect_target, describe};

/// The exposition format's content type.
const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

struct Database {
    url: String,
    client: Mutex<Option<Client>>,
}

/// Serves until SIGINT or SIGTERM; over HTTPS with `tls` (`--tls-cert`, `--tls-key`).
pub async fn serve(
    url: &str,
    address: SocketAddr,
    tls: Option<Arc<rustls::ServerConfig>>,
) -> Result<(), Box<dyn std::error::Error>> {
    let database = Arc::new(Database {
        url: url.to_string(),
        client: Mutex::new(None),
    });
    let app = Router::new()
        .route("/metrics", get(metrics))
        .with_state(database);
    let listener = tokio::net::TcpListener::bind(address).await?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    eprintln!(
        "leaseq: serving metrics on {scheme}://{}/metrics",
        listener.local_addr()?
    );
    match tls {
        None => {
            axum::serve(listener, app)
                .with_graceful_shutdown(stopped())
                .await?
        }
        Some(config) => {
            let listener = crate::https::TlsListener::new(listener, config);
            axum::serve(listener.tap_io(crate::https::no_delay), app)
                .with_graceful_shutdown(stopped())
                .await?
        }
    }
    Ok(())
}

async fn metrics(State(database): State<Arc<Database>>) -> Response {
    let mut client = database.client.lock().await;
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
        Ok(text) => ([(header::CONTENT_TYPE, TEXT_FORMAT)], text).into_response(),
        Err(e) => unavailable(&describe(&e)),
    }
}

fn unavailable(said: &str) -> Response {
    eprintln!("leaseq: a scrape failed: {said}");
    (StatusCode::SERVICE_UNAVAILABLE, format!("{said}\n")).into_response()
}

async fn stopped() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("a SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
