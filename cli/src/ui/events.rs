//! `GET /events`: a server-sent `change` event whenever a queue the console's role observes is
//! notified (the extension NOTIFYs `leaseq_<queue>` on enqueue and resume), at most one a second.
//! The event carries no data: a page that hears it reloads what it shows as its own role, so an
//! operator learns nothing through it that its pages would not show.
//!
//! One connection LISTENs for the whole console; the queue list is read again every 30 s so new
//! queues are heard, and the connection is made again after it breaks.
//!
//! At most `MAX_SUBSCRIBERS` streams are open at once (each holds a socket and a task for as long
//! as its page is open); past that, `/events` answers 503 and a page simply goes without live
//! updates (EventSource does not retry a 503).
use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use tokio::sync::{Semaphore, broadcast, mpsc};

use super::app::App;

const OBSERVED: &str = "SELECT queue FROM leaseq.queue_privileges() WHERE observe";
const DEBOUNCE: Duration = Duration::from_secs(1);
const RELIST: Duration = Duration::from_secs(30);
/// Open pages with live updates, every operator's tabs together: a team's worth, far below
/// the file descriptors a process gets (1 024 by default).
pub const MAX_SUBSCRIBERS: usize = 64;

/// One permit per open stream, held by the stream and given back when its connection closes.
static SUBSCRIBERS: Semaphore = Semaphore::const_new(MAX_SUBSCRIBERS);

pub fn spawn_listener(url: String, events: broadcast::Sender<()>) {
    let (notified, mut heard) = mpsc::unbounded_channel::<()>();
    // Debounce: the first notification goes out at once, any more within a second as one.
    let out = events.clone();
    tokio::spawn(async move {
        while heard.recv().await.is_some() {
            let _ = out.send(());
            tokio::time::sleep(DEBOUNCE).await;
            let mut more = false;
            while heard.try_recv().is_ok() {
                more = true;
            }
            if more {
                let _ = out.send(());
            }
        }
    });
    tokio::spawn(async move {
        loop {
            if let Err(e) = listen(&url, notified.clone()).await {
                eprintln!(
                    "leaseq ui: live updates paused: {}",
                    leaseq_client::describe(&e)
                );
            }
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
    });
}

/// LISTENs until the connection breaks.
async fn listen(
    url: &str,
    notified: mpsc::UnboundedSender<()>,
) -> Result<(), tokio_postgres::Error> {
    let (client, driver) = leaseq_client::Client::connect_listening(url, move |_| {
        let _ = notified.send(());
    })
    .await?;
    let mut listening = std::collections::HashSet::new();
    loop {
        for row in client.raw().query(OBSERVED, &[]).await? {
            let queue: String = row.try_get(0)?;
            // Queue names are lowercase identifiers (the extension enforces it); `listen`
            // checks again before the name reaches SQL text.
            let valid = queue
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
            if valid && !listening.contains(&queue) {
                client.listen(&queue).await?;
                listening.insert(queue);
            }
        }
        tokio::time::sleep(RELIST).await;
        if driver.is_finished() || client.is_closed() {
            return Ok(());
        }
    }
}

pub async fn stream(State(app): State<App>) -> Response {
    let Ok(permit) = SUBSCRIBERS.try_acquire() else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, "60")],
            format!(
                "leaseq ui: {MAX_SUBSCRIBERS} pages already follow live updates; reload this one \
                 to see changes\n"
            ),
        )
            .into_response();
    };
    let receiver = app.events.subscribe();
    // The permit lives in the stream's state: dropped with it when the connection closes.
    let events =
        futures_util::stream::unfold((receiver, permit), |(mut receiver, permit)| async move {
            match receiver.recv().await {
                Ok(()) | Err(broadcast::error::RecvError::Lagged(_)) => Some((
                    Ok::<_, Infallible>(Event::default().event("change").data("")),
                    (receiver, permit),
                )),
                Err(broadcast::error::RecvError::Closed) => None,
            }
        });
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}
