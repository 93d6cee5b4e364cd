//! `GET /events`: a server-sent `change` event whenever a queue the console's role observes is
//! notified (the extension NOTIFYs `leaseq_<queue>` on enqueue and resume), at most one a second.
//! The event carries no data: a page that hears it reloads what it shows as its own role, so an
//! operator learns nothing through it that its pages would not show.
//!
//! One connection LISTENs for the whole console; the queue list is read again every 30 s so new
//! queues are heard, and the connection is made again after it breaks.
use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::Stream;
use tokio::sync::{broadcast, mpsc};

use super::App;

const OBSERVED: &str = "SELECT queue FROM leaseq.queue_privileges() WHERE observe";
const DEBOUNCE: Duration = Duration::from_secs(1);
const RELIST: Duration = Duration::from_secs(30);

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

pub async fn stream(State(app): State<App>) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let receiver = app.events.subscribe();
    let events = futures_util::stream::unfold(receiver, |mut receiver| async move {
        match receiver.recv().await {
            Ok(()) | Err(broadcast::error::RecvError::Lagged(_)) => {
                Some((Ok(Event::default().event("change").data("")), receiver))
            }
            Err(broadcast::error::RecvError::Closed) => None,
        }
    });
    Sse::new(events).keep_alive(KeepAlive::default())
}
